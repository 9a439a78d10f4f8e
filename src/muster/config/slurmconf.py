"""slurm.conf / gres.conf reader and writer (the subset of spec/config.md).

Standard library only (plus muster.common helpers): the CLI imports this.

``load(path)`` returns a frozen :class:`ClusterConfig`; every problem raises
``ConfigError("<file>:<line>: <what>")``.  ``render(...)`` writes a slurm.conf/gres.conf pair
for ``muster up`` that loads back to the same configuration.

Conventions of the typed fields
-------------------------------
* times: partition ``MaxTime``/``DefaultTime`` and global ``OverTimeLimit``/``ResvOverRun`` are
  minutes, ``None`` = UNLIMITED; ``PartitionConf.default_time`` is ``None`` when not written
  (the scheduler then uses ``max_time``, as Slurm does).  Plain second/minute counters
  (``KillWait``, ``MinJobAge``, ``SlurmdTimeout``...) are ints.  ``PriorityDecayHalfLife``,
  ``PriorityMaxAge``, ``PriorityCalcPeriod`` and ``PreemptExemptTime`` are stored in seconds.
* memory: MB.  Global ``DefMemPer*``/``MaxMemPer*`` are ints with 0 = unset/unlimited;
  partition values are ``None`` when the partition does not set them (inherit the global
  value; :meth:`ClusterConfig.mem_limits` resolves the pair).
* keyword values are upper-cased (node/partition states, OverSubscribe, EnforcePartLimits,
  PreemptMode); plugin names are kept as written.

Muster extension keys (global): ``MusterStateStore=postgresql://...`` -- keep the
controller's state in PostgreSQL (any libpq connection URI) instead of SQLite in
StateSaveLocation; ``MusterOperators=alice,bob`` -- users with operator rights
(besides root / SlurmUser).
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field

from muster.common import hostlist, timefmt, units
from muster.common.errors import ConfigError, InputError
from muster.config.locate import MARKER
from muster.config.topologyconf import PLUGINS as TOPOLOGY_PLUGINS
from muster.config.topologyconf import TopologyConf, load_topology

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: the CLI reads this module, keep typing out
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "ACCEPTED_KEYS",
    "ClusterConfig",
    "GresConf",
    "NodeConf",
    "PartitionConf",
    "load",
    "render",
]

_MAX_INCLUDE_DEPTH = 16

# ---------------------------------------------------------------------------------------------
# records


@dataclass(frozen=True, slots=True)
class GresConf:
    """One generic resource of a node (``Gres=name[:type]:count``).

    ``indices`` are the device indices (0..n-1 per gres name on the node, in gres.conf
    ``File`` order, which defines CUDA_VISIBLE_DEVICES); ``files`` the device paths parallel
    to them (empty for emulated devices, i.e. no gres.conf line for the node);
    ``cores`` the gres.conf ``Cores=`` affinity per device (parallel to ``indices``; empty
    when no line gave Cores).
    """

    name: str
    type: str | None
    count: int
    files: tuple[str, ...] = ()
    indices: tuple[int, ...] = ()
    cores: tuple[tuple[int, ...], ...] = ()
    flags: tuple[str, ...] = ()
    no_consume: bool = False

    @property
    def spec(self) -> str:
        """Slurm's short form: ``gpu:8``, ``gpu:a100:4``."""
        parts = [self.name]
        if self.type:
            parts.append(self.type)
        if self.no_consume:
            parts.append("no_consume")
        parts.append(str(self.count))
        return ":".join(parts)


@dataclass(frozen=True, slots=True)
class NodeConf:
    name: str
    addr: str
    hostname: str
    port: int | None
    cpus: int
    boards: int
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    real_memory: int
    tmp_disk: int
    weight: int
    features: tuple[str, ...]
    gres: tuple[GresConf, ...]
    state: str
    reason: str | None
    mem_spec_limit: int = 0
    core_spec_count: int = 0
    cpu_spec_list: str | None = None
    active_features: tuple[str, ...] | None = None  # ActiveFeatures=; None: = features

    @property
    def active(self) -> tuple[str, ...]:
        """The features jobs' ``--constraint`` is matched against (Slurm: ActiveFeatures,
        which are the Features unless a node features plugin changes them)."""
        return self.features if self.active_features is None else self.active_features

    def gres_count(self, name: str = "gpu") -> int:
        return sum(g.count for g in self.gres if g.name == name)

    @property
    def gres_spec(self) -> str:
        """``gpu:8`` / ``gpu:a100:2,gpu:v100:2`` / ``(null)``-free empty string."""
        return ",".join(g.spec for g in self.gres)


@dataclass(frozen=True, slots=True)
class PartitionConf:
    name: str
    nodes: tuple[str, ...]
    nodes_expr: str
    default: bool = False
    state: str = "UP"
    max_time: int | None = None
    default_time: int | None = None
    max_nodes: int | None = None
    min_nodes: int = 0
    priority_tier: int = 1
    priority_job_factor: int = 1
    allow_accounts: tuple[str, ...] | None = None
    allow_groups: tuple[str, ...] | None = None
    allow_qos: tuple[str, ...] | None = None
    over_subscribe: str = "NO"
    grace_time: int = 0
    hidden: bool = False
    def_mem_per_cpu: int | None = None
    def_mem_per_node: int | None = None
    def_mem_per_gpu: int | None = None
    max_mem_per_cpu: int | None = None
    max_mem_per_node: int | None = None
    deny_accounts: tuple[str, ...] | None = None
    deny_qos: tuple[str, ...] | None = None
    qos: str | None = None
    max_cpus_per_node: int | None = None
    def_cpu_per_gpu: int | None = None
    exclusive_user: bool = False
    root_only: bool = False
    req_resv: bool = False
    lln: bool = False
    preempt_mode: str | None = None
    over_time_limit: int | None = None
    tres_billing_weights: str | None = None
    alternate: str | None = None
    allow_nodes: str | None = None
    disable_root_jobs: bool = False


DEFAULT_MAX_SCRIPT_SIZE = 4 * 1024 * 1024  # Slurm's DEFAULT_BATCH_SCRIPT_LIMIT


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    path: str
    cluster_name: str
    slurmctld_host: str
    slurmctld_addr: str
    slurmctld_hosts: tuple[str, ...] = ()
    # the address of each SlurmctldHost, in order: its "(addr)", else (the first only)
    # SlurmctldAddr, else its name; a standby controller listens on its own
    slurmctld_addrs: tuple[str, ...] = ()
    slurmctld_port: int = 6817
    slurmd_port: int = 6818
    slurm_user: str = "root"
    slurmd_user: str = "root"
    state_save_location: str = "/var/spool"
    slurmd_spool_dir: str = "/var/spool/slurmd"
    slurmctld_log_file: str | None = None
    slurmd_log_file: str | None = None
    slurmctld_pid_file: str = "/var/run/slurmctld.pid"
    slurmd_pid_file: str = "/var/run/slurmd.pid"
    auth_type: str = "auth/munge"
    auth_info: str | None = None
    cred_type: str = "cred/munge"
    select_type: str = "select/linear"
    select_type_parameters: tuple[str, ...] = ()
    scheduler_type: str = "sched/backfill"
    scheduler_parameters: dict[str, str] = field(default_factory=dict)
    priority_type: str = "priority/multifactor"  # Slurm 23.11's default
    priority_weight_age: int = 0
    priority_weight_assoc: int = 0
    priority_weight_fairshare: int = 0
    priority_weight_job_size: int = 0
    priority_weight_partition: int = 0
    priority_weight_qos: int = 0
    priority_weight_tres: dict[str, float] = field(default_factory=dict)
    priority_decay_half_life: int = 7 * 86400
    priority_max_age: int = 7 * 86400
    priority_calc_period: int = 300
    priority_favor_small: bool = False
    priority_flags: tuple[str, ...] = ()
    priority_usage_reset_period: str = "NONE"
    fair_share_dampening_factor: int = 1
    gres_types: tuple[str, ...] = ()
    proctrack_type: str = "proctrack/cgroup"
    task_plugin: str = "task/none"
    topology_plugin: str = "topology/none"
    accounting_storage_type: str = "accounting_storage/none"
    accounting_storage_enforce: tuple[str, ...] = ()
    accounting_storage_tres: tuple[str, ...] = ()
    job_comp_type: str = "jobcomp/none"
    job_acct_gather_type: str = "jobacct_gather/none"
    job_acct_gather_frequency: str = "30"
    return_to_service: int = 0
    slurmd_timeout: int = 300
    # SlurmctldTimeout: the leader's lease, after which a standby takes over (issue 16).
    # Slurm's default is 120 s; Muster's is 8 s, so that a fail-over stays under 10 s.
    slurmctld_timeout: int = 8
    message_timeout: int = 10
    inactive_limit: int = 0
    kill_wait: int = 30
    over_time_limit: int | None = 0
    unkillable_step_timeout: int = 60
    min_job_age: int = 300
    max_job_count: int = 10000
    max_array_size: int = 1001
    max_step_count: int = 40000
    max_tasks_per_node: int = 512
    first_job_id: int = 1
    max_job_id: int = 67043328
    job_requeue: bool = True
    requeue_exit: tuple[int, ...] = ()
    requeue_exit_hold: tuple[int, ...] = ()
    max_batch_requeue: int = 5
    kill_on_bad_exit: bool = False
    wait_time: int = 0
    job_file_append: bool = False
    enforce_part_limits: str = "NO"
    def_mem_per_cpu: int = 0
    def_mem_per_node: int = 0
    def_mem_per_gpu: int = 0
    max_mem_per_cpu: int = 0
    max_mem_per_node: int = 0
    def_cpu_per_gpu: int = 0
    prolog: str | None = None
    epilog: str | None = None
    prolog_slurmctld: str | None = None
    epilog_slurmctld: str | None = None
    task_prolog: str | None = None
    task_epilog: str | None = None
    prolog_flags: tuple[str, ...] = ()
    prolog_epilog_timeout: int | None = None  # seconds; None: wait indefinitely
    prolog_timeout: int | None = None  # overrides PrologEpilogTimeout for Prolog(Slurmctld)
    epilog_timeout: int | None = None  # ... and for Epilog(Slurmctld)
    preempt_type: str = "preempt/none"
    preempt_mode: str = "OFF"
    preempt_exempt_time: int = 0
    tree_width: int = 50
    mpi_default: str = "none"
    launch_parameters: tuple[str, ...] = ()
    slurmd_parameters: tuple[str, ...] = ()
    slurmctld_parameters: tuple[str, ...] = ()
    dependency_parameters: tuple[str, ...] = ()
    complete_wait: int = 0
    health_check_program: str | None = None
    health_check_interval: int = 0
    resv_over_run: int | None = 0
    tmp_fs: str = "/tmp"
    mail_prog: str = "/bin/mail"
    operators: tuple[str, ...] = ()
    state_store: str | None = None  # MusterStateStore (None: SQLite in StateSaveLocation)
    client_retry: int = 60  # MusterClientRetry: seconds a command retries an unreachable controller
    lease_grace: int = 30  # MusterLeaseGrace: seconds an orphaned srun/salloc lease may re-attach
    gres_autodetect: str | None = None
    gres_conf_path: str | None = None
    # topology.conf, read when TopologyPlugin is topology/tree or topology/block (else None)
    topology: TopologyConf | None = None
    nodes: dict[str, NodeConf] = field(default_factory=dict)
    partitions: dict[str, PartitionConf] = field(default_factory=dict)
    nodesets: dict[str, tuple[str, ...]] = field(default_factory=dict)
    default_partition: str | None = None
    raw: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    # --- derived -------------------------------------------------------------------------
    def node_order(self) -> dict[str, int]:
        """Node name -> position in slurm.conf (the order node lists are sorted by)."""
        return {name: i for i, name in enumerate(self.nodes)}

    @property
    def conf_dir(self) -> str:
        return os.path.dirname(os.path.abspath(self.path))

    @property
    def max_script_size(self) -> int:
        """Largest batch script the controller accepts, in bytes:
        ``SchedulerParameters=max_script_size=N`` (validated by ``load``), else Slurm's
        default of 4 MiB (DEFAULT_BATCH_SCRIPT_LIMIT)."""
        v = self.scheduler_parameters.get("max_script_size")
        return int(v) if v else DEFAULT_MAX_SCRIPT_SIZE

    @property
    def socket_path(self) -> str:
        return os.path.join(self.state_save_location, "musterctld.sock")

    @property
    def db_path(self) -> str:
        return os.path.join(self.state_save_location, "muster.db")

    @property
    def store_url(self) -> str:
        """What ``muster.store.open_store`` opens: MusterStateStore, else the SQLite file."""
        return self.state_store or self.db_path

    @property
    def key_path(self) -> str:
        for item in (self.auth_info or "").split(","):
            k, sep, v = item.strip().partition("=")
            if sep and k.strip().lower() == "key" and v.strip():
                return os.path.join(self.conf_dir, v.strip())
        return os.path.join(self.conf_dir, "muster.key")

    def node_path(self, template: str, node: str) -> str:
        """Expand ``%n`` (node name) and ``%h`` (node hostname) in a spool/log/pid path."""
        host = self.nodes[node].hostname if node in self.nodes else node
        return template.replace("%n", node).replace("%h", host)

    def mem_limits(self, partition: str | None = None) -> dict[str, int]:
        """Effective DefMemPer*/MaxMemPer* (MB, 0 = unset) for a partition.

        A partition setting of one kind of default (per CPU / per node) replaces the global
        pair, as does a partition max; DefMemPerGPU is independent.
        """
        out = {
            "def_mem_per_cpu": self.def_mem_per_cpu,
            "def_mem_per_node": self.def_mem_per_node,
            "def_mem_per_gpu": self.def_mem_per_gpu,
            "max_mem_per_cpu": self.max_mem_per_cpu,
            "max_mem_per_node": self.max_mem_per_node,
        }
        part = self.partitions.get(partition) if partition else None
        if part is None:
            return out
        if part.def_mem_per_cpu is not None or part.def_mem_per_node is not None:
            out["def_mem_per_cpu"] = part.def_mem_per_cpu or 0
            out["def_mem_per_node"] = part.def_mem_per_node or 0
        if part.def_mem_per_gpu is not None:
            out["def_mem_per_gpu"] = part.def_mem_per_gpu
        if part.max_mem_per_cpu is not None or part.max_mem_per_node is not None:
            out["max_mem_per_cpu"] = part.max_mem_per_cpu or 0
            out["max_mem_per_node"] = part.max_mem_per_node or 0
        return out


# ---------------------------------------------------------------------------------------------
# key tables

# Global keys Muster interprets (canonical casing -> (attribute, kind)).
_TYPED_GLOBALS: dict[str, tuple[str, str]] = {
    "ClusterName": ("cluster_name", "str"),
    "SlurmctldHost": ("slurmctld_host", "special"),
    "SlurmctldAddr": ("slurmctld_addr", "special"),
    "ControlMachine": ("slurmctld_host", "special"),
    "ControlAddr": ("slurmctld_addr", "special"),
    "SlurmctldPort": ("slurmctld_port", "port"),
    "SlurmdPort": ("slurmd_port", "port"),
    "SlurmUser": ("slurm_user", "str"),
    "SlurmdUser": ("slurmd_user", "str"),
    "StateSaveLocation": ("state_save_location", "str"),
    "SlurmdSpoolDir": ("slurmd_spool_dir", "str"),
    "SlurmctldLogFile": ("slurmctld_log_file", "optstr"),
    "SlurmdLogFile": ("slurmd_log_file", "optstr"),
    "SlurmctldPidFile": ("slurmctld_pid_file", "str"),
    "SlurmdPidFile": ("slurmd_pid_file", "str"),
    "AuthType": ("auth_type", "str"),
    "AuthInfo": ("auth_info", "optstr"),
    "CredType": ("cred_type", "str"),
    "SelectType": ("select_type", "str"),
    "SelectTypeParameters": ("select_type_parameters", "list_upper"),
    "SchedulerType": ("scheduler_type", "str"),
    "SchedulerParameters": ("scheduler_parameters", "kvdict"),
    "PriorityType": ("priority_type", "str"),
    "PriorityWeightAge": ("priority_weight_age", "int"),
    "PriorityWeightAssoc": ("priority_weight_assoc", "int"),
    "PriorityWeightFairShare": ("priority_weight_fairshare", "int"),
    "PriorityWeightJobSize": ("priority_weight_job_size", "int"),
    "PriorityWeightPartition": ("priority_weight_partition", "int"),
    "PriorityWeightQOS": ("priority_weight_qos", "int"),
    "PriorityWeightTRES": ("priority_weight_tres", "tresweights"),
    "PriorityDecayHalfLife": ("priority_decay_half_life", "time_sec"),
    "PriorityMaxAge": ("priority_max_age", "time_sec"),
    "PriorityCalcPeriod": ("priority_calc_period", "time_sec"),
    "PriorityFavorSmall": ("priority_favor_small", "bool"),
    "PriorityFlags": ("priority_flags", "list_upper"),
    "PriorityUsageResetPeriod": ("priority_usage_reset_period", "upper"),
    "FairShareDampeningFactor": ("fair_share_dampening_factor", "int"),
    "GresTypes": ("gres_types", "list"),
    "ProctrackType": ("proctrack_type", "str"),
    "TaskPlugin": ("task_plugin", "str"),
    "TopologyPlugin": ("topology_plugin", "str"),
    "AccountingStorageType": ("accounting_storage_type", "str"),
    "AccountingStorageEnforce": ("accounting_storage_enforce", "list_lower"),
    "AccountingStorageTRES": ("accounting_storage_tres", "list"),
    "JobCompType": ("job_comp_type", "str"),
    "JobAcctGatherType": ("job_acct_gather_type", "str"),
    "JobAcctGatherFrequency": ("job_acct_gather_frequency", "str"),
    "ReturnToService": ("return_to_service", "rts"),
    "SlurmdTimeout": ("slurmd_timeout", "int"),
    "SlurmctldTimeout": ("slurmctld_timeout", "int"),
    "MessageTimeout": ("message_timeout", "int"),
    "InactiveLimit": ("inactive_limit", "int"),
    "KillWait": ("kill_wait", "int"),
    "OverTimeLimit": ("over_time_limit", "int_unlimited"),
    "UnkillableStepTimeout": ("unkillable_step_timeout", "int"),
    "MinJobAge": ("min_job_age", "int"),
    "MaxJobCount": ("max_job_count", "int"),
    "MaxArraySize": ("max_array_size", "int"),
    "MaxStepCount": ("max_step_count", "int"),
    "MaxTasksPerNode": ("max_tasks_per_node", "int"),
    "FirstJobId": ("first_job_id", "int"),
    "MaxJobId": ("max_job_id", "int"),
    "JobRequeue": ("job_requeue", "bool"),
    "RequeueExit": ("requeue_exit", "intlist"),
    "RequeueExitHold": ("requeue_exit_hold", "intlist"),
    "MaxBatchRequeue": ("max_batch_requeue", "int"),
    "KillOnBadExit": ("kill_on_bad_exit", "bool"),
    "WaitTime": ("wait_time", "int"),
    "JobFileAppend": ("job_file_append", "bool"),
    "EnforcePartLimits": ("enforce_part_limits", "enforce"),
    "DefMemPerCPU": ("def_mem_per_cpu", "mem0"),
    "DefMemPerNode": ("def_mem_per_node", "mem0"),
    "DefMemPerGPU": ("def_mem_per_gpu", "mem0"),
    "MaxMemPerCPU": ("max_mem_per_cpu", "mem0"),
    "MaxMemPerNode": ("max_mem_per_node", "mem0"),
    "DefCpuPerGPU": ("def_cpu_per_gpu", "int"),
    "Prolog": ("prolog", "optstr"),
    "Epilog": ("epilog", "optstr"),
    "PrologSlurmctld": ("prolog_slurmctld", "optstr"),
    "EpilogSlurmctld": ("epilog_slurmctld", "optstr"),
    "TaskProlog": ("task_prolog", "optstr"),
    "TaskEpilog": ("task_epilog", "optstr"),
    "PrologFlags": ("prolog_flags", "list_upper"),
    "PrologEpilogTimeout": ("prolog_epilog_timeout", "int"),
    "PrologTimeout": ("prolog_timeout", "int"),
    "EpilogTimeout": ("epilog_timeout", "int"),
    "PreemptType": ("preempt_type", "str"),
    "PreemptMode": ("preempt_mode", "upper"),
    "PreemptExemptTime": ("preempt_exempt_time", "time_sec"),
    "TreeWidth": ("tree_width", "int"),
    "MpiDefault": ("mpi_default", "str"),
    "LaunchParameters": ("launch_parameters", "list"),
    "SlurmdParameters": ("slurmd_parameters", "list"),
    "SlurmctldParameters": ("slurmctld_parameters", "list"),
    "DependencyParameters": ("dependency_parameters", "list"),
    "CompleteWait": ("complete_wait", "int"),
    "HealthCheckProgram": ("health_check_program", "optstr"),
    "HealthCheckInterval": ("health_check_interval", "int"),
    "ResvOverRun": ("resv_over_run", "int_unlimited"),
    "TmpFS": ("tmp_fs", "str"),
    "MailProg": ("mail_prog", "str"),
    # Muster extension
    "MusterOperators": ("operators", "list"),
    "MusterStateStore": ("state_store", "optstr"),
    "MusterClientRetry": ("client_retry", "int"),  # read by the CLI (cli/client.py)
    "MusterLeaseGrace": ("lease_grace", "int"),  # controller.leases
}

# Keys real Slurm configurations use that Muster accepts but does not act on.
_ACCEPTED_GLOBALS = (
    "AccountingStorageBackupHost AccountingStorageExternalHost AccountingStorageHost "
    "AccountingStorageLoc AccountingStorageParameters AccountingStoragePass "
    "AccountingStoragePort AccountingStorageUser AccountingStoreFlags AccountingStoreJobComment "
    "AcctGatherEnergyType AcctGatherFilesystemType AcctGatherInterconnectType AcctGatherNodeFreq "
    "AcctGatherProfileType AllowSpecResourcesUsage AuthAltParameters AuthAltTypes "
    "BackupAddr BackupController BatchStartTimeout BcastExclude BcastParameters BurstBufferType "
    "CertmgrParameters CertmgrType CheckpointType ChosLoc CliFilterPlugins "
    "CommunicationParameters CoreSpecPlugin CpuFreqDef CpuFreqGovernors DataParserParameters "
    "DebugFlags DefaultStorageHost DefaultStorageLoc DefaultStoragePass DefaultStoragePort "
    "DefaultStorageType DefaultStorageUser DisableRootJobs EioTimeout EpilogMsgTime "
    "ExtSensorsFreq ExtSensorsType FastSchedule FederationParameters "
    "GetEnvTimeout GpuFreqDef GroupUpdateForce GroupUpdateTime HashPlugin HealthCheckNodeState "
    "InteractiveStepOptions JobAcctGatherParams JobCheckpointDir JobCompHost JobCompLoc "
    "JobCompParams JobCompPass JobCompPort JobCompUser JobContainerType "
    "JobCredentialPrivateKey JobCredentialPublicCertificate JobDefaults JobSubmitPlugins "
    "KeepAliveTime LaunchType Licenses LogTimeFormat MailDomain MaxDBDMsgs MaxNodeCount "
    "MCSParameters MCSPlugin MemLimitEnforce MetricsType MpiParams NodeFeaturesPlugins "
    "PluginDir PlugStackConfig PowerParameters PowerPlugin PreemptParameters PrEpParameters "
    "PrEpPlugins PriorityParameters PrioritySiteFactorParameters PrioritySiteFactorPlugin "
    "PrivateData PropagatePrioProcess "
    "PropagateResourceLimits PropagateResourceLimitsExcept RebootProgram ReconfigFlags "
    "ResumeFailProgram ResumeProgram ResumeRate ResumeTimeout ResvEpilog ResvProlog "
    "RoutePlugin SallocDefaultCommand SchedulerTimeSlice ScronParameters SlurmctldDebug "
    "SlurmctldPlugstack SlurmctldPrimaryOffProg SlurmctldPrimaryOnProg SlurmctldSyslogDebug "
    "SlurmdDebug SlurmdSyslogDebug SlurmSchedLogFile SlurmSchedLogLevel SrunEpilog "
    "SrunPortRange SrunProlog SuspendExcNodes SuspendExcParts SuspendExcStates SuspendProgram "
    "SuspendRate SuspendTime SuspendTimeout SwitchParameters SwitchType TaskPluginParam "
    "TCPTimeout TLSParameters TLSType TopologyParam TrackWCKey UnkillableStepProgram UsePAM "
    "VSizeFactor X11Parameters"
).split()

ACCEPTED_KEYS: frozenset[str] = frozenset(_ACCEPTED_GLOBALS)
"""Global keys accepted (kept in ``raw``) but not interpreted by Muster."""

_GLOBAL_CANON: dict[str, str] = {k.lower(): k for k in (*_TYPED_GLOBALS, *_ACCEPTED_GLOBALS)}

_NODE_KEYS = {
    k.lower(): k
    for k in (
        "NodeName NodeHostname NodeAddr BcastAddr Port CPUs Procs Boards Sockets "
        "SocketsPerBoard CoresPerSocket ThreadsPerCore RealMemory TmpDisk Weight Gres "
        "Feature Features AvailableFeatures ActiveFeatures State Reason MemSpecLimit "
        "CoreSpecCount CpuSpecList CpuBind "
        "RestrictedCoresPerGPU Topology Parameters"
    ).split()
}
_PART_KEYS = {
    k.lower(): k
    for k in (
        "PartitionName Nodes Default State MaxTime DefaultTime MaxNodes MinNodes "
        "MaxCPUsPerNode MaxCPUsPerSocket PriorityTier PriorityJobFactor Priority OverSubscribe "
        "Shared AllowAccounts AllowGroups AllowQos DenyAccounts DenyQos QOS PreemptMode "
        "GraceTime ExclusiveUser ExclusiveTopo Hidden RootOnly ReqResv LLN DefMemPerCPU "
        "DefMemPerNode DefMemPerGPU MaxMemPerCPU MaxMemPerNode DefCpuPerGPU TRESBillingWeights "
        "OverTimeLimit SelectTypeParameters Alternate AllocNodes DisableRootJobs CpuBind "
        "JobDefaults PowerDownOnIdle ResumeTimeout SuspendTime SuspendTimeout Topology"
    ).split()
}
_DOWN_KEYS = {k.lower(): k for k in ("DownNodes", "State", "Reason")}
_NODESET_KEYS = {k.lower(): k for k in ("NodeSet", "Nodes", "Feature")}
_GRES_KEYS = {
    k.lower(): k
    for k in "NodeName Name Type File Count Cores CPUs Links Flags AutoDetect MultipleFiles".split()
}

_NODE_STATES = {"UNKNOWN", "CLOUD", "DOWN", "DRAIN", "FAIL", "FUTURE", "IDLE"}
_DOWN_STATES = {"DOWN", "DRAIN", "FAIL", "FAILING", "UNKNOWN", "FUTURE"}
_PART_STATES = {"UP", "DOWN", "DRAIN", "INACTIVE"}
_AUTODETECT = {"nvml", "rsmi", "oneapi", "nrt", "nvidia", "off"}

# ---------------------------------------------------------------------------------------------
# lexical layer


@dataclass(slots=True)
class _Line:
    file: str
    lineno: int
    tokens: list[tuple[str, str]]  # (key as written, value); value None-free


def _err(file: str, lineno: int, what: str) -> ConfigError:
    return ConfigError(f"{file}:{lineno}: {what}")


def _strip_comment(line: str, in_quote: bool) -> tuple[str, bool, bool]:
    """Cut an unescaped ``#`` outside quotes.  Escapes are kept (resolved when tokenizing)."""
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c == "\\" and i + 1 < n and line[i + 1] in "#\\":
            i += 2
            continue
        if c == '"':
            in_quote = not in_quote
        elif c == "#" and not in_quote:
            return line[:i], in_quote, True
        i += 1
    return line, in_quote, False


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join continuation lines and drop comments: [(first physical line number, text)]."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    in_quote = False
    for lineno, raw in enumerate(text.splitlines(), 1):
        if not buf:
            start = lineno
            in_quote = False
        code, in_quote, commented = _strip_comment(raw, in_quote)
        if not commented:
            code = code.rstrip()
            trailing = len(code) - len(code.rstrip("\\"))
            if trailing % 2 == 1:
                buf.append(code[:-1])
                continue
        buf.append(code)
        out.append((start, "".join(buf)))
        buf = []
    if buf:
        out.append((start, "".join(buf)))
    return out


def _tokenize(text: str, file: str, lineno: int) -> list[tuple[str, str | None]]:
    """Split a logical line into (key, value) pairs; value None for a bare word."""
    tokens: list[tuple[str, str | None]] = []
    i, n = 0, len(text)
    while i < n:
        if text[i].isspace():
            i += 1
            continue
        key: list[str] = []
        val: list[str] = []
        cur = key
        seen_eq = False
        in_quote = False
        while i < n:
            c = text[i]
            if c == "\\" and i + 1 < n and text[i + 1] in "#\\":
                cur.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_quote = not in_quote
                i += 1
                continue
            if not in_quote and c.isspace():
                break
            if c == "=" and not seen_eq and not in_quote:
                seen_eq = True
                cur = val
                i += 1
                continue
            cur.append(c)
            i += 1
        if in_quote:
            raise _err(file, lineno, "unterminated quote")
        k = "".join(key)
        if seen_eq and not k:
            raise _err(file, lineno, f"malformed token '={''.join(val)}' (missing key)")
        tokens.append((k, "".join(val) if seen_eq else None))
    return tokens


def _read_records(path: str, cluster_name: list[str], depth: int = 0) -> list[_Line]:
    """Read one config file (following Include) into tokenized lines."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file") from None
    conf_dir = os.path.dirname(os.path.abspath(path))
    out: list[_Line] = []
    for lineno, text_line in _logical_lines(text):
        stripped = text_line.strip()
        if not stripped:
            continue
        m = re.match(r"(?i)include\s+(.+)$", stripped)
        if m:
            if depth >= _MAX_INCLUDE_DEPTH:
                raise _err(path, lineno, "Include nested too deeply")
            inc = _tokenize(m.group(1), path, lineno)
            if len(inc) != 1 or inc[0][1] is not None:
                raise _err(path, lineno, f"malformed Include '{m.group(1).strip()}'")
            target = inc[0][0].replace("%c", cluster_name[0] if cluster_name else "")
            if not os.path.isabs(target):
                target = os.path.join(conf_dir, target)
            if any(ch in target for ch in "*?["):
                matches = sorted(glob.glob(target))
                if not matches:
                    raise _err(path, lineno, f"Include '{inc[0][0]}' matches no file")
            else:
                if not os.path.isfile(target):
                    raise _err(path, lineno, f"Include file '{inc[0][0]}' not found")
                matches = [target]
            for t in matches:
                out.extend(_read_records(t, cluster_name, depth + 1))
            continue
        tokens = _tokenize(stripped, path, lineno)
        pairs: list[tuple[str, str]] = []
        for k, v in tokens:
            if v is None:
                raise _err(path, lineno, f"malformed token '{k}' (expected Key=Value)")
            pairs.append((k, v))
        rec = _Line(path, lineno, pairs)
        out.append(rec)
        # Track ClusterName for %c in later Include lines.
        for k, v in pairs:
            if k.lower() == "clustername":
                cluster_name[:] = [v]
    return out


# ---------------------------------------------------------------------------------------------
# value parsers (all raise ConfigError with file:line)


class _Ctx:
    __slots__ = ("file", "lineno")

    def __init__(self, file: str, lineno: int):
        self.file = file
        self.lineno = lineno

    def err(self, what: str) -> ConfigError:
        return _err(self.file, self.lineno, what)

    def bad(self, key: str, value: str, why: str = "") -> ConfigError:
        return self.err(f"invalid value for '{key}': '{value}'" + (f" ({why})" if why else ""))


_UNLIMITED = {"UNLIMITED", "INFINITE", "INFINITY"}
_FEATURE_OPS = set("&|*()[]! \t")  # --constraint operators: never part of a feature name


def _p_int(ctx: _Ctx, key: str, value: str, minimum: int = 0) -> int:
    v = value.strip()
    if not re.fullmatch(r"[+-]?\d+", v):
        raise ctx.bad(key, value, "expected an integer")
    n = int(v)
    if n < minimum:
        raise ctx.bad(key, value, f"must be >= {minimum}")
    return n


def _p_int_unlimited(ctx: _Ctx, key: str, value: str, minimum: int = 0) -> int | None:
    if value.strip().upper() in _UNLIMITED:
        return None
    return _p_int(ctx, key, value, minimum)


def _p_bool(ctx: _Ctx, key: str, value: str) -> bool:
    v = value.strip().upper()
    if v in ("YES", "Y", "TRUE", "1", "ON"):
        return True
    if v in ("NO", "N", "FALSE", "0", "OFF"):
        return False
    raise ctx.bad(key, value, "expected YES or NO")


def _p_time(ctx: _Ctx, key: str, value: str) -> int | None:
    """Minutes, None = UNLIMITED."""
    try:
        return timefmt.parse_time_limit(value.strip())
    except InputError as e:
        raise ctx.bad(key, value, e.message) from None


def _p_time_sec(ctx: _Ctx, key: str, value: str) -> int:
    """A duration in seconds. A bare 0 is zero (PriorityDecayHalfLife=0: no decay), not
    the UNLIMITED that 0 means for a job's time limit."""
    if value.strip() == "0":
        return 0
    minutes = _p_time(ctx, key, value)
    if minutes is None:
        raise ctx.bad(key, value, "UNLIMITED not allowed")
    return minutes * 60


def _p_mem(ctx: _Ctx, key: str, value: str) -> int:
    try:
        mb = units.parse_mem(value.strip())
    except InputError as e:
        raise ctx.bad(key, value, e.message) from None
    if mb < 0:
        raise ctx.bad(key, value, "negative")
    return mb


def _p_mem0(ctx: _Ctx, key: str, value: str) -> int:
    if value.strip().upper() in _UNLIMITED:
        return 0
    return _p_mem(ctx, key, value)


def _p_list(value: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in value.split(",") if x.strip())


def _p_intlist(ctx: _Ctx, key: str, value: str) -> tuple[int, ...]:
    out: list[int] = []
    for item in _p_list(value):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", item)
        if not m:
            raise ctx.bad(key, value)
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo or hi - lo > 65536:
            raise ctx.bad(key, value, "bad range")
        out.extend(range(lo, hi + 1))
    return tuple(out)


def _p_hostlist(ctx: _Ctx, key: str, value: str) -> list[str]:
    try:
        names = hostlist.expand(value)
    except InputError:
        raise ctx.err(f"invalid hostlist for '{key}': '{value}'") from None
    if not names:
        raise ctx.err(f"empty hostlist for '{key}'")
    return names


def _p_ports(ctx: _Ctx, key: str, value: str) -> list[int]:
    body = value.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    ports = _p_intlist(ctx, key, body)
    if not ports:
        raise ctx.bad(key, value)
    for p in ports:
        if not 1 <= p <= 65535:
            raise ctx.bad(key, value, "port out of range")
    return list(ports)


def _p_count(ctx: _Ctx, key: str, value: str) -> int:
    m = re.fullmatch(r"(\d+)([kKmMgG]?)", value.strip())
    if not m:
        raise ctx.bad(key, value, "expected a count")
    mult = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[m.group(2).lower()]
    return int(m.group(1)) * mult


def _p_cores(ctx: _Ctx, key: str, value: str) -> tuple[int, ...]:
    return _p_intlist(ctx, key, value)


def _p_global(ctx: _Ctx, key: str, kind: str, value: str):
    if kind == "str":
        return value
    if kind == "optstr":
        return value or None
    if kind == "upper":
        return value.strip().upper()
    if kind == "int":
        return _p_int(ctx, key, value)
    if kind == "int_unlimited":
        return _p_int_unlimited(ctx, key, value)
    if kind == "port":
        p = _p_int(ctx, key, value, 1)
        if p > 65535:
            raise ctx.bad(key, value, "port out of range")
        return p
    if kind == "bool":
        return _p_bool(ctx, key, value)
    if kind == "time_sec":
        return _p_time_sec(ctx, key, value)
    if kind == "mem0":
        return _p_mem0(ctx, key, value)
    if kind == "list":
        return _p_list(value)
    if kind == "list_upper":
        return tuple(x.upper() for x in _p_list(value))
    if kind == "list_lower":
        return tuple(x.lower() for x in _p_list(value))
    if kind == "intlist":
        return _p_intlist(ctx, key, value)
    if kind == "kvdict":
        d: dict[str, str] = {}
        for item in _p_list(value):
            k, _, v = item.partition("=")
            d[k.strip().lower()] = v.strip()
        return d
    if kind == "tresweights":
        tw: dict[str, float] = {}
        for item in _p_list(value):
            k, sep, v = item.partition("=")
            try:
                tw[k.strip().lower()] = float(v)
            except ValueError:
                raise ctx.bad(key, value) from None
            if not sep:
                raise ctx.bad(key, value)
        return tw
    if kind == "rts":
        n = _p_int(ctx, key, value)
        if n > 2:
            raise ctx.bad(key, value, "expected 0, 1 or 2")
        return n
    if kind == "enforce":
        v = value.strip().upper()
        if v == "YES":
            v = "ALL"
        if v not in ("NO", "ALL", "ANY"):
            raise ctx.bad(key, value, "expected NO, ALL or ANY")
        return v
    raise AssertionError(kind)  # pragma: no cover


# ---------------------------------------------------------------------------------------------
# record parsing


@dataclass(slots=True)
class _Val:
    value: str
    file: str
    lineno: int


def _canon_tokens(line: _Line, table: dict[str, str]) -> dict[str, _Val]:
    out: dict[str, _Val] = {}
    for k, v in line.tokens:
        canon = table.get(k.lower())
        if canon is None:
            raise _err(line.file, line.lineno, f"unknown parameter '{k}'")
        out[canon] = _Val(v, line.file, line.lineno)
    # aliases
    if "Procs" in out and "CPUs" not in out:
        out["CPUs"] = out.pop("Procs")
    if table is _NODE_KEYS:
        for alias in ("Feature", "AvailableFeatures"):
            if alias in out and "Features" not in out:
                out["Features"] = out.pop(alias)
    if "Shared" in out and "OverSubscribe" not in out:
        out["OverSubscribe"] = out.pop("Shared")
    return out


def _spread(ctx: _Ctx, key: str, values: list, n: int, what: str) -> list:
    if len(values) == 1:
        return values * n
    if len(values) != n:
        raise ctx.err(f"{key} has {len(values)} {what} for {n} nodes")
    return values


def _parse_node_gres(ctx: _Ctx, value: str) -> list[dict]:
    out: list[dict] = []
    seen: set[tuple[str, str | None]] = set()
    for item in _p_list(value):
        parts = item.split(":")
        name = parts[0].strip()
        if not name or not re.fullmatch(r"[A-Za-z0-9_./-]+", name):
            raise ctx.bad("Gres", value)
        rest = [p.strip() for p in parts[1:]]
        count = 1
        if rest and re.fullmatch(r"\d+[kKmMgG]?", rest[-1]):
            count = _p_count(ctx, "Gres", rest.pop())
        no_consume = False
        gtype = None
        for p in rest:
            if p.lower() == "no_consume":
                no_consume = True
            elif gtype is None and p and re.fullmatch(r"[A-Za-z0-9_.-]+", p):
                gtype = p
            else:
                raise ctx.bad("Gres", value)
        if (name, gtype) in seen:
            raise ctx.bad("Gres", value, f"'{item}' given twice")
        seen.add((name, gtype))
        out.append({"name": name, "type": gtype, "count": count, "no_consume": no_consume})
    return out


def _build_nodes(
    line: _Line,
    tok: dict[str, _Val],
    defaults: dict[str, _Val],
    warnings: list[str],
) -> list[dict]:
    """Expand one NodeName line into per-node dicts (gres not yet merged with gres.conf)."""
    ctx = _Ctx(line.file, line.lineno)
    merged = {**defaults, **tok}
    names = _p_hostlist(ctx, "NodeName", tok["NodeName"].value)
    n = len(names)

    def vctx(key: str) -> _Ctx:
        v = merged[key]
        return _Ctx(v.file, v.lineno)

    def get_int(key: str, minimum: int = 0) -> int | None:
        if key not in merged:
            return None
        return _p_int(vctx(key), key, merged[key].value, minimum)

    hostnames = (
        _spread(ctx, "NodeHostname", _p_hostlist(vctx("NodeHostname"), "NodeHostname",
                                                  merged["NodeHostname"].value), n, "names")
        if "NodeHostname" in merged
        else list(names)
    )
    addrs = (
        _spread(ctx, "NodeAddr", _p_hostlist(vctx("NodeAddr"), "NodeAddr",
                                              merged["NodeAddr"].value), n, "addresses")
        if "NodeAddr" in merged
        else list(hostnames)
    )
    ports: list[int | None] = [None] * n
    if "Port" in merged:
        ports = _spread(ctx, "Port", _p_ports(vctx("Port"), "Port", merged["Port"].value), n,
                        "ports")

    boards = get_int("Boards", 1) or 1
    spb = get_int("SocketsPerBoard", 1)
    sockets_given = get_int("Sockets", 1)
    cores = get_int("CoresPerSocket", 1) or 1
    threads = get_int("ThreadsPerCore", 1) or 1
    cpus = get_int("CPUs", 1)
    if spb is not None:
        sockets = boards * spb
    elif sockets_given is not None:
        sockets = sockets_given
    elif cpus is not None:
        sockets = max(1, cpus // (cores * threads))
    else:
        sockets = boards
    computed = sockets * cores * threads
    if cpus is None:
        cpus = computed
    elif cpus not in (computed, sockets * cores) and any(
        k in merged for k in ("Sockets", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")
    ):
        warnings.append(
            f"{line.file}:{line.lineno}: NodeName={tok['NodeName'].value} CPUs={cpus} doesn't "
            f"match Sockets*CoresPerSocket*ThreadsPerCore ({computed}), resetting CPUs"
        )
        cpus = computed

    real_memory = _p_mem(vctx("RealMemory"), "RealMemory", merged["RealMemory"].value) \
        if "RealMemory" in merged else 1
    tmp_disk = _p_mem(vctx("TmpDisk"), "TmpDisk", merged["TmpDisk"].value) \
        if "TmpDisk" in merged else 0
    weight = get_int("Weight", 0)
    weight = 1 if weight is None else weight
    features = _p_list(merged["Features"].value) if "Features" in merged else ()
    active = _p_list(merged["ActiveFeatures"].value) if "ActiveFeatures" in merged else None
    bad = [f for f in features if set(f) & _FEATURE_OPS]
    if bad:
        raise vctx("Features").bad("Features", merged["Features"].value,
                                   "a feature name cannot contain any of & | * ( ) [ ] !")
    if active is not None and not set(active) <= set(features):
        raise vctx("ActiveFeatures").bad("ActiveFeatures", merged["ActiveFeatures"].value,
                                         "must be a subset of Features")
    gres = _parse_node_gres(vctx("Gres"), merged["Gres"].value) if "Gres" in merged else []
    state = "UNKNOWN"
    if "State" in merged:
        state = merged["State"].value.strip().upper()
        if state not in _NODE_STATES:
            raise vctx("State").bad("State", merged["State"].value,
                                    "expected one of " + "|".join(sorted(_NODE_STATES)))
    reason = merged["Reason"].value if "Reason" in merged and merged["Reason"].value else None
    mem_spec = _p_mem(vctx("MemSpecLimit"), "MemSpecLimit", merged["MemSpecLimit"].value) \
        if "MemSpecLimit" in merged else 0
    core_spec = get_int("CoreSpecCount") or 0
    cpu_spec = merged["CpuSpecList"].value if "CpuSpecList" in merged else None

    out = []
    for i, name in enumerate(names):
        out.append(
            dict(
                name=name,
                addr=addrs[i],
                hostname=hostnames[i],
                port=ports[i],
                cpus=cpus,
                boards=boards,
                sockets=sockets,
                cores_per_socket=cores,
                threads_per_core=threads,
                real_memory=real_memory,
                tmp_disk=tmp_disk,
                weight=weight,
                features=features,
                active_features=active,
                gres=gres,
                state=state,
                reason=reason,
                mem_spec_limit=mem_spec,
                core_spec_count=core_spec,
                cpu_spec_list=cpu_spec,
                _where=(line.file, line.lineno),
            )
        )
    return out


def _opt_names(value: str) -> tuple[str, ...] | None:
    items = _p_list(value)
    if not items or any(x.upper() == "ALL" for x in items):
        return None
    return items


def _build_partition(
    line: _Line,
    tok: dict[str, _Val],
    defaults: dict[str, _Val],
    resolve_nodes,
) -> PartitionConf:
    merged = {**defaults, **tok}
    name = tok["PartitionName"].value

    def c(key: str) -> _Ctx:
        return _Ctx(merged[key].file, merged[key].lineno)

    def has(key: str) -> bool:
        return key in merged

    def val(key: str) -> str:
        return merged[key].value

    kw: dict = {}
    nodes_expr = val("Nodes") if has("Nodes") else ""
    nodes = resolve_nodes(c("Nodes"), nodes_expr) if nodes_expr else ()
    if has("Default"):
        kw["default"] = _p_bool(c("Default"), "Default", val("Default"))
    if has("State"):
        st = val("State").strip().upper()
        if st not in _PART_STATES:
            raise c("State").bad("State", val("State"), "expected UP, DOWN, DRAIN or INACTIVE")
        kw["state"] = st
    if has("MaxTime"):
        kw["max_time"] = _p_time(c("MaxTime"), "MaxTime", val("MaxTime"))
    if has("DefaultTime"):
        kw["default_time"] = _p_time(c("DefaultTime"), "DefaultTime", val("DefaultTime"))
    if has("MaxNodes"):
        kw["max_nodes"] = _p_int_unlimited(c("MaxNodes"), "MaxNodes", val("MaxNodes"))
    if has("MinNodes"):
        kw["min_nodes"] = _p_int(c("MinNodes"), "MinNodes", val("MinNodes"))
    if has("MaxCPUsPerNode"):
        kw["max_cpus_per_node"] = _p_int_unlimited(c("MaxCPUsPerNode"), "MaxCPUsPerNode",
                                                   val("MaxCPUsPerNode"))
    if has("Priority"):  # pre-16.05 spelling sets both
        p = _p_int(c("Priority"), "Priority", val("Priority"))
        kw["priority_tier"] = kw["priority_job_factor"] = p
    if has("PriorityTier"):
        kw["priority_tier"] = _p_int(c("PriorityTier"), "PriorityTier", val("PriorityTier"))
    if has("PriorityJobFactor"):
        kw["priority_job_factor"] = _p_int(c("PriorityJobFactor"), "PriorityJobFactor",
                                           val("PriorityJobFactor"))
    for key, attr in (("AllowAccounts", "allow_accounts"), ("AllowGroups", "allow_groups"),
                      ("AllowQos", "allow_qos")):
        if has(key):
            kw[attr] = _opt_names(val(key))
    for key, attr in (("DenyAccounts", "deny_accounts"), ("DenyQos", "deny_qos")):
        if has(key):
            kw[attr] = _p_list(val(key)) or None
    if has("QOS"):
        kw["qos"] = val("QOS") or None
    if has("OverSubscribe"):
        v = val("OverSubscribe").strip().upper()
        m = re.fullmatch(r"(NO|EXCLUSIVE|YES|FORCE)(?::(\d+))?", v)
        if not m or (m.group(2) and m.group(1) in ("NO", "EXCLUSIVE")):
            raise c("OverSubscribe").bad("OverSubscribe", val("OverSubscribe"),
                                         "expected NO, EXCLUSIVE, YES[:N] or FORCE[:N]")
        kw["over_subscribe"] = v
    if has("GraceTime"):
        kw["grace_time"] = _p_int(c("GraceTime"), "GraceTime", val("GraceTime"))
    for key, attr in (("Hidden", "hidden"), ("ExclusiveUser", "exclusive_user"),
                      ("RootOnly", "root_only"), ("ReqResv", "req_resv"), ("LLN", "lln"),
                      ("DisableRootJobs", "disable_root_jobs")):
        if has(key):
            kw[attr] = _p_bool(c(key), key, val(key))
    for key, attr in (("DefMemPerCPU", "def_mem_per_cpu"), ("DefMemPerNode", "def_mem_per_node"),
                      ("DefMemPerGPU", "def_mem_per_gpu"), ("MaxMemPerCPU", "max_mem_per_cpu"),
                      ("MaxMemPerNode", "max_mem_per_node")):
        if has(key):
            kw[attr] = _p_mem0(c(key), key, val(key))
    if has("DefCpuPerGPU"):
        kw["def_cpu_per_gpu"] = _p_int(c("DefCpuPerGPU"), "DefCpuPerGPU", val("DefCpuPerGPU"))
    if has("PreemptMode"):
        kw["preempt_mode"] = val("PreemptMode").strip().upper() or None
    if has("OverTimeLimit"):
        kw["over_time_limit"] = _p_int_unlimited(c("OverTimeLimit"), "OverTimeLimit",
                                                 val("OverTimeLimit"))
    if has("TRESBillingWeights"):
        kw["tres_billing_weights"] = val("TRESBillingWeights") or None
    if has("Alternate"):
        kw["alternate"] = val("Alternate") or None
    if has("AllocNodes"):
        an = val("AllocNodes")
        kw["allow_nodes"] = None if an.upper() == "ALL" or not an else an
    return PartitionConf(name=name, nodes=tuple(nodes), nodes_expr=nodes_expr, **kw)


# ---------------------------------------------------------------------------------------------
# gres.conf


@dataclass(slots=True)
class _GresLine:
    file: str
    lineno: int
    nodes: list[str] | None  # None = every node
    name: str
    type: str | None
    count: int
    files: tuple[str, ...]
    cores: tuple[int, ...] | None
    flags: tuple[str, ...]


def _read_gres_conf(path: str, cluster: list[str], gres_types: tuple[str, ...]):
    autodetect: str | None = None
    lines: list[_GresLine] = []
    for rec in _read_records(path, cluster):
        ctx = _Ctx(rec.file, rec.lineno)
        tok = _canon_tokens(rec, _GRES_KEYS)
        if "AutoDetect" in tok:
            ad = tok["AutoDetect"].value.strip().lower()
            if ad not in _AUTODETECT:
                raise ctx.bad("AutoDetect", tok["AutoDetect"].value,
                              "expected nvml, rsmi, oneapi, nrt or off")
            if "NodeName" not in tok:
                autodetect = ad
        if "Name" not in tok:
            if set(tok) - {"NodeName", "AutoDetect"}:
                raise ctx.err("missing 'Name'")
            if "AutoDetect" not in tok:
                raise ctx.err("missing 'Name'")
            continue
        name = tok["Name"].value.strip()
        if name not in gres_types:
            raise ctx.err(f"gres '{name}' is not listed in GresTypes")
        nodes = _p_hostlist(ctx, "NodeName", tok["NodeName"].value) if "NodeName" in tok else None
        files: tuple[str, ...] = ()
        if "File" in tok:
            files = tuple(_p_hostlist(ctx, "File", tok["File"].value))
        if "MultipleFiles" in tok:
            files = tuple(_p_hostlist(ctx, "MultipleFiles", tok["MultipleFiles"].value))
        if "Count" in tok:
            count = _p_count(ctx, "Count", tok["Count"].value)
            if files and count != len(files):
                raise ctx.err(f"Count={count} does not match the {len(files)} File entries")
        else:
            count = len(files) if files else 1
        cores = None
        ckey = "Cores" if "Cores" in tok else ("CPUs" if "CPUs" in tok else None)
        if ckey:
            cores = _p_cores(ctx, ckey, tok[ckey].value)
        gtype = tok["Type"].value.strip() or None if "Type" in tok else None
        flags = _p_list(tok["Flags"].value) if "Flags" in tok else ()
        lines.append(_GresLine(rec.file, rec.lineno, nodes, name, gtype, count, files, cores,
                               flags))
    return autodetect, lines


def _merge_gres(node: dict, glines: list[_GresLine]) -> tuple[GresConf, ...]:
    """Combine the node's slurm.conf Gres specs with the gres.conf lines naming it."""
    nfile, nline = node["_where"]
    specs = node["gres"]
    mine = [g for g in glines if g.nodes is None or node["name"] in g.nodes]
    out: list[GresConf] = []
    next_index: dict[str, int] = {}
    # assign gres.conf lines to specs
    assigned: dict[int, list[_GresLine]] = {i: [] for i in range(len(specs))}
    for g in mine:
        candidates = [i for i, s in enumerate(specs) if s["name"] == g.name]
        if not candidates:
            raise _err(g.file, g.lineno,
                       f"gres '{g.name}' configured for node {node['name']} but its slurm.conf "
                       f"line ({nfile}:{nline}) has no Gres={g.name}")
        if g.type is not None:
            match = [i for i in candidates if specs[i]["type"] == g.type]
        else:
            match = [i for i in candidates if specs[i]["type"] is None]
            if not match and len(candidates) == 1:
                match = candidates
        if not match:
            raise _err(g.file, g.lineno,
                       f"gres '{g.name}' Type={g.type} for node {node['name']} does not match "
                       f"its slurm.conf Gres")
        assigned[match[0]].append(g)
    # indices per gres name follow gres.conf order; specs without lines are numbered after.
    order = sorted(range(len(specs)),
                   key=lambda i: (min((mine.index(g) for g in assigned[i]), default=len(mine)),
                                  i))
    built: dict[int, GresConf] = {}
    for i in order:
        spec = specs[i]
        lines = assigned[i]
        start = next_index.get(spec["name"], 0)
        if lines:
            total = sum(g.count for g in lines)
            if total != spec["count"]:
                g0 = lines[0]
                raise _err(g0.file, g0.lineno,
                           f"node {node['name']}: gres.conf has {total} {spec['name']}"
                           + (f":{spec['type']}" if spec["type"] else "")
                           + f" but slurm.conf ({nfile}:{nline}) says {spec['count']}")
            files: list[str] = []
            cores: list[tuple[int, ...]] = []
            any_cores = any(g.cores is not None for g in lines)
            flags: list[str] = []
            for g in lines:
                files.extend(g.files)
                if any_cores:
                    cores.extend([g.cores or ()] * g.count)
                for f in g.flags:
                    if f not in flags:
                        flags.append(f)
            gc = GresConf(spec["name"], spec["type"], spec["count"], tuple(files),
                          tuple(range(start, start + spec["count"])), tuple(cores),
                          tuple(flags), spec["no_consume"])
        else:
            gc = GresConf(spec["name"], spec["type"], spec["count"], (),
                          tuple(range(start, start + spec["count"])), (), (),
                          spec["no_consume"])
        next_index[spec["name"]] = start + spec["count"]
        built[i] = gc
    for i in range(len(specs)):
        out.append(built[i])
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# load


def _check_job_limits(path: str, gvals: dict, where: dict[str, tuple[str, int]]) -> None:
    """The limits every submission is checked against must be usable: MaxJobCount >= 1 (as
    slurmctld, which refuses to start with "No jobs permitted"), max_script_size a byte
    count >= 1. ``where``: key -> (file, line) of its last setting, for the message."""
    def at(key: str) -> str:
        return "%s:%d" % where[key] if key in where else path

    if gvals.get("max_job_count", 1) < 1:
        raise ConfigError(f"{at('MaxJobCount')}: MaxJobCount={gvals['max_job_count']}: no jobs "
                          "permitted (must be >= 1)")
    size = (gvals.get("scheduler_parameters") or {}).get("max_script_size")
    if size is not None and (not size.isascii() or not size.isdigit() or int(size) < 1):
        raise ConfigError(f"{at('SchedulerParameters')}: invalid SchedulerParameters "
                          f"max_script_size={size!r} (expected a byte count >= 1)")


def load(path: str) -> ClusterConfig:
    """Read slurm.conf at *path* and gres.conf next to it (if present)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: configuration file not found")
    cluster: list[str] = []
    records = _read_records(path, cluster)
    warnings: list[str] = []

    raw: dict[str, str] = {}
    gvals: dict[str, Any] = {}  # attribute -> parsed value, of each key's own type
    ctld_hosts: list[tuple[str, str | None]] = []
    ctld_addr: str | None = None
    node_defaults: dict[str, _Val] = {}
    part_defaults: dict[str, _Val] = {}
    node_dicts: dict[str, dict] = {}
    part_lines: list[tuple[_Line, dict[str, _Val], dict[str, _Val]]] = []
    down_lines: list[tuple[_Line, dict[str, _Val]]] = []
    nodeset_lines: list[tuple[_Line, dict[str, _Val]]] = []
    seen_global: dict[str, tuple[str, int]] = {}

    for rec in records:
        first = rec.tokens[0][0].lower()
        ctx = _Ctx(rec.file, rec.lineno)
        if first == "nodename":
            tok = _canon_tokens(rec, _NODE_KEYS)
            if tok["NodeName"].value.upper() == "DEFAULT":
                tok.pop("NodeName")
                node_defaults.update(tok)
                continue
            for nd in _build_nodes(rec, tok, node_defaults, warnings):
                if nd["name"] in node_dicts:
                    warnings.append(f"{rec.file}:{rec.lineno}: duplicate node '{nd['name']}' "
                                    "ignored")
                    continue
                node_dicts[nd["name"]] = nd
            continue
        if first == "partitionname":
            tok = _canon_tokens(rec, _PART_KEYS)
            if tok["PartitionName"].value.upper() == "DEFAULT":
                tok.pop("PartitionName")
                part_defaults.update(tok)
                continue
            if not tok["PartitionName"].value:
                raise ctx.err("empty PartitionName")
            part_lines.append((rec, tok, dict(part_defaults)))
            continue
        if first == "downnodes":
            down_lines.append((rec, _canon_tokens(rec, _DOWN_KEYS)))
            continue
        if first == "nodeset":
            nodeset_lines.append((rec, _canon_tokens(rec, _NODESET_KEYS)))
            continue
        if first in ("frontendname", "switchname"):
            raise ctx.err(f"'{rec.tokens[0][0]}' lines are not supported")
        for k, v in rec.tokens:
            canon = _GLOBAL_CANON.get(k.lower())
            if canon is None:
                if k.lower() in _NODE_KEYS or k.lower() in _PART_KEYS:
                    raise ctx.err(f"parameter '{k}' is only valid on a NodeName/PartitionName "
                                  "line")
                raise ctx.err(f"unknown parameter '{k}'")
            if canon in ("SlurmctldHost", "ControlMachine"):
                m = re.fullmatch(r"\s*([^()\s]+)\s*(?:\(\s*([^()\s]+)\s*\))?\s*", v)
                if not m:
                    raise ctx.bad(canon, v, "expected name or name(address)")
                ctld_hosts.append((m.group(1), m.group(2)))
                raw.setdefault("SlurmctldHost", v)
                continue
            if canon in ("SlurmctldAddr", "ControlAddr"):
                ctld_addr = v or None
                raw["SlurmctldAddr"] = v
                continue
            if canon in seen_global:
                f0, l0 = seen_global[canon]
                warnings.append(f"{rec.file}:{rec.lineno}: {canon} specified more than once "
                                f"(also {f0}:{l0}), latest value used")
            seen_global[canon] = (rec.file, rec.lineno)
            raw[canon] = v
            if canon in _TYPED_GLOBALS:
                attr, kind = _TYPED_GLOBALS[canon]
                gvals[attr] = _p_global(ctx, canon, kind, v)

    # --- required globals ------------------------------------------------------------------
    cluster_name = gvals.get("cluster_name")
    if not cluster_name:
        raise ConfigError(f"{path}: missing required parameter 'ClusterName'")
    if cluster_name != cluster_name.lower():
        warnings.append(f"{path}: ClusterName '{cluster_name}' converted to lower case")
        gvals["cluster_name"] = cluster_name.lower()
    if not ctld_hosts:
        raise ConfigError(f"{path}: missing required parameter 'SlurmctldHost'")
    _check_job_limits(path, gvals, seen_global)
    gvals["slurmctld_host"] = ctld_hosts[0][0]
    gvals["slurmctld_addr"] = ctld_hosts[0][1] or ctld_addr or ctld_hosts[0][0]
    gvals["slurmctld_hosts"] = tuple(h for h, _ in ctld_hosts)
    gvals["slurmctld_addrs"] = (gvals["slurmctld_addr"],) + tuple(a or h for h, a in ctld_hosts[1:])

    # --- gres.conf ---------------------------------------------------------------------------
    gres_types = gvals.get("gres_types", ())
    for nd in node_dicts.values():
        for spec in nd["gres"]:
            if spec["name"] not in gres_types:
                f, ln = nd["_where"]
                raise _err(f, ln, f"node {nd['name']}: gres '{spec['name']}' is not listed in "
                                  "GresTypes")
    gres_path = os.path.join(os.path.dirname(os.path.abspath(path)), "gres.conf")
    glines: list[_GresLine] = []
    if os.path.isfile(gres_path):
        gvals["gres_conf_path"] = gres_path
        autodetect, glines = _read_gres_conf(gres_path, [gvals["cluster_name"]], gres_types)
        gvals["gres_autodetect"] = autodetect
        for g in glines:
            if g.nodes is not None:
                unknown = [n for n in g.nodes if n not in node_dicts]
                if unknown:
                    warnings.append(f"{g.file}:{g.lineno}: gres.conf names unknown node(s) "
                                    f"{','.join(unknown)}; ignored")

    nodes: dict[str, NodeConf] = {}
    for name, nd in node_dicts.items():
        gres = _merge_gres(nd, glines)
        kw = {k: v for k, v in nd.items() if not k.startswith("_")}
        kw["gres"] = gres
        nodes[name] = NodeConf(**kw)

    # --- NodeSet / DownNodes ----------------------------------------------------------------
    nodesets: dict[str, tuple[str, ...]] = {}
    order = {n: i for i, n in enumerate(nodes)}

    def resolve(ctx: _Ctx, expr: str, key: str = "Nodes") -> tuple[str, ...]:
        found: set[str] = set()
        for item in _p_hostlist(ctx, key, expr):
            if item.upper() == "ALL":
                found.update(nodes)
            elif item in nodesets:
                found.update(nodesets[item])
            elif item in nodes:
                found.add(item)
            else:
                raise ctx.err(f"{key} names unknown node '{item}'")
        return tuple(sorted(found, key=order.__getitem__))

    for rec, tok in nodeset_lines:
        ctx = _Ctx(rec.file, rec.lineno)
        name = tok["NodeSet"].value
        members: set[str] = set()
        if "Nodes" in tok:
            members.update(resolve(ctx, tok["Nodes"].value))
        if "Feature" in tok:
            feat = tok["Feature"].value
            members.update(n for n, nc in nodes.items() if feat in nc.features)
        if "Nodes" not in tok and "Feature" not in tok:
            raise ctx.err(f"NodeSet '{name}' needs Nodes= or Feature=")
        nodesets[name] = tuple(sorted(members, key=order.__getitem__))

    for rec, tok in down_lines:
        ctx = _Ctx(rec.file, rec.lineno)
        state = "DOWN"
        if "State" in tok:
            state = tok["State"].value.strip().upper()
            if state not in _DOWN_STATES:
                raise ctx.bad("State", tok["State"].value)
        reason = tok["Reason"].value if "Reason" in tok and tok["Reason"].value else None
        for n in resolve(ctx, tok["DownNodes"].value, "DownNodes"):
            old = nodes[n]
            nodes[n] = NodeConf(**{**_asdict(old), "state": state,
                                   "reason": reason if reason is not None else old.reason})

    # --- partitions -------------------------------------------------------------------------
    partitions: dict[str, PartitionConf] = {}
    default_partition: str | None = None
    for rec, tok, defaults in part_lines:
        part = _build_partition(rec, tok, defaults, resolve)
        if part.name in partitions:
            warnings.append(f"{rec.file}:{rec.lineno}: duplicate partition '{part.name}' "
                            "ignored")
            continue
        if part.default:
            if default_partition is None:
                default_partition = part.name
            else:
                warnings.append(f"{rec.file}:{rec.lineno}: partition '{part.name}' also has "
                                f"Default=YES; keeping '{default_partition}' as the default")
                part = _replace(part, default=False)
        partitions[part.name] = part

    plugin = str(gvals.get("topology_plugin") or "topology/none").lower()
    if plugin in TOPOLOGY_PLUGINS:
        gvals["topology"] = load_topology(os.path.dirname(os.path.abspath(path)), plugin, nodes)
    elif plugin not in ("topology/none", "topology/default", "topology/flat"):
        f, ln = seen_global["TopologyPlugin"]
        raise _err(f, ln, f"TopologyPlugin={gvals['topology_plugin']} is not supported "
                          "(topology/tree, topology/block, topology/none)")
    return ClusterConfig(
        path=path,
        nodes=nodes,
        partitions=partitions,
        nodesets=nodesets,
        default_partition=default_partition,
        raw=raw,
        warnings=tuple(warnings),
        **gvals,
    )


def _asdict(obj) -> dict:
    return {f: getattr(obj, f) for f in obj.__dataclass_fields__}


def _replace(obj, **changes):
    return type(obj)(**{**_asdict(obj), **changes})


# ---------------------------------------------------------------------------------------------
# render


def _fmt_value(value) -> str:
    if isinstance(value, bool):
        s = "YES" if value else "NO"
    elif isinstance(value, (list, tuple)):
        s = ",".join(str(v) for v in value)
    else:
        s = str(value)
    if '"' in s or "\n" in s:
        raise ConfigError(f"cannot write value {s!r}: contains a quote or newline")
    s = s.replace("\\", "\\\\").replace("#", "\\#")
    if not s or any(c.isspace() for c in s):
        s = f'"{s}"'
    return s


def _fmt_line(pairs) -> str:
    return " ".join(f"{k}={_fmt_value(v)}" for k, v in pairs if v is not None)


def render(
    cluster_name: str,
    nodes: list[dict],
    partitions: list[dict],
    globals: dict,  # noqa: A002 - name fixed by the API
) -> tuple[str, str]:
    """Produce (slurm.conf text, gres.conf text) for ``muster up``.

    ``nodes``/``partitions`` are lists of dicts keyed by slurm.conf names (``NodeName``,
    ``PartitionName`` first or anywhere).  A node dict may carry ``"GresConf"``: a list of
    gres.conf line dicts (``{"Name": "gpu", "File": "/dev/nvidia[0-7]"}``) for that node;
    without it, a node with ``Gres`` gets a ``Count=`` line (emulated devices 0..N-1).
    ``globals`` are written in the given order after ClusterName; ``SlurmctldHost`` defaults
    to ``localhost(127.0.0.1)`` and ``GresTypes`` to the gres names the nodes use.
    Values: bool -> YES/NO, list -> comma list, None -> omitted.
    """
    glob_items = {k: v for k, v in globals.items() if v is not None}
    lower = {k.lower(): k for k in glob_items}
    for k in ("clustername",):
        if k in lower:
            glob_items.pop(lower[k])
    gres_names: list[str] = []
    node_lines: list[str] = []
    gres_lines: list[str] = []
    for nd in nodes:
        nd = dict(nd)
        gconf = nd.pop("GresConf", None)
        name_key = next((k for k in nd if k.lower() == "nodename"), None)
        if name_key is None:
            raise ConfigError("render: node without NodeName")
        name = nd.pop(name_key)
        pairs = [("NodeName", name), *nd.items()]
        node_lines.append(_fmt_line(pairs))
        gres_val = next((v for k, v in nd.items() if k.lower() == "gres"), None)
        specs = []
        if gres_val:
            items = gres_val if isinstance(gres_val, (list, tuple)) else str(gres_val).split(",")
            for item in items:
                parts = str(item).strip().split(":")
                if parts[0] not in gres_names:
                    gres_names.append(parts[0])
                specs.append(parts)
        if gconf:
            for gl in gconf:
                gres_lines.append(_fmt_line([("NodeName", name), *gl.items()]))
        else:
            for parts in specs:
                count = parts[-1] if len(parts) > 1 and parts[-1][:1].isdigit() else "1"
                gtype = next((p for p in parts[1:-1] if p.lower() != "no_consume"), None)
                gres_lines.append(_fmt_line([("NodeName", name), ("Name", parts[0]),
                                             ("Type", gtype), ("Count", count)]))
    part_lines = []
    for pd in partitions:
        pd = dict(pd)
        name_key = next((k for k in pd if k.lower() == "partitionname"), None)
        if name_key is None:
            raise ConfigError("render: partition without PartitionName")
        name = pd.pop(name_key)
        part_lines.append(_fmt_line([("PartitionName", name), *pd.items()]))

    head = [
        MARKER,
        "# Written by 'muster up'; edit freely (this marker line lets SLURM_CONF find it).",
        _fmt_line([("ClusterName", cluster_name)]),
    ]
    if "slurmctldhost" not in lower:
        head.append("SlurmctldHost=localhost(127.0.0.1)")
    if gres_names and "grestypes" not in lower:
        head.append(_fmt_line([("GresTypes", gres_names)]))
    for k, v in glob_items.items():
        head.append(_fmt_line([(k, v)]))
    slurm_conf = "\n".join([*head, "", "# nodes", *node_lines, "", "# partitions",
                            *part_lines]) + "\n"
    gres_conf = "\n".join([MARKER, "AutoDetect=off", *gres_lines]) + "\n"
    return slurm_conf, gres_conf
