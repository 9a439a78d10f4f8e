"""CPU binding of a step's tasks: ``srun --cpu-bind`` under Slurm's task/affinity. Pure.

Pipeline: srun :func:`parse`-s the option (a bad one is refused there, with Slurm's message);
the controller resolves what a node applies with :func:`effective` (nothing without
``TaskPlugin=task/affinity``; without an option, Slurm's auto-binding to cores when the step's
CPUs on the node are exactly tasks × cpus-per-task); the step daemon turns that into one CPU
list per task with :func:`task_cpus`, sets each task's affinity around its fork, exports
:func:`env` and prints :func:`verbose_line` for ``verbose``.

Vocabulary: ``avail`` is the ordered list of host CPU ids the step may use on the node (the
job's CPUs when cores are confined, else the step daemon's own affinity). Muster allocates
CPUs, not sockets/cores/threads, so a CPU is a core: ``cores`` and ``threads`` bind task k
(local rank) to CPUs ``k*c .. k*c+c-1`` of ``avail`` (c = cpus-per-task, wrapping around when
tasks outnumber CPUs); ``sockets``/``ldoms``/``boards`` and the ``*_ldom`` forms, having no
topology to follow, bind every task to all of ``avail``; ``map_cpu``/``mask_cpu`` give task k
entry ``k mod len`` of the list, in host CPU ids, as Slurm does.

Invariant: :func:`task_cpus` returns None (no binding) or one non-empty, sorted list per task.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CpuBind", "effective", "env", "parse", "task_cpus", "to_mask", "verbose_line"]

_WHOLE = {"sockets", "ldoms", "boards", "rank_ldom", "map_ldom", "mask_ldom"}
_KINDS = {"none", "rank", "cores", "threads", "map_cpu", "mask_cpu"} | _WHOLE
_ALIASES = {"no": "none", "socket": "sockets", "core": "cores", "thread": "threads",
            "ldom": "ldoms", "board": "boards"}
_LISTED = {"map_cpu", "mask_cpu", "map_ldom", "mask_ldom"}


@dataclass(frozen=True, slots=True)
class CpuBind:
    """A parsed ``--cpu-bind``. ``kind`` None: only verbose/quiet was given (the type is
    Slurm's default). ``values``: map_cpu CPU ids or mask_cpu masks, ``*count`` expanded."""

    kind: str | None = None
    values: tuple[int, ...] = ()
    verbose: bool = False

    def __str__(self) -> str:
        parts = ["verbose" if self.verbose else "quiet"]
        if self.kind == "mask_cpu":
            parts.append("mask_cpu:" + ",".join(hex(v) for v in self.values))
        elif self.kind in _LISTED:
            parts.append(f"{self.kind}:" + ",".join(str(v) for v in self.values))
        elif self.kind:
            parts.append(self.kind)
        return ",".join(parts)


def parse(spec: str) -> CpuBind:
    """``[quiet|verbose,]TYPE`` → CpuBind; ValueError with Slurm's message when invalid.
    A list continues over commas (``map_cpu:0,2,4``); the last type given wins."""
    kind: str | None = None
    values: list[int] = []
    verbose = False
    for tok in str(spec).split(","):
        word = tok.strip().lower()
        if kind is not None and kind in _LISTED and _is_value(kind, word):
            values.extend(_values(kind, word))
            continue
        name, colon, rest = word.partition(":")
        name = _ALIASES.get(name, name)
        if name in ("q", "quiet", "v", "verbose") and not colon:
            verbose = name.startswith("v")
        elif name in _LISTED:
            if not rest:
                raise ValueError(f'missing list for "--cpu-bind={name}:<list>"')
            kind, values = name, list(_values(name, rest))
        elif name in _KINDS and not colon:
            kind, values = name, []
        else:
            raise ValueError(f'unrecognized --cpu-bind argument "{tok}"')
    return CpuBind(kind, tuple(values), verbose)


def _is_value(kind: str, word: str) -> bool:
    """Is this comma-separated token one more entry of the list being read? (No keyword is
    made of hex digits only, so a mask without 0x is told apart too.)"""
    head = word.partition("*")[0]
    head = head[2:] if head.startswith("0x") else head
    digits = "0123456789abcdef" if kind.startswith("mask") else "0123456789"
    return bool(head) and all(c in digits for c in head) or word.startswith("0x")


def _values(kind: str, word: str) -> list[int]:
    head, star, count = word.partition("*")
    if star and not (count.isdigit() and 0 < int(count) <= 4096):
        raise ValueError(f'invalid --cpu-bind list entry "{word}"')
    try:
        hexa = kind.startswith("mask") or head.startswith("0x")
        v = int(head[2:] if head.startswith("0x") else head, 16 if hexa else 10)
    except ValueError:
        raise ValueError(f'invalid --cpu-bind list entry "{word}"') from None
    if kind.startswith("mask") and v == 0:
        raise ValueError(f'invalid --cpu-bind mask "{word}" (no CPU set)')
    return [v] * (int(count) if star else 1)


def effective(spec: str | None, task_affinity: bool, step_cpus: int, ntasks: int,
              cpus_per_task: int) -> str | None:
    """What a node applies to the step's tasks (a canonical ``--cpu-bind`` string), or None
    for nothing. Without task/affinity Slurm binds nothing, whatever was asked. With it and no
    type given: ``cores`` when the step's CPUs on the node are exactly tasks × cpus-per-task
    (Slurm's auto-binding), else ``none`` (shown only when verbose)."""
    if not task_affinity:
        return None
    b = parse(spec) if spec else CpuBind()
    if b.kind is None:
        auto = "cores" if ntasks and step_cpus == ntasks * max(1, cpus_per_task) else "none"
        if auto == "none" and not b.verbose:
            return None
        b = CpuBind(auto, (), b.verbose)
    return str(b)


def task_cpus(bind: CpuBind, avail: list[int], ntasks: int,
              cpus_per_task: int) -> list[list[int]] | None:
    """One sorted CPU list per local task (index = local rank), or None: no binding."""
    if bind.kind in (None, "none") or ntasks < 1 or not avail:
        return None
    c = max(1, cpus_per_task)
    if bind.kind in ("cores", "threads"):
        return [sorted({avail[(k * c + j) % len(avail)] for j in range(c)})
                for k in range(ntasks)]
    if bind.kind == "rank":
        return [[avail[k % len(avail)]] for k in range(ntasks)]
    if bind.kind == "map_cpu":
        return [[bind.values[k % len(bind.values)]] for k in range(ntasks)]
    if bind.kind == "mask_cpu":
        return [_bits(bind.values[k % len(bind.values)]) for k in range(ntasks)]
    return [sorted(avail) for _ in range(ntasks)]  # _WHOLE: no topology to narrow it


def to_mask(cpus) -> int:
    return sum(1 << c for c in set(cpus))


def _bits(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def env(bind: CpuBind, per_task: list[list[int]] | None) -> dict[str, str]:
    """The task's SLURM_CPU_BIND* variables (spec env.md): the node's masks of every task."""
    verbose = "verbose" if bind.verbose else "quiet"
    if per_task is None:
        kind, listed = "none", ""
    elif bind.kind == "map_cpu":
        kind, listed = "map_cpu:", ",".join(str(t[0]) for t in per_task)
    else:
        kind, listed = "mask_cpu:", ",".join(f"0x{to_mask(t):X}" for t in per_task)
    return {"SLURM_CPU_BIND_VERBOSE": verbose, "SLURM_CPU_BIND_TYPE": kind,
            "SLURM_CPU_BIND_LIST": listed,
            "SLURM_CPU_BIND": f"{verbose},{kind}{listed}" if listed else f"{verbose},{kind}"}


def verbose_line(bind: CpuBind, node: str, gtid: int, ltid: int, pid: int, cpus) -> str:
    """Slurm's task/affinity report (stderr of the task): ``cpu-bind=MASK - node1, task  0  0
    [4242]: mask 0x1 set``; ``NONE`` (no " set") for an unbound task, whose mask is what it
    inherited."""
    if bind.kind in (None, "none"):
        return f"cpu-bind=NONE - {node}, task {gtid:2d} {ltid:2d} [{pid}]: mask 0x{to_mask(cpus):x}\n"
    label = "MAP " if bind.kind == "map_cpu" else "MASK"
    return (f"cpu-bind={label} - {node}, task {gtid:2d} {ltid:2d} [{pid}]: "
            f"mask 0x{to_mask(cpus):x} set\n")
