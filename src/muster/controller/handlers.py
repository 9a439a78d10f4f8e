"""Client operations of musterctld. Each handler validates, authorizes, changes state through
ClusterState (committing before it returns) and answers with a plain dict.

Authorization rule (ARCHITECTURE §4): users act on their own jobs; root, the cluster owner
and configured operators (MusterOperators) act on all; node and partition changes are for
operators only.
"""

from __future__ import annotations

import signal as _signal

from muster.common.errors import AccessDenied, InvalidJobId, RequestError
from muster.controller.scheduling import FitChecker
from muster.controller.state import identity, now
from muster.controller.submit import build_job, expand_io_paths
from muster.lifecycle import job as lifecycle
from muster.model.job import CANCELLED, PENDING, PUBLIC_NAMES, RUNNING, Job

OPS = {}


def op(name):
    def deco(fn):
        OPS[name] = fn
        return fn
    return deco


def _int(v, what="job id") -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v > 2**53:
        raise RequestError(f"Invalid {what}", "invalid_request")
    return v


@op("ping")
def ping(ctl, msg, uid, gid):
    return {"cluster": ctl.cfg.cluster_name, "time": now(), "uid": uid,
            "admin": ctl.is_admin(uid), "stats": dict(ctl.stats),
            "nodes_up": sum(1 for n in ctl.state.nodes.values() if n.connected)}


@op("submit")
def submit(ctl, msg, uid, gid):
    req = msg.get("job")
    st = ctl.state
    ident = identity(uid)
    if req is not None and not isinstance(req, dict):
        raise RequestError("job description must be an object", "invalid_request")
    req = req or {}
    if req.get("priority") is not None and not ctl.is_admin(uid):
        raise AccessDenied()
    job = build_job(req, msg.get("script"), msg.get("env") or {}, ident=ident, cluster=ctl.cfg,
                    now=now(), accounts=st.accounts, qos_names=st.qos_names,
                    fits_ever=FitChecker(st), job_lookup=st.find)
    if req.get("priority") is not None:
        job.priority = req["priority"]
    with st.store.transaction():
        job.job_id = st.take_job_id()
        job.script_id = job.job_id
        if job.pending_tasks:
            job.array_job_id = job.job_id
        expand_io_paths(job)
        st.store.put_script(job.job_id, msg["script"], msg.get("env") or {})
        st.jobs[job.job_id] = job
        st.save(job)
        st.event(job, "submitted", f"by uid {uid}")
    ctl.request_schedule()
    return {"job_id": job.job_id}


# ---- queries -------------------------------------------------------------------------------

def _select(ctl, msg) -> list[Job]:
    ids = msg.get("job_ids")
    jobs = ctl.state.jobs
    if ids:
        wanted = set()
        out = []
        for i in ids:
            _int(i)
            wanted.add(i)
        for j in jobs.values():
            if j.job_id in wanted or (j.array_job_id in wanted):
                out.append(j)
        return out
    return list(jobs.values())


@op("jobs")
def jobs(ctl, msg, uid, gid):
    """Queue records. Optional: ``uids``, ``states`` (job states; COMPLETING matches jobs with
    the completing flag) filter on the controller; ``fields`` projects each record to those
    names (squeue's default formats need ~25 of ~90 fields: 5x less to encode and parse)."""
    sel = _select(ctl, msg)
    users = msg.get("uids")
    if users:
        sel = [j for j in sel if j.uid in users]
    states = msg.get("states")
    if states:
        want = set(states)
        sel = [j for j in sel if j.state in want or (j.completing and "COMPLETING" in want)]
    fields = msg.get("fields")
    if fields is not None:
        if not isinstance(fields, list) or not all(isinstance(f, str) and f in _PUBLIC for f in fields):
            raise RequestError("Invalid field list", "invalid_request")
        fields = list(dict.fromkeys(fields + ["state", "completing", "job_id"]))
    if fields is not None and msg.get("rows"):
        # columnar reply: one list per job instead of a dict (half the bytes to encode/parse)
        si = fields.index("state")
        rows = [[getattr(j, f) for f in fields] for j in sel]
        arr = fields.index("array_task_str") if "array_task_str" in fields else None
        st_i = fields.index("start_time") if "start_time" in fields else None
        for j, row in zip(sel, rows):
            if j.completing:
                row[si] = "COMPLETING"
            if st_i is not None and j.state == PENDING and j.expected_start is not None:
                row[st_i] = j.expected_start
            if arr is not None and j.pending_tasks:
                row[arr] = j.to_record(["array_task_str"])["array_task_str"]
        if msg.get("job_ids") and not rows and not any(ctl.state.find(i) for i in msg["job_ids"]):
            raise InvalidJobId()
        return {"fields": fields, "rows": rows, "now": now()}
    recs = [j.to_record(fields) for j in sel]
    for r in recs:
        if r["completing"]:
            r["state"] = "COMPLETING"
    if msg.get("job_ids") and not recs:
        # finished and purged from memory: Slurm answers "Invalid job id specified"
        found = [ctl.state.find(i) for i in msg["job_ids"]]
        if not any(found):
            raise InvalidJobId()
    if msg.get("events") and len(recs) == 1:
        recs[0]["events"] = ctl.state.store.events_of(recs[0]["job_id"])
    return {"jobs": recs, "now": now()}


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
    items = list(ctl.cfg.raw.items())
    return {"config": items, "now": now(), "path": ctl.cfg.path, "boot_time": ctl.state.boot_time}


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
    for r in recs:
        r["steps"] = sorted(steps.get(r["job_id"], []), key=_step_order)
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
    return (2, int(sid)) if str(sid).isdigit() else (3, 0)


# ---- job control ---------------------------------------------------------------------------

def _targets(ctl, msg, uid) -> list[Job]:
    """Jobs named by ``job_ids`` (with optional ``task`` per id as "A_T") or by filters."""
    st = ctl.state
    out = []
    specs = msg.get("jobs")
    if specs is not None:
        if not isinstance(specs, list) or len(specs) > 100000:
            raise RequestError("jobs must be a list", "invalid_request")
        for spec in specs:
            if not isinstance(spec, dict):
                raise RequestError("bad job reference", "invalid_request")
            jid = _int(spec.get("job_id"))
            task = spec.get("task")
            found = _resolve(st, jid, task)
            if not found:
                raise InvalidJobId(f"Invalid job id {jid}{'_' + str(task) if task is not None else ''}")
            out.extend(found)
    return out


def _resolve(st, jid: int, task) -> list[Job]:
    if task is not None:
        _int(task, "array index")
        for j in st.jobs.values():
            if j.array_job_id == jid and j.array_task_id == task:
                return [j]
        master = st.jobs.get(jid)
        if master is not None and master.pending_tasks and task in master.pending_tasks:
            return [_split_pending(st, master, task)]
        return []
    job = st.jobs.get(jid)
    members = [j for j in st.jobs.values() if j.array_job_id == jid and j is not job]
    if job is None and not members:
        return []
    return ([job] if job else []) + members


def _split_pending(st, master: Job, task: int) -> Job:
    """Address one pending index of an array on its own (e.g. to cancel it)."""
    from muster.model.arrays import compress_indices
    rest = [i for i in master.pending_tasks if i != task]
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


@op("cancel")
def cancel(ctl, msg, uid, gid):
    """Cancel or signal. ``signal``: None = cancel; else a signal number.
    ``scope``: ``all`` (cancel default), ``batch`` (-b), ``full`` (-f), ``steps`` (-s default)."""
    st = ctl.state
    sig = msg.get("signal")
    if sig is not None and (isinstance(sig, bool) or not isinstance(sig, int) or not 0 < sig < 65):
        raise RequestError("Invalid signal", "invalid_request")
    scope = msg.get("scope") or ("all" if sig is None else "steps")
    if scope not in ("all", "batch", "full", "steps"):
        raise RequestError("Invalid scope", "invalid_request")
    with st.store.transaction():
        targets = _targets(ctl, msg, uid)
        targets += _filtered(ctl, msg, uid)
        errors = []
        done = []
        for job in targets:
            try:
                _authorize(ctl, job, uid)
            except AccessDenied as exc:
                errors.append({"job": job.display_id, "code": exc.code, "error": exc.message})
                continue
            if job.terminal and not job.completing:
                if msg.get("jobs") is not None and sig is not None:
                    errors.append({"job": job.display_id, "code": "already_done",
                                   "error": "Job/step already completing or completed"})
                continue
            if sig is None or (sig == _signal.SIGKILL and scope == "all"):
                _cancel_one(ctl, job, uid)
            elif job.state == RUNNING:
                ctl.send_to_node(job.batch_host, {"op": "signal", "job_id": job.job_id,
                                                  "run": job.restarts, "signal": sig,
                                                  "scope": scope})
            elif job.state == PENDING and msg.get("jobs") is not None:
                errors.append({"job": job.display_id, "code": "job_pending",
                               "error": "Job is pending execution"})
                continue
            done.append(job.display_id)
    ctl.request_schedule()
    return {"done": done, "errors": errors}


def _cancel_one(ctl, job: Job, uid: int) -> None:
    st = ctl.state
    if job.state == PENDING:
        lifecycle.cancel_pending(job, by_uid=uid, now=now())
        st.save(job)
        st.event(job, "cancelled", f"by uid {uid} while pending")
        ctl.steps.notify(job)
    elif job.state == RUNNING:
        ctl.kill_running(job, final_state=CANCELLED, by_uid=uid, why="cancel")
        st.event(job, "cancelled", f"by uid {uid}")


def _filtered(ctl, msg, uid) -> list[Job]:
    f = msg.get("filters")
    if not f:
        return []
    if not isinstance(f, dict):
        raise RequestError("filters must be an object", "invalid_request")
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
        if f.get("states") and j.state not in f["states"]:
            continue
        if f.get("nodes") and not (set(f["nodes"]) & {a["node"] for a in j.alloc}):
            continue
        if msg.get("jobs") is not None:
            ids = {s["job_id"] for s in msg["jobs"]}
            if j.job_id not in ids and j.array_job_id not in ids:
                continue
        out.append(j)
    return out


@op("hold")
def hold(ctl, msg, uid, gid):
    admin = ctl.is_admin(uid) and not msg.get("user_hold")
    with ctl.state.store.transaction():
        for job in _targets(ctl, msg, uid):
            _authorize(ctl, job, uid)
            if job.terminal:
                raise RequestError(None, "already_done")
            lifecycle.hold(job, admin=admin)
            ctl.state.save(job)
            ctl.state.event(job, "held", f"by uid {uid}")
    return {}


@op("release")
def release(ctl, msg, uid, gid):
    with ctl.state.store.transaction():
        for job in _targets(ctl, msg, uid):
            _authorize(ctl, job, uid)
            if job.hold == "admin" and not ctl.is_admin(uid):
                raise AccessDenied()
            if job.terminal:
                raise RequestError(None, "already_done")
            lifecycle.release(job, base_priority=1)
            ctl.state.save(job)
            ctl.state.event(job, "released", f"by uid {uid}")
    ctl.request_schedule()
    return {}


@op("requeue")
def requeue(ctl, msg, uid, gid):
    hold_after = bool(msg.get("hold"))
    st = ctl.state
    with st.store.transaction():
        for job in _targets(ctl, msg, uid):
            _authorize(ctl, job, uid)
            if not job.batch:
                raise RequestError(None, "not_batch")
            if not job.requeue:
                raise RequestError(None, "requeue_disabled")
            if job.state == PENDING:
                if hold_after:
                    lifecycle.hold(job, admin=False)
                    st.save(job)
                    continue
                raise RequestError(None, "job_pending")
            if job.state == RUNNING:
                job.requeue_pending = True
                job.requeue_hold = hold_after
                ctl.kill_running(job, final_state=CANCELLED, by_uid=uid, why="requeue")
                st.event(job, "requeue_requested", f"by uid {uid}")
            elif job.terminal and not job.completing:
                prev = lifecycle.requeue(job, now=now(), delay=ctl.requeue_delay, hold=hold_after,
                                         held_desc="job requeued in held state" if hold_after else None)
                st.store.put_run(job.job_id, job.restarts - 1, prev)
                st.jobs[job.job_id] = job
                st.save(job)
                st.event(job, "requeued", f"by uid {uid}")
            else:
                job.requeue_pending = True
                job.requeue_hold = hold_after
                st.save(job)
    ctl.request_schedule()
    return {}


_USER_FIELDS = {"timelimit", "nice", "jobname", "name", "comment", "dependency", "partition",
                "priority", "excnodelist", "reqnodelist", "account", "qos", "numnodes", "starttime",
                "arraytaskthrottle", "requeue"}


@op("update_job")
def update_job(ctl, msg, uid, gid):
    from muster.common.timefmt import parse_time_limit
    changes = msg.get("changes")
    if not isinstance(changes, dict) or not changes:
        raise RequestError("No changes specified", "invalid_request")
    st = ctl.state
    admin = ctl.is_admin(uid)
    with st.store.transaction():
        for job in _targets(ctl, msg, uid):
            _authorize(ctl, job, uid)
            if job.terminal:
                raise RequestError(None, "already_done")
            for key, value in changes.items():
                k = key.lower()
                if k not in _USER_FIELDS:
                    raise RequestError(f"Update of {key} is not supported", "invalid_request")
                if not isinstance(value, str):
                    raise RequestError(f"Invalid value for {key}", "invalid_request")
                if k == "timelimit":
                    try:
                        mins = parse_time_limit(value)
                    except Exception:
                        raise RequestError(None, "invalid_time_limit") from None
                    old = job.time_limit
                    if not admin and (mins is None or (old is not None and mins > old)):
                        raise AccessDenied()
                    job.time_limit = mins
                    job.timelimit_from_partition = False
                    if job.state == RUNNING:
                        job.end_time = None if mins is None else job.start_time + 60 * mins
                        ctl.send_to_node(job.batch_host, {"op": "update_limit", "job_id": job.job_id,
                                                          "run": job.restarts,
                                                          "time_limit_s": None if mins is None else 60 * mins})
                elif k == "nice":
                    n = _parse_int(value, key)
                    if n < 0 and not admin:
                        raise AccessDenied()
                    job.nice = n
                elif k == "priority":
                    if not admin:
                        raise AccessDenied()
                    p = _parse_int(value, key)
                    job.priority = p
                    if p == 0:
                        lifecycle.hold(job, admin=True)
                    elif job.hold:
                        job.hold = None
                        job.reason = "None"
                elif k in ("jobname", "name"):
                    job.name = value[:1024]
                elif k == "comment":
                    job.comment = value[:4096]
                elif k == "numnodes":
                    if job.state != PENDING:
                        raise RequestError(None, "job_pending")
                    lo, _, hi = value.partition("-")
                    job.nodes_min = _parse_int(lo, key)
                    job.nodes_max = _parse_int(hi, key) if hi else None
                    job.num_nodes = job.nodes_min
                elif k == "requeue":
                    job.requeue = value not in ("0", "no", "false")
                else:
                    raise RequestError(f"Update of {key} is not supported yet", "invalid_request")
            st.save(job)
            st.event(job, "updated", f"by uid {uid}: {', '.join(changes)}")
    ctl.request_schedule()
    return {}


def _parse_int(value: str, key: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise RequestError(f"Invalid value for {key}: {value}", "invalid_request") from None


@op("update_node")
def update_node(ctl, msg, uid, gid):
    if not ctl.is_admin(uid):
        raise RequestError(None, "invalid_user")
    names = msg.get("nodes")
    state = (msg.get("state") or "").upper()
    reason = msg.get("reason")
    if not isinstance(names, list) or not names:
        raise RequestError(None, "invalid_nodelist")
    for n in names:
        if n not in ctl.state.nodes:
            raise RequestError(f"Invalid node name specified: {n}", "invalid_nodelist")
    if state not in ("DRAIN", "RESUME", "UNDRAIN", "DOWN", "IDLE"):
        raise RequestError(f"Invalid node state specified: {state}", "invalid_request")
    if state in ("DRAIN", "DOWN") and not reason:
        raise RequestError("You must specify a reason when DOWNING or DRAINING a node. Request denied",
                           "invalid_request")
    user = identity(uid)["user"]
    t = now()
    with ctl.state.store.transaction():
        for name in names:
            node = ctl.state.nodes[name]
            if state == "DRAIN":
                node.drain = True
            elif state == "DOWN":
                ctl.node_failed(node, reason, user=user)
            else:
                node.drain = False
                node.down = False
            if state in ("DRAIN", "DOWN"):
                node.reason, node.reason_user, node.reason_time = reason, user, t
            else:
                node.reason = node.reason_user = node.reason_time = None
            ctl.state.store.put_node(name, node.admin_record())
            ctl.state.event(None, f"node_{state.lower()}", reason or "", node=name)
    ctl.request_schedule()
    return {}


# ---- interactive allocations and job steps (srun, salloc) ----------------------------------

@op("allocate")
def allocate(ctl, msg, uid, gid):
    """Create an allocation without a batch script. The connection it arrives on is its lease."""
    req = msg.get("job")
    if not isinstance(req, dict):
        raise RequestError("job description must be an object", "invalid_request")
    st = ctl.state
    if req.get("priority") is not None and not ctl.is_admin(uid):
        raise AccessDenied()
    job = build_job(req, None, {}, ident=identity(uid), cluster=ctl.cfg, now=now(),
                    accounts=st.accounts, qos_names=st.qos_names, fits_ever=FitChecker(st),
                    job_lookup=st.find, batch=False)
    with st.store.transaction():
        job.job_id = st.take_job_id()
        job.script_id = job.job_id
        expand_io_paths(job)
        st.jobs[job.job_id] = job
        st.save(job)
        st.event(job, "submitted", f"allocation by uid {uid}")
    conn = getattr(ctl, "current_conn", None)
    if conn is not None and msg.get("lease", True):
        jid = job.job_id

        def lost_lease():
            j = st.jobs.get(jid)
            if j is not None and not j.terminal:
                ctl.steps.release(j, j.uid, 0, 9) if j.state == RUNNING else _cancel_one(ctl, j, j.uid)
                st.event(j, "lease_lost", "srun/salloc connection closed")
        conn.on_close.append(lost_lease)
    ctl.request_schedule()
    return {"job_id": job.job_id}


async def wait_alloc(ctl, msg, uid, gid):
    jid = _int(msg.get("job_id"))
    timeout = msg.get("timeout", 60)
    if not isinstance(timeout, (int, float)) or not 0 <= timeout <= 3600:
        raise RequestError("invalid timeout", "invalid_request")
    job = await ctl.steps.wait_alloc(jid, timeout)
    if job is None:
        raise InvalidJobId()
    rec = job.to_record()
    return {"job": rec, "now": now()}


OPS["wait_alloc"] = wait_alloc


@op("release_alloc")
def release_alloc(ctl, msg, uid, gid):
    job = ctl.state.jobs.get(_int(msg.get("job_id")))
    if job is None:
        raise InvalidJobId()
    code, sig = msg.get("exit_code", 0), msg.get("signal", 0)
    if not isinstance(code, int) or not isinstance(sig, int):
        raise RequestError("invalid exit status", "invalid_request")
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
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
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
    if isinstance(sig, bool) or not isinstance(sig, int) or not 0 < sig < 65:
        raise RequestError("Invalid signal", "invalid_request")
    step_id = msg.get("step_id")
    ctl.steps.signal(job, uid, None if step_id is None else _int(step_id), sig)
    return {}


from muster.controller import api_ops  # noqa: E402,F401  (REST/metrics/dashboard ops)
from muster.controller import acct_ops  # noqa: E402,F401  (sacctmgr/sprio/sshare/reservations)


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
