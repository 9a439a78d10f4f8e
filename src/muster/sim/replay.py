"""One call from a trace file to metrics: window selection, machine, engine, metrics.

``replay(path, policy=..., nodes=..., ...)`` is what ``muster sim`` runs; benchmarks and
tests use it too. Windows: ``start_job`` (0-based index in submit order) and ``jobs``
(count); or ``start_time``/``end_time`` (seconds from the first submit: jobs submitted in
``[start_time, end_time)``); or ``windows = k`` random windows of ``jobs`` jobs drawn with
``seed`` the way RLScheduler does (start index uniform in ``[jobs, n - jobs - 1)``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from .cluster import SimCluster, from_config, from_flags, from_trace, with_topology
from .engine import SimResult, Simulator
from .metrics import compute
from .traces import Trace, TraceJob, read_trace

__all__ = ["MachineSpec", "build_cluster", "random_starts", "replay", "replay_trace", "select_jobs"]


@dataclass(frozen=True)
class MachineSpec:
    config: str | None = None
    partition: str | None = None
    nodes: int | None = None
    cpus_per_node: int | None = None
    gpus_per_node: int | None = None
    gpu_type: str | None = None
    topology: str | None = None  # --topology: tree:N, block:N or a topology.conf file


def select_jobs(trace: Trace, *, start_job: int = 0, jobs: int | None = None,
                start_time: int | None = None, end_time: int | None = None) -> list[TraceJob]:
    sel = trace.jobs
    if start_time is not None or end_time is not None:
        lo = start_time if start_time is not None else -(1 << 62)
        hi = end_time if end_time is not None else 1 << 62
        sel = [j for j in sel if lo <= j.submit < hi]
    if start_job < 0:
        raise ValueError("--start-job must be ≥ 0")
    sel = sel[start_job:]
    if jobs is not None:
        if jobs < 1:
            raise ValueError("--jobs must be ≥ 1")
        sel = sel[:jobs]
    return sel


def random_starts(n_jobs: int, size: int, count: int, seed: int) -> list[int]:
    """RLScheduler's test windows: start uniform in [size, n_jobs - size - 1)."""
    if n_jobs - size - 1 <= size:
        raise ValueError(f"trace of {n_jobs} jobs too short for windows of {size}")
    rng = random.Random(seed)
    return [rng.randrange(size, n_jobs - size - 1) for _ in range(count)]


def build_cluster(trace: Trace, jobs: list[TraceJob], m: MachineSpec) -> SimCluster:
    cl = _machine(trace, jobs, m)
    return with_topology(cl, m.topology) if m.topology else cl


def _machine(trace: Trace, jobs: list[TraceJob], m: MachineSpec) -> SimCluster:
    if m.config:
        return from_config(m.config, partition=m.partition, trace_mem=trace.fmt == "openb")
    if m.nodes is not None:
        cpn = m.cpus_per_node or (1 if trace.fmt == "swf" else 8 * (m.gpus_per_node or 8))
        gpn = m.gpus_per_node if m.gpus_per_node is not None else (0 if trace.fmt == "swf" else 8)
        return from_flags(m.nodes, cpn, gpn, m.gpu_type)
    return from_trace(trace, jobs, gpus_per_node=m.gpus_per_node or 8,
                      cpus_per_node=m.cpus_per_node)


def replay_trace(trace: Trace, jobs: list[TraceJob], policy: str, machine: MachineSpec, *,
                 record_series: bool = False,
                 progress: Callable[[int, int], None] | None = None,
                 cluster: SimCluster | None = None) -> tuple[SimResult, dict]:
    cl = cluster or build_cluster(trace, jobs, machine)
    res = Simulator(cl, jobs, policy, record_series=record_series, progress=progress).run()
    return res, compute(res)


def replay(path: str, *, policy: str = "fifo", machine: MachineSpec = MachineSpec(),
           fmt: str | None = None, nodes_file: str | None = None, start_job: int = 0,
           jobs: int | None = None, start_time: int | None = None,
           end_time: int | None = None) -> tuple[SimResult, dict]:
    trace = read_trace(path, fmt=fmt, nodes_file=nodes_file)
    sel = select_jobs(trace, start_job=start_job, jobs=jobs, start_time=start_time,
                      end_time=end_time)
    return replay_trace(trace, sel, policy, machine)
