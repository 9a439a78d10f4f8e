"""Validation of a submit request into a Job (the controller never trusts the client).

``build_job`` checks every field's type and range, applies the defaults of the partition and
of slurm.conf, and refuses what can never run (Slurm's errstrs via RequestError codes). What
could run later (too many nodes for the partition today, a time limit over MaxTime) is
accepted and left pending with Slurm's reason, as Slurm does with EnforcePartLimits=NO.
"""

from __future__ import annotations

import os
import posixpath

from muster.common.errors import RequestError
from muster.common.patterns import expand_pattern
from muster.common.units import tres_string
from muster.lifecycle import deps as depmod
from muster.model.arrays import compress_indices
from muster.model.job import Job

MAX_SCRIPT = 4 * 1024 * 1024
MAX_ENV_BYTES = 1024 * 1024
MAX_STR = 65536
MAX_INT = 2**53
MAX_JOB_ID = 2**32 - 1  # Slurm job ids are uint32
NO_ARRAY_TASK = 4294967294

_INT_FIELDS = ("time_limit", "time_min", "nodes_min", "nodes_max", "ntasks", "ntasks_per_node",
               "cpus_per_task", "mem_per_node", "mem_per_cpu", "mem_per_gpu", "cpus_per_gpu",
               "begin", "nice", "priority", "umask")
_STR_FIELDS = ("name", "script_name", "partition", "account", "qos", "reservation", "array",
               "dependency", "open_mode", "export", "nodelist", "exclude", "comment", "work_dir",
               "std_out", "std_err", "std_in", "command", "submit_line", "submit_host",
               "submit_dir")
_BOOL_FIELDS = ("wrap", "requeue", "hold", "exclusive")


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
    argv = req.get("argv") or []
    if not isinstance(argv, list) or len(argv) > 65536 or not all(
            isinstance(a, str) and "\0" not in a for a in argv):
        raise _bad("argv must be a list of strings")
    gres = req.get("gres") or []
    if not isinstance(gres, list) or len(gres) > 16:
        raise _bad("gres must be a list")
    for g in gres:
        if not (isinstance(g, dict) and isinstance(g.get("name"), str)
                and _int_ok(g.get("count", 1)) and (g.get("type") is None
                                                    or isinstance(g.get("type"), str))):
            raise RequestError(None, "invalid_gres")
    for f in ("gpus", "gpus_per_task"):
        g = req.get(f)
        if g is not None and not (isinstance(g, dict) and _int_ok(g.get("count"))
                                  and (g.get("type") is None or isinstance(g.get("type"), str))):
            raise RequestError(None, "invalid_gres")
    sig = req.get("signal")
    if sig is not None and not (isinstance(sig, dict) and _int_ok(sig.get("signal"))
                                and _int_ok(sig.get("secs", 60))):
        raise _bad("signal must be an object")
    return req


def _int_ok(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) <= MAX_INT


def check_script(script: object, env: object) -> None:
    if not isinstance(script, str):
        raise _bad("script must be a string")
    if len(script) > MAX_SCRIPT:
        raise RequestError(f"Batch script is too large: the limit is {MAX_SCRIPT} bytes "
                           f"({MAX_SCRIPT // (1024 * 1024)} MiB)", "too_large")
    if not script.strip():
        raise _bad("Batch script is empty!")
    if "\0" in script:
        raise _bad("The batch script contains NUL bytes; a batch script must be a text file")
    if not script.startswith("#!"):
        raise _bad("This does not look like a batch script.  The first line must start with #!")
    if "\r\n" in script:
        raise _bad("Batch script contains DOS line breaks (\\r\\n) instead of UNIX line "
                   "breaks (\\n)")
    if not isinstance(env, dict) or len(env) > 65536 or not all(
            isinstance(k, str) and isinstance(v, str) and "\0" not in k + v and "=" not in k and k
            for k, v in env.items()):
        raise _bad("environment must map names to strings")
    if sum(len(k) + len(v) + 2 for k, v in env.items()) > MAX_ENV_BYTES:
        raise RequestError("environment too large", "too_large")


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


def build_job(req: dict, script: str, env: dict, *, ident: dict, cluster, now: int,
              accounts: set[str], qos_names: set[str], fits_ever, job_lookup,
              batch: bool = True) -> Job:
    """Validate and build a pending Job (without id). ``ident``: uid, gid, user, group, groups.
    ``fits_ever(job, partition) -> str|None`` says whether the request can ever fit there.
    ``job_lookup(job_id) -> Job|dict|None`` resolves dependency targets."""
    check_types(req)
    if batch:
        check_script(script, env)
    cfg = cluster
    # ---- partition ---------------------------------------------------------------------
    if req.get("partition"):
        parts = [p for p in req["partition"].split(",") if p]
        for p in parts:
            if p not in cfg.partitions:
                raise RequestError(None, "invalid_partition")
    elif cfg.default_partition:
        parts = [cfg.default_partition]
    else:
        raise RequestError(None, "no_default_partition")
    pconf = cfg.partitions[parts[0]]
    # ---- account / qos -----------------------------------------------------------------
    resolve = getattr(accounts, "resolve", None)
    if resolve is not None:  # muster.controller.accounts.Accounts (sacctmgr associations)
        account, qos = resolve(ident, req.get("account"), req.get("qos"), parts)
    else:
        account = req.get("account") or ("root" if ident["uid"] == 0 else "default")
        if account not in accounts:
            raise RequestError(None, "invalid_account")
        qos = req.get("qos") or "normal"
        if qos not in qos_names:
            raise RequestError(None, "invalid_qos")
    # ---- sizes -------------------------------------------------------------------------
    nodes_min = req.get("nodes_min")
    nodes_max = req.get("nodes_max")
    ntasks = req.get("ntasks")
    tpn = req.get("ntasks_per_node")
    cpt = req.get("cpus_per_task") or 1
    for name, v in (("nodes", nodes_min), ("nodes", nodes_max), ("ntasks", ntasks),
                    ("ntasks-per-node", tpn), ("cpus-per-task", cpt)):
        if v is not None and v < 1:
            raise _bad(f"Invalid {name} count")
    if nodes_min is None:
        nodes_min = 1
        if ntasks and tpn:
            nodes_min = max(1, -(-ntasks // tpn))
    if nodes_max is not None and nodes_max < nodes_min:
        raise _bad("Invalid node count specification")
    ntasks_set = ntasks is not None or tpn is not None
    if ntasks is None:
        ntasks = (tpn or 1) * nodes_min
    if ntasks < nodes_min:
        nodes_min = ntasks  # srun/sbatch reduce -N to -n
    # ---- gpus --------------------------------------------------------------------------
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
    gpus_total = gpus["count"] if gpus else None
    gpus_per_task = gpt["count"] if gpt else None
    # ---- memory ------------------------------------------------------------------------
    mem_node, mem_cpu, mem_gpu = req.get("mem_per_node"), req.get("mem_per_cpu"), req.get("mem_per_gpu")
    if sum(v is not None for v in (mem_node, mem_cpu, mem_gpu)) > 1:
        raise _bad("--mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive")
    for v in (mem_node, mem_cpu, mem_gpu):
        if v is not None and v < 0:
            raise _bad("Invalid memory specification")
    mem_all = False
    if mem_node is None and mem_cpu is None and mem_gpu is None:
        dpc = pconf.def_mem_per_cpu or cfg.def_mem_per_cpu
        dpn = pconf.def_mem_per_node or cfg.def_mem_per_node
        dpg = pconf.def_mem_per_gpu or cfg.def_mem_per_gpu
        if dpc:
            mem_cpu = dpc
        elif dpn:
            mem_node = dpn
        elif dpg and (gpus_per_node or gpus_total or gpus_per_task):
            mem_gpu = dpg
        else:
            mem_all = True
    if mem_node == 0:
        mem_all = True
    # ---- time --------------------------------------------------------------------------
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
    # ---- identity & names --------------------------------------------------------------
    work_dir = req.get("work_dir") or "/"
    if not posixpath.isabs(work_dir):
        raise _bad("work_dir must be absolute")
    if req.get("name"):
        name = req["name"]
    elif req.get("wrap"):
        name = "wrap"
    elif req.get("script_name"):
        name = req["script_name"]
    elif not batch and req.get("argv"):
        name = posixpath.basename(req["argv"][0]) or "interactive"
    else:
        name = "sbatch"
    job = Job(
        name=name[:1024], user=ident["user"], uid=ident["uid"], group=ident["group"],
        gid=ident["gid"], groups=tuple(ident.get("groups") or ()), account=account, qos=qos,
        partition=",".join(parts), partitions_req=parts if len(parts) > 1 else None,
        submit_time=now, eligible_time=now, time_limit=tl, time_min=time_min,
        timelimit_from_partition=from_part, nodes_min=nodes_min, nodes_max=nodes_max,
        num_nodes=nodes_min, num_tasks=ntasks, ntasks_set=ntasks_set, cpus_per_task=cpt,
        ntasks_per_node=tpn, num_cpus=max(ntasks * cpt, nodes_min),
        mem_per_node=mem_node if not mem_all else None, mem_per_cpu=mem_cpu, mem_per_gpu=mem_gpu,
        mem_all=mem_all, gpus_per_node=gpus_per_node, gpu_type=gpu_type, gpus=gpus_total,
        gpus_per_task=gpus_per_task,
        tres_per_node=(f"gres:gpu:{gpu_type}:{gpus_per_node}" if gpu_type else
                       f"gres:gpu:{gpus_per_node}") if gpus_per_node else None,
        req_nodes=req.get("nodelist") or None, exc_nodes=req.get("exclude") or None,
        work_dir=work_dir, command=req.get("command"), comment=req.get("comment"),
        submit_host=req.get("submit_host") or "", exclusive=bool(req.get("exclusive")),
        open_mode=req.get("open_mode"), requeue=cfg.job_requeue if req.get("requeue") is None
        else req["requeue"], argv=tuple(req.get("argv") or ()), umask=req.get("umask") or 0o022,
        submit_line=(req.get("submit_line") or "")[:4096], export=req.get("export"),
        nice=req.get("nice") or 0, batch=batch, submit_dir=req.get("submit_dir") or work_dir,
        cpus_per_task_set=req.get("cpus_per_task") is not None,
        ntasks_given=req.get("ntasks") is not None,
    )
    if job.open_mode not in (None, "append", "truncate"):
        raise _bad("Invalid --open-mode specification")
    sig = req.get("signal")
    if sig is not None:
        if not (1 <= sig["signal"] <= 64) or not (0 <= sig.get("secs", 60) <= 65535):
            raise _bad("Invalid --signal specification")
        job.signal_spec = {"signal": sig["signal"], "secs": sig.get("secs", 60),
                           "batch": bool(sig.get("batch"))}
        job.signal = f"{'B:' if sig.get('batch') else ''}{sig['signal']}@{sig.get('secs', 60)}"
    # ---- node lists --------------------------------------------------------------------
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
    # ---- feasibility -------------------------------------------------------------------
    why = None
    for p in parts:
        why = _fits_some_day(job, p, fits_ever, cfg)
        if why is None:
            break
    if why is not None:
        exc = RequestError(None, "bad_node_config")
        exc.detail = _unsatisfiable_detail(job, parts, cfg)  # Slurm's extra client line
        raise exc
    # ---- array -------------------------------------------------------------------------
    if req.get("array"):
        indices, throttle, info = parse_array(req["array"], cfg.max_array_size)
        job.pending_tasks = indices
        job.array_max_tasks = throttle
        job.array_spec = info
        job.array_task_str = compress_indices(indices)
    # ---- dependency --------------------------------------------------------------------
    if req.get("dependency"):
        try:
            terms, any_ = depmod.parse(req["dependency"])
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
        job.dep_terms = terms
        job.dep_any = any_
        job.dependency = req["dependency"]
    # ---- hold / begin / priority -------------------------------------------------------
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
    job.tres_req = request_tres(job)
    if resolve is not None:
        # partition access, EnforcePartLimits and QOS/association submit limits; reservation
        accounts.submit_check(job, ident, parts, cfg)
        resv = req.get("reservation") or None
        if resv:
            state = getattr(accounts, "state", None)
            accounts.check_reservation(resv, ident, account,
                                       getattr(state, "reservations", None))
            accounts.remember(job, resv=resv)
    return job


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
    per_node_cpus = job.cpus_per_task * (job.ntasks_per_node or 1)
    if per_node_cpus > max_cpus:
        return "CPU count per node can not be satisfied"
    if (job.mem_per_node and job.mem_per_node > max_mem) or \
            (job.mem_per_cpu and job.mem_per_cpu * job.cpus_per_task > max_mem):
        return "Memory specification can not be satisfied"
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


def expand_io_paths(job: Job) -> None:
    """Fill std_out/std_err/std_in with the controller-side expansion (``%N`` kept)."""
    arr_id = job.array_job_id
    task = job.array_task_id

    def exp(pat: str) -> str:
        path = expand_pattern(pat, job_id=job.job_id, array_job_id=arr_id,
                              array_task_id=task, user=job.user, name=job.name)
        return path if os.path.isabs(path) else posixpath.join(job.work_dir, path)

    out, err, inp = job.io_patterns
    job.std_out = exp(out)
    job.std_err = exp(err) if err else job.std_out
    job.std_in = exp(inp) if inp != "/dev/null" else inp
