"""cons_tres-style placement of one job on the free resources of a set of nodes.

Pipeline: normalise the request (:func:`request_of`) → per node, the capacity it offers
(how many tasks, how many GPUs for ``--gpus``) → choose nodes → distribute tasks and GPUs
→ :class:`Allocation`. Pure and deterministic: the answer depends only on the arguments,
never on the order of ``nodes``.

Semantics (CPUs are the allocation unit, memory is consumable):

* Tasks never split across nodes; a node with ``t`` tasks gets ``t * cpus_per_task`` CPUs
  (at least 1). Without ``-n``: one task per node (or ``--ntasks-per-node``) on exactly
  ``nodes_min`` nodes (more only if ``-w`` names more). With ``-n``: tasks are packed on as
  few nodes as possible, at least ``nodes_min``, at most ``nodes_max``, with
  ``--ntasks-per-node`` as a per-node maximum; every node gets at least one task.
* A node *range* (``-N min-max``, ``nodes_max > nodes_min``: :attr:`Request.grow`) takes
  as many nodes as fit now, up to ``nodes_max`` (Slurm: "allocated as many nodes as
  possible within the range"), never fewer than the rules above give: the nodes those
  rules choose, then the best-fit nodes (``node_key``) among the rest that fit one unit.
  Without ``-n`` each node runs one task (or ``--ntasks-per-node``); with ``-n`` (or
  ``--gpus``) at most one node per task (per GPU) and the tasks are balanced over the
  nodes as for ``-N k -n t``. Growth never turns a fit into a misfit: a request that fits
  its minimum fits grown. A contiguous request does not grow (its window stays the
  shortest). The backfill planner plans with the minimum (``grow`` off) and grows only
  at a start now (:mod:`muster.core.backfill`). ``--use-min-nodes`` (Slurm: "prefer the
  smaller count") turns growth off: the job takes as few nodes as the rules above give.
* Memory per node, first rule that applies: ``mem_per_node`` (0 = all memory of the node,
  which needs the node's memory untouched), ``mem_per_cpu`` × CPUs, ``mem_per_gpu`` × GPUs
  (GPU jobs only), then the config defaults in the order DefMemPerGPU (GPU jobs),
  DefMemPerCPU, DefMemPerNode; nothing configured → all memory of the node.
* GPUs: ``gpus_per_task`` × tasks, or ``gpus_per_node`` on every node, or ``gpus_total``
  spread over the nodes (≥ 1 each; nodes with the most free GPUs are filled first).
  ``gpu_type`` must equal the node's type. Indices: the lowest free ones.
* ``cpus_per_gpu`` (``--cpus-per-gpu``/DefCpuPerGPU): a node's CPUs are
  ``max(tasks × cpus_per_task, GPUs on it × cpus_per_gpu)`` (Slurm's cons_tres rule: the two
  requests overlap, they do not add up).
* ``exclusive``: only idle nodes; the job gets all their CPUs and GPUs, memory as requested.
* ``min_cpus`` (``--mincpus``, MinCPUsNode): a node serves the job only with at least that
  many free CPUs, and the job gets at least that many there (a node's CPUs are
  ``max(tasks × cpus_per_task, GPUs × cpus_per_gpu, min_cpus)``; memory per CPU scales with
  them). Allocating them keeps "needs that many free" true for the job's whole run, so the
  backfill timeline and the agent's cpuset see the same number.
* ``req_nodes`` are always part of the allocation; ``exc_nodes`` and unusable nodes never.
* ``constraint`` (``--constraint``, :mod:`muster.core.features`): each alternative is tried
  in order on the nodes satisfying its predicate; for each count ``(pred, k)`` the ``k`` best
  nodes satisfying ``pred`` (beyond ``-w`` nodes that already do) are made required, then the
  allocation is completed by the rules below.

Node choice (total order, documented rule):

* preference key ``(weight, free GPUs, free CPUs, free memory, index)`` ascending: the
  lowest weight, then the node with the *least* free resources that still fits (best fit:
  big holes stay open for big jobs; GPU-free nodes are used first by CPU-only jobs);
* a request with a fixed per-node shape takes the ``k`` best nodes by that key;
* a packing request (``-n`` or ``--gpus``) that fits one node takes the best single node;
  otherwise it takes nodes by largest capacity first (fewest nodes), and the last node is
  swapped for the best-fit node that covers the remainder.

* ``contiguous`` (``--contiguous``, :func:`_choose_contiguous`): the nodes form a *window*
  of consecutive node indices (slurm.conf order) that all fit; a node that is missing (not
  in the partition, down, excluded, too full) breaks the window. The window with the fewest
  nodes that holds the job wins, then best fit: the least free resources summed over the
  window (weight, GPUs, CPUs, memory, as ``node_key``), then the lowest first index. A
  one-node window is the best-fit single node, so a contiguous job that fits one node is
  placed as any other job.

Cost: one pass over ``nodes`` plus ``O(c log c)`` over the candidates that fit; never
quadratic.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence, Set
from dataclasses import dataclass, replace
from typing import Any

from .features import Alternative, satisfies
from .snapshot import JobView, NodeAlloc, NodeView, SchedConfig

__all__ = [
    "Allocation",
    "NEVER_BAD_CONFIG",
    "NEVER_NODE_COUNT",
    "NEVER_REQ_NODES",
    "NodeAlloc",
    "Request",
    "empty_view",
    "first_fit",
    "fits_ever",
    "node_key",
    "place",
    "request_of",
]

NEVER_NODE_COUNT = "node_count"  # more nodes than the set has (after -x)
NEVER_REQ_NODES = "req_nodes"  # a -w node is not in the set, or is also excluded
NEVER_BAD_CONFIG = "bad_node_config"  # no combination of empty nodes can hold it


@dataclass(frozen=True, slots=True)
class Allocation:
    job_id: int
    nodes: tuple[NodeAlloc, ...]

    @property
    def cpus(self) -> int:
        return sum(n.cpus for n in self.nodes)

    @property
    def gpus(self) -> int:
        return sum(len(n.gpus) for n in self.nodes)

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n.node for n in self.nodes)


@dataclass(frozen=True, slots=True)
class Request:
    """A job's request reduced to what placement needs (see :func:`request_of`).

    ``tasks_mode``: ``"one"`` (1 task per node), ``"fixed"`` (``tpn`` per node) or
    ``"pack"`` (``ntasks`` total, ``tpn`` = per-node maximum or None).
    ``gpu_mode``: None, ``"node"``, ``"task"`` or ``"total"``; ``gpus`` is the count for it.
    ``mem_mode``: ``"all"``, ``"node"``, ``"cpu"`` or ``"gpu"`` with ``mem`` as the amount.
    ``cpg``: CPUs per GPU for ``"node"``/``"total"`` GPU modes (with ``"task"`` it is folded
    into ``cpt``: each task needs ``max(cpt, gpus × cpg)`` CPUs), 0 = none.
    ``min_cpus``: CPUs each node must have free and gives the job (``--mincpus``), 0 = none;
    ``contig``: the nodes must be consecutive (``--contiguous``); ``grow``: the job gave a
    node range, so it takes as many nodes as fit, up to ``hi`` (module doc); planners that
    must not over-reserve turn it off (``replace(rq, grow=False)``).
    """

    cpt: int
    lo: int
    hi: int | None
    tasks_mode: str
    tpn: int | None
    ntasks: int
    gpu_mode: str | None
    gpus: int
    gpu_type: str | None
    mem_mode: str
    mem: int
    exclusive: bool
    cpg: int = 0
    min_cpus: int = 0
    contig: bool = False
    min_tmp: int = 0  # --tmp: a node serves only with TmpDisk >= this (not consumed)
    grow: bool = False  # a node range (hi > lo): take up to ``hi`` nodes where they fit

    def node_cpus(self, tasks: int, gpus: int) -> int:
        """CPUs a node with ``tasks`` tasks and ``gpus`` GPUs of this request gets."""
        return max(1, tasks * self.cpt, gpus * self.cpg, self.min_cpus)


def _set(v: int | None) -> int | None:
    return v if v is not None and v > 0 else None


# job_id → (job, cfg, request): the last normalisation of that very JobView under that very
# config. A hit needs both objects to be the same (``is``), and the memo holds them, so an
# id cannot be reused while its entry lives: a pure function's cache, it changes no answer.
# Shells that keep a job's JobView across cycles (the simulator; the controller for jobs
# that did not change) skip re-normalising every pending job on every pass.
_MEMO: dict[int, tuple[JobView, SchedConfig, Request]] = {}
_MEMO_MAX = 100_000


def request_of(job: JobView, cfg: SchedConfig) -> Request:
    """Normalise ``job`` under ``cfg`` (defaults for memory, task counts, GPU mode)."""
    got = _MEMO.get(job.job_id)
    if got is not None and got[0] is job and got[1] is cfg:
        return got[2]
    rq = _normalise(job, cfg)
    if len(_MEMO) >= _MEMO_MAX:
        _MEMO.clear()
    _MEMO[job.job_id] = (job, cfg, rq)
    return rq


def request_key(job: JobView) -> tuple[Any, ...]:
    """Every field of ``job`` that :func:`request_of` reads: equal keys, equal requests
    under the same config (tests/unit/test_core_placement.py perturbs every other field)."""
    return (job.cpus_per_task, job.nodes_min, job.nodes_max, job.ntasks_per_node, job.ntasks,
            job.gpus_per_task, job.gpus_per_node, job.gpus_total, job.mem_per_node,
            job.mem_per_cpu, job.mem_per_gpu, job.gpu_type, job.exclusive, job.cpus_per_gpu,
            job.min_cpus, job.contiguous, job.min_tmp, job.use_min_nodes)


def _normalise(job: JobView, cfg: SchedConfig) -> Request:
    cpt = max(1, job.cpus_per_task)
    lo = max(1, job.nodes_min)
    hi = job.nodes_max
    tpn = _set(job.ntasks_per_node)
    if job.ntasks > 0:
        tasks_mode, ntasks = "pack", max(job.ntasks, lo)
    elif tpn is not None:
        tasks_mode, ntasks = "fixed", lo * tpn
    else:
        tasks_mode, ntasks = "one", lo
    gpu_mode: str | None
    if (g := _set(job.gpus_per_task)) is not None:
        gpu_mode, gpus = "task", g
    elif job.gpus_per_node > 0:
        gpu_mode, gpus = "node", job.gpus_per_node
    elif (g := _set(job.gpus_total)) is not None:
        gpu_mode, gpus = "total", g
    else:
        gpu_mode, gpus = None, 0
    wants_gpus = gpu_mode is not None
    cpg = _set(job.cpus_per_gpu) if wants_gpus else None
    if cpg and gpu_mode == "task":
        cpt, cpg = max(cpt, gpus * cpg), None
    if job.mem_per_node is not None and job.mem_per_node >= 0:
        mem_mode, mem = ("all", 0) if job.mem_per_node == 0 else ("node", job.mem_per_node)
    elif (m := _set(job.mem_per_cpu)) is not None:
        mem_mode, mem = "cpu", m
    elif wants_gpus and (m := _set(job.mem_per_gpu)) is not None:
        mem_mode, mem = "gpu", m
    elif wants_gpus and (m := _set(cfg.def_mem_per_gpu)) is not None:
        mem_mode, mem = "gpu", m
    elif (m := _set(cfg.def_mem_per_cpu)) is not None:
        mem_mode, mem = "cpu", m
    elif (m := _set(cfg.def_mem_per_node)) is not None:
        mem_mode, mem = "node", m
    else:
        mem_mode, mem = "all", 0
    return Request(
        cpt=cpt, lo=lo, hi=hi, tasks_mode=tasks_mode, tpn=tpn, ntasks=ntasks,
        gpu_mode=gpu_mode, gpus=gpus or 0, gpu_type=job.gpu_type if wants_gpus else None,
        mem_mode=mem_mode, mem=mem, exclusive=job.exclusive, cpg=cpg or 0,
        min_cpus=max(0, job.min_cpus), contig=job.contiguous, min_tmp=max(0, job.min_tmp),
        grow=hi is not None and hi > lo and not job.use_min_nodes,
    )


def fixed_tpn(rq: Request) -> int:
    """Tasks per node of a ``"fixed"`` request (which always sets ``tpn``)."""
    return rq.tpn if rq.tpn is not None else 1


# a node that can host the request: (node_key, its view, max tasks, max GPUs for --gpus)
Candidate = tuple[tuple[int, int, int, int, int], NodeView, int, int]


def node_key(n: NodeView) -> tuple[int, int, int, int, int]:
    """Best-fit preference key: smaller is chosen first (unique per node via index)."""
    return (n.weight, len(n.gpus_free), n.cpus_free, n.mem_free, n.index)


def _capacity(rq: Request, n: NodeView) -> tuple[int, int] | None:
    """(max tasks, max GPUs for --gpus) node ``n`` can host now, or None if not even one unit."""
    if rq.exclusive:
        if not n.idle:
            return None
        cpu_avail, gpu_avail = n.cpus, n.gpus
    else:
        cpu_avail, gpu_avail = n.cpus_free, len(n.gpus_free)
    if rq.min_cpus > cpu_avail or rq.min_tmp > n.tmp_disk:
        return None
    tcap = cpu_avail // rq.cpt
    if rq.tasks_mode == "one":
        need = 1
    elif rq.tasks_mode == "fixed":
        need = fixed_tpn(rq)
    else:
        need = 1
        if rq.tpn is not None:
            tcap = min(tcap, rq.tpn)
    gcap = 0
    gm = rq.gpu_mode
    if gm == "node":
        if rq.gpus > gpu_avail or rq.gpus * rq.cpg > cpu_avail:
            return None
    elif gm == "task":
        tcap = min(tcap, gpu_avail // rq.gpus)
    elif gm == "total":
        gcap = min(gpu_avail, cpu_avail // rq.cpg) if rq.cpg else gpu_avail
    mm, mem_free = rq.mem_mode, n.mem_free
    if mm == "all":
        if mem_free < n.mem:
            return None
    elif mm == "node":
        if rq.mem > mem_free:
            return None
    elif mm == "cpu":
        if rq.exclusive:
            if rq.mem * n.cpus > mem_free:
                return None
        else:
            tcap = min(tcap, mem_free // (rq.mem * rq.cpt))
            if rq.cpg and gm == "node" and rq.mem * rq.gpus * rq.cpg > mem_free:
                return None
            if rq.mem * rq.min_cpus > mem_free:
                return None
            if rq.cpg and gm == "total":
                gcap = min(gcap, mem_free // (rq.mem * rq.cpg))
    elif rq.exclusive:  # "gpu": an exclusive job holds every GPU of the node
        if rq.mem * n.gpus > mem_free:
            return None
    elif gm == "node":
        if rq.mem * rq.gpus > mem_free:
            return None
    elif gm == "task":
        tcap = min(tcap, mem_free // (rq.mem * rq.gpus))
    else:
        gcap = min(gcap, mem_free // rq.mem)
    if tcap < need or (gm == "total" and gcap < 1):
        return None
    return tcap, gcap


def _spread(total: int, caps: list[int]) -> list[int] | None:
    """Give each slot 1, then fill slots in order up to their cap; None if impossible."""
    k = len(caps)
    if total < k:
        return None
    out = [1] * k
    rem = total - k
    for i, c in enumerate(caps):
        if rem == 0:
            break
        add = min(c - 1, rem)
        out[i] += add
        rem -= add
    return None if rem else out


def place(job: JobView, nodes: Sequence[NodeView], cfg: SchedConfig) -> Allocation | None:
    """Place ``job`` on the free resources of ``nodes`` now, or None if it does not fit."""
    return place_request(job, request_of(job, cfg), nodes)


def place_request(job: JobView, rq: Request, nodes: Sequence[NodeView]) -> Allocation | None:
    """:func:`place` with the request already normalised (lets callers reuse it)."""
    if job.constraint is None:
        return _place_alt(job, rq, nodes, None)
    for alt in job.constraint.alternatives:  # a matching OR: the first that fits
        got = _place_alt(job, rq, nodes, alt)
        if got is not None:
            return got
    return None


def _place_alt(job: JobView, rq: Request, nodes: Sequence[NodeView],
               alt: Alternative | None) -> Allocation | None:
    """Placement on the nodes satisfying one alternative of the constraint (None: all)."""
    exc, req = job.exc_nodes, job.req_nodes
    gtype = rq.gpu_type
    pred = alt.pred if alt is not None else None
    required: list[Candidate] = []
    others: list[Candidate] = []
    for n in nodes:
        if not n.usable or (exc and n.name in exc):
            continue
        if pred is not None and not satisfies(pred, n.features):
            continue
        if gtype is not None and n.gpu_type != gtype:
            continue
        cap = _capacity(rq, n)
        if cap is None:
            continue
        entry = (node_key(n), n, cap[0], cap[1])
        if req and n.name in req:
            required.append(entry)
        else:
            others.append(entry)
    if len(required) < len(req):
        return None
    pack = rq.tasks_mode == "pack" or rq.gpu_mode == "total"
    if alt is not None and alt.counts:
        if not _take_counted(alt, required, others, pack):
            return None
    required.sort(key=lambda e: e[0])
    if rq.contig:
        chosen = _choose_contiguous(rq, required, others)
    elif not pack:
        chosen = _choose_fixed(rq, required, others)
    else:
        chosen = _choose_pack(rq, required, others)
    if chosen is None:
        return None
    return _build(job, rq, chosen)


def _take_counted(alt: Alternative, required: list[Candidate], others: list[Candidate],
                  pack: bool) -> bool:
    """Move into ``required`` the nodes each count ``(pred, k)`` still needs: the best ones
    satisfying ``pred`` (best fit for per-node shapes, the largest for packing requests).
    Counts take disjoint nodes; ``-w`` nodes satisfying a pred count for it. False when some
    count cannot be met."""
    used: set[int] = set()
    for pred, k in alt.counts:
        have = [e for e in required if e[1].index not in used and satisfies(pred, e[1].features)]
        for e in have[:k]:
            used.add(e[1].index)
        need = k - min(k, len(have))
        if not need:
            continue
        cands = [e for e in others if satisfies(pred, e[1].features)]
        if len(cands) < need:
            return False
        if pack:
            picked = sorted(cands, key=lambda e: (-e[2], -e[3], e[0]))[:need]
        else:
            picked = heapq.nsmallest(need, cands, key=lambda e: e[0])
        taken = {e[1].index for e in picked}
        used |= taken
        required.extend(picked)
        others[:] = [e for e in others if e[1].index not in taken]
    return True


def _choose_fixed(rq: Request, required: list[Candidate], others: list[Candidate]
                  ) -> list[Candidate] | None:
    """A per-node shape: the ``-w`` nodes, then the best-fit others up to ``nodes_min``
    nodes; a node range (``grow``) takes every fitting node up to ``nodes_max``."""
    k = max(rq.lo, len(required))
    if rq.hi is not None and k > rq.hi:
        return None
    if rq.grow and rq.hi is not None:
        k = max(k, min(rq.hi, len(required) + len(others)))
    extra = k - len(required)
    if extra > len(others):
        return None
    return required + heapq.nsmallest(extra, others, key=lambda e: e[0])


def _choose_pack(rq: Request, required: list[Candidate], others: list[Candidate]
                 ) -> list[Candidate] | None:
    """A packing request: the fewest nodes that hold it (:func:`_pack_fewest`); a node range
    (``grow``) then adds the best-fit others up to ``nodes_max``, one node per task (per GPU
    for ``--gpus``) at most, so every node still gets one."""
    chosen = _pack_fewest(rq, required, others)
    if chosen is None or not rq.grow or rq.hi is None:
        return chosen
    cap = rq.hi
    if rq.tasks_mode == "pack":
        cap = min(cap, rq.ntasks)
    if rq.gpu_mode == "total":
        cap = min(cap, rq.gpus)
    extra = cap - len(chosen)
    if extra <= 0:
        return chosen
    have = {e[1].index for e in chosen}
    rest = [e for e in others if e[1].index not in have]
    return chosen + heapq.nsmallest(extra, rest, key=lambda e: e[0])


def _pack_fewest(rq: Request, required: list[Candidate], others: list[Candidate]
                 ) -> list[Candidate] | None:
    pack_t = rq.tasks_mode == "pack"
    pack_g = rq.gpu_mode == "total"
    need_t = rq.ntasks if pack_t else 0
    need_g = rq.gpus if pack_g else 0

    def covers(t: int, g: int) -> bool:
        return t >= need_t and g >= need_g

    if not required and rq.lo <= 1:
        fits = [e for e in others if covers(e[2], e[3])]
        if fits:
            return [min(fits, key=lambda e: e[0])]
    chosen = list(required)
    st = sum(e[2] for e in chosen)
    sg = sum(e[3] for e in chosen)
    if pack_t:
        order = sorted(others, key=lambda e: (-e[2], -e[3], e[0]))
    else:
        order = sorted(others, key=lambda e: (-e[3], -e[2], e[0]))
    i = 0
    while not covers(st, sg) and i < len(order):
        e = order[i]
        chosen.append(e)
        st += e[2]
        sg += e[3]
        i += 1
    if not covers(st, sg):
        return None
    if len(chosen) < rq.lo:
        rest = order[i:]
        extra = rq.lo - len(chosen)
        if extra > len(rest):
            return None
        chosen += heapq.nsmallest(extra, rest, key=lambda e: e[0])
    elif i > 0:
        # Swap the last greedy pick for the best-fit node covering the remainder.
        last = order[i - 1]
        rt, rg = need_t - (st - last[2]), need_g - (sg - last[3])
        swap = [e for e in order[i - 1:] if e[2] >= rt and e[3] >= rg]
        chosen[-1] = min(swap, key=lambda e: e[0])
    k = len(chosen)
    if (rq.hi is not None and k > rq.hi) or (pack_t and k > need_t) or (pack_g and k > need_g):
        return None
    return chosen


def _window_bounds(rq: Request, n_required: int) -> tuple[int, int | None, int, int] | None:
    """(fewest nodes, most nodes or None, tasks to cover, GPUs to cover) of a contiguous
    window: a per-node shape takes exactly ``max(nodes_min, -w nodes)``; a packing request
    at least ``nodes_min`` and at most one node per task (per GPU for ``--gpus``)."""
    pack_t = rq.tasks_mode == "pack"
    pack_g = rq.gpu_mode == "total"
    if not (pack_t or pack_g):
        k = max(rq.lo, n_required)
        return None if rq.hi is not None and k > rq.hi else (k, k, 0, 0)
    caps = [c for c in (rq.hi, rq.ntasks if pack_t else None, rq.gpus if pack_g else None)
            if c is not None]
    lo = max(rq.lo, n_required, 1)
    hi = min(caps) if caps else None
    if hi is not None and lo > hi:
        return None
    return lo, hi, rq.ntasks if pack_t else 0, rq.gpus if pack_g else 0


def _prefix(values: Iterable[int]) -> list[int]:
    out = [0]
    for v in values:
        out.append(out[-1] + v)
    return out


def _choose_contiguous(rq: Request, required: list[Candidate], others: list[Candidate]
                       ) -> list[Candidate] | None:
    """The nodes of a contiguous request (see the module doc): the shortest window of
    consecutive node indices, all fitting, that holds every ``-w`` node and covers the tasks
    and GPUs; among windows of that length, the least free resources (summed ``node_key``),
    then the lowest first index. Entries are ``(node_key, node, tasks, GPUs)`` as in
    :func:`_place_alt`; None when no window holds the job.

    Cost: sort, prefix sums, one bisection per start: ``O(c log c)``."""
    bounds = _window_bounds(rq, len(required))
    if bounds is None:
        return None
    lo, hi, need_t, need_g = bounds
    ents = sorted(required + others, key=lambda e: e[1].index)
    n = len(ents)
    run_end = [n] * n  # run_end[i]: end (exclusive) of the run of consecutive indices at i
    for i in range(n - 2, -1, -1):
        if ents[i + 1][1].index == ents[i][1].index + 1:
            run_end[i] = run_end[i + 1]
        else:
            run_end[i] = i + 1
    req_idx = {e[1].index for e in required}
    req_pos = [i for i, e in enumerate(ents) if e[1].index in req_idx]
    first_req = req_pos[0] if req_pos else n
    min_end = req_pos[-1] + 1 if req_pos else 0
    tsum = _prefix(e[2] for e in ents)
    gsum = _prefix(e[3] for e in ents)
    best_len = None
    for a in range(min(first_req + 1, n)):
        end = max(a + lo, min_end, bisect_left(tsum, tsum[a] + need_t),
                  bisect_left(gsum, gsum[a] + need_g))
        size = end - a
        if end <= run_end[a] and (hi is None or size <= hi) and (
                best_len is None or size < best_len):
            best_len = size
    if best_len is None:
        return None
    sums = [_prefix(e[0][f] for e in ents) for f in range(4)]
    best = None
    for a in range(min(first_req + 1, n - best_len + 1)):
        b = a + best_len
        if b > run_end[a] or b < min_end or tsum[b] - tsum[a] < need_t \
                or gsum[b] - gsum[a] < need_g:
            continue
        key = (*(s[b] - s[a] for s in sums), ents[a][1].index)
        if best is None or key < best[0]:
            best = (key, a)
    if best is None:
        return None
    return ents[best[1]:best[1] + best_len]


def _balance(total: int, caps: list[int]) -> list[int] | None:
    """Tasks over a node count the user fixed (``-N k -n t``): balanced as Slurm lays them
    out (⌈t/k⌉ on the first t mod k nodes, ⌊t/k⌋ on the rest: ``2(x3),1`` for 7 on 4), each
    capped at the node's room with the overflow moved, in order, to nodes with room left."""
    k = len(caps)
    if total < k or total > sum(caps):
        return None
    base, rem = divmod(total, k)
    out = [base + (1 if i < rem else 0) for i in range(k)]
    excess = 0
    for i in range(k):
        if out[i] > caps[i]:
            excess += out[i] - caps[i]
            out[i] = caps[i]
    for i in range(k):
        if not excess:
            break
        take = min(caps[i] - out[i], excess)
        out[i] += take
        excess -= take
    return out


def _build(job: JobView, rq: Request, chosen: list[Candidate]) -> Allocation | None:
    if rq.tasks_mode == "pack":
        caps = [e[2] for e in chosen]
        if rq.grow or (job.nodes_min > 1 and len(chosen) == job.nodes_min):
            tasks = _balance(rq.ntasks, caps)
        else:
            tasks = _spread(rq.ntasks, caps)
        if tasks is None:
            return None
    else:
        per = 1 if rq.tasks_mode == "one" else fixed_tpn(rq)
        tasks = [per] * len(chosen)
    if rq.gpu_mode == "total":
        by_gpus = sorted(range(len(chosen)), key=lambda i: (-chosen[i][3], chosen[i][0]))
        share = _spread(rq.gpus, [chosen[i][3] for i in by_gpus])
        if share is None:
            return None
        ngpus = [0] * len(chosen)
        for i, s in zip(by_gpus, share):
            ngpus[i] = s
    elif rq.gpu_mode == "node":
        ngpus = [rq.gpus] * len(chosen)
    elif rq.gpu_mode == "task":
        ngpus = [rq.gpus * t for t in tasks]
    else:
        ngpus = [0] * len(chosen)
    out = []
    for (_, n, _, _), t, g in zip(chosen, tasks, ngpus):
        if rq.exclusive:
            cpus, gids = n.cpus, n.gpus_free  # idle: every GPU is free
        else:
            cpus, gids = rq.node_cpus(t, g), n.gpus_free[:g]
        mm = rq.mem_mode
        if mm == "all":
            mem = n.mem
        elif mm == "node":
            mem = rq.mem
        elif mm == "cpu":
            mem = rq.mem * cpus
        else:
            mem = rq.mem * len(gids)
        out.append((n.index, NodeAlloc(node=n.name, cpus=cpus, mem=mem, gpus=gids, tasks=t)))
    out.sort(key=lambda p: p[0])
    return Allocation(job_id=job.job_id, nodes=tuple(a for _, a in out))


def first_fit(
    job: JobView,
    rq: Request,
    keys: Sequence[tuple[int, int, int, int, int]],
    lookup: Callable[[int], NodeView],
    skip: Set[str],
) -> Allocation | None:
    """:func:`place_request` through a sorted key index, for the common shapes.

    ``keys`` are the :func:`node_key` of the candidate nodes, ascending; ``lookup`` maps a
    node index to its view; nodes named in ``skip`` are not used. Valid only for a job
    without ``-w`` whose constraint, if any, is a plain node filter (``Constraint.simple``).
    A fixed-shape request (no ``-n``, no ``--gpus``) gets exactly what ``place_request``
    returns: the first ``nodes_min`` nodes in key order that fit (with a node range, the
    first ``nodes_max``, or all of them if fewer but at least ``nodes_min`` fit). A
    packing request (only with ``nodes_min <= 1``) gets the answer when one node holds it
    all; None then means "no single node": the caller must try :func:`place_request`
    (always None for a packing request with a node range: it may want more nodes).

    Lower bounds on free GPUs, CPUs and memory let the scan jump over whole groups of
    keys with bisection, so a typical search costs O(groups · log nodes), not O(nodes).
    A contiguous fixed-shape request of more than one node is not a key-order question: it
    gets :func:`place_request` over the same nodes (one O(nodes) pass).
    """
    pack_t = rq.tasks_mode == "pack"
    need = rq.ntasks if pack_t else (1 if rq.tasks_mode == "one" else fixed_tpn(rq))
    need_g = rq.gpus if rq.gpu_mode == "total" else 0
    gm = rq.gpu_mode
    g_min = rq.gpus * need if gm == "task" else rq.gpus if gm else 0
    c_min = max(need * rq.cpt, g_min * rq.cpg, rq.min_cpus)
    mm = rq.mem_mode
    m_min = (rq.mem if mm == "node" else rq.mem * c_min if mm == "cpu"
             else rq.mem * g_min if mm == "gpu" else 0)
    exc, gtype = job.exc_nodes, rq.gpu_type
    pred = job.constraint.alternatives[0].pred if job.constraint is not None else None
    fixed = rq.tasks_mode != "pack" and rq.gpu_mode != "total"
    want = rq.lo if fixed else 1
    if rq.hi is not None and want > rq.hi:
        return None
    if rq.grow and rq.hi is not None:
        if not fixed:
            return None
        want = rq.hi
    if rq.contig and want > 1:
        return place_request(job, rq, [n for k in keys if (n := lookup(k[4])).name not in skip])
    found: list[Candidate] = []
    i, end = 0, len(keys)
    while i < end:
        w, g, c, m, idx = keys[i]
        if g < g_min:
            i = bisect_left(keys, (w, g_min, c_min, m_min), i)
            continue
        if c < c_min:
            i = bisect_left(keys, (w, g, c_min, m_min), i)
            continue
        if m < m_min:
            i = bisect_left(keys, (w, g, c, m_min), i)
            continue
        i += 1
        n = lookup(idx)
        if (not n.usable or n.name in skip or n.name in exc
                or (gtype is not None and n.gpu_type != gtype)
                or (pred is not None and not satisfies(pred, n.features))):
            continue
        cap = _capacity(rq, n)
        if cap is None or (pack_t and cap[0] < need) or cap[1] < need_g:
            continue
        found.append((keys[i - 1], n, cap[0], cap[1]))
        if len(found) == want:
            return _build(job, rq, found)
    if rq.grow and len(found) >= rq.lo:
        return _build(job, rq, found)
    return None


def empty_view(n: NodeView) -> NodeView:
    """``n`` with nothing allocated and usable (for "could it ever fit" questions)."""
    return replace(n, cpus_free=n.cpus, mem_free=n.mem, gpus_free=tuple(range(n.gpus)), usable=True)


def fits_ever(
    job: JobView, nodes: Sequence[NodeView], cfg: SchedConfig, *, already_empty: bool = False
) -> str | None:
    """None if ``job`` fits on ``nodes`` when they are all empty and up; else why not.

    Ignores time and partition limits; honours ``-w``/``-x``, node counts and shapes.
    ``already_empty`` says the caller passes :func:`empty_view` nodes (saves the copies).
    """
    if job.req_nodes:
        names = {n.name for n in nodes}
        if not job.req_nodes <= names or job.req_nodes & job.exc_nodes:
            return NEVER_REQ_NODES
    exc = job.exc_nodes
    if already_empty:
        avail = [n for n in nodes if n.name not in exc] if exc else list(nodes)
    else:
        avail = [empty_view(n) for n in nodes if n.name not in exc]
    if max(1, job.nodes_min, len(job.req_nodes)) > len(avail):
        return NEVER_NODE_COUNT
    if place(job, avail, cfg) is None:
        return NEVER_BAD_CONFIG
    return None
