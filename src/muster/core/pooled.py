"""Incremental main scheduler and backfill (EASY, conservative) for one node of fungible
processors.

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
preemption, no job start limit, the main scheduler alone or backfill with any number of
reservations (EASY: ``bf_depth`` 1; conservative: None) and any test budget
(``bf_max_job_test``); jobs on that partition only, one node, no GPUs, not exclusive,
memory in proportion to CPUs (so memory binds exactly when CPUs do), no
``--time-min``/``-w``/``-x``/``--constraint``/``--deadline``/reservation/switches, not
held, not an array. The simulator uses it when the whole trace
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

Several reservations (conservative, or any ``bf_depth`` but 1), or a test budget (only the
first ``bf_max_job_test`` jobs of the queue are looked at), need more than a shadow time:
every waiting job's reservation shapes the profile the next one sees. The pass walks the
queue on the one node's profile as :class:`~muster.core.timeline.Timeline` holds it
(breakpoints and free CPUs, starts and reservations carved out, the same earliest-fit
search and ``bf_resolution`` rounding), with three shortcuts:

* Reservations are not state: ``schedule()`` recomputes them every pass, and only the starts
  are decisions. So the walk stops after the last queue block holding a job that fits now
  (read off the block frontiers: a job fits only if a frontier point of its block does).
  Past it, a reservation could only keep a later job from starting now, and no later job
  could start.
* Within a pass, the profile only shrinks. So a shape's earliest start is never before the
  one found for it earlier in the pass, and its search starts there.
* With nothing ended and no estimated end reached since the last pass, that pass's profile
  and reservations are what a pass now would compute for the jobs it looked at:
  - every breakpoint but the first is after now (releases are, and reservations start at
    them or at the ends of other reservations);
  - a job that did not fit then does not fit now (its window now covers the same
    breakpoints or more);
  - the window's edge moved only later (a pass that met the edge is not kept).
  The walk then resumes after the last job it looked at, if every new job comes after it.
  A walk the test budget stopped resumes too, new jobs or not: its starts have left the
  queue, so the budget now reaches further.

Equality with ``schedule()`` is a property test (tests/property/test_pooled_core.py): the
starts, their allocations and labels; the reservation and its expected start; with several
reservations, those of every job the pass looked at. The simulator replays are compared job
by job with and without it.
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


def settings_outside(cfg: SchedConfig, any_backfill: bool = False) -> str | None:
    """Why these scheduler settings are outside an incremental scheduler's scope (this one's
    and :class:`muster.core.nodeclass.NodeClassScheduler`'s), or None. ``any_backfill``: any
    number of reservations (conservative included) and a test budget are in scope, not
    only EASY without one."""
    if not prio.static(cfg) or cfg.max_jobs_to_start:
        return "multifactor priority or a job start limit"
    if cfg.preempt_type not in ("preempt/none", "", None):
        return "preemption"
    if cfg.backfill and not any_backfill and (cfg.bf_depth != 1 or cfg.bf_max_job_test):
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


class _Walk:
    """A profiled pass so far (:meth:`PooledScheduler._walk_queue`): the free CPUs over time
    with every start and reservation made carved out — breakpoints ``ts`` (``ts[0]``: the
    pass's now) and ``cs[i]`` free on ``[ts[i], ts[i+1])``, the last forever, exactly
    :class:`~muster.core.timeline.Timeline`'s profile of the one node; the last queue key
    looked at (None: none yet); whether a job waited (later starts are ``Backfill``);
    reservations made; the jobs looked at that wait; whether the test budget stopped it;
    whether a later pass may resume it (no answer met the window's edge, which moves with
    now)."""

    __slots__ = ("ts", "cs", "last", "blocked", "reserved", "waiting", "budget_stop",
                 "resumable")

    def __init__(self, ts: list[int], cs: list[int]) -> None:
        self.ts, self.cs = ts, cs
        self.last: Key | None = None
        self.blocked = False
        self.reserved = 0
        self.waiting = 0  # jobs looked at that did not start (they spent the test budget)
        self.budget_stop = False  # the test budget stopped the walk (its starts give it back)
        self.resumable = True


def _carve(ts: list[int], cs: list[int], i0: int, t1: int, c: int) -> None:
    """Take ``c`` CPUs from breakpoint ``i0`` to ``t1`` (after it), a breakpoint made if new
    (Timeline.reserve)."""
    i1 = bisect_left(ts, t1, i0)
    if i1 == len(ts) or ts[i1] != t1:
        ts.insert(i1, t1)
        cs.insert(i1, cs[i1 - 1])
    for j in range(i0, i1):
        cs[j] -= c


def _fits_now(ts: list[int], cs: list[int], c: int, end: int) -> bool:
    """``c`` CPUs free throughout ``[ts[0], end)``."""
    if cs[0] < c:
        return False
    j, n = 1, len(ts)
    while j < n and ts[j] < end:
        if cs[j] < c:
            return False
        j += 1
    return True


def _next_fit(ts: list[int], cs: list[int], c: int, d: int, i: int) -> int:
    """The first breakpoint index ``>= i``, ``ts[s]``, with ``c`` CPUs free throughout
    ``[ts[s], ts[s] + d)`` (:meth:`Timeline.next_fit` on one node), or -1: never."""
    n = len(ts)
    while i < n:
        if cs[i] < c:
            i += 1
            continue
        end = ts[i] + d
        j = i + 1
        while j < n and ts[j] < end:
            if cs[j] < c:
                break
            j += 1
        else:
            return i
        i = j + 1
    return -1


class PooledScheduler:
    """State: free CPUs, running jobs' estimated ends (sorted), the ordered queue and its
    block index; after each pass, where it stopped (see module doc)."""

    __slots__ = ("node", "part", "cfg", "free", "ratio", "depth", "window", "queue", "jobs",
                 "_bkeys", "_bfirst", "_bfront", "_thin", "releases", "running", "_fresh",
                 "_resume", "reservation", "_admitted", "_shapes", "_overdue", "_profiled",
                 "_walk", "expected", "looked")

    def __init__(self, node: NodeView, part: PartitionView, cfg: SchedConfig) -> None:
        why = self.unsupported([node], [part], cfg)
        if why:
            raise ValueError(why)
        self.node, self.part, self.cfg = node, part, cfg
        self.free = node.cpus_free
        self.ratio = node.mem // node.cpus
        self.depth = 1 if cfg.backfill else 0
        # backfill with other than one reservation (conservative: bf_depth None) or with a
        # test budget plans on a carved profile (_walk_queue); EASY without one keeps its
        # shadow-time arithmetic
        self._profiled = cfg.backfill and (cfg.bf_depth != 1 or cfg.bf_max_job_test > 0)
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
        self._walk: _Walk | None = None  # the profiled pass's state, kept to resume it
        self.expected: dict[int, int] = {}  # profiled passes: job → reserved start
        self.looked: Key | None = None  # profiled passes: the last queue key looked at

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
        return settings_outside(cfg, any_backfill=True)

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
        self._resume = self._walk = None

    # ---- the pass ---------------------------------------------------------------------
    def schedule(self, now: int) -> list[Start]:
        """The starts ``schedule()`` would make now, applied to this state. Afterwards
        :attr:`reservation` is the EASY reservation (job id, expected start) or None; with
        several reservations :attr:`expected` holds those of the jobs the pass looked at."""
        if self._profiled:
            return self._profiled_pass(now)
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
        self._after_pass()
        st[3] = self.queue[-1] if self.queue else None
        self._resume = st if resumable else None
        return starts

    # ---- several reservations (conservative) -------------------------------------------
    def _profiled_pass(self, now: int) -> list[Start]:
        """Backfill with ``bf_depth`` reservations (None: every waiting job, conservative) on
        a carved profile: ``schedule()``'s backfill pass on one node (module doc, "Several
        reservations"). Resumed where the last pass stopped when nothing ended, no estimated
        end was reached and only jobs after the last one looked at were submitted, or when
        the test budget stopped it (its starts have left the queue: the budget reaches
        further now)."""
        w, rel, fresh = self._walk, self.releases, self._fresh
        self._fresh = []
        if w is not None and (not rel or rel[0][0] > now):
            if not fresh and not w.budget_stop:
                return []
            if fresh and w.last is not None and min(fresh) <= w.last:
                w = None
        else:
            w = None
        if w is None:
            w = self._profile(now)
            self.expected = {}
        else:
            w.ts[0] = now  # every other breakpoint is still after now (module doc)
        starts: list[Start] = []
        self._walk_queue(w, now, starts)
        self.looked = w.last
        self._after_pass()
        self._walk = w if w.resumable else None
        return starts

    def _profile(self, now: int) -> _Walk:
        """Free CPUs over time from the running jobs' estimated ends (those already past:
        now + KillWait + OverTimeLimit, or never when that is now too: Timeline.build)."""
        rel = self.releases
        ends = [(e, c) for e, _, c in rel]
        if rel and rel[0][0] <= now:
            late = now + self.cfg.kill_wait + self.cfg.over_time_limit * 60
            ends = sorted((e if e > now else late, c) for e, c in ends)
        ts, cs = [now], [self.free]
        for e, c in ends:
            if e <= now:
                continue
            if ts[-1] == e:
                cs[-1] += c
            else:
                ts.append(e)
                cs.append(cs[-1] + c)
        return _Walk(ts, cs)

    def _walk_queue(self, w: _Walk, now: int, starts: list[Start]) -> None:
        """In queue order after ``w.last``: start each job that fits now for its whole planned
        run on the carved profile, else (while reservations are left) reserve its earliest
        window. Stops after the last block with a job that fits now: past it the walk could
        only reserve, and a reservation only keeps a later job from starting now (a later
        pass resumes from there). Which block that is, is read off the blocks' frontiers
        (a job fits only if a frontier point of its block does); carving only takes CPUs
        away, so it only moves back as the walk goes on."""
        jobs, bkeys, bfront = self.jobs, self._bkeys, self._bfront
        ts, cs = w.ts, w.cs
        depth = self.cfg.bf_depth
        horizon = now + self.window
        resolution = max(1, self.cfg.bf_resolution)
        last = w.last
        b = 0 if last is None else max(0, bisect_right(self._bfirst, last) - 1)

        def may_start(i: int) -> bool:  # a job of block i may start now (frontier: Pareto)
            fr = bfront[i]
            if fr is None:
                fr = bfront[i] = _frontier(bkeys[i], jobs)
            free = cs[0]
            return any(c <= free and _fits_now(ts, cs, c, now + d) for c, d in fr)
        top = len(bkeys) - 1  # the last block that may start a job
        while top >= b and not may_start(top):
            top -= 1
        fit: dict[tuple[int, int], int] = {}  # (cpus, d) → its last earliest start this pass
        # bf_max_job_test: only the first that many jobs of the queue are looked at (a start
        # counts in its pass; the jobs a resumed walk passed over and that wait, again)
        budget = self.cfg.bf_max_job_test or 1 << 62
        spent = w.waiting
        while b <= top and spent < budget:
            for key in [k for k in bkeys[b] if last is None or k > last]:
                if spent >= budget:
                    break
                spent += 1
                c, d, alloc, off = jobs[key]
                if c <= cs[0] and _fits_now(ts, cs, c, now + d):
                    _carve(ts, cs, 0, now + d, c)
                    self._start(key, c, d, alloc, off, now, w.blocked, starts)
                else:
                    w.blocked = True
                    w.waiting += 1
                    if depth is None or w.reserved < depth:
                        self._reserve(w, key[2], c, d, horizon, resolution, fit)
                last = key
            b += 1
            while top >= b and not may_start(top):
                top -= 1
        # the budget may have left jobs unlooked at: the next pass looks again, since the
        # starts of this one no longer count there
        w.budget_stop = spent >= budget
        w.last = last

    def _reserve(self, w: _Walk, jid: int, c: int, d: int, horizon: int, resolution: int,
                 fit: dict[tuple[int, int], int]) -> None:
        """Reserve ``c`` CPUs from the earliest start for ``d`` rounded up to the resolution
        (``_Pass.reserve``); none when that start is past the window's edge. ``fit``: the
        earliest start last found for a shape this pass, where the search resumes: the
        profile only shrank since, so no earlier start fits now."""
        ts, cs = w.ts, w.cs
        since = fit.get((c, d))
        i = _next_fit(ts, cs, c, d, 0 if since is None else bisect_left(ts, since))
        if i >= 0:
            fit[c, d] = ts[i]
            held = -(-d // resolution) * resolution
            if held != d and ts[i] <= horizon:
                i = _next_fit(ts, cs, c, held, i)
        if i < 0 or ts[i] > horizon:
            w.resumable = False  # the edge moves with now: a later pass looks again
            return
        T = ts[i]
        _carve(ts, cs, i, T + held, c)
        w.reserved += 1
        self.expected[jid] = T

    def _after_pass(self) -> None:
        if self._thin:
            self._compact()
        for jid, end in self._overdue:  # after this pass, as the shell's lifecycle says
            old, c = self.running[jid]
            rel = self.releases
            del rel[bisect_left(rel, (old, jid))]
            insort(rel, (end, jid, c))
            self.running[jid] = (end, c)
        self._overdue.clear()

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
