"""Job priorities: priority/multifactor (Slurm 23.11's default) and priority/basic.

**priority/basic** (Slurm's priority_basic.c): the n-th submitted job gets ``0xffff0000 − n``,
so jobs run in submission order, minus its nice::

    priority = 0xffff0000 − job_id − nice        clamped to [1, 2^32−1]

Slurm counts submissions since slurmctld started; Muster counts them with the job id, which
grows by one per submission and survives restarts (the first job of a fresh cluster, id 1,
gets 4294901759 as in Slurm). A positive nice lowers the priority, a negative one (operators
only) raises it.

**priority/multifactor**: job priority = weighted sum of factors in [0, 1].

Contract (scheduling.md §4)::

    priority = site + W_age·age + W_assoc·assoc + W_fairshare·fairshare
             + W_jobsize·jobsize + W_partition·partition + W_qos·qos
             + Σ_t W_tres[t]·tres[t] − nice        clamped to [1, 2^32−1], truncated

* age = min(1, (now − accrue) / PriorityMaxAge), accrue = ``eligible_time`` or
  ``submit_time``; 0 for a job the shell marks ``blocked`` (held, dependency, begin
  time) unless ``ACCRUE_ALWAYS``.
* fairshare = ``Snapshot.fairshare[(account, user)]`` (an input; see
  :mod:`muster.core.fairshare`), 0 when absent.
* jobsize: favour large (default) ``(nodes/N + cpus/C)/2``; ``PriorityFavorSmall``
  ``((N−nodes)/N + (C−cpus)/C)/2``; ``SMALL_RELATIVE_TO_TIME``
  ``max(nodes·C/N, cpus)/time_min/C``; N, C = nodes and CPUs of the cluster.
* partition = PriorityJobFactor / max over partitions (``NO_NORMAL_PART``: raw).
* qos = QOS Priority / max QOS priority (``NO_NORMAL_QOS``: raw).
* assoc = association Priority / max (``NO_NORMAL_ASSOC``: raw).
* tres[t] = requested t / total t in the job's partition (``NO_NORMAL_TRES``: raw).

:func:`multifactor` is a pure function of (job, now, config, :class:`Context`); it returns
the integer priority with the per-factor breakdown (``sprio``: normalized and weighted).
A ``fixed_priority`` job keeps its priority.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .placement import request_of
from .snapshot import JobView, SchedConfig, Snapshot

__all__ = ["BASIC_TOP", "Context", "FACTORS", "Priority", "basic", "context", "multifactor",
           "priorities", "priority_of", "static", "static_fn", "static_priority", "weights_zero"]

MAX_PRIORITY = 2**32 - 1
BASIC_TOP = 0xFFFF0000  # Slurm's TOP_PRIORITY: priority/basic counts down from here
FACTORS = ("age", "assoc", "fairshare", "jobsize", "partition", "qos")


@dataclass(frozen=True, slots=True)
class Priority:
    """One job's priority and its factors (``sprio``)."""

    job_id: int
    partition: str
    priority: int
    normalized: Mapping[str, float]
    weighted: Mapping[str, float]
    nice: int = 0
    site: int = 0


@dataclass(frozen=True, slots=True)
class Context:
    """Cluster-wide facts the factors are normalised with (built by :func:`context`)."""

    total_nodes: int
    total_cpus: int
    part_factor: Mapping[str, int]
    max_part_factor: int
    qos_prio: Mapping[str, int]
    max_qos_prio: int
    assoc_prio: Mapping[tuple[str, str | None], int]
    max_assoc_prio: int
    part_tres: Mapping[str, Mapping[str, int]]
    fairshare: Mapping[tuple[str, str], float]


def context(snap: Snapshot) -> Context:
    nodes = {n.name: n for n in snap.nodes}
    part_tres: dict[str, dict[str, int]] = {}
    for p in snap.partitions:
        tot = {"cpu": 0, "mem": 0, "node": 0, "gres/gpu": 0}
        for nm in set(p.node_names):
            n = nodes.get(nm)
            if n is not None:
                tot["cpu"] += n.cpus
                tot["mem"] += n.mem
                tot["node"] += 1
                tot["gres/gpu"] += n.gpus
        part_tres[p.name] = tot
    pf = {p.name: p.priority_job_factor for p in snap.partitions}
    qp = {q.name: q.priority for q in snap.qos}
    ap = {a.key: a.priority for a in snap.assocs}
    return Context(
        total_nodes=len(snap.nodes), total_cpus=sum(n.cpus for n in snap.nodes),
        part_factor=pf, max_part_factor=max(pf.values(), default=0),
        qos_prio=qp, max_qos_prio=max(qp.values(), default=0),
        assoc_prio=ap, max_assoc_prio=max(ap.values(), default=0),
        part_tres=part_tres, fairshare=snap.fairshare,
    )


def _norm(v: float, top: float, raw: bool) -> float:
    if raw:
        return float(v)
    return v / top if top > 0 else 0.0


def _job_size(job: JobView, cfg: SchedConfig) -> tuple[int, int, int]:
    rq = request_of(job, cfg)
    tasks = rq.ntasks if rq.tasks_mode != "one" else rq.lo
    cpus = max(1, tasks * rq.cpt)
    gpus = rq.gpus * (rq.lo if rq.gpu_mode == "node" else tasks if rq.gpu_mode == "task" else 1)
    return rq.lo, cpus, gpus


def multifactor(job: JobView, partition: str, now: int, cfg: SchedConfig, ctx: Context) -> Priority:
    flags = cfg.priority_flags
    no_all = "NO_NORMAL_ALL" in flags
    blocked = job.blocked is not None and "ACCRUE_ALWAYS" not in flags
    accrue = job.eligible_time if job.eligible_time is not None else job.submit_time
    if blocked or cfg.priority_max_age <= 0:
        age = 0.0 if blocked else 1.0
    else:
        age = min(1.0, max(0, now - accrue) / cfg.priority_max_age)
    nodes, cpus, gpus = _job_size(job, cfg)
    N, C = max(1, ctx.total_nodes), max(1, ctx.total_cpus)
    if "SMALL_RELATIVE_TO_TIME" in flags:
        minutes = job.time_limit or 1
        size = max(nodes * C / N, cpus) / minutes / C
    elif cfg.priority_favor_small:
        size = ((N - nodes) / N + (C - cpus) / C) / 2
    else:
        size = (nodes / N + cpus / C) / 2
    size = min(1.0, max(0.0, size))
    user_key = (job.account, job.user)
    fs = float(ctx.fairshare.get(user_key, 0.0))
    normalized = {
        "age": age,
        "assoc": _norm(ctx.assoc_prio.get(user_key, ctx.assoc_prio.get((job.account, None), 0)),
                       ctx.max_assoc_prio, no_all or "NO_NORMAL_ASSOC" in flags),
        "fairshare": fs,
        "jobsize": size,
        "partition": _norm(ctx.part_factor.get(partition, 0), ctx.max_part_factor,
                           no_all or "NO_NORMAL_PART" in flags),
        "qos": _norm(ctx.qos_prio.get(job.qos, 0), ctx.max_qos_prio,
                     no_all or "NO_NORMAL_QOS" in flags),
    }
    weights = {
        "age": cfg.weight_age, "assoc": cfg.weight_assoc, "fairshare": cfg.weight_fairshare,
        "jobsize": cfg.weight_jobsize, "partition": cfg.weight_partition, "qos": cfg.weight_qos,
    }
    weighted = {k: weights[k] * normalized[k] for k in FACTORS}
    if cfg.weight_tres:
        tot = ctx.part_tres.get(partition, {})
        req = {"cpu": cpus, "node": nodes, "gres/gpu": gpus}
        raw_t = no_all or "NO_NORMAL_TRES" in flags
        for t, w in cfg.weight_tres:
            f = _norm(req.get(t, 0), tot.get(t, 0), raw_t)
            normalized[f"tres/{t}"] = f
            weighted[f"tres/{t}"] = w * f
    total = cfg.site_factor + sum(weighted.values()) - job.nice
    prio = job.priority if job.fixed_priority else _clamp(total)
    return Priority(job_id=job.job_id, partition=partition, priority=prio,
                    normalized=normalized, weighted=weighted, nice=job.nice,
                    site=cfg.site_factor)


def _clamp(v: float) -> int:
    return int(min(MAX_PRIORITY, max(1, v)))


def basic(job: JobView) -> int:
    """priority/basic (module doc); an admin-set priority is kept."""
    if job.fixed_priority:
        return job.priority
    p = BASIC_TOP - job.job_id - job.nice
    return 1 if p < 1 else MAX_PRIORITY if p > MAX_PRIORITY else p


def weights_zero(cfg: SchedConfig) -> bool:
    """Multifactor with every weight 0: each job's priority is ``site − nice`` (at least 1),
    the same in every partition, computed without the factors."""
    return not (cfg.weight_age or cfg.weight_assoc or cfg.weight_fairshare or cfg.weight_jobsize
                or cfg.weight_partition or cfg.weight_qos or any(w for _, w in cfg.weight_tres))




def static(cfg: SchedConfig) -> bool:
    """True when a job's priority depends on the job alone (not on time, accounting or the
    partition): ``"none"``, ``"basic"``, or multifactor with every weight 0. Then
    :func:`static_priority` gives it, and jobs of equal nice run in submission order."""
    return cfg.priority_type != "multifactor" or weights_zero(cfg)


def static_fn(cfg: SchedConfig) -> Callable[[JobView], int]:
    """``f(job) → priority`` under a :func:`static` configuration (one call per job: the
    scheduler calls it for every queue entry)."""
    if cfg.priority_type == "basic":
        return basic
    if cfg.priority_type != "multifactor":
        return _given
    site = cfg.site_factor

    def flat(job: JobView) -> int:  # multifactor without weights: site - nice, at least 1
        if job.fixed_priority:
            return job.priority
        p = site - job.nice
        return 1 if p < 1 else MAX_PRIORITY if p > MAX_PRIORITY else p
    return flat


def _given(job: JobView) -> int:
    return job.priority


def static_priority(job: JobView, cfg: SchedConfig) -> int:
    """The priority of ``job`` under a :func:`static` configuration."""
    return static_fn(cfg)(job)


def priority_of(snap: Snapshot, cfg: SchedConfig) -> Callable[[JobView, str], int]:
    """``f(job, partition) → priority`` under ``cfg.priority_type``: ``"none"`` (as given),
    basic, multifactor with every weight 0 (a cheap per-job expression), or the full
    multifactor (computed for every pending job and partition up front)."""
    if static(cfg):
        f = static_fn(cfg)
        return lambda job, part: f(job)
    table = priorities(snap, cfg)
    return lambda job, part: table[(job.job_id, part)]


def priorities(snap: Snapshot, cfg: SchedConfig) -> dict[tuple[int, str], int]:
    """Multifactor priority per (job, partition) for every pending job (per-partition factor):
    :func:`multifactor`'s ``priority``, by :func:`valuer` (no factor breakdown)."""
    value = valuer(cfg, context(snap), snap.now)
    out: dict[tuple[int, str], int] = {}
    for job in snap.pending:
        parts = job.partitions
        if len(parts) == 1:
            out[(job.job_id, parts[0])] = value(job, parts[0])
        else:
            for p in dict.fromkeys(parts):
                out[(job.job_id, p)] = value(job, p)
    return out


def valuer(cfg: SchedConfig, ctx: Context, now: int) -> Callable[[JobView, str], int]:
    """``f(job, partition)`` = ``multifactor(job, partition, now, cfg, ctx).priority``,
    without the breakdown: what depends on the configuration alone is read once, no dict
    or record is built per job. The terms are the same products, summed by ``sum`` in the
    same order (age, assoc, fairshare, jobsize, partition, qos, then the TRES), so the
    result is the same float to the bit; tests/unit/test_core_modules.py compares the two
    over random jobs, flags and weights. A scheduling pass asks for every pending job
    (~4 µs each here, against ~11 µs for :func:`multifactor`)."""
    flags = cfg.priority_flags
    no_all = "NO_NORMAL_ALL" in flags
    accrue_always = "ACCRUE_ALWAYS" in flags
    max_age = cfg.priority_max_age
    small_rel = "SMALL_RELATIVE_TO_TIME" in flags
    favor_small = cfg.priority_favor_small
    N, C = max(1, ctx.total_nodes), max(1, ctx.total_cpus)
    raw_assoc = no_all or "NO_NORMAL_ASSOC" in flags
    raw_part = no_all or "NO_NORMAL_PART" in flags
    raw_qos = no_all or "NO_NORMAL_QOS" in flags
    raw_tres = no_all or "NO_NORMAL_TRES" in flags
    w_age, w_assoc, w_fs = cfg.weight_age, cfg.weight_assoc, cfg.weight_fairshare
    w_size, w_part, w_qos = cfg.weight_jobsize, cfg.weight_partition, cfg.weight_qos
    tres_w = tuple(dict(cfg.weight_tres).items())  # a name twice: multifactor's dict keeps the last
    site = cfg.site_factor
    assoc_prio, max_assoc = ctx.assoc_prio, ctx.max_assoc_prio
    part_factor, max_part = ctx.part_factor, ctx.max_part_factor
    qos_prio, max_qos = ctx.qos_prio, ctx.max_qos_prio
    fairshare, part_tres = ctx.fairshare, ctx.part_tres

    def value(job: JobView, partition: str) -> int:
        if job.fixed_priority:
            return job.priority
        blocked = job.blocked is not None and not accrue_always
        if blocked or max_age <= 0:
            age = 0.0 if blocked else 1.0
        else:
            accrue = job.eligible_time if job.eligible_time is not None else job.submit_time
            age = min(1.0, max(0, now - accrue) / max_age)
        nodes, cpus, gpus = _job_size(job, cfg)
        if small_rel:
            size = max(nodes * C / N, cpus) / (job.time_limit or 1) / C
        elif favor_small:
            size = ((N - nodes) / N + (C - cpus) / C) / 2
        else:
            size = (nodes / N + cpus / C) / 2
        size = min(1.0, max(0.0, size))
        user_key = (job.account, job.user)
        terms = [w_age * age,
                 w_assoc * _norm(assoc_prio.get(user_key, assoc_prio.get((job.account, None), 0)),
                                 max_assoc, raw_assoc),
                 w_fs * float(fairshare.get(user_key, 0.0)),
                 w_size * size,
                 w_part * _norm(part_factor.get(partition, 0), max_part, raw_part),
                 w_qos * _norm(qos_prio.get(job.qos, 0), max_qos, raw_qos)]
        if tres_w:
            tot = part_tres.get(partition, {})
            req = {"cpu": cpus, "node": nodes, "gres/gpu": gpus}
            terms.extend(w * _norm(req.get(t, 0), tot.get(t, 0), raw_tres) for t, w in tres_w)
        return _clamp(site + sum(terms) - job.nice)
    return value
