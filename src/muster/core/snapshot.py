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
* ``RunningView.nodes`` are the allocations already subtracted from ``NodeView.*_free``;
  the backfill timeline gives them back at the job's estimated end.

Everything added for backfill, priority, limits, preemption and topology has a default
that switches it off, so a shell that fills only the original fields gets the original
main scheduler.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from muster.model.alloc import NodeAlloc  # the one allocation type, shared with Job.alloc

if TYPE_CHECKING:
    from .features import Constraint

__all__ = [
    "AssocView", "JobView", "NodeAlloc", "NodeView", "PartitionView", "QosView",
    "ReservationView", "RunningView", "SchedConfig", "Snapshot", "SwitchView",
]

_NO: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class NodeView:
    """One node and what is still free on it.

    ``usable`` is False when the node cannot take new work (DOWN, DRAIN, NOT_RESPONDING,
    ...). ``weight`` orders node choice: lower weights are used first. ``features`` are the
    node's *active* features, which ``--constraint`` is matched against.
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
    features: frozenset[str] = _NO
    tmp_disk: int = 0  # TmpDisk (MB): a --tmp job needs at least its request here

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
    priority_job_factor: int = 1
    allow_accounts: frozenset[str] | None = None  # None = ALL
    allow_groups: frozenset[str] | None = None
    allow_qos: frozenset[str] | None = None
    deny_accounts: frozenset[str] = _NO
    deny_qos: frozenset[str] = _NO
    qos: str | None = None  # partition QOS
    preempt_mode: str | None = None  # with preempt/partition_prio; None = SchedConfig's
    grace_time: int = 0  # seconds


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
    * ``cpus_per_gpu``: each node gets at least that many CPUs per GPU allocated on it
      (``--cpus-per-gpu`` or DefCpuPerGPU, resolved by the shell); ``constraint`` is the
      parsed ``--constraint`` (:mod:`muster.core.features`); ``deadline`` (seconds): the job
      must be able to end by then (``--deadline``), else it ends in state DEADLINE.
    * ``min_cpus`` (``--mincpus``) and ``contiguous`` (``--contiguous``): see
      :mod:`muster.core.placement`; both are part of the request's shape.
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
    cpus_per_gpu: int | None = None
    req_nodes: frozenset[str] = frozenset()
    exc_nodes: frozenset[str] = frozenset()
    exclusive: bool = False
    time_limit: int | None = None
    blocked: str | None = None
    max_starts: int = 1
    # Accounting, priority, backfill and topology facts (all optional):
    user: str = ""
    group: str = ""
    account: str = ""
    qos: str = ""
    time_min: int | None = None  # --time-min (minutes): backfill plans with it
    switches: int | None = None  # --switches=N[@wait]
    switch_wait: int | None = None  # seconds; None = SchedConfig.max_switch_wait
    constraint: Constraint | None = None  # --constraint (muster.core.features)
    reservation: str | None = None  # --reservation
    nice: int = 0
    eligible_time: int | None = None  # accrue time for the age factor; None = submit_time
    fixed_priority: bool = False  # admin-set priority: multifactor leaves it alone
    requeue: bool = True
    deadline: int | None = None  # --deadline (seconds)
    # --mincpus (MinCPUsNode): each node of the job needs this many free CPUs and the job gets
    # them there (0 = none); --contiguous: its nodes are consecutive in slurm.conf order
    min_cpus: int = 0
    contiguous: bool = False
    use_min_nodes: bool = False  # --use-min-nodes: a node range does not grow (placement)
    min_tmp: int = 0  # --tmp (MB, MinTmpDiskNode): nodes with less TmpDisk cannot serve it


@dataclass(frozen=True, slots=True)
class RunningView:
    """A running job: what it holds (``nodes``) and when it is expected to end.

    ``end_time`` = start + time limit (seconds), None when unlimited. ``nodes`` are
    :class:`NodeAlloc` (node, cpus, mem, gpus, tasks).
    """

    job_id: int
    partition: str
    nodes: tuple[NodeAlloc, ...]
    start_time: int
    end_time: int | None = None
    priority: int = 1
    user: str = ""
    account: str = ""
    qos: str = ""
    requeue: bool = True


@dataclass(frozen=True, slots=True)
class ReservationView:
    """An advance reservation of whole nodes for ``[start, end)`` (seconds)."""

    name: str
    nodes: frozenset[str]
    start: int
    end: int
    users: frozenset[str] = _NO
    accounts: frozenset[str] = _NO
    flags: frozenset[str] = _NO

    def admits(self, job: JobView) -> bool:
        return job.reservation == self.name and (
            (not self.users and not self.accounts)
            or job.user in self.users or job.account in self.accounts)


@dataclass(frozen=True, slots=True)
class QosView:
    """A QOS (sacctmgr): priority, limits, preemption. TRES maps: ``cpu``, ``mem`` (MB),
    ``node``, ``gres/gpu`` → count; an absent key is no limit. ``max_wall`` in minutes."""

    name: str
    priority: int = 0
    max_wall: int | None = None
    max_tres_per_user: Mapping[str, int] = field(default_factory=dict)
    max_tres_per_job: Mapping[str, int] = field(default_factory=dict)
    max_jobs_per_user: int | None = None
    max_submit_jobs_per_user: int | None = None
    grp_tres: Mapping[str, int] = field(default_factory=dict)
    grp_jobs: int | None = None
    flags: frozenset[str] = _NO  # DenyOnLimit, NoReserve, OverPartQOS, ...
    preempt: frozenset[str] = _NO  # QOS names this QOS may preempt
    preempt_mode: str | None = None
    grace_time: int = 0
    preempt_exempt_time: int | None = None
    usage_factor: float = 1.0


@dataclass(frozen=True, slots=True)
class AssocView:
    """An association: an account (``user`` None) or a user in an account.

    ``parent`` is the parent account (for a user: its account; None under root).
    ``shares`` is ``Fairshare=`` (-1 = ``parent``). ``raw_usage`` is decayed usage in
    billing-seconds (see :mod:`muster.core.fairshare`).
    """

    account: str
    user: str | None = None
    parent: str | None = None
    shares: int = 1
    raw_usage: float = 0.0
    priority: int = 0
    grp_tres: Mapping[str, int] = field(default_factory=dict)
    grp_jobs: int | None = None
    max_jobs: int | None = None
    max_submit_jobs: int | None = None
    max_tres_per_job: Mapping[str, int] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str | None]:
        return (self.account, self.user)


@dataclass(frozen=True, slots=True)
class SwitchView:
    """topology.conf ``SwitchName=name Nodes=...`` (leaf) or ``Switches=...`` (inner); also
    a ``BlockName=name Nodes=...`` base block (``Snapshot.blocks``)."""

    name: str
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SchedConfig:
    """Scheduler settings the core needs. ``0`` and None both mean "not set".

    Defaults keep the plain main scheduler: no backfill, priorities as given, no limits,
    no preemption. Times: ``bf_window`` and ``priority_max_age``-like settings are named
    with their unit; weights are integers as in slurm.conf.
    """

    def_mem_per_cpu: int | None = None
    def_mem_per_node: int | None = None
    def_mem_per_gpu: int | None = None
    max_jobs_to_start: int = 0
    # sched/backfill
    backfill: bool = False
    bf_depth: int | None = 1  # reservations made: 1 = EASY, None = conservative (all)
    bf_window: int = 1440  # minutes
    bf_resolution: int = 60  # seconds
    bf_max_job_test: int = 500
    kill_wait: int = 30  # seconds
    over_time_limit: int = 0  # minutes
    max_switch_wait: int = 300  # seconds
    # priority_type: "none" keeps JobView.priority as the shell set it; "basic" and
    # "multifactor" are Slurm's plugins (muster.core.priority)
    priority_type: str = "none"
    priority_max_age: int = 7 * 86400  # seconds
    priority_favor_small: bool = False
    priority_flags: frozenset[str] = _NO
    weight_age: int = 0
    weight_assoc: int = 0
    weight_fairshare: int = 0
    weight_jobsize: int = 0
    weight_partition: int = 0
    weight_qos: int = 0
    weight_tres: tuple[tuple[str, int], ...] = ()
    site_factor: int = 0
    # limits: AccountingStorageEnforce (``limits`` turns QOS/association limits on)
    enforce: frozenset[str] = _NO
    # preemption
    preempt_type: str = "preempt/none"  # preempt/qos | preempt/partition_prio
    preempt_mode: str = "OFF"  # global PreemptMode: OFF, CANCEL, REQUEUE
    preempt_exempt_time: int = 0  # seconds


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
    running: tuple[RunningView, ...] = field(default=())
    reservations: tuple[ReservationView, ...] = field(default=())
    qos: tuple[QosView, ...] = field(default=())
    assocs: tuple[AssocView, ...] = field(default=())
    switches: tuple[SwitchView, ...] = field(default=())
    # topology/block: base blocks in order (as SwitchView: name, nodes) and BlockSizes (nodes)
    blocks: tuple[SwitchView, ...] = field(default=())
    block_sizes: tuple[int, ...] = field(default=())
    # fair-share factor per (account, user), from muster.core.fairshare (input to priority)
    fairshare: Mapping[tuple[str, str], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        parts: Iterable[PartitionView] | Mapping[str, PartitionView] = self.partitions
        if isinstance(parts, Mapping):
            parts = tuple(parts[k] for k in sorted(parts))
        object.__setattr__(self, "partitions", tuple(parts))
        for name in ("nodes", "pending", "running", "reservations", "qos", "assocs", "switches",
                     "blocks", "block_sizes"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def partition_map(self) -> dict[str, PartitionView]:
        return {p.name: p for p in self.partitions}

    def qos_map(self) -> dict[str, QosView]:
        return {q.name: q for q in self.qos}

    def assoc_map(self) -> dict[tuple[str, str | None], AssocView]:
        return {a.key: a for a in self.assocs}
