"""Resource limits propagated from srun to its tasks (Slurm's PropagateResourceLimits,
PropagateResourceLimitsExcept and srun's ``--propagate``). Standard library only.

srun captures its *soft* limits (:func:`capture`) and sends them with the step, with the names
``--propagate`` chose (None: the cluster's choice, made by the controller from slurm.conf,
:func:`selected`). The step daemon applies them in each task's wrapper shell, which already
runs as the job's user (:func:`shell_lines`): only soft limits are set, and the kernel itself
refuses a soft limit above the hard one, so a hostile user cannot lift a limit beyond what the
node allows; a value above the node's hard limit is lowered to it first, with Slurm's error
line when the user named that limit explicitly.
"""

from __future__ import annotations

import shlex

# Slurm's propagated limits, in its order; the flag of POSIX sh's ulimit and its unit in bytes
# (dash, and bash as /bin/sh: file and core sizes in 512-byte blocks, memory in KiB)
ULIMIT: dict[str, tuple[str, int]] = {
    "CPU": ("t", 1), "FSIZE": ("f", 512), "DATA": ("d", 1024), "STACK": ("s", 1024),
    "CORE": ("c", 512), "RSS": ("m", 1024), "NPROC": ("p", 1), "NOFILE": ("n", 1),
    "MEMLOCK": ("l", 1024), "AS": ("v", 1024),
}
NAMES = tuple(ULIMIT)
UNLIMITED = (1 << 64) - 1  # RLIM_INFINITY as Slurm prints it (an unsigned 64-bit value)


def parse_list(spec: str | None) -> frozenset[str]:
    """``ALL``, ``NONE`` or a comma list of limit names (``CORE`` or ``RLIMIT_CORE``, any
    case) as a set of names; ValueError("Bad rlimit name: X") for an unknown one. An empty or
    absent value means ALL (srun's bare ``--propagate``)."""
    out: set[str] = set()
    for word in (spec or "ALL").split(","):
        name = word.strip().upper()
        name = name[len("RLIMIT_"):] if name.startswith("RLIMIT_") else name
        if name == "ALL":
            out.update(NAMES)
        elif name == "NONE":
            continue
        elif name in ULIMIT:
            out.add(name)
        else:
            raise ValueError(f"Bad rlimit name: {word.strip()}")
    return frozenset(out)


def selected(propagate: str | None, conf: str | None, conf_except: str | None) -> frozenset[str]:
    """The limits a step propagates: srun's ``--propagate`` when given, else slurm.conf's
    PropagateResourceLimits (default ALL) less PropagateResourceLimitsExcept. A bad name in
    slurm.conf propagates nothing rather than fail every step."""
    try:
        if propagate is not None:
            return parse_list(propagate)
        return parse_list(conf or "ALL") - (parse_list(conf_except) if conf_except else frozenset())
    except ValueError:
        return frozenset()


def capture() -> dict[str, int]:
    """srun's soft limits, by name (RLIM_INFINITY as :data:`UNLIMITED`)."""
    return _limits(0)


def clean(limits: object) -> dict[str, int]:
    """What a step request claims as limits, keeping only known names with integer values in
    range (anything else is dropped, never trusted)."""
    if not isinstance(limits, dict):
        return {}
    return {k: v for k, v in limits.items() if k in ULIMIT and isinstance(v, int)
            and not isinstance(v, bool) and 0 <= v <= UNLIMITED}


def node_hard() -> dict[str, int]:
    """This process's hard limits (what a task started from it inherits)."""
    return _limits(1)


def _limits(which: int) -> dict[str, int]:
    """Soft (0) or hard (1) limits of this process, by name."""
    import resource
    out = {}
    for name in NAMES:
        res = getattr(resource, f"RLIMIT_{name}", None)
        if res is not None:
            v = resource.getrlimit(res)[which]
            out[name] = UNLIMITED if v == resource.RLIM_INFINITY else v
    return out


def shell_lines(limits: dict[str, int], hard: dict[str, int], explicit: frozenset[str],
                node: str) -> str:
    """Shell commands setting the soft ``limits`` in the task's wrapper (run as the user).
    A value above the node's ``hard`` limit becomes that limit; for a name in ``explicit``
    (``--propagate=NAME``) the task's stderr gets Slurm's "Can't propagate" line. A ulimit the
    shell refuses is reported the same way, never fatal."""
    out = []
    for name, value in limits.items():
        flag, unit = ULIMIT[name]
        cap = hard.get(name, UNLIMITED)
        said = f"Can't propagate RLIMIT_{name} of {value} from submit host: "
        if value > cap:
            if name in explicit:
                out.append(f"printf '%s\\n' {shlex.quote(f'slurmstepd-{node}: error: ' + said)}"
                           "'Operation not permitted' >&2; ")
            value = cap
        arg = "unlimited" if value == UNLIMITED else str(value // unit)
        fail = (f"printf '%s\\n' {shlex.quote(f'slurmstepd-{node}: error: ' + said)}"
                "'Invalid argument' >&2" if name in explicit else ":")
        out.append(f"ulimit -S -{flag} {arg} 2>/dev/null || {fail}; ")
    return "".join(out)
