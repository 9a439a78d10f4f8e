"""Discrete-event replay of a job trace through the live scheduling core, in virtual time.

Loop (one iteration per distinct event time ``t``)::

    completions at t  → lifecycle.finish, resources back to the node views
    arrivals at t     → a Job record (PENDING) and its immutable JobView, queued
    could anything start?  no → next event time
    yes → core.schedule(Snapshot(now=t, nodes, pending=<pruned queue>, [running]), cfg)
        → every Start: lifecycle.start, node views updated, completion event pushed at
          min(t + run, the limit lifecycle set)   (a job is killed at its limit)

Same code as the controller: :func:`muster.core.schedule` decides, :mod:`muster.lifecycle.job`
changes job state; the engine only plays the shell (``plan_apply``) and the clock.

Why it is fast (and still exact):

* Events are a heap of completions plus a pointer into the submit-sorted trace; all events of
  one instant are applied before one scheduling pass.
* Node views are immutable and only the nodes a start or an end touched are rebuilt; the
  nodes tuple is rebuilt only when something changed.
* **The core is called only when something could start** and only with the part of the
  queue that can matter, when every job has the same priority (``priority/basic``, or
  multifactor with every weight 0): then the core's queue order is arrival order and a job
  that does not fit the *aggregate* free CPUs/GPUs now cannot start now. Under the main
  scheduler (``fifo``) the first such job blocks everything behind it, so the core gets only
  the jobs before it whose cumulative demand fits. With backfill of reservation depth ``d``
  the core gets the queue up to the ``d``-th job that does not fit (the reservation holders)
  plus every later job that fits now; later non-fitting jobs can neither start nor hold a
  reservation. Conservative backfill (depth = all) gets the whole queue. A pass with only
  new arrivals (nothing ended since the last call) is skipped unless an arrival fits, and
  then only the arrivals are offered after the reservation holders: with nothing freed,
  every job the core could not start last time still cannot. Backfill pruning also needs
  the shorthands' unlimited window and test budget (``bf_window``, ``bf_max_job_test``).
  Proof sketch and measurements: docs/simulation.md.
* Otherwise (multifactor priority, several partitions, or a site's own window and test
  budget under ``--policy config``) nothing is pruned: after every event instant the core gets the whole
  queue, as the controller's pass after every event does. With multifactor priority the
  controller's accounting (:class:`muster.controller.accounts.Accounts`, in memory) charges
  each job's usage when it stops and supplies associations and fair-share factors.

The equivalence with the controller is tested, not argued: tests/property/
test_sim_vs_controller.py drives the real controller on a virtual clock through random
workloads and settings and requires the same start second and nodes for every job.

Invariants (checked as they happen, :class:`SimError` on violation): no job starts before
its submit time; free CPUs/memory/GPUs never go negative; a job never runs past its limit.
"""

from __future__ import annotations

import dataclasses
import heapq
import signal as _signal
import time as _time
from bisect import bisect_right, insort
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from muster.core import JobView, NodeView, SchedConfig, Snapshot, fits_ever, schedule
from muster.core.placement import NEVER_BAD_CONFIG, NEVER_NODE_COUNT, NEVER_REQ_NODES
from muster.core.snapshot import RunningView
from muster.lifecycle import job as lifecycle
from muster.model.job import PENDING, Job

from .cluster import SimCluster
from .traces import TraceJob

__all__ = ["NO_PRUNING", "POLICIES", "SimError", "SimResult", "Simulator", "prune_depth",
           "sched_config_for"]

# classic EASY/conservative plan without a horizon; it also keeps the pruned queue exact
# (a reservation beyond the window would pass the reservation to a later job)
_NO_WINDOW = 20 * 365 * 1440  # minutes
ACCOUNT, QOS = "default", "normal"

# policy → SchedConfig fields it sets; "config" keeps the slurm.conf's own settings
POLICIES: dict[str, dict] = {
    "fifo": {"backfill": False},
    "easy": {"backfill": True, "bf_depth": 1, "bf_window": _NO_WINDOW, "bf_max_job_test": 0},
    "conservative": {"backfill": True, "bf_depth": None, "bf_window": _NO_WINDOW,
                     "bf_max_job_test": 0},
    "config": {},
}


# fits_ever's reasons, in words
_NEVER = {NEVER_BAD_CONFIG: "no node can hold it", NEVER_NODE_COUNT: "more nodes than there are",
          NEVER_REQ_NODES: "requested nodes missing"}


class SimError(RuntimeError):
    """An engine invariant was violated (a bug in the engine or the core)."""


def sched_config_for(policy: str, base: SchedConfig, **overrides) -> SchedConfig:
    """``base`` (the cluster's settings) with the policy's backfill settings (POLICIES).

    The shorthands have no backfill window and test every job (``bf_max_job_test=0``): the
    classic EASY/conservative algorithms, and what keeps the engine's queue pruning exact."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r} (fifo, easy, conservative, config)")
    kw = {**POLICIES[policy], **overrides}
    return dataclasses.replace(base, **kw)


NO_PRUNING = -1


def prune_depth(policy: str, cfg: SchedConfig) -> int | None:
    """The engine's queue pruning for these settings (module doc): 0 = main scheduler,
    d = backfill with d reservations, None = conservative, NO_PRUNING = the whole queue
    at every event. Pruning needs every job's priority equal (arrival order = core order);
    backfill pruning also needs the shorthand's unlimited window and test budget."""
    if cfg.priority_type == "multifactor" or cfg.max_jobs_to_start:
        return NO_PRUNING
    if not cfg.backfill:
        return 0
    if policy == "config" and (cfg.bf_window < _NO_WINDOW or cfg.bf_max_job_test):
        return NO_PRUNING
    return cfg.bf_depth


@dataclass
class SimResult:
    jobs: list[TraceJob]              # the replayed jobs (too-large ones excluded)
    start: list[int]                  # aligned with jobs
    end: list[int]
    killed: list[bool]
    skipped: list[tuple[TraceJob, str]]
    cluster: SimCluster
    policy: str
    wall_s: float = 0.0
    core_calls: int = 0
    core_s: float = 0.0
    events: int = 0
    series: list[tuple[int, int, int]] | None = None  # (t, cpus used, gpus used) after t
    gpu_idle_waiting: float = 0.0     # ∫ free GPUs while a GPU job waits, GPU-seconds
    gpu_free_partial: float = 0.0     # ∫ free GPUs on partially used nodes
    gpu_free_total: float = 0.0       # ∫ free GPUs
    states: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # config settings not modelled
    nodes: list[tuple[str, ...]] = field(default_factory=list)  # aligned with jobs: where each ran


def _new_job(tj: TraceJob) -> Job:
    """The controller's Job record with the fields the lifecycle reads and writes.

    ``Job(**kw)`` sets all ~120 slots (15 µs); the simulator makes one per trace job, so it
    fills only what :func:`lifecycle.start`/:func:`lifecycle.finish` use.
    """
    j = Job.__new__(Job)
    j.job_id = tj.job_id
    j.state = PENDING
    j.reason = "None"
    j.user = tj.user
    j.priority = 1
    j.submit_time = tj.submit
    j.start_time = None
    j.end_time = None
    j.time_limit = None if tj.limit is None else -(-tj.limit // 60)  # minutes, rounded up
    j.completing = False
    j.derived_exit_code = 0
    j.exit_code = j.exit_signal = 0
    j.cancelled_by = None
    # read by fair-share accounting (muster.controller.accounts.Accounts.observe)
    j.restarts = 0
    j.alloc = []
    j.account = ACCOUNT
    j.qos = QOS
    return j


class Simulator:
    def __init__(self, cluster: SimCluster, jobs: Sequence[TraceJob], policy: str = "fifo", *,
                 sched: SchedConfig | None = None, record_series: bool = False,
                 progress: Callable[[int, int], None] | None = None,
                 core: Callable = schedule) -> None:
        self.cluster = cluster
        self.policy = policy
        self.cfg = sched_config_for(policy, sched or cluster.sched)
        self.notes: list[str] = []  # settings of the config the replay does not model
        if self.cfg.preempt_type not in ("preempt/none", "", None):
            # a trace records one run per job: a preempted job has nothing to resume from
            self.notes.append(f"PreemptType={self.cfg.preempt_type} is not simulated "
                              "(no job is preempted)")
            self.cfg = dataclasses.replace(self.cfg, preempt_type="preempt/none")
        self.part_names = tuple(p.name for p in cluster.partitions)
        self.depth = prune_depth(policy, self.cfg) if len(self.part_names) == 1 else NO_PRUNING
        self.accounts = None
        if self.cfg.priority_type == "multifactor":
            # usage and fair-share exactly as the controller keeps them (its own class, on an
            # in-memory store): charged when a job stops, decayed with the config's half-life
            if cluster.conf is None:
                raise ValueError("multifactor priority needs the cluster from a slurm.conf")
            from muster.controller.accounts import Accounts
            from muster.store.sqlite import SqliteStore
            self.accounts = Accounts(SqliteStore(":memory:"), cluster.conf)
        self.record_series = record_series
        self.progress = progress
        self.core = core
        self.gpu = cluster.total_gpus > 0
        self.skipped: list[tuple[TraceJob, str]] = []
        self.jobs: list[TraceJob] = []
        t0 = _time.perf_counter()
        self._screen(jobs)
        self.setup_s = _time.perf_counter() - t0

    # ---- set-up -----------------------------------------------------------------------
    def _view(self, tj: TraceJob) -> JobView:
        gpn = 0
        if self.gpu and tj.gpus:
            gpn = max(n.gpus for n in self.cluster.nodes)
        mem_kw: dict = {}
        if self.cluster.mem_simulated and tj.mem is not None:
            mem_kw["mem_per_node"] = max(1, tj.mem)
        elif not self.cluster.mem_simulated:
            mem_kw["mem_per_cpu"] = 1
        limit = None if tj.limit is None else -(-tj.limit // 60)
        # who and when, as the controller's view of a job submitted at that time by that user
        # (a non-root user without sacctmgr associations: account "default", QOS "normal")
        common = dict(job_id=tj.job_id, priority=1, submit_time=tj.submit,
                      eligible_time=tj.submit, user=tj.user, account=ACCOUNT, qos=QOS,
                      partitions=self.part_names, time_limit=limit,
                      gpu_type=tj.gpu_type, **mem_kw)
        if tj.mem is not None:  # a pod (Alibaba): one node, its CPUs and GPUs
            return JobView(nodes_min=1, nodes_max=1, cpus_per_task=max(1, tj.cpus),
                           gpus_per_node=tj.gpus, **common)
        if tj.gpus and gpn and tj.gpus >= gpn and tj.gpus % gpn == 0 and tj.cpus <= 1:
            # distributed training on whole nodes: N/gpn nodes, all their GPUs
            return JobView(nodes_min=tj.gpus // gpn, gpus_per_node=gpn, **common)
        if tj.gpus and gpn and tj.gpus > gpn and tj.cpus <= 1:
            return JobView(gpus_total=tj.gpus, **common)  # spread, one task per node
        if tj.gpus:
            return JobView(ntasks=max(1, tj.cpus), gpus_total=tj.gpus, **common)
        return JobView(ntasks=tj.cpus, **common)

    def _screen(self, jobs: Sequence[TraceJob]) -> None:
        """Keep the jobs that fit the empty nodes of some partition within its MaxTime;
        report the others (the core's fits_ever; the first partition's reason)."""
        parts = [(pv, [n for n in self.cluster.nodes if pv.name in n.partitions])
                 for pv in self.cluster.partitions]
        cache: dict[tuple, str | None] = {}
        self.views: dict[int, JobView] = {}
        for tj in jobs:
            v = self._view(tj)
            shape = (tj.cpus, tj.gpus, tj.mem, tj.gpu_type)
            first = why = None
            for k, (pv, empty) in enumerate(parts):
                key = (k, shape)
                why = cache.get(key, 0)
                if why == 0:
                    why = cache[key] = fits_ever(v, empty, self.cfg, already_empty=True)
                if why is None and v.time_limit is not None and pv.max_time is not None \
                        and v.time_limit > pv.max_time:
                    why = "over the partition's MaxTime"
                if why is None:
                    break
                first = first or why
            why = None if why is None else first
            if why is not None:
                self.skipped.append((tj, why if why.startswith("over") else
                                     f"too large for the machine ({_NEVER.get(why, why)})"))
                continue
            self.jobs.append(tj)
            self.views[tj.job_id] = v

    # ---- the run ----------------------------------------------------------------------
    def run(self) -> SimResult:
        t_wall = _time.perf_counter()
        jobs = self.jobs
        n = len(jobs)
        pos = {tj.job_id: i for i, tj in enumerate(jobs)}
        start = [-1] * n
        end = [-1] * n
        killed = [False] * n
        ran_on: list[tuple[str, ...]] = [()] * n
        records: dict[int, Job] = {}
        views = self.views
        cfg = self.cfg
        part = self.cluster.partitions
        nodes = list(self.cluster.nodes)
        index = {nd.name: i for i, nd in enumerate(nodes)}
        nodes_t = tuple(nodes)
        dirty = False
        gpu = self.gpu
        size_of = (lambda tj: tj.gpus) if gpu else (lambda tj: tj.cpus)
        free_c = sum(nd.cpus for nd in nodes)
        free_g = sum(nd.gpus for nd in nodes)
        total_g = free_g
        partial_free = 0  # free GPUs on nodes that are partly used
        pending: dict[int, TraceJob] = {}
        sizes: list[tuple[int, int]] = []  # (size, job_id) of pending jobs, for backfill
        pending_gpu_jobs = 0
        # False while no job has ended since the last core call; then a waiting job after
        # the reservations that the core could not start then cannot start now
        retest = True
        fresh: list[int] = []  # this instant's arrivals
        exact_memo = self.depth is not None and self.depth > 0
        running_views: dict[int, object] = {}
        heap: list[tuple[int, int]] = []  # (end time, job id)
        depth = self.depth
        core = self.core
        # running jobs matter only to backfill (the main scheduler ignores them)
        with_running = cfg.backfill
        use_sizes = depth is None or depth > 0  # the size index of the backfill pruning
        accounts = self.accounts
        if accounts is not None:
            from muster.controller.scheduling import accounting_inputs
        extra: dict = {}
        series = [] if self.record_series else None
        idle_waiting = free_partial = free_total = 0.0
        core_calls, core_s, events = 0, 0.0, 0
        nxt = 0
        last_t = jobs[0].submit if jobs else 0
        progress = self.progress
        done = 0
        tick = max(1, n // 200)
        SIGKILL = int(_signal.SIGKILL)

        def fits(tj: TraceJob) -> bool:
            return tj.cpus <= free_c and tj.gpus <= free_g

        def node_change(i: int, dc: int, dm: int, gpus_out: tuple[int, ...], gpus_in: tuple[int, ...]) -> None:
            nonlocal partial_free
            nd = nodes[i]
            gf = nd.gpus_free
            if gpus_out:
                taken = set(gpus_out)
                if not taken <= set(gf):
                    raise SimError(f"GPUs {sorted(taken - set(gf))} of {nd.name} are not free")
                gf = tuple(g for g in gf if g not in taken)
            if gpus_in:
                gf = tuple(sorted(gf + gpus_in))
            cf, mf = nd.cpus_free + dc, nd.mem_free + dm
            if cf < 0 or mf < 0 or cf > nd.cpus or mf > nd.mem or len(gf) > nd.gpus:
                raise SimError(f"node {nd.name} over- or under-allocated: cpus_free={cf} "
                               f"mem_free={mf} gpus_free={gf}")
            if nd.gpus:
                old, new = len(nd.gpus_free), len(gf)
                partial_free += (new if 0 < new < nd.gpus else 0) - (old if 0 < old < nd.gpus else 0)
            nodes[i] = NodeView(nd.name, nd.index, nd.partitions, nd.cpus, cf, nd.mem, mf,
                                nd.gpus, gf, nd.gpu_type, nd.usable, nd.weight)

        def queue_for_core(new_fit: bool, freed: bool) -> tuple[JobView, ...] | None:
            """The pruned queue (see module doc), or None when nothing could start."""
            if not pending:
                return None
            if depth == NO_PRUNING:
                return tuple(views[j] for j in pending)
            if depth == 0:
                out, c, g = [], free_c, free_g
                for jid, tj in pending.items():
                    c -= tj.cpus
                    g -= tj.gpus
                    if c < 0 or g < 0:
                        break
                    out.append(views[jid])
                return tuple(out) if out else None
            if not freed and not new_fit:
                return None
            if depth is None:
                if not sizes or sizes[0][0] > (free_g if gpu else free_c):
                    return None
                return tuple(views[j] for j in pending)
            out, blockers, last, any_fit = [], 0, 0, False
            for jid, tj in pending.items():
                out.append(views[jid])
                last = jid
                if fits(tj):
                    any_fit = True
                else:
                    blockers += 1
                    if blockers >= depth:
                        break
            else:
                return tuple(out) if any_fit else None
            if freed or retest:
                hi = bisect_right(sizes, ((free_g if gpu else free_c), 1 << 62))
                later = sorted(jid for _, jid in sizes[:hi] if jid > last and fits(pending[jid]))
            else:  # only this instant's arrivals can start (module doc)
                later = sorted(jid for jid in fresh if jid > last and fits(pending[jid]))
            if not later and not any_fit:
                return None
            out.extend(views[j] for j in later)
            return tuple(out)

        while nxt < n or heap:
            t = heap[0][0] if heap else jobs[nxt].submit
            if nxt < n and jobs[nxt].submit < t:
                t = jobs[nxt].submit
            dt = t - last_t
            if dt > 0 and gpu:
                free_total += dt * free_g
                free_partial += dt * partial_free
                if pending_gpu_jobs:
                    idle_waiting += dt * free_g
            last_t = t
            freed = False
            while heap and heap[0][0] == t:
                _, jid = heapq.heappop(heap)
                rec = records.pop(jid)
                i = pos[jid]
                timed_out = killed[i]
                lifecycle.finish(rec, exit_code=0, signal=SIGKILL if timed_out else 0,
                                 timed_out=timed_out, now=t)
                end[i] = t
                for a in rec.alloc:
                    node_change(index[a["node"]], a["cpus"], a["mem"], (), a["gpus"])
                tj = jobs[i]
                free_c += rec.num_cpus
                free_g += tj.gpus
                running_views.pop(jid, None)
                freed = dirty = retest = True
                events += 1
                done += 1
                if progress is not None and done % tick == 0:
                    progress(done, n)
            new_fit = False
            fresh.clear()
            while nxt < n and jobs[nxt].submit == t:
                tj = jobs[nxt]
                nxt += 1
                events += 1
                records[tj.job_id] = _new_job(tj)
                pending[tj.job_id] = tj
                fresh.append(tj.job_id)
                if use_sizes:
                    insort(sizes, (size_of(tj), tj.job_id))
                if tj.gpus:
                    pending_gpu_jobs += 1
                if not new_fit and fits(tj):
                    new_fit = True
            if accounts is not None:  # as the controller's pass after every event
                extra = accounting_inputs(accounts, records, t, cfg)
            queue = queue_for_core(new_fit, freed)
            if queue is not None:
                if dirty:
                    nodes_t = tuple(nodes)
                    dirty = False
                snap = Snapshot(now=t, nodes=nodes_t, partitions=part, pending=queue,
                                running=tuple(running_views.values()) if with_running else (),
                                **extra)
                c0 = _time.perf_counter()
                plan = core(snap, cfg)
                core_s += _time.perf_counter() - c0
                core_calls += 1
                retest = not exact_memo
                for st in plan.starts:
                    jid = st.job_id
                    tj = pending.pop(jid, None)
                    if tj is None:
                        raise SimError(f"core started job {jid}, which is not pending")
                    if tj.submit > t:
                        raise SimError(f"job {jid} started at {t} before its submit {tj.submit}")
                    if use_sizes:
                        del sizes[bisect_right(sizes, (size_of(tj), jid)) - 1]
                    if tj.gpus:
                        pending_gpu_jobs -= 1
                    rec = records[jid]
                    alloc = [{"node": na.node, "cpus": na.cpus, "mem": na.mem,
                              "gpus": na.gpus, "tasks": na.tasks} for na in st.allocation.nodes]
                    ncpu = 0
                    for na in st.allocation.nodes:
                        node_change(index[na.node], -na.cpus, -na.mem, na.gpus, ())
                        ncpu += na.cpus
                    dirty = True
                    lifecycle.start(rec, partition=st.partition, alloc=alloc,
                                    node_list=",".join(a["node"] for a in alloc),
                                    tres_alloc=f"cpu={ncpu},gres/gpu={tj.gpus}", now=t)
                    free_c -= ncpu
                    free_g -= tj.gpus
                    i = pos[jid]
                    start[i] = t
                    ran_on[i] = tuple(a["node"] for a in alloc)
                    stop = t + tj.run
                    if rec.end_time is not None and stop > rec.end_time:
                        stop = rec.end_time
                        killed[i] = True
                    heapq.heappush(heap, (stop, jid))
                    if with_running:
                        running_views[jid] = RunningView(
                            job_id=jid, partition=st.partition, nodes=st.allocation.nodes,
                            start_time=t, end_time=rec.end_time, user=rec.user,
                            account=ACCOUNT, qos=QOS)
            if series is not None:
                tot_c = self.cluster.total_cpus
                series.append((t, tot_c - free_c, total_g - free_g))
            if not heap and nxt >= n and pending:
                raise SimError(f"{len(pending)} jobs can never start (first: "
                               f"{next(iter(pending.values()))})")

        states: dict[str, int] = {}
        res = SimResult(jobs=jobs, start=start, end=end, killed=killed, nodes=ran_on, skipped=self.skipped,
                        cluster=self.cluster, policy=self.policy,
                        wall_s=_time.perf_counter() - t_wall + self.setup_s, core_calls=core_calls,
                        core_s=core_s, events=events, series=series,
                        gpu_idle_waiting=idle_waiting, gpu_free_partial=free_partial,
                        gpu_free_total=free_total, states=states, notes=self.notes)
        for k in killed:
            s = "TIMEOUT" if k else "COMPLETED"
            states[s] = states.get(s, 0) + 1
        return res
