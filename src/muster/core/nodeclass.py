"""Incremental FIFO/EASY scheduler for many identical CPU nodes (node classes).

:func:`muster.core.schedule.schedule` rebuilds a per-node timeline from the running jobs and
searches it on every pass. For the commonest multi-node replay — an SWF workload on its real
node shape (``--nodes N --cpus-per-node C``: identical CPU-only nodes, ``-n`` jobs of one-CPU
tasks, memory in proportion) — :class:`NodeClassScheduler` makes **the same decisions** on
the queue it is given, from state kept across passes: each node's free CPUs, the nodes
grouped by that count (a *node class*: nodes with equal free CPUs are interchangeable until a
start picks concrete ones, lowest index first) and the running jobs' estimated ends. It is
told starts (its own) and ends; a pass costs the jobs it is offered plus, only when a job is
tested behind a waiting one, one walk of the estimated ends up to the reservation.

Scope (:meth:`NodeClassScheduler.unsupported`, :meth:`NodeClassScheduler.admit`): usable
nodes with equal CPUs, equal weights, no GPUs and memory in proportion to CPUs, all in one
UP partition; a priority of the job alone, no preemption, no start limit; the main scheduler,
or backfill with one reservation (EASY) and no test budget; jobs on that partition with
``-n`` one-CPU tasks (memory per CPU equal to the nodes' ratio), one job per array entry,
without ``-N``/``-w``/``-x``/``--constraint``/``--time-min``/``--deadline``/GPUs/exclusive/
reservation/switches, a limit of at least one minute.

Why the shortcuts are exact (the rules of :mod:`muster.core.placement` and
:mod:`muster.core.backfill` on such nodes):

* A node's free CPUs over time, ``G_p(t)`` = free now + the CPUs of its running jobs whose
  estimated end is ``<= t``, never decrease, and a start carves ``[now, now+d)``, which keeps
  them non-decreasing. So before a reservation a job fits ``[T, T+d)`` iff it fits at ``T``.
* Placement of ``-n N`` on nodes whose memory follows their CPUs: a node holds
  ``free CPUs`` tasks, and its best-fit key is (free CPUs, index). The main scheduler takes
  the single node with the fewest free CPUs >= N (lowest index), else spreads: nodes by most
  free CPUs (lowest index first) until N are covered, the last one swapped for the best-fit
  node covering the remainder, tasks filling the nodes in that order. Backfill plans a job
  of at most one node's CPUs as a one-node shape (never spread) and a wider one with the
  spreading rule on the window's free CPUs at each breakpoint up to the window's end.
* The one reservation (EASY) holds ``r_p`` CPUs of its nodes on ``[T, T+d')``. A later job
  with ``now + d <= T`` sees every node's free CPUs now; one running past ``T`` sees
  ``min(free_p, G_p(T) - r_p)`` on a reserved node and its free CPUs on every other one
  (``G_p(T) >= free_p``). A backfilled start lowers ``G_p(T)`` only if it runs past ``T``.

Equality with ``schedule()`` (starts, their allocations and labels, the reservation's job,
start and nodes) is a property test (tests/property/test_nodeclass_core.py); the simulator
replays are compared job by job with the snapshot core (docs/simulation.md).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Container, Iterator, Sequence
from functools import partial
from itertools import filterfalse, islice
from typing import Any

from . import priority as prio
from .backfill import YEAR, estimate
from .placement import Allocation, NodeAlloc, Request, request_key, request_of
from .pooled import job_outside, settings_outside
from .schedule import Start, order_key
from .snapshot import JobView, NodeView, PartitionView, SchedConfig

__all__ = ["NodeClassScheduler"]

# per admitted job: (queue key, tasks = CPUs, planning duration d, end offset of its limit, the
# job); the key is unique (it ends with the job id), so sorting rows never compares jobs
Info = tuple[tuple[Any, ...], int, int, int, JobView]
Pick = list[tuple[int, int]]  # (node position, CPUs) in the order placement chose them


class _Resv:
    """The pass's reservation: its start ``T`` and, per reserved node, ``b_p = G_p(T) - r_p``
    (what a job running past ``T`` may still use there, at most its free CPUs).

    Kept by class as well, so that a job running past ``T`` is placed at a cost in node
    classes, not in reserved nodes: ``eff[a]`` the reserved nodes (ascending) whose usable
    CPUs ``min(free_p, b_p)`` are ``a > 0``, and ``excess`` = the sum of ``free_p - b_p``
    where positive (free CPUs such a job may not use). :meth:`NodeClassScheduler._start`
    keeps both up to date when a start takes CPUs of a reserved node."""

    __slots__ = ("job_id", "T", "b", "nodes", "eff", "excess")

    def __init__(self, job_id: int, T: int, b: dict[int, int], pick: Pick,
                 free: list[int]) -> None:
        self.job_id, self.T, self.b = job_id, T, b
        self.nodes = [p for p, _ in pick]  # the reserved positions (the reservation's nodes)
        self.eff: dict[int, list[int]] = {}
        self.excess = 0
        for p, v in sorted(b.items()):
            f = free[p]
            if f > v:
                self.excess += f - v
            a = min(f, v)
            if a > 0:
                self.eff.setdefault(a, []).append(p)

    @classmethod
    def whole(cls, job_id: int, T: int, nodes: list[int], free: list[int]) -> _Resv:
        """The reservation of every CPU of one-CPU ``nodes`` (ascending): ``b_p = 0`` each, so
        none is usable past ``T`` (``eff`` empty) and the excess is those free now. What
        ``_Resv(job_id, T, {p: 0 ...}, [(p, 1) ...], free)`` builds, without its sort."""
        self = cls.__new__(cls)
        self.job_id, self.T = job_id, T
        self.b = dict.fromkeys(nodes, 0)
        self.nodes = nodes
        self.eff = {}
        self.excess = sum(map(free.__getitem__, nodes))
        return self

    def moved(self, p: int, old_free: int, old_b: int, free: int) -> None:
        """Reserved node ``p`` went from ``old_free`` free CPUs and ``old_b`` to ``free``
        and ``b[p]``: move it between the usable-CPU classes and correct the excess."""
        b = self.b[p]
        self.excess += max(0, free - b) - max(0, old_free - old_b)
        a0, a1 = min(old_free, old_b), min(free, b)
        if a0 != a1:
            if a0 > 0:
                cls = self.eff[a0]
                del cls[bisect_left(cls, p)]
            if a1 > 0:
                insort(self.eff.setdefault(a1, []), p)


class ClassScheduler:
    """What the node-class schedulers share (this one and
    :class:`muster.core.gpuclass.GpuClassScheduler`): the scope's partition and settings,
    each admitted job's queue row, the running jobs' estimated ends. A subclass sets
    ``nodes``, ``part``, ``cfg``, ``running``, ``releases`` and the caches, and implements
    ``_row(job, rq)``: the job's row, or why its shape is out of scope."""

    __slots__ = ("nodes", "part", "cfg", "backfill", "running", "releases", "_info", "_res",
                 "_wait", "_share", "_requests")
    scope = "node-class"
    nodes: list[NodeView]
    part: PartitionView
    cfg: SchedConfig
    running: dict[int, Any]
    releases: list[tuple[int, int]]
    _info: dict[int, tuple[JobView, Any]]
    _res: Any
    _wait: Any
    _share: dict[Any, NodeAlloc]
    _requests: dict[tuple[Any, ...], Request]

    def _setup(self, nodes: Sequence[NodeView], part: PartitionView, cfg: SchedConfig) -> None:
        why = self.unsupported(nodes, [part], cfg)
        if why:
            raise ValueError(why)
        self.nodes = sorted(nodes, key=lambda n: n.index)
        self.part, self.cfg = part, cfg
        self.backfill = cfg.backfill
        self.running = {}
        self.releases = []  # (estimated end, job), ascending
        self._info = {}
        self._res = None  # the last pass's reservation
        self._wait = None  # a waiting job not yet reserved
        self._share = {}  # a start's per-node share, made once
        self._requests = {}  # request_key → the request (one config)

    nodes_why: str  # why a subclass's nodes are outside its scope (unsupported)

    @staticmethod
    def _node_outside(n: NodeView, n0: NodeView) -> bool:  # pragma: no cover - subclass's own
        """Whether node ``n`` (the first being ``n0``) fails the subclass's own node rules."""
        raise NotImplementedError

    @classmethod
    def unsupported(cls, nodes: Sequence[NodeView], parts: Sequence[PartitionView],
                    cfg: SchedConfig) -> str | None:
        """Why these settings are outside the scope (the subclass's module doc), or None:
        one partition; usable nodes with equal CPUs, weights and memory, memory in proportion
        to CPUs, and the subclass's own rules (:meth:`_node_outside`)."""
        if not nodes or len(parts) != 1:
            return "no nodes, or more than one partition"
        n0 = nodes[0]
        for n in nodes:
            if not n.usable or n.cpus != n0.cpus or n.weight != n0.weight or \
                    n.mem != n0.mem or n.mem % n.cpus or \
                    n.mem_free * n.cpus != n.cpus_free * n.mem or cls._node_outside(n, n0):
                return cls.nodes_why
        return cls.partition_outside(nodes, parts, cfg)

    @staticmethod
    def partition_outside(nodes: Sequence[NodeView], parts: Sequence[PartitionView],
                          cfg: SchedConfig) -> str | None:
        """Why the partition or the settings are outside the scope (one UP partition holding
        exactly these nodes, no node cap; :func:`settings_outside`), or None."""
        p = parts[0]
        if p.state != "UP" or set(p.node_names) != {n.name for n in nodes} or \
                p.max_nodes is not None:
            return "the partition is not UP, does not hold exactly the nodes, or caps nodes"
        return settings_outside(cfg)

    def _row(self, job: JobView, rq: Request) -> Any:  # pragma: no cover - subclass's own
        raise NotImplementedError

    def admit(self, job: JobView) -> str | None:
        """Why ``job`` is outside the scope, or None (it may then be offered to a pass)."""
        why = job_outside(job, self.part, self.scope)
        if why is not None:
            return why
        key = request_key(job)  # jobs of one shape share their request (replays: thousands)
        rq = self._requests.get(key)
        if rq is None:
            rq = self._requests[key] = request_of(job, self.cfg)
        row = self._row(job, rq)
        if isinstance(row, str):
            return row
        lim = job.time_limit if job.time_limit is not None else self.part.max_time
        if lim is not None and lim < 1:
            return "a limit under a minute (planned longer than it runs)"
        self._info[job.job_id] = (job, (order_key(prio.static_priority(job, self.cfg), job),
                                        *row, estimate(job, self.part),
                                        YEAR if lim is None else 60 * lim, job))
        return None

    def _rows(self, queue: Sequence[JobView]) -> list[Any]:
        """The rows of the jobs offered to a pass, in queue order (sorted by their key)."""
        get, rows = self._info.get, []
        for j in queue:  # info(j), inlined: a replay offers millions of jobs to its passes
            got = get(j.job_id)
            rows.append(got[1] if got is not None and got[0] is j else self.info(j))
        rows.sort()
        return rows

    def info(self, job: JobView) -> Any:
        got = self._info.get(job.job_id)
        if got is None or got[0] is not job:
            why = self.admit(job)
            if why is not None:
                raise ValueError(f"job {job.job_id}: {why}")
            got = self._info[job.job_id]
        return got[1]

    @property
    def reservation(self) -> tuple[int, int, tuple[str, ...]] | None:
        """The last pass's EASY reservation: (job, expected start, node names), or None."""
        res = self._res
        return None if res is None else (
            res.job_id, res.T, tuple(self.nodes[p].name for p in sorted(res.nodes)))

    def _ends(self, now: int) -> list[tuple[int, int]]:
        """The estimated ends as the timeline sees them: an end already past comes back at
        now + KillWait + OverTimeLimit (never, if that is not after now)."""
        rel = self.releases
        if not rel or rel[0][0] > now:
            return rel
        late = now + self.cfg.kill_wait + self.cfg.over_time_limit * 60
        return sorted((e if e > now else late, j) for e, j in rel if e > now or late > now)


class NodeClassScheduler(ClassScheduler):
    """State: free CPUs per node and the nodes grouped by it, the running jobs' estimated
    ends; a pass walks the jobs it is given in queue order (module doc)."""

    __slots__ = ("cpn", "ratio", "free", "byfree", "total", "_ver", "_kept")
    running: dict[int, tuple[int, Pick, list[int]]]  # job → (estimated end, CPUs, positions)
    _info: dict[int, tuple[JobView, Info]]
    _res: _Resv | None
    _wait: tuple[int, int, int] | None
    _share: dict[tuple[int, int], NodeAlloc]  # (node, CPUs) → its NodeAlloc

    def __init__(self, nodes: Sequence[NodeView], part: PartitionView, cfg: SchedConfig) -> None:
        self._setup(nodes, part, cfg)
        self.cpn = self.nodes[0].cpus
        self.ratio = self.nodes[0].mem // self.cpn
        self.free = [n.cpus_free for n in self.nodes]
        # node class: free CPUs → positions with that many free, ascending
        # (class 0, the nodes without a free CPU, is not kept: nothing reads it)
        self.byfree: list[list[int]] = [[] for _ in range(self.cpn + 1)]
        for p, c in enumerate(self.free):
            if c:
                self.byfree[c].append(p)
        self.total = sum(self.free)
        self._ver = 0  # bumped by every change of the free CPUs (every start and end)
        # the last reservation made, while nothing changed since: (version, job, CPUs, it)
        self._kept: tuple[int, int, int, _Resv] | None = None

    # ---- scope ------------------------------------------------------------------------
    nodes_why = "nodes differ, have GPUs, are not usable, or memory is not per CPU"

    @staticmethod
    def _node_outside(n: NodeView, n0: NodeView) -> bool:
        return bool(n.gpus)

    def _row(self, job: JobView, rq: Request) -> tuple[int] | str:
        """``(CPUs,)`` of a job of one-CPU tasks, or why its shape is out of scope."""
        if rq.tasks_mode != "pack" or rq.cpt != 1 or rq.lo != 1 or rq.hi is not None or \
                rq.tpn is not None or rq.gpu_mode or rq.exclusive or rq.mem_mode != "cpu" or \
                rq.mem != self.ratio or rq.min_cpus > 1 or rq.contig or rq.min_tmp or \
                job.nodes_min > 1:
            return "the job's shape is outside the node-class scope"
        if rq.ntasks > self.cpn * len(self.nodes):
            return "more CPUs than the partition has"
        return (rq.ntasks,)

    # ---- changes ----------------------------------------------------------------------
    def _take(self, p: int, x: int) -> None:
        """Node ``p`` gives (x > 0) or gets back (x < 0) ``x`` CPUs: move it between classes.
        Class 0 is not kept: nothing reads the nodes without a free CPU."""
        self._ver += 1
        old = self.free[p]
        new = self.free[p] = old - x
        if old:
            cls = self.byfree[old]
            del cls[bisect_left(cls, p)]
        if new:
            insort(self.byfree[new], p)
        self.total -= x

    def _take_whole(self, ps: list[int], back: bool) -> None:
        """:meth:`_take` of one CPU on each one-CPU node of ``ps``, or back: in one pass over
        the class of free nodes instead of one shift per node (a spread takes the lowest
        free nodes: a prefix of the class)."""
        self._ver += 1
        cls, free = self.byfree[1], self.free
        if back:
            cls += ps
            cls.sort()  # two sorted runs: a linear merge
            for p in ps:
                free[p] = 1
            self.total += len(ps)
        else:
            k = len(ps)
            if cls[:k] == ps:  # the lowest free nodes, as a spread on one-CPU nodes takes
                del cls[:k]
            elif k > 4:
                gone = set(ps)
                cls[:] = [p for p in cls if p not in gone]
            else:
                for p in ps:
                    del cls[bisect_left(cls, p)]
            for p in ps:
                free[p] = 0
            self.total -= len(ps)

    def add_running(self, job_id: int, end: int, pick: Pick) -> None:
        """A job already running (started elsewhere) on ``pick``, estimated to end at ``end``
        (:func:`~muster.core.backfill.running_end`): its CPUs are taken now."""
        for p, x in pick:
            self._take(p, x)
        self.running[job_id] = (end, pick, [p for p, _x in pick])
        insort(self.releases, (end, job_id))

    def ended(self, job_id: int) -> None:
        """A running job gave its CPUs back."""
        end, pick, where = self.running.pop(job_id)
        if self.cpn == 1:
            self._take_whole(where, back=True)
        else:
            for p, x in pick:
                self._take(p, -x)
        rel = self.releases
        del rel[bisect_left(rel, (end, job_id))]

    # ---- the pass ---------------------------------------------------------------------
    def schedule(self, now: int, queue: Sequence[JobView]) -> list[Start]:
        """The starts ``schedule()`` makes now for these pending jobs (every one admitted),
        applied to this state. Afterwards :attr:`reservation` is the EASY reservation."""
        infos = self._rows(queue)
        starts: list[Start] = []
        res: _Resv | None = None
        blocked = False
        self._wait = None
        # shapes that found no room in this pass: a pass only takes resources, so a later
        # job of the same shape (running past the reservation or not) finds none either
        failed: set[tuple[int, bool]] = set()
        for key, n, d, off, job in infos:
            if not self.total and res is not None:
                break  # no CPU free and the reservation made: nothing else can change
            if self._wait is not None:  # a waiting job before this one: reserve first
                res = self._reserve(now)
            shape = (n, res is not None and now + d > res.T)
            pick = None if shape in failed else self._fit(n, d, now, res)
            if pick is not None:
                self._start(job, n, d, off, now, pick, res, blocked, starts)
                continue
            failed.add(shape)
            if not self.backfill:
                break  # the main scheduler: the first waiting job blocks the partition
            blocked = True
            if res is None:
                self._wait = (key[2], n, d)
        if self._wait is not None:
            res = self._reserve(now)
        self._res = res
        return starts

    def _start(self, job: JobView, n: int, d: int, off: int, now: int, pick: Pick,
               res: _Resv | None, blocked: bool, starts: list[Start]) -> None:
        jid = job.job_id
        past = res is not None and now + d > res.T
        free = self.free
        plain = pick
        if res is not None:
            plain = []
            for p, x in pick:
                if p in res.b:
                    old_free, old_b = free[p], res.b[p]
                    self._take(p, x)
                    if past:  # it still holds these CPUs at T
                        res.b[p] -= x
                    res.moved(p, old_free, old_b, free[p])
                else:
                    plain.append((p, x))
        where = [p for p, _x in pick]
        if self.cpn == 1:
            self._take_whole(where if plain is pick else [p for p, _x in plain], back=False)
        else:
            for p, x in plain:
                self._take(p, x)
        # planned on [now, now + d); later passes see it end where the lifecycle puts it
        # (start + limit): the two differ only for limits under a minute, not admitted
        self.running[jid] = (now + off, pick, where)
        insort(self.releases, (now + off, jid))
        share = self._share
        alloc = Allocation(job_id=jid, nodes=tuple(
            [share.get(px) or self._new_share(px) for px in sorted(pick)]))
        starts.append(Start(job_id=jid, partition=self.part.name, allocation=alloc,
                            scheduler="Backfill" if blocked else "Main"))

    def _new_share(self, px: tuple[int, int]) -> NodeAlloc:
        """The (immutable) share of ``x`` CPUs of node ``p``, made once and handed out again:
        a pass builds one per node of every start."""
        p, x = px
        na = self._share[px] = NodeAlloc(node=self.nodes[p].name, cpus=x, mem=self.ratio * x,
                                         gpus=(), tasks=x)
        return na

    # ---- placement now ----------------------------------------------------------------
    def _fit(self, n: int, d: int, now: int, res: _Resv | None) -> Pick | None:
        """Where a job of ``n`` one-CPU tasks starts now for ``[now, now+d)``, or None."""
        if n > self.total:
            return None  # more CPUs than are free, reserved or not
        r = res if res is not None and now + d > res.T else None
        skip, extra = (r.b, r.eff) if r is not None else (None, None)
        if n <= self.cpn:
            got = self._smallest(n, self.cpn + 1, skip, extra)
            if got is not None:
                return [(got[1], n)]
            if self.backfill:
                return None  # backfill plans it as a one-node shape: never spread
        if n > self.total - (r.excess if r is not None else 0):
            return None
        if self.cpn == 1 and not extra:  # one CPU a node: the n lowest usable nodes, as
            cls = self.byfree[1]          # _spread takes them (no last node to swap)
            low = cls[:n] if skip is None else list(islice(filterfalse(skip.__contains__, cls), n))
            return [(p, 1) for p in low] if len(low) == n else None
        return _spread(n, self._order(skip, extra),
                       lambda lo, hi: self._smallest(lo, hi, skip, extra))

    # Node classes with exceptions: the nodes in ``skip`` are not where ``byfree`` says but in
    # ``extra`` (CPUs → their positions, ascending): the reserved nodes for a job running
    # past the reservation (at their usable CPUs, :class:`_Resv`), or the nodes whose CPUs
    # a running job's end gives back before a reservation's start (at their CPUs then).
    # The cost is in classes plus the exceptions met, never a pass over all nodes.

    def _first(self, c: int, skip: Container[int] | None,
               extra: dict[int, list[int]] | None) -> int | None:
        """The lowest position with ``c`` usable CPUs, or None."""
        cls = self.byfree[c]
        if skip is None or extra is None:
            return cls[0] if cls else None
        best = next(filterfalse(skip.__contains__, cls), None)
        ex = extra.get(c)
        if ex and (best is None or ex[0] < best):
            best = ex[0]
        return best

    def _smallest(self, lo: int, hi: int, skip: Container[int] | None,
                  extra: dict[int, list[int]] | None) -> tuple[int, int] | None:
        """The best-fit node with ``lo <= cpus < hi``: ``(cpus, position)``, or None (the
        best fit for ``n`` CPUs: ``lo = n``, ``hi`` past the largest node)."""
        for c in range(lo, hi):
            p = self._first(c, skip, extra)
            if p is not None:
                return c, p
        return None

    def _order(self, skip: Container[int] | None,
               extra: dict[int, list[int]] | None) -> Iterator[tuple[int, list[int]]]:
        """Nodes with usable CPUs in placement's spreading order (most CPUs first, lowest
        index first among equals), as ``(cpus, positions)`` per class. Lazy by class: the
        spreading reads only the classes it takes from."""
        byfree = self.byfree
        for c in range(self.cpn, 0, -1):
            cls = byfree[c]
            if skip is not None and extra is not None:
                ex = extra.get(c)
                cls = [p for p in cls if p not in skip]
                if ex:
                    cls += ex
                    cls.sort()  # two ascending runs: a linear merge
            if cls:
                yield c, cls

    # ---- the reservation --------------------------------------------------------------
    def _reserve(self, now: int) -> _Resv | None:
        """The reservation of the waiting job noted in ``_wait`` (backfill's earliest start
        on the profile with this pass's starts carved), or None when it has none in reach."""
        assert self._wait is not None
        jid, n, _d = self._wait
        self._wait = None
        # Between two passes that changed nothing (an arrival that did not start), the same
        # waiting job gets the same reservation: the same free CPUs, running jobs and ends
        # (none past: the walk reads the ends as they are), and its start was within the
        # earlier, nearer horizon. The kept one is unchanged too: a start that would have
        # changed it takes CPUs, which bumps the version.
        kept = self._kept
        if kept is not None and kept[0] == self._ver and kept[1] == jid and kept[2] == n \
                and (not self.releases or self.releases[0][0] > now):
            return kept[3]
        res = self._reservation(now, jid, n)
        self._kept = None if res is None else (self._ver, jid, n, res)
        return res

    def _reservation(self, now: int, jid: int, n: int) -> _Resv | None:
        """:meth:`_reserve`'s walk of the estimated ends."""
        # the start T is the first breakpoint where the job fits: the profile (this pass's
        # starts carved) does not decrease after it, so the window rounded up to
        # bf_resolution that backfill reserves fits from T as well
        horizon = now + self.cfg.bf_window * 60
        free, running = self.free, self.running
        ends = self._ends(now)
        if self.cpn == 1 and n > 1:
            return self._reserve_whole(jid, n, ends, horizon)
        acc: dict[int, int] = {}
        i, k = 0, len(ends)
        total = self.total
        while i < k:
            t = ends[i][0]
            if t > horizon:
                return None
            touched = []
            while i < k and ends[i][0] == t:
                for p, x in running[ends[i][1]][1]:
                    acc[p] = acc.get(p, free[p]) + x
                    touched.append(p)
                    total += x
                i += 1
            if n <= self.cpn:
                fit = [(acc[p], p) for p in touched if acc[p] >= n]
                if fit:
                    c, p = min(fit)
                    return _Resv(jid, t, {p: c - n}, [(p, n)], free)
                continue
            if total >= n:
                # the nodes at t: the classes, but the touched ones at their CPUs then
                at: dict[int, list[int]] = {}
                for p in sorted(acc):
                    at.setdefault(acc[p], []).append(p)
                pick = _spread(n, self._order(acc, at),
                               partial(self._smallest, skip=acc, extra=at))
                assert pick is not None  # the CPUs at t cover n
                return _Resv(jid, t, {p: acc.get(p, free[p]) - x for p, x in pick}, pick, free)
        return None

    def _reserve_whole(self, jid: int, n: int, ends: Sequence[tuple[int, int]],
                       horizon: int) -> _Resv | None:
        """:meth:`_reserve` of ``n > 1`` tasks on one-CPU nodes: the same walk of the ends by
        distinct breakpoints, counting nodes instead of CPUs. Every node free at the
        breakpoint has its one CPU then (those the ends free are busy now, in no class with
        CPUs), and spreading takes the ``n`` lowest: a reservation of whole nodes."""
        running = self.running
        need = n - self.total
        i, k, got = 0, len(ends), 0
        while i < k:
            t = ends[i][0]
            if t > horizon:
                return None
            while i < k and ends[i][0] == t:
                got += len(running[ends[i][1]][1])  # nodes counted; named once it is enough
                i += 1
            if got >= need:
                freed = []
                for _t, j in ends[:i]:
                    freed += running[j][2]
                return _Resv.whole(jid, t, sorted(self.byfree[1][:n] + freed)[:n], self.free)
        return None


def _spread(n: int, order: Iterator[tuple[int, list[int]]],
            smallest: Callable[[int, int], tuple[int, int] | None]) -> Pick | None:
    """Placement's spreading of ``n`` one-CPU tasks over nodes given by class, most CPUs
    first (``(cpus, positions)``, positions ascending): take nodes until ``n`` are covered,
    swap the last for the best fit (fewest CPUs, lowest index) among it and the nodes after
    it that cover the remainder (every node after it has at most its CPUs: ``smallest(lo,
    hi)`` finds the best with ``lo <= cpus < hi``), fill the nodes in order (each full but
    the last)."""
    pick: Pick = []
    st = 0
    for c, cls in order:
        k = -(-(n - st) // c)  # the nodes of this class that cover the rest
        if k <= len(cls):
            pick += [(p, c) for p in cls[:k]]
            st += c * k
            break
        pick += [(p, c) for p in cls]
        st += c * len(cls)
    else:
        return None
    last_p, last_c = pick.pop()
    rt = n - (st - last_c)
    best = (last_c, last_p)
    if rt < last_c:
        got = smallest(rt, last_c)
        if got is not None:
            best = got
    pick.append((best[1], rt))
    return pick
