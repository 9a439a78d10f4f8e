"""Builders for scheduling-core snapshots: short, explicit, defaults that fit."""

from __future__ import annotations

from muster.core import JobView, NodeView, PartitionView, SchedConfig, Snapshot

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
