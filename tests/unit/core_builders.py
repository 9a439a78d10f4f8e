"""Builders for scheduling-core snapshots: short, explicit, defaults that fit."""

from __future__ import annotations

from dataclasses import replace

from muster.core import JobView, NodeView, PartitionView, SchedConfig, Snapshot
from muster.core.placement import NodeAlloc
from muster.core.snapshot import RunningView

_job_ids = iter(range(1, 10**9))
_node_index = iter(range(10**6, 10**9))  # definition order = creation order when not given


def node(
    name: str,
    index: int | None = None,
    *,
    cpus: int = 16,
    mem: int = 64000,
    gpus: int = 0,
    cpus_used: int = 0,
    mem_used: int = 0,
    gpus_used: tuple[int, ...] = (),
    gpu_type: str | None = None,
    usable: bool = True,
    weight: int = 1,
    partitions: tuple[str, ...] = ("p",),
) -> NodeView:
    if index is None:
        index = next(_node_index)
    return NodeView(
        name=name, index=index, partitions=frozenset(partitions), cpus=cpus,
        cpus_free=cpus - cpus_used, mem=mem, mem_free=mem - mem_used, gpus=gpus,
        gpus_free=tuple(g for g in range(gpus) if g not in gpus_used),
        gpu_type=gpu_type if gpus else None, usable=usable, weight=weight,
    )


def nodes(n: int, prefix: str = "n", **kw) -> tuple[NodeView, ...]:
    return tuple(node(f"{prefix}{i:04d}", i, **kw) for i in range(n))


def partition(name: str = "p", node_list=(), **kw) -> PartitionView:
    names = tuple(x if isinstance(x, str) else x.name for x in node_list)
    return PartitionView(name=name, node_names=names, **kw)


def job(job_id: int | None = None, **kw) -> JobView:
    kw.setdefault("partitions", ("p",))
    for k in ("req_nodes", "exc_nodes"):
        if k in kw:
            kw[k] = frozenset(kw[k])
    return JobView(job_id=next(_job_ids) if job_id is None else job_id, **kw)


def snapshot(node_views, jobs=(), parts=None, now: int = 1000) -> Snapshot:
    node_views = tuple(node_views)
    if parts is None:
        parts = (partition("p", node_views),)
    return Snapshot(now=now, nodes=node_views, partitions=tuple(parts), pending=tuple(jobs))


CFG = SchedConfig()


def running(job_id: int, allocs, *, start: int = 0, end: int | None = None,
            partition: str = "p", **kw) -> RunningView:
    """A running job; ``allocs`` = [(node, cpus, mem, gpus tuple), ...]."""
    nas = tuple(NodeAlloc(node=n, cpus=c, mem=m, gpus=tuple(g), tasks=1) for n, c, m, g in allocs)
    return RunningView(job_id=job_id, partition=partition, nodes=nas, start_time=start,
                       end_time=end, **kw)


def busy_snapshot(node_views, running_jobs, jobs=(), parts=None, now: int = 1000, **kw) -> Snapshot:
    """Snapshot whose nodes' free resources already exclude ``running_jobs``."""
    used: dict[str, list] = {}
    for r in running_jobs:
        for a in r.nodes:
            u = used.setdefault(a.node, [0, 0, set()])
            u[0] += a.cpus
            u[1] += a.mem
            u[2] |= set(a.gpus)
    out = []
    for n in node_views:
        u = used.get(n.name)
        if u:
            n = replace(n, cpus_free=n.cpus_free - u[0], mem_free=n.mem_free - u[1],
                        gpus_free=tuple(g for g in n.gpus_free if g not in u[2]))
        out.append(n)
    if parts is None:
        parts = (partition("p", out),)
    return Snapshot(now=now, nodes=tuple(out), partitions=tuple(parts), pending=tuple(jobs),
                    running=tuple(running_jobs), **kw)
