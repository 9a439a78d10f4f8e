"""Client operations of musterctld. Each handler validates, authorizes, changes state through
ClusterState (committing before it returns) and answers with a plain dict.

Authorization rule (ARCHITECTURE §4): users act on their own jobs; root, the cluster owner
and configured operators (MusterOperators) act on all; node and partition changes are for
operators only.

Invariants every handler keeps:

* **Types first.** ``REQUEST_FIELDS`` (muster.controller.opspec) declares the JSON type of
  every top-level field each operation reads (nested objects too); ``op`` checks them before
  the handler runs, so a wrong type is an ``invalid_request`` naming the field, never an
  exception deep in a handler (which the dispatcher could only answer as "internal").
* **A refused request changes nothing.** Handlers that act on several jobs resolve, authorize
  and check all of them before they change any (a pending array index is split off its array
  only then), because a refusal rolls back the store but cannot roll back memory.
"""

from __future__ import annotations

import grp
import logging
import signal as _signal
import weakref
from functools import partial

from muster.common import clock
from muster.common.errors import AccessDenied, InvalidJobId, MusterError, RequestError
from muster.controller import bulk
from muster.controller.opspec import _int, _is_int, op
from muster.controller.scheduling import FitChecker
from muster.controller.state import identity, now
from muster.controller.submit import build_job, check_types, submit_ids
from muster.lifecycle import events, jobfsm
from muster.lifecycle.job import expand_io_paths
from muster.model.alloc import NodeAlloc
from muster.model.job import CANCELLED, PENDING, PUBLIC_NAMES, RUNNING, Job

log = logging.getLogger("musterctld")

@op("ping")
def ping(ctl, msg, uid, gid):
    out = {"cluster": ctl.cfg.cluster_name, "time": now(), "uid": uid,
           "admin": ctl.is_admin(uid), "stats": dict(ctl.stats),
           "nodes_up": sum(1 for n in ctl.state.nodes.values() if n.connected)}
    if msg.get("controllers") and ctl.peers is not None:
        out["controllers"] = ctl.peers.up()
    return out


def _new_job(ctl, req: dict, uid: int, gid: int, *, script, env, batch: bool) -> Job:
    """Validate, authorize and admit a new job (not stored yet): an explicit priority and a
    negative nice are for operators, another uid/gid for root and SlurmUser, and the job
    must fit under MaxJobCount."""
    st = ctl.state
    admin = ctl.is_admin(uid)
    prio = req.get("priority")
    if prio is not None and not admin:
        raise AccessDenied()
    if prio is not None and not (_is_int(prio) and 0 <= prio < 2**32):
        raise RequestError(f"Invalid priority value: {prio!r}"[:80], "invalid_request")
    check_types(req)
    job_uid, job_gid = submit_ids(req, uid, gid, superuser=uid in (0, ctl.owner_uid))
    job = build_job(req, script, env, ident=identity(job_uid, job_gid), cluster=ctl.cfg,
                    now=now(), accounts=st.accounts, qos_names=st.qos_names,
                    fits_ever=FitChecker(st), job_lookup=st.find, batch=batch,
                    privileged=admin)
    if prio is not None:
        job.priority = prio
    admit(ctl, job)
    return job


_FULL_LOGGED = {"at": 0.0}
# Per ClusterState: ids of array masters that may still hold unsplit pending indices. Only a
# submit makes one (and a restart, found by one scan), and once split or purged a master never
# holds pending indices again, so counting jobs costs O(arrays), not O(jobs), per submit.
_MASTERS: weakref.WeakKeyDictionary[object, set[int]] = weakref.WeakKeyDictionary()


def _array_masters(st) -> set[int]:
    got = _MASTERS.get(st)
    if got is None:
        got = _MASTERS[st] = {j.job_id for j in st.jobs.values() if j.pending_tasks}
    return got


def job_count(st) -> int:
    """slurmctld's job_count: every job record in memory (pending, running, and finished
    ones until MinJobAge purges them), an array's unsplit pending indices counted one each."""
    masters = _array_masters(st)
    extra = 0
    for jid in list(masters):
        j = st.jobs.get(jid)
        if j is None or not j.pending_tasks:
            masters.discard(jid)
            continue
        extra += len(j.pending_tasks) - 1
    return len(st.jobs) + extra


def admit(ctl, job: Job) -> None:
    """MaxJobCount: refuse (EAGAIN, which sbatch retries) a job that would take the jobs in
    memory past the limit. Finished jobs count until purged, as in Slurm, so a full queue of
    short jobs frees up MinJobAge after they end."""
    limit = ctl.cfg.max_job_count
    new = len(job.pending_tasks) if job.pending_tasks else 1
    if job_count(ctl.state) + new <= limit:
        return
    t = clock.monotonic()
    if t - _FULL_LOGGED["at"] > 60:  # one line a minute, however hard clients retry
        _FULL_LOGGED["at"] = t
        log.warning("MaxJobCount limit from slurm.conf reached (%d): refusing new jobs", limit)
    raise RequestError(None, "eagain")


@op("submit")
def submit(ctl, msg, uid, gid):
    st = ctl.state
    job = _new_job(ctl, msg.get("job") or {}, uid, gid, script=msg.get("script"),
                   env=msg.get("env") or {}, batch=True)
    with st.store.transaction():
        job.job_id = st.take_job_id()
        job.script_id = job.job_id
        if job.pending_tasks:
            job.array_job_id = job.job_id
            _array_masters(st).add(job.job_id)
        expand_io_paths(job)
        st.store.put_script(job.job_id, msg["script"], msg.get("env") or {})
        st.jobs[job.job_id] = job
        st.save(job)
        st.event(job, "submitted", f"by uid {uid}")
        ctl.diag.submitted(len(job.pending_tasks or ()) or 1)  # sdiag: each array task
    ctl.request_schedule()
    return {"job_id": job.job_id}


# ---- queries -------------------------------------------------------------------------------

def _withdrawn(j: Job) -> bool:
    """A pending index of an array cancelled before it ever ran (split off its array by the
    cancel). slurmctld only clears its bit in the array's record: squeue and scontrol show
    it no more, in any state. Its record stays in the store, so sacct shows it CANCELLED."""
    return (j.state == CANCELLED and j.array_task_id is not None and j.job_id != j.array_job_id
            and not j.alloc and not j.restarts)


def _select(ctl, msg) -> list[Job]:
    """The live jobs a query names (``job_ids``: job or array ids), withdrawn array
    indexes left out."""
    ids = msg.get("job_ids")
    jobs = ctl.state.jobs
    if ids:
        wanted = set()
        for i in ids:
            _int(i)
            wanted.add(i)
        return [j for j in jobs.values()
                if (j.job_id in wanted or j.array_job_id in wanted) and not _withdrawn(j)]
    return [j for j in jobs.values() if not _withdrawn(j)]


def visible_partitions(ctl, uid: int) -> set[str] | None:
    """The partitions ``uid`` sees without squeue's ``-a``: neither Hidden=YES nor closed to
    all its groups by AllowGroups. None: every partition (root and operators). Not access
    control (``-a`` shows the rest): it keeps the queue of partitions a user cannot or need
    not use out of sight, as slurmctld does."""
    if ctl.is_admin(uid):
        return None
    groups: set[str] | None = None
    out = set()
    for name, p in ctl.cfg.partitions.items():
        if p.hidden:
            continue
        if p.allow_groups and "ALL" not in p.allow_groups:
            if groups is None:
                ident = identity(uid)
                groups = {ident["group"]}
                for g in ident["groups"]:
                    try:
                        groups.add(grp.getgrgid(g).gr_name)
                    except KeyError:
                        pass
            if groups.isdisjoint(p.allow_groups):
                continue
        out.add(name)
    return out


@op("jobs")
def jobs(ctl, msg, uid, gid):
    """Queue records. Optional: ``uids``, ``states`` (job states; COMPLETING matches jobs with
    the completing flag) filter on the controller; ``hide`` leaves out jobs none of whose
    partitions the caller sees (visible_partitions: squeue without -a); ``fields`` projects
    each record to those names (squeue's default formats need ~25 of ~90 fields: 5x less to
    encode and parse). ``encoded``: squeue --json's v0.0.40 records, pre-encoded, as the
    reply's last member ``records`` (muster.controller.jobjson), with ``fields``'s columns
    as ``rows`` (the same jobs, in the same order) for the command's own filters."""
    sel = _select(ctl, msg)
    users = msg.get("uids")
    if users:
        sel = [j for j in sel if j.uid in users]
    states = msg.get("states")
    if states:
        want = set(states)
        sel = [j for j in sel if j.state in want or (j.completing and "COMPLETING" in want)]
    if msg.get("hide"):
        seen = visible_partitions(ctl, uid)
        sel = [j for j in sel if seen is None or not seen.isdisjoint(j.partition.split(","))]
    fields = msg.get("fields")
    if fields is not None:
        if not isinstance(fields, list) or not all(isinstance(f, str) and f in _PUBLIC for f in fields):
            raise RequestError("Invalid field list", "invalid_request")
        fields = list(dict.fromkeys(fields + ["state", "completing", "job_id"]))
    if msg.get("encoded"):
        if msg.get("job_ids") and not sel and not any(ctl.state.find(i) for i in msg["job_ids"]):
            raise InvalidJobId()
        out: dict = {"ok": True, "now": now(), "cluster": ctl.cfg.cluster_name}
        if fields is not None:
            out.update(fields=fields, rows=_rows(ctl, sel, fields))
        out["records"] = ctl.state.records.listing(sel)  # last: the command reads it raw
        return out
    if fields is not None and msg.get("rows"):
        rows = _rows(ctl, sel, fields)
        if msg.get("job_ids") and not rows and not any(ctl.state.find(i) for i in msg["job_ids"]):
            raise InvalidJobId()
        return {"fields": fields, "rows": rows, "now": now(), "cluster": ctl.cfg.cluster_name}
    recs = [j.to_record(fields) for j in sel]
    for r in recs:
        if r["completing"]:
            r["state"] = "COMPLETING"
    if msg.get("job_ids") and not recs:
        # finished and purged from memory: Slurm answers "Invalid job id specified"
        found = [ctl.state.find(i) for i in msg["job_ids"]]
        if not any(found):
            raise InvalidJobId()
    if msg.get("events") and len(recs) == 1 and (recs[0]["uid"] == uid or ctl.is_admin(uid)):
        # a job's audit trail is its owner's and the operators' (as the events op)
        recs[0]["events"] = ctl.state.store.events_of(recs[0]["job_id"])
    return {"jobs": recs, "now": now(), "cluster": ctl.cfg.cluster_name}


def _rows(ctl, sel: list[Job], fields: list[str]) -> list[list]:
    """The columnar reply: one list per job instead of a dict (half the bytes to encode and
    parse), each value as the job's record shows it (``fields`` holds ``state``). A job's
    row is built once per set of columns and kept until the job changes (the record cache's
    invariant: every change passes ClusterState.save or .shown): a 10,000-job squeue built
    them all on every call, the loop's largest single cost while a big queue is watched."""
    key = tuple(fields)
    return ctl.state.records.rows(sel, key, partial(row_of, fields=key))


def row_of(job: Job, fields: tuple[str, ...]) -> list:
    """One job's row of :func:`_rows`."""
    row = [getattr(job, f) for f in fields]
    if job.completing:
        row[fields.index("state")] = "COMPLETING"
    if job.state == PENDING and job.expected_start is not None and "start_time" in fields:
        row[fields.index("start_time")] = job.expected_start
    if job.pending_tasks and "array_task_str" in fields:
        row[fields.index("array_task_str")] = job.to_record(["array_task_str"])["array_task_str"]
    return row


@op("nodes")
def nodes(ctl, msg, uid, gid):
    return {"nodes": [n.to_record() for n in ctl.state.nodes.values()], "now": now()}


@op("partitions")
def partitions(ctl, msg, uid, gid):
    out = []
    from muster.common.units import tres_string
    for p in ctl.cfg.partitions.values():
        ns = [ctl.state.nodes[n] for n in p.nodes]
        cpus = sum(n.cpus for n in ns)
        mem = sum(n.mem for n in ns)
        gpus = sum(len(n.gpu_indices) for n in ns)
        out.append({
            "name": p.name, "default": p.default, "state": p.state, "max_time": p.max_time,
            "default_time": p.default_time, "nodes": p.nodes_expr if p.nodes else "",
            "node_names": list(p.nodes), "max_nodes": p.max_nodes, "min_nodes": p.min_nodes,
            "priority_tier": p.priority_tier, "priority_job_factor": p.priority_job_factor,
            "allow_accounts": ",".join(p.allow_accounts) if p.allow_accounts else "ALL",
            "allow_groups": ",".join(p.allow_groups) if p.allow_groups else "ALL",
            "allow_qos": ",".join(p.allow_qos) if p.allow_qos else "ALL",
            "over_subscribe": p.over_subscribe, "total_cpus": cpus, "total_nodes": len(ns),
            "tres": tres_string(cpus, mem, len(ns), cpus, {"gres/gpu": gpus} if gpus else {}),
            "grace_time": p.grace_time, "hidden": p.hidden})
    if msg.get("name"):
        out = [p for p in out if p["name"] == msg["name"]]
    return {"partitions": out, "now": now()}


@op("config")
def config(ctl, msg, uid, gid):
    """Every setting slurmctld reports, in its order, with the running configuration's
    value or its default (muster.config.showconf: only those keys, never another line of
    the file)."""
    from muster import SLURM_COMPAT_VERSION
    from muster.config.showconf import show_config_items
    from muster.controller.diag import live_config
    st = ctl.state
    items = show_config_items(ctl.cfg, boot_time=st.boot_time, next_job_id=st.next_id,
                              version=SLURM_COMPAT_VERSION)
    items = live_config(ctl, items)  # SlurmctldDebug, DebugFlags as setdebug* left them
    return {"config": items, "now": now(), "path": ctl.cfg.path, "boot_time": st.boot_time}


@op("acct")
def acct(ctl, msg, uid, gid):
    st = ctl.state
    ids = msg.get("job_ids") or None
    if ids:
        for i in ids:
            _int(i)
    all_users = bool(msg.get("all_users")) or ctl.is_admin(uid) and not msg.get("uids")
    uids = msg.get("uids")
    recs = st.store.query_jobs(job_ids=None if ids is None else list(ids),
                               end_after=msg.get("start") if not ids else None)
    # prefer the in-memory version (fresher than nothing, identical after commit)
    live = st.jobs
    recs = [live[r["job_id"]].to_record() if r["job_id"] in live else
            {k: v for k, v in r.items() if k in _PUBLIC} for r in recs]
    if uids:
        recs = [r for r in recs if r["uid"] in uids]
    elif not all_users:
        recs = [r for r in recs if r["uid"] == uid]
    end = msg.get("end")
    if end is not None and not ids:
        recs = [r for r in recs if r["submit_time"] <= end]
    steps = st.store.steps_of([r["job_id"] for r in recs])
    usage = st.store.usage_of([r["job_id"] for r in recs])
    for r in recs:
        r["steps"] = sorted(steps.get(r["job_id"], []), key=_step_order)
        for s in r["steps"]:  # final usage statistics (controller.usage), once ended
            u = usage.get(r["job_id"], {}).get(str(s.get("step_id")))
            if u is not None and s.get("end_time"):
                s["usage"] = u
    if msg.get("duplicates"):
        runs = st.store.runs_of([r["job_id"] for r in recs])
        extra_rows = []
        for r in recs:
            for prev in runs.get(r["job_id"], []):
                prev["steps"] = []
                extra_rows.append(prev)
        recs = extra_rows + recs
    return {"jobs": recs, "now": now(), "cluster": ctl.cfg.cluster_name}


_PUBLIC = set(PUBLIC_NAMES)


def _step_order(step: dict):
    sid = step.get("step_id")
    if sid == "batch":
        return (0, 0)
    if sid == "extern":
        return (1, 0)
    return (2, int(str(sid))) if str(sid).isdigit() else (3, 0)


# ---- job control ---------------------------------------------------------------------------

def _refs(ctl, msg) -> list[tuple[Job, int | None]]:
    """The jobs named by ``jobs`` (``{"job_id", "task"}`` each), changing nothing: a pair
    ``(job, None)`` is that job, ``(master, task)`` a pending index of an array still inside
    its master. An unknown id raises InvalidJobId before anything is touched."""
    st = ctl.state
    out: dict[tuple[int, int | None], tuple[Job, int | None]] = {}
    arrays = _ArrayIndex(st)
    for spec in msg.get("jobs") or []:
        jid, task = spec.get("job_id"), spec.get("task")
        if jid is None:
            raise RequestError("Invalid request: a job reference needs a job_id", "invalid_request")
        found = _resolve(st, jid, task, arrays)
        if not found:
            raise InvalidJobId(f"Invalid job id {jid}{'_' + str(task) if task is not None else ''}")
        for job, t in found:
            out.setdefault((job.job_id, t), (job, t))
    return list(out.values())


class _ArrayIndex:
    """The jobs of each array (by ``array_job_id``), built on first use by one pass over the
    jobs: a request naming n jobs costs one pass, not n (releasing 10,000 held jobs in one
    request scanned the queue 10,000 times: ~3 s on the loop)."""

    __slots__ = ("_st", "_by_array")

    def __init__(self, st):
        self._st = st
        self._by_array: dict[int, list[Job]] | None = None

    def members(self, array_job_id: int) -> list[Job]:
        if self._by_array is None:
            self._by_array = {}
            for j in self._st.jobs.values():
                if j.array_job_id is not None:
                    self._by_array.setdefault(j.array_job_id, []).append(j)
        return self._by_array.get(array_job_id, [])


def _resolve(st, jid: int, task: int | None,
             arrays: _ArrayIndex | None = None) -> list[tuple[Job, int | None]]:
    members = (arrays or _ArrayIndex(st)).members(jid)
    if task is not None:
        for j in members:
            if j.array_task_id == task:
                return [(j, None)]
        master = st.jobs.get(jid)
        if master is not None and master.pending_tasks and task in master.pending_tasks:
            return [(master, task)]
        return []
    job = st.jobs.get(jid)
    return [(j, None) for j in ([job] if job else []) + [j for j in members if j is not job]]


def _ref_id(job: Job, task: int | None) -> str:
    return job.display_id if task is None else f"{job.array_job_id or job.job_id}_{task}"


def _materialize(st, refs: list[tuple[Job, int | None]]) -> list[Job]:
    """The jobs to act on, once the request is known to be allowed: each pending index
    named on its own is split off its array first (Slurm gives it its own record)."""
    return [job if task is None else _split_pending(st, job, task) for job, task in refs]


def _prepare(ctl, msg, check) -> list[Job]:
    """Resolve the request's jobs, run ``check(job)`` on every one (it raises to refuse the
    whole request, before any job changed), then materialize them."""
    refs = _refs(ctl, msg)
    for job, _task in refs:
        check(job)
    return _materialize(ctl.state, refs)


def _still(ctl, check, job: Job) -> bool:
    """Whether ``job``, checked when its request came, still passes ``check`` (a later slice
    of a request naming many jobs: controller.bulk) and is still the one in memory."""
    if ctl.state.jobs.get(job.job_id) is not job:
        return False
    try:
        check(job)
    except MusterError:
        return False
    return True


def _split_pending(st, master: Job, task: int) -> Job:
    """Address one pending index of an array on its own (e.g. to cancel it)."""
    from muster.model.arrays import compress_indices
    rest = [i for i in master.pending_tasks or () if i != task]
    if not rest:
        master.pending_tasks = None
        master.array_task_id = task
        master.array_task_str = None
        expand_io_paths(master)
        return master
    t = master.copy(job_id=st.take_job_id(), array_task_id=task, pending_tasks=None,
                    array_task_str=None)
    expand_io_paths(t)
    master.pending_tasks = rest
    master.array_task_str = compress_indices(rest)
    st.jobs[t.job_id] = t
    st.save(master)
    st.save(t)
    return t


def _authorize(ctl, job: Job, uid: int) -> None:
    if job.uid != uid and not ctl.is_admin(uid):
        raise AccessDenied()


def _not_done(job: Job) -> None:
    if job.terminal:
        raise RequestError(None, "already_done")


@op("cancel")
def cancel(ctl, msg, uid, gid):
    """Cancel or signal. ``signal``: None = cancel; else a signal number.
    ``scope``: ``all`` (cancel default), ``batch`` (-b), ``full`` (-f), ``steps`` (-s default).
    Jobs the caller may not touch are reported in ``errors`` (as scancel prints them); an
    unknown job id refuses the whole request. ``steps`` instead of ``jobs``: those steps
    alone, whatever the scope (:func:`_cancel_steps`)."""
    st = ctl.state
    sig = msg.get("signal")
    if sig is not None and not 0 < sig < 65:
        raise RequestError("Invalid signal", "invalid_request")
    scope = msg.get("scope") or ("all" if sig is None else "steps")
    if scope not in ("all", "batch", "full", "steps"):
        raise RequestError("Invalid scope", "invalid_request")
    if msg.get("steps") is not None:
        return _cancel_steps(ctl, msg, uid, sig)
    errors: list[dict] = []
    done: list[str] = []

    def targets() -> list[Job]:
        allowed = []
        for job, task in _refs(ctl, msg):
            if job.uid != uid and not ctl.is_admin(uid):
                exc = AccessDenied()
                errors.append({"job": _ref_id(job, task), "code": exc.code, "error": exc.message})
            else:
                allowed.append((job, task))
        found = _materialize(st, allowed)
        for job in _filtered(ctl, msg):
            try:
                _authorize(ctl, job, uid)
            except AccessDenied as exc:
                errors.append({"job": job.display_id, "code": exc.code, "error": exc.message})
                continue
            found.append(job)
        return list(dict.fromkeys(found))

    def one(job: Job) -> None:  # inside a commit; terminations leave after it
        if job.terminal and not job.completing:
            if msg.get("jobs") is not None and sig is not None:
                errors.append({"job": job.display_id, "code": "already_done",
                               "error": "Job/step already completing or completed"})
            return
        if sig is None or (sig == _signal.SIGKILL and scope == "all"):
            _cancel_one(ctl, job, uid)
        elif job.state == RUNNING:
            ctl.steps.signal_job(job, sig, scope)  # steps / batch shell / both (steps.py)
        elif job.state == PENDING and msg.get("jobs") is not None:
            errors.append({"job": job.display_id, "code": "job_pending",
                           "error": "Job is pending execution"})
            return
        done.append(job.display_id)

    def finish() -> dict:
        ctl.request_schedule()
        return {"done": done, "errors": errors}
    return bulk.each_job(ctl, targets, one, finish)


def _cancel_steps(ctl, msg, uid, sig):
    """``steps`` (J[_T].S references): those steps alone, never their jobs; a request names
    steps or jobs, not both (an unknown job id refuses a whole job request, steps report
    one by one). ``filters`` only narrow the named steps' jobs (controller.stepkill)."""
    from muster.controller import stepkill
    if msg.get("jobs") is not None:
        raise RequestError("Invalid request: steps and jobs in one cancel", "invalid_request")
    if any(r.get("job_id") is None or r.get("step_id") is None for r in msg["steps"]):
        raise RequestError("Invalid request: a step reference needs job_id and step_id",
                           "invalid_request")
    keep = {j.job_id for j in _filtered(ctl, {"filters": msg["filters"]})} \
        if msg.get("filters") else None
    with ctl.state.store.transaction():
        return stepkill.cancel_steps(ctl, msg["steps"], uid, sig, keep)


def _cancel_one(ctl, job: Job, uid: int) -> None:
    """Cancel a pending or running job: the job machine decides (``Cancel``), the applier
    commits and then terminates its processes / wakes its srun."""
    if job.state in (PENDING, RUNNING):
        try:
            ctl.applier.job(job, events.Cancel(uid), now())
        except jobfsm.Refused:
            pass  # already completing: its end is decided


def _filtered(ctl, msg) -> list[Job]:
    """Unfinished jobs matching every filter (scancel -u/-n/-p/-A/-q/-t/-w), and the named
    jobs when both are given."""
    f = msg.get("filters")
    if not f:
        return []
    ids = {s.get("job_id") for s in msg["jobs"]} if msg.get("jobs") is not None else None
    states = set(f.get("states") or ())
    nodes = set(f.get("nodes") or ())
    out = []
    for j in ctl.state.jobs.values():
        if j.terminal:
            continue
        if f.get("uid") is not None and j.uid != f["uid"]:
            continue
        if f.get("name") and j.name != f["name"]:
            continue
        if f.get("partition") and f["partition"] not in j.partition.split(","):
            continue
        if f.get("account") and j.account != f["account"]:
            continue
        if f.get("qos") and j.qos != f["qos"]:
            continue
        if states and j.state not in states:
            continue
        if nodes and not (nodes & {a.node for a in j.alloc}):
            continue
        if ids is not None and j.job_id not in ids and j.array_job_id not in ids:
            continue
        out.append(j)
    return out


@op("hold")
def hold(ctl, msg, uid, gid):
    admin = ctl.is_admin(uid) and not msg.get("user_hold")

    def check(job):
        _authorize(ctl, job, uid)
        _not_done(job)
    return bulk.each_job(ctl, partial(_prepare, ctl, msg, check),
                         lambda job: ctl.applier.job(job, events.Hold(uid, admin), now()),
                         dict, partial(_still, ctl, check))


@op("release")
def release(ctl, msg, uid, gid):
    def check(job):
        _authorize(ctl, job, uid)
        if job.hold == "admin" and not ctl.is_admin(uid):
            raise AccessDenied()
        _not_done(job)
    # the scheduling pass is the machine's effect
    return bulk.each_job(ctl, partial(_prepare, ctl, msg, check),
                         lambda job: ctl.applier.job(job, events.Release(uid, base_priority=1),
                                                     now()),
                         dict, partial(_still, ctl, check))


@op("requeue")
def requeue(ctl, msg, uid, gid):
    hold_after = bool(msg.get("hold"))
    st = ctl.state

    def check(job):
        _authorize(ctl, job, uid)
        if not job.batch:
            raise RequestError(None, "not_batch")
        if not job.requeue:
            raise RequestError(None, "requeue_disabled")
        if job.state == PENDING and not hold_after:
            raise RequestError(None, "job_pending")
    t = now()
    with ctl.applier.transaction():  # one commit; terminations leave after it
        for job in _prepare(ctl, msg, check):
            if job.terminal and not job.completing:
                st.jobs[job.job_id] = job  # back in memory (it may have aged out)
            # PENDING: held; RUNNING: killed as REQUEUED, requeued when its processes are
            # gone; finished: back to the queue now; completing: requeued when it ends
            ctl.applier.job(job, events.Requeue(uid, hold_after), t)
    ctl.request_schedule()
    return {}


@op("update_job")
def update_job(ctl, msg, uid, gid):
    """scontrol update job (rules and invariants: muster.controller.jobupdate). Every change
    is parsed and every job planned before any job changes, so a refusal leaves all of them
    as they were. Another user's job is "Access/permission denied", as for every other job
    action here (slurmctld 22.05 answers "Invalid user id" for this one). An array id
    names its pending tasks and the tasks still running: a change only pending jobs take is
    made to the pending ones, and each running task is reported in ``errors`` with Slurm's
    message (as Slurm reports a job array's tasks one by one)."""
    from muster.controller import jobupdate
    t = now()
    changes = jobupdate.parse_changes(msg.get("changes"), t)
    if not msg.get("jobs"):
        raise RequestError("No job id specified", "invalid_request")
    admin = ctl.is_admin(uid)
    st = ctl.state
    plans, errors = [], []
    for job, task, whole in _update_targets(ctl, msg):
        if job.uid != uid and not admin:
            raise AccessDenied()
        if whole and job.terminal:
            continue
        try:
            _not_done(job)
            plans.append((job, task, jobupdate.plan(ctl, job, changes, admin, t)))
        except RequestError as exc:
            if not whole or exc.code not in jobupdate.STATE_CODES:
                raise
            errors.append({"job": _ref_id(job, task), "code": exc.code, "error": exc.message})
    if not plans:
        raise RequestError(errors[0]["error"], errors[0]["code"]) if errors else \
            RequestError(None, "already_done")
    detail = jobupdate.event_detail(uid, changes)
    with st.store.transaction():
        for job, task, plan in plans:
            target = job if task is None else _split_pending(st, job, task)
            plan.apply(target)
            st.save(target)
            st.event(target, "updated", detail)
    ctl.request_schedule()
    return {"errors": errors}


def _update_targets(ctl, msg) -> list[tuple[Job, int | None, bool]]:
    """(job, pending index or None, named as a whole array) for each job the request names,
    each once; an unknown id raises InvalidJobId before anything is touched."""
    out: dict = {}
    arrays = _ArrayIndex(ctl.state)
    for spec in msg["jobs"]:
        jid, task = spec.get("job_id"), spec.get("task")
        if jid is None:
            raise RequestError("Invalid request: a job reference needs a job_id", "invalid_request")
        found = _resolve(ctl.state, jid, task, arrays)
        if not found:
            raise InvalidJobId(f"Invalid job id {jid}{'_' + str(task) if task is not None else ''}")
        whole = task is None and any(j.array_job_id == jid for j, _t in found)
        for job, t in found:
            out.setdefault((job.job_id, t), (job, t, whole))
    return list(out.values())


@op("update_node")
def update_node(ctl, msg, uid, gid):
    if not ctl.is_admin(uid):
        raise RequestError(None, "invalid_user")
    names = msg.get("nodes")
    state = (msg.get("state") or "").upper()
    reason = msg.get("reason")
    if not names:
        raise RequestError(None, "invalid_nodelist")
    for n in names:
        if n not in ctl.state.nodes:
            raise RequestError(f"Invalid node name specified: {n[:64]}", "invalid_nodelist")
    if state not in ("DRAIN", "RESUME", "UNDRAIN", "DOWN", "IDLE"):
        raise RequestError(f"Invalid node state specified: {state[:64]}", "invalid_request")
    if state in ("DRAIN", "DOWN") and not reason:
        raise RequestError("You must specify a reason when DOWNING or DRAINING a node. Request denied",
                           "invalid_request")
    if reason is not None and len(reason) > 1024:
        raise RequestError("Reason too long (at most 1024 characters)", "invalid_request")
    user = identity(uid)["user"]
    event = (events.NodeDrain(reason, user) if state == "DRAIN"
             else events.NodeDown(reason, user) if state == "DOWN" else events.NodeResume())
    t = now()
    with ctl.applier.transaction():  # one commit; a DOWN node's jobs fail in it
        for name in names:
            ctl.applier.node(ctl.state.nodes[name], event, t)
    return {}


# ---- interactive allocations and job steps (srun, salloc) ----------------------------------

@op("allocate")
def allocate(ctl, msg, uid, gid):
    """Create an allocation without a batch script. The connection it arrives on is its lease
    (muster.controller.leases); ``lease: false`` makes one that no connection holds."""
    req = msg.get("job")
    if req is None:
        raise RequestError("job description must be an object", "invalid_request")
    st = ctl.state
    job = _new_job(ctl, req, uid, gid, script=None, env={}, batch=False)
    conn = getattr(ctl, "current_conn", None)
    job.leased = conn is not None and msg.get("lease") is not False
    with st.store.transaction():
        job.job_id = st.take_job_id()
        job.script_id = job.job_id
        expand_io_paths(job)
        st.jobs[job.job_id] = job
        st.save(job)
        st.event(job, "submitted", f"allocation by uid {uid}")
        ctl.diag.submitted()
    if job.leased:
        ctl.steps.leases.hold(job.job_id, conn)
    ctl.request_schedule()
    if msg.get("immediate"):
        return _start_at_once(ctl, job.job_id, uid)
    return {"job_id": job.job_id}


@op("lease")
def lease(ctl, msg, uid, gid):
    """srun/salloc re-attaches its allocation's lease to this connection, after its first
    connection broke (a controller restart or take-over): leases.Leases.attach."""
    job = ctl.state.jobs.get(_int(msg.get("job_id")))
    if job is None:
        raise InvalidJobId()
    ctl.steps.leases.attach(job, uid, getattr(ctl, "current_conn", None))
    return {"state": job.state}


def _start_at_once(ctl, jid: int, uid: int) -> dict:
    """srun/salloc --immediate: one scheduling pass now, as slurmctld tries an immediate
    job at once. An allocation still pending after it ends FAILED (exit code 1, no nodes)
    and the reply says why (``busy``: ESLURM_NODES_BUSY's errstr), so no job is left behind."""
    ctl.schedule_once()
    job = ctl.state.jobs.get(jid)
    if job is None or job.state != PENDING:
        return {"job_id": jid}
    try:
        ctl.applier.job(job, events.ReleaseAllocation(uid, 1, 0, immediate=True), now())
    except jobfsm.Refused:
        pass
    return {"job_id": jid, "busy": RequestError(None, "nodes_busy").message}


@op("wait_alloc")
async def wait_alloc(ctl, msg, uid, gid):
    """Wait (at most ``timeout`` s) until an interactive allocation leaves PENDING. Batch
    jobs are refused: nothing would wake the waiter when they start."""
    jid = _int(msg.get("job_id"))
    timeout = msg.get("timeout")
    if timeout is None:
        timeout = 60
    if not 0 <= timeout <= 3600:
        raise RequestError("invalid timeout", "invalid_request")
    pending = ctl.state.jobs.get(jid)
    if pending is not None and pending.batch:
        raise RequestError("not an interactive allocation", "invalid_request")
    job = await ctl.steps.wait_alloc(jid, timeout)
    if job is None:
        raise InvalidJobId()
    rec = job.to_record()
    return {"job": rec, "now": now()}


@op("release_alloc")
def release_alloc(ctl, msg, uid, gid):
    job = ctl.state.jobs.get(_int(msg.get("job_id")))
    if job is None:
        raise InvalidJobId()
    code, sig = msg.get("exit_code") or 0, msg.get("signal") or 0
    ctl.steps.release(job, uid, max(0, min(code, 255)), max(0, min(sig, 64)))
    return {}


@op("step_create")
def step_create(ctl, msg, uid, gid):
    job = ctl.state.jobs.get(_int(msg.get("job_id")))
    if job is None:
        raise InvalidJobId()
    req = msg.get("step")
    if not isinstance(req, dict):
        raise RequestError("step description must be an object", "invalid_request")
    argv = req.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and "\0" not in a for a in argv):
        raise RequestError("step needs a command", "invalid_request")
    env = req.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                            for k, v in env.items()):
        raise RequestError("environment must map names to strings", "invalid_request")
    conn = getattr(ctl, "current_conn", None)
    host = getattr(conn, "peer_host", None) or "127.0.0.1"
    return ctl.steps.create(job, uid, req, host)


@op("step_signal")
def step_signal(ctl, msg, uid, gid):
    job = ctl.state.jobs.get(_int(msg.get("job_id")))
    if job is None:
        raise InvalidJobId()
    sig = msg.get("signal")
    if sig is None or not 0 < sig < 65:
        raise RequestError("Invalid signal", "invalid_request")
    step_id = msg.get("step_id")
    ctl.steps.signal(job, uid, None if step_id is None else _int(step_id), sig)
    return {}




@op("step_status")
def step_status(ctl, msg, uid, gid):
    """Whether a step still runs, and which of its nodes are DOWN (srun asks when it loses a
    node's I/O connection: only the controller decides that a node has failed)."""
    jid = _int(msg.get("job_id"))
    sid = _int(msg.get("step_id"), "step id")
    job = ctl.state.jobs.get(jid)
    step = ctl.steps.steps.get((jid, sid))
    down = []
    if step is not None:
        down = [n for n in step.nodes if ctl.state.nodes[n].down]
    running = step is not None and job is not None and job.state == RUNNING and not job.completing
    return {"running": running, "down_nodes": down,
            "job_state": job.state if job is not None else None}


@op("steps")
def steps(ctl, msg, uid, gid):
    """Running job steps (scontrol show step, squeue -s), as slurmctld lists them: the batch
    step of every running batch job, then each srun step, by job and step id. ``job_ids``
    (a job or array id each) filters; when none of them is a job the controller still holds,
    InvalidJobId (slurm_get_job_steps' answer), whereas a known job without steps gives an
    empty list. Records: docs/records.md, "Step info"."""
    ids = set(msg.get("job_ids") or ())
    st = ctl.state
    if ids and not any(_int(i) in st.jobs for i in ids) \
            and not any(j.array_job_id in ids for j in st.jobs.values()):
        raise InvalidJobId()

    def wanted(job) -> bool:
        return not ids or job.job_id in ids or job.array_job_id in ids
    out = [_batch_step_info(j) for j in st.jobs.values()
           if j.batch and j.state == RUNNING and not j.completing and j.batch_host and wanted(j)]
    for step in ctl.steps.steps.values():
        job = st.jobs.get(step.job_id)
        if job is not None and wanted(job):
            out.append(_step_info(st, job, step))
    out.sort(key=lambda r: (r["job_id"], -1 if r["step_id"] == "batch" else r["step_id"]))
    return {"steps": out, "now": now()}


def _step_base(job: Job) -> dict:
    return {"job_id": job.job_id, "array_job_id": job.array_job_id,
            "array_task_id": job.array_task_id, "uid": job.uid, "user": job.user,
            "partition": job.partition, "time_limit": None}


def _batch_step_info(job: Job) -> dict:
    """The batch step: the script's one task on the first node, with that node's share."""
    from muster.common.units import tres_string
    a = next((a for a in job.alloc if a.node == job.batch_host), None) \
        or NodeAlloc(job.batch_host or "", 0, 0)
    gpus = len(a.gpus)
    return {**_step_base(job), "step_id": "batch", "name": "batch", "state": RUNNING,
            "start_time": job.start_time, "node_list": job.batch_host, "num_nodes": 1,
            "num_cpus": a.cpus, "num_tasks": 1, "dist": None, "resv_ports": None,
            "tres": tres_string(a.cpus, a.mem, 1, None, {"gres/gpu": gpus} if gpus else {}),
            "srun_host": None, "srun_pid": 0}


def _step_info(st, job: Job, step) -> dict:
    """An srun step: its layout's CPUs and GPUs, the job's memory on its nodes, its port."""
    from muster.common.units import tres_string
    cpus = sum(ns.cpus for ns in step.layout.nodes)
    gpus = sum(len(ns.gpus) for ns in step.layout.nodes)
    mem = sum(a.mem for a in job.alloc if a.node in step.nodes)
    return {**_step_base(job), "step_id": step.step_id, "name": step.name, "state": step.state,
            "start_time": step.start_time, "node_list": st.node_list_of(step.nodes),
            "num_nodes": len(step.nodes), "num_cpus": cpus, "num_tasks": step.ntasks,
            "dist": step.dist, "resv_ports": str(step.port),
            "tres": tres_string(cpus, mem, len(step.nodes), None,
                                {"gres/gpu": gpus} if gpus else {}),
            "srun_host": step.srun_host, "srun_pid": step.srun_pid}
