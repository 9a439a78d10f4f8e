"""Usage accounting in the controller: agents' reports -> per-step statistics (sacct, sstat,
seff, the dashboard).

Pipeline: each node's sampler (muster.agent.acctgather) reports per-task figures for a step —
live (``step_usage`` messages, every JobAcctGatherFrequency) and final (the ``usage`` of a
``job_ended``/``step_ended`` report). :func:`clean` validates a report (anything malformed is
dropped whole: a node cannot make the controller store garbage or raise). :func:`aggregate`
turns the reports of a step's nodes into Slurm's statistics; the final ones are stored with
the step's accounting row (store ``step_usage``), the live ones are kept in memory only
(:class:`UsageBook`), for the steps still running, and answered by ``sstat``.

Statistics (``aggregate``'s result, the ``usage`` of a step record; docs/records.md):
  ntasks, user_ms, sys_ms          tasks counted; CPU time of all of them
  in  {max, max_node, max_task, min, min_node, min_task, tot, ave}: TRESUsageIn*
  out {...}                        TRESUsageOut* (energy, fs/disk written)
  cpu_util, rss, gpuutil           now: % of one CPU, resident bytes, GPU % (summed over tasks)
Each of ``in``/``out`` maps a TRES name to a value: ``cpu`` (ms), ``mem``/``vmem`` (bytes,
each task's peak), ``pages``, ``fs/disk`` (bytes), ``energy`` (0: no energy plugin),
``gres/gpumem`` (bytes), ``gres/gpuutil`` (%) when a node measured GPUs. ``tot`` of ``mem`` is
the sum of the tasks' peaks, ``ave`` = tot / ntasks (seff reads them so); ``*_node`` is a node
name, ``*_task`` a global task id.
"""

from __future__ import annotations

from muster.common.errors import RequestError
from muster.controller.opspec import BOOL, ID, REQUEST_FIELDS, op

TASK_FIELDS = ("user_ms", "sys_ms", "rss", "max_rss", "vmem", "max_vmem", "pages", "read",
               "write", "cpu_util", "gpumem", "gpuutil", "max_gpuutil")
MAX_TASKS = 100_000  # per node report
MAX_PIDS = 100_000  # process ids kept per node sample (more: none are kept)
PID_LIMIT = 1 << 22  # the kernel's largest pid_max
BIG = 1 << 62


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < BIG


def clean(report) -> dict | None:
    """A node's usage report with only known, well-typed fields; None if malformed."""
    if not isinstance(report, dict) or not isinstance(report.get("tasks"), list):
        return None
    tasks = report["tasks"]
    if len(tasks) > MAX_TASKS:
        return None
    out = []
    for t in tasks:
        if not isinstance(t, dict) or not _count(t.get("task")):
            return None
        rec = {"task": t["task"]}
        for k in TASK_FIELDS:
            v = t.get(k)
            if v is None:
                continue
            if not _count(v):
                return None
            rec[k] = v
        out.append(rec)
    when = report.get("time")
    return {"time": when if _count(when) else 0, "tasks": out}


def clean_pids(pids) -> list[int]:
    """A sample's process ids, or none at all if any is not a possible pid (or too many):
    what sstat prints must be what the node saw, not a part of it."""
    if not isinstance(pids, list) or len(pids) > MAX_PIDS:
        return []
    if not all(_count(p) and 0 < p < PID_LIMIT for p in pids):
        return []
    return pids


# TRES of TRESUsageIn*: name -> the task figure it is made of (for max/min, and for tot/ave)
_IN = {"cpu": (None, None), "energy": ("_zero", "_zero"), "fs/disk": ("read", "read"),
       "mem": ("max_rss", "max_rss"), "pages": ("pages", "pages"),
       "vmem": ("max_vmem", "max_vmem")}
_GPU_IN = {"gres/gpumem": ("gpumem", "gpumem"), "gres/gpuutil": ("max_gpuutil", "gpuutil")}
_OUT = {"energy": ("_zero", "_zero"), "fs/disk": ("write", "write")}


def _value(t: dict, key: str | None) -> int:
    if key is None:
        return t.get("user_ms", 0) + t.get("sys_ms", 0)
    return t.get(key, 0) if key != "_zero" else 0


def _stats(tasks: list[tuple[str, dict]], names: dict) -> dict:
    """max/min (with where) and tot/ave of each TRES over ``(node, task record)`` pairs."""
    st: dict[str, dict] = {k: {} for k in ("max", "max_node", "max_task", "min", "min_node",
                                            "min_task", "tot", "ave")}
    for name, (peak_key, sum_key) in names.items():
        tot = 0
        for node, t in tasks:
            v = _value(t, peak_key)
            if name not in st["max"] or v > st["max"][name]:
                st["max"][name], st["max_node"][name], st["max_task"][name] = v, node, t["task"]
            if name not in st["min"] or v < st["min"][name]:
                st["min"][name], st["min_node"][name], st["min_task"][name] = v, node, t["task"]
            tot += _value(t, sum_key)
        st["tot"][name] = tot
        st["ave"][name] = tot / len(tasks) if tasks else 0
    return st


def aggregate(reports: dict) -> dict | None:
    """Slurm's statistics of a step from its nodes' (cleaned) reports, ``{node: report}``;
    None when no node reported any task."""
    tasks = [(node, t) for node in sorted(reports) if reports[node]
             for t in reports[node]["tasks"]]
    if not tasks:
        return None
    gpu = any("gpumem" in t for _, t in tasks)
    return {"ntasks": len(tasks),
            "user_ms": sum(t.get("user_ms", 0) for _, t in tasks),
            "sys_ms": sum(t.get("sys_ms", 0) for _, t in tasks),
            "in": _stats(tasks, {**_IN, **(_GPU_IN if gpu else {})}),
            "out": _stats(tasks, _OUT),
            "cpu_util": sum(t.get("cpu_util", 0) for _, t in tasks),
            "rss": sum(t.get("rss", 0) for _, t in tasks),
            "gpuutil": sum(t.get("gpuutil", 0) for _, t in tasks) if gpu else None,
            "time": max(reports[n]["time"] for n in reports if reports[n])}


class UsageBook:
    """Live samples of running steps (memory only: a restarted controller has the next
    sample within one interval) and the final statistics' way into the store."""

    def __init__(self, ctl):
        self.ctl = ctl
        self.live: dict[tuple[int, object], dict[str, dict]] = {}  # (job, step) -> node -> report

    def sample(self, node: str, msg: dict) -> None:
        """A ``step_usage`` message from ``node``: kept if that step runs there now."""
        job_id, step_id = msg.get("job_id"), msg.get("step_id")
        if not _count(job_id) or not (step_id == "batch" or _count(step_id)):
            return
        job = self.ctl.state.jobs.get(job_id)
        if job is None or job.state != "RUNNING" or job.restarts != msg.get("run", 0):
            return
        if step_id == "batch":
            if not job.batch or job.batch_host != node:
                return
        else:
            step = self.ctl.steps.steps.get((job.job_id, step_id))
            if step is None or node not in step.nodes:
                return
        rep = clean(msg.get("usage"))
        if rep is not None:
            rep["pids"] = clean_pids(msg.get("pids"))  # live only: finish() never sees it
            self.live.setdefault((job.job_id, step_id), {})[node] = rep

    def running(self, job_id: int, step_id) -> dict | None:
        """The live statistics of a running step (None: no sample yet)."""
        return aggregate(self.live.get((job_id, step_id)) or {})

    def pids(self, job_id: int, step_id) -> dict[str, list[int]]:
        """node -> the step's process ids there at that node's latest sample."""
        return {node: rep["pids"] for node, rep in
                sorted((self.live.get((job_id, step_id)) or {}).items())}

    def by_job(self) -> dict[int, list]:
        """job id -> ``[cpu %, resident bytes, GPU % or None]`` now, summed over the job's
        running steps, nodes and tasks (the dashboard's "use" column): one pass."""
        out: dict[int, list] = {}
        for (job_id, _sid), reps in self.live.items():
            acc = out.setdefault(job_id, [0, 0, None])
            for rep in reps.values():
                for t in rep["tasks"]:
                    acc[0] += t.get("cpu_util", 0)
                    acc[1] += t.get("rss", 0)
                    if "gpuutil" in t:
                        acc[2] = (acc[2] or 0) + t["gpuutil"]
        return out

    def finish(self, job_id: int, step_id, reports: dict) -> None:
        """A step ended: store its final statistics from ``{node: raw report}`` (inside the
        caller's transaction) and forget its live samples."""
        self.live.pop((job_id, step_id), None)
        stats = aggregate({n: clean(r) for n, r in reports.items() if r is not None})
        if stats is not None:
            self.ctl.state.store.put_step_usage(job_id, str(step_id), stats)

    def forget(self, job_id: int) -> None:
        for key in [k for k in self.live if k[0] == job_id]:
            del self.live[key]


# ---- sstat ---------------------------------------------------------------------------------

def sstat(ctl, msg: dict, uid: int) -> dict:
    """``sstat -j``: per requested ``{"job_id", "step"}`` (``step``: "batch", "extern", a step
    id, or absent: the lowest running step, or all with ``all_steps``) a result
    ``{"job_id", "step", "rows": [...]}`` or ``{..., "error": code}``: ``no_job`` (not known
    to the controller), ``no_steps`` (nothing running), ``not_running`` (that step is not),
    ``denied`` (not the owner nor an operator). A row's ``pids`` (node -> process ids of the
    latest sample, for ``sstat -i``) is thus seen by the same users as its figures."""
    out = []
    for ref in msg.get("steps") or []:
        job_id, step = ref.get("job_id"), ref.get("step")
        res = {"job_id": job_id, "step": step}
        out.append(res)
        job = _find(ctl, job_id, ref.get("task"))
        if job is None:
            res["error"] = "no_job" if step is None else "not_running"
            continue
        if job.uid != uid and not ctl.is_admin(uid):
            res["error"] = "denied"
            continue
        running = _running_steps(ctl, job)
        if step is None:
            ids = running if msg.get("all_steps") else _lowest(running)
            if not ids:
                res["error"] = "no_steps"
                continue
        elif step in running:
            ids = [step]
        else:
            res["error"] = "not_running"
            continue
        res["rows"] = [_row(ctl, job, sid, running[sid]) for sid in ids]
    return {"results": out}


def _find(ctl, job_id: int, task: int | None):
    """The job ``job_id``, or task ``task`` of array ``job_id``."""
    if task is None:
        return ctl.state.jobs.get(job_id)
    return next((j for j in ctl.state.jobs.values()
                 if j.array_job_id == job_id and j.array_task_id == task), None)


def _running_steps(ctl, job) -> dict:
    """step id -> (node list, task count) of the job's running steps."""
    out: dict = {}
    if job.state != "RUNNING":
        return out
    if job.batch and job.batch_host and not job.completing:
        out["batch"] = (job.batch_host, 1)
    for (jid, sid), s in sorted(ctl.steps.steps.items()):
        if jid == job.job_id:
            out[sid] = (ctl.state.node_list_of(s.nodes), s.ntasks)
    return out


def _lowest(running: dict) -> list:
    """The step sstat shows without a step id: the lowest numbered one running, else the
    batch step (Slurm's batch and extern ids sort after every numbered step)."""
    nums = sorted(s for s in running if isinstance(s, int))
    return nums[:1] or [s for s in ("batch",) if s in running]


def _row(ctl, job, sid, where) -> dict:
    nodes, ntasks = where
    return {"job_id": job.job_id, "array_job_id": job.array_job_id,
            "array_task_id": job.array_task_id, "step_id": sid, "node_list": nodes,
            "ntasks": ntasks, "usage": ctl.usage.running(job.job_id, sid),
            "pids": ctl.usage.pids(job.job_id, sid)}


REQUEST_FIELDS["sstat"] = {"steps": [{"job_id": ID, "task": ID}], "all_steps": BOOL}


@op("sstat")
def sstat_op(ctl, msg, uid, gid):
    """``steps`` items are ``{"job_id": id, "step": "batch"|"extern"|id|absent}``;
    authorization is per item (an answer, not a refusal of the whole request)."""
    for ref in msg.get("steps") or []:
        step = ref.get("step")
        if ref.get("job_id") is None or not (
                step is None or step in ("batch", "extern") or
                (isinstance(step, int) and not isinstance(step, bool) and 0 <= step < 2**32)):
            raise RequestError("Invalid request: steps[] needs a job_id and a step id",
                               "invalid_request")
    return sstat(ctl, msg, uid)
