"""The simulated machine: core :class:`~muster.core.NodeView`s and one partition.

Three sources, first that applies: a slurm.conf (``from_config``, via
:func:`muster.config.load`), explicit sizes (``from_flags``), or the trace itself
(``from_trace``: SWF ``MaxProcs`` processors; Alibaba's node list; for ITP/Philly
8-GPU nodes sized to the peak GPU demand of the replayed jobs if every job had started at
submit).

Memory is simulated only when the trace records it (Alibaba). Otherwise every node gets
1 MB per CPU and every job asks 1 MB per CPU, so memory never binds and is not reported.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from muster.core import NodeView, PartitionView, SchedConfig

from .traces import Trace, TraceJob

__all__ = ["SimCluster", "from_config", "from_flags", "from_trace", "peak_gpu_demand",
           "with_topology"]

PARTITION = "sim"


@dataclass(frozen=True)
class SimCluster:
    nodes: tuple[NodeView, ...]
    partitions: tuple[PartitionView, ...]  # every job is offered to each, as sbatch -p a,b
    sched: SchedConfig
    mem_simulated: bool
    source: str  # how it was sized, in words
    conf: object = None  # the loaded slurm.conf (from_config): accounting settings for fair-share
    # Snapshot fields of a topology (muster.core.confview.topology_fields): topology.conf next
    # to the slurm.conf, or ``muster sim --topology`` (:func:`with_topology`)
    topology: dict = field(default_factory=dict)

    @property
    def partition(self) -> PartitionView:
        return self.partitions[0]

    @property
    def total_cpus(self) -> int:
        return sum(n.cpus for n in self.nodes)

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    def describe(self) -> str:
        kinds: dict[tuple, int] = {}
        for n in self.nodes:
            k = (n.cpus, n.gpus, n.gpu_type)
            kinds[k] = kinds.get(k, 0) + 1
        parts = []
        for (c, g, t), cnt in sorted(kinds.items(), key=lambda kv: -kv[1])[:4]:
            gp = f", {g} GPU{'s' if g != 1 else ''}{' ' + t if t else ''}" if g else ""
            parts.append(f"{cnt} × ({c} CPUs{gp})")
        more = "" if len(kinds) <= 4 else f" + {len(kinds) - 4} more shapes"
        return f"{len(self.nodes)} nodes: " + "; ".join(parts) + more + f" [{self.source}]"


def _node(i: int, name: str, cpus: int, mem: int | None, gpus: int, gtype: str | None,
          weight: int = 1, partition: str = PARTITION) -> NodeView:
    mem = cpus if mem is None else mem
    return NodeView(name=name, index=i, partitions=frozenset({partition}), cpus=cpus,
                    cpus_free=cpus, mem=mem, mem_free=mem, gpus=gpus,
                    gpus_free=tuple(range(gpus)), gpu_type=gtype, weight=weight)


def _make(nodes: list[NodeView], mem: bool, source: str, sched: SchedConfig | None = None,
          max_time: int | None = None) -> SimCluster:
    part = PartitionView(name=PARTITION, node_names=tuple(n.name for n in nodes),
                         max_time=max_time)
    return SimCluster(nodes=tuple(nodes), partitions=(part,), sched=sched or SchedConfig(),
                      mem_simulated=mem, source=source)


def from_flags(nodes: int, cpus_per_node: int, gpus_per_node: int = 0,
               gpu_type: str | None = None) -> SimCluster:
    if nodes < 1 or cpus_per_node < 1 or gpus_per_node < 0:
        raise ValueError("--nodes and --cpus-per-node must be ≥ 1, --gpus-per-node ≥ 0")
    w = len(str(nodes))
    ns = [_node(i, f"n{i:0{w}d}", cpus_per_node, None, gpus_per_node, gpu_type)
          for i in range(nodes)]
    return _make(ns, False, "flags")


def from_config(path: str, *, partition: str | None = None, trace_mem: bool = False) -> SimCluster:
    """Nodes and partitions of a slurm.conf: the default partition, or ``partition`` (a name
    or a comma list: every job is then offered to each, as ``sbatch -p a,b``, and runs in
    the first one whose limits and free nodes allow). Memory from RealMemory only when the
    trace records memory."""
    from muster.config import load

    cfg = load(path)
    parts = cfg.partitions
    if partition is None:
        pc = next((p for p in parts.values() if p.default), None) or next(iter(parts.values()), None)
        if pc is None:
            raise ValueError(f"{path}: no partition defined")
        chosen = [pc]
    else:
        chosen = []
        for name in dict.fromkeys(x.strip() for x in partition.split(",")):
            if name not in parts:
                raise ValueError(f"{path}: no partition {name!r}")
            chosen.append(parts[name])
    # the controller's own reading of the file: node order, partitions, scheduling settings
    from muster.core.confview import partition_views, sched_config

    order = cfg.node_order()
    member: dict[str, list[str]] = {}
    for pc in chosen:
        for name in pc.nodes:
            member.setdefault(name, []).append(pc.name)
    ns = []
    for name, in_parts in member.items():
        nc = cfg.nodes[name]
        gpus, gtype = 0, None
        for g in nc.gres:
            if g.name == "gpu":
                gpus += g.count
                gtype = gtype or g.type
        n = _node(order[name], name, nc.cpus, nc.real_memory if trace_mem else None,
                  gpus, gtype, nc.weight)
        ns.append(replace(n, partitions=frozenset(in_parts)))
    ns.sort(key=lambda n: n.index)
    sched = sched_config(cfg)
    if not trace_mem:  # every job asks 1 MB per CPU of nodes with 1 MB per CPU (module doc)
        sched = replace(sched, def_mem_per_cpu=None, def_mem_per_node=None, def_mem_per_gpu=None)
    views = partition_views(cfg)
    pviews = tuple(views[pc.name] for pc in chosen)
    names = ",".join(pc.name for pc in chosen)
    from muster.core.confview import topology_fields
    return SimCluster(nodes=tuple(ns), partitions=pviews, sched=sched, mem_simulated=trace_mem,
                      source=f"{path}, partition{'s' if len(chosen) > 1 else ''} {names}",
                      conf=cfg, topology=topology_fields(cfg))


def with_topology(cl: SimCluster, spec: str) -> SimCluster:
    """``cl`` with a topology: ``tree:N`` (leaf switches of N consecutive nodes under one top
    switch, as ``muster up --topology tree:N`` writes), ``block:N`` (base blocks of N nodes),
    or a topology.conf FILE (``BlockName=`` lines make it topology/block, else tree), checked
    against the cluster's node names as the controller checks it."""
    from muster.config.topologyconf import (BlockConf, SwitchConf, TopologyConf,
                                            parse_topology)
    from muster.core.confview import topology_views
    names = [n.name for n in sorted(cl.nodes, key=lambda n: n.index)]
    kind, _, size = spec.partition(":")
    if kind in ("tree", "block") and size.isdigit() and int(size) > 0:
        k = int(size)
        groups = [names[i:i + k] for i in range(0, len(names), k)]
        if kind == "tree":
            leaves = tuple(SwitchConf(f"s{i}", tuple(g)) for i, g in enumerate(groups))
            top = (SwitchConf("top", switches=tuple(s.name for s in leaves), level=1),)
            conf = TopologyConf("topology/tree", spec, switches=leaves + top)
        else:
            conf = TopologyConf("topology/block", spec,
                                blocks=tuple(BlockConf(f"b{i}", tuple(g))
                                             for i, g in enumerate(groups)), block_sizes=())
            sizes = [k]
            while sizes[-1] < k * len(groups):
                sizes.append(sizes[-1] * 2)
            conf = replace(conf, block_sizes=tuple(sizes))
    elif os.path.isfile(spec):
        from muster.common.errors import ConfigError
        with open(spec, encoding="utf-8") as f:
            text = f.read()
        plugin = "topology/block" if "blockname" in text.lower() else "topology/tree"
        try:
            conf = parse_topology(text, spec, plugin, dict.fromkeys(names))
        except ConfigError as e:
            raise ValueError(str(e)) from None
    else:
        raise ValueError(f"--topology {spec}: expected tree:N, block:N or a topology.conf file")
    return replace(cl, topology=topology_views(conf),
                   source=f"{cl.source}, topology {spec}")


def peak_gpu_demand(jobs: list[TraceJob]) -> int:
    """Most GPUs in use at once if every job started at its submit time."""
    ev: list[tuple[int, int]] = []
    for j in jobs:
        ev.append((j.submit, j.gpus))
        ev.append((j.submit + j.run, -j.gpus))
    ev.sort(key=lambda e: (e[0], e[1]))  # ends (negative) before starts at the same time
    cur = peak = 0
    for _, d in ev:
        cur += d
        peak = max(peak, cur)
    return peak


def from_trace(trace: Trace, jobs: list[TraceJob], *, gpus_per_node: int = 8,
               cpus_per_node: int | None = None) -> SimCluster:
    if trace.fmt == "swf":
        procs = trace.max_procs or trace.max_nodes or max((j.cpus for j in jobs), default=1)
        if cpus_per_node and procs % cpus_per_node == 0:
            return from_flags(procs // cpus_per_node, cpus_per_node)
        # processors are fungible in SWF: one node holding them all (fastest, exact)
        c = from_flags(1, procs)
        return SimCluster(c.nodes, c.partitions, c.sched, False,
                          f"SWF MaxProcs {procs}, processors pooled")
    if trace.nodes:
        ns = [_node(i, s.name, s.cpus, s.mem, s.gpus, s.gpu_type)
              for i, s in enumerate(trace.nodes)]
        return _make(ns, True, "trace node list")
    peak = peak_gpu_demand(jobs)
    biggest = max((j.gpus for j in jobs), default=gpus_per_node)
    n = max(1, -(-max(peak, biggest) // gpus_per_node))
    c = from_flags(n, cpus_per_node or 8 * gpus_per_node, gpus_per_node)
    return SimCluster(c.nodes, c.partitions, c.sched, False,
                      f"{n} × {gpus_per_node}-GPU nodes = peak demand at submit ({peak} GPUs)")

