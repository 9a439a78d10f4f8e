"""Input types of the scheduling core: an immutable picture of one moment.

The shell (controller or simulator) builds a :class:`Snapshot` from its state and hands
it, with a :class:`SchedConfig`, to :func:`muster.core.schedule.schedule`. Nothing here
refers to time other than ``Snapshot.now``; all quantities are integers (CPUs, MB of
memory, GPU indices, minutes for time limits, seconds for ``now``/``submit_time``).

Invariants the shell guarantees (the core does not re-validate them):

* ``NodeView.index`` is unique and follows definition order in the configuration;
  node names are unique.
* ``0 <= cpus_free <= cpus``, ``0 <= mem_free <= mem``; ``gpus_free`` is ascending, a
  subset of ``range(gpus)``.
* ``JobView.blocked`` carries a reason the shell already decided (held, dependency,
  begin time, array throttle, ...); such jobs are reported, never started.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["JobView", "NodeView", "PartitionView", "SchedConfig", "Snapshot"]


@dataclass(frozen=True, slots=True)
class NodeView:
    """One node and what is still free on it.

    ``usable`` is False when the node cannot take new work (DOWN, DRAIN, NOT_RESPONDING,
    ...). ``weight`` orders node choice: lower weights are used first.
    """

    name: str
    index: int
    partitions: frozenset[str]
    cpus: int
    cpus_free: int
    mem: int
    mem_free: int
    gpus: int = 0
    gpus_free: tuple[int, ...] = ()
    gpu_type: str | None = None
    usable: bool = True
    weight: int = 1

    @property
    def idle(self) -> bool:
        """True when nothing at all is allocated on the node."""
        return (
            self.cpus_free == self.cpus
            and self.mem_free == self.mem
            and len(self.gpus_free) == self.gpus
        )


@dataclass(frozen=True, slots=True)
class PartitionView:
    """A partition: state ``UP``/``DOWN``/``DRAIN``/``INACTIVE`` and its limits.

    ``DRAIN`` accepts no new submissions but still schedules pending jobs.
    ``max_time`` is in minutes (None = unlimited); ``max_nodes`` None = unlimited.
    """

    name: str
    state: str = "UP"
    priority_tier: int = 1
    node_names: tuple[str, ...] = ()
    max_time: int | None = None
    max_nodes: int | None = None
    min_nodes: int = 1


@dataclass(frozen=True, slots=True)
class JobView:
    """A pending job (or a pending array whose eligible tasks may start) as the core sees it.

    Conventions (the shell translates options into these):

    * ``ntasks <= 0`` means ``-n`` was not given. Then each node runs one task
      (or ``ntasks_per_node`` tasks) and the node count is ``nodes_min``.
    * ``nodes_max`` None means no upper bound beyond the partition's.
    * ``mem_per_node == 0`` means all memory of each node; None means not given.
    * GPU requests, first one that is set wins: ``gpus_per_task``, ``gpus_per_node``
      (``> 0``), ``gpus_total``.
    * ``max_starts`` > 1 only for arrays: up to that many identical tasks may start in
      one cycle; each start is a separate :class:`~muster.core.schedule.Start` with the
      array's ``job_id``.
    """

    job_id: int
    priority: int = 1
    submit_time: int = 0
    partitions: tuple[str, ...] = ()
    nodes_min: int = 1
    nodes_max: int | None = None
    ntasks: int = 0
    ntasks_per_node: int | None = None
    cpus_per_task: int = 1
    mem_per_node: int | None = None
    mem_per_cpu: int | None = None
    mem_per_gpu: int | None = None
    gpus_per_node: int = 0
    gpus_total: int | None = None
    gpus_per_task: int | None = None
    gpu_type: str | None = None
    req_nodes: frozenset[str] = frozenset()
    exc_nodes: frozenset[str] = frozenset()
    exclusive: bool = False
    time_limit: int | None = None
    blocked: str | None = None
    max_starts: int = 1


@dataclass(frozen=True, slots=True)
class SchedConfig:
    """Scheduler settings the core needs. ``0`` and None both mean "not set"."""

    def_mem_per_cpu: int | None = None
    def_mem_per_node: int | None = None
    def_mem_per_gpu: int | None = None
    max_jobs_to_start: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one scheduling cycle looks at.

    ``partitions`` may be given as a mapping name → view; it is stored as a tuple
    ordered by name so the snapshot stays immutable and comparable.
    """

    now: int
    nodes: tuple[NodeView, ...]
    partitions: tuple[PartitionView, ...]
    pending: tuple[JobView, ...] = field(default=())

    def __post_init__(self) -> None:
        parts = self.partitions
        if isinstance(parts, Mapping):
            parts = tuple(parts[k] for k in sorted(parts))
        object.__setattr__(self, "partitions", tuple(parts))
        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "pending", tuple(self.pending))

    def partition_map(self) -> dict[str, PartitionView]:
        return {p.name: p for p in self.partitions}
