"""Incremental main scheduler and EASY backfill for one node of fungible processors.

:func:`muster.core.schedule.schedule` rebuilds everything from a snapshot every pass: the
ordered queue, a per-node free-resource timeline from the running jobs, the searches. For
the commonest replay — a workload trace whose processors are pooled into one node (SWF:
CPUs are fungible), flat priorities, one partition — that costs ~90 µs a pass, and a full
replay needs ~95,000 passes. :class:`PooledScheduler` makes **the same decisions** as
``schedule()`` for that case, but keeps its state across passes and is told only the
changes (a job submitted, a job ended); a pass costs a few microseconds.

Scope (:meth:`PooledScheduler.unsupported` and :meth:`PooledScheduler.admit` say why not):
one usable node with no GPUs, one UP partition, a priority of the job alone
(:func:`muster.core.priority.static`: none, basic, or multifactor without weights), queued
in :func:`muster.core.schedule.order_key`'s order (nice breaks priority ties), no
preemption, no job
start limit, the main scheduler alone or backfill with one reservation (EASY: ``bf_depth``
1) and no test budget (``bf_max_job_test`` 0); jobs on that partition only, one node, no
GPUs, not exclusive, memory in proportion to CPUs (so memory binds exactly when CPUs do),
no ``--time-min``/``-w``/``-x``/``--constraint``/``--deadline``/
reservation/switches, not held, not an array. The simulator uses it when the whole trace
fits the scope and the core's ``schedule()`` otherwise.

Why the shortcuts are exact (the timeline semantics of :mod:`muster.core.backfill`):

* Free CPUs over time, ``F(t)`` = free now + the CPUs of running jobs whose estimated end
  is ``<= t``, never decrease: resources only come back. A start carves ``[now, now+d)``
  out of the profile, which keeps ``F`` non-decreasing. So a job fits for ``[now, now+d)``
  iff it fits now, and its earliest start is the first release time at which ``F`` reaches
  its size.
* The one reservation (EASY) carves ``[T, T+d')`` for ``c_r`` CPUs. Afterwards the
  minimum of the profile over ``[now, now+d)`` is ``F(now)`` if ``now+d <= T``, else
  ``min(F(now), F(T) - c_r)``. So a later job starts iff it fits now and either ends by
  ``T`` or fits the *extra* CPUs ``F(T) - c_r`` (less each backfilled job that runs past
  ``T``): classic EASY with a shadow time, O(1) per job.
* Jobs after the reservation can start only if they fit now and (end by ``T`` or fit the
  extra CPUs). The queue is also kept in blocks of consecutive jobs, each with the Pareto
  frontier of its jobs' (CPUs, duration); a block whose frontier has no such point is
  skipped whole, so a backlog of thousands of jobs that cannot be backfilled costs a pass
  a few dozen frontier checks, not thousands of job tests.
* With nothing ended since the last pass and no estimated end reached, every job the last
  pass could not start still cannot (free CPUs and the shadow time did not grow, ``now``
  only grew), so the pass resumes from where the last one stopped and offers only the
  jobs submitted since.

Equality with ``schedule()`` (starts, their allocations and labels, the reservation and its
expected start) is a property test (tests/property/test_pooled_core.py), and the simulator
replays are compared job by job with and without it.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Sequence
from typing import Any

from .backfill import YEAR, estimate, node_tasks, plan_shape
from .limits import partition_reason
from . import priority as prio
from .placement import Allocation, NodeAlloc, request_key, request_of
from .schedule import Start, _static_reason, order_key
from .snapshot import JobView, NodeView, PartitionView, SchedConfig

__all__ = ["PooledScheduler"]

_BLOCK = 32  # queue keys per block of the backfill index (split at twice that)

Key = tuple[Any, ...]  # a queue key: schedule.order_key of the job (its id at [2])
Entry = tuple[int, int, Allocation, int]  # (cpus, planning duration, allocation, end offset)
Shape = tuple[int, int, NodeAlloc, int]  # an Entry before it names its job


def _frontier(keys: list[Key], jobs: dict[Key, Entry]) -> list[tuple[int, int]]:
    """The (cpus, d) pairs of these jobs that no other pair beats in both, by cpus: a job
    can be backfilled only if one of them can (it needs at least as many CPUs and time)."""
    out: list[tuple[int, int]] = []
    best = None
    for c, d in sorted(jobs[k][:2] for k in keys):
        if best is None or d < best:
            out.append((c, d))
            best = d
    return out


def settings_outside(cfg: SchedConfig) -> str | None:
    """Why these scheduler settings are outside an incremental scheduler's scope (this one's
    and :class:`muster.core.nodeclass.NodeClassScheduler`'s), or None."""
    if not prio.static(cfg) or cfg.max_jobs_to_start:
        return "multifactor priority or a job start limit"
    if cfg.preempt_type not in ("preempt/none", "", None):
        return "preemption"
    if cfg.backfill and (cfg.bf_depth != 1 or cfg.bf_max_job_test):
        return "backfill other than EASY without a test budget"
    return None


def job_outside(job: JobView, part: PartitionView, scope: str) -> str | None:
    """Why ``job``'s options keep it from an incremental scheduler of one partition ``part``
    (``scope`` names the scheduler in the answer), or None."""
    if job.partitions != (part.name,) or job.blocked or job.max_starts != 1 or \
            job.req_nodes or job.exc_nodes or job.constraint or job.reservation or \
            job.switches or job.time_min or job.gpu_type or job.deadline is not None:
        return f"job options outside the {scope} scope"
    if _static_reason(job, part) or partition_reason(job, part):
        return "the partition rejects the job"
    return None


class PooledScheduler:
    """State: free CPUs, running jobs' estimated ends (sorted), the ordered queue and its
    block index; after each pass, where it stopped (see module doc)."""

    __slots__ = ("node", "part", "cfg", "free", "ratio", "depth", "window", "queue", "jobs",
                 "_bkeys", "_bfirst", "_bfront", "_thin", "releases", "running", "_fresh",
                 "_resume", "reservation", "_admitted", "_shapes", "_overdue")

    def __init__(self, node: NodeView, part: PartitionView, cfg: SchedConfig) -> None:
        why = self.unsupported([node], [part], cfg)
        if why:
            raise ValueError(why)
        self.node, self.part, self.cfg = node, part, cfg
        self.free = node.cpus_free
        self.ratio = node.mem // node.cpus
        self.depth = 1 if cfg.backfill else 0
        self.window = cfg.bf_window * 60
        self.queue: list[Key] = []              # ordered keys: schedule.order_key
        self.jobs: dict[Key, Entry] = {}        # key → (cpus, d, allocation, end offset)
        # the queue again, cut into blocks of consecutive keys, each with the Pareto frontier
        # of its jobs' (cpus, d): a block none of whose frontier points could be backfilled
        # is skipped whole (_backfill)
        self._bkeys: list[list[Key]] = [[]]
        self._bfirst: list[Key] = [()]          # a lower bound of each block's keys
        self._bfront: list[list[tuple[int, int]] | None] = [None]
        self._thin: set[int] = set()  # blocks that ran low: merged at the end of the pass
        self.releases: list[tuple[int, int, int]] = []  # (estimated end, job id, cpus), ascending
        self.running: dict[int, tuple[int, int]] = {}  # job id → (estimated end, cpus)
        self._fresh: list[Key] = []             # keys submitted since the last pass
        self._resume: list[Any] | None = None   # [blocked, T, extra, queue tail] or None
        self.reservation: tuple[int, int] | None = None  # (job id, expected start) last pass
        self._admitted: dict[int, tuple[JobView, Entry]] = {}  # job id → (JobView, its shape)
        self._shapes: dict[Key, Shape | None] = {}  # request and limits → (cpus, d, NodeAlloc)
        self._overdue: list[tuple[int, int]] = []  # started with a 0 limit: (job, its end)

    # ---- scope ------------------------------------------------------------------------
    @staticmethod
    def unsupported(nodes: Sequence[NodeView], parts: Sequence[PartitionView], cfg: SchedConfig
                    ) -> str | None:
        """Why these settings are outside the scope (module doc), or None."""
        if len(nodes) != 1 or len(parts) != 1:
            return "more than one node or partition"
        n, p = nodes[0], parts[0]
        if n.gpus or not n.usable or n.cpus < 1 or n.mem % n.cpus or \
                n.mem_free * n.cpus != n.cpus_free * n.mem:
            return "the node has GPUs, is not usable, or memory is not in proportion to CPUs"
        if p.state != "UP" or n.name not in p.node_names:
            return "the partition is not UP or does not hold the node"
        return settings_outside(cfg)

    def admit(self, job: JobView) -> str | None:
        """Why ``job`` is outside the scope, or None (it could then be :meth:`submit`-ted)."""
        part = self.part
        why = job_outside(job, part, "pooled")
        if why is not None:
            return why
        shape = self._shape(job)
        if shape is None:
            return "the job's shape is outside the pooled scope"
        self._admitted[job.job_id] = (job, shape)
        return None

    def _shape(self, job: JobView) -> Entry | None:
        """(cpus, planning duration, allocation) or None; the same request normalisation
        and shape as backfill's (:func:`plan_shape`), the allocation ``_direct`` builds.
        Memoised by what they read (a trace has few distinct shapes)."""
        key = (request_key(job), job.time_limit, job.time_min)
        if key in self._shapes:
            got = self._shapes[key]
        else:
            got = self._shapes[key] = self._new_shape(job)
        if got is None:
            return None
        c, d, na, off = got
        return c, d, Allocation(job_id=job.job_id, nodes=(na,)), off

    def _new_shape(self, job: JobView) -> Shape | None:
        n = self.node
        rq = request_of(job, self.cfg)
        if rq.gpu_mode or rq.exclusive or rq.mem_mode != "cpu" or rq.mem != self.ratio:
            return None
        shaped = plan_shape(rq, (n.cpus, n.mem, 0))
        if shaped is None or shaped[1] != 1 or shaped[0][0] > n.cpus:
            return None
        c = shaped[0][0]
        na = NodeAlloc(node=n.name, cpus=c, mem=rq.mem * c, gpus=(), tasks=node_tasks(rq))
        # the pass plans [now, now + d); later passes see the running job end where the
        # shell's lifecycle puts it (running_end): start + limit, or + MaxTime, or + a year.
        # They differ only for a limit of 0 (planned as a minute, ends at once: overdue)
        lim = job.time_limit if job.time_limit is not None else self.part.max_time
        off = YEAR if lim is None else 60 * lim
        return c, estimate(job, self.part), na, off

    # ---- changes ----------------------------------------------------------------------
    def submit(self, job: JobView) -> None:
        """Queue an admitted job (:meth:`admit` returned None)."""
        seen = self._admitted.pop(job.job_id, None)
        got = seen[1] if seen is not None and seen[0] is job else self._shape(job)
        if got is None:
            raise ValueError(f"job {job.job_id} is outside the pooled scope")
        key = order_key(prio.static_priority(job, self.cfg), job)  # [2]: the job id
        self.jobs[key] = got
        insort(self.queue, key)
        b = bisect_right(self._bfirst, key) - 1
        blk = self._bkeys[b]
        insort(blk, key)
        self._bfront[b] = None
        if len(blk) > 2 * _BLOCK:
            self._bkeys[b + 1:b + 1] = [blk[_BLOCK:]]
            del blk[_BLOCK:]
            self._bfirst.insert(b + 1, self._bkeys[b + 1][0])
            self._bfront.insert(b + 1, None)
        self._fresh.append(key)

    def ended(self, job_id: int) -> None:
        """A running job (started by this scheduler) gave its CPUs back."""
        end, c = self.running.pop(job_id)
        self.free += c
        rel = self.releases
        del rel[bisect_left(rel, (end, job_id))]
        self._resume = None

    # ---- the pass ---------------------------------------------------------------------
    def schedule(self, now: int) -> list[Start]:
        """The starts ``schedule()`` would make now, applied to this state. Afterwards
        :attr:`reservation` is the EASY reservation (job id, expected start) or None."""
        st, rel, fresh = self._resume, self.releases, self._fresh
        if st is not None and (not rel or rel[0][0] > now):
            if not fresh:
                return []  # nothing ended, nothing new: nothing can start
            keys = sorted(fresh)  # resume: only the new jobs can start (module doc)
            if st[3] is not None and keys[0] <= st[3]:
                st = None
        else:
            st = None
        self._fresh = []
        if st is None:
            st = [False, None, 0, None]  # blocked, shadow time T, extra CPUs, queue tail
            keys = self.queue
            self.reservation = None
        full = keys is self.queue
        starts: list[Start] = []
        jobs, depth = self.jobs, self.depth
        resumable = True
        i = 0
        if st[1] is None:  # no reservation yet: a job starts iff it fits now
            while i < len(keys) and not (st[0] and not depth):
                key = keys[i]
                c, d, alloc, off = jobs[key]
                if c <= self.free:
                    self._start(key, c, d, alloc, off, now, st[0], starts)
                    i += not full  # a start leaves the queue: the next key moves up
                    continue
                i += 1
                st[0] = True
                if not depth:
                    break  # the main scheduler: the first waiting job blocks the rest
                T, extra = self._earliest(c, now)
                if T is None or T > now + self.window:
                    resumable = False  # the window moves with now: recompute next time
                    continue  # no reservation; the next waiting job may get it
                st[1], st[2] = T, extra
                self.reservation = (key[2], T)
                if full:
                    st[2] = self._backfill(key, now, T - now, extra, starts)
                    keys = []
                break
        if st[1] is not None:  # EASY: fits now, and ends by T or fits the extra CPUs
            until, extra = st[1] - now, st[2]
            for key in keys[i:] if i else keys:
                c, d, alloc, off = jobs[key]
                if c <= self.free and (d <= until or c <= extra):
                    self._start(key, c, d, alloc, off, now, True, starts)
                    if d > until:
                        extra -= c
            st[2] = extra
        if self._thin:
            self._compact()
        for jid, end in self._overdue:  # after this pass, as the shell's lifecycle says
            old, c = self.running[jid]
            rel = self.releases
            del rel[bisect_left(rel, (old, jid))]
            insort(rel, (end, jid, c))
            self.running[jid] = (end, c)
        self._overdue.clear()
        st[3] = self.queue[-1] if self.queue else None
        self._resume = st if resumable else None
        return starts

    def _start(self, key: Key, c: int, d: int, alloc: Allocation, off: int, now: int,
               blocked: bool, starts: list[Start]) -> None:
        jid = key[2]
        del self.jobs[key]
        q = self.queue
        del q[bisect_left(q, key)]
        b = bisect_right(self._bfirst, key) - 1
        blk = self._bkeys[b]
        del blk[bisect_left(blk, key)]
        self._bfront[b] = None
        if len(blk) <= _BLOCK // 4:
            self._thin.add(b)
        self.free -= c
        end = now + d
        insort(self.releases, (end, jid, c))
        self.running[jid] = (end, c)
        if off != d:
            self._overdue.append((jid, now + off))
        starts.append(Start(job_id=jid, partition=self.part.name, allocation=alloc,
                            scheduler="Backfill" if blocked else "Main"))

    def _backfill(self, after: Key, now: int, until: int, extra: int,
                  starts: list[Start]) -> int:
        """Start, in queue order after ``after``, every job that fits the free CPUs and
        either ends by the shadow time (``d <= until``) or fits the extra CPUs; returns the
        extra CPUs left. Starts only shrink the free and extra CPUs, so a block none of whose
        frontier points passes now cannot hold a job that passes later in the pass."""
        jobs, bkeys, bfront = self.jobs, self._bkeys, self._bfront
        b = max(0, bisect_right(self._bfirst, after) - 1)
        while b < len(bkeys) and self.free:
            fr = bfront[b]
            if fr is None:
                fr = bfront[b] = _frontier(bkeys[b], jobs)
            free = self.free
            for c, d in fr:
                if c > free:
                    break
                if d <= until or c <= extra:
                    break
            else:
                c = free + 1
            if c <= free:  # some job of the block may pass: test them in order
                for key in [k for k in bkeys[b] if k > after]:
                    c, d, alloc, off = jobs[key]
                    if c <= self.free and (d <= until or c <= extra):
                        self._start(key, c, d, alloc, off, now, True, starts)
                        if d > until:
                            extra -= c
            b += 1
        return extra

    def _compact(self) -> None:
        """Merge each block that ran low during the pass into its successor (or drop it
        if empty). Block indices do not move during a pass; from the last one down, a
        merge moves none of those still to do."""
        bkeys, bfirst, bfront = self._bkeys, self._bfirst, self._bfront
        for b in sorted(self._thin, reverse=True):
            if b + 1 < len(bkeys) and len(bkeys[b]) + len(bkeys[b + 1]) <= 2 * _BLOCK:
                bkeys[b].extend(bkeys[b + 1])
                del bkeys[b + 1], bfirst[b + 1], bfront[b + 1]
                bfront[b] = None
            elif not bkeys[b] and len(bkeys) > 1:
                del bkeys[b], bfront[b]
                del bfirst[b if b else 1]  # block 0 keeps the lower bound ()
        self._thin.clear()

    def _earliest(self, need: int, now: int) -> tuple[int | None, int]:
        """First time the free CPUs reach ``need`` and the CPUs free then beyond it.
        Estimated ends already past count from now + KillWait + OverTimeLimit, as in
        :func:`~muster.core.backfill.running_end` (never, if that is now too)."""
        rel = self.releases
        if rel and rel[0][0] <= now:
            late = now + self.cfg.kill_wait + self.cfg.over_time_limit * 60
            # an end at or before now never comes back in the profile (Timeline.build)
            rel = sorted((e if e > now else late, j, c) for e, j, c in rel
                         if e > now or late > now)
        acc = self.free
        T = None
        for e, _, c in rel:
            if T is not None and e != T:
                break
            acc += c
            if T is None and acc >= need:
                T = e
        return T, acc - need
