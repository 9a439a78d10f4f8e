"""sbatch's options → the Submit request of docs/records.md.

Standard library only and cheap to import (the CLI's import path); the time/memory helpers are
imported lazily where first needed.

Entry point::

    inv = parse_sbatch(argv, environ, stdin_reader, cwd, now)
    inv.request   # dict: the "Submit request" JobRequest (every key present, null = not given)
    inv.script    # str: the batch script text
    inv.env       # dict: environment to send, after the --export rules
    inv.parsable, inv.wait, inv.test_only, inv.help, inv.usage, inv.version,
    inv.verbose (count), inv.quiet, inv.warnings (stderr lines to print, already prefixed)

Errors raise ``CliExit`` (muster.cli.getopt): ``.lines`` are the stderr lines, ``.code`` the exit
status: 255 for options/values (getopt errors, ``Invalid --time specification``), 1 for script
problems and for ``fatal`` conflicts (Slurm's ``fatal()`` exits 1), 1 for dependency syntax
(``Batch job submission failed: Job dependency problem``).

Order of work (as sbatch): getopt over the command line (unknown options fail first);
``--help``/``--usage``/``--version`` return at once; the script is read and checked; then
``#SBATCH`` directives, ``SBATCH_*`` variables and the command line are applied in that order,
so later sources override earlier ones (script < env < command line).

What each option does in Muster — honoured, warned about, refused, or ignored for a stated
reason — is :mod:`muster.cli.optstatus` (rendered as docs/options.md); after parsing, the
options used are checked against it: a refused one stops sbatch, a warned one adds a
``sbatch: warning: ...`` line to ``inv.warnings``.

Stored in the request as extra keys (beyond the records.md table): ``constraint`` (-C),
``mail_type``, ``mail_user``, ``deadline`` (epoch), ``mincpus``, ``contiguous``, ``wckey``,
``clusters`` (-M) and ``licenses`` (-L), which the controller checks and honours or
refuses; ``gpu_bind`` and ``distribution`` (-m) also go to the job's environment
(``SLURM_GPU_BIND``, ``SLURM_DISTRIBUTION``) for its steps;
``uid``/``gid`` (root only, checked by the controller); the rest (``no_kill``,
``oversubscribe``, ``exclusive_mode``, ``kill_on_invalid_dep``, ``overcommit``, ``hint``,
``tres_per_task``, ``mpi``, ``propagate``, ``get_user_env``) are warned about.
"""

from __future__ import annotations

import os
from _collections_abc import Callable

from muster.cli.getopt import (
    NO_ARG,
    OPTIONAL,
    REQUIRED,
    CliExit,
    GetoptParser,
    Occurrence,
    OptSpec,
)
from muster.common.errors import InputError

__all__ = [
    "PROG",
    "SCRIPT_MAX_BYTES",
    "WRAP_HEADER",
    "SbatchInvocation",
    "parse_sbatch",
    "split_directive",
    "scan_directives",
    "check_dependency",
    "parse_signal",
    "parse_gres",
    "build_export_env",
    "SBATCH_PARSER",
]

PROG = "sbatch"
#: Largest batch script accepted (bytes). Never read more than this + 1 bytes.
SCRIPT_MAX_BYTES = 4 * 1024 * 1024
#: Exit status of value/option errors (Slurm: exit(-1)).
VALUE_ERROR_EXIT = 255
#: Exit status of script problems and of ``fatal`` conflicts (Slurm's fatal() exits 1).
SCRIPT_ERROR_EXIT = 1
FATAL_EXIT = 1
WRAP_HEADER = "#!/bin/sh\n# This script was created by sbatch --wrap.\n\n"
#: ``--priority=TOP``.
PRIORITY_TOP = 0xFFFFFFFE

_NOT_BATCH = [
    "This does not look like a batch script.  The first",
    "line must start with #! followed by the path to an interpreter.",
    "For instance: #!/bin/sh",
]


def _err(text: str, code: int = VALUE_ERROR_EXIT) -> CliExit:
    return CliExit([f"{PROG}: error: {text}"], code)


def _fatal(text: str) -> CliExit:
    return CliExit([f"{PROG}: fatal: {text}"], FATAL_EXIT)


# ------------------------------------------------------------------------------------------------
# Result
# ------------------------------------------------------------------------------------------------


class SbatchInvocation:
    """What sbatch should do: the request to send plus the client-only flags."""

    __slots__ = (
        "request",
        "script",
        "env",
        "parsable",
        "wait",
        "test_only",
        "help",
        "usage",
        "version",
        "verbose",
        "quiet",
        "warnings",
    )

    def __init__(self) -> None:
        self.request: dict[str, object] = {}
        self.script: str = ""
        self.env: dict[str, str] = {}
        self.parsable = False
        self.wait = False
        self.test_only = False
        self.help = False
        self.usage = False
        self.version = False
        self.verbose = 0
        self.quiet = False
        self.warnings: list[str] = []

    def __repr__(self) -> str:  # pragma: no cover
        return f"SbatchInvocation(request={self.request!r})"


def _empty_request() -> dict:
    return {
        # records.md "Submit request" table
        "name": None,
        "script_name": None,
        "wrap": False,
        "partition": None,
        "account": None,
        "qos": None,
        "reservation": None,
        "time_limit": None,
        "time_min": None,
        "nodes_min": None,
        "nodes_max": None,
        "ntasks": None,
        "ntasks_per_node": None,
        "cpus_per_task": None,
        "mem_per_node": None,
        "mem_per_cpu": None,
        "mem_per_gpu": None,
        "gres": [],
        "gpus": None,
        "gpus_per_task": None,
        "cpus_per_gpu": None,
        "array": None,
        "dependency": None,
        "requeue": None,
        "signal": None,
        "open_mode": None,
        "export": None,
        "hold": False,
        "begin": None,
        "nodelist": None,
        "exclude": None,
        "exclusive": False,
        "comment": None,
        "nice": None,
        "priority": None,
        "work_dir": None,
        "submit_dir": None,
        "std_out": None,
        "std_err": None,
        "std_in": None,
        "command": None,
        "argv": [],
        "submit_line": None,
        "submit_host": None,
        "umask": None,
        # extras (see module docstring)
        "constraint": None,
        "mail_type": None,
        "mail_user": None,
        "wckey": None,
        "mincpus": None,
        "contiguous": False,
        "use_min_nodes": False,
        "no_kill": False,
        "oversubscribe": False,
        "exclusive_mode": None,
        "deadline": None,
        "kill_on_invalid_dep": None,
        "uid": None,
        "gid": None,
        "overcommit": False,
        "hint": None,
        "distribution": None,
        "tres_per_task": None,
        "gpu_bind": None,
        "clusters": None,
        "mpi": None,
        "propagate": None,
        "get_user_env": None,
        "licenses": None,
        "tmp": None,
        "switches": None,
        "wait4switch": None,
    }


# ------------------------------------------------------------------------------------------------
# Build state and value handlers
# ------------------------------------------------------------------------------------------------


class _Build:
    def __init__(self) -> None:
        self.req = _empty_request()
        self.inv = SbatchInvocation()
        self.src = "cli"
        self.seq = 0
        self.chdir: str | None = None
        # memory: group ("cli" = script + command line, as Slurm counts them; "env") -> field -> MB
        self.mem: dict[str, dict[str, int]] = {"cli": {}, "env": {}}
        self.cpus_per_gpu_src: set[str] = set()
        self.cpus_per_task_src: set[str] = set()
        self.gres: list[dict[str, object]] | None = None
        self.gres_seq = -1
        self.gpn: list[dict[str, object]] | None = None
        self.gpn_seq = -1
        self.cwd = "/"
        self.now = 0
        self.wrap: str | None = None
        self.used: list[str] = []  # long names of the options applied (optstatus)
        self.prog = PROG  # srun/salloc set their name (warning prefixes)
        self.extra_env: dict[str, str] = {}  # --export-file, the container request
        self.container: dict[str, object] = {}  # --container* values (_finish_container)


Handler = Callable[[_Build, "str | None", str], None]


def _h_str(field: str) -> Handler:
    def h(b: _Build, v: str | None, name: str) -> None:
        b.req[field] = v

    return h


def _h_ignore(b: _Build, v: str | None, name: str) -> None:
    return None


def _h_container(key: str) -> Handler:
    def h(b: _Build, v: str | None, name: str) -> None:
        b.container[key] = True if v is None else v

    return h


def finish_container(b: _Build) -> None:
    """The --container* options as the request the tasks' runner reads (common.containerspec),
    put in the job's environment; a bad one is refused here, before anything is submitted.
    ``--container`` also sets Slurm's SLURM_CONTAINER."""
    if not any(v is not None for v in b.container.values()):
        return  # no --container* option: its module (json, re) is not even imported
    from muster.common import containerspec
    try:
        spec = containerspec.from_options(b.container)
    except containerspec.ContainerSpecError as exc:
        raise _err(str(exc)) from None
    if spec is not None:
        b.extra_env[containerspec.ENV] = containerspec.encode(spec)
        if "bundle" in spec:
            b.extra_env["SLURM_CONTAINER"] = spec["bundle"]


def _h_const(field: str, value: object) -> Handler:
    def h(b: _Build, v: str | None, name: str) -> None:
        b.req[field] = value

    return h


def _h_flag(attr: str) -> Handler:
    def h(b: _Build, v: str | None, name: str) -> None:
        setattr(b.inv, attr, True)

    return h


_MAX_COUNT = 1 << 31          # node/task/CPU counts beyond any cluster
_MAX_MINUTES = 366 * 24 * 60 * 100  # a century: larger limits are typos, not plans


def _int_value(v: str | None, opt: str, positive: bool = True) -> int:
    s = (v or "").strip()
    try:
        n = int(s, 10)
    except ValueError:
        n = None
    if n is None or (positive and n <= 0) or (not positive and n < 0) or n > _MAX_COUNT:
        raise _err(f'Invalid numeric value "{v}" for {opt}.')
    return n


def _h_int(field: str, opt: str, positive: bool = True) -> Handler:
    def h(b: _Build, v: str | None, name: str) -> None:
        b.req[field] = _int_value(v, opt, positive)
        if field == "cpus_per_task":
            b.cpus_per_task_src.add(_group(b))
        elif field == "cpus_per_gpu":
            b.cpus_per_gpu_src.add(_group(b))

    return h


def _group(b: _Build) -> str:
    return "env" if b.src == "env" else "cli"


def _count(s: str) -> int:
    from muster.common.units import parse_count

    return parse_count(s)


def _h_nodes(b: _Build, v: str | None, name: str) -> None:
    """``-N MIN[-MAX]`` as Slurm 22.05's commands read it: an empty MIN is 1 (``-N-3`` is
    ``1-3``), an empty MAX is -1 (always refused as below MIN), MAX 0 means no maximum, and a
    MIN of 0 with a maximum is 1. ``-N0`` alone passes: the controller refuses it ("Node count
    specification invalid"), as slurmctld does. A ``:step`` suffix is dropped."""
    s = v or ""
    lo, sep, hi = s.split(":", 1)[0].partition("-")
    nmin = _node_count(b, lo) if lo or not sep else 1
    nmax = (_node_count(b, hi) if hi else -1) if sep else None
    if nmax is not None and nmax != 0 and nmax < nmin:
        # Slurm's verify_node_count wording (src/common/proc_args.c)
        raise CliExit([f"{b.prog}: error: Maximum node count {nmax} is less than minimum "
                       f"node count {nmin}"], VALUE_ERROR_EXIT)
    if nmax == 0:
        nmax = None
    if nmin == 0 and nmax is not None:
        nmin = 1
    b.req["nodes_min"] = nmin
    b.req["nodes_max"] = nmin if nmax is None and not sep else nmax


def _node_count(b: _Build, text: str) -> int:
    """One side of ``-N``: digits with an optional k/m suffix, else Slurm's refusal."""
    try:
        n = _count(text) if text.strip() else -1
    except (InputError, ValueError):
        n = -1
    if n < 0 or n > _MAX_COUNT:
        raise CliExit([f'{b.prog}: error: "{text}" is not a valid node count'],
                      VALUE_ERROR_EXIT)
    return n


def _h_mem(field: str) -> Handler:
    def h(b: _Build, v: str | None, name: str) -> None:
        from muster.common.units import parse_mem

        opt = {"mem_per_node": "--mem", "mem_per_cpu": "--mem-per-cpu"}.get(field, "--mem-per-gpu")
        try:
            mb = parse_mem((v or "").strip())
        except (InputError, ValueError):
            raise _err(f"Invalid {opt} specification") from None
        if mb is None or mb < 0:
            raise _err(f"Invalid {opt} specification")
        b.mem[_group(b)][field] = mb

    return h


def _h_tmp(b: _Build, v: str | None, name: str) -> None:
    """``--tmp=SIZE`` (MB by default, K/M/G/T suffixes, as --mem): TmpDisk each node needs."""
    from muster.common.units import parse_mem
    try:
        mb = parse_mem((v or "").strip())
    except (InputError, ValueError):
        mb = None
    if mb is None or mb < 0:
        raise _err("Invalid --tmp specification")
    b.req["tmp"] = mb


def parse_gres(value: str) -> list[dict[str, object]]:
    """``--gres``: muster.common.gresspec.parse_gres; a malformed spec is a CliExit with
    sbatch's message and exit code."""
    from muster.common.gresspec import GresSpecError
    from muster.common.gresspec import parse_gres as parse
    try:
        return parse(value)
    except GresSpecError:
        raise _err("Invalid generic resource (gres) specification", SCRIPT_ERROR_EXIT) from None


def _typed_count(value: str | None, opt: str) -> dict[str, object]:
    """``[type:]N`` (also ``gpu:type:N``) → ``{"type", "count"}`` (gresspec.parse_typed_count)."""
    from muster.common.gresspec import GresSpecError, parse_typed_count
    try:
        return parse_typed_count(value or "")
    except GresSpecError:
        raise _err(f"Invalid {opt} specification") from None


def _h_gres(b: _Build, v: str | None, name: str) -> None:
    b.gres = parse_gres(v or "")
    b.seq += 1
    b.gres_seq = b.seq
    if not b.gres and (v or "").strip().lower() == "none":
        b.gpn = None


def _h_gpus(field: str, opt: str) -> Handler:
    def h(b: _Build, v: str | None, name: str) -> None:
        b.req[field] = _typed_count(v, opt)

    return h


def _h_gpn(b: _Build, v: str | None, name: str) -> None:
    out = []
    for item in (v or "").split(","):
        tc = _typed_count(item, "--gpus-per-node")
        out.append({"name": "gpu", "type": tc["type"], "count": tc["count"]})
    b.gpn = out
    b.seq += 1
    b.gpn_seq = b.seq


def _h_switches(b: _Build, v: str | None, name: str) -> None:
    """``--switches=N[@TIME]``: at most N leaf switches (blocks), waited for up to TIME (a
    time as ``-t`` takes it: ``M``, ``M:S``, ``H:M:S``, ``D-H[:M[:S]]``; kept in seconds)."""
    count, at, wait = (v or "").strip().partition("@")
    if not count.isdigit() or not 0 < int(count) < 1 << 31:
        raise _err("Invalid --switches specification")
    b.req["switches"] = int(count)
    if at:
        import re  # here, not at the top: `re` (and `enum`) are ~5 ms of every sbatch's start
        m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", wait.strip())
        if m is None:
            raise _err("Invalid --switches specification")
        d, a, b2, c = (int(x) if x else 0 for x in m.groups())
        if m.group(1):  # D-H[:M[:S]]
            secs = ((d * 24 + a) * 60 + b2) * 60 + c
        elif m.group(4) is not None:  # H:M:S
            secs = (a * 60 + b2) * 60 + c
        elif m.group(3) is not None:  # M:S
            secs = a * 60 + b2
        else:  # M
            secs = a * 60
        b.req["wait4switch"] = min(secs, _MAX_MINUTES * 60)


def _h_time(field: str, opt: str) -> Handler:
    def h(b: _Build, v: str | None, name: str) -> None:
        from muster.common.timefmt import parse_time_limit

        try:
            minutes = parse_time_limit((v or "").strip())
        except (InputError, ValueError):
            raise _err(f"Invalid {opt} specification") from None
        if minutes is not None and minutes > _MAX_MINUTES:
            raise _err(f"Invalid {opt} specification")
        b.req[field] = -1 if minutes is None else minutes

    return h


def _h_datetime(field: str, opt: str) -> Handler:
    def h(b: _Build, v: str | None, name: str) -> None:
        from muster.common.timefmt import parse_datetime

        try:
            b.req[field] = parse_datetime((v or "").strip(), b.now)
        except (InputError, ValueError):
            raise _err(f"Invalid {opt} specification") from None

    return h


def parse_signal(value: str) -> dict[str, object]:
    """``[{R|B}:]SIG[@SECS]`` → ``{"signal": int, "secs": int, "batch": bool}``.

    SIG: number (1–64) or name with or without ``SIG`` (case-insensitive); SECS 0–65535,
    default 60.  ``R:`` (reservation overlap) is accepted and not recorded.
    """
    import signal as _signal

    bad = _err("Invalid --signal specification")
    s = value.strip()
    batch = False
    if ":" in s:
        flags, s = s.split(":", 1)
        if not flags or any(c not in "RrBb" for c in flags):
            raise bad
        batch = "B" in flags.upper()
    sig_s, at, secs_s = s.partition("@")
    if at:
        if not secs_s.isdigit():
            raise bad
        secs = int(secs_s)
        if secs > 0xFFFF:
            raise bad
    else:
        secs = 60
    sig_s = sig_s.strip()
    if not sig_s:
        raise bad
    if sig_s.isdigit():
        signum = int(sig_s)
        if not 1 <= signum <= 64:
            raise bad
    else:
        nm = sig_s.upper()
        if not nm.startswith("SIG"):
            nm = "SIG" + nm
        if nm.startswith("SIG_"):
            raise bad
        try:
            signum = int(_signal.Signals[nm])
        except KeyError:
            raise bad from None
    return {"signal": signum, "secs": secs, "batch": batch}


def _h_signal(b: _Build, v: str | None, name: str) -> None:
    b.req["signal"] = parse_signal(v or "")


def _h_open_mode(b: _Build, v: str | None, name: str) -> None:
    s = (v or "").strip().lower()
    if s and "append".startswith(s):
        b.req["open_mode"] = "append"
    elif s and "truncate".startswith(s):
        b.req["open_mode"] = "truncate"
    else:
        raise _err(f"Invalid --open-mode specification: {v}")


def _h_exclusive(b: _Build, v: str | None, name: str) -> None:
    s = (v or "").strip().lower()
    if s in ("", "exclusive"):
        mode = None
    elif s in ("user", "mcs", "topo"):
        mode = s
        b.inv.warnings.append(f"{b.prog}: warning: --exclusive={s} is not supported by Muster: "
                              "the job gets whole nodes")
    else:
        raise _err(f"Invalid --exclusive specification: {v}")
    b.req["exclusive"] = True
    b.req["oversubscribe"] = False
    b.req["exclusive_mode"] = mode


def _h_oversubscribe(b: _Build, v: str | None, name: str) -> None:
    b.req["oversubscribe"] = True
    b.req["exclusive"] = False
    b.req["exclusive_mode"] = None


def _h_nodelist(field: str, opt: str) -> Handler:
    def h(b: _Build, v: str | None, name: str) -> None:
        s = (v or "").strip()
        if "/" in s:
            path = s if os.path.isabs(s) else os.path.join(b.cwd, s)
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read(1024 * 1024)
            except OSError:
                raise _err(f"Unable to open file {s}") from None
            names = [w for w in text.split() if w]
            if not names:
                raise _err(f"Invalid {opt} specification: file {s} lists no nodes")
            s = ",".join(names)
        if not s:
            raise _err(f"Invalid {opt} specification")
        b.req[field] = s

    return h


def _read_user_file(path: str, cwd: str) -> str:
    full = path if os.path.isabs(path) else os.path.join(cwd, path)
    try:
        with open(full, encoding="utf-8", errors="replace") as f:
            return f.read(1024 * 1024)
    except OSError:
        raise _err(f"Unable to open file {path}") from None


def _h_nodefile(b: _Build, v: str | None, name: str) -> None:
    """-F/--nodefile: the node names listed in the file, as --nodelist."""
    names = _read_user_file((v or "").strip(), b.cwd).split()
    if not names:
        raise _err(f"Invalid --nodefile specification: file {v} lists no nodes")
    b.req["nodelist"] = ",".join(names)


def _h_export_file(b: _Build, v: str | None, name: str) -> None:
    """--export-file: ``NAME=value`` entries, NUL-separated or one per line, added to the
    environment the job gets."""
    text = _read_user_file((v or "").strip(), b.cwd)
    for item in text.split("\0") if "\0" in text else text.splitlines():
        key, eq, value = item.partition("=")
        key = key.strip()
        if not key or not eq:
            continue
        if not (key.replace("_", "a").isalnum() and key.isascii() and not key[0].isdigit()):
            raise _err(f"Invalid --export-file entry: {item[:64]}")
        b.extra_env[key] = value


def _h_gpu_bind(b: _Build, v: str | None, name: str) -> None:
    from muster.core.steplayout import StepError, parse_gpu_bind
    try:
        parse_gpu_bind(v or "")
    except StepError as exc:
        raise _err(exc.message) from None
    b.req["gpu_bind"] = (v or "").strip() or None


def _h_mail_type(b: _Build, v: str | None, name: str) -> None:
    from muster.common.mailtypes import MailTypeError, parse_mail_type
    try:
        b.req["mail_type"] = parse_mail_type(v or "")
    except MailTypeError as exc:
        raise _err(str(exc)) from None


def _h_mail_user(b: _Build, v: str | None, name: str) -> None:
    from muster.common.mailtypes import MailTypeError, check_mail_user
    try:
        b.req["mail_user"] = check_mail_user(v or "")
    except MailTypeError as exc:
        raise _err(str(exc)) from None


def _h_nice(b: _Build, v: str | None, name: str) -> None:
    if v is None:
        b.req["nice"] = 100
        return
    try:
        n = int(v.strip(), 10)
    except ValueError:
        raise _err(f'Invalid numeric value "{v}" for --nice.') from None
    if abs(n) > 2147483645:  # Slurm 22.05 slurm_opt.c arg_set_nice, exit(-1)
        raise _err("Invalid --nice value, out of range (+/- 2147483645)")
    b.req["nice"] = n


def _h_priority(b: _Build, v: str | None, name: str) -> None:
    s = (v or "").strip()
    if s.upper() == "TOP":
        b.req["priority"] = PRIORITY_TOP
        return
    b.req["priority"] = _int_value(s, "--priority", positive=False)


def _h_yes_no(field: str, opt: str) -> Handler:
    def h(b: _Build, v: str | None, name: str) -> None:
        s = (v or "").strip().lower()
        if s in ("yes", "y", "1", "true"):
            b.req[field] = True
        elif s in ("no", "n", "0", "false"):
            b.req[field] = False
        else:
            raise _err(f"Invalid {opt} specification: {v}")

    return h


def _h_no_kill(b: _Build, v: str | None, name: str) -> None:
    b.req["no_kill"] = (v or "").strip().lower() != "off"


def _h_id(field: str) -> Handler:
    """--uid/--gid: root only, as Slurm's arg_set_uid/arg_set_gid (the controller refuses
    them too); a name is resolved here so that a typo fails before anything is sent."""
    def h(b: _Build, v: str | None, name: str) -> None:
        if os.getuid() != 0:
            raise _err(f"--{field} only permitted by root user")
        s = (v or "").strip()
        if s.isascii() and s.isdigit():
            b.req[field] = int(s)
            return
        try:
            if field == "uid":
                import pwd
                b.req[field] = pwd.getpwnam(s).pw_uid
            else:
                import grp
                b.req[field] = grp.getgrnam(s).gr_gid
        except KeyError:
            raise _err(f"Invalid --{field} specification") from None

    return h


def _h_verbose(b: _Build, v: str | None, name: str) -> None:
    b.inv.verbose += 1


def _h_wrap(b: _Build, v: str | None, name: str) -> None:
    b.wrap = v or ""


def _h_chdir(b: _Build, v: str | None, name: str) -> None:
    b.chdir = v or ""


# (short, long names, argument kind, handler). Order = abbreviation tie-break order for messages.
_TABLE: list[tuple[str | None, str | tuple[str, ...], int, Handler]] = [
    ("a", "array", REQUIRED, _h_str("array")),
    ("A", "account", REQUIRED, _h_str("account")),
    ("b", "begin", REQUIRED, _h_datetime("begin", "--begin")),
    ("B", "extra-node-info", REQUIRED, _h_ignore),
    ("c", "cpus-per-task", REQUIRED, _h_int("cpus_per_task", "--cpus-per-task")),
    ("C", "constraint", REQUIRED, _h_str("constraint")),
    ("d", "dependency", REQUIRED, _h_str("dependency")),
    ("D", "chdir", REQUIRED, _h_chdir),
    ("e", "error", REQUIRED, _h_str("std_err")),
    ("F", "nodefile", REQUIRED, _h_nodefile),
    ("G", "gpus", REQUIRED, _h_gpus("gpus", "--gpus")),
    ("h", "help", NO_ARG, _h_flag("help")),
    ("H", "hold", NO_ARG, _h_const("hold", True)),
    ("i", "input", REQUIRED, _h_str("std_in")),
    ("J", "job-name", REQUIRED, _h_str("name")),
    ("k", "no-kill", OPTIONAL, _h_no_kill),
    ("L", "licenses", REQUIRED, _h_str("licenses")),
    ("m", "distribution", REQUIRED, _h_str("distribution")),
    ("M", ("clusters", "cluster"), REQUIRED, _h_str("clusters")),
    ("n", "ntasks", REQUIRED, _h_int("ntasks", "--ntasks")),
    ("N", "nodes", REQUIRED, _h_nodes),
    ("o", "output", REQUIRED, _h_str("std_out")),
    ("O", "overcommit", NO_ARG, _h_const("overcommit", True)),
    ("p", "partition", REQUIRED, _h_str("partition")),
    ("q", "qos", REQUIRED, _h_str("qos")),
    ("Q", "quiet", NO_ARG, _h_flag("quiet")),
    ("s", "oversubscribe", NO_ARG, _h_oversubscribe),
    ("S", "core-spec", REQUIRED, _h_ignore),
    ("t", "time", REQUIRED, _h_time("time_limit", "--time")),
    ("u", "usage", NO_ARG, _h_flag("usage")),
    ("v", "verbose", NO_ARG, _h_verbose),
    ("V", "version", NO_ARG, _h_flag("version")),
    ("w", "nodelist", REQUIRED, _h_nodelist("nodelist", "--nodelist")),
    ("W", "wait", NO_ARG, _h_flag("wait")),
    ("x", "exclude", REQUIRED, _h_nodelist("exclude", "--exclude")),
    (None, "acctg-freq", REQUIRED, _h_ignore),
    (None, "bb", REQUIRED, _h_ignore),
    (None, "bbf", REQUIRED, _h_ignore),
    (None, "cluster-constraint", REQUIRED, _h_ignore),
    (None, "comment", REQUIRED, _h_str("comment")),
    (None, "container", REQUIRED, _h_container("container")),
    (None, "container-image", REQUIRED, _h_container("container_image")),
    (None, "container-mounts", REQUIRED, _h_container("container_mounts")),
    (None, "container-workdir", REQUIRED, _h_container("container_workdir")),
    (None, "container-name", REQUIRED, _h_container("container_name")),
    (None, "container-writable", NO_ARG, _h_container("container_writable")),
    (None, "container-readonly", NO_ARG, _h_container("container_readonly")),
    (None, "container-env", REQUIRED, _h_container("container_env")),
    (None, "container-mount-home", NO_ARG, _h_container("container_mount_home")),
    (None, "no-container-mount-home", NO_ARG, _h_container("no_container_mount_home")),
    (None, "container-remap-root", NO_ARG, _h_container("container_remap_root")),
    (None, "no-container-remap-root", NO_ARG, _h_container("no_container_remap_root")),
    (None, "container-save", REQUIRED, _h_container("container_save")),
    (None, "contiguous", NO_ARG, _h_const("contiguous", True)),
    (None, "cores-per-socket", REQUIRED, _h_ignore),
    (None, "cpu-freq", REQUIRED, _h_ignore),
    (None, "cpus-per-gpu", REQUIRED, _h_int("cpus_per_gpu", "--cpus-per-gpu")),
    (None, "deadline", REQUIRED, _h_datetime("deadline", "--deadline")),
    (None, "delay-boot", REQUIRED, _h_ignore),
    (None, "exclusive", OPTIONAL, _h_exclusive),
    (None, "export", REQUIRED, _h_str("export")),
    (None, "export-file", REQUIRED, _h_export_file),
    (None, "get-user-env", OPTIONAL, _h_str("get_user_env")),
    (None, "gid", REQUIRED, _h_id("gid")),
    (None, "gpu-bind", REQUIRED, _h_gpu_bind),
    (None, "gpu-freq", REQUIRED, _h_ignore),
    (None, "gpus-per-node", REQUIRED, _h_gpn),
    (None, "gpus-per-socket", REQUIRED, _h_ignore),
    (None, "gpus-per-task", REQUIRED, _h_gpus("gpus_per_task", "--gpus-per-task")),
    (None, "gres", REQUIRED, _h_gres),
    (None, "gres-flags", REQUIRED, _h_ignore),
    (None, "hint", REQUIRED, _h_str("hint")),
    (None, "ignore-pbs", NO_ARG, _h_ignore),
    (None, "kill-on-invalid-dep", REQUIRED, _h_yes_no("kill_on_invalid_dep", "--kill-on-invalid-dep")),
    (None, "mail-type", REQUIRED, _h_mail_type),
    (None, "mail-user", REQUIRED, _h_mail_user),
    (None, "mcs-label", REQUIRED, _h_ignore),
    (None, "mem", REQUIRED, _h_mem("mem_per_node")),
    (None, "mem-bind", REQUIRED, _h_ignore),
    (None, "mem-per-cpu", REQUIRED, _h_mem("mem_per_cpu")),
    (None, "mem-per-gpu", REQUIRED, _h_mem("mem_per_gpu")),
    (None, "mincpus", REQUIRED, _h_int("mincpus", "--mincpus")),
    (None, "mpi", REQUIRED, _h_str("mpi")),
    (None, "network", REQUIRED, _h_ignore),
    (None, "nice", OPTIONAL, _h_nice),
    (None, "no-requeue", NO_ARG, _h_const("requeue", False)),
    (None, "ntasks-per-core", REQUIRED, _h_ignore),
    (None, "ntasks-per-gpu", REQUIRED, _h_ignore),
    (None, "ntasks-per-node", REQUIRED, _h_int("ntasks_per_node", "--ntasks-per-node")),
    (None, "ntasks-per-socket", REQUIRED, _h_ignore),
    (None, "open-mode", REQUIRED, _h_open_mode),
    (None, "parsable", NO_ARG, _h_flag("parsable")),
    (None, "power", REQUIRED, _h_ignore),
    (None, "prefer", REQUIRED, _h_ignore),
    (None, "priority", REQUIRED, _h_priority),
    (None, "profile", REQUIRED, _h_ignore),
    (None, "propagate", OPTIONAL, _h_str("propagate")),
    (None, "reboot", NO_ARG, _h_ignore),
    (None, "requeue", NO_ARG, _h_const("requeue", True)),
    (None, "reservation", REQUIRED, _h_str("reservation")),
    (None, "signal", REQUIRED, _h_signal),
    (None, "sockets-per-node", REQUIRED, _h_ignore),
    (None, "spread-job", NO_ARG, _h_ignore),
    (None, "switches", REQUIRED, _h_switches),
    (None, "test-only", NO_ARG, _h_flag("test_only")),
    (None, "thread-spec", REQUIRED, _h_ignore),
    (None, "threads-per-core", REQUIRED, _h_ignore),
    (None, "time-min", REQUIRED, _h_time("time_min", "--time-min")),
    (None, "tmp", REQUIRED, _h_tmp),
    (None, "tres-per-task", REQUIRED, _h_str("tres_per_task")),
    (None, "uid", REQUIRED, _h_id("uid")),
    (None, "use-min-nodes", NO_ARG, _h_const("use_min_nodes", True)),
    (None, "wait-all-nodes", REQUIRED, _h_ignore),
    (None, "wckey", REQUIRED, _h_str("wckey")),
    (None, "wrap", REQUIRED, _h_wrap),
]

_HANDLERS: dict[str, Handler] = {}
_SPECS: list[OptSpec] = []
for _short, _long, _arg, _handler in _TABLE:
    _spec = OptSpec(_short, _long, _arg)
    _SPECS.append(_spec)
    _HANDLERS[_spec.dest] = _handler
del _short, _long, _arg, _handler, _spec

#: The sbatch option table as a getopt parser (stops at the script name).
SBATCH_PARSER = GetoptParser(PROG, _SPECS, stop_at_positional=True)

# Options only meaningful on the command line (ignored in #SBATCH lines and the environment).
_CLI_ONLY = {"wrap", "help", "usage", "version"}

# SBATCH_* input variables (env.md §2): variable -> (long option, "value" | "flag")
_ENV_VARS: list[tuple[str, str, str]] = [
    ("SBATCH_ACCOUNT", "account", "value"),
    ("SBATCH_ARRAY_INX", "array", "value"),
    ("SBATCH_CLUSTERS", "clusters", "value"),
    ("SLURM_CLUSTERS", "clusters", "value"),
    ("SBATCH_CONSTRAINT", "constraint", "value"),
    ("SBATCH_CPUS_PER_GPU", "cpus-per-gpu", "value"),
    ("SBATCH_DISTRIBUTION", "distribution", "value"),
    ("SBATCH_ERROR", "error", "value"),
    ("SBATCH_OUTPUT", "output", "value"),
    ("SBATCH_INPUT", "input", "value"),
    ("SBATCH_EXCLUSIVE", "exclusive", "exclusive"),
    ("SBATCH_EXPORT", "export", "value"),
    ("SBATCH_GET_USER_ENV", "get-user-env", "value"),
    ("SBATCH_GPUS", "gpus", "value"),
    ("SBATCH_GPUS_PER_NODE", "gpus-per-node", "value"),
    ("SBATCH_GPUS_PER_TASK", "gpus-per-task", "value"),
    ("SBATCH_GPU_BIND", "gpu-bind", "value"),
    ("SBATCH_GRES", "gres", "value"),
    ("SBATCH_GRES_FLAGS", "gres-flags", "value"),
    ("SLURM_HINT", "hint", "value"),
    ("SBATCH_HINT", "hint", "value"),
    ("SBATCH_IGNORE_PBS", "ignore-pbs", "flag"),
    ("SBATCH_JOB_NAME", "job-name", "value"),
    ("SBATCH_MEM_PER_CPU", "mem-per-cpu", "value"),
    ("SBATCH_MEM_PER_GPU", "mem-per-gpu", "value"),
    ("SBATCH_MEM_PER_NODE", "mem", "value"),
    ("SBATCH_NO_KILL", "no-kill", "flag"),
    ("SBATCH_NO_REQUEUE", "no-requeue", "flag"),
    ("SBATCH_REQUEUE", "requeue", "flag"),
    ("SBATCH_OPEN_MODE", "open-mode", "value"),
    ("SBATCH_OVERCOMMIT", "overcommit", "flag"),
    ("SBATCH_PARTITION", "partition", "value"),
    ("SBATCH_QOS", "qos", "value"),
    ("SBATCH_RESERVATION", "reservation", "value"),
    ("SBATCH_SIGNAL", "signal", "value"),
    ("SBATCH_THREADS_PER_CORE", "threads-per-core", "value"),
    ("SBATCH_TIMELIMIT", "time", "value"),
    ("SBATCH_TRES_PER_TASK", "tres-per-task", "value"),
    ("SBATCH_USE_MIN_NODES", "use-min-nodes", "flag"),
    ("SBATCH_WAIT", "wait", "flag"),
    ("SBATCH_WAIT_ALL_NODES", "wait-all-nodes", "value"),
    ("SBATCH_WCKEY", "wckey", "value"),
    ("SBATCH_REQ_SWITCH", "switches", "value"),
]


def _env_flag_on(value: str) -> bool:
    """env.md §2: empty, ``yes`` or a non-zero number enables a flag variable."""
    s = value.strip().lower()
    if s in ("", "yes"):
        return True
    try:
        return int(s, 10) != 0
    except ValueError:
        return False


def _env_occurrences(environ: dict[str, str]) -> list[Occurrence]:
    longs = SBATCH_PARSER._long
    occ: list[Occurrence] = []
    debug = environ.get("SBATCH_DEBUG")
    if debug is not None:
        try:
            n = int(debug.strip(), 10)
        except ValueError:
            n = 0
        occ.extend(Occurrence(longs["verbose"], None, "SBATCH_DEBUG") for _ in range(max(n, 0)))
    for var, opt, kind in _ENV_VARS:
        if var not in environ:
            continue
        value = environ[var]
        spec = longs[opt]
        if kind == "flag":
            if _env_flag_on(value):
                occ.append(Occurrence(spec, None, var))
        elif kind == "exclusive":
            s = value.strip().lower()
            if s in ("user", "mcs", "topo", "exclusive"):
                occ.append(Occurrence(spec, s, var))
            elif _env_flag_on(value):
                occ.append(Occurrence(spec, None, var))
        else:
            occ.append(Occurrence(spec, value, var))
    return occ


# ------------------------------------------------------------------------------------------------
# #SBATCH directives
# ------------------------------------------------------------------------------------------------


class _Unmatched(ValueError):
    pass


def split_directive(text: str) -> list[str]:
    """Split a directive's text like a shell word list.

    Whitespace separates; ``'…'`` and ``"…"`` group (inside double quotes a backslash escapes
    ``"``, ``\\``, ``$`` and backquote); a backslash outside quotes escapes the next character;
    ``#`` at the start of a word starts a trailing comment.  Raises ``ValueError`` on an
    unmatched quote.
    """
    words: list[str] = []
    cur: list[str] = []
    have = False
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            if have:
                words.append("".join(cur))
                cur, have = [], False
            i += 1
            continue
        if c == "#" and not have:
            break
        have = True
        if c == "\\":
            if i + 1 < n:
                cur.append(text[i + 1])
            i += 2
            continue
        if c in "'\"":
            q = c
            i += 1
            while i < n and text[i] != q:
                if q == '"' and text[i] == "\\" and i + 1 < n and text[i + 1] in '"\\$`':
                    cur.append(text[i + 1])
                    i += 2
                    continue
                cur.append(text[i])
                i += 1
            if i >= n:
                raise _Unmatched(text)
            i += 1
            continue
        cur.append(c)
        i += 1
    if have:
        words.append("".join(cur))
    return words


def scan_directives(script: str) -> tuple[list[list[str]], list[str]]:
    """Return the word lists of the script's ``#SBATCH`` lines (and ``#SLURM`` ones) and the
    warnings to print.  Scanning stops at the first line that is neither blank nor a ``#``
    line.  Raises ``CliExit`` on an unmatched quote or a ``hetjob`` separator."""
    out: list[list[str]] = []
    warnings: list[str] = []
    for line in script.split("\n"):
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break
        if line.startswith("#SBATCH"):
            rest = line[7:]
        elif line.startswith("#SLURM"):
            rest = line[6:]
            warnings.append(
                f"{PROG}: error: #SLURM directive found in batch script, use #SBATCH: {line}"
            )
        else:
            continue
        try:
            words = split_directive(rest)
        except ValueError:
            raise _err(f"Unmatched quote in batch script directive: {line}") from None
        if words and words[0] in ("hetjob", "packjob"):
            raise _err("Heterogeneous jobs (#SBATCH hetjob) are not supported", SCRIPT_ERROR_EXIT)
        if words:
            out.append(words)
    return out, warnings


def _directive_occurrences(script: str) -> tuple[list[Occurrence], list[str]]:
    groups, warnings = scan_directives(script)
    occ: list[Occurrence] = []
    for words in groups:
        found, rest = SBATCH_PARSER.parse(words)
        if rest:
            raise _err(f"Invalid directive found in batch script: {rest[0]}")
        occ.extend(o for o in found if o.spec.dest not in _CLI_ONLY)
    return occ, warnings


# ------------------------------------------------------------------------------------------------
# Dependency syntax
# ------------------------------------------------------------------------------------------------

_DEP_TYPES = ("after", "afterany", "afterok", "afternotok", "aftercorr", "afterburstbuffer")


def _dep_id(t: str, delay: bool = False) -> bool:
    """``N`` or ``N_T`` (and ``+M`` minutes when ``delay``), ASCII digits only.
    Written without ``re``: importing it costs sbatch ~5 ms per call."""
    if delay and "+" in t:
        t, _, m = t.partition("+")
        if not (m.isascii() and m.isdigit()):
            return False
    jid, sep, task = t.partition("_")
    return jid.isascii() and jid.isdigit() and (not sep or (task.isascii() and task.isdigit()))


def check_dependency(value: str) -> bool:
    """Syntax check of a ``-d`` expression (cli.md §3); True when well formed."""
    s = value.strip()
    if not s:
        return False
    if "," in s and "?" in s:
        return False
    for term in s.replace("?", ",").split(","):
        if term == "singleton":
            continue
        if term[:1].isdigit():
            # legacy form: bare job ids ``12:13`` (= afterany)
            if not all(_dep_id(t) for t in term.split(":")):
                return False
            continue
        kind, _, ids = term.partition(":")
        if kind not in _DEP_TYPES:
            return False
        parts = ids.split(":")
        if not all(_dep_id(p, delay=kind == "after") for p in parts):
            return False
    return True


# ------------------------------------------------------------------------------------------------
# Script reading and checks
# ------------------------------------------------------------------------------------------------


_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./-_")


def _shell_join(words: list[str]) -> str:
    """shlex.join without importing shlex (which imports re)."""
    out = []
    for w in words:
        if w and all(ch in _SAFE for ch in w):
            out.append(w)
        else:
            out.append("'" + w.replace("'", "'\"'\"'") + "'")
    return " ".join(out)


def _too_large() -> CliExit:
    return _err(
        f"Batch script is too large: the limit is {SCRIPT_MAX_BYTES} bytes "
        f"({SCRIPT_MAX_BYTES // (1024 * 1024)} MiB)",
        SCRIPT_ERROR_EXIT,
    )


def _read_script_file(path: str, cwd: str) -> bytes:
    full = path if os.path.isabs(path) else os.path.join(cwd, path)
    try:
        with open(full, "rb") as f:
            return f.read(SCRIPT_MAX_BYTES + 1)
    except OSError:
        raise _err(f"Unable to open file {path}", SCRIPT_ERROR_EXIT) from None


def _read_stdin(reader: object) -> bytes:
    if reader is None:
        return b""
    if hasattr(reader, "read"):
        data = reader.read(SCRIPT_MAX_BYTES + 1)
    else:
        data = reader(SCRIPT_MAX_BYTES + 1)  # type: ignore[operator]  # a read(n) function
    if data is None:
        return b""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    return bytes(data)


def check_script(data: bytes) -> str:
    """Validate a batch script (cli.md §4.1) and return it as text; raises ``CliExit`` (exit 1)."""
    if len(data) > SCRIPT_MAX_BYTES:
        raise _too_large()
    if not data:
        raise _err("Batch script is empty!", SCRIPT_ERROR_EXIT)
    if not data.strip():
        raise _err("Batch script contains only whitespace!", SCRIPT_ERROR_EXIT)
    if not data.startswith(b"#!"):
        raise CliExit([f"{PROG}: error: {t}" for t in _NOT_BATCH], SCRIPT_ERROR_EXIT)
    if b"\0" in data:
        raise _err(
            "The batch script contains NUL bytes; a batch script must be a text file",
            SCRIPT_ERROR_EXIT,
        )
    if b"\r\n" in data:
        raise CliExit(
            [
                f"{PROG}: error: Batch script contains DOS line breaks (\\r\\n)",
                f"{PROG}: error: instead of UNIX line breaks (\\n); convert it, e.g. with dos2unix",
            ],
            SCRIPT_ERROR_EXIT,
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _err("Batch script is not valid UTF-8 text", SCRIPT_ERROR_EXIT) from None


# ------------------------------------------------------------------------------------------------
# --export
# ------------------------------------------------------------------------------------------------


def build_export_env(export: str | None, environ: dict[str, str]) -> dict[str, str]:
    """The environment to send for ``--export`` (env.md §3, cli.md §1).

    ``None``/``ALL``: everything.  ``NONE``/``NIL``: only ``SLURM_*``.  A list
    ``[ALL,]A=x,B``: ``SLURM_*`` plus the named variables (``B`` copied from ``environ``,
    ``A`` set to ``x``); with ``ALL`` the whole environment, where the user's own value of a
    variable wins over a value given in the list.
    """
    slurm = {k: v for k, v in environ.items() if k.startswith("SLURM_")}
    if export is None:
        return dict(environ)
    s = export.strip()
    key = s.upper()
    if key in ("", "ALL"):
        return dict(environ)
    if key in ("NONE", "NIL"):
        return slurm
    items = [t for t in s.split(",") if t != ""]
    has_all = any(t.strip().upper() == "ALL" for t in items)
    items = [t for t in items if t.strip().upper() not in ("ALL", "NONE", "NIL")]
    env = dict(environ) if has_all else slurm
    for item in items:
        name, eq, value = item.partition("=")
        name = name.strip()
        if not name:
            raise _err(f"Invalid --export specification: {export}")
        if eq:
            if has_all and name in environ:
                continue
            env[name] = value
        elif name in environ:
            env[name] = environ[name]
    return env


# ------------------------------------------------------------------------------------------------
# Main entry
# ------------------------------------------------------------------------------------------------


def _short_hostname() -> str:
    try:
        return os.uname().nodename.split(".")[0]
    except (AttributeError, OSError):  # pragma: no cover - non-POSIX
        return "localhost"


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _apply(b: _Build, occ: list[Occurrence], src: str) -> None:
    b.src = src
    for o in occ:
        _HANDLERS[o.spec.dest](b, o.value, o.name)
        b.used.append(o.spec.long or o.spec.short or "")  # every option has one of them


def step_env(req: dict) -> dict[str, str]:
    """Variables the job's (or allocation's) steps read: ``SLURM_GPU_BIND`` for --gpu-bind and
    ``SLURM_DISTRIBUTION`` for -m, as Slurm's sbatch and salloc export them."""
    out = {}
    if req.get("gpu_bind"):
        out["SLURM_GPU_BIND"] = req["gpu_bind"]
    if req.get("distribution"):
        out["SLURM_DISTRIBUTION"] = req["distribution"]
    return out


def _finish_memory(b: _Build) -> None:
    req = b.req
    cli, env = b.mem["cli"], b.mem["env"]
    if len(cli) > 1:
        raise _fatal("--mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.")
    if cli:
        chosen = cli
    else:
        if len(env) > 1:
            raise _fatal(
                "SBATCH_MEM_PER_CPU, SBATCH_MEM_PER_GPU, and SBATCH_MEM_PER_NODE "
                "are mutually exclusive."
            )
        chosen = env
    for field, mb in chosen.items():
        req[field] = mb


def _finish_cpus_per_gpu(b: _Build) -> None:
    gpu, task = b.cpus_per_gpu_src, b.cpus_per_task_src
    if not gpu or not task:
        return
    if ("cli" in gpu and "cli" in task) or ("cli" not in gpu and "cli" not in task):
        raise _fatal("--cpus-per-gpu is mutually exclusive with --cpus-per-task")
    # One of them comes from script/command line, the other only from SBATCH_*: the former wins.
    if "cli" in gpu:
        b.req["cpus_per_task"] = None
    else:
        b.req["cpus_per_gpu"] = None


def _finish_gres(b: _Build) -> None:
    gres = list(b.gres or [])
    if b.gpn is not None:
        gres_gpu = [g for g in gres if g["name"] == "gpu"]
        if not gres_gpu or b.gpn_seq > b.gres_seq:
            gres = [g for g in gres if g["name"] != "gpu"] + b.gpn
    b.req["gres"] = gres


def parse_sbatch(
    argv: list[str],
    environ: dict[str, str],
    stdin_reader: object,
    cwd: str,
    now: int,
) -> SbatchInvocation:
    """Turn sbatch's command line, environment and script into a Submit request.

    ``argv`` excludes the program name.  ``stdin_reader`` is a callable ``(max_bytes) -> bytes``
    (or a binary file object) read only when there is neither a script file nor ``--wrap``.
    ``cwd`` is the submit directory (relative paths resolve against it), ``now`` the epoch used
    by ``--begin``/``--deadline``.  Raises ``CliExit``.
    """
    b = _Build()
    b.cwd = cwd
    b.now = now
    inv = b.inv
    req = b.req

    cli_occ, operands = SBATCH_PARSER.parse(argv, info="first")  # --help etc.: InfoExit

    # First pass: client-only early options.
    for o in cli_occ:
        d = o.spec.dest
        if d in ("help", "usage", "version"):
            setattr(inv, d, True)
        elif d == "wrap":
            b.wrap = o.value or ""
    if inv.help or inv.usage or inv.version:
        inv.request = req
        return inv

    # The script.
    wrap = b.wrap
    script_path: str | None = None
    if wrap is not None:
        if operands:
            raise _err("Script arguments not permitted with --wrap option", SCRIPT_ERROR_EXIT)
        script = WRAP_HEADER + wrap + "\n"
        req["wrap"] = True
    else:
        if operands:
            script_path = operands[0]
            data = _read_script_file(script_path, cwd)
        else:
            data = _read_stdin(stdin_reader)
        script = check_script(data)
    args = operands[1:] if script_path is not None else []

    # Directives, environment, command line (later wins).
    if wrap is None:
        dir_occ, warnings = _directive_occurrences(script)
        inv.warnings.extend(warnings)
    else:
        dir_occ = []
    _apply(b, dir_occ, "script")
    _apply(b, _env_occurrences(environ), "env")
    _apply(b, [o for o in cli_occ if o.spec.dest not in _CLI_ONLY], "cli")

    _finish_memory(b)
    _finish_cpus_per_gpu(b)
    _finish_gres(b)
    finish_container(b)

    if req["dependency"] is not None:
        dep = req["dependency"].strip()
        if not dep:
            req["dependency"] = None
        elif not check_dependency(dep):
            raise _err("Batch job submission failed: Job dependency problem", SCRIPT_ERROR_EXIT)
        else:
            req["dependency"] = dep

    # Paths and identity of the submission.
    if b.chdir is not None and b.chdir.strip():
        d = os.path.expanduser(b.chdir.strip())
        work_dir = d if os.path.isabs(d) else os.path.join(cwd, d)
    else:
        work_dir = cwd
    req["work_dir"] = os.path.normpath(work_dir)
    req["submit_dir"] = os.path.normpath(cwd)
    if script_path is not None:
        full = script_path if os.path.isabs(script_path) else os.path.join(cwd, script_path)
        req["command"] = os.path.normpath(full)
        req["script_name"] = os.path.basename(script_path)
    req["argv"] = list(args)
    req["submit_line"] = _shell_join([PROG] + list(argv))
    req["submit_host"] = _short_hostname()
    req["umask"] = _current_umask()

    from muster.cli.optstatus import check
    inv.warnings.extend(check(PROG, b.used))
    inv.env = build_export_env(req["export"], environ)
    inv.env.update(b.extra_env)
    inv.env.update(step_env(req))
    inv.script = script
    inv.request = req
    return inv
