"""Validation of a submit request into a Job (the controller never trusts the client).

``build_job`` checks every field's type and range, applies the defaults of the partition and
of slurm.conf, and refuses what can never run (Slurm's errstrs via RequestError codes). What
could run later (too many nodes for the partition today, a time limit over MaxTime) is
accepted and left pending with Slurm's reason, as Slurm does with EnforcePartLimits=NO.

Size limits (docs/limits.md): the batch script is at most ``max_script_size`` bytes
(SchedulerParameters, Slurm's default 4 MiB); the environment at most ``MAX_ENV_BYTES`` in
all and ``MAX_ENV_ENTRY`` per ``NAME=value`` (the kernel's MAX_ARG_STRLEN: a longer string
could never be passed to execve, so the job would only fail at launch).

Privileges (as slurmctld's validate_job_create_req and _valid_id): a negative nice is for
operators only (ESLURM_INVALID_NICE); submitting as another uid/gid is for root and the
cluster owner (SlurmUser) only (ESLURM_USER_ID_MISSING / ESLURM_GROUP_ID_MISSING).
"""

from __future__ import annotations

import grp
import posixpath
import pwd
from typing import Any

from muster.common import gresspec
from muster.common.errors import RequestError
from muster.common.units import tres_string
from muster.lifecycle import deps as depmod
from muster.model.arrays import compress_indices
from muster.model.job import Job

MAX_ENV_BYTES = 1024 * 1024
MAX_ENV_ENTRY = 128 * 1024  # Linux MAX_ARG_STRLEN: the longest "NAME=value" execve takes
MAX_ENV_VARS = 65536
NICE_LIMIT = 2147483645  # Slurm: |nice| <= NICE_OFFSET - 3
MAX_STR = 65536
MAX_INT = 2**53
MAX_JOB_ID = 2**32 - 1  # Slurm job ids are uint32
NO_ARRAY_TASK = 4294967294

_INT_FIELDS = ("time_limit", "time_min", "nodes_min", "nodes_max", "ntasks", "ntasks_per_node",
               "cpus_per_task", "mem_per_node", "mem_per_cpu", "mem_per_gpu", "cpus_per_gpu",
               "begin", "nice", "priority", "umask", "deadline", "mincpus", "tmp",
               "switches", "wait4switch")
_STR_FIELDS = ("name", "script_name", "partition", "account", "qos", "reservation", "array",
               "dependency", "open_mode", "export", "nodelist", "exclude", "comment", "work_dir",
               "std_out", "std_err", "std_in", "command", "submit_line", "submit_host",
               "submit_dir", "constraint", "mail_type", "mail_user", "licenses", "gpu_bind",
               "clusters", "wckey")
_BOOL_FIELDS = ("wrap", "requeue", "hold", "exclusive", "contiguous", "overcommit",
                "use_min_nodes")


def _bad(msg: str, code: str = "invalid_request") -> RequestError:
    return RequestError(msg, code)


def check_types(req: object) -> dict:
    if not isinstance(req, dict):
        raise _bad("job description must be an object")
    for f in _INT_FIELDS:
        v = req.get(f)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise _bad(f"{f} must be an integer")
        if v is not None and abs(v) > MAX_INT:
            if f in ("time_limit", "time_min"):
                raise RequestError(None, "invalid_time_limit")
            raise _bad(f"Invalid {f} value: out of range")
    for f in _STR_FIELDS:
        v = req.get(f)
        if v is None:
            continue
        if not isinstance(v, str):
            raise _bad(f"{f} must be a string")
        if len(v) > MAX_STR:
            raise _bad(f"{f} is too long (limit {MAX_STR} characters)")
        if "\0" in v:
            raise _bad(f"{f} contains a NUL byte")
    for f in _BOOL_FIELDS:
        v = req.get(f)
        if v is not None and not isinstance(v, bool):
            raise _bad(f"{f} must be true or false")
    for f in ("uid", "gid"):
        v = req.get(f)
        if v is not None and not (isinstance(v, str) or _int_ok(v)):
            raise _bad(f"{f} must be a number or a name")
    argv = req.get("argv") or []
    if not isinstance(argv, list) or len(argv) > 65536 or not all(
            isinstance(a, str) and "\0" not in a for a in argv):
        raise _bad("argv must be a list of strings")
    shape = gresspec.valid_gres_list(req.get("gres") or [], MAX_INT)
    if shape is None:
        raise _bad("gres must be a list")
    if not shape:
        raise RequestError(None, "invalid_gres")
    for f in ("gpus", "gpus_per_task"):
        g = req.get(f)
        if g is not None and not gresspec.valid_typed_count(g, MAX_INT):
            raise RequestError(None, "invalid_gres")
    sig = req.get("signal")
    if sig is not None and not (isinstance(sig, dict) and _int_ok(sig.get("signal"))
                                and _int_ok(sig.get("secs", 60))):
        raise _bad("signal must be an object")
    return req


def _int_ok(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) <= MAX_INT


def check_script(script: object, env: object, max_script: int) -> None:
    """The batch script and its environment (types, sizes, shape). The script limit is in
    bytes as Slurm's (its errstr ESLURM_PATHNAME_TOO_LONG, with the sizes spelled out)."""
    if not isinstance(script, str):
        raise _bad("script must be a string")
    size = len(script) if len(script) * 4 <= max_script else len(
        script.encode("utf-8", "surrogatepass"))
    if size > max_script:
        raise RequestError("Pathname of a file, directory or other parameter too long: the "
                           f"batch script is too large ({size} bytes; the limit is "
                           f"SchedulerParameters=max_script_size={max_script})", "too_large")
    if not script.strip():
        raise _bad("Batch script is empty!")
    if "\0" in script:
        raise _bad("The batch script contains NUL bytes; a batch script must be a text file")
    if not script.startswith("#!"):
        raise _bad("This does not look like a batch script.  The first line must start with #!")
    if "\r\n" in script:
        raise _bad("Batch script contains DOS line breaks (\\r\\n) instead of UNIX line "
                   "breaks (\\n)")
    check_env(env)


def check_env(env: object) -> None:
    """NAME -> value strings, no NUL, no '=' in a name; MAX_ENV_BYTES in all (each entry
    counted as "NAME=value\0"), MAX_ENV_ENTRY per entry."""
    if not isinstance(env, dict) or len(env) > MAX_ENV_VARS or not all(
            isinstance(k, str) and isinstance(v, str) and "\0" not in k + v and "=" not in k and k
            for k, v in env.items()):
        raise _bad("environment must map names to strings")
    total = 0
    for k, v in env.items():
        n = len(k) + len(v) + 2
        if n > MAX_ENV_ENTRY:
            raise RequestError(f"environment variable {k[:64]} is too long ({n} bytes; the "
                               f"limit is {MAX_ENV_ENTRY} per NAME=value)", "too_large")
        total += n
    if total > MAX_ENV_BYTES:
        raise RequestError(f"environment too large ({total} bytes; the limit is "
                           f"{MAX_ENV_BYTES})", "too_large")


def check_counts(req: dict) -> None:
    """Node, task and CPU counts (already integers): Slurm's errstrs for each kind."""
    for f in ("nodes_min", "nodes_max"):
        if req.get(f) is not None and req[f] < 1:
            raise RequestError(None, "invalid_node_count")
    if req.get("nodes_min") is not None and req.get("nodes_max") is not None \
            and req["nodes_max"] < req["nodes_min"]:
        raise RequestError(None, "invalid_node_count")
    for f in ("ntasks", "ntasks_per_node"):
        if req.get(f) is not None and req[f] < 1:
            raise RequestError(None, "bad_task_count")
    if req.get("cpus_per_task") is not None and req["cpus_per_task"] < 1:
        raise RequestError(None, "invalid_cpu_count")


def check_nice(nice: int | None, privileged: bool) -> None:
    """Slurm: |nice| <= 2147483645; a negative nice (a priority boost) only for operators."""
    if nice is not None and (abs(nice) > NICE_LIMIT or (nice < 0 and not privileged)):
        raise RequestError(None, "invalid_nice")


def _lookup_id(value: object, kind: str) -> int:
    """A uid/gid given as a number or a name; RequestError when it names nobody."""
    code = "invalid_user" if kind == "uid" else "invalid_group"
    try:
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**32:
            (pwd.getpwuid if kind == "uid" else grp.getgrgid)(value)
            return value
        if isinstance(value, str) and value and "\0" not in value and len(value) <= 256:
            if kind == "uid":
                return pwd.getpwnam(value).pw_uid
            return grp.getgrnam(value).gr_gid
    except KeyError:
        pass
    raise RequestError(None, code)


def submit_ids(req: dict, uid: int, gid: int, superuser: bool) -> tuple[int, int | None]:
    """The (uid, gid) a job is submitted as (sbatch --uid/--gid). Only root and SlurmUser
    (``superuser``) may name someone else, as slurmctld's _valid_id; ``gid`` None means the
    user's primary group. Everyone else gets Slurm's "Invalid user id"/"Invalid group id"."""
    want_uid, want_gid = req.get("uid"), req.get("gid")
    if want_uid is None and want_gid is None:
        return uid, None
    new_uid = uid if want_uid is None else _lookup_id(want_uid, "uid")
    new_gid = None if want_gid is None else _lookup_id(want_gid, "gid")
    if not superuser:
        if new_uid != uid:
            raise RequestError(None, "invalid_user")
        if new_gid is not None and new_gid != gid:
            raise RequestError(None, "invalid_group")
    return new_uid, new_gid


def parse_array(spec: str, max_size: int) -> tuple[list[int], int, dict]:
    """``0-15:4%2`` → (indices, throttle, {min,max,step,count})."""
    bad = RequestError(None, "invalid_array")
    spec, _, throttle_s = spec.partition("%")
    throttle = 0
    if throttle_s:
        if not _digits(throttle_s) or len(throttle_s) > 9:
            raise bad
        throttle = int(throttle_s)
    indices: set[int] = set()
    step_seen = None
    for part in spec.split(","):
        rng, _, step_s = part.partition(":")
        lo_s, dash, hi_s = rng.partition("-")
        if not _digits(lo_s) or (dash and not _digits(hi_s)) or (step_s and not _digits(step_s)):
            raise bad
        if max(len(lo_s), len(hi_s), len(step_s)) > 9:
            raise bad
        lo = int(lo_s)
        hi = int(hi_s) if dash else lo
        step = int(step_s) if step_s else 1
        if hi < lo or step < 1 or hi >= max_size:
            raise bad
        if len(indices) + (hi - lo) // step + 1 > max_size:
            raise bad
        indices.update(range(lo, hi + 1, step))
        step_seen = step if step_seen is None else step_seen
    if not indices:
        raise bad
    ordered = sorted(indices)
    info = {"min": ordered[0], "max": ordered[-1], "step": step_seen or 1, "count": len(ordered)}
    return ordered, throttle, info


def _digits(s: str) -> bool:
    return s.isascii() and s.isdigit()


def build_job(req: dict, script: str | None, env: dict, *, ident: dict, cluster, now: int,
              accounts: Any, qos_names: set[str], fits_ever, job_lookup,
              batch: bool = True, privileged: bool = False, job_id: int = 0) -> Job:
    """Validate and build a pending Job (without id). ``ident``: uid, gid, user, group, groups.
    ``fits_ever(job, partition) -> str|None`` says whether the request can ever fit there.
    ``job_lookup(job_id) -> Job|dict|None`` resolves dependency targets. ``privileged``: the
    caller is an operator (may ask for a negative nice). ``job_id``: set only when an existing
    job is re-validated (scontrol update, with ``job_request``): the job is not counted twice
    against submit limits. ``accounts``: the account names, or the controller's associations
    (muster.controller.accounts.Accounts, which check more).

    The phases run in Slurm's order, each raising the first error it finds: request shape,
    partition, account/QOS, sizes, GPUs, memory, time, then the options that need the job
    (placement, signal, node lists), feasibility, array, dependency, hold/begin and the
    association limits."""
    check_types(req)
    cfg = cluster
    if batch:
        check_script(script, env, cfg.max_script_size)
    check_counts(req)
    check_nice(req.get("nice"), privileged)
    parts = _partitions(req, cfg)
    pconf = cfg.partitions[parts[0]]
    account, qos = _account_qos(req, ident, parts, accounts, qos_names)
    job = Job(
        job_id=job_id, name=_job_name(req, batch)[:1024], user=ident["user"], uid=ident["uid"],
        group=ident["group"], gid=ident["gid"], groups=tuple(ident.get("groups") or ()),
        account=account, qos=qos, partition=",".join(parts),
        partitions_req=parts if len(parts) > 1 else None, submit_time=now, eligible_time=now,
        comment=req.get("comment"), command=req.get("command"),
        submit_host=req.get("submit_host") or "", exclusive=bool(req.get("exclusive")),
        open_mode=req.get("open_mode"), requeue=cfg.job_requeue if req.get("requeue") is None
        else req["requeue"], argv=tuple(req.get("argv") or ()), umask=req.get("umask") or 0o022,
        submit_line=(req.get("submit_line") or "")[:4096], export=req.get("export"),
        nice=req.get("nice") or 0, batch=batch,
        req_nodes=req.get("nodelist") or None, exc_nodes=req.get("exclude") or None)
    _sizes(job, req)
    _gpus(job, req, cfg)
    _memory(job, req, cfg, pconf)
    _time(job, req, pconf)
    job.work_dir = req.get("work_dir") or "/"
    if not posixpath.isabs(job.work_dir):
        raise _bad("work_dir must be absolute")
    job.submit_dir = req.get("submit_dir") or job.work_dir
    if job.open_mode not in (None, "append", "truncate"):
        raise _bad("Invalid --open-mode specification")
    placement_options(job, req, cfg, pconf, now)
    _signal_option(job, req)
    _node_lists(job, cfg)
    _check_feasible(job, parts, fits_ever, cfg)
    _array_dependency_hold(job, req, cfg, now, job_lookup)
    job.tres_req = request_tres(job)
    job.intern_strings()  # the phases set fields after construction
    if getattr(accounts, "resolve", None) is not None:
        _association_checks(job, req, ident, parts, accounts, cfg)
    return job


def _partitions(req: dict, cfg) -> list[str]:
    """``-p a,b`` (each must exist), else the default partition."""
    if req.get("partition"):
        parts = [p for p in req["partition"].split(",") if p]
        for p in parts:
            if p not in cfg.partitions:
                raise RequestError(None, "invalid_partition")
        return parts
    if cfg.default_partition:
        return [cfg.default_partition]
    raise RequestError(None, "no_default_partition")


def _account_qos(req: dict, ident: dict, parts: list[str], accounts: Any,
                 qos_names: set[str]) -> tuple[str, str]:
    resolve = getattr(accounts, "resolve", None)
    if resolve is not None:  # muster.controller.accounts.Accounts (sacctmgr associations)
        return resolve(ident, req.get("account"), req.get("qos"), parts)
    account = req.get("account") or ("root" if ident["uid"] == 0 else "default")
    if account not in accounts:
        raise RequestError(None, "invalid_account")
    qos = req.get("qos") or "normal"
    if qos not in qos_names:
        raise RequestError(None, "invalid_qos")
    return account, qos


def _job_name(req: dict, batch: bool) -> str:
    if req.get("name"):
        return req["name"]
    if req.get("wrap"):
        return "wrap"
    if req.get("script_name"):
        return req["script_name"]
    if not batch and req.get("argv"):
        return posixpath.basename(req["argv"][0]) or "interactive"
    return "sbatch"


def _sizes(job: Job, req: dict) -> None:
    """Nodes, tasks and CPUs: -N defaults from -n/--ntasks-per-node, and is reduced to -n.
    ``-O`` (overcommit): the CPUs are those of one task per node, as Slurm allocates them;
    the tasks are spread over the nodes when it starts (scheduling.task_counts)."""
    nodes_min = req.get("nodes_min")
    nodes_max = req.get("nodes_max")
    ntasks = req.get("ntasks")
    tpn = req.get("ntasks_per_node")
    cpt = req.get("cpus_per_task") or 1
    if nodes_min is None:
        nodes_min = 1
        if ntasks and tpn:
            nodes_min = max(1, -(-ntasks // tpn))
    if nodes_max is not None and nodes_max < nodes_min:
        raise RequestError(None, "invalid_node_count")
    job.ntasks_set = ntasks is not None or tpn is not None
    if ntasks is None:
        ntasks = (tpn or 1) * nodes_min
    if ntasks < nodes_min:
        nodes_min = ntasks  # srun/sbatch reduce -N to -n
    job.nodes_min, job.nodes_max, job.num_nodes = nodes_min, nodes_max, nodes_min
    job.num_tasks, job.ntasks_per_node, job.cpus_per_task = ntasks, tpn, cpt
    job.num_cpus = max(ntasks * cpt, nodes_min)
    job.overcommit = bool(req.get("overcommit"))
    if job.overcommit:
        job.num_cpus = nodes_min * cpt
    job.cpus_per_task_set = req.get("cpus_per_task") is not None
    job.ntasks_given = req.get("ntasks") is not None


def _gpus(job: Job, req: dict, cfg) -> None:
    """--gres=gpu[:type]:N, --gpus, --gpus-per-task (GPUs must be a configured GRES)."""
    gpus_per_node, gpu_type = 0, None
    for g in req.get("gres") or []:
        if g["name"] not in ("gpu",) or "gpu" not in cfg.gres_types:
            raise RequestError(None, "invalid_gres")
        if g.get("count", 1) < 0:
            raise RequestError(None, "invalid_gres")
        gpus_per_node = g.get("count", 1)
        gpu_type = g.get("type")
    gpus = req.get("gpus")
    gpt = req.get("gpus_per_task")
    for g in (gpus, gpt):
        if g is not None:
            if g["count"] < 0:
                raise RequestError(None, "invalid_gres")
            if "gpu" not in cfg.gres_types and g["count"]:
                raise RequestError(None, "invalid_gres")
            gpu_type = g.get("type") or gpu_type
    job.gpus_per_node, job.gpu_type = gpus_per_node, gpu_type
    job.gpus = gpus["count"] if gpus else None
    job.gpus_per_task = gpt["count"] if gpt else None
    if gpus_per_node:
        job.tres_per_node = (f"gres:gpu:{gpu_type}:{gpus_per_node}" if gpu_type
                             else f"gres:gpu:{gpus_per_node}")


def _memory(job: Job, req: dict, cfg, pconf) -> None:
    """One of --mem/--mem-per-cpu/--mem-per-gpu, else the partition's or the cluster's
    default (DefMemPerGPU first for a GPU job), else the whole node (``mem_all``)."""
    mem_node, mem_cpu, mem_gpu = req.get("mem_per_node"), req.get("mem_per_cpu"), req.get("mem_per_gpu")
    if sum(v is not None for v in (mem_node, mem_cpu, mem_gpu)) > 1:
        raise _bad("--mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive")
    for v in (mem_node, mem_cpu, mem_gpu):
        if v is not None and v < 0:
            raise _bad("Invalid memory specification")
    wants_gpus = bool(job.gpus_per_node or job.gpus or job.gpus_per_task)
    if mem_gpu is not None and not wants_gpus:
        raise RequestError(None, "invalid_gres")  # --mem-per-gpu needs GPUs to scale with
    mem_all = False
    if mem_node is None and mem_cpu is None and mem_gpu is None:
        # a GPU job takes DefMemPerGPU first (partition, else global), as placement documents
        dpc = pconf.def_mem_per_cpu or cfg.def_mem_per_cpu
        dpn = pconf.def_mem_per_node or cfg.def_mem_per_node
        dpg = pconf.def_mem_per_gpu or cfg.def_mem_per_gpu
        if dpg and wants_gpus:
            mem_gpu = dpg
        elif dpc:
            mem_cpu = dpc
        elif dpn:
            mem_node = dpn
        else:
            mem_all = True
    if mem_node == 0:
        mem_all = True
    job.mem_per_node = mem_node if not mem_all else None
    job.mem_per_cpu, job.mem_per_gpu, job.mem_all = mem_cpu, mem_gpu, mem_all


def _time(job: Job, req: dict, pconf) -> None:
    """-t (-1: UNLIMITED), else the partition's DefaultTime or MaxTime; --time-min."""
    tl = req.get("time_limit")
    from_part = False
    if tl is None:
        tl = pconf.default_time if pconf.default_time is not None else pconf.max_time
        from_part = True
    elif tl == -1:
        tl = None
    elif tl < 0:
        raise RequestError(None, "invalid_time_limit")
    time_min = req.get("time_min")
    if time_min is not None and time_min < 0:
        raise RequestError(None, "invalid_time_limit")
    job.time_limit, job.time_min, job.timelimit_from_partition = tl, time_min, from_part


def _signal_option(job: Job, req: dict) -> None:
    sig = req.get("signal")
    if sig is None:
        return
    if not (1 <= sig["signal"] <= 64) or not (0 <= sig.get("secs", 60) <= 65535):
        raise _bad("Invalid --signal specification")
    job.signal_spec = {"signal": sig["signal"], "secs": sig.get("secs", 60),
                       "batch": bool(sig.get("batch"))}
    job.signal = f"{'B:' if sig.get('batch') else ''}{sig['signal']}@{sig.get('secs', 60)}"


def _node_lists(job: Job, cfg) -> None:
    """-w/-x: every name known, stored compressed in node-definition order."""
    from muster.common.hostlist import compress, expand
    for field in ("req_nodes", "exc_nodes"):
        expr = getattr(job, field)
        if expr:
            try:
                names = expand(expr)
            except Exception:
                raise RequestError(None, "invalid_nodelist") from None
            unknown = [n for n in names if n not in cfg.nodes]
            if unknown:
                raise RequestError(None, "invalid_nodelist")
            setattr(job, field, compress(sorted(set(names), key=cfg.node_order().__getitem__)))


def _check_feasible(job: Job, parts: list[str], fits_ever, cfg) -> None:
    """"Never" is refused now (Slurm's ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE), with the
    client's extra detail line; only "not now" may wait."""
    why = None
    for p in parts:
        why = _fits_some_day(job, p, fits_ever, cfg)
        if why is None:
            return
    exc = RequestError(None, "bad_node_config")
    exc.detail = _unsatisfiable_detail(job, parts, cfg)  # Slurm's extra client line
    raise exc


def _array_dependency_hold(job: Job, req: dict, cfg, now: int, job_lookup) -> None:
    """--array, --dependency, --begin, --hold, and the output patterns (arrays: %A_%a)."""
    if req.get("array"):
        indices, throttle, info = parse_array(req["array"], cfg.max_array_size)
        job.pending_tasks = indices
        job.array_max_tasks = throttle
        job.array_spec = info
        job.array_task_str = compress_indices(indices)
    if req.get("dependency"):
        terms, any_ = parse_dependency(req["dependency"], job_lookup)
        job.dep_terms = terms
        job.dep_any = any_
        job.dependency = req["dependency"]
    if req.get("begin") is not None and req["begin"] > now:
        job.begin_time = req["begin"]
        job.eligible_time = req["begin"]
    if req.get("hold"):
        job.hold = "user"
        job.priority = 0
        job.reason = "JobHeldUser"
    default_out = "slurm-%A_%a.out" if job.pending_tasks else "slurm-%j.out"
    job.io_patterns = (req.get("std_out") or default_out, req.get("std_err") or None,
                       req.get("std_in") or "/dev/null")


def _association_checks(job: Job, req: dict, ident: dict, parts: list[str], accounts,
                        cfg) -> None:
    """Partition access, EnforcePartLimits and QOS/association submit limits; the
    reservation asked for (controller.accounts.Accounts)."""
    accounts.submit_check(job, ident, parts, cfg)
    resv = req.get("reservation") or None
    if resv:
        state = getattr(accounts, "state", None)
        accounts.check_reservation(resv, ident, job.account, getattr(state, "reservations", None))
        accounts.remember(job, resv=resv)


def parse_dependency(spec: str, job_lookup) -> tuple[list[list], bool]:
    """``-d``/``Dependency=`` → (terms, any), every referenced job known to ``job_lookup``
    (a dependency on a job never known would wait for ever). RequestError('dependency')."""
    try:
        terms, any_ = depmod.parse(spec)
    except RequestError:
        raise
    except (ValueError, TypeError, OverflowError):  # e.g. non-ASCII digits
        raise RequestError(None, "dependency") from None
    for _, jid, task, minutes in terms:
        if (jid and not 0 < jid <= MAX_JOB_ID) or (task is not None and task > MAX_JOB_ID) \
                or minutes > MAX_INT:
            raise RequestError(None, "dependency")
        if jid and job_lookup(jid) is None:
            raise RequestError(None, "dependency")
    return terms, any_


def job_request(job: Job) -> dict:
    """The submit request whose ``build_job`` gives ``job``'s shape back: partition, account,
    QOS, time limits, node/task/CPU counts, memory, GPUs, node lists, exclusivity. It is the
    inverse of ``build_job`` for exactly those fields (``scontrol update`` merges its changes
    into it and re-validates the whole job as at submit): keep the two in step. What came from
    a default stays a default (a partition's time limit is re-derived after a partition
    change); memory that came from a default is carried as given."""
    def typed(count):
        return None if count is None else {"type": job.gpu_type, "count": count}
    return {
        "name": job.name, "work_dir": job.work_dir, "comment": job.comment,
        "partition": ",".join(job.partitions_req) if job.partitions_req else job.partition,
        "account": job.account, "qos": job.qos,
        "time_limit": None if job.timelimit_from_partition else (
            -1 if job.time_limit is None else job.time_limit),
        "time_min": job.time_min, "nodes_min": job.nodes_min, "nodes_max": job.nodes_max,
        "ntasks": job.num_tasks if job.ntasks_given else None,
        "ntasks_per_node": job.ntasks_per_node,
        "cpus_per_task": job.cpus_per_task if job.cpus_per_task_set else None,
        "mem_per_node": 0 if job.mem_all else job.mem_per_node,
        "mem_per_cpu": job.mem_per_cpu, "mem_per_gpu": job.mem_per_gpu,
        "gres": [{"name": "gpu", "type": job.gpu_type, "count": job.gpus_per_node}]
        if job.gpus_per_node else [],
        "gpus": typed(job.gpus), "gpus_per_task": typed(job.gpus_per_task),
        "nodelist": job.req_nodes, "exclude": job.exc_nodes, "exclusive": job.exclusive,
        "requeue": job.requeue, "constraint": job.features, "cpus_per_gpu": job.cpus_per_gpu,
        "deadline": job.deadline, "mail_type": job.mail_type, "mail_user": job.mail_user,
        "mincpus": job.min_cpus_node, "contiguous": job.contiguous, "tmp": job.min_tmp_disk,
        "overcommit": job.overcommit,
    }


def placement_options(job: Job, req: dict, cfg, pconf, now: int) -> None:
    """--constraint, --cpus-per-gpu (or DefCpuPerGPU), --deadline, --mail-type/--mail-user,
    --mincpus, --contiguous, --wckey and --licenses: checked and stored on ``job`` (the
    scheduler honours them; nothing is accepted and then dropped). Slurm's errstrs: an
    expression that does not parse or names a feature no node has is "Invalid feature
    specification"; Muster has no licenses, so any -L is "Invalid license specification"."""
    from muster.common.mailtypes import MailTypeError, check_mail_user, parse_mail_type
    from muster.core import features as featmod
    if req.get("licenses"):
        raise RequestError(None, "invalid_license")
    for name in (req.get("clusters") or "").split(","):
        if name.strip() and name.strip().lower() != (cfg.cluster_name or "").lower():
            raise _bad(f"No cluster '{name.strip()[:64]}' known by database.")
    text = req.get("constraint")
    if text is not None and text.strip():
        try:
            cons = featmod.parse(text)
        except featmod.ConstraintError:
            raise RequestError(None, "invalid_feature") from None
        known = {f for n in cfg.nodes.values() for f in n.features}
        if featmod.unknown_names(cons, known):
            raise RequestError(None, "invalid_feature")
        job.features = cons.text
    wants_gpus = bool(job.gpus_per_node or job.gpus or job.gpus_per_task)
    cpg = req.get("cpus_per_gpu")
    if cpg is not None:
        if cpg < 1 or cpg > 1 << 20:
            raise RequestError(None, "invalid_cpu_count")
        if not wants_gpus:
            raise RequestError(None, "invalid_gres")  # --cpus-per-gpu needs GPUs
        if req.get("cpus_per_task") is not None:
            raise _bad("--cpus-per-gpu is mutually exclusive with --cpus-per-task")
    elif wants_gpus and req.get("cpus_per_task") is None:
        cpg = pconf.def_cpu_per_gpu or cfg.def_cpu_per_gpu or None  # DefCpuPerGPU
    if cpg:
        job.cpus_per_gpu = cpg
        gpus = max(job.gpus_per_node * job.nodes_min, job.gpus or 0,
                   (job.gpus_per_task or 0) * job.num_tasks)
        job.num_cpus = max(job.num_cpus, gpus * cpg)
    deadline = req.get("deadline")
    if deadline is not None:
        if deadline <= 0 or deadline > MAX_JOB_ID * 16:
            raise RequestError(None, "invalid_time_value")
        job.deadline = deadline
    _node_shape_options(job, req)
    _switch_options(job, req, cfg)
    try:
        job.mail_type = parse_mail_type(req["mail_type"]) if req.get("mail_type") else None
        user = req.get("mail_user")
        job.mail_user = check_mail_user(user) if user else None
    except MailTypeError as exc:
        raise _bad(str(exc)) from None


def _node_shape_options(job: Job, req: dict) -> None:
    """--mincpus (each node needs, and gets, that many CPUs: NumCPUs counts them), --tmp
    (each node needs TmpDisk at least that large), --contiguous, --wckey (a label for
    accounting, stored as given)."""
    mincpus = req.get("mincpus")
    if mincpus is not None:
        if not 0 < mincpus <= MAX_JOB_ID:
            raise RequestError(None, "invalid_cpu_count")
        job.min_cpus_node = mincpus
        job.num_cpus = max(job.num_cpus, mincpus * job.nodes_min)
    tmp = req.get("tmp")  # --tmp (MB): a node filter (TmpDisk), never consumed, as Slurm's
    if tmp is not None and not 0 <= tmp <= MAX_INT:
        raise _bad("Invalid --tmp specification")
    job.min_tmp_disk = tmp or None
    job.contiguous = bool(req.get("contiguous"))
    job.use_min_nodes = bool(req.get("use_min_nodes"))
    job.wckey = req.get("wckey") or None


def _switch_options(job: Job, req: dict, cfg) -> None:
    """--switches=N[@wait]: at most N leaf switches (blocks) until the job has waited
    ``wait`` seconds, which SchedulerParameters max_switch_wait (default 300) both defaults
    and caps, as in Slurm; the wait that applies is stored (scontrol ``Switches=N@wait``)."""
    switches, wait = req.get("switches"), req.get("wait4switch")
    if switches is None:
        return
    if not 0 < switches < 1 << 31 or (wait is not None and not 0 <= wait <= MAX_INT):
        raise _bad("Invalid --switches specification")
    try:
        most = int((cfg.scheduler_parameters or {}).get("max_switch_wait", 300))
    except (TypeError, ValueError):
        most = 300
    job.req_switch = switches
    job.wait4switch = most if wait is None else min(wait, most)


def _fits_some_day(job: Job, partition: str, fits_ever, cfg) -> str | None:
    """None if the job could run in ``partition`` some day, else why not.

    A request for more nodes than the partition has is accepted, as Slurm does with
    EnforcePartLimits=NO (it stays pending with reason PartitionNodeLimit), provided the
    shape of each node's share could fit: that is checked with the node count clamped to
    the partition's size."""
    why = fits_ever(job, partition)
    if why != "node_count" or job.req_nodes:
        return why
    exc = set(_expand_nodes(job.exc_nodes))
    avail = len([n for n in cfg.partitions[partition].nodes if n not in exc])
    if avail < 1 or job.nodes_min <= avail or job.nodes_min > MAX_JOB_ID:
        return why
    tasks = job.num_tasks
    if job.ntasks_given:
        tasks = max(avail, tasks * avail // job.nodes_min)
    probe = job.copy(nodes_min=avail, num_nodes=avail, nodes_max=None, num_tasks=tasks,
                     num_cpus=max(tasks * job.cpus_per_task, avail))
    return fits_ever(probe, partition)


def _expand_nodes(expr: str | None) -> list[str]:
    if not expr:
        return []
    from muster.common.hostlist import expand
    return expand(expr)


def _unsatisfiable_detail(job: Job, parts: list[str], cfg) -> str | None:
    """Slurm's extra line for a request no node could ever hold (CPU or memory)."""
    names = {n for p in parts for n in cfg.partitions[p].nodes}
    nodes = [cfg.nodes[n] for n in names if n in cfg.nodes]
    if not nodes:
        return None
    max_cpus = max(n.cpus for n in nodes)
    max_mem = max(n.real_memory - (n.mem_spec_limit or 0) for n in nodes)
    per_node_cpus = max(job.cpus_per_task * (job.ntasks_per_node or 1), job.min_cpus_node or 0)
    if per_node_cpus > max_cpus:
        return "CPU count per node can not be satisfied"
    if (job.mem_per_node and job.mem_per_node > max_mem) or \
            (job.mem_per_cpu and job.mem_per_cpu * job.cpus_per_task > max_mem):
        return "Memory specification can not be satisfied"
    if job.min_tmp_disk and job.min_tmp_disk > max(n.tmp_disk for n in nodes):
        return "Temporary disk specification can not be satisfied"
    return None


def request_tres(job: Job) -> str:
    gpus = job.gpus_per_node * job.nodes_min
    if job.gpus:
        gpus = max(gpus, job.gpus)
    if job.gpus_per_task:
        gpus = max(gpus, job.gpus_per_task * job.num_tasks)
    if job.mem_per_node:
        mem = job.mem_per_node * job.nodes_min
    elif job.mem_per_cpu:
        mem = job.mem_per_cpu * job.num_cpus
    elif job.mem_per_gpu:
        mem = job.mem_per_gpu * gpus
    else:
        mem = 0
    return tres_string(job.num_cpus, mem, job.nodes_min, job.num_cpus,
                       {"gres/gpu": gpus} if gpus else {})
