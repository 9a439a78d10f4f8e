"""sacct output formatting: acct job records (docs/records.md, with ``steps``) -> text.

Fixed-width output: every field is its value justified to the field width plus one space;
values longer than the width are cut and end in ``+``; header + dashes line.  ``-p``:
``|`` after every field; ``-P``: ``|`` between fields; ``--delimiter`` replaces ``|``.
TRES strings are printed sorted by name (``billing=1,cpu=1,gres/gpu=2,mem=1G,node=1``).
"""
from __future__ import annotations

from muster.cli import fmt_usage
from muster.common.hostlist import compress  # noqa: F401  (kept for callers)
from muster.common.units import fmt_mem
from muster.common.timefmt import fmt_duration_long, fmt_iso, fmt_limit_long

__all__ = ["FIELDS", "DEFAULT_FIELDS", "BRIEF_FIELDS", "parse_fields", "render",
           "job_id_str", "sort_tres"]

DEFAULT_FIELDS = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
LONG_FIELDS = (  # sacct -l (Slurm's LONG_FIELDS)
    "JobID,JobIDRaw,JobName,Partition,MaxVMSize,MaxVMSizeNode,MaxVMSizeTask,AveVMSize,MaxRSS,"
    "MaxRSSNode,MaxRSSTask,AveRSS,MaxPages,MaxPagesNode,MaxPagesTask,AvePages,MinCPU,"
    "MinCPUNode,MinCPUTask,AveCPU,NTasks,AllocCPUS,Elapsed,State,ExitCode,AveCPUFreq,"
    "ReqCPUFreqMin,ReqCPUFreqMax,ReqCPUFreqGov,ReqMem,ConsumedEnergy,MaxDiskRead,"
    "MaxDiskReadNode,MaxDiskReadTask,AveDiskRead,MaxDiskWrite,MaxDiskWriteNode,"
    "MaxDiskWriteTask,AveDiskWrite,ReqTRES,AllocTRES,TRESUsageInAve,TRESUsageInMax,"
    "TRESUsageInMaxNode,TRESUsageInMaxTask,TRESUsageInMin,TRESUsageInMinNode,"
    "TRESUsageInMinTask,TRESUsageInTot,TRESUsageOutMax,TRESUsageOutMaxNode,"
    "TRESUsageOutMaxTask,TRESUsageOutAve,TRESUsageOutTot")
BRIEF_FIELDS = "JobID,State,ExitCode"


def sort_tres(s: str | None) -> str:
    if not s:
        return ""
    return ",".join(sorted(s.split(","), key=lambda kv: kv.split("=", 1)[0]))


def _mem(mb):
    return fmt_mem(mb)


def job_id_str(j: dict) -> str:
    if j.get("array_job_id") is not None:
        if j.get("array_task_id") is not None:
            return f"{j['array_job_id']}_{j['array_task_id']}"
        ts = j.get("array_task_str") or ""
        if j.get("array_max_tasks"):
            ts = f"{ts}%{j['array_max_tasks']}"
        return f"{j['array_job_id']}_[{ts}]"
    return str(j["job_id"])


# A row is (job, step|None, ctx).  Getters take (job, step, ctx).
def _elapsed(j, st, c):
    r = st if st is not None else j
    start, end = r.get("start_time"), r.get("end_time")
    if not start:
        return 0
    if st is None and j.get("state") in ("RUNNING", "COMPLETING", "SUSPENDED"):
        end = c["now"]
    elif st is not None and not end:
        end = c["now"]
    return max(0, (end or c["now"]) - start)


def _state(j, st, c):
    if st is not None:
        return st.get("state", "")
    s = j.get("state", "")
    if s == "CANCELLED" and j.get("cancelled_by") is not None:
        return f"CANCELLED by {j['cancelled_by']}"
    return s


def _exit(j, st, c):
    r = st if st is not None else j
    if r.get("exit_code") is None:
        return ""
    return f"{r['exit_code']}:{r.get('exit_signal') or 0}"


def _jid(j, st, c):
    base = job_id_str(j)
    return base if st is None else f"{base}.{st['step_id']}"


def _jid_raw(j, st, c):
    return str(j["job_id"]) if st is None else f"{j['job_id']}.{st['step_id']}"


def _alloc_cpus(j, st, c):
    if st is not None:
        return str(st.get("num_cpus", 0))
    return str(j.get("num_cpus", 0))


def _nodelist(j, st, c):
    r = st if st is not None else j
    return r.get("node_list") or "None assigned"


def _alloc_tres(j, st, c):
    if st is not None:
        return sort_tres(st.get("tres_alloc"))
    return sort_tres(j.get("tres_alloc"))


def _req_mem(j, st, c):
    if j.get("mem_per_cpu") is not None:
        return _mem(j["mem_per_cpu"]) + "c"
    if j.get("mem_per_node") is not None:
        return _mem(j["mem_per_node"]) + "n"
    return "0n"


def _j(key, step_key=None, default="", step_default=""):
    """Job field; on step rows either the step's ``step_key`` or ``step_default``."""
    def get(j, st, c):
        if st is not None:
            if step_key is None:
                return step_default
            v = st.get(step_key)
        else:
            v = j.get(key)
        return default if v is None else str(v)
    return get


def _job_only(fn):
    return lambda j, st, c: "" if st is not None else fn(j, st, c)


def _date(key):
    def get(j, st, c):
        r = st if st is not None and key in ("start_time", "end_time") else j
        v = r.get(key)
        if key == "start_time" and st is None and not v and j.get("state") not in ("PENDING",):
            return "None" if j.get("end_time") else "Unknown"
        return fmt_iso(v)
    return get


def _eligible(j, st, c):
    return fmt_iso(j.get("eligible_time"))


FIELDS = {
    "JobID": (-12, _jid),
    "JobIDRaw": (-12, _jid_raw),
    "JobName": (10, lambda j, st, c: (st.get("name") if st is not None else j.get("name")) or ""),
    "Partition": (10, _j("partition")),
    "Account": (10, lambda j, st, c: j.get("account") or ""),
    "User": (9, _j("user")),
    "UID": (6, _j("uid")),
    "Group": (9, _j("group")),
    "GID": (6, _j("gid")),
    "AllocCPUS": (10, _alloc_cpus),
    "NCPUS": (10, _alloc_cpus),
    "ReqCPUS": (8, lambda j, st, c: str(st.get("num_cpus", 0) if st is not None else j.get("num_cpus", 0))),
    "AllocNodes": (10, lambda j, st, c: str((st or j).get("num_nodes", 0))
                   if (st is not None or j.get("node_list")) else "0"),
    "NNodes": (8, lambda j, st, c: str((st or j).get("num_nodes", 0))),
    "NTasks": (8, lambda j, st, c: str(st.get("num_tasks", "")) if st is not None else ""),
    "AllocTRES": (10, _alloc_tres),
    "ReqTRES": (10, _job_only(lambda j, st, c: sort_tres(j.get("tres_req")))),
    "State": (10, _state),
    "ExitCode": (8, _exit),
    "DerivedExitCode": (15, _job_only(lambda j, st, c: f"{j.get('derived_exit_code', 0)}:"
                                                       f"{j.get('derived_exit_signal', 0)}")),
    "Reason": (22, _job_only(lambda j, st, c: j.get("reason") or "None")),
    "Elapsed": (10, lambda j, st, c: fmt_duration_long(_elapsed(j, st, c))),
    "ElapsedRaw": (10, lambda j, st, c: str(_elapsed(j, st, c))),
    "CPUTime": (10, lambda j, st, c: fmt_duration_long(_elapsed(j, st, c) * int(_alloc_cpus(j, st, c)))),
    "CPUTimeRAW": (10, lambda j, st, c: str(_elapsed(j, st, c) * int(_alloc_cpus(j, st, c)))),
    "Timelimit": (10, _job_only(lambda j, st, c: fmt_limit_long(j.get("time_limit")))),
    "TimelimitRaw": (10, _job_only(lambda j, st, c: "UNLIMITED" if j.get("time_limit") is None
                                   else str(j["time_limit"]))),
    "Submit": (19, lambda j, st, c: fmt_iso(st.get("start_time") if st is not None
                                            else j.get("submit_time"))),
    "Eligible": (19, lambda j, st, c: fmt_iso(st.get("start_time") if st is not None
                                              else j.get("eligible_time"))),
    "Start": (19, lambda j, st, c: _start(j, st)),
    "End": (19, lambda j, st, c: fmt_iso((st or j).get("end_time"))),
    "NodeList": (15, _nodelist),
    "Priority": (10, _job_only(lambda j, st, c: str(j.get("priority", 0)))),
    "QOS": (10, _job_only(lambda j, st, c: j.get("qos") or "")),
    "Comment": (14, _job_only(lambda j, st, c: j.get("comment") or "")),
    "WCKey": (10, _job_only(lambda j, st, c: j.get("wckey") or "")),
    "WorkDir": (20, _job_only(lambda j, st, c: j.get("work_dir") or "")),
    "SubmitLine": (20, _job_only(lambda j, st, c: j.get("submit_line") or "")),
    "Restarts": (8, _job_only(lambda j, st, c: str(j.get("restarts", 0)))),
    "ArrayJobID": (15, lambda j, st, c: str(j["array_job_id"]) if j.get("array_job_id") is not None else ""),
    "ArrayTaskID": (15, lambda j, st, c: _array_task(j)),
    "ReqMem": (10, _req_mem),
    "Cluster": (10, lambda j, st, c: c["cluster"]),
    "Reservation": (20, _job_only(lambda j, st, c: j.get("reservation") or "")),
    "StdOut": (20, _job_only(lambda j, st, c: j.get("std_out") or "")),
    "StdErr": (20, _job_only(lambda j, st, c: j.get("std_err") or "")),
    "SubmitHost": (20, _job_only(lambda j, st, c: j.get("submit_host") or "")),
    "Flags": (19, lambda j, st, c: "SchedMain" if st is None and j.get("start_time") else ""),
}


def _usage_field(name: str):
    """A usage statistic (fmt_usage): a step row shows its step's final figures (blank
    while it runs, TotalCPU 00:00:00); a job row only the CPU totals over its steps."""
    width, get = fmt_usage.FIELDS[name]

    def getter(j, st, c):
        if st is not None:
            return get(st.get("usage"), c)
        if name in fmt_usage.JOB_TOTALS:
            return fmt_usage.job_total(name, j.get("steps") or [])
        return ""
    return width, getter


FIELDS.update({name: _usage_field(name) for name in fmt_usage.FIELDS})
for _name in ("ReqCPUFreqMin", "ReqCPUFreqMax", "ReqCPUFreqGov"):  # no --cpu-freq
    FIELDS.setdefault(_name, (13, lambda j, st, c: "Unknown"))
_BY_LOWER = {k.lower(): k for k in FIELDS}


def _start(j, st):
    if st is not None:
        return fmt_iso(st.get("start_time"))
    if j.get("start_time"):
        return fmt_iso(j["start_time"])
    # never started: ended (cancelled while pending) -> None, otherwise Unknown
    return "None" if j.get("end_time") else "Unknown"


def _array_task(j):
    if j.get("array_job_id") is None:
        return ""
    if j.get("array_task_id") is not None:
        return str(j["array_task_id"])
    ts = j.get("array_task_str") or ""
    return f"[{ts}%{j['array_max_tasks']}]" if j.get("array_max_tasks") else f"[{ts}]"


def parse_fields(s: str) -> list[tuple[str, int | None, bool]]:
    """``JobID,JobName%30,State%-12`` -> [(canonical name, width|None, left)].
    Unknown name -> ValueError(name as given)."""
    out = []
    for item in s.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, w = item.partition("%")
        canon = _BY_LOWER.get(name.lower())
        if canon is None:
            raise ValueError(name)
        width, left = None, False
        if w:
            try:
                width = int(w)
            except ValueError:
                raise ValueError(item) from None
            if width < 0:
                width, left = -width, True
        out.append((canon, width, left))
    return out


def _cell(value: str, width: int, left: bool) -> str:
    if len(value) > width:
        value = value[:width - 1] + "+" if width > 0 else ""
    return value.ljust(width) if left else value.rjust(width)


def render(jobs: list[dict], *, fields: list | str | None = None, parsable: bool = False,
           parsable2: bool = False, delimiter: str = "|", noheader: bool = False,
           allocations_only: bool = False, now: int = 0, cluster: str = "",
           units: str | None = None, noconvert: bool = False) -> str:
    """``fields``: a ``--format`` string or the output of ``parse_fields`` (None = the
    default field list).  Jobs are printed in the given order, each followed by its steps
    (unless ``allocations_only``). ``units``/``noconvert``: sacct's ``--units``/
    ``--noconvert`` for sizes (MaxRSS, ...)."""
    if fields is None:
        fields = DEFAULT_FIELDS
    if isinstance(fields, str):
        fields = parse_fields(fields)
    specs = []
    for name, width, left in fields:
        dw, getter = FIELDS[name]
        if width is None:
            width, left = abs(dw), dw < 0
        specs.append((name, width, left, getter))
    ctx = {"now": now, "cluster": cluster, "units": units, "noconvert": noconvert}
    rows = []
    for j in jobs:
        if not j.get("_steps_only"):  # sacct -j A.S: only the named steps
            rows.append([g(j, None, ctx) for _, _, _, g in specs])
        if not allocations_only:
            for st in j.get("steps") or []:
                rows.append([g(j, st, ctx) for _, _, _, g in specs])
    out = []
    if parsable or parsable2:
        sep = delimiter if delimiter is not None else "|"
        end = sep if parsable and not parsable2 else ""
        if not noheader:
            out.append(sep.join(s[0] for s in specs) + end)
        out.extend(sep.join(r) + end for r in rows)
    else:
        if not noheader:
            out.append("".join(_cell(n, w, left) + " " for n, w, left, _ in specs))
            out.append("".join("-" * w + " " for _, w, _, _ in specs))
        for r in rows:
            out.append("".join(_cell(v, w, left) + " " for v, (_, w, left, _) in zip(r, specs)))
    return "".join(line + "\n" for line in out)
