"""Preemption: pick running victims so a higher-priority pending job can start.

Contract:

* ``PreemptType``: ``preempt/qos`` — job A may preempt running B when B's QOS is in A's
  QOS ``preempt`` list; ``preempt/partition_prio`` — when B's partition PriorityTier is
  lower than A's. ``preempt/none`` — nothing.
* Mode of a victim: its QOS ``preempt_mode`` (qos) or its partition's (partition_prio),
  else ``SchedConfig.preempt_mode``; ``OFF`` = not preemptable; ``REQUEUE`` on a job
  that cannot be requeued becomes ``CANCEL``. Grace time: the victim's QOS or partition
  ``grace_time``. A victim younger than PreemptExemptTime (QOS, else global) is spared.
* For each pending preemptor still waiting (in queue order): candidates on the
  preemptor's partition nodes, youngest first (start time descending, then lower
  priority, then job id descending); add them one by one until the job fits on the free
  resources plus the victims', then drop every victim (oldest chosen first) that is not
  needed — few and young victims. The preemptor does not start in this Plan (its victims
  must end first); its expected start is now + the longest grace time; the resources are
  promised to it for the rest of the cycle. A victim is chosen at most once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .placement import Allocation, Request
from .placement import place_request as _place
from .snapshot import (JobView, NodeView, PartitionView, QosView, RunningView, SchedConfig,
                       Snapshot)
from .timeline import mask_gpus
from .topology import Grouping, build, place_on

__all__ = ["Preemption", "can_preempt", "choose_victims", "preemptor_flag"]


@dataclass(frozen=True, slots=True)
class Preemption:
    victim: int
    preemptor: int
    mode: str  # "REQUEUE" | "CANCEL"
    grace: int  # seconds


def preemptor_flag(job: JobView, cfg: SchedConfig, qos: dict[str, QosView]) -> bool:
    if cfg.preempt_type == "preempt/qos":
        q = qos.get(job.qos)
        return q is not None and bool(q.preempt)
    return False


def _mode(r: RunningView, cfg: SchedConfig, qos: dict[str, QosView],
          parts: dict[str, PartitionView]) -> tuple[str, int]:
    q = qos.get(r.qos)
    p = parts.get(r.partition)
    mode = None
    if cfg.preempt_type == "preempt/qos" and q is not None:
        mode = q.preempt_mode
    elif cfg.preempt_type == "preempt/partition_prio" and p is not None:
        mode = p.preempt_mode
    mode = (mode or cfg.preempt_mode).upper()
    if mode == "REQUEUE" and not r.requeue:
        mode = "CANCEL"
    grace = (q.grace_time if q is not None and q.grace_time else 0) or (p.grace_time if p else 0)
    return mode, grace


def can_preempt(job: JobView, part: PartitionView, r: RunningView, now: int,
                cfg: SchedConfig, qos: dict[str, QosView],
                parts: dict[str, PartitionView]) -> bool:
    if cfg.preempt_type == "preempt/qos":
        q = qos.get(job.qos)
        if q is None or r.qos not in q.preempt:
            return False
    elif cfg.preempt_type == "preempt/partition_prio":
        vp = parts.get(r.partition)
        if vp is None or vp.priority_tier >= part.priority_tier:
            return False
    else:
        return False
    mode, _ = _mode(r, cfg, qos, parts)
    if mode not in ("REQUEUE", "CANCEL"):
        return False
    vq = qos.get(r.qos)
    exempt = vq.preempt_exempt_time if vq is not None and vq.preempt_exempt_time is not None \
        else cfg.preempt_exempt_time
    return now - r.start_time >= exempt


def _views(free: dict[str, tuple[int, int, int]], nodes: Sequence[NodeView],
           freed: dict[str, list[int]]) -> list[NodeView]:
    out = []
    for n in nodes:
        c, m, g = free[n.name]
        add = freed.get(n.name)
        if add is not None:
            c, m, g = c + add[0], m + add[1], g | add[2]
        if c <= 0:
            continue
        out.append(NodeView(name=n.name, index=n.index, partitions=n.partitions, cpus=n.cpus,
                            cpus_free=c, mem=n.mem, mem_free=m, gpus=n.gpus,
                            gpus_free=mask_gpus(g), gpu_type=n.gpu_type, usable=n.usable,
                            weight=n.weight, features=n.features))
    return out


def choose_victims(
    job: JobView,
    rq: Request,
    nodes: Sequence[NodeView],
    free: dict[str, tuple[int, int, int]],
    candidates: Sequence[RunningView],
    topo: Grouping | None = None,
) -> tuple[list[RunningView], Allocation] | None:
    """Fewest, youngest victims among ``candidates`` so ``job`` fits on ``nodes``.

    ``free`` maps a node to (free CPUs, free memory, free GPU mask) now. With a topology
    (``topo``, over node positions = ``NodeView.index``) the job must fit on the fewest
    leaves/blocks, as the scheduler would place it (``--switches`` is not relaxed here:
    preempting for a spread placement would be wasted).
    """
    pos = {n.name: n.index for n in nodes}

    def place_request(job: JobView, rq: Request, views: list[NodeView]) -> Allocation | None:
        if topo is None or max(rq.lo, len(job.req_nodes)) <= 1 and rq.tasks_mode != "pack":
            return _place(job, rq, views)
        return place_on(topo, views, pos, lambda vs: _place(job, rq, vs), job.switches)

    names = {n.name for n in nodes}
    cands = [r for r in candidates if any(a.node in names for a in r.nodes)]
    cands.sort(key=lambda r: (-r.start_time, r.priority, -r.job_id))

    def freed_by(vs: list[RunningView]) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for r in vs:
            for a in r.nodes:
                acc = out.setdefault(a.node, [0, 0, 0])
                acc[0] += a.cpus
                acc[1] += a.mem
                for gid in a.gpus:
                    acc[2] |= 1 << gid
        return out

    chosen: list[RunningView] = []
    alloc = None
    for r in cands:
        chosen.append(r)
        alloc = place_request(job, rq, _views(free, nodes, freed_by(chosen)))
        if alloc is not None:
            break
    if alloc is None:
        return None
    for r in list(chosen):
        trial = [x for x in chosen if x is not r]
        got = place_request(job, rq, _views(free, nodes, freed_by(trial)))
        if got is not None:
            chosen, alloc = trial, got
    return chosen, alloc


def plan(snap: Snapshot, cfg: SchedConfig, waiting: list[tuple[JobView, str]],
         parts: dict[str, PartitionView],
         requests: dict[int, Request], taken_free: dict[str, tuple[int, int, int]]
         ) -> tuple[list[Preemption], dict[int, int]]:
    """Preemptions for ``waiting`` (job, partition) pairs in queue order."""
    if cfg.preempt_type not in ("preempt/qos", "preempt/partition_prio") or not snap.running:
        return [], {}
    qos = snap.qos_map()
    by_name = {n.name: n for n in snap.nodes}
    topo = build(snap.switches, snap.blocks, snap.block_sizes,
                 {n.name: n.index for n in snap.nodes})
    used: set[int] = set()
    out: list[Preemption] = []
    expected: dict[int, int] = {}
    free = dict(taken_free)
    now = snap.now
    for job, pname in waiting:
        part = parts[pname]
        cands = [r for r in snap.running if r.job_id not in used
                 and can_preempt(job, part, r, now, cfg, qos, parts)]
        if not cands:
            continue
        nodes = [by_name[nm] for nm in part.node_names if nm in by_name and by_name[nm].usable]
        got = choose_victims(job, requests[job.job_id], nodes, free, cands, topo)
        if got is None:
            continue
        victims, alloc = got
        grace = 0
        for r in victims:
            used.add(r.job_id)
            mode, g = _mode(r, cfg, qos, parts)
            grace = max(grace, g)
            out.append(Preemption(victim=r.job_id, preemptor=job.job_id, mode=mode, grace=g))
            for a in r.nodes:
                c, m, gm = free[a.node]
                mask = gm
                for gid in a.gpus:
                    mask |= 1 << gid
                free[a.node] = (c + a.cpus, m + a.mem, mask)
        for a in alloc.nodes:
            c, m, gm = free[a.node]
            mask = gm
            for gid in a.gpus:
                mask &= ~(1 << gid)
            free[a.node] = (c - a.cpus, m - a.mem, mask)
        expected[job.job_id] = now + grace
    return out, expected
