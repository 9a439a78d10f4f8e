"""sched/backfill over a :class:`~muster.core.timeline.Timeline` (one pass, one parameter
per variant).

Contract:

* Input: the ordered queue entries of :func:`muster.core.schedule.schedule`, the
  snapshot and config. Running jobs end at ``end_time`` (a job already past it: now +
  KillWait + OverTimeLimit; no limit: start + partition MaxTime, else one year); that is
  when the timeline gives their resources back.
* Walk the entries in order. For each (job, partition): limits (reason, no block, no
  reservation) → runtime estimate ``d`` (``--time-min`` if given, else the time limit,
  else the partition MaxTime, else one year; capped at MaxTime) → earliest start ``T``
  in ``[now, now + bf_window]`` at which the job fits for ``[T, T+d)`` without touching
  anything reserved before it.
* ``T == now``: start it. ``Start.scheduler`` is ``"Main"`` when no earlier entry waits
  for resources in its partition or on one of its nodes (the main scheduler would have
  started it too), else ``"Backfill"``. With ``--time-min`` the limit is raised to the
  free gap (at most the time limit) and returned in ``Start.time_limit``.
* ``T > now``: reason ``Resources`` for the first waiting entry of a partition,
  ``Priority`` after. While fewer than ``bf_depth`` reservations exist (None = all:
  conservative; 1 = EASY) and the QOS has no ``NoReserve``: reserve exactly the CPUs,
  memory and GPU indices the job would get (not whole nodes) for ``[T, T + d)`` rounded
  up to ``bf_resolution`` (the earliest ``T`` at which that whole window fits), record
  ``expected_start`` and ``sched_nodes``. Without a
  reservation the estimate is still reported (informational). Beyond the window: none.
* Because every start and reservation is carved out of the same profile, a job starts
  now only if it delays no reservation made before it (given accurate limits).
* A node range (``-N min-max``, ``Request.grow``): the search, the expected start and the
  reservation use the minimum (it can start earliest); a start now then grows onto the
  candidates that are free in the profile for its whole planned run, up to ``nodes_max``
  (``_Pass.widen``), so the extra nodes are never ones an earlier reservation plans on.
* Advance reservations: their nodes are blocked for ``[start, end)`` in the shared
  profile; a job that names one is planned on a separate profile of the reserved nodes
  that is open only inside the window, with ``d`` capped at the window's end.
* Without ``cfg.backfill`` (used when advance reservations or topology need the
  timeline): main-scheduler semantics on the same profile: nothing is planned ahead,
  the first waiting entry blocks its partition (``Priority`` for the rest) and hides its
  nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from typing import Any

from .limits import LimitChecker, job_tres
from .placement import Allocation, NodeAlloc, Request, fixed_tpn, place_request, request_of
from .snapshot import JobView, NodeView, PartitionView, RunningView, SchedConfig, Snapshot
from .timeline import INF, Fitting, Shape, Timeline, gpu_mask, mask_gpus
from .topology import Grouping, build, place_on

__all__ = ["Result", "YEAR", "estimate", "node_tasks", "plan_shape", "run", "running_end"]

YEAR = 365 * 86400


@dataclass(slots=True)
class Result:
    # (job, partition, Allocation, scheduler, granted limit or None)
    starts: list[tuple[JobView, str, Allocation, str, int | None]] = field(default_factory=list)
    expected: dict[int, int] = field(default_factory=dict)
    sched_nodes: dict[int, tuple[str, ...]] = field(default_factory=dict)
    timeline: Timeline | None = None


def estimate(job: JobView, part: PartitionView) -> int:
    """Planning runtime in seconds (see module doc)."""
    lim = job.time_min if job.time_min else job.time_limit
    if lim is None:
        lim = part.max_time
    if part.max_time is not None and lim is not None:
        lim = min(lim, part.max_time)
    return YEAR if lim is None else max(1, lim) * 60


def running_end(r: RunningView, part: PartitionView | None, now: int, cfg: SchedConfig) -> int:
    end = r.end_time
    if end is None:
        mt = part.max_time if part is not None else None
        end = r.start_time + (mt * 60 if mt is not None else YEAR)
    if end <= now:
        end = now + cfg.kill_wait + cfg.over_time_limit * 60
    return end


def plan_shape(rq: Request, max_node: tuple[int, int, int]) -> tuple[Shape, int] | None:
    """(per-node shape, node count) when every node of the job needs the same thing, or
    a packing request that one empty node of the candidates (``max_node`` = largest
    cpus, mem, gpus) can hold; None → the general search (also for a contiguous request
    of more than one node: only placement's window search knows which nodes are adjacent)."""
    pack_t = rq.tasks_mode == "pack"
    pack_g = rq.gpu_mode == "total"
    if rq.tasks_mode == "one":
        t, k = 1, rq.lo
    elif rq.tasks_mode == "fixed":
        t, k = fixed_tpn(rq), rq.lo
    else:
        t, k = rq.ntasks, 1
        if rq.tpn is not None and rq.tpn < t:
            return None
    if pack_t or pack_g:
        if rq.lo > 1 or (rq.tasks_mode == "fixed" and pack_g):
            return None
        k = 1
    if (rq.hi is not None and k > rq.hi) or (rq.contig and k > 1):
        return None  # contiguous nodes: placement's window search (earliest_general)
    g = rq.gpus * t if rq.gpu_mode == "task" else rq.gpus if rq.gpu_mode else 0
    c = rq.node_cpus(t, g)
    mm = rq.mem_mode
    m = rq.mem if mm == "node" else rq.mem * c if mm == "cpu" else rq.mem * g if mm == "gpu" else 0
    if (pack_t or pack_g) and not rq.exclusive and (
            c > max_node[0] or m > max_node[1] or g > max_node[2]):
        return None
    return Shape(c, m, g, mm == "all", rq.exclusive), k


class _Planner:
    """Candidate sets and searches for one profile (the shared one or a reservation's)."""

    def __init__(self, tl: Timeline, topo: Grouping | None, now: int) -> None:
        self.tl, self.topo, self.now = tl, topo, now
        self.cands: dict[Hashable, list[int]] = {}
        self.maxn: dict[Hashable, tuple[int, int, int]] = {}

    def candidates(self, job: JobView, rq: Request, part: PartitionView, hidden: frozenset[int],
                   hv: int) -> tuple[Hashable, list[int]]:
        cons = job.constraint
        ck = (part.name, cons, rq.gpu_type, job.exc_nodes, hv)
        got = self.cands.get(ck)
        if got is None:
            tl = self.tl
            ps = set()
            for nm in part.node_names:
                p = tl.pos.get(nm)
                if p is None or p in hidden:
                    continue
                n = tl.nodes[p]
                if not n.usable or nm in job.exc_nodes:
                    continue
                if cons is not None and not cons.node_may_serve(n.features):
                    continue
                if rq.gpu_type is not None and n.gpu_type != rq.gpu_type:
                    continue
                ps.add(p)
            got = self.cands[ck] = sorted(ps)
            caps = [tl.cap[p] for p in got]
            self.maxn[ck] = (max((c[0] for c in caps), default=0),
                             max((c[1] for c in caps), default=0),
                             max((c[2] for c in caps), default=0))
        return ck, got

    def find(self, job: JobView, rq: Request, ck: Hashable, cands: list[int], d: int,
             horizon: int, cfg: SchedConfig) -> tuple[int, Callable[[], Allocation]] | None:
        """Earliest start ``T`` and a function that builds the allocation at ``T``: call it
        before the profile changes. Most answers are only an expected start (never
        allocated), so the allocation is not built for them."""
        tl = self.tl
        complex_cons = job.constraint is not None and not job.constraint.simple
        shaped = None if job.req_nodes or complex_cons else plan_shape(rq, self.maxn[ck])
        cap_until = self._switch_deadline(job, cfg)
        if shaped is None:
            if job.req_nodes:
                pos = tl.pos
                if not all(pos.get(nm) in set(cands) for nm in job.req_nodes):
                    return None
            place = None
            if self.topo is not None and (max(rq.lo, len(job.req_nodes)) > 1 or rq.tasks_mode
                                          == "pack" or rq.gpu_mode == "total"):
                place = self._placer(job, rq, cap_until)  # may span nodes: fewest leaves
            got = tl.earliest_general(job, rq, ck, cands, d, horizon, place=place)
            if got is None:
                return None
            start, placed = got
            return start, lambda: placed
        shape, k = shaped
        select = retry = None
        if k > 1 and self.topo is not None:
            topo = self.topo
            deadline = cap_until
            retry = deadline if deadline > self.now else None

            def select(T: int, fitting: list[Fitting]) -> list[int] | None:
                cap = job.switches if job.switches and T < deadline else None
                return topo.select(k, fitting, cap)
        found = tl.earliest(ck, cands, shape, d, k, horizon, select, retry)
        if found is None:
            return None
        T, ps = found
        return T, lambda: _direct(job, rq, shape, tl, sorted(ps), T, d)


    def grower(self, job: JobView, rq: Request, ck: Hashable, cands: list[int], d: int,
               alloc: Allocation) -> Callable[[int], Allocation | None]:
        """``place(k)`` for a node range starting now: the allocation of the most
        candidates, at most ``k``, each holding its unit for ``[now, now + d)`` in the
        profile; None when no more nodes than ``alloc`` (its minimum, as planned) fit.

        A per-node shape (:func:`plan_shape`; no ``-w``, ``-n``, ``--gpus``, counted
        constraint or ``--contiguous``): :meth:`Timeline.earliest` at ``now`` for a node
        count, bisected (``k`` nodes that fit now mean fewer do too), on the search heaps
        the planner already keeps, so a start costs a few heap queries, not a pass over the
        nodes; under a topology its fewest-leaves selection picks them. Anything else:
        placement on every candidate's window with ``alloc``'s nodes required."""
        tl, now, floor, topo = self.tl, self.now, len(alloc.nodes), self.topo
        shaped = None
        if not (job.req_nodes or rq.contig or rq.tasks_mode == "pack" or rq.gpu_mode == "total"
                or (job.constraint is not None and not job.constraint.simple)):
            shaped = plan_shape(replace(rq, grow=False), self.maxn[ck])
        if shaped is None:
            views = tl.window_views(cands, now, d)
            pinned = replace(job, req_nodes=job.req_nodes | frozenset(alloc.node_names))

            def general(k: int) -> Allocation | None:
                got = place_request(pinned, replace(rq, hi=k), views)
                return got if got is not None and len(got.nodes) > floor else None
            return general
        shape = shaped[0]

        def by_shape(k: int) -> Allocation | None:
            best, a, b = None, floor + 1, k
            while a <= b:
                m = (a + b) // 2
                sel = None if topo is None else (
                    lambda T, fitting, m=m: topo.select(m, fitting, None))
                got = tl.earliest(ck, cands, shape, d, m, now, sel)
                if got is not None and got[0] == now:
                    best, a = got[1], m + 1
                else:
                    b = m - 1
            return None if best is None else _direct(job, rq, shape, tl, sorted(best), now, d)
        return by_shape

    def _switch_deadline(self, job: JobView, cfg: SchedConfig) -> int:
        """Until when ``--switches=N`` holds (0: no cap): eligible (else submit) time plus
        its own wait, else ``max_switch_wait``."""
        if not job.switches:
            return 0
        wait = job.switch_wait if job.switch_wait is not None else cfg.max_switch_wait
        since = job.eligible_time if job.eligible_time is not None else job.submit_time
        return since + wait

    def _placer(self, job: JobView, rq: Request, deadline: int
                ) -> Callable[[int, list[NodeView]], Allocation | None]:
        """Placement of a general request shape at time ``T`` on the fewest leaves/blocks
        (:func:`muster.core.topology.place_on`), capped by ``--switches`` before ``deadline``."""
        topo, pos = self.topo, self.tl.pos
        assert topo is not None

        def place(T: int, views: list[NodeView]) -> Allocation | None:
            cap = job.switches if job.switches and T < deadline else None
            return place_on(topo, views, pos, lambda vs: place_request(job, rq, vs), cap)
        return place


def node_tasks(rq: Request) -> int:
    """Tasks on each node of a job whose nodes all get the same shape (:func:`plan_shape`)."""
    if rq.tasks_mode == "pack":
        return rq.ntasks
    return 1 if rq.tasks_mode == "one" else fixed_tpn(rq)


def _direct(job: JobView, rq: Request, shape: Shape, tl: Timeline, ps: list[int], T: int,
            d: int) -> Allocation:
    """The allocation :func:`~muster.core.placement.place_request` would build on these
    nodes (each fits ``shape`` for ``[T, T+d)``): lowest free GPU indices, memory by mode."""
    c, m, g, m_all, excl = shape
    t = node_tasks(rq)
    mm = rq.mem_mode
    out = []
    for p in ps:
        n = tl.nodes[p]
        wc, wm, wg = tl.window(p, T, d)
        if excl:
            cpus, gids = n.cpus, mask_gpus(wg)
        else:
            cpus, gids = c, _lowest(wg, g)
        mem = (n.mem if mm == "all" else rq.mem if mm == "node" else rq.mem * cpus if mm == "cpu"
               else rq.mem * len(gids))
        out.append(NodeAlloc(node=n.name, cpus=cpus, mem=mem, gpus=gids, tasks=t))
    return Allocation(job_id=job.job_id, nodes=tuple(out))


def _lowest(mask: int, g: int) -> tuple[int, ...]:
    """The ``g`` lowest GPU indices of ``mask`` (all of them if fewer): ``mask_gpus(mask)[:g]``."""
    out: list[int] = []
    while mask and len(out) < g:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return tuple(out)


def _granted(tl: Timeline, alloc: Allocation, job: JobView, part: PartitionView, now: int) -> int:
    """--time-min: the longest limit (minutes, ≤ time limit) the free gap allows."""
    lim = job.time_limit if job.time_limit is not None else part.max_time
    lim = lim if lim is not None else YEAR // 60
    until = INF
    for a in alloc.nodes:
        until = min(until, tl.fit_until(tl.pos[a.node], now, a.cpus, a.mem, gpu_mask(a.gpus)))
    gap = (until - now) // 60 if until < INF else lim
    return max(job.time_min or 1, min(lim, gap))


Release = tuple[str, int, int, int, tuple[int, ...]]  # node, time, cpus, mem, GPU indices


class _Pass:
    """The state of one backfill pass: the shared profile (running jobs' ends released,
    advance reservations blocked) with its planner, the profiles of advance reservations
    (built on first use), and what the walk has decided so far.

    Invariants: positions in ``blocked_nodes`` and ``hidden`` are the shared profile's;
    ``blocked_parts`` are partitions with a waiting entry (their later starts are labelled
    ``Backfill``); ``hidden`` (main-scheduler semantics only, ``cfg.backfill`` off) are the
    nodes no later entry may use, ``hv`` its version (part of the candidate cache key);
    ``done``: jobs holding a reservation, whose later entries are skipped."""

    __slots__ = ("snap", "cfg", "now", "limits", "res", "tl", "releases", "resv", "member",
                 "topo", "main", "backfill", "horizon", "depth", "resolution", "blocked_parts",
                 "blocked_nodes", "hidden", "hv", "done", "reserved")

    def __init__(self, snap: Snapshot, cfg: SchedConfig, parts: dict[str, PartitionView],
                 limits: LimitChecker) -> None:
        now = self.now = snap.now
        self.snap, self.cfg, self.limits = snap, cfg, limits
        self.res = Result()
        releases: list[Release] = []
        for r in snap.running:
            end = running_end(r, parts.get(r.partition), now, cfg)
            for a in r.nodes:
                releases.append((a.node, end, a.cpus, a.mem, a.gpus))
        self.releases = releases
        tl = self.tl = self.res.timeline = Timeline.build(now, snap.nodes, releases)
        self.resv = {r.name: r for r in snap.reservations}
        self.member: dict[str, _Planner] = {}
        for rv in snap.reservations:
            for nm in rv.nodes:
                p = tl.pos.get(nm)
                if p is not None:
                    tl.block(p, rv.start, rv.end)
        self.topo = build(snap.switches, snap.blocks, snap.block_sizes, tl.pos)
        self.main = _Planner(tl, self.topo, now)
        self.backfill = cfg.backfill
        self.horizon = now + cfg.bf_window * 60 if cfg.backfill else now
        self.depth = cfg.bf_depth
        self.resolution = max(1, cfg.bf_resolution)
        self.blocked_parts: set[str] = set()
        self.blocked_nodes: set[int] = set()
        self.hidden: frozenset[int] = frozenset()
        self.hv = 0
        self.done: set[int] = set()
        self.reserved = 0

    def in_reservation(self, job: JobView, d: int) -> tuple[_Planner, int, int] | str:
        """(planner, runtime, horizon) for a job that names an advance reservation: its own
        profile of the reserved nodes, open only inside ``[start, end)``, the runtime capped
        at the end; or the reason it cannot use it (``ReservationInvalid``: no such one;
        ``Reservation``: not admitted)."""
        assert job.reservation is not None  # asked only for such jobs
        rv = self.resv.get(job.reservation)
        if rv is None or not rv.admits(job):
            return "ReservationInvalid" if rv is None else "Reservation"
        now, snap = self.now, self.snap
        planner = self.member.get(rv.name)
        if planner is None:
            sub = Timeline.build(now, [n for n in snap.nodes if n.name in rv.nodes],
                                 [x for x in self.releases if x[0] in rv.nodes])
            for p in range(len(sub.nodes)):
                sub.block(p, now, rv.start)
                sub.block(p, rv.end, INF)
            planner = self.member[rv.name] = _Planner(
                sub, build(snap.switches, snap.blocks, snap.block_sizes, sub.pos), now)
        d = max(1, min(d, rv.end - max(now, rv.start)))
        hz = max(self.horizon, min(rv.start, now + self.cfg.bf_window * 60)) \
            if self.backfill else now
        return planner, d, hz

    def start_now(self, planner: _Planner, job: JobView, pname: str, part: PartitionView,
                  rq: Request, ck: Hashable, cands: list[int], d: int, hz: int,
                  remaining: int) -> tuple[int, tuple[int, Callable[[], Allocation]] | None]:
        """Start up to ``remaining`` tasks of ``job`` now (fewer when ``max_jobs_to_start``
        is reached), each committed to the profile before the next search. Returns the tasks
        still to start and the last search's answer when it was not "now": the earliest
        later start, or None (never inside the horizon, or stopped by the start limit)."""
        now, res, limit, cfg = self.now, self.res, self.cfg.max_jobs_to_start, self.cfg
        pos, blocked_parts, blocked_nodes = self.tl.pos, self.blocked_parts, self.blocked_nodes
        plan = replace(rq, grow=False) if rq.grow else rq  # planned with its minimum
        found = None
        while remaining and not (limit and len(res.starts) >= limit):
            found = planner.find(job, plan, ck, cands, d, hz, cfg)
            if found is None or found[0] != now:
                break
            alloc = found[1]()
            if rq.grow:
                alloc = self.widen(planner, job, pname, rq, alloc, ck, cands, d)
            ptl = planner.tl
            run_limit = None
            if job.time_min:
                run_limit = _granted(ptl, alloc, job, part, now)
                ptl.commit(alloc, now, now + run_limit * 60)
            else:
                ptl.commit(alloc, now, now + d)
            ps = {pos[a.node] for a in alloc.nodes}
            label = "Backfill" if (pname in blocked_parts or ps & blocked_nodes) else "Main"
            res.starts.append((job, pname, alloc, label, run_limit))
            self.limits.charge(job, pname, alloc)
            remaining -= 1
            found = None
        return remaining, found

    def widen(self, planner: _Planner, job: JobView, pname: str, rq: Request,
              alloc: Allocation, ck: Hashable, cands: list[int], d: int) -> Allocation:
        """A job with a node range that starts now: instead of ``alloc`` (its minimum, as
        planned) the most candidates, up to ``nodes_max``, that each hold its unit for all of
        ``[now, now + d)`` in the profile (:meth:`_Planner.grower`).

        Why no reservation is delayed: the profile already holds every reservation made
        before this entry (and the advance reservations), and a node's window is free only
        where nothing reserved touches it during the job's whole planned run, so an extra
        node is one no earlier reservation plans on while the job runs: the same test that
        lets any job start now. (A ``--time-min`` job's limit is then granted from the gap
        of every node, extras included.) Without ``cfg.backfill`` the hidden nodes of blocked
        partitions are not among ``cands``. Kept at ``alloc``: ``--switches`` under a
        topology (extra nodes could cross a switch the cap forbids). Within QOS/association
        limits: the most nodes they allow (:meth:`LimitChecker.widest`)."""
        if job.switches and planner.topo is not None:
            return alloc
        place = planner.grower(job, rq, ck, cands, d, alloc)
        got = place(rq.hi or len(alloc.nodes))
        if got is None:
            return alloc
        got = self.limits.widest(job, pname, got, len(alloc.nodes), place)
        return alloc if got is None else got

    def waits(self, job: JobView, pname: str, cands: list[int]) -> None:
        """An entry of the shared profile waits: its partition is blocked (later starts there
        are ``Backfill``) and its candidates, or only its ``-w`` nodes if the partition was
        blocked already, too; without backfill they are also hidden from later entries."""
        if pname not in self.blocked_parts or job.req_nodes:
            self.blocked_nodes.update(cands)
        self.blocked_parts.add(pname)
        if not self.backfill:
            pos = self.tl.pos
            self.hidden = frozenset(self.blocked_nodes) if not job.req_nodes else self.hidden | {
                pos[nm] for nm in job.req_nodes if nm in pos}
            self.hv += 1

    def reserve(self, planner: _Planner, job: JobView, rq: Request, ck: Hashable,
                cands: list[int], d: int, hz: int,
                found: tuple[int, Callable[[], Allocation]]) -> int:
        """A waiting job's expected start; while fewer than ``bf_depth`` reservations exist
        (and its QOS may reserve), also reserve its resources for ``[T, T + d)`` rounded up
        to ``bf_resolution`` (``T`` then the earliest start of that whole window). A node
        range reserves its minimum (``found`` was searched with it, as in :meth:`start_now`)."""
        T, make = found
        if rq.grow:
            rq = replace(rq, grow=False)
        if (self.depth is None or self.reserved < self.depth) and not self.limits.no_reserve(job):
            # the reservation holds [T, T+d) rounded up to bf_resolution: it must fit for
            # that whole window, or it would overlap a later reservation made before it
            resolution = self.resolution
            held = -(-d // resolution) * resolution
            got: tuple[int, Callable[[], Allocation]] | None = found
            if held != d:
                got = planner.find(job, rq, ck, cands, held, hz, self.cfg)
            if got is not None:
                T, make = got
                alloc = make()
                planner.tl.commit(alloc, T, T + held)
                self.res.sched_nodes[job.job_id] = alloc.node_names
                self.reserved += 1
                self.done.add(job.job_id)
        return T


def run(
    snap: Snapshot,
    cfg: SchedConfig,
    entries: list[tuple[Any, ...]],
    parts: dict[str, PartitionView],
    limits: LimitChecker,
    note: Callable[[int, int, str], None],
    classify: Callable[[JobView, str], str],
    requests: dict[int, Request],
) -> Result:
    """One backfill pass over the ordered ``entries`` (module doc): per entry the screens
    that need no search (start limit, blocked partition, limits, test budget), the starts
    now, then for a job left waiting its reason, the blocking it causes and its reservation."""
    bf = _Pass(snap, cfg, parts, limits)
    res, main, done, backfill, limit = bf.res, bf.main, bf.done, cfg.backfill, cfg.max_jobs_to_start
    left: dict[int, int] = {}  # job → array tasks still to start
    tested = 0
    for _, _, _, _, _, jid, idx, pname, job in entries:
        if jid in done:
            continue
        remaining = left.get(jid, max(1, job.max_starts))
        if remaining == 0:
            continue
        if (limit and len(res.starts) >= limit) or (not backfill and pname in bf.blocked_parts):
            note(jid, idx, "Priority")
            continue
        part = parts[pname]
        rq = requests.get(jid)
        if rq is None:
            rq = requests[jid] = request_of(job, cfg)
        if part.max_nodes is not None and (rq.hi is None or rq.hi > part.max_nodes):
            rq = replace(rq, hi=part.max_nodes)
        why = limits.check(job, pname, job_tres(job, rq)) if limits.on else None
        if why is not None:
            note(jid, idx, why)
            continue
        if backfill and cfg.bf_max_job_test and len(job.partitions) > 1:
            # a partition that can never hold the job (-p a,b with a too small) does not
            # spend the test budget: it would starve the partition that can
            why = classify(job, pname)
            if why != "Resources":
                note(jid, idx, why)
                continue
        tested += 1
        if backfill and cfg.bf_max_job_test and tested > cfg.bf_max_job_test:
            note(jid, idx, "Priority")
            continue
        d = estimate(job, part)
        planner, hz = main, bf.horizon
        if job.reservation is not None:
            got = bf.in_reservation(job, d)
            if isinstance(got, str):
                note(jid, idx, got)
                continue
            planner, d, hz = got
        ck, cands = planner.candidates(
            job, rq, part, bf.hidden if planner is main else frozenset(), bf.hv)
        if job.req_nodes and not job.req_nodes <= {planner.tl.nodes[p].name for p in cands}:
            why = classify(job, pname)
            note(jid, idx, "ReqNodeNotAvail" if why == "Resources" else why)
            continue
        remaining, found = bf.start_now(planner, job, pname, part, rq, ck, cands, d, hz,
                                        remaining)
        left[jid] = remaining
        if remaining == 0:
            continue
        if limit and len(res.starts) >= limit and found is None:
            note(jid, idx, "Priority")
            continue
        if found is None:  # maybe never: the static classification says why
            why = classify(job, pname)
            if why != "Resources":
                note(jid, idx, why)
                continue
        note(jid, idx, "Priority" if pname in bf.blocked_parts else "Resources")
        if planner is main:
            bf.waits(job, pname, cands)
        if found is not None and backfill:
            res.expected[jid] = bf.reserve(planner, job, rq, ck, cands, d, hz, found)
    return res
