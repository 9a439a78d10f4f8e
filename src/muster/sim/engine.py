"""Discrete-event replay of a job trace through the live scheduling core, in virtual time.

Loop (one iteration per distinct event time ``t``)::

    completions at t  → lifecycle.finish, the backend gets the resources back
    arrivals at t     → a Job record (PENDING) and its immutable JobView, queued
    backend.decide(t) → the core's starts now
        → every Start: lifecycle.start, completion event pushed at
          min(t + run, the limit lifecycle set)   (a job is killed at its limit)

Same code as the controller: the core decides, :mod:`muster.lifecycle.job` changes job
state; the engine only plays the shell (``plan_apply``) and the clock. Two backends hold
the core's input:

* ``_PooledBackend`` — one node of fungible CPUs (SWF traces: processors pooled), FIFO,
  EASY or conservative, flat priority: :class:`muster.core.pooled.PooledScheduler`, the
  core's incremental scheduler, told each arrival and end. It makes ``schedule()``'s
  decisions (a property test, and full replays of every SWF trace compared job by job) at
  a few µs a pass (tens under conservative backfill).
* ``_CoreBackend`` — everything else: :func:`muster.core.schedule` on a Snapshot the engine
  keeps, pruned as below.

Why ``_CoreBackend`` is fast (and still exact):

* Events are a heap of completions plus a pointer into the submit-sorted trace; all events of
  one instant are applied before one scheduling pass.
* Node views are immutable and only the nodes a start or an end touched are rebuilt; the
  nodes tuple is rebuilt only when something changed.
* **The core is called only when something could start** and only with the part of the
  queue that can matter, when the queue order is arrival order (a priority of the job alone:
  priority/basic, or multifactor with every weight 0 — trace jobs have no nice): then a job
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
import gc
import heapq
import signal as _signal
import time as _time
from bisect import bisect_right, insort
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from muster.common import clock as clocks
from muster.core import JobView, NodeView, SchedConfig, Snapshot, fits_ever, schedule
from muster.core import priority as prio
from muster.core.gpuclass import GpuClassScheduler
from muster.core.nodeclass import NodeClassScheduler
from muster.core.placement import NEVER_BAD_CONFIG, NEVER_NODE_COUNT, NEVER_REQ_NODES
from muster.core.pooled import PooledScheduler
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
    at every event. Pruning needs the core's order to be arrival order: a priority of the
    job alone (``priority.static``: trace jobs have no nice, and their ids follow their
    submit times, so priority/basic's decreasing priorities keep that order too); backfill
    pruning also needs the shorthand's unlimited window and test budget."""
    if not prio.static(cfg) or cfg.max_jobs_to_start:
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
    core: str = "schedule"  # "pooled": the incremental PooledScheduler made the decisions


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
    # read by fair-share accounting (muster.controller.accounts.Accounts.job_saved)
    j.restarts = 0
    j.alloc = ()
    j.nodes_max = None  # no node range: lifecycle.start keeps the task count
    j.account = ACCOUNT
    j.qos = QOS
    return j


class Simulator:
    def __init__(self, cluster: SimCluster, jobs: Sequence[TraceJob], policy: str = "fifo", *,
                 sched: SchedConfig | None = None, record_series: bool = False,
                 progress: Callable[[int, int], None] | None = None,
                 core: Callable = schedule, pooled: bool | None = None) -> None:
        """``pooled``: None = the incremental :class:`PooledScheduler` whenever the cluster,
        the settings and every job are in its scope (its decisions are ``schedule()``'s);
        False = always ``core`` on snapshots; True = the pooled one or ValueError."""
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
        self.clock = clocks.VirtualClock(jobs[0].submit if jobs else 0)
        self.accounts = None
        if not prio.static(self.cfg):
            # usage and fair-share exactly as the controller keeps them (its own class, on an
            # in-memory store): charged when a job stops, decayed with the config's half-life
            if cluster.conf is None:
                raise ValueError("multifactor priority needs the cluster from a slurm.conf")
            from muster.controller.accounts import Accounts
            from muster.store import open_store
            self.accounts = Accounts(open_store(":memory:"), cluster.conf)
        self.record_series = record_series
        self.progress = progress
        self.core = core
        self.pooled: PooledScheduler | None = None
        self.nodeclass: NodeClassScheduler | GpuClassScheduler | None = None
        why = "a custom core" if core is not schedule else self._pooled_scope()
        self.gpu = cluster.total_gpus > 0
        self.gpn = max((n.gpus for n in cluster.nodes), default=0)  # a trace job's node size
        self.skipped: list[tuple[TraceJob, str]] = []
        self.jobs: list[TraceJob] = []
        t0 = _time.perf_counter()
        # a JobView per job and nothing cyclic: the collector's passes over the growing heap
        # would be a quarter of the set-up time on a large trace
        collecting = gc.isenabled()
        gc.disable()
        try:
            outside = self._screen(jobs)
            # set by _pooled_scope when it found no reason against it
            if why is None and pooled is not False:
                if self.pooled is not None:
                    why = next((w for v in self.views.values() if (w := self.pooled.admit(v))),
                               None)
                elif self.nodeclass is not None:
                    why = outside  # _screen offered every job to it
        finally:
            if collecting:
                gc.enable()
        if why is not None or pooled is False:
            if pooled:
                raise ValueError(f"the pooled scheduler does not apply: {why}")
            self.pooled = self.nodeclass = None
        self.setup_s = _time.perf_counter() - t0

    def _pooled_scope(self) -> str | None:
        """Set up the pooled scheduler if the cluster and settings are in its scope."""
        cl = self.cluster
        why = PooledScheduler.unsupported(cl.nodes, cl.partitions, self.cfg)
        if why is None:
            self.pooled = PooledScheduler(cl.nodes[0], cl.partitions[0], self.cfg)
            return None
        # many identical CPU nodes: the node-class scheduler (also incremental, also exact);
        # many identical GPU nodes: its GPU counterpart
        kind = NodeClassScheduler if cl.total_gpus == 0 else GpuClassScheduler
        why = kind.unsupported(cl.nodes, cl.partitions, self.cfg)
        if why is None and cl.topology:
            why = "a network topology"
        if why is None:
            self.nodeclass = kind(cl.nodes, cl.partitions[0], self.cfg)
        return why

    # ---- set-up -----------------------------------------------------------------------
    def _view(self, tj: TraceJob) -> JobView:
        gpn = self.gpn if tj.gpus else 0
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

    def _screen(self, jobs: Sequence[TraceJob]) -> str | None:
        """Keep the jobs that fit the empty nodes of some partition within its MaxTime;
        report the others (the core's fits_ever; the first partition's reason). With a
        node-class scheduler, each job is offered to it first: one it admits fits its
        partition's empty nodes (its scope checks the shape against the partition's size),
        so only MaxTime is left to check. Returns why a kept job is outside that
        scheduler's scope (the first such job), or None."""
        parts = [(pv, [n for n in self.cluster.nodes if pv.name in n.partitions])
                 for pv in self.cluster.partitions]
        cache: dict[tuple, str | None] = {}
        self.views: dict[int, JobView] = {}
        classes = self.nodeclass
        max_time = self.cluster.partitions[0].max_time if classes is not None else None
        outside: str | None = None
        for tj in jobs:
            v = self._view(tj)
            scope_why = None
            if classes is not None:
                scope_why = classes.admit(v)
                if scope_why is None and (v.time_limit is None or max_time is None
                                          or v.time_limit <= max_time):
                    self.jobs.append(tj)
                    self.views[tj.job_id] = v
                    continue
            shape = (tj.cpus, tj.gpus, tj.mem, tj.gpu_type)
            first: str | None = None
            why: str | None = None
            for k, (pv, empty) in enumerate(parts):
                key = (k, shape)
                if key in cache:
                    why = cache[key]
                else:
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
            outside = outside or scope_why
        return outside

    # ---- the run ----------------------------------------------------------------------
    def run(self) -> SimResult:
        """Replay the trace. For the run, ``self.clock`` (virtual, set to each event's time)
        is the process's clock (muster.common.clock): shared controller code that reads
        "now" reads the simulated instant, never the wall clock."""
        prev = clocks.install(self.clock)
        # what exists now (the trace, the views, the records) lives until the replay ends:
        # frozen, it is left out of the collector's full passes, which would otherwise walk
        # it again and again (~5 % of a replay); unfrozen after, unless someone froze before
        thaw = gc.get_freeze_count() == 0
        gc.freeze()
        try:
            return self._run()
        finally:
            if thaw:
                gc.unfreeze()
            clocks.install(prev)

    def _run(self) -> SimResult:
        t_wall = _time.perf_counter()
        jobs = self.jobs
        n = len(jobs)
        pos = {tj.job_id: i for i, tj in enumerate(jobs)}
        start = [-1] * n
        end = [-1] * n
        killed = [False] * n
        ran_on: list[tuple[str, ...]] = [()] * n
        records: dict[int, Job] = {}
        cfg = self.cfg
        gpu = self.gpu
        backend = (_PooledBackend(self) if self.pooled else
                   _GpuClassBackend(self) if isinstance(self.nodeclass, GpuClassScheduler) else
                   _NodeClassBackend(self) if self.nodeclass else _CoreBackend(self))
        pending = backend.pending
        total_g = self.cluster.total_gpus
        used_c = used_g = 0
        heap: list[tuple[int, int]] = []  # (end time, job id)
        accounts = self.accounts
        if accounts is not None:
            from muster.controller.scheduling import accounting_views
        topo = self.cluster.topology  # the Snapshot's switches or blocks (the controller's)
        series: list | None = [] if self.record_series else None
        idle_waiting = free_partial = free_total = 0.0
        events = 0
        nxt = 0
        last_t = jobs[0].submit if jobs else 0
        progress = self.progress
        done = 0
        tick = max(1, n // 200)
        SIGKILL = int(_signal.SIGKILL)
        finish, begin, push, pop = lifecycle.finish, lifecycle.start, heapq.heappush, heapq.heappop

        while nxt < n or heap:
            t = heap[0][0] if heap else jobs[nxt].submit
            if nxt < n and jobs[nxt].submit < t:
                t = jobs[nxt].submit
            dt = t - last_t
            if dt > 0 and gpu:
                free_g = total_g - used_g
                free_total += dt * free_g
                free_partial += dt * backend.partial_free
                if backend.pending_gpu_jobs:
                    idle_waiting += dt * free_g
            last_t = t
            self.clock.set(t)
            while heap and heap[0][0] == t:
                _, jid = pop(heap)
                rec = records.pop(jid)
                i = pos[jid]
                timed_out = killed[i]
                finish(rec, exit_code=0, signal=SIGKILL if timed_out else 0,
                       timed_out=timed_out, now=t)
                if accounts is not None:
                    accounts.job_saved(rec, t)  # usage charged at the end, as the controller
                end[i] = t
                backend.ended(rec, jobs[i])
                used_c -= rec.num_cpus
                used_g -= jobs[i].gpus
                events += 1
                done += 1
                if progress is not None and done % tick == 0:
                    progress(done, n)
            while nxt < n and jobs[nxt].submit == t:
                tj = jobs[nxt]
                nxt += 1
                events += 1
                records[tj.job_id] = _new_job(tj)
                if accounts is not None:
                    accounts.job_saved(records[tj.job_id], t)  # its user joins the tree
                backend.arrive(tj)
            extra = accounting_views(accounts, t, cfg) if accounts is not None else {}
            if topo:
                extra = {**extra, **topo}
            for st in backend.decide(t, extra):
                jid = st.job_id
                got = pending.pop(jid, None)
                if got is None:
                    raise SimError(f"core started job {jid}, which is not pending")
                tj = got
                if tj.submit > t:
                    raise SimError(f"job {jid} started at {t} before its submit {tj.submit}")
                rec = records[jid]
                nodes = st.allocation.nodes
                names = tuple([a.node for a in nodes])  # (lists: a start spans ~10 nodes)
                begin(rec, partition=st.partition, alloc=nodes, node_list=",".join(names),
                      tres_alloc=f"cpu={sum([na.cpus for na in nodes])},gres/gpu={tj.gpus}",
                      now=t)
                backend.started(st, tj, rec)
                if accounts is not None:
                    accounts.job_saved(rec, t)  # tracked from its start
                used_c += rec.num_cpus
                used_g += tj.gpus
                i = pos[jid]
                start[i] = t
                ran_on[i] = names
                stop = t + tj.run
                if rec.end_time is not None and stop > rec.end_time:
                    stop = rec.end_time
                    killed[i] = True
                push(heap, (stop, jid))
            if series is not None:
                series.append((t, used_c, used_g))
            if not heap and nxt >= n and pending:
                raise SimError(f"{len(pending)} jobs can never start (first: "
                               f"{next(iter(pending.values()))})")

        states: dict[str, int] = {}
        res = SimResult(jobs=jobs, start=start, end=end, killed=killed, nodes=ran_on,
                        skipped=self.skipped, cluster=self.cluster, policy=self.policy,
                        wall_s=_time.perf_counter() - t_wall + self.setup_s,
                        core_calls=backend.calls, core_s=backend.core_s, events=events,
                        series=series, gpu_idle_waiting=idle_waiting,
                        gpu_free_partial=free_partial, gpu_free_total=free_total, states=states,
                        notes=self.notes, core=backend.name)
        for k in killed:
            s = "TIMEOUT" if k else "COMPLETED"
            states[s] = states.get(s, 0) + 1
        return res


class _PooledBackend:
    """The incremental :class:`~muster.core.pooled.PooledScheduler`: told each arrival and
    end, asked for the starts after every event instant (it returns at once when nothing
    changed that could start a job)."""

    name = "pooled"
    partial_free = pending_gpu_jobs = 0  # it has no GPUs

    def __init__(self, sim: Simulator) -> None:
        assert sim.pooled is not None  # this backend is chosen only when the pooled one applies
        self.sched = sim.pooled
        self.views = sim.views
        self.pending: dict[int, TraceJob] = {}
        self.calls, self.core_s = 0, 0.0

    def arrive(self, tj: TraceJob) -> None:
        self.pending[tj.job_id] = tj
        self.sched.submit(self.views[tj.job_id])

    def ended(self, rec: Job, tj: TraceJob) -> None:
        self.sched.ended(rec.job_id)

    def decide(self, t: int, extra: dict) -> list:
        c0 = _time.perf_counter()
        got = self.sched.schedule(t)
        self.core_s += _time.perf_counter() - c0
        self.calls += 1
        if self.sched.free < 0:
            raise SimError(f"the pooled node is over-allocated: {self.sched.free} CPUs free")
        return got

    def started(self, st, tj: TraceJob, rec: Job) -> None:
        pass


class _CoreBackend:
    """:func:`muster.core.schedule` on a snapshot kept by the engine: node views rebuilt only
    where a start or an end touched them, and the queue pruned (module doc)."""

    name = "schedule"

    def __init__(self, sim: Simulator) -> None:
        self.views = sim.views
        self.cfg = sim.cfg
        self.core = sim.core
        self.part = sim.cluster.partitions
        self.nodes = list(sim.cluster.nodes)
        self.index = {nd.name: i for i, nd in enumerate(self.nodes)}
        self.nodes_t = tuple(self.nodes)
        self.dirty = False
        self.gpu = sim.gpu
        self.free_c = sum(nd.cpus for nd in self.nodes)
        self.free_g = sum(nd.gpus for nd in self.nodes)
        self.partial_free = 0  # free GPUs on nodes that are partly used
        self.pending: dict[int, TraceJob] = {}
        self.sizes: list[tuple[int, int]] = []  # (size, job_id) of pending jobs, for backfill
        self.pending_gpu_jobs = 0
        # False while no job has ended since the last core call; then a waiting job after
        # the reservations that the core could not start then cannot start now
        self.retest = True
        self.freed = False
        self.new_fit = False
        self.fresh: list[int] = []  # this instant's arrivals
        self.depth = sim.depth
        self.exact_memo = self.depth is not None and self.depth > 0
        self.use_sizes = self.depth is None or self.depth > 0  # the backfill pruning's index
        # running jobs matter only to backfill (the main scheduler ignores them)
        self.with_running = self.cfg.backfill
        self.running_views: dict[int, RunningView] = {}
        self.calls, self.core_s = 0, 0.0

    def _size(self, tj: TraceJob) -> int:
        return tj.gpus if self.gpu else tj.cpus

    def _fits(self, tj: TraceJob) -> bool:
        return tj.cpus <= self.free_c and tj.gpus <= self.free_g

    def _room(self) -> tuple[int, int, int, int]:
        """(CPUs, GPUs, gap_lo, gap_hi): a job asking more CPUs or GPUs, or a GPU count in
        ``(gap_lo, gap_hi]``, cannot start now (the backfill pruning's test, module doc).
        Here the free totals and no gap; a backend that knows its nodes may say less."""
        return self.free_c, self.free_g, 0, 0

    def _node_change(self, i: int, dc: int, dm: int, gpus_out: tuple[int, ...],
                     gpus_in: tuple[int, ...]) -> None:
        nodes = self.nodes
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
            self.partial_free += (new if 0 < new < nd.gpus else 0) - (
                old if 0 < old < nd.gpus else 0)
        nodes[i] = NodeView(nd.name, nd.index, nd.partitions, nd.cpus, cf, nd.mem, mf,
                            nd.gpus, gf, nd.gpu_type, nd.usable, nd.weight)
        self.dirty = True

    def arrive(self, tj: TraceJob) -> None:
        self.pending[tj.job_id] = tj
        self.fresh.append(tj.job_id)
        if self.use_sizes:
            insort(self.sizes, (self._size(tj), tj.job_id))
        if tj.gpus:
            self.pending_gpu_jobs += 1
        if not self.new_fit and self._fits(tj):
            self.new_fit = True

    def ended(self, rec: Job, tj: TraceJob) -> None:
        index = self.index
        for a in rec.alloc:
            self._node_change(index[a.node], a.cpus, a.mem, (), a.gpus)
        self.free_c += rec.num_cpus
        self.free_g += tj.gpus
        self.running_views.pop(rec.job_id, None)
        self.freed = self.retest = True

    def started(self, st, tj: TraceJob, rec: Job) -> None:
        jid = st.job_id
        if self.use_sizes:
            del self.sizes[bisect_right(self.sizes, (self._size(tj), jid)) - 1]
        if tj.gpus:
            self.pending_gpu_jobs -= 1
        for na in st.allocation.nodes:
            self._node_change(self.index[na.node], -na.cpus, -na.mem, na.gpus, ())
        self.free_c -= rec.num_cpus
        self.free_g -= tj.gpus
        if self.with_running:
            assert rec.start_time is not None  # it has just started
            self.running_views[jid] = RunningView(
                job_id=jid, partition=st.partition, nodes=st.allocation.nodes, start_time=rec.start_time,
                end_time=rec.end_time, user=rec.user, account=ACCOUNT, qos=QOS)

    def decide(self, t: int, extra: dict) -> tuple:
        queue = self._queue()
        self.freed = self.new_fit = False
        self.fresh.clear()
        if queue is None:
            return ()
        if self.dirty:
            self.nodes_t = tuple(self.nodes)
            self.dirty = False
        snap = Snapshot(now=t, nodes=self.nodes_t, partitions=self.part, pending=queue,
                        running=tuple(self.running_views.values()) if self.with_running else (),
                        **extra)
        c0 = _time.perf_counter()
        plan = self.core(snap, self.cfg)
        self.core_s += _time.perf_counter() - c0
        self.calls += 1
        self.retest = not self.exact_memo
        return plan.starts

    def _queue(self) -> tuple[JobView, ...] | None:
        """The pruned queue (see module doc), or None when nothing could start."""
        pending, views, depth = self.pending, self.views, self.depth
        if not pending:
            return None
        if depth == NO_PRUNING:
            return tuple(views[j] for j in pending)
        if depth == 0:
            out, c, g = [], self.free_c, self.free_g
            for jid, tj in pending.items():
                c -= tj.cpus
                g -= tj.gpus
                if c < 0 or g < 0:
                    break
                out.append(views[jid])
            return tuple(out) if out else None
        freed = self.freed
        if not freed and not self.new_fit:
            return None
        free_c, free_g, gap_lo, gap_hi = self._room()
        free = free_g if self.gpu else free_c

        def fits(tj: TraceJob) -> bool:
            return tj.cpus <= free_c and tj.gpus <= free_g and not gap_lo < tj.gpus <= gap_hi
        if depth is None:
            if not self.sizes or self.sizes[0][0] > free:
                return None
            return tuple(views[j] for j in pending)
        out, blockers, last, any_fit = [], 0, 0, False
        for jid, tj in pending.items():
            out.append(views[jid])
            last = jid
            # fits(tj), inlined: the hot loop
            if tj.cpus <= free_c and tj.gpus <= free_g and not gap_lo < tj.gpus <= gap_hi:
                any_fit = True
            else:
                blockers += 1
                if blockers >= depth:
                    break
        else:
            return tuple(out) if any_fit else None
        if freed or self.retest:
            sizes = self.sizes
            hi = bisect_right(sizes, (free, 1 << 62))
            if gap_lo < gap_hi:  # the sizes in the gap, skipped whole
                a = bisect_right(sizes, (gap_lo, 1 << 62), 0, hi)
                b = bisect_right(sizes, (gap_hi, 1 << 62), a, hi)
                sizes = sizes[:a] + sizes[b:hi]
                hi = len(sizes)
            later = sorted(jid for _, jid in sizes[:hi] if jid > last and fits(pending[jid]))
        else:  # only this instant's arrivals can start (module doc)
            later = sorted(jid for jid in self.fresh if jid > last and fits(pending[jid]))
        if not later and not any_fit:
            return None
        out.extend(views[j] for j in later)
        return tuple(out)


class _NodeClassBackend(_CoreBackend):
    """:class:`~muster.core.nodeclass.NodeClassScheduler`, told each end and applying its own
    starts, offered the same pruned queue as the snapshot core (module doc): its decisions on
    a queue are ``schedule()``'s on a snapshot with that queue, so the replay is the same."""

    name = "nodeclass"
    sched: NodeClassScheduler | GpuClassScheduler

    def __init__(self, sim: Simulator) -> None:
        super().__init__(sim)
        assert sim.nodeclass is not None  # chosen only when a node-class scheduler applies
        self.sched = sim.nodeclass

    def ended(self, rec: Job, tj: TraceJob) -> None:
        self.sched.ended(rec.job_id)
        self.free_c += rec.num_cpus
        self.free_g += tj.gpus
        self.freed = self.retest = True

    def started(self, st, tj: TraceJob, rec: Job) -> None:
        if self.use_sizes:
            del self.sizes[bisect_right(self.sizes, (self._size(tj), st.job_id)) - 1]
        self.free_c -= rec.num_cpus

    def _check(self) -> None:
        """The last pass, applied: the engine's count of what is free is the core's."""
        if self.free_c != self.sched.total or self.free_c < 0:
            raise SimError(f"free CPUs {self.free_c} (engine) != {self.sched.total} (core)")

    def decide(self, t: int, extra: dict) -> tuple:
        self._check()
        queue = self._queue()
        self.freed = self.new_fit = False
        self.fresh.clear()
        if queue is None:
            return ()
        c0 = _time.perf_counter()
        starts = tuple(self.sched.schedule(t, queue))
        self.core_s += _time.perf_counter() - c0
        self.calls += 1
        self.retest = not self.exact_memo
        return starts


class _GpuClassBackend(_NodeClassBackend):
    """:class:`~muster.core.gpuclass.GpuClassScheduler` in the node-class backend's place:
    it counts GPUs, and keeps the GPUs free on partly used nodes (a metric) itself."""

    name = "gpuclass"
    sched: GpuClassScheduler

    @property
    def partial_free(self) -> int:
        return self.sched.partial_free

    @partial_free.setter
    def partial_free(self, value: int) -> None:
        pass  # kept by the scheduler (the base class only sets its start value)

    def started(self, st, tj: TraceJob, rec: Job) -> None:
        super().started(st, tj, rec)
        self.pending_gpu_jobs -= 1
        self.free_g -= tj.gpus

    def _room(self) -> tuple[int, int, int, int]:
        """Less than the GPUs free where they are scattered (:meth:`GpuClassScheduler.room`):
        a job of ``s <= G`` GPUs needs one node with ``s`` free, a wider one whole free
        nodes, or, spread over nodes, ``s`` free GPUs in all."""
        return (self.free_c, *self.sched.room())

    def _check(self) -> None:
        if self.free_g != self.sched.total or self.free_g < 0:
            raise SimError(f"free GPUs {self.free_g} (engine) != {self.sched.total} (core)")
