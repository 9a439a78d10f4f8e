"""squeue output formatting: job records (docs/records.md) -> Slurm's exact text.

Sorting (``-S``, default ``P,t,-p``): keys are applied as successive stable sorts from the
last key to the first, as squeue does.  The order *before* sorting (what decides ties) is
our own deterministic rule, derived from the 22.05 capture (squeue_default.txt): pending
jobs newest first (job id descending), all other jobs oldest first (job id ascending).
With ``--start`` and no explicit ``-S`` only pending jobs are shown, ordered by expected
start time (unknown = last), ties by job id ascending (squeue_start.txt).
"""
from __future__ import annotations

from muster.cli.fmt_common import parse_format, parse_format_long, render_table
from muster.common.units import fmt_mem
from muster.common.timefmt import fmt_ctime, fmt_duration, fmt_iso, fmt_limit

__all__ = ["STATE_CODES", "ALL_STATES", "DEFAULT_FORMAT", "LONG_FORMAT", "START_FORMAT",
           "STEP_FORMAT", "parse_states", "render", "render_steps", "job_id_str"]

STATE_CODES = {
    "PENDING": "PD", "RUNNING": "R", "SUSPENDED": "S", "COMPLETING": "CG",
    "COMPLETED": "CD", "CANCELLED": "CA", "FAILED": "F", "TIMEOUT": "TO",
    "NODE_FAIL": "NF", "PREEMPTED": "PR", "OUT_OF_MEMORY": "OOM", "BOOT_FAIL": "BF",
    "DEADLINE": "DL", "CONFIGURING": "CF", "RESIZING": "RS", "REQUEUED": "RQ",
    "REQUEUE_FED": "RF", "REQUEUE_HOLD": "RH", "SPECIAL_EXIT": "SE", "STAGE_OUT": "SO",
    "STOPPED": "ST", "REVOKED": "RV", "RESV_DEL_HOLD": "RD", "SIGNALING": "SI",
}
ALL_STATES = frozenset(STATE_CODES)
_SHORT_TO_LONG = {v: k for k, v in STATE_CODES.items()}

DEFAULT_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
LONG_FORMAT = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
STEP_FORMAT = "%.15i %.8j %.9P %.8u %.9M %N"
START_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R"  # one space before %S, as captured


def parse_states(s: str) -> set[str]:
    """``-t`` list (short or long names, case-insensitive, ``all``) -> set of long names.
    Unknown token -> ValueError(token)."""
    out: set[str] = set()
    for tok in s.split(","):
        t = tok.strip()
        if not t:
            continue
        u = t.upper()
        if u == "ALL":
            out |= ALL_STATES
        elif u in STATE_CODES:
            out.add(u)
        elif u in _SHORT_TO_LONG:
            out.add(_SHORT_TO_LONG[u])
        else:
            raise ValueError(t)
    return out


# ---------------------------------------------------------------------------- values
# squeue --noconvert: sizes stay in megabytes (2048M, not 2G). Set by squeue before it
# renders, once per process.
CONVERT_UNITS = True


def _mem(mb):
    return fmt_mem(mb) if CONVERT_UNITS else f"{int(mb)}M"


def job_id_str(j: dict) -> str:
    """``%i``: ``42``, array task ``48_3``, pending array master ``48_[1-6%2]``."""
    if j.get("array_job_id") is not None:
        if j.get("array_task_id") is not None:
            return f"{j['array_job_id']}_{j['array_task_id']}"
        ts = j.get("array_task_str")
        if ts:
            if j.get("array_max_tasks"):
                ts = f"{ts}%{j['array_max_tasks']}"
            return f"{j['array_job_id']}_[{ts}]"
    return str(j["job_id"])


def _array_job_id(j):
    return str(j["array_job_id"] if j.get("array_job_id") is not None else j["job_id"])


def _array_task_id(j):
    if j.get("array_task_id") is not None:
        return str(j["array_task_id"])
    ts = j.get("array_task_str")
    if j.get("array_job_id") is not None and ts:
        return f"{ts}%{j['array_max_tasks']}" if j.get("array_max_tasks") else ts
    return "N/A"


def _time_used(j, now):
    st = j.get("state")
    start = j.get("start_time")
    if st == "PENDING" or not start:
        return 0
    if st in ("RUNNING", "SUSPENDED", "COMPLETING") or j.get("end_time") is None:
        if st == "COMPLETING" and j.get("end_time"):
            return max(0, j["end_time"] - start)
        return max(0, now - start)
    return max(0, j["end_time"] - start)


def _time_left(j, now):
    lim = j.get("time_limit")
    if lim is None:
        return "UNLIMITED"
    return fmt_duration(max(0, lim * 60 - _time_used(j, now)))


def _reason_list(j):
    """Pending, failed and timed-out jobs show ``(Reason)``; others their node list."""
    if j.get("state") in ("PENDING", "FAILED", "TIMEOUT"):
        return "(" + (j.get("reason_desc") or j.get("reason") or "None") + ")"
    return j.get("node_list") or ""


def _min_memory(j):
    for k in ("mem_per_node", "mem_per_cpu"):
        if j.get(k) is not None:
            return _mem(j[k])
    if j.get("mem_per_gpu") is not None:
        return _mem(j["mem_per_gpu"])
    return "0"


def _start_time(j):
    if j.get("state") == "PENDING":
        return fmt_iso(j.get("start_time"), unset="N/A")
    return fmt_iso(j.get("start_time"), unset="N/A")


def _end_time(j):
    if j.get("state") == "PENDING":
        return fmt_iso(j.get("end_time"), unset="N/A")
    if j.get("end_time") is None:
        return "NONE"
    return fmt_iso(j["end_time"], unset="N/A")


def _s(v, null="(null)"):
    return null if v is None or v == "" else str(v)


def _tres_alloc(j):
    return j.get("tres_alloc") or j.get("tres_req") or ""


# code -> (header, getter(job, now))
_CODES = {
    "i": ("JOBID", lambda j, n: job_id_str(j)),
    "A": ("JOBID", lambda j, n: str(j["job_id"])),
    "F": ("ARRAY_JOB_ID", lambda j, n: _array_job_id(j)),
    "K": ("ARRAY_TASK_ID", lambda j, n: _array_task_id(j)),
    "j": ("NAME", lambda j, n: j.get("name") or ""),
    "u": ("USER", lambda j, n: j.get("user") or str(j.get("uid", ""))),
    "U": ("UID", lambda j, n: str(j.get("uid", ""))),
    "g": ("GROUP", lambda j, n: j.get("group") or str(j.get("gid", ""))),
    "G": ("GROUP", lambda j, n: str(j.get("gid", ""))),
    "a": ("ACCOUNT", lambda j, n: j.get("account") or "(null)"),
    "q": ("QOS", lambda j, n: j.get("qos") or "(null)"),
    "P": ("PARTITION", lambda j, n: j.get("partition") or ""),
    "t": ("ST", lambda j, n: STATE_CODES.get(j.get("state"), j.get("state", ""))),
    "T": ("STATE", lambda j, n: j.get("state", "")),
    "M": ("TIME", lambda j, n: fmt_duration(_time_used(j, n))),
    "l": ("TIME_LIMIT", lambda j, n: fmt_limit(j.get("time_limit"))),
    "L": ("TIME_LEFT", lambda j, n: _time_left(j, n)),
    "D": ("NODES", lambda j, n: str(j.get("num_nodes", 0))),
    "C": ("CPUS", lambda j, n: str(j.get("num_cpus", 0))),
    "c": ("MIN_CPUS", lambda j, n: str(max(j.get("cpus_per_task") or 1,
                                          j.get("min_cpus_node") or 0))),
    "R": ("NODELIST(REASON)", lambda j, n: _reason_list(j)),
    "r": ("REASON", lambda j, n: j.get("reason") or "None"),
    "N": ("NODELIST", lambda j, n: j.get("node_list") or ""),
    "S": ("START_TIME", lambda j, n: _start_time(j)),
    "e": ("END_TIME", lambda j, n: _end_time(j)),
    "V": ("SUBMIT_TIME", lambda j, n: fmt_iso(j.get("submit_time"), unset="N/A")),
    "p": ("PRIORITY", lambda j, n: "%.14f" % (j.get("priority", 0) / 4294967296.0)),
    "Q": ("PRIORITY", lambda j, n: str(j.get("priority", 0))),
    "E": ("DEPENDENCY", lambda j, n: _s(j.get("dependency"))),
    "k": ("COMMENT", lambda j, n: _s(j.get("comment"))),
    "Z": ("WORK_DIR", lambda j, n: j.get("work_dir") or ""),
    "o": ("COMMAND", lambda j, n: _s(j.get("command"))),
    "v": ("RESERVATION", lambda j, n: _s(j.get("reservation"))),
    "b": ("TRES_PER_NODE", lambda j, n: j.get("tres_per_node") or "N/A"),
    "Y": ("SCHEDNODES", lambda j, n: _s(j.get("sched_nodes"))),
    "y": ("NICE", lambda j, n: str(j.get("nice", 0))),
    "m": ("MIN_MEMORY", lambda j, n: _min_memory(j)),
    "f": ("FEATURES", lambda j, n: _s(j.get("features"))),
    "B": ("EXEC_HOST", lambda j, n: j.get("batch_host") or "n/a"),
    "n": ("REQ_NODES", lambda j, n: j.get("req_nodes") or ""),
    "x": ("EXC_NODES", lambda j, n: j.get("exc_nodes") or ""),
    "h": ("OVER_SUBSCRIBE", lambda j, n: "NO" if j.get("exclusive") else "OK"),
    "H": ("S:C:T", lambda j, n: "*:*:*"),
    "O": ("CONTIGUOUS", lambda j, n: "1" if j.get("contiguous") else "0"),
    "w": ("WCKEY", lambda j, n: _s(j.get("wckey"))),
}

# -O names (lower-case) -> (header, getter)
_LONG = {
    "jobid": ("JOBID", _CODES["A"][1]),
    "jobarrayid": ("JOBID", _CODES["i"][1]),
    "arrayjobid": ("ARRAY_JOB_ID", _CODES["F"][1]),
    "arraytaskid": ("ARRAY_TASK_ID", _CODES["K"][1]),
    "partition": ("PARTITION", _CODES["P"][1]),
    "name": ("NAME", _CODES["j"][1]),
    "username": ("USER", _CODES["u"][1]),
    "userid": ("UID", _CODES["U"][1]),
    "groupname": ("GROUP", _CODES["g"][1]),
    "groupid": ("GROUP", _CODES["G"][1]),
    "account": ("ACCOUNT", _CODES["a"][1]),
    "qos": ("QOS", _CODES["q"][1]),
    "statecompact": ("ST", _CODES["t"][1]),
    "state": ("STATE", _CODES["T"][1]),
    "timeused": ("TIME", _CODES["M"][1]),
    "timelimit": ("TIME_LIMIT", _CODES["l"][1]),
    "timeleft": ("TIME_LEFT", _CODES["L"][1]),
    "numnodes": ("NODES", _CODES["D"][1]),
    "numcpus": ("CPUS", _CODES["C"][1]),
    "numtasks": ("TASKS", lambda j, n: str(j.get("num_tasks", 1))),
    "mincpus": ("MIN_CPUS", _CODES["c"][1]),
    "cpus-per-task": ("CPUS_PER_TASK", lambda j, n: str(j.get("cpus_per_task") or 1)),
    "reasonlist": ("NODELIST(REASON)", _CODES["R"][1]),
    "reason": ("REASON", _CODES["r"][1]),
    "nodelist": ("NODELIST", _CODES["N"][1]),
    "starttime": ("START_TIME", _CODES["S"][1]),
    "endtime": ("END_TIME", _CODES["e"][1]),
    "submittime": ("SUBMIT_TIME", _CODES["V"][1]),
    "eligibletime": ("ELIGIBLE_TIME", lambda j, n: fmt_iso(j.get("eligible_time"), unset="N/A")),
    "lastscheduleval": ("LAST_SCHED_EVAL", lambda j, n: fmt_iso(j.get("last_sched_eval"), unset="N/A")),
    "priority": ("PRIORITY", _CODES["p"][1]),
    "prioritylong": ("PRIORITY", _CODES["Q"][1]),
    "dependency": ("DEPENDENCY", _CODES["E"][1]),
    "comment": ("COMMENT", _CODES["k"][1]),
    "contiguous": ("CONTIGUOUS", _CODES["O"][1]),
    "wckey": ("WCKEY", _CODES["w"][1]),
    "workdir": ("WORK_DIR", _CODES["Z"][1]),
    "command": ("COMMAND", _CODES["o"][1]),
    "reservation": ("RESERVATION", _CODES["v"][1]),
    "tres-per-node": ("TRES_PER_NODE", _CODES["b"][1]),
    "tres-per-task": ("TRES_PER_TASK", lambda j, n: f"gres/gpu:{j['gpus_per_task']}"
                      if j.get("gpus_per_task") else "N/A"),
    "tres-alloc": ("TRES_ALLOC", lambda j, n: _tres_alloc(j)),
    "schednodes": ("SCHEDNODES", _CODES["Y"][1]),
    "nice": ("NICE", _CODES["y"][1]),
    "minmemory": ("MIN_MEMORY", _CODES["m"][1]),
    "feature": ("FEATURES", _CODES["f"][1]),
    "batchhost": ("EXEC_HOST", _CODES["B"][1]),
    "exit_code": ("EXIT_CODE", lambda j, n: f"{j.get('exit_code', 0)}:{j.get('exit_signal', 0)}"),
    "restartcnt": ("RESTARTCNT", lambda j, n: str(j.get("restarts", 0))),
    "requeue": ("REQUEUE", lambda j, n: "1" if j.get("requeue") else "0"),
    "stdout": ("STDOUT", lambda j, n: j.get("std_out") or ""),
    "stderr": ("STDERR", lambda j, n: j.get("std_err") or ""),
    "stdin": ("STDIN", lambda j, n: j.get("std_in") or ""),
    "pendingtime": ("PENDING_TIME", lambda j, n: str(_pending_time(j, n))),
    "cluster": ("CLUSTER", lambda j, n: j.get("cluster") or ""),
    "reqnodes": ("REQ_NODES", _CODES["n"][1]),
    "excnodes": ("EXC_NODES", _CODES["x"][1]),
    "oversubscribe": ("OVER_SUBSCRIBE", _CODES["h"][1]),
    "submithost": ("SUBMIT_HOST", lambda j, n: j.get("submit_host") or ""),
    "numsct": ("S:C:T", _CODES["H"][1]),
}
_LONG_NAMES = {k: k for k in _LONG}


def _pending_time(j, now):
    el = j.get("eligible_time")
    if not el:
        return 0
    end = j.get("start_time") if j.get("state") != "PENDING" and j.get("start_time") else now
    return max(0, end - el)


# ---------------------------------------------------------------------------- sorting
def _prio(j):
    return j.get("priority", 0)


_SORT_KEYS = {
    "i": lambda j, n: (j["array_job_id"] if j.get("array_job_id") is not None else j["job_id"],
                       j.get("array_task_id") if j.get("array_task_id") is not None else -1),
    "A": lambda j, n: j["job_id"],
    "P": lambda j, n: j.get("partition") or "",
    "t": lambda j, n: STATE_CODES.get(j.get("state"), j.get("state", "")),
    "T": lambda j, n: j.get("state", ""),
    "p": lambda j, n: _prio(j),
    "Q": lambda j, n: _prio(j),
    "u": lambda j, n: j.get("user") or "",
    "U": lambda j, n: j.get("uid", 0),
    "g": lambda j, n: j.get("group") or "",
    "G": lambda j, n: j.get("gid", 0),
    "j": lambda j, n: j.get("name") or "",
    "N": lambda j, n: j.get("node_list") or "",
    "S": lambda j, n: _sort_start(j, n),
    "V": lambda j, n: j.get("submit_time") or 0,
    "e": lambda j, n: j.get("end_time") or 0,
    "l": lambda j, n: j["time_limit"] if j.get("time_limit") is not None else 2 ** 32,
    "L": lambda j, n: ((j["time_limit"] * 60 - _time_used(j, n)) if j.get("time_limit") is not None
                       else 2 ** 32),
    "M": lambda j, n: _time_used(j, n),
    "D": lambda j, n: j.get("num_nodes", 0),
    "C": lambda j, n: j.get("num_cpus", 0),
    "m": lambda j, n: j.get("mem_per_node") or j.get("mem_per_cpu") or 0,
    "v": lambda j, n: j.get("reservation") or "",
    "B": lambda j, n: j.get("batch_host") or "",
}


def _sort_start(j, now):
    st = j.get("start_time")
    if not st:
        return now + 100
    if j.get("state") == "PENDING" and st < now:
        return now
    return st


def _base_order(jobs):
    pend = sorted((j for j in jobs if j.get("state") == "PENDING"),
                  key=lambda j: (j["job_id"], j.get("array_task_id") or 0), reverse=True)
    rest = sorted((j for j in jobs if j.get("state") != "PENDING"),
                  key=lambda j: (j["job_id"], j.get("array_task_id") or 0))
    return pend + rest


def sort_jobs(jobs: list[dict], sort: str | None, now: int, start: bool = False) -> list[dict]:
    """Apply ``-S`` keys (raises ValueError on an unknown key letter)."""
    if sort is None and start:
        out = sorted(jobs, key=lambda j: (j["job_id"], j.get("array_task_id") or 0))
        return sorted(out, key=lambda j: _sort_start(j, now))
    if sort is None:
        # the default "P,t,-p" as one sort on a composite key (same order as three stable
        # passes: priorities are numbers, so descending is a negation)
        out = _base_order(jobs)
        codes = STATE_CODES
        return sorted(out, key=lambda j: (j.get("partition") or "",
                                          codes.get(j.get("state"), j.get("state", "")),
                                          -_prio(j)))
    out = _base_order(jobs)
    keys = [k.strip() for k in sort.split(",") if k.strip()]
    for k in reversed(keys):
        rev = False
        if k[0] in "+-":
            rev = k[0] == "-"
            k = k[1:]
        if not k:
            continue
        fn = _SORT_KEYS.get(k)
        if fn is None:
            if k in "cfhnOz":  # accepted by squeue, no effect
                continue
            raise ValueError(k)
        def sort_key(j, fn=fn):
            return fn(j, now)
        out = sorted(out, key=sort_key, reverse=rev)
        if rev:
            # sorted(reverse=True) keeps ties in original order, as squeue's negated
            # comparator does; nothing more to do.
            pass
    return out


# ---------------------------------------------------------------------------- render
def _expand_arrays(jobs):
    out = []
    for j in jobs:
        ts = j.get("array_task_str")
        if j.get("array_task_id") is None and j.get("array_job_id") is not None and ts:
            for tid in _expand_ints(ts):
                c = dict(j)
                c["array_task_id"] = tid
                c["array_task_str"] = None
                out.append(c)
        else:
            out.append(j)
    return out


def _expand_ints(s):
    out: list[int] = []
    for part in s.split(","):
        step = 1
        if ":" in part:
            part, st = part.split(":", 1)
            step = int(st)
        if "-" in part:
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1, step))
        elif part:
            out.append(int(part))
    return out


def _fields(fmt, fmt_long):
    if fmt_long is not None:
        fields = parse_format_long(fmt_long, _LONG_NAMES)
        return fields, "", [_LONG[f.code][0] for f in fields], [_LONG[f.code][1] for f in fields]
    fields, tail = parse_format(fmt)
    titles, getters = [], []
    for f in fields:
        h, g = _CODES.get(f.code, ("", lambda j, n: ""))
        titles.append(h)
        getters.append(g)
    return fields, tail, titles, getters


def render(jobs: list[dict], *, fmt: str | None = None, fmt_long: str | None = None,
           long: bool = False, start: bool = False, steps: bool = False,
           noheader: bool = False, array_expand: bool = False, now: int,
           sort: str | None = None) -> str:
    """Return squeue's output (with trailing newline per line; '' when nothing to print).
    ``jobs`` are already filtered by the caller, except that ``start`` keeps only pending
    jobs.  An unknown ``-O`` name raises ValueError(name); an unknown ``-S`` key
    ValueError(key)."""
    if fmt is None and fmt_long is None:
        if steps:
            fmt = STEP_FORMAT
        elif start:
            fmt = START_FORMAT
        elif long:
            fmt = LONG_FORMAT
        else:
            fmt = DEFAULT_FORMAT
    fields, tail, titles, getters = _fields(fmt, fmt_long)
    if start:
        jobs = [j for j in jobs if j.get("state") == "PENDING"]
    jobs = sort_jobs(jobs, sort, now, start=start)
    if array_expand:
        jobs = _expand_arrays(jobs)
    rows = [[g(j, now) for g in getters] for j in jobs]
    lines = []
    if long and not noheader:
        lines.append(fmt_ctime(now))
    lines.extend(render_table(fields, tail, titles, rows, show_header=not noheader))
    return "".join(line + "\n" for line in lines)


# Step ids sort as slurmctld numbers them: srun steps 0, 1, ..., then the batch step
# (SLURM_BATCH_SCRIPT) and the extern step (SLURM_EXTERN_CONT), both near 2**32.
_STEP_RANK = {"batch": 0xFFFFFFFB, "extern": 0xFFFFFFFC}


def _step_num(s: dict) -> int:
    sid = str(s.get("step_id"))
    return _STEP_RANK.get(sid, int(sid) if sid.isdigit() else 0xFFFFFFFF)


def _step_time(s: dict, now: int) -> str:
    return fmt_duration(max(0, now - s["start_time"]) if s.get("start_time") else 0)


# squeue -s: the step records' codes (-o) and names (-O); every other code or name is
# refused one by one on stderr, as squeue does, and the rest is printed
_STEP_CODES = {
    "A": ("TASKS", lambda s, n: str(s.get("num_tasks", 0))),
    "b": ("TRES_PER_JOB", lambda s, n: s.get("tres_per_node") or "(null)"),
    "i": ("STEPID", lambda s, n: s["step_str"]),
    "j": ("NAME", lambda s, n: s.get("name") or ""),
    "l": ("TIME_LIMIT", lambda s, n: fmt_limit(s.get("time_limit"))),
    "M": ("TIME", _step_time),
    "N": ("NODELIST", lambda s, n: s.get("node_list") or ""),
    "P": ("PARTITION", lambda s, n: s.get("partition") or ""),
    "S": ("START_TIME", lambda s, n: fmt_iso(s.get("start_time"), unset="N/A")),
    "U": ("UID", lambda s, n: str(s.get("uid", ""))),
    "u": ("USER", lambda s, n: s.get("user") or str(s.get("uid", ""))),
}
_STEP_LONG = {
    "stepid": _STEP_CODES["i"], "stepname": _STEP_CODES["j"],
    "partition": _STEP_CODES["P"], "username": _STEP_CODES["u"],
    "userid": _STEP_CODES["U"], "timeused": _STEP_CODES["M"],
    "timelimit": _STEP_CODES["l"], "starttime": _STEP_CODES["S"],
    "nodes": _STEP_CODES["N"], "numtasks": _STEP_CODES["A"],
    "tres-per-node": _STEP_CODES["b"],
    "numcpus": ("NUM_CPUS", lambda s, n: str(s.get("num_cpus", 0))),
    "jobid": ("JOB_ID", lambda s, n: str(s["job_id"])),
    "arrayjobid": ("ARRAY_JOB_ID", lambda s, n: str(s.get("array_job_id") or 0)),
    "arraytaskid": ("ARRAY_TASK_ID", lambda s, n: str(
        s["array_task_id"] if s.get("array_task_id") is not None else 4294967294)),
    "stepstate": ("STATE", lambda s, n: s.get("state") or ""),
    "resvports": ("RESERVED_PORTS", lambda s, n: s.get("resv_ports") or "(null)"),
    "network": ("NETWORK", lambda s, n: "(null)"),
    "cluster": ("CLUSTER", lambda s, n: s.get("cluster") or ""),
}


def _literal(text: str):
    """A getter printing ``text`` for every step (a code squeue -s refuses stays as written)."""
    return lambda s, n: text


def _step_fields(fmt: str | None, fmt_long: str | None, errors: list[str]):
    """(fields, tail, titles, getters) of a step format; each unknown code or name is
    appended to ``errors`` (a -o code stays in the line as its literal text)."""
    if fmt_long is not None:
        fields = []
        for item in fmt_long.split(","):
            name = item.partition(":")[0].strip()
            if not name:
                continue
            if name.lower() not in _STEP_LONG:
                errors.append(name)
                continue
            fields += parse_format_long(item, {name.lower(): name.lower()})
        return (fields, "", [_STEP_LONG[f.code][0] for f in fields],
                [_STEP_LONG[f.code][1] for f in fields])
    fields, tail = parse_format(fmt or STEP_FORMAT)
    titles, getters = [], []
    for f in fields:
        if f.code in _STEP_CODES:
            title, get = _STEP_CODES[f.code]
        else:
            errors.append(f.code)
            lit = "%" + ("." if f.right else "") + (str(f.width) if f.width else "") + f.code
            title, get, f.width = lit, _literal(lit), None
        titles.append(title)
        getters.append(get)
    return fields, tail, titles, getters


def sort_steps(steps: list[dict], sort: str | None = None) -> list[dict]:
    """squeue's step order: ``-S`` (``i`` step id, ``P`` partition, ``u`` user, ``j`` name,
    ``N`` nodes, ``M``/``S`` start; ``-`` descending), default partition then step id (the
    job's own id, an array task's included, then the step number: srun steps before the
    batch step)."""
    def by_id(s: dict):
        return (s["job_id"], _step_num(s))
    keys = {"i": by_id, "P": lambda s: s.get("partition") or "", "u": lambda s: s.get("user") or "",
            "j": lambda s: s.get("name") or "", "N": lambda s: s.get("node_list") or "",
            "S": lambda s: s.get("start_time") or 0, "M": lambda s: -(s.get("start_time") or 0)}
    out = sorted(steps, key=by_id)
    for k in reversed([k.strip() for k in (sort or "P,i").split(",") if k.strip()]):
        rev = k[0] == "-"
        fn = keys.get(k.lstrip("+-"))
        if fn is None:
            raise ValueError(k.lstrip("+-"))
        out = sorted(out, key=fn, reverse=rev)
    return out


def render_steps(steps: list[dict], *, fmt: str | None = None, fmt_long: str | None = None,
                 noheader: bool = False, now: int, sort: str | None = None,
                 errors: list[str] | None = None) -> str:
    """``squeue -s``: the controller's ``steps`` records (docs/records.md) in squeue's step
    format (default ``%.15i %.8j %.9P %.8u %.9M %N``), sorted by :func:`sort_steps`.
    Unknown codes/names go to ``errors`` (the caller reports them); an unknown sort key
    raises ValueError."""
    from muster.cli.fmt_scontrol import step_id_str
    errs = [] if errors is None else errors
    fields, tail, titles, getters = _step_fields(fmt, fmt_long, errs)
    recs = [{**s, "step_str": step_id_str(s)} for s in sort_steps(steps, sort)]
    rows = [[g(s, now) for g in getters] for s in recs]
    return "".join(line + "\n" for line in render_table(fields, tail, titles, rows,
                                                          show_header=not noheader))
