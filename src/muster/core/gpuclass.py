"""Incremental FIFO/EASY scheduler for many identical GPU nodes (GPU node classes).

The GPU counterpart of :mod:`muster.core.nodeclass`, for the commonest GPU replay — a GPU
trace (ITP, Philly) on nodes of ``G`` GPUs: every job asks, on each of ``k`` nodes, ``g``
GPUs and one CPU (``--gpus=g -n 1`` with ``g <= G``: one node; ``-N k --gpus-per-node=g``:
``k`` nodes), or ``--gpus=g`` with ``g > G`` spread over nodes, a task (one CPU) on each
(Philly's 12- and 20-GPU jobs). :class:`GpuClassScheduler` makes **the same decisions** as
:func:`muster.core.schedule.schedule` on the queue it is given, from state kept across
passes: each node's free GPU indices (a bitmask) and free CPUs, the nodes grouped by
(free GPUs, free CPUs) — a *class*, ordered as placement's best-fit key — and the running
jobs' estimated ends. It is told starts (its own) and ends; a pass costs the jobs it is
offered, plus, only when a job waits, one walk of the estimated ends up to its reservation.

Scope (:meth:`GpuClassScheduler.unsupported`, :meth:`GpuClassScheduler.admit`): usable
nodes with equal CPUs, GPUs (at least one, no type), weights and memory in proportion to
CPUs, all in one UP partition; a priority of the job alone, no preemption, no start limit;
the main scheduler, or backfill with one reservation (EASY) and no test budget; jobs of the
shape above with memory per CPU equal to the nodes' ratio, without ``-w``/``-x``/
``--constraint``/``--time-min``/``--deadline``/exclusive/reservation/switches/GPU type, a
limit of at least one minute.

Why the shortcuts are exact (the rules of :mod:`muster.core.placement`,
:mod:`muster.core.backfill` and :mod:`muster.core.timeline` on such nodes):

* Every such job is a per-node shape (:func:`~muster.core.backfill.plan_shape`): one CPU,
  ``ratio`` memory and ``g`` GPUs on each of ``k`` nodes. Placement now and the timeline at
  now both take the ``k`` fitting nodes with the least free (weight, GPUs, CPUs, memory,
  index): the classes in order. GPU indices: the lowest free ones of the node's window.
* A node's free resources over time — its free GPU *set* and CPU count, with this pass's
  starts carved — only grow after now (jobs end; starts take from now). So a window
  ``[T, T+d)`` before the reservation fits iff its start does, and the free set now is a
  subset of the free set at any later time.
* The one reservation (EASY) holds, on each of its nodes, the GPU indices ``R_p`` (the
  lowest ``g`` free at ``T``) and one CPU for ``[T, T+d')``. A later job with
  ``now + d <= T`` sees every node's free resources now; one running past ``T`` sees, on a
  reserved node, the GPUs ``F_p \\ R_p`` (free now and not reserved: the intersection of
  the free sets over its window) and ``min(free_p, C_p(T) - 1)`` CPUs; every other node as
  now. A backfilled start lowers ``C_p(T)`` only if it runs past ``T``.
* A job spread over nodes is placed by placement's packing rule on the nodes' values in its
  window (:func:`_spread`), now or, for its reservation, at each breakpoint up to the
  window's end (backfill's general search; a window's values are its start's, as above).
* Within a pass a shape that found no room (nodes, GPUs, running past the reservation or
  not) is not searched again: the pass only takes resources.
* The reservation's start: for one node, the first estimated end after which a node it
  touched fits (the best of those at that end); for ``k`` nodes, nodes in the order of the
  timeline's search — those that fit now (best first), then each end's newly fitting ones
  (best first) — until ``k``: the start is the ``k``-th's.

Equality with ``schedule()`` (starts, their allocations with GPU indices and labels, the
reservation's job, start and nodes) is a property test (tests/property/test_gpuclass_core.py);
the simulator's GPU replays are compared with the snapshot core's (docs/simulation.md).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence
from typing import Any

from .nodeclass import ClassScheduler
from .placement import Allocation, NodeAlloc, Request
from .schedule import Start
from .snapshot import JobView, NodeView, PartitionView, SchedConfig
from .timeline import gpu_mask, mask_gpus

__all__ = ["GpuClassScheduler"]

# per admitted job: (queue key, nodes k, GPUs per node g, planning duration d, end offset of
# its limit, the job); the key is unique (it ends with the job id)
Info = tuple[tuple[Any, ...], int, int, int, int, JobView]
Pick = list[tuple[int, int]]  # (node position, GPU mask taken there), by position


def _lowest(mask: int, g: int) -> int:
    """The mask of the ``g`` lowest set bits of ``mask`` (all of them if fewer)."""
    out = 0
    while mask and g:
        low = mask & -mask
        out |= low
        mask ^= low
        g -= 1
    return out


def _spread(g: int, views: list[tuple[int, int, int]]) -> Pick | None:
    """Placement of ``--gpus=g`` over several nodes (one task, so one CPU, on each) on
    ``views`` (free GPU mask, free CPUs, position): the nodes by most free GPUs, then most
    CPUs, then position, until ``g`` are covered; the last swapped for the best fit (least
    GPUs, CPUs, position) among it and the later ones that cover the remainder; each node
    gets one GPU, then the nodes are filled in order of most free GPUs, each with its
    lowest free indices. None when the nodes hold fewer than ``g``, or need more nodes than
    ``g`` (placement's ``k <= GPUs``)."""
    order = sorted((-m.bit_count(), -c, p, m) for m, c, p in views if m and c)
    got = 0
    i = 0
    while got < g and i < len(order):
        got -= order[i][0]
        i += 1
    if got < g:
        return None
    chosen = order[:i]
    rem = g - (got + chosen[-1][0])
    chosen[-1] = min((e for e in order[i - 1:] if -e[0] >= rem),
                     key=lambda e: (-e[0], -e[1], e[2]))
    if len(chosen) > g:
        return None
    # GPUs per node: one each, then in order of most free GPUs (then best fit) up to each cap
    by_gpus = sorted(chosen, key=lambda e: (e[0], -e[0], -e[1], e[2]))
    share, left = [], g - len(by_gpus)
    for e in by_gpus:
        add = min(-e[0] - 1, left)
        left -= add
        share.append((e[2], _lowest(e[3], 1 + add)))
    return share


class _Resv:
    """The pass's reservation: its start ``T``, per reserved node the GPUs it holds (``R``)
    and what a job running past ``T`` may still use of the node's CPUs then (``bc``: the
    node's free CPUs at ``T`` less the reservation's one)."""

    __slots__ = ("job_id", "T", "R", "bc")

    def __init__(self, job_id: int, T: int, R: dict[int, int], bc: dict[int, int]) -> None:
        self.job_id, self.T, self.R, self.bc = job_id, T, R, bc

    @property
    def nodes(self) -> list[int]:
        """The reserved positions."""
        return list(self.R)


class GpuClassScheduler(ClassScheduler):
    """State: per node its free GPU mask and free CPUs, the nodes grouped by (free GPUs, free
    CPUs), the running jobs' estimated ends; a pass walks the jobs it is given in queue order
    (module doc)."""

    __slots__ = ("G", "ratio", "mask", "fc", "byg", "total", "partial_free", "spreads")
    scope = "GPU node-class"
    running: dict[int, tuple[int, Pick]]  # job → (estimated end, its pick)
    _info: dict[int, tuple[JobView, Info]]
    _res: _Resv | None
    _wait: tuple[int, int, int, int] | None
    _share: dict[tuple[int, int], NodeAlloc]  # (node, GPU mask) → its NodeAlloc

    def __init__(self, nodes: Sequence[NodeView], part: PartitionView, cfg: SchedConfig) -> None:
        self._setup(nodes, part, cfg)
        self.G = self.nodes[0].gpus
        self.ratio = self.nodes[0].mem // self.nodes[0].cpus
        self.mask = [gpu_mask(n.gpus_free) for n in self.nodes]
        self.fc = [n.cpus_free for n in self.nodes]
        # class: free GPUs g → [(free CPUs, position)] ascending, for the nodes with at least
        # one GPU and one CPU free (the others can host no job: nothing reads them)
        self.byg: list[list[tuple[int, int]]] = [[] for _ in range(self.G + 1)]
        for p, (m, c) in enumerate(zip(self.mask, self.fc)):
            if m and c:
                self.byg[m.bit_count()].append((c, p))
        self.total = sum(m.bit_count() for m in self.mask)  # free GPUs
        # free GPUs on nodes partly in use (a simulator metric: GPUs fragmentation leaves idle)
        self.partial_free = sum(g for m in self.mask if 0 < (g := m.bit_count()) < self.G)
        self.spreads = False  # a job spread over nodes was admitted (room() is then the total)

    # ---- scope ------------------------------------------------------------------------
    nodes_why = "nodes differ, have no GPUs or typed ones, are not usable, or memory is not " \
                "per CPU"

    @staticmethod
    def _node_outside(n: NodeView, n0: NodeView) -> bool:
        return not n.gpus or bool(n.gpu_type) or n.gpus != n0.gpus

    def _row(self, job: JobView, rq: Request) -> tuple[int, int] | str:
        """``(nodes, GPUs per node)``, or why the job's shape is out of scope."""
        if rq.cpt != 1 or rq.tpn is not None or rq.exclusive or rq.mem_mode != "cpu" or \
                rq.mem != self.ratio or rq.min_cpus > 1 or rq.contig or rq.min_tmp or \
                rq.cpg or rq.gpus < 1:
            return "the job's shape is outside the GPU node-class scope"
        if rq.tasks_mode == "one" and rq.gpu_mode == "total" and rq.lo == 1 and \
                rq.hi is None and rq.gpus > self.G:
            if rq.gpus > self.G * len(self.nodes):
                return "more GPUs than the partition has"
            self.spreads = True
            return 0, rq.gpus  # --gpus=g over several nodes, a task on each
        if rq.gpus > self.G:
            return "the job's shape is outside the GPU node-class scope"
        if rq.tasks_mode == "pack" and rq.gpu_mode == "total" and rq.ntasks == 1 and \
                rq.lo == 1 and rq.hi is None:
            k = 1  # --gpus=g -n 1: one node (without -n, g <= G is spread where no node fits)
        elif rq.tasks_mode == "one" and rq.gpu_mode == "node" and (
                rq.hi is None or rq.hi == rq.lo):
            k = rq.lo  # -N k --gpus-per-node=g
        else:
            return "the job's shape is outside the GPU node-class scope"
        if k > len(self.nodes):
            return "more nodes than the partition has"
        return k, rq.gpus

    def room(self) -> tuple[int, int, int]:
        """``(most, gap_lo, gap_hi)``: a job of this scope asking more than ``most`` GPUs, or
        a count in ``(gap_lo, gap_hi]``, cannot start now. One node's ``g <= G`` GPUs need a
        node with ``g`` free (the fullest usable node has ``top``: the gap is ``(top, G]``);
        wider jobs need ``G`` × the wholly free nodes, or, spread over nodes (once such a
        job was admitted), every free GPU."""
        byg, G = self.byg, self.G
        top = next((g for g in range(G, 0, -1) if byg[g]), 0)
        wide = max(G * len(byg[G]), self.total if self.spreads else 0)
        return max(top, wide), top, G

    # ---- changes ----------------------------------------------------------------------
    def _set(self, p: int, mask: int, c: int) -> None:
        """Node ``p`` now has GPUs ``mask`` and ``c`` CPUs free: move it between classes."""
        old_m, old_c = self.mask[p], self.fc[p]
        og, ng, G = old_m.bit_count(), mask.bit_count(), self.G
        if og and old_c:
            cls = self.byg[og]
            del cls[bisect_left(cls, (old_c, p))]
        if ng and c:
            insort(self.byg[ng], (c, p))
        self.total += ng - og
        self.partial_free += (ng if ng < G else 0) - (og if og < G else 0)
        self.mask[p], self.fc[p] = mask, c

    def add_running(self, job_id: int, end: int, pick: Pick) -> None:
        """A job already running (started elsewhere) on ``pick`` ((position, GPU mask), one
        CPU each), estimated to end at ``end``: its GPUs and CPUs are taken now."""
        for p, gm in pick:
            self._set(p, self.mask[p] & ~gm, self.fc[p] - 1)
        self.running[job_id] = (end, pick)
        insort(self.releases, (end, job_id))

    def ended(self, job_id: int) -> None:
        """A running job gave its GPUs and CPUs back."""
        end, pick = self.running.pop(job_id)
        for p, gm in pick:
            self._set(p, self.mask[p] | gm, self.fc[p] + 1)
        rel = self.releases
        del rel[bisect_left(rel, (end, job_id))]

    # ---- the pass ---------------------------------------------------------------------
    def schedule(self, now: int, queue: Sequence[JobView]) -> list[Start]:
        """The starts ``schedule()`` makes now for these pending jobs (every one admitted),
        applied to this state. Afterwards :attr:`reservation` is the EASY reservation.

        The same walk as :meth:`NodeClassScheduler.schedule`, kept apart on purpose: one
        loop over ``ClassScheduler`` steps (a shape tuple, more arguments per job) replayed
        CTC on 430 nodes ~20 % slower in an interleaved A/B."""
        infos = self._rows(queue)
        starts: list[Start] = []
        res: _Resv | None = None
        blocked = False
        self._wait = None
        # shapes that found no room in this pass: a pass only takes resources, so a later
        # job of the same shape (running past the reservation or not) finds none either
        failed: set[tuple[int, int, bool]] = set()
        for key, k, g, d, off, job in infos:
            if not self.total and res is not None:
                break  # no GPU free and the reservation made: nothing else can change
            if self._wait is not None:  # a waiting job before this one: reserve first
                res = self._reserve(now)
            past = res is not None and now + d > res.T
            shape = (k, g, past)
            pick = None if shape in failed else self._fit(k, g, res if past else None)
            if pick is not None:
                self._start(job, off, now, pick, res if past else None, blocked, starts)
                continue
            failed.add(shape)
            if not self.backfill:
                break  # the main scheduler: the first waiting job blocks the partition
            blocked = True
            if res is None:
                self._wait = (key[2], k, g, d)
        if self._wait is not None:
            res = self._reserve(now)
        self._res = res
        return starts

    def _fit(self, k: int, g: int, res: _Resv | None) -> Pick | None:
        """Where the job starts now: (position, the GPUs it takes there), or None. ``k``
        nodes of ``g`` GPUs: the ``k`` best with ``g`` GPUs and a CPU free for the job's
        window, the lowest ``g`` of their usable GPUs; ``k == 0``: ``g`` GPUs spread
        (:func:`_spread`). ``res``: the reservation when the window runs past its start (its
        nodes then offer what it leaves them)."""
        if (k or 1) * g > self.total:
            return None
        if not k:
            R = res.R if res is not None else {}
            views = [(m & ~R[p], min(c, res.bc[p]), p) if res is not None and p in R
                     else (m, c, p) for p, (m, c) in enumerate(zip(self.mask, self.fc))]
            return _spread(g, views)
        got = self._best(k, g, res)
        return None if got is None else [(p, _lowest(m, g)) for p, m in got]

    def _best(self, k: int, g: int, res: _Resv | None) -> list[tuple[int, int]] | None:
        """The ``k`` best nodes with ``g`` GPUs and a CPU free for the window, as (position,
        usable GPU mask), or None (``res`` as for :meth:`_fit`)."""
        byg, G, mask = self.byg, self.G, self.mask
        if res is None:
            out: list[tuple[int, int]] = []
            for gg in range(g, G + 1):
                for _c, p in byg[gg]:
                    out.append((p, mask[p]))
                    if len(out) == k:
                        return out
            return None
        # the reserved nodes at what they offer past T, merged into the classes' order
        R, bc, fc = res.R, res.bc, self.fc
        extra = []
        for p, r in R.items():
            m = mask[p] & ~r
            c = min(fc[p], bc[p])
            if m.bit_count() >= g and c >= 1:
                extra.append((m.bit_count(), c, p, m))
        extra.sort()
        out, ei, ne = [], 0, len(extra)
        for gg in range(g, G + 1):
            for c, p in byg[gg]:
                if p in R:
                    continue
                while ei < ne and extra[ei][:3] < (gg, c, p):
                    out.append((extra[ei][2], extra[ei][3]))
                    ei += 1
                    if len(out) == k:
                        return out
                out.append((p, mask[p]))
                if len(out) == k:
                    return out
        for e in extra[ei:]:
            out.append((e[2], e[3]))
            if len(out) == k:
                return out
        return None

    def _start(self, job: JobView, off: int, now: int, fit: Pick, res: _Resv | None,
               blocked: bool, starts: list[Start]) -> None:
        """Start ``job`` on ``fit`` ((position, GPUs taken), a CPU each); ``res``: the
        reservation when the job runs past its start (it then holds a CPU of a reserved node
        at ``T``)."""
        jid = job.job_id
        pick = sorted(fit)
        mask, fc = self.mask, self.fc
        for p, gm in pick:
            self._set(p, mask[p] & ~gm, fc[p] - 1)
            if res is not None and p in res.bc:
                res.bc[p] -= 1
        # planned on [now, now + d); later passes see it end where the lifecycle puts it
        # (start + limit): the two differ only for limits under a minute, not admitted
        self.running[jid] = (now + off, pick)
        insort(self.releases, (now + off, jid))
        share = self._share
        alloc = Allocation(job_id=jid, nodes=tuple(
            [share.get(pm) or self._new_share(pm) for pm in pick]))
        starts.append(Start(job_id=jid, partition=self.part.name, allocation=alloc,
                            scheduler="Backfill" if blocked else "Main"))

    def _new_share(self, pm: tuple[int, int]) -> NodeAlloc:
        """The (immutable) share of GPUs ``mask`` and one CPU of node ``p``, made once."""
        p, gm = pm
        na = self._share[pm] = NodeAlloc(node=self.nodes[p].name, cpus=1, mem=self.ratio,
                                         gpus=mask_gpus(gm), tasks=1)
        return na

    def _views_at(self, acc: dict[int, tuple[int, int]]) -> list[tuple[int, int, int]]:
        """Every node as (free GPU mask, free CPUs, position): at the time ``acc`` (touched
        nodes → their values then) describes, the others as now."""
        return [(*(acc.get(p) or mc), p) for p, mc in enumerate(zip(self.mask, self.fc))]

    def _reserve_spread(self, jid: int, g: int, now: int, horizon: int) -> _Resv | None:
        """The reservation of ``g`` GPUs spread over nodes: backfill's general search, the
        first breakpoint up to ``horizon`` (now the first) where placement's
        spreading rule places it on the nodes' values then (profiles only grow after now:
        the window's values are its start's)."""
        running = self.running
        ends = self._ends(now)
        acc: dict[int, tuple[int, int]] = {}
        total = self.total
        i, n = 0, len(ends)
        while i < n:
            t = ends[i][0]
            if t > horizon:
                return None
            while i < n and ends[i][0] == t:
                for p, gm in running[ends[i][1]][1]:
                    m, c = acc.get(p) or (self.mask[p], self.fc[p])
                    acc[p] = (m | gm, c + 1)
                    total += gm.bit_count()
                i += 1
            if total < g:
                continue
            got = _spread(g, self._views_at(acc))
            if got is not None:
                return _Resv(jid, t, dict(got), {p: (acc.get(p) or (0, self.fc[p]))[1] - 1
                                                  for p, _gm in got})
        return None

    # ---- the reservation --------------------------------------------------------------
    def _reserve(self, now: int) -> _Resv | None:
        """The reservation of the waiting job noted in ``_wait`` (backfill's earliest start
        on the profile with this pass's starts carved), or None when it has none in reach."""
        assert self._wait is not None
        jid, k, g, d = self._wait
        self._wait = None
        horizon = now + self.cfg.bf_window * 60
        mask, fc, running = self.mask, self.fc, self.running
        if not k:
            return self._reserve_spread(jid, g, now, horizon)
        # the nodes in the order of the timeline's search: those fitting now, best first
        chosen: list[int] = []
        if k > 1:
            for gg in range(g, self.G + 1):
                chosen += [p for _c, p in self.byg[gg]]
        # (a one-node job that waits fits nowhere now; a k-node one on fewer than k nodes)
        have = set(chosen)
        acc: dict[int, tuple[int, int]] = {}  # touched node → (GPU mask, CPUs) at t
        ends = self._ends(now)
        i, n = 0, len(ends)
        while i < n:
            t = ends[i][0]
            if t > horizon:
                return None
            touched = []
            while i < n and ends[i][0] == t:
                for p, gm in running[ends[i][1]][1]:
                    m, c = acc.get(p) or (mask[p], fc[p])
                    acc[p] = (m | gm, c + 1)
                    touched.append(p)
                i += 1
            new = sorted({(acc[p][0].bit_count(), acc[p][1], p) for p in touched
                          if p not in have and acc[p][0].bit_count() >= g and acc[p][1] >= 1})
            for _g, _c, p in new:
                chosen.append(p)
                have.add(p)
                if len(chosen) == k:
                    R, bc = {}, {}
                    for q in chosen:  # what each holds: at T, the lowest free GPUs, one CPU
                        m, c = acc.get(q) or (mask[q], fc[q])
                        R[q], bc[q] = _lowest(m, g), c - 1
                    return _Resv(jid, t, R, bc)
        return None
