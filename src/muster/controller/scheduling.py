"""The imperative shell around the pure scheduling core.

``build_snapshot`` turns the controller's state into the core's immutable input,
``apply_plan`` is the one place where a Plan becomes reality: it re-checks every start against
the current state (the plan may be stale by the time it is applied), splits array tasks off
their master, feeds each start to the job machine (``Start``) through the controller's
applier, and commits all changes of the pass in one transaction; the launches are the
machine's effects, dispatched by the applier only after that commit.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from muster.core import JobView, NodeView, SchedConfig, Snapshot, fits_ever
from muster.core.confview import partition_views, sched_config, topology_fields
from muster.core.schedule import R_DEADLINE
from muster.core import features
from muster.core.placement import NodeAlloc, empty_view
from muster.core.snapshot import RunningView
from muster.lifecycle import deps as depmod
from muster.lifecycle import events
from muster.model.job import PENDING, RUNNING, Job


def sched_config_of(state) -> SchedConfig:
    """The controller's SchedConfig: built once per ClusterState from its slurm.conf by the one
    builder (muster.core.confview.sched_config) and shared by the scheduling pass, the
    submit-time fit check, the snapshot's accounting inputs and sprio."""
    cfg = state.__dict__.get("_sched_cfg")
    if cfg is None:
        cfg = state.__dict__["_sched_cfg"] = sched_config(state.cfg)
    return cfg


def topology_of(state) -> dict:
    """The snapshot's topology fields (muster.core.confview.topology_fields), built once per
    configuration object: a reconfigure that replaces ``state.cfg`` rebuilds them."""
    got = state.__dict__.get("_topo_fields")
    if got is None or got[0] is not state.cfg:
        got = state.__dict__["_topo_fields"] = (state.cfg, topology_fields(state.cfg))
    return got[1]


def node_views(state, *, empty: bool = False) -> tuple[NodeView, ...]:
    out = []
    for n in state.nodes.values():
        free_gpus = n.gpu_indices if empty else tuple(g for g in n.gpu_indices if g not in n.gpus_alloc)
        out.append(NodeView(
            name=n.name, index=n.index, partitions=frozenset(n.partitions), cpus=n.cpus,
            cpus_free=n.cpus if empty else max(0, n.cpus - n.cpus_alloc), mem=n.mem,
            mem_free=n.mem if empty else max(0, n.mem - n.mem_alloc), gpus=len(n.gpu_indices),
            gpus_free=free_gpus, gpu_type=n.gpu_type, usable=True if empty else n.usable,
            weight=n.conf.weight, features=_features(n.conf.active),
            tmp_disk=n.conf.tmp_disk))
    return tuple(out)


@lru_cache(maxsize=1024)
def _features(names: tuple[str, ...]) -> frozenset[str]:
    return frozenset(names)


@lru_cache(maxsize=4096)
def constraint_of(text: str | None):
    """The parsed ``--constraint`` of a job (validated at submit; the same text is parsed
    once for all jobs that share it: the result is immutable)."""
    return features.parse(text) if text else None


def job_view(job: Job, blocked: str | None = None, max_starts: int = 1,
             reservation: str | None = None, fixed_priority: bool = False) -> JobView:
    return JobView(
        user=job.user, group=job.group, account=job.account, qos=job.qos, nice=job.nice,
        eligible_time=job.eligible_time, reservation=reservation,
        fixed_priority=fixed_priority, requeue=bool(job.requeue and job.batch),
        job_id=job.job_id, priority=job.priority, submit_time=job.submit_time,
        partitions=tuple(job.partitions_req or [job.partition]), nodes_min=job.nodes_min,
        # -O: placed as one task per node; its tasks are spread when it starts (task_counts)
        nodes_max=job.nodes_max,
        ntasks=job.num_tasks if job.ntasks_given and not job.overcommit else 0,
        ntasks_per_node=None if job.overcommit else job.ntasks_per_node,
        cpus_per_task=job.cpus_per_task, mem_per_node=0 if job.mem_all else job.mem_per_node,
        mem_per_cpu=job.mem_per_cpu, mem_per_gpu=job.mem_per_gpu, gpus_per_node=job.gpus_per_node,
        gpus_total=job.gpus, gpus_per_task=job.gpus_per_task, gpu_type=job.gpu_type,
        req_nodes=frozenset(_expand(job.req_nodes)), exc_nodes=frozenset(_expand(job.exc_nodes)),
        exclusive=job.exclusive, time_limit=job.time_limit, blocked=blocked, max_starts=max_starts,
        constraint=constraint_of(job.features), cpus_per_gpu=job.cpus_per_gpu,
        deadline=job.deadline, time_min=job.time_min, min_cpus=job.min_cpus_node or 0,
        contiguous=bool(job.contiguous), use_min_nodes=bool(job.use_min_nodes),
        min_tmp=job.min_tmp_disk or 0,
        switches=job.req_switch or None, switch_wait=job.wait4switch)


def _expand(expr: str | None) -> list[str]:
    if not expr:
        return []
    from muster.common.hostlist import expand
    return expand(expr)


class FitChecker:
    """Answers "could this request ever run in that partition?" against empty nodes.

    Configured node sizes do not change while the controller runs, so the empty views of each
    partition are built once (on a 1,000-node cluster, rebuilding them made every submit cost
    milliseconds)."""

    def __init__(self, state):
        self._state = state
        self._cfg = sched_config_of(state)
        cache = getattr(state, "empty_views", None)
        if cache is None:
            cache = state.empty_views = {}
        self._cache = cache

    def __call__(self, job: Job, partition: str) -> str | None:
        nodes = self._cache.get(partition)
        if nodes is None:  # as fits_ever would make them (empty_view): once, not per request
            nodes = self._cache[partition] = [
                empty_view(v) for v in node_views(self._state, empty=True)
                if partition in v.partitions]
        return fits_ever(job_view(job), nodes, self._cfg, already_empty=True)


def blocked_reason(state, job: Job, t: int) -> str | None:
    """Reasons decided by the shell before the core sees the job."""
    if job.hold:
        return "JobHeldAdmin" if job.hold == "admin" else "JobHeldUser"
    if job.begin_time is not None and job.begin_time > t:
        return "BeginTime"
    if job.dep_terms:
        st = state.evaluate_dependency(job, t)
        if st == depmod.FAILED:
            return "DependencyNeverSatisfied"
        if st == depmod.WAITING:
            return "Dependency"
    return None


def cached_view(state, job: Job) -> JobView:
    """The job's base view, rebuilt only after the job changed (ClusterState.save drops it)."""
    view = state.view_cache.get(job.job_id)
    if view is None:
        acc = getattr(state, "accounts", None)
        resv = fixed = None
        if acc is not None and hasattr(acc, "extra"):
            resv = acc.reservation_of(job)
            calc = acc.extra.get(job.job_id, {}).get("calc")
            fixed = job.priority not in (1, calc)  # set by an admin (--priority, update)
        view = state.view_cache[job.job_id] = job_view(job, reservation=resv,
                                                        fixed_priority=bool(fixed))
    return view


def advance(state, t: int) -> None:
    """The events of the clock, run by the controller before each scheduling pass in their
    own transaction: dependency displays resolve (ClusterState.resolve_dependencies), ended
    reservations roll over or go, PURGE_COMP ones idle long enough are purged. Usage needs
    no step here: it is charged when each job ends (ClusterState.save)."""
    changes = state.dependency_changes(t)
    resv = getattr(state, "reservations", None)
    due = resv is not None and resv.due(t)
    if not changes and not due:
        return  # nothing happened: no transaction (a pass must not cost a commit)
    with state.store.transaction():
        state.resolve_dependencies(changes)
        if due and resv is not None:
            resv.tick(t, reservations_in_use(state))


def reservations_in_use(state) -> dict[str, int]:
    """Reservation name → its pending and running jobs."""
    acc = getattr(state, "accounts", None)
    in_use: dict[str, int] = {}
    for j in state.jobs.values():
        if j.state in (PENDING, RUNNING):
            name = acc.reservation_of(j) if acc is not None else None
            if name:
                in_use[name] = in_use.get(name, 0) + 1
    return in_use


def build_snapshot(state, t: int) -> tuple[Snapshot, dict[int, str]]:
    """The core's input, and the reasons of pending jobs the shell has already decided.

    A pure read of ``state``: it writes nothing to the store and changes no job, usage or
    reservation (only caches derived from them), so read-only requests (sprio) may call it.
    What the clock changes is done before, by :func:`advance`; usage is charged at job end."""
    pending = []
    running_per_array: dict[int, int] = {}
    for j in state.jobs.values():
        if j.array_job_id is not None and j.array_task_id is not None and (
                j.state == "RUNNING" or j.completing):
            running_per_array[j.array_job_id] = running_per_array.get(j.array_job_id, 0) + 1
    shell_reasons: dict[int, str] = {}
    for j in state.jobs.values():
        if j.state != PENDING:
            continue
        blocked = blocked_reason(state, j, t)
        if blocked is not None:
            # decided by the shell (held, dependency, begin time): the core would only echo the
            # reason back, so the job stays out of the snapshot (a queue full of held jobs
            # costs the scheduler nothing)
            shell_reasons[j.job_id] = blocked
            continue
        max_starts = 1
        if j.pending_tasks:
            max_starts = len(j.pending_tasks)
            if j.array_max_tasks:
                room = j.array_max_tasks - running_per_array.get(j.array_job_id, 0)
                if room <= 0 and blocked is None:
                    blocked = "JobArrayTaskLimit"
                max_starts = max(1, min(max_starts, room))
        view = cached_view(state, j)
        if blocked is not None or max_starts != 1:
            view = replace(view, blocked=blocked, max_starts=max_starts)
        pending.append(view)
    running = []
    for j in state.jobs.values():
        if j.holds_resources and j.alloc:
            began = j.start_time if j.start_time is not None else t  # 0 is a time (sim)
            running.append(RunningView(
                job_id=j.job_id, partition=j.partition,
                nodes=tuple(j.alloc),
                start_time=began,
                end_time=began + 60 * j.time_limit if j.time_limit is not None
                and j.state == RUNNING else (t if j.completing else None),
                priority=j.priority, user=j.user, account=j.account, qos=j.qos,
                requeue=j.requeue))
    extra = {}
    acc = getattr(state, "accounts", None)
    if acc is not None and hasattr(acc, "assoc_views"):
        extra = accounting_views(acc, t, sched_config_of(state))
    resv = getattr(state, "reservations", None)
    if resv is not None and resv.resv:
        extra["reservations"] = resv.views(t)
    # a name -> view mapping is accepted for partitions (Snapshot stores it ordered by name)
    extra.update(topology_of(state))
    snap = Snapshot(now=t, nodes=node_views(state),
                    partitions=partition_views(state.cfg),  # type: ignore[arg-type]
                    pending=tuple(pending), running=tuple(running), **extra)
    return snap, shell_reasons


def accounting_views(acc, t: int, cfg: SchedConfig) -> dict:
    """The Snapshot fields that come from accounting (QOS, associations, fair-share), read
    from the usage ledger decayed to ``t``. The simulator calls this too, with an Accounts
    it charges at its jobs' ends, so fair-share evolves the same way in both."""
    assocs = acc.assoc_views(t)
    extra = {"qos": tuple(acc.qos_views().values()), "assocs": tuple(assocs)}
    if cfg.weight_fairshare and cfg.priority_type == "multifactor":
        extra["fairshare"] = acc.fairshare(t, assocs)
    return extra


def apply_plan(state, applier, plan, t: int, shell_reasons: dict[int, str] | None = None,
               *, reasons: bool = True, mail: bool = True) -> list[Job]:
    """Commit the plan in one transaction: each start re-checked against the current state and
    fed to the job machine as ``Start`` (its launch leaves after the commit), each missed
    deadline as ``DeadlineMissed``, the reasons, expected starts and priorities of the jobs
    left pending. Returns the jobs started. (plan.preemptions: ``Controller.preempt``.)
    ``reasons=False`` leaves the reasons to the caller: the controller's passes write them in
    slices between requests (:func:`apply_reasons`, muster.controller.passes); so do they the
    starts, with ``mail=False`` but for the last slice (the time-limit mails: once a pass)."""
    with applier.transaction():
        started = _apply_starts(state, applier, plan, t)
        started_ids = {j.job_id for j in started}
        if reasons:
            _apply_reasons(state, applier, plan, t, shell_reasons, started_ids)
        _store_priorities(state, plan, started_ids)
        mailer = getattr(state, "mailer", None)
        if mail and mailer is not None and mailer.timed:
            for job in mailer.tick(state.jobs, t):  # TIME_LIMIT_50/80/90/100 mails
                state.save(job)
    return started


def task_counts(job: Job, start) -> list[int]:
    """The tasks of each node of a start (SLURM_TASKS_PER_NODE): placement's, except for an
    overcommitting job (-O), placed as one task per node: its tasks are balanced over the
    nodes as Slurm lays them out (the first ``n mod N`` nodes get one more)."""
    nodes = start.allocation.nodes
    if not job.overcommit:
        return [na.tasks for na in nodes]
    base, rem = divmod(max(job.num_tasks, len(nodes)), len(nodes))
    return [base + (1 if i < rem else 0) for i in range(len(nodes))]


def _apply_starts(state, applier, plan, t: int) -> list[Job]:
    """The plan's starts that still fit. An array master that gave up several tasks is
    saved once, after the last of them (its ``pending_tasks`` list is part of its record:
    saving it per task wrote the list n times over for n tasks)."""
    started: list[Job] = []
    masters: dict[int, Job] = {}
    for start in plan.starts:
        job = state.jobs.get(start.job_id)
        if job is None or job.state != PENDING:
            continue
        allocs = [replace(na, tasks=k) if na.tasks != k else na
                  for na, k in zip(start.allocation.nodes, task_counts(job, start))]
        if not _still_free(state, allocs):
            continue
        if job.pending_tasks:
            master = job
            job = _split_array_task(state, master, t)
            if job is not master:
                masters[master.job_id] = master
            else:
                masters.pop(master.job_id, None)  # its last task: saved by its own Start
        applier.job(job, events.Start(
            partition=start.partition, alloc=tuple(allocs),
            node_list=state.node_list_of(a.node for a in allocs),
            tres_alloc=state.alloc_tres(allocs), time_limit=getattr(start, "time_limit", None),
            scheduler=getattr(start, "scheduler", "Main")), t)
        started.append(job)
    for master in masters.values():
        state.save(master)
    return started


def _apply_reasons(state, applier, plan, t: int, shell_reasons: dict[int, str] | None,
                   started_ids: set[int]) -> None:
    """Why each job still waits (squeue's reason), its expected start and planned nodes; a
    job whose deadline can no longer be met ends (``DeadlineMissed``)."""
    apply_reasons(state, applier, plan, t, merged_reasons(plan, shell_reasons), started_ids)


def merged_reasons(plan, shell_reasons: dict[int, str] | None) -> dict[int, str]:
    """Every pending job's reason: the shell's (held, dependency, ...), then the core's."""
    reasons = dict(shell_reasons or {})
    reasons.update(plan.reasons)
    return reasons


def apply_reasons(state, applier, plan, t: int, reasons: dict[int, str], started_ids,
                  skip=frozenset()) -> None:
    """:func:`_apply_reasons` for the jobs of ``reasons``, except those in ``skip`` (changed
    since the plan was made). The caller holds the transaction."""
    expected = getattr(plan, "expected_start", None) or {}
    sched_nodes = getattr(plan, "sched_nodes", None) or {}
    resv_state = getattr(state, "reservations", None)
    active = [r for r in (resv_state.views(t) if resv_state is not None and resv_state.resv
                          else ()) if r.start <= t]
    for job_id, reason in reasons.items():
        job = state.jobs.get(job_id)
        if job is None or job.state != PENDING or job_id in started_ids or job_id in skip:
            continue
        if reason == R_DEADLINE:  # ends DEADLINE; a waiting srun/salloc is told at once
            applier.job(job, events.DeadlineMissed(), t)
            continue
        exp = expected.get(job_id)
        sn = sched_nodes.get(job_id)
        desc = job.reason_desc
        if active or (desc or "").startswith("ReqNodeNotAvail, "):
            reason, desc = _reservation_reason(state, job, reason, desc, active, t)
        if job.reason != reason or job.expected_start != exp or job.sched_nodes != sn \
                or job.reason_desc != desc:
            job.reason = reason
            job.reason_desc = desc
            job.expected_start = exp
            job.sched_nodes = sn
            job.last_sched_eval = t
            state.shown(job)


def _reservation_reason(state, job: Job, reason: str, desc: str | None, active: list,
                        t: int) -> tuple[str, str | None]:
    """Slurm's text for a job kept off nodes by an active reservation it may not use."""
    mine = (desc or "").startswith("ReqNodeNotAvail, ")
    acc = state.accounts
    name = acc.reservation_of(job)
    if name:
        r = state.reservations.get(name)
        if r is not None and r["start"] > t and reason in ("Resources", "Priority"):
            return "Reservation", None if mine else desc
        return reason, None if mine else desc
    if reason not in ("Resources", "ReqNodeNotAvail", "Priority"):
        return reason, None if mine else desc
    blocking = [r for r in active if not (r.users and job.user in r.users)
                and not (r.accounts and job.account in r.accounts)]
    reserved = set()
    for r in blocking:
        reserved |= r.nodes
    hit = None
    if job.req_nodes:
        want = set(_expand(job.req_nodes))
        if want & reserved:
            hit = want & reserved
    else:
        parts = job.partitions_req or [job.partition]
        pool = {n for p in parts if p in state.cfg.partitions for n in state.cfg.partitions[p].nodes
                if state.nodes[n].usable}
        if pool and pool <= reserved:
            hit = pool
    if hit:
        maint = any("MAINT" in r.flags and r.nodes & hit for r in blocking)
        return "ReqNodeNotAvail", ("ReqNodeNotAvail, Reserved for maintenance" if maint
                                   else "ReqNodeNotAvail, May be reserved for other job")
    return reason, None if mine else desc


def _store_priorities(state, plan, started_ids: set) -> None:
    """The priority the core computed for a pending job (priority/basic or multifactor, nice
    included) is stored on it when it changed (squeue %Q, scontrol Priority=); admin-set
    priorities are left alone."""
    prio = getattr(plan, "priorities", None) or {}
    acc = getattr(state, "accounts", None)
    if not prio or acc is None:
        return
    for jid, p in prio.items():
        job = state.jobs.get(jid)
        if job is None or job.state != PENDING or jid in started_ids or job.hold:
            continue
        calc = acc.extra.get(jid, {}).get("calc")
        if job.priority not in (1, calc) or job.priority == p:
            continue
        job.priority = p
        acc.set_extra(jid, calc=p)
        state.save(job, keep_view=True)


def _still_free(state, allocs: list[NodeAlloc]) -> bool:
    for a in allocs:
        n = state.nodes.get(a.node)
        if n is None or not n.usable:
            return False
        if n.cpus - n.cpus_alloc < a.cpus or n.mem - n.mem_alloc < a.mem:
            return False
        if n.gpus_alloc.intersection(a.gpus):
            return False
    return True


def _split_array_task(state, master: Job, t: int) -> Job:
    """Start the lowest pending index. The last index keeps the master's id (Slurm does so).
    The master, when it keeps indices, is left for the caller to save (in the same
    transaction: :func:`_apply_starts` saves it once per pass)."""
    assert master.pending_tasks  # a pending array master has indices left
    idx = master.pending_tasks[0]
    rest = master.pending_tasks[1:]
    if not rest:
        master.pending_tasks = None
        master.array_task_id = idx
        master.array_task_str = None
        return master
    task = master.copy(job_id=state.take_job_id(), array_task_id=idx, pending_tasks=None,
                       array_task_str=None)
    master.pending_tasks = rest  # array_task_str is derived from it when shown
    state.jobs[task.job_id] = task
    return task
