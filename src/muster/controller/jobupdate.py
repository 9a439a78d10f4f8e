"""``scontrol update job``: the fields Slurm lets a user or an operator change, with Slurm's
rules (slurmctld's ``_update_job``, 22.05/23.02) and Slurm's messages.

Who may change what:

* The job's request — Partition, Account, QOS, ReqNodeList/ExcNodeList, Gres, NumNodes,
  NumTasks, CPUsPerTask, MinCPUsNode, MinMemoryNode/CPU, TimeMin, Dependency, StartTime,
  Reservation, WCKey, Contiguous — only while it is PENDING ("Job is no longer pending
  execution"). Name, Comment, Nice, Priority, Requeue and the time limit also while it
  runs. Shrinking a running job
  (NumNodes, NodeList) is "Requested operation not supported on this system".
* TimeLimit: lowering is everyone's; a pending job's limit may be raised by its owner up to
  its partition's MaxTime; anything more (raising a running job's limit, going past MaxTime)
  is for operators ("Access/permission denied"). ``+N``/``-N`` change it relatively.
* Operators only: a negative Nice, raising Priority, OverSubscribe/Shared, TasksPerNode,
  Deadline, and Contiguous — except that the owner may clear Contiguous where it is set
  (slurmctld: ``operator || old > new``; anything else is "Access/permission denied").
  MinCPUsNode and WCKey are the owner's to set (the new MinCPUsNode is checked as a
  submission's: no node with that many CPUs is "Requested node configuration is not
  available"). Priority=0 holds the job (the owner's own hold when the owner sets
  it); a held job gets a new priority only by being released ("Job is in held state…").
* Keys match as scontrol matches them: any case, abbreviated down to Slurm's minimum length
  (``TimeL=5``), tried in scontrol's order.

Invariants:

* ``parse_changes`` reads every key and value, ``plan`` checks one job and works out its new
  values without changing anything, ``Plan.apply`` cannot refuse: the caller plans every job
  before it applies any, so a refusal leaves every job as it was.
* A change to the job's request is merged into ``submit.job_request(job)`` and the whole
  request goes through ``submit.build_job`` — the partition, account/QOS and reservation
  access, limits, node lists, node-count and GRES checks of a submission — and only then does
  the rebuilt shape replace the job's. The job keeps its id, submit time (its queue age), its
  hold, dependencies and priority.
* Features (``--constraint``), MailType/MailUser, Deadline, MinCPUsNode and Contiguous go
  through the same rebuild (``placement_options`` checks them as at submit); placement
  honours the last two (``muster.core.placement``). WCKey is a label: stored as given, an
  empty value clears it.
"""

from __future__ import annotations

import re
from typing import Any

from muster.common.errors import AccessDenied, InputError, RequestError
from muster.common.timefmt import parse_datetime, parse_time_limit
from muster.controller import submit
from muster.controller.scheduling import FitChecker
from muster.controller.state import identity
from muster.lifecycle import job as lifecycle
from muster.model.job import PENDING, RUNNING, Job

# A whole array may be named while some of its tasks run: those refuse a request-only change
# with one of these, and the others are still changed (Slurm reports each task's error).
STATE_CODES = frozenset({"job_not_pending", "not_supported", "already_done"})

# Job attributes that make up the request's shape: copied from the rebuilt job after a change
# of the request (see job_request / build_job in muster.controller.submit).
SHAPE = ("partition", "partitions_req", "account", "qos", "time_limit", "time_min",
         "timelimit_from_partition", "nodes_min", "nodes_max", "num_nodes", "num_tasks",
         "ntasks_set", "ntasks_given", "cpus_per_task", "cpus_per_task_set", "ntasks_per_node",
         "num_cpus", "mem_per_node", "mem_per_cpu", "mem_per_gpu", "mem_all", "gpus_per_node",
         "gpu_type", "gpus", "gpus_per_task", "tres_per_node", "req_nodes", "exc_nodes",
         "exclusive", "tres_req", "features", "cpus_per_gpu", "deadline", "mail_type",
         "mail_user", "min_cpus_node", "contiguous")

MAX_DEP_SCAN = 10_000  # jobs visited looking for a dependency cycle


def _bad(key: str, value: str) -> RequestError:
    return RequestError(f"Invalid {key} value: {value}"[:160], "invalid_request")


class Plan:
    """One job's checked update: what ``apply`` will do to it (or to the record of a pending
    array index split off it: the values are absolute, so applying twice changes nothing)."""

    __slots__ = ("ctl", "job", "admin", "now", "patch", "effects", "time_limit", "time_min",
                 "resv")

    def __init__(self, ctl, job: Job, admin: bool, now: int):
        self.ctl, self.job, self.admin, self.now = ctl, job, admin, now
        self.patch: dict = {}  # changes of the submit request (re-validated by build_job)
        self.effects: list = []  # fn(job) applied in order
        # _UNSET, or the new value (minutes, None: unlimited; a reservation name)
        self.time_limit: Any = _UNSET
        self.time_min: Any = _UNSET
        self.resv: Any = _UNSET

    def pending(self) -> None:
        if self.job.state != PENDING:
            raise RequestError(None, "job_not_pending")

    def operator(self) -> None:
        if not self.admin:
            raise AccessDenied()

    def set(self, attr: str, value) -> None:
        self.effects.append(lambda j: setattr(j, attr, value))

    def apply(self, job: Job) -> None:
        for fn in self.effects:
            fn(job)


_UNSET = object()


# ---- parsers: value text -> typed value (RequestError when malformed) ----------------------

def _p_text(key: str, value: str, now: int):
    submit.check_types({"comment": value})  # the request's string rules (length, NUL)
    return value


def _p_wckey(key, value, now):
    submit.check_types({"wckey": value})
    return value


def _p_name(key, value, now):
    submit.check_types({"name": value})
    return value[:1024]  # as build_job cuts names


def _p_int(key: str, value: str, lo: int = 0, hi: int = 2**32 - 1) -> int:
    v = value.strip()
    if not re.fullmatch(r"[+-]?[0-9]{1,19}", v) or not lo <= int(v) <= hi:
        raise _bad(key, value)
    return int(v)


def _p_nice(key, value, now):
    v = value.strip()
    if not re.fullmatch(r"[+-]?[0-9]{1,19}", v) or abs(int(v)) > submit.NICE_LIMIT:
        raise RequestError(None, "invalid_nice")
    return int(v)


def _p_count(code: str):
    def parse(key, value, now):
        v = value.strip()
        if not re.fullmatch(r"[0-9]{1,10}", v) or not 0 < int(v) <= submit.MAX_JOB_ID:
            raise RequestError(None, code)
        return int(v)
    return parse


def _p_node_range(key, value, now):
    lo, sep, hi = value.strip().partition("-")
    count = _p_count("invalid_node_count")
    nmin = count(key, lo, now)
    nmax = count(key, hi, now) if sep else None
    if nmax is not None and nmax < nmin:
        raise RequestError(None, "invalid_node_count")
    return nmin, nmax


def _p_time_limit(key, value, now):
    """``[+|-]time`` → (op, minutes); minutes None = UNLIMITED."""
    v = value.strip()
    op = {"+": "add", "-": "sub"}.get(v[:1], "set")
    if op != "set":
        v = v[1:]
        if v.strip().upper() in ("UNLIMITED", "INFINITE", "-1"):
            raise RequestError(None, "invalid_time_limit")
    return op, _minutes(v, "invalid_time_limit")


def _minutes(value: str, code: str) -> int | None:
    """A time limit in minutes (None = UNLIMITED), at most submit.MAX_INT (as a submission)."""
    try:
        mins = parse_time_limit(value)
    except InputError:
        raise RequestError(None, code) from None
    if mins is not None and mins > submit.MAX_INT:
        raise RequestError(None, code)
    return mins


def _p_time_min(key, value, now):
    return _minutes(value, "invalid_time_min")


def _epoch(value: str, now: int) -> int:
    try:
        t = parse_datetime(value, now)
    except InputError:
        raise RequestError(None, "invalid_time_value") from None
    if not 0 <= t <= submit.MAX_INT:
        raise RequestError(None, "invalid_time_value")
    return t


def _p_datetime(key, value, now):
    """scontrol's parse_time: a time in the past means now."""
    return max(now, _epoch(value, now))


def _p_deadline(key, value, now):
    return _epoch(value, now)


def _p_yes_no(key, value, now):
    v = value.strip().lower()
    if v in ("yes", "y", "true") or (v.isdigit() and int(v) > 0):
        return True
    if v in ("no", "n", "false") or (v.isdigit() and int(v) == 0):
        return False
    raise _bad(key, value)


def _p_mem(key, value, now):
    from muster.common.units import parse_mem
    try:
        return parse_mem(value)
    except InputError:
        raise _bad(key, value) from None


def _p_gres(key, value, now):
    """The --gres parser of sbatch (muster.common.gresspec: ``gpu[:type][:count][,…]``,
    ``gres:`` prefix allowed); empty or ``none`` clears. Names and counts are then judged by
    build_job, as at submit."""
    from muster.common.gresspec import parse_gres
    if not value.strip():
        return []
    try:
        return parse_gres(value)
    except ValueError:  # GresSpecError
        raise RequestError(None, "invalid_gres") from None


def _p_raw(key, value, now):
    return value


# ---- planners: (plan, value) -> checks, then records the change ----------------------------

def _pl_set(attr: str):
    def plan(p: Plan, v) -> None:
        p.set(attr, v)
    return plan


def _pl_time_limit(p: Plan, v) -> None:
    op, mins = v
    cur = p.job.time_limit
    if op != "set":
        if cur is None or mins is None:
            raise RequestError(None, "invalid_time_limit")
        mins = cur + mins if op == "add" else cur - mins
        if not 0 <= mins <= submit.MAX_INT:  # scontrol: "TimeLimit decrement larger than…"
            raise RequestError(None, "invalid_time_limit")
    p.time_limit = mins


def _pl_time_min(p: Plan, v) -> None:
    p.pending()
    p.time_min = v


def _pl_nice(p: Plan, v) -> None:
    if v < 0:
        p.operator()
    p.set("nice", v)


def _pl_priority(p: Plan, v) -> None:
    job = p.job
    if v == job.priority:
        if v == 0 and p.admin and job.hold != "admin":
            p.effects.append(lambda j: lifecycle.hold(j, admin=True))  # user hold → admin hold
        return
    if job.priority == 0 and job.hold:
        raise RequestError(None, "job_held")
    if v == 0:
        p.pending()
        p.effects.append(lambda j: lifecycle.hold(j, admin=p.admin))
        return
    if not p.admin:
        raise RequestError(None, "prio_reset_fail") if v < job.priority else AccessDenied()

    def set_priority(j: Job) -> None:
        j.priority = v
        j.nice = 0  # Slurm: an explicit priority clears the nice value
    p.effects.append(set_priority)


def _pl_hold(p: Plan, v) -> None:
    """REST API's hold flag (1: the owner's hold, 0: release) in the same atomic request."""
    p.pending()
    if v:
        p.effects.append(lambda j: lifecycle.hold(j, admin=False))
        return
    if p.job.hold == "admin":
        p.operator()
    p.effects.append(lambda j: lifecycle.release(j, base_priority=1))


def _pl_dependency(p: Plan, v) -> None:
    p.pending()
    st = p.ctl.state
    if not v.strip():
        terms, any_, shown = None, False, None
    else:
        terms, any_ = submit.parse_dependency(v, st.find)
        _no_cycle(st, p.job, [t[1] for t in terms if t[1]])
        shown = v

    def set_dep(j: Job) -> None:
        j.dep_terms, j.dep_any, j.dependency = terms, any_, shown
    p.effects.append(set_dep)


def _no_cycle(st, job: Job, targets: list[int]) -> None:
    """Slurm refuses a dependency that leads back to the job ("Circular job dependency"):
    such jobs would wait for each other for ever. Bounded walk over pending jobs' terms."""
    own = {job.job_id, job.array_job_id} - {None}
    seen: set[int] = set()
    todo = list(targets)
    while todo and len(seen) < MAX_DEP_SCAN:
        jid = todo.pop()
        if jid in own:
            raise RequestError(None, "circular_dependency")
        if jid in seen:
            continue
        seen.add(jid)
        dep = st.jobs.get(jid)
        if dep is not None and dep.dep_terms:
            todo.extend(t[1] for t in dep.dep_terms if t[1])


def _pl_begin(p: Plan, t: int) -> None:
    """StartTime: a time now or past makes the job eligible now, keeping its earlier
    eligibility (its priority's age) when it was already eligible."""
    p.pending()
    now = p.now

    def set_begin(j: Job) -> None:
        if t > now:
            j.begin_time = j.eligible_time = t
        else:
            j.begin_time = None
            if j.eligible_time is None or j.eligible_time > now:
                j.eligible_time = now
    p.effects.append(set_begin)


def _pl_throttle(p: Plan, v: int) -> None:
    """ArrayTaskThrottle: the array's limit of running tasks (every record of the array shows
    it; the scheduler reads the master's)."""
    aid = p.job.array_job_id
    if aid is None:
        raise RequestError(None, "invalid_array")
    st = p.ctl.state

    def set_throttle(j: Job) -> None:
        for m in st.array_members(aid):
            if m is not j and m.array_max_tasks != v:
                m.array_max_tasks = v
                st.save(m)
        j.array_max_tasks = v
    p.effects.append(set_throttle)


def _pl_request(field: str, *, operator: bool = False):
    """A field of the submit request: pending jobs only; an empty text means the default."""
    def plan(p: Plan, v) -> None:
        p.pending()
        if operator:
            p.operator()
        p.patch[field] = (v or None) if isinstance(v, str) else v
    return plan


def _pl_req_nodes(p: Plan, v) -> None:
    if p.job.state == RUNNING:
        raise RequestError(None, "not_supported")  # Slurm would shrink the job to them
    _pl_request("nodelist")(p, v)


def _pl_num_nodes(p: Plan, v) -> None:
    nmin, nmax = v
    if p.job.state == RUNNING:
        if nmin == p.job.num_nodes and nmax in (None, nmin):
            return
        raise RequestError(None, "not_supported")  # shrinking a running job
    p.pending()
    p.patch["nodes_min"], p.patch["nodes_max"] = nmin, nmax


def _pl_memory(kind: str):
    def plan(p: Plan, mb: int) -> None:
        p.pending()
        for f in ("mem_per_node", "mem_per_cpu", "mem_per_gpu"):
            p.patch[f] = mb if f == kind else None
    return plan


def _pl_oversubscribe(p: Plan, v: bool) -> None:
    """OverSubscribe/Shared (operators, pending): NO = the job's nodes are its own, which is
    what ``exclusive`` means here and what ``scontrol show job`` prints as OverSubscribe=NO."""
    p.pending()
    p.operator()
    p.patch["exclusive"] = not v


def _pl_contiguous(p: Plan, v: bool) -> None:
    """Slurm: operators may set or clear it, others only clear it where set (setting it, or
    clearing it where it is not set, is "Access/permission denied" for them)."""
    p.pending()
    if v or not p.job.contiguous:
        p.operator()
    p.patch["contiguous"] = v


def _pl_wckey(p: Plan, v: str) -> None:
    p.pending()
    p.set("wckey", v or None)


def _pl_reservation(p: Plan, v: str) -> None:
    p.pending()
    p.resv = v or None
    if v:
        p.patch["reservation"] = v  # access checked by build_job, as at submit


def _pl_deadline(p: Plan, t: int) -> None:
    p.pending()
    p.operator()
    if t < p.now:
        raise RequestError(None, "invalid_time_value")
    p.patch["deadline"] = t


# scontrol's keys, in scontrol's order: (name, shortest abbreviation, parser, planner)
KEYS = (
    ("ArrayTaskThrottle", 10, lambda k, v, n: _p_int(k, v), _pl_throttle),
    ("Comment", 3, _p_text, _pl_set("comment")),
    ("TimeLimit", 5, _p_time_limit, _pl_time_limit),
    ("TimeMin", 5, _p_time_min, _pl_time_min),
    ("Priority", 2, lambda k, v, n: _p_int(k, v, 0, 2**32 - 2), _pl_priority),
    ("Nice", 2, _p_nice, _pl_nice),
    ("CPUsPerTask", 6, _p_count("invalid_cpu_count"), _pl_request("cpus_per_task")),
    ("NumTasks", 8, _p_count("bad_task_count"), _pl_request("ntasks")),
    ("ReqProcs", 8, _p_count("bad_task_count"), _pl_request("ntasks")),
    ("Requeue", 4, _p_yes_no, _pl_set("requeue")),
    ("ReqNodes", 8, _p_node_range, _pl_num_nodes),
    ("NumNodes", 8, _p_node_range, _pl_num_nodes),
    ("TasksPerNode", 2, _p_count("bad_task_count"), _pl_request("ntasks_per_node", operator=True)),
    ("MinCPUsNode", 4, _p_count("invalid_cpu_count"), _pl_request("mincpus")),
    ("MinMemoryNode", 10, _p_mem, _pl_memory("mem_per_node")),
    ("MinMemoryCPU", 10, _p_mem, _pl_memory("mem_per_cpu")),
    ("Partition", 2, _p_raw, _pl_request("partition")),
    ("QOS", 2, _p_raw, _pl_request("qos")),
    ("ReservationName", 3, _p_raw, _pl_reservation),
    ("Name", 2, _p_name, _pl_set("name")),
    ("JobName", 4, _p_name, _pl_set("name")),
    ("WCKey", 1, _p_wckey, _pl_wckey),
    ("OverSubscribe", 2, _p_yes_no, _pl_oversubscribe),
    ("Shared", 2, _p_yes_no, _pl_oversubscribe),
    ("Contiguous", 3, _p_yes_no, _pl_contiguous),
    ("ExcNodeList", 3, _p_raw, _pl_request("exclude")),
    ("NodeList", 8, _p_raw, _pl_req_nodes),
    ("ReqNodeList", 8, _p_raw, _pl_req_nodes),
    ("Features", 1, _p_raw, _pl_request("constraint")),
    ("Gres", 2, _p_gres, _pl_request("gres")),
    ("TresPerNode", 4, _p_gres, _pl_request("gres")),
    ("Account", 1, _p_raw, _pl_request("account")),
    ("Dependency", 1, _p_raw, _pl_dependency),
    ("EligibleTime", 2, _p_datetime, _pl_begin),
    ("StartTime", 2, _p_datetime, _pl_begin),
    ("BeginTime", 5, _p_datetime, _pl_begin),
    ("Deadline", 3, _p_deadline, _pl_deadline),
    ("MailType", 5, _p_raw, _pl_request("mail_type")),
    ("MailUser", 5, _p_raw, _pl_request("mail_user")),
)
_EXACT = {"hold": ("hold", _p_yes_no, _pl_hold)}  # the REST API's hold flag


def _lookup(key: str):
    low = key.lower()
    if low in _EXACT:
        return _EXACT[low]
    for name, shortest, parse, planner in KEYS:
        if len(low) >= shortest and name.lower().startswith(low):
            return name, parse, planner
    return None


class Change:
    __slots__ = ("name", "value", "planner")

    def __init__(self, name: str, value, planner):
        self.name, self.value, self.planner = name, value, planner


def parse_changes(changes, now: int) -> list[Change]:
    """``{"Key": "value", …}`` → parsed changes, or RequestError for the first bad one: an
    unknown key is scontrol's "Update of this parameter is not supported: Key=value".
    ``TimeLimit+``/``TimeLimit-`` keys (``TimeLimit+=30``) are relative changes."""
    if not changes:
        raise RequestError("No changes specified", "invalid_request")
    out = []
    for key, value in changes.items():
        if not isinstance(value, str):
            raise RequestError(f"Invalid value for {key[:64]}", "invalid_request")
        base = key
        if key[-1:] in ("+", "-") and (_lookup(key[:-1]) or ("",))[0] == "TimeLimit":
            base, value = key[:-1], key[-1] + value.lstrip("+-")
        found = _lookup(base)
        if found is None:
            raise RequestError(f"Update of this parameter is not supported: {key}={value}"[:160],
                               "update_not_supported")
        name, parse, planner = found
        out.append(Change(name, parse(name, value, now), planner))
    return out


# ---- planning one job -----------------------------------------------------------------------

def plan(ctl, job: Job, changes: list[Change], admin: bool, now: int) -> Plan:
    """Check ``changes`` against ``job`` and work out its new values; changes nothing.
    RequestError with Slurm's message when a change is refused."""
    p = Plan(ctl, job, admin, now)
    for ch in changes:
        ch.planner(p, ch.value)
    _plan_times(p)
    if p.patch:
        _rebuild(p)
    if p.resv is not _UNSET:
        acc, resv = ctl.state.accounts, p.resv
        if hasattr(acc, "set_extra"):
            p.effects.append(lambda j: acc.set_extra(j.job_id, resv=resv))
    return p


def _plan_times(p: Plan) -> None:
    """TimeLimit and TimeMin together: the limit's permission rule, TimeMin ≤ TimeLimit, and
    a running job's new end (now at the earliest)."""
    job = p.job
    tl = job.time_limit if p.time_limit is _UNSET else p.time_limit
    tmin = job.time_min if p.time_min is _UNSET else p.time_min
    if tmin is not None and tl is not None and tmin > tl and (
            p.time_limit is not _UNSET or p.time_min is not _UNSET):
        raise RequestError(None, "invalid_time_min")
    if p.time_min is not _UNSET:
        p.patch["time_min"] = tmin
    if p.time_limit is _UNSET or tl == job.time_limit:
        return
    lower = tl is not None and (job.time_limit is None or tl < job.time_limit)
    if not (p.admin or lower or _within_max_time(p, tl)):
        raise AccessDenied()
    if job.state == PENDING:
        p.patch["time_limit"] = -1 if tl is None else tl
        return
    p.effects.append(lambda j: _set_running_limit(p.ctl, j, tl, p.now))


def _within_max_time(p: Plan, minutes: int | None) -> bool:
    """A pending job's owner may raise its limit up to the MaxTime of its partition."""
    if p.job.state != PENDING:
        return False
    names = (p.patch.get("partition") or p.job.partition).split(",")
    parts = [p.ctl.cfg.partitions.get(n) for n in names]
    return any(pc is not None and (pc.max_time is None or (
        minutes is not None and minutes <= pc.max_time)) for pc in parts)


def _set_running_limit(ctl, job: Job, minutes: int | None, now: int) -> None:
    """The limit of a running job: its end moves (to now at the earliest, as Slurm does) and
    the batch job's supervisor, which enforces it, is told (the controller times interactive
    allocations and the steps of every job from ``end_time``)."""
    job.time_limit = minutes
    job.timelimit_from_partition = False
    start = job.start_time
    assert start is not None  # a running job
    job.end_time = None if minutes is None else max(now, start + 60 * minutes)
    limit_s = None if job.end_time is None else job.end_time - start
    if job.batch and job.batch_host:
        ctl.send_to_node(job.batch_host, {"op": "update_limit", "job_id": job.job_id,
                                          "run": job.restarts, "time_limit_s": limit_s})


def _rebuild(p: Plan) -> None:
    """Re-validate the job's request with the changes, exactly as a submission, and plan to
    take the rebuilt shape."""
    ctl, job = p.ctl, p.job
    st = ctl.state
    req = submit.job_request(job)
    req.update(p.patch)
    acc = st.accounts
    try:
        cand = submit.build_job(
            req, None, {}, ident=identity(job.uid, job.gid), cluster=ctl.cfg, now=p.now,
            accounts=acc, qos_names=st.qos_names, fits_ever=FitChecker(st),
            job_lookup=st.find, batch=False, privileged=p.admin, job_id=job.job_id)
    finally:
        pending = getattr(acc, "pending_extra", None)
        if pending:  # build_job's note of a reservation for a new job: not this one
            for key in [k for k, (j, _x) in pending.items() if j.job_id == job.job_id]:
                del pending[key]
    if p.resv is _UNSET and "account" in p.patch and hasattr(acc, "reservation_of"):
        resv = acc.reservation_of(job)  # the new account must still be admitted to it
        if resv:
            acc.check_reservation(resv, identity(job.uid, job.gid), cand.account,
                                  getattr(st, "reservations", None))
    shape = {a: getattr(cand, a) for a in SHAPE}

    def take_shape(j: Job) -> None:
        for attr, value in shape.items():
            setattr(j, attr, value)
    p.effects.insert(0, take_shape)


def event_detail(uid: int, changes: list[Change]) -> str:
    return f"by uid {uid}: {', '.join(dict.fromkeys(c.name for c in changes))}"[:1024]
