"""Free resources over time: a per-node breakpoint profile and earliest-start search.

Contract:

* A :class:`Timeline` holds, for every node (by position = order of ``NodeView.index``),
  a step function of free CPUs, free memory and the *set* of free GPU indices (an int
  bitmask, bit ``i`` = GPU ``i``) over integer seconds ``[now, ∞)``: breakpoints ``ts``
  ascending, ``ts[0] == now``, value ``j`` holding on ``[ts[j], ts[j+1])``, the last one
  forever. Unusable nodes are empty forever.
* Resources only come back at the estimated end of running jobs (:meth:`build`); the
  scheduler then only takes them away (:meth:`reserve` for starts now and for future
  reservations). Because the profile only shrinks during a cycle, an earlier answer
  to "earliest start from now" is a *lower bound* for every later one: the search
  caches per (candidate set, per-node shape, duration) a min-heap of per-node earliest
  fits with their best-fit tie-break. A change to a node is logged; before a search the
  heap applies the changes made since it was last searched: one that overlaps a node's
  fitting window makes it a suspect at its start, recomputed before any exact entry of
  that start is trusted (the tie-break can only shrink; :meth:`_sync`, :meth:`_settle`).
* "Fits on node ``p`` for ``[t, t+d)``": free CPUs and memory are at least the need in
  every interval overlapping the window, and the *intersection* of the free GPU sets over
  those intervals has at least the needed number of GPUs (a job keeps its GPU indices).
* :meth:`earliest` answers "the earliest ``T >= now`` (and ``<= horizon``) at which
  ``k`` candidate nodes each fit the shape for ``[T, T+d)``" exactly, together with the
  nodes: for ``k == 1``, or at ``T == now``, the best fit (the least free first); for
  ``k > 1`` after now, the first ``k`` that fit at ``T`` in (earliest fit, best fit) order
  (a node whose earliest fit is exactly ``T`` may fit better than one found earlier: taking
  it would mean popping every node freed at ``T``). Shapes that are not one per-node need
  (``-n`` spread over nodes, ``--gpus`` over several nodes, ``-w``) use
  :meth:`earliest_general`: the placement rules over window views at each breakpoint.

Integers only; no clock, no randomness; same calls → same answers.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Hashable, Iterable, Sequence
from heapq import heapify, heappop, heappush, heapreplace

from .placement import Allocation, Request, place_request
from .snapshot import JobView, NodeView

__all__ = ["INF", "Shape", "Timeline", "gpu_mask", "mask_gpus"]

INF = 1 << 62


def gpu_mask(gpus: Iterable[int]) -> int:
    m = 0
    for g in gpus:
        m |= 1 << g
    return m


def mask_gpus(mask: int) -> tuple[int, ...]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return tuple(out)


class Shape(tuple[int, int, int, bool, bool]):
    """Per-node need ``(cpus, mem, gpus, mem_all, exclusive)`` (a hashable tuple).

    ``mem_all``: the node's whole memory must be free; ``exclusive``: the whole node.
    """

    __slots__ = ()

    def __new__(cls, cpus: int, mem: int, gpus: int, mem_all: bool = False,
                exclusive: bool = False) -> Shape:
        return tuple.__new__(cls, (cpus, mem, gpus, mem_all, exclusive))


# heap key encoding: (start shift, GPU shift, CPU shift, memory shift, per-node low bits)
Encoding = tuple[int, int, int, int, list[int]]
# a node fitting at a time, for ``select``: (weight, gpus, cpus, mem, position)
Fitting = tuple[int, int, int, int, int]


class _Entries:
    """One cached search heap of :meth:`Timeline.earliest` for a duration ``d``.

    ``keys``: a min-heap of int keys (see "earliest start" in :class:`Timeline`) holding, per
    node that may still fit, one *live* entry ``live[p]`` (-1: none, the node never fits
    again), plus the *dead* entries in ``dead`` (replaced by a smaller key, dropped when they
    reach the top; a key is never live again once dead: a node's key only grows in start,
    and at an equal start only shrinks). ``hv[p]``: the node version ``live[p]`` is exact at,
    or -1 when it is only a lower bound of the start. ``suspect``: start offset → nodes
    whose entry has that start and a change inside its window since it was exact (its
    tie-break may now be smaller). ``seen``: how much of the timeline's change log is
    applied. Invariant after :meth:`Timeline._sync`: a live entry is exact, or its start is
    a lower bound and, unless it is listed in ``suspect`` at its start, so is the whole key."""

    __slots__ = ("keys", "hv", "live", "dead", "suspect", "seen", "d")

    def __init__(self, keys: list[int], hv: list[int], live: list[int], seen: int,
                 d: int) -> None:
        self.keys, self.hv, self.live, self.seen, self.d = keys, hv, live, seen, d
        self.dead: set[int] = set()
        self.suspect: dict[int, list[int]] = {}


class _Sums:
    """For one candidate set and CPUs per task, kept through a cycle: ``bps``, the sorted
    distinct breakpoints of the candidates' profiles (now included), and the candidates'
    summed profile as :meth:`Timeline._summed` makes it over the whole horizon — ``at``
    (sorted times), ``tf`` (whole tasks of ``cpt`` CPUs, per node then summed) and ``tg``
    (free GPUs), a step function with value 0 before ``at[0]``.

    Invariant: both equal what :meth:`Timeline.breakpoints` and :meth:`Timeline._summed`
    would compute afresh (``at`` may hold extra times where the sum does not change: the
    screen reads values, not points). :meth:`changed` keeps it, given each change of a
    candidate's segments (reserve, block): breakpoints only appear within a cycle (a
    profile is split, never merged), and a segment's change adds the difference of its
    node's share to the sum over that segment's span."""

    __slots__ = ("bps", "at", "tf", "tg", "cpt")

    def __init__(self, now: int, bps: list[int], at: list[int], tf: list[int], tg: list[int],
                 cpt: int) -> None:
        if not at or at[0] != now:  # a point at now, so every later insertion has a left
            at.insert(0, now)
            tf.insert(0, 0)
            tg.insert(0, 0)
        self.bps, self.at, self.tf, self.tg, self.cpt = bps, at, tf, tg, cpt

    def changed(self, ts: list[int], cs: list[int], gs: list[int], i0: int, i1: int,
                old_c: list[int], old_g: list[int]) -> None:
        """Segments ``i0..i1-1`` of a candidate (times ``ts``) went from ``old_c``/``old_g``
        to ``cs``/``gs`` (its breakpoints at their ends already split)."""
        bps, cpt = self.bps, self.cpt
        n = len(ts)
        for t in (ts[i0], ts[i1] if i1 < n else None):
            if t is not None:
                k = bisect_left(bps, t)
                if k == len(bps) or bps[k] != t:
                    bps.insert(k, t)
        for j in range(i0, i1):
            oc, nc = old_c[j - i0], cs[j]
            df = (nc // cpt if nc > 0 else 0) - (oc // cpt if oc > 0 else 0)
            dg = gs[j].bit_count() - old_g[j - i0].bit_count()
            if df or dg:
                self._add(ts[j], ts[j + 1] if j + 1 < n else INF, df, dg)

    def _add(self, t0: int, t1: int, df: int, dg: int) -> None:
        """Add (df, dg) to the step function on ``[t0, t1)``."""
        at, tf, tg = self.at, self.tf, self.tg
        k0 = self._point(t0)
        k1 = self._point(t1) if t1 < INF else len(at)
        for k in range(k0, k1):
            tf[k] += df
            tg[k] += dg

    def _point(self, t: int) -> int:
        """The index of a point at ``t`` (``t >= at[0]``), inserted with the value before."""
        at = self.at
        k = bisect_left(at, t)
        if k == len(at) or at[k] != t:
            at.insert(k, t)
            self.tf.insert(k, self.tf[k - 1])
            self.tg.insert(k, self.tg[k - 1])
        return k


class Timeline:
    """The free-resource profile of one cycle (see module doc)."""

    __slots__ = ("now", "nodes", "pos", "ts", "cs", "ms", "gs", "ver", "cap", "_log",
                 "_heaps", "_dead", "_enc", "_base", "_mono", "_fits", "_sums", "_watch")

    def __init__(self, now: int, nodes: Sequence[NodeView]) -> None:
        self.now = now
        self.nodes = sorted(nodes, key=lambda n: n.index)
        self.pos = {n.name: i for i, n in enumerate(self.nodes)}
        self.ts: list[list[int]] = []
        self.cs: list[list[int]] = []
        self.ms: list[list[int]] = []
        self.gs: list[list[int]] = []
        self.cap: list[tuple[int, int, int, int]] = []  # cpus, mem, gpus, weight
        for n in self.nodes:
            self.ts.append([now])
            if n.usable:
                self.cs.append([n.cpus_free])
                self.ms.append([n.mem_free])
                self.gs.append([gpu_mask(n.gpus_free)])
            else:
                self.cs.append([0])
                self.ms.append([0])
                self.gs.append([0])
            self.cap.append((n.cpus, n.mem, n.gpus, n.weight))
        # per node, the number of changes (reserve, block) so far
        self.ver = [0] * len(self.nodes)
        # every change: (node, t0, t1, the node's version after it), for the heaps' _sync
        self._log: list[tuple[int, int, int, int]] = []
        # (ck, shape, d) → its search heap
        self._heaps: dict[tuple[Hashable, Shape, int], _Entries] = {}
        # (ck, shape, d, horizon) → smallest k found not to fit by horizon: the profile
        # only shrinks, so it never will in this cycle
        self._dead: dict[tuple[Hashable, Shape, int, int], int] = {}
        # heap key encoding (see _encoding), fixed at the first search
        self._enc: Encoding | None = None
        # shape → node → its heap key from now (None: never fits), for nodes whose
        # profile is unchanged and never shrinks over time: then it is the same for
        # every duration (the window's minimum is its first value)
        self._base: dict[Shape, dict[int, int | None]] = {}
        self._mono: list[bool] | None = None
        # shape → node → (version, d, key): its fit for every duration >= d, where
        # nothing after the window is below the window's minimum
        self._fits: dict[Shape, dict[int, tuple[int, int, int]]] = {}
        # (ck, cpt) → the candidates' summed profile and breakpoints for the general search,
        # kept by reserve and block; per node, the sums that include it
        self._sums: dict[tuple[Hashable, int], _Sums] = {}
        self._watch: list[list[_Sums]] | None = None

    @classmethod
    def build(
        cls, now: int, nodes: Sequence[NodeView],
        releases: Iterable[tuple[str, int, int, int, tuple[int, ...]]],
    ) -> Timeline:
        """Profile from free-now plus ``releases`` (node, time, cpus, mem, gpus) > now."""
        tl = cls(now, nodes)
        per: dict[int, list[tuple[int, int, int, int]]] = {}
        pos = tl.pos
        for name, t, rc, rm, rg in releases:
            p = pos.get(name)
            if p is None or t <= now or not tl.nodes[p].usable:
                continue
            per.setdefault(p, []).append((t, rc, rm, gpu_mask(rg)))
        for p, rel in per.items():
            rel.sort()
            ts, cs, ms, gs = tl.ts[p], tl.cs[p], tl.ms[p], tl.gs[p]
            c, m, g = cs[0], ms[0], gs[0]
            for t, dc, dm, dg in rel:
                c, m, g = c + dc, m + dm, g | dg
                if ts[-1] == t:
                    cs[-1], ms[-1], gs[-1] = c, m, g
                else:
                    ts.append(t)
                    cs.append(c)
                    ms.append(m)
                    gs.append(g)
        return tl

    # ---- profile queries and updates -------------------------------------------------

    def _split(self, p: int, t: int) -> int:
        ts = self.ts[p]
        i = bisect_left(ts, t)
        if i < len(ts) and ts[i] == t:
            return i
        cs, ms, gs = self.cs[p], self.ms[p], self.gs[p]
        ts.insert(i, t)
        cs.insert(i, cs[i - 1])
        ms.insert(i, ms[i - 1])
        gs.insert(i, gs[i - 1])
        return i

    def reserve(self, p: int, t0: int, t1: int, cpus: int, mem: int, gmask: int) -> None:
        """Take ``cpus``, ``mem`` and the GPUs of ``gmask`` on node ``p`` for ``[t0, t1)``."""
        t0 = max(t0, self.now)
        if t1 <= t0:
            return
        i0 = self._split(p, t0)
        i1 = self._split(p, t1) if t1 < INF else len(self.ts[p])
        cs, ms, gs = self.cs[p], self.ms[p], self.gs[p]
        old = self._before(p, i0, i1)
        keep = ~gmask
        for j in range(i0, i1):
            cs[j] -= cpus
            ms[j] -= mem
            gs[j] &= keep
        self._changed(p, t0, t1, i0, i1, old)

    def block(self, p: int, t0: int, t1: int) -> None:
        """Make node ``p`` unavailable for ``[t0, t1)`` (advance reservation barrier)."""
        t0 = max(t0, self.now)
        if t1 <= t0:
            return
        i0 = self._split(p, t0)
        i1 = self._split(p, t1) if t1 < INF else len(self.ts[p])
        cs, ms, gs = self.cs[p], self.ms[p], self.gs[p]
        old = self._before(p, i0, i1)
        for j in range(i0, i1):
            cs[j] = 0
            ms[j] = 0
            gs[j] = 0
        self._changed(p, t0, t1, i0, i1, old)

    def _before(self, p: int, i0: int, i1: int) -> tuple[list[int], list[int]] | None:
        """Node ``p``'s CPUs and GPU masks on segments ``i0..i1-1`` before a change, when a
        kept :class:`_Sums` includes it (None otherwise: nothing to tell)."""
        if self._watch is None or not self._watch[p]:
            return None
        return self.cs[p][i0:i1], self.gs[p][i0:i1]

    def _changed(self, p: int, t0: int, t1: int, i0: int, i1: int,
                 old: tuple[list[int], list[int]] | None) -> None:
        """Record a change of node ``p`` on ``[t0, t1)`` (segments ``i0..i1-1``): its version,
        the log the search heaps sync from, and the kept sums that include it."""
        v = self.ver[p] = self.ver[p] + 1
        self._log.append((p, t0, t1, v))
        if old is not None and self._watch is not None:
            for sums in self._watch[p]:
                sums.changed(self.ts[p], self.cs[p], self.gs[p], i0, i1, old[0], old[1])

    def window(self, p: int, t: int, d: int) -> tuple[int, int, int]:
        """(min free CPUs, min free memory, GPUs free throughout) on ``[t, t+d)``."""
        ts, cs, ms, gs = self.ts[p], self.cs[p], self.ms[p], self.gs[p]
        i = bisect_right(ts, t) - 1
        c, m, g = cs[i], ms[i], gs[i]
        end = t + d
        j, n = i + 1, len(ts)
        while j < n and ts[j] < end:
            if cs[j] < c:
                c = cs[j]
            if ms[j] < m:
                m = ms[j]
            g &= gs[j]
            j += 1
        return c, m, g

    def window_views(self, cands: Sequence[int], t: int, d: int) -> list[NodeView]:
        """The candidates as placement sees them for ``[t, t+d)``: each node's free CPUs,
        memory and GPUs throughout that window (:meth:`window`); nodes without a free CPU
        in it are left out. Every other field (``tmp_disk`` for ``--tmp`` included) is the
        node's own (built directly: ``dataclasses.replace`` costs five times as much)."""
        views = []
        for p in cands:
            c, m, g = self.window(p, t, d)
            if c > 0:
                n = self.nodes[p]
                views.append(NodeView(
                    name=n.name, index=n.index, partitions=n.partitions, cpus=n.cpus,
                    cpus_free=c, mem=n.mem, mem_free=max(0, m), gpus=n.gpus,
                    gpus_free=mask_gpus(g), gpu_type=n.gpu_type, usable=n.usable,
                    weight=n.weight, features=n.features, tmp_disk=n.tmp_disk))
        return views

    def fit_until(self, p: int, t: int, cpus: int, mem: int, gmask: int) -> int:
        """First time ``>= t`` at which node ``p`` can no longer hold exactly this."""
        ts, cs, ms, gs = self.ts[p], self.cs[p], self.ms[p], self.gs[p]
        i = bisect_right(ts, t) - 1
        for j in range(i, len(ts)):
            if cs[j] < cpus or ms[j] < mem or gs[j] & gmask != gmask:
                return max(t, ts[j])
        return INF

    def need(self, p: int, shape: Shape) -> tuple[int, int, int]:
        c, m, g, m_all, excl = shape
        if excl:
            cap = self.cap[p]
            return cap[0], cap[1], cap[2]
        if m_all:
            return c, self.cap[p][1], g
        return c, m, g

    def next_fit(self, p: int, t: int, d: int, c: int, m: int, g: int
                 ) -> tuple[int, int, int, int] | None:
        """Earliest ``s >= t`` with node ``p`` fitting ``(c, m, g)`` on ``[s, s+d)``:
        ``(s, min cpus, min mem, GPU mask)`` over that window, or None (never)."""
        ts, cs, ms, gs = self.ts[p], self.cs[p], self.ms[p], self.gs[p]
        n = len(ts)
        i = bisect_right(ts, t) - 1
        while i < n:
            mc, mm, mask = cs[i], ms[i], gs[i]
            if mc < c or mm < m or mask.bit_count() < g:
                i += 1
                continue
            s = ts[i] if ts[i] > t else t
            end = s + d
            j = i + 1
            nxt = -1
            while j < n and ts[j] < end:
                cj, mj, gj = cs[j], ms[j], gs[j]
                if cj < c or mj < m:
                    nxt = j + 1
                    break
                nm = mask & gj
                if nm.bit_count() < g:
                    nxt = j + 1 if gj.bit_count() < g else i + 1
                    break
                if cj < mc:
                    mc = cj
                if mj < mm:
                    mm = mj
                mask = nm
                j += 1
            if nxt < 0:
                return s, mc, mm, mask
            i = nxt
        return None

    def breakpoints(self, cands: Iterable[int], lo: int, hi: int) -> list[int]:
        """Distinct breakpoint times in ``[lo, hi]`` over ``cands`` (and ``lo``), sorted."""
        out = {lo}
        for p in cands:
            ts = self.ts[p]
            for t in ts[bisect_left(ts, lo):bisect_right(ts, hi)]:
                out.add(t)
        return sorted(out)

    # ---- earliest start ---------------------------------------------------------------
    #
    # Heap entries are single ints packing ``(start - now, weight rank, free GPUs, free
    # CPUs, free memory, p)`` (most significant first; field widths from the profile's
    # largest values, which only shrink after): ordered as the tuple, i.e. by start, then
    # best fit (least free first), then position. A shared heap (:class:`_Entries`) keeps
    # beside it, per node, its live entry and the version that entry is exact at.
    #
    # Why stale entries need care: a change to a node can only delay its start (a lower
    # bound stays one) but it may also *shrink its tie-break* (fewer free CPUs) at the same
    # start, which makes its true key smaller than the cached one. Left as it was, such an
    # entry can sit below an exact entry of the same start with more free resources, and
    # best fit is lost (a 2-free node chosen over a 1-free one). So a change is logged, and
    # before a heap is searched :meth:`_sync` applies the changes made since its last
    # search: one outside a node's window ``[s, s+d)`` keeps its entry exact (earlier times
    # only lost resources, the window is untouched); one inside makes the node a *suspect*
    # at ``s``. Only when an exact entry of start ``s`` reaches the top are the suspects of
    # ``s`` recomputed (:meth:`_settle`): one that still fits at ``s`` gets its smaller key
    # pushed (the old entry is dead); one that does not is left as a lower bound (its start
    # moved later, so its old key is below the true one). Most suspects never need it.

    def _encoding(self) -> Encoding:
        """(start shift, GPU shift, CPU shift, memory shift, per-node low bits)."""
        enc = self._enc
        if enc is None:
            mc = mm = mg = 1
            for cp in self.cap:
                mc, mm, mg = max(mc, cp[0]), max(mm, cp[1]), max(mg, cp[2])
            for p in range(len(self.ts)):
                mc, mm = max(mc, max(self.cs[p])), max(mm, max(self.ms[p]))
                mg = max(mg, max(self.gs[p]).bit_length())  # largest int, longest mask
            rank = {w: i for i, w in enumerate(sorted({cp[3] for cp in self.cap}))}
            pb = max(1, len(self.ts).bit_length())
            s3 = pb + mm.bit_length()
            s2 = s3 + mc.bit_length()
            s1 = s2 + mg.bit_length()
            sh = s1 + max(1, len(rank).bit_length())
            nb = [rank[cp[3]] << s1 | p for p, cp in enumerate(self.cap)]
            enc = self._enc = (sh, s2, s3, pb, nb)
        return enc

    def _keys(self, ps: Iterable[int], t: int, d: int, shape: Shape) -> list[int]:
        """Heap keys for nodes ``ps`` from time ``t`` (see above): each node's earliest
        fit ``start`` and ``tie`` = (weight, free GPUs, free CPUs, free memory) of the
        window, least free first = best fit. Nodes that never fit are left out.

        The scan is :meth:`next_fit` inlined on purpose: this loop runs for every node of
        every heap built in a cycle, and the call and tuple per node cost ~30 % of it. Keep
        the two in step (the property tests compare plans, and a hash of the plan was checked
        against the non-inlined version when this was written)."""
        c, m, g, m_all, excl = shape
        sh, s2, s3, pb, nb = self._encoding()
        now = self.now
        cap, TS, CS, MS, GS = self.cap, self.ts, self.cs, self.ms, self.gs
        out: list[int] = []
        append = out.append
        for p in ps:
            cp = cap[p]
            if excl:
                c, m, g = cp[0], cp[1], cp[2]
            elif m_all:
                m = cp[1]
            ts, cs, ms, gs = TS[p], CS[p], MS[p], GS[p]
            n = len(ts)
            i = bisect_right(ts, t) - 1
            while i < n:
                mc, mm, mask = cs[i], ms[i], gs[i]
                if mc < c or mm < m or mask.bit_count() < g:
                    i += 1
                    continue
                s = ts[i] if ts[i] > t else t
                end = s + d
                j = i + 1
                nxt = -1
                while j < n and ts[j] < end:
                    cj, mj, gj = cs[j], ms[j], gs[j]
                    if cj < c or mj < m:
                        nxt = j + 1
                        break
                    nm = mask & gj
                    if nm.bit_count() < g:
                        nxt = j + 1 if gj.bit_count() < g else i + 1
                        break
                    if cj < mc:
                        mc = cj
                    if mj < mm:
                        mm = mj
                    mask = nm
                    j += 1
                if nxt < 0:
                    append((s - now) << sh | mask.bit_count() << s2 | mc << s3 | mm << pb
                           | nb[p])
                    break
                i = nxt
        return out

    def _heap(self, ck: Hashable, cands: Sequence[int], shape: Shape, d: int) -> _Entries:
        """The search heap of (``ck``, shape, d), built on first use, changes applied."""
        key = (ck, shape, d)
        got = self._heaps.get(key)
        if got is None:
            keys = self._build(cands, d, shape)
            live = [-1] * len(self.ts)
            pm = (1 << self._encoding()[3]) - 1
            for e in keys:
                live[e & pm] = e
            heapify(keys)
            got = self._heaps[key] = _Entries(keys, list(self.ver), live, len(self._log), d)
        elif got.seen != len(self._log):
            self._sync(got)
        return got

    def _sync(self, h: _Entries) -> None:
        """Apply the changes logged since ``h`` was last searched: a node's exact entry of
        start ``s`` stays exact if the change misses ``[s, s+d)``, else the node becomes a
        suspect at ``s`` (see above)."""
        log = self._log
        n = len(log)
        hv, live, suspect, d = h.hv, h.live, h.suspect, h.d
        sh = self._encoding()[0]
        now = self.now
        for j in range(h.seen, n):
            p, t0, t1, v = log[j]
            if hv[p] != v - 1:
                continue  # a lower bound already (or no entry: it never fits again)
            e = live[p]
            if e < 0:
                continue
            so = e >> sh
            s = so + now
            if t1 <= s or t0 >= s + d:
                hv[p] = v
                continue
            hv[p] = -1
            got = suspect.get(so)
            if got is None:
                suspect[so] = [p]
            else:
                got.append(p)
        h.seen = n

    def _settle(self, h: _Entries, so: int, shape: Shape) -> None:
        """Recompute the suspects of start offset ``so`` (see above): one that still fits at
        that start gets its exact, smaller key pushed and its old entry dies; one that does
        not keeps its old entry as a lower bound."""
        sh = self._encoding()[0]
        hv, live, ver, keys, dead = h.hv, h.live, self.ver, h.keys, h.dead
        t = so + self.now
        for p in h.suspect.pop(so):
            e = live[p]
            if hv[p] != -1 or e < 0 or e >> sh != so:
                continue  # recomputed since (it reached the top), or listed twice
            got = self._keys((p,), t, h.d, shape)
            if not got or got[0] >> sh != so:
                continue  # its start moved later: the old key stays below the new one
            hv[p] = ver[p]
            key = got[0]
            if key != e:
                live[p] = key
                dead.add(e)
                heappush(keys, key)

    def _build(self, cands: Sequence[int], d: int, shape: Shape) -> list[int]:
        """:meth:`_keys` of ``cands`` from now, shared between durations where exact."""
        base = self._base.get(shape)
        if base is None:
            base = self._base[shape] = {}
        ver, ts, cs, ms, gs = self.ver, self.ts, self.cs, self.ms, self.gs
        out = []
        fresh = []
        for p in cands:
            if ver[p]:
                fresh.append(p)
                continue
            k = base.get(p, -1)
            if k is None:
                continue
            if k != -1:
                out.append(k)
                continue
            fresh.append(p)
        got = self._keys(fresh, self.now, d, shape)
        out += got
        pm = (1 << self._encoding()[3]) - 1
        found = {k & pm: k for k in got}
        mono = self._mono
        if mono is None:  # per node: its profile never shrinks over time (as built)
            mono = self._mono = [False] * len(ts)
            for p in range(len(ts)):
                if ver[p]:
                    continue
                c, m, g = cs[p], ms[p], gs[p]
                for j in range(len(c) - 1):
                    if c[j] > c[j + 1] or m[j] > m[j + 1] or g[j] & ~g[j + 1]:
                        break
                else:
                    mono[p] = True
        for p in fresh:
            if not ver[p] and mono[p]:
                base[p] = found.get(p)
        return out

    def earliest(
        self,
        ck: Hashable,
        cands: Sequence[int],
        shape: Shape,
        d: int,
        k: int,
        horizon: int,
        select: Callable[[int, list[Fitting]], list[int] | None] | None = None,
        retry_at: int | None = None,
    ) -> tuple[int, list[int]] | None:
        """Earliest ``T`` in ``[now, horizon]`` with ``k`` of ``cands`` fitting ``shape``
        for ``[T, T+d)``, and the chosen node positions (best fit: least free first; for
        ``k > 1`` after now, see the module doc).

        ``ck`` names the candidate set (cache key). ``select(T, fitting)`` may pick ``k``
        nodes from the fitting ones (sorted best fit first; entries
        ``(weight, gpus, cpus, mem, p)``) or refuse with None (topology): the search
        then goes on to later times, and also tries ``retry_at`` (when ``select`` relents).

        Method: a cached min-heap per (``ck``, shape, d) of every node's earliest fit from
        ``now``; entries of nodes changed since (version) are recomputed when they reach
        the top (the profile only shrinks, so old values are lower bounds). For ``k > 1``
        a sweep over candidate times: at each, all nodes seen so far are re-checked; one
        that no longer fits re-enters a query-local heap at its next fit.
        """
        dkey = (ck, shape, d, horizon)
        if select is None and k >= self._dead.get(dkey, INF):
            return None
        h = self._heap(ck, cands, shape, d)
        if k == 1 and select is None:
            # the best entry, left in place (popping and pushing it back is the same)
            sh, _, _, pb, _ = self._encoding()
            e = self._top(h, shape)
            if e is not None and (e >> sh) + self.now <= horizon:
                return (e >> sh) + self.now, [e & ((1 << pb) - 1)]
            result = None
        else:
            result = self._sweep(h, shape, d, k, horizon, select, retry_at)
        if result is None and select is None:
            self._dead[dkey] = min(k, self._dead.get(dkey, INF))
        return result

    def _sweep(
        self,
        h: _Entries,
        shape: Shape,
        d: int,
        k: int,
        horizon: int,
        select: Callable[[int, list[Fitting]], list[int] | None] | None,
        retry_at: int | None,
    ) -> tuple[int, list[int]] | None:
        """:meth:`earliest` for ``k > 1`` or with ``select``: candidate times ascending, from
        the shared heap's entries in start order. At each ``T`` every node seen so far is
        re-checked (:meth:`_fitting`); one that no longer fits re-enters a query-local heap at
        its next fit from ``T``. Entries popped from the shared heap are pushed back before
        returning: they stay lower bounds for later searches."""
        sh, _, _, pb, _ = self._encoding()
        pm = (1 << pb) - 1
        now = self.now
        heap = h.keys
        taken: list[int] = []
        local: list[int] = []
        active: list[int] = []
        T = now
        result = None
        jump = False
        while True:
            if not jump:
                e = self._pop(h, local, taken, shape, horizon)
                if e is None:
                    if retry_at is None or not active or retry_at <= T or retry_at > horizon:
                        break
                    T, retry_at = retry_at, None
                else:
                    s = (e >> sh) + now
                    if s > T:
                        T = s
                    active.append(e & pm)
                    if len(active) < k:
                        continue
                    if select is not None:  # topology wants every node that fits at T
                        while True:
                            e = self._pop(h, local, taken, shape, T)
                            if e is None:
                                break
                            active.append(e & pm)
            jump = False
            fitting, redo = self._fitting(active, T, d, shape)
            if len(fitting) >= k:
                fitting.sort()
                chosen = select(T, fitting) if select is not None else [f[4] for f in fitting[:k]]
                if chosen is not None:
                    result = (T, chosen)
                    break
                nxt = min((heap[0] >> sh) + now if heap else INF,
                          (local[0] >> sh) + now if local else INF)
                if retry_at is not None and T < retry_at < nxt and retry_at <= horizon:
                    T, retry_at, jump = retry_at, None, True
            for r in self._keys(redo, T, d, shape):
                heappush(local, r)
            active = [f[4] for f in fitting]
        for e in taken:
            heappush(heap, e)
        return result

    def _fitting(self, active: list[int], T: int, d: int, shape: Shape
                 ) -> tuple[list[Fitting], list[int]]:
        """Split nodes ``active`` into those that fit ``shape`` for ``[T, T+d)`` (as
        :data:`Fitting` entries, unsorted) and those that no longer do (positions)."""
        fitting: list[Fitting] = []
        redo: list[int] = []
        for q in active:
            c, m, g = self.need(q, shape)
            wc, wm, wg = self.window(q, T, d)
            if wc >= c and wm >= m and wg.bit_count() >= g:
                fitting.append((self.cap[q][3], wg.bit_count(), wc, wm, q))
            else:
                redo.append(q)
        return fitting, redo

    def _top(self, h: _Entries, shape: Shape) -> int | None:
        """Make the top of a shared heap exact (drop dead entries, recompute stale ones and
        lower bounds); it, or None."""
        # hot loop: the costliest function of a backfill cycle (~25 % of its own time in
        # bench/sched_cycle.py --profile: 10,000 pending, ~150,000 stale tops refreshed per
        # cycle). The refresh is :meth:`next_fit` inlined, as in :meth:`_keys`, and the
        # longer-duration check after it shares its locals: a call and a tuple per refreshed
        # entry is what the inlining saves. Keep it in step with next_fit.
        ver = self.ver
        sh, s2, s3, pb, nb = self._encoding()
        pm = (1 << pb) - 1
        heap, hv, live, dead, suspect, d = h.keys, h.hv, h.live, h.dead, h.suspect, h.d
        e = heap[0] if heap else None
        if e is None or (hv[e & pm] == ver[e & pm] and e not in dead and
                         (e >> sh) not in suspect):
            return e
        c, m, g, m_all, excl = shape
        per_node = excl or m_all
        now = self.now
        cap, TS, CS, MS, GS = self.cap, self.ts, self.cs, self.ms, self.gs
        fits = self._fits.get(shape)
        if fits is None:
            fits = self._fits[shape] = {}
        while heap:
            e = heap[0]
            if e in dead:  # replaced by a smaller key (_settle)
                dead.discard(e)
                heappop(heap)
                continue
            p = e & pm
            v = ver[p]
            old = hv[p]
            if old == v:
                if (e >> sh) in suspect:  # exact, but a suspect of its start may beat it
                    self._settle(h, e >> sh, shape)
                    continue
                return e
            got = fits.get(p)
            if got is not None and got[0] == v and got[1] <= d:
                fit_key = got[2]
                hv[p] = v
                live[p] = fit_key
                if fit_key == e:
                    if (e >> sh) not in suspect:
                        return e
                    continue
                heapreplace(heap, fit_key)
                continue
            t = (e >> sh) + now
            # recompute from the old start (a lower bound): as _keys((p,), t, d, shape);
            # when nothing was taken inside its window since, that is the same entry
            if per_node:
                cp = cap[p]
                if excl:
                    c, m, g = cp[0], cp[1], cp[2]
                else:
                    m = cp[1]
            ts, cs, ms, gs = TS[p], CS[p], MS[p], GS[p]
            n = len(ts)
            i = bisect_right(ts, t) - 1
            key = None
            while i < n:
                mc, mm, mask = cs[i], ms[i], gs[i]
                if mc < c or mm < m or mask.bit_count() < g:
                    i += 1
                    continue
                s = ts[i] if ts[i] > t else t
                end = s + d
                j = i + 1
                nxt = -1
                while j < n and ts[j] < end:
                    cj, mj, gj = cs[j], ms[j], gs[j]
                    if cj < c or mj < m:
                        nxt = j + 1
                        break
                    nm = mask & gj
                    if nm.bit_count() < g:
                        nxt = j + 1 if gj.bit_count() < g else i + 1
                        break
                    if cj < mc:
                        mc = cj
                    if mj < mm:
                        mm = mj
                    mask = nm
                    j += 1
                if nxt < 0:
                    key = (s - now) << sh | mask.bit_count() << s2 | mc << s3 | mm << pb | nb[p]
                    # nothing after the window is below its minimum: the same fit for
                    # every longer duration (until the node changes)
                    if got is None or got[0] != v or d < got[1]:
                        while j < n:
                            gj = gs[j]
                            if cs[j] < mc or ms[j] < mm or gj & mask != mask:
                                break
                            j += 1
                        else:
                            fits[p] = (v, d, key)
                    break
                i = nxt
            if key is None:
                heappop(heap)
                live[p] = -1
            else:
                hv[p] = v
                live[p] = key
                if key == e:
                    if (e >> sh) not in suspect:
                        return e
                    continue
                heapreplace(heap, key)
        return None

    def _pop(self, h: _Entries, local: list[int], taken: list[int], shape: Shape,
             upto: int) -> int | None:
        """The next exact entry ``<= upto`` from the shared or the query-local heap, or None."""
        sh = self._encoding()[0]
        heap = h.keys
        e = self._top(h, shape)
        now = self.now
        st = INF if e is None else (e >> sh) + now
        lt = (local[0] >> sh) + now if local else INF
        if st <= lt:
            if st > upto:
                return None
            assert e is not None  # st is finite
            heappop(heap)
            taken.append(e)
            return e
        if lt > upto:
            return None
        return heappop(local)

    def earliest_general(
        self,
        job: JobView,
        rq: Request,
        ck: Hashable,
        cands: Sequence[int],
        d: int,
        horizon: int,
        place: Callable[[int, list[NodeView]], Allocation | None] | None = None,
    ) -> tuple[int, Allocation] | None:
        """Earliest start for any request shape: placement on window views at each
        breakpoint in ``[now, horizon]`` (all of them, as Slurm's backfill tries every start
        its time map holds within ``bf_window``); ``place(T, views)`` replaces
        :func:`~muster.core.placement.place_request` (topology: the fewest leaves). It tried
        only the first 64 until 2026-12-08: a wide job whose first fit lay past the 64th
        breakpoint got no reservation at all, so later jobs could take its nodes pass after
        pass (conservative backfill of CTC's first 600 jobs on 430 one-CPU nodes: 169 of
        14,386 searches missed a fit that way).

        A breakpoint is placed only when the candidates' window CPUs (and GPUs for GPU
        counts) add up to what the tasks need: a necessary condition, so the answer is the
        same, and most breakpoints of a wide ``-n`` job fail it without building a view.

        ``ck`` names the candidate set (as for :meth:`earliest`): its breakpoints and summed
        profile are kept for the rest of the cycle (:class:`_Sums`, updated by every
        reserve and block of its nodes) instead of being summed again over every candidate
        for every job — what made conservative backfill of wide ``-n`` jobs cost
        O(nodes × breakpoints) a job."""
        sums = self._sums_of(ck, cands, max(1, rq.cpt))
        times = sums.bps[:bisect_right(sums.bps, horizon)]
        if not times:
            return None
        screen = None if rq.exclusive else self._screen(rq, cands, d,
                                                        (sums.at, sums.tf, sums.tg))
        for T in times:
            if screen is not None and not screen(T):
                continue
            views = self.window_views(cands, T, d)
            got = place_request(job, rq, views) if place is None else place(T, views)
            if got is not None:
                return T, got
        return None

    def _sums_of(self, ck: Hashable, cands: Sequence[int], cpt: int) -> _Sums:
        """The kept :class:`_Sums` of (``ck``, ``cpt``), made on first use."""
        key = (ck, cpt)
        got = self._sums.get(key)
        if got is None:
            at, tf, tg = self._summed(cands, cpt, INF)
            got = self._sums[key] = _Sums(self.now, self.breakpoints(cands, self.now, INF),
                                          at, tf, tg, cpt)
            if self._watch is None:
                self._watch = [[] for _ in self.ts]
            for p in cands:
                self._watch[p].append(got)
        return got

    def _summed(self, cands: Sequence[int], cpt: int,
                end: int) -> tuple[list[int], list[int], list[int]]:
        """The candidates' profile summed over nodes on ``[now, end)``: times, whole tasks of
        ``cpt`` CPUs (per node, then summed), free GPUs; a step function."""
        delta: dict[int, list[int]] = {}
        for p in cands:
            ts, cs, gs = self.ts[p], self.cs[p], self.gs[p]
            f = g = 0
            for j in range(len(ts)):
                if ts[j] >= end:
                    break
                c = cs[j]
                nf, ng = (c // cpt if c > 0 else 0), gs[j].bit_count()
                if nf != f or ng != g:
                    e = delta.get(ts[j])
                    if e is None:
                        delta[ts[j]] = [nf - f, ng - g]
                    else:
                        e[0] += nf - f
                        e[1] += ng - g
                    f, g = nf, ng
        at = sorted(delta)
        tot_f, tot_g = [], []
        f = g = 0
        for t in at:
            e = delta[t]
            f += e[0]
            g += e[1]
            tot_f.append(f)
            tot_g.append(g)
        return at, tot_f, tot_g

    def _screen(self, rq: Request, cands: Sequence[int], d: int,
                summed: tuple[list[int], list[int], list[int]]) -> Callable[[int], bool]:
        """A necessary condition for placing ``rq`` on ``cands`` for ``[T, T+d)``: the tasks'
        CPUs (whole tasks per node) and a GPU count fit the windows, summed over the nodes.

        Two stages, cheapest first: the minimum over the window of the *summed* profile (a
        sum of minima is at most the minimum of the sum; equal for profiles that only grow,
        i.e. before reservations), then the exact sum of the nodes' window minima. Placement
        views are built only where both pass: most times of a wide ``-n`` job fail the first."""
        cpt = max(1, rq.cpt)
        tasks = rq.ntasks if rq.tasks_mode == "pack" else rq.lo * (
            rq.tpn if rq.tasks_mode == "fixed" and rq.tpn is not None else 1)
        gm = rq.gpu_mode
        gneed = rq.gpus if gm == "total" else rq.gpus * tasks if gm == "task" \
            else rq.gpus * rq.lo if gm == "node" else 0
        at, tot_f, tot_g = summed
        n = len(at)
        window = self.window

        def enough(T: int) -> bool:
            i = bisect_right(at, T) - 1
            if i < 0:
                return False
            stop = T + d
            while i < n and at[i] < stop:
                if tot_f[i] < tasks or tot_g[i] < gneed:
                    return False
                i += 1
            ft = gt = 0
            for p in cands:
                wc, _, wg = window(p, T, d)
                if wc > 0:
                    ft += wc // cpt
                    gt += wg.bit_count()
                    if ft >= tasks and gt >= gneed:
                        return True
            return False

        return enough

    def commit(self, alloc: Allocation, t0: int, t1: int) -> None:
        """Reserve an allocation's CPUs, memory and GPU indices on ``[t0, t1)``."""
        pos = self.pos
        for a in alloc.nodes:
            self.reserve(pos[a.node], t0, t1, a.cpus, a.mem, gpu_mask(a.gpus))
