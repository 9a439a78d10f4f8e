"""``scontrol show config``: every setting slurmctld reports, in its order, with the value
the running configuration has (set in slurm.conf, else the default Muster applies, else
Slurm's documented default for a setting Muster accepts and does not act on).

The key list and order are Slurm 22.05's (scontrol_show_config.txt in the reference
captures). A key Muster interprets is read from :class:`ClusterConfig` (its typed, effective
value); any other from the file's own text (``raw``), or the default below. Only listed keys
are ever printed, so a secret kept in slurm.conf under another key (a storage password)
never reaches a reply.
"""

from __future__ import annotations

import pwd

from muster.common.timefmt import fmt_duration_long, fmt_iso
from muster.config.slurmconf import ClusterConfig

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

# Slurm's defaults for the keys Muster keeps as text (raw) only.
_RAW_DEFAULTS: dict[str, str] = {
    "AccountingStorageBackupHost": "(null)", "AccountingStorageHost": "localhost",
    "AccountingStorageExternalHost": "(null)", "AccountingStorageParameters": "(null)",
    "AccountingStoragePort": "0", "AccountingStorageUser": "N/A",
    "AccountingStoreFlags": "(null)", "AcctGatherEnergyType": "acct_gather_energy/none",
    "AcctGatherFilesystemType": "acct_gather_filesystem/none",
    "AcctGatherInterconnectType": "acct_gather_interconnect/none",
    "AcctGatherNodeFreq": "0 sec", "AcctGatherProfileType": "acct_gather_profile/none",
    "AllowSpecResourcesUsage": "No", "AuthAltTypes": "(null)", "AuthAltParameters": "(null)",
    "BatchStartTimeout": "10 sec", "BcastExclude": "/lib,/usr/lib,/lib64,/usr/lib64",
    "BcastParameters": "(null)", "BurstBufferType": "(null)", "CliFilterPlugins": "(null)",
    "CommunicationParameters": "(null)", "CoreSpecPlugin": "core_spec/none",
    "CpuFreqDef": "Unknown", "CpuFreqGovernors": "OnDemand,Performance,UserSpace",
    "DebugFlags": "(null)", "EioTimeout": "60", "EpilogMsgTime": "2000 usec",
    "ExtSensorsType": "ext_sensors/none", "ExtSensorsFreq": "0 sec",
    "FederationParameters": "(null)", "GetEnvTimeout": "2 sec",
    "GpuFreqDef": "high,memory=high", "GroupUpdateForce": "1", "GroupUpdateTime": "600 sec",
    "HealthCheckNodeState": "ANY",
    "InteractiveStepOptions": "--interactive --preserve-env --pty $SHELL",
    "JobAcctGatherParams": "(null)", "JobCompHost": "localhost",
    "JobCompLoc": "/var/log/slurm_jobcomp.log", "JobCompPort": "0", "JobCompUser": "root",
    "JobContainerType": "job_container/none", "JobCredentialPrivateKey": "(null)",
    "JobCredentialPublicCertificate": "(null)", "JobDefaults": "(null)",
    "JobSubmitPlugins": "(null)", "LaunchType": "launch/slurm", "Licenses": "(null)",
    "LogTimeFormat": "iso8601_ms", "MailDomain": "(null)", "MCSPlugin": "mcs/none",
    "MCSParameters": "(null)", "MpiParams": "(null)", "NodeFeaturesPlugins": "(null)",
    "PluginDir": "/usr/local/lib/slurm", "PlugStackConfig": "(null)",
    "PowerParameters": "(null)", "PowerPlugin": "", "PrEpParameters": "(null)",
    "PrEpPlugins": "prep/script", "PriorityParameters": "(null)",
    "PrioritySiteFactorParameters": "(null)", "PrioritySiteFactorPlugin": "(null)",
    "PrivateData": "none", "PropagatePrioProcess": "0", "PropagateResourceLimits": "ALL",
    "PropagateResourceLimitsExcept": "(null)", "RebootProgram": "(null)",
    "ReconfigFlags": "(null)", "ResumeFailProgram": "(null)", "ResumeProgram": "(null)",
    "ResumeRate": "300 nodes/min", "ResumeTimeout": "60 sec", "ResvEpilog": "(null)",
    "ResvProlog": "(null)", "RoutePlugin": "route/default", "SchedulerTimeSlice": "30 sec",
    "ScronParameters": "(null)", "SlurmctldDebug": "info", "SlurmctldSyslogDebug": "(null)",
    "SlurmctldPrimaryOffProg": "(null)", "SlurmctldPrimaryOnProg": "(null)",
    "SlurmdDebug": "info", "SlurmdSyslogDebug": "(null)", "SlurmSchedLogFile": "(null)",
    "SlurmSchedLogLevel": "0", "SlurmctldPlugstack": "(null)", "SrunEpilog": "(null)",
    "SrunPortRange": "0-0", "SrunProlog": "(null)", "SuspendExcNodes": "(null)",
    "SuspendExcParts": "(null)", "SuspendProgram": "(null)", "SuspendRate": "60 nodes/min",
    "SuspendTime": "INFINITE", "SuspendTimeout": "30 sec", "SwitchParameters": "(null)",
    "SwitchType": "switch/none", "TaskPluginParam": "(null type)", "TCPTimeout": "2 sec",
    "TopologyParam": "(null)", "TrackWCKey": "No", "UsePam": "No",
    "UnkillableStepProgram": "(null)", "VSizeFactor": "0 percent", "X11Parameters": "(null)",
}

# slurm.conf spells these differently from the report
_RAW_ALIASES = {"UsePam": "UsePAM"}

# Every TRES slurmctld tracks whatever AccountingStorageTRES adds.
_BASE_TRES = ("cpu", "mem", "energy", "node", "billing", "fs/disk", "vmem", "pages")


def _null(v) -> str:
    return "(null)" if v is None or v == "" or v == () else str(v)


def _list(v, empty: str = "(null)") -> str:
    return ",".join(str(x) for x in v) if v else empty


def _user(name: str) -> str:
    try:
        return f"{name}({pwd.getpwnam(name).pw_uid})"
    except KeyError:
        return f"{name}(N/A)"


def _min(v: int | None) -> str:
    return "UNLIMITED" if v is None else f"{v} min"


def _mem(cfg: ClusterConfig, what: str) -> tuple[str, str]:
    """``DefMemPerCPU``/``MaxMemPerCPU`` when a per-CPU value is set, else the per-node one
    (``UNLIMITED`` for 0), as slurmctld reports the pair."""
    per_cpu = getattr(cfg, f"{what.lower()}_mem_per_cpu")
    if per_cpu:
        return f"{what}MemPerCPU", str(per_cpu)
    per_node = getattr(cfg, f"{what.lower()}_mem_per_node")
    return f"{what}MemPerNode", str(per_node) if per_node else "UNLIMITED"


def _typed(cfg: ClusterConfig) -> dict[str, Callable[[], str]]:
    """Keys Muster interprets → their effective value as slurmctld prints it."""
    c = cfg
    tres = list(_BASE_TRES) + [t for t in c.accounting_storage_tres if t not in _BASE_TRES]
    return {
        "AccountingStorageEnforce": lambda: _list(c.accounting_storage_enforce, "none"),
        "AccountingStorageTRES": lambda: ",".join(tres),
        "AccountingStorageType": lambda: c.accounting_storage_type,
        "AuthInfo": lambda: _null(c.auth_info), "AuthType": lambda: c.auth_type,
        "ClusterName": lambda: c.cluster_name, "CompleteWait": lambda: f"{c.complete_wait} sec",
        "CredType": lambda: c.cred_type,
        "DependencyParameters": lambda: _list(c.dependency_parameters),
        "DisableRootJobs": lambda: _raw_bool(c, "DisableRootJobs"),
        "EnforcePartLimits": lambda: c.enforce_part_limits, "Epilog": lambda: _null(c.epilog),
        "EpilogSlurmctld": lambda: _null(c.epilog_slurmctld),
        "FairShareDampeningFactor": lambda: str(c.fair_share_dampening_factor),
        "FirstJobId": lambda: str(c.first_job_id), "GresTypes": lambda: _list(c.gres_types),
        "HealthCheckInterval": lambda: f"{c.health_check_interval} sec",
        "HealthCheckProgram": lambda: _null(c.health_check_program),
        "InactiveLimit": lambda: f"{c.inactive_limit} sec",
        "JobAcctGatherFrequency": lambda: c.job_acct_gather_frequency,
        "JobAcctGatherType": lambda: c.job_acct_gather_type,
        "JobCompType": lambda: c.job_comp_type,
        "JobFileAppend": lambda: str(int(c.job_file_append)),
        "JobRequeue": lambda: str(int(c.job_requeue)),
        "KillOnBadExit": lambda: str(int(c.kill_on_bad_exit)),
        "KillWait": lambda: f"{c.kill_wait} sec",
        "LaunchParameters": lambda: _list(c.launch_parameters), "MailProg": lambda: c.mail_prog,
        "MaxArraySize": lambda: str(c.max_array_size),
        "MaxDBDMsgs": lambda: c.raw.get("MaxDBDMsgs")
        or str(max(10000, 2 * c.max_job_count + 4 * len(c.nodes))),
        "MaxJobCount": lambda: str(c.max_job_count), "MaxJobId": lambda: str(c.max_job_id),
        "MaxNodeCount": lambda: c.raw.get("MaxNodeCount") or str(len(c.nodes)),
        "MaxStepCount": lambda: str(c.max_step_count),
        "MaxTasksPerNode": lambda: str(c.max_tasks_per_node),
        "MessageTimeout": lambda: f"{c.message_timeout} sec",
        "MinJobAge": lambda: f"{c.min_job_age} sec", "MpiDefault": lambda: c.mpi_default,
        "OverTimeLimit": lambda: _min(c.over_time_limit),
        "PreemptMode": lambda: c.preempt_mode, "PreemptType": lambda: c.preempt_type,
        "PreemptExemptTime": lambda: fmt_duration_long(c.preempt_exempt_time),
        "PriorityDecayHalfLife": lambda: fmt_duration_long(c.priority_decay_half_life),
        "PriorityCalcPeriod": lambda: fmt_duration_long(c.priority_calc_period),
        "PriorityFavorSmall": lambda: "Yes" if c.priority_favor_small else "No",
        "PriorityFlags": lambda: _list(c.priority_flags, ""),
        "PriorityMaxAge": lambda: fmt_duration_long(c.priority_max_age),
        "PriorityUsageResetPeriod": lambda: c.priority_usage_reset_period,
        "PriorityType": lambda: c.priority_type,
        "PriorityWeightAge": lambda: str(c.priority_weight_age),
        "PriorityWeightAssoc": lambda: str(c.priority_weight_assoc),
        "PriorityWeightFairShare": lambda: str(c.priority_weight_fairshare),
        "PriorityWeightJobSize": lambda: str(c.priority_weight_job_size),
        "PriorityWeightPartition": lambda: str(c.priority_weight_partition),
        "PriorityWeightQOS": lambda: str(c.priority_weight_qos),
        "PriorityWeightTRES": lambda: _list([f"{k}={v:g}" for k, v in
                                             c.priority_weight_tres.items()]),
        "ProctrackType": lambda: c.proctrack_type, "Prolog": lambda: _null(c.prolog),
        "PrologEpilogTimeout": lambda: "65534" if c.prolog_epilog_timeout is None
        else str(c.prolog_epilog_timeout),
        "PrologSlurmctld": lambda: _null(c.prolog_slurmctld),
        "PrologFlags": lambda: _list(c.prolog_flags),
        "RequeueExit": lambda: _list(c.requeue_exit),
        "RequeueExitHold": lambda: _list(c.requeue_exit_hold),
        "ResvOverRun": lambda: _min(c.resv_over_run),
        "ReturnToService": lambda: str(c.return_to_service),
        "SchedulerParameters": lambda: c.raw.get("SchedulerParameters") or "(null)",
        "SchedulerType": lambda: c.scheduler_type, "SelectType": lambda: c.select_type,
        "SelectTypeParameters": lambda: _list([p.upper() for p in c.select_type_parameters],
                                              "NONE"),
        "SlurmUser": lambda: _user(c.slurm_user),
        "SlurmctldAddr": lambda: _null(c.raw.get("SlurmctldAddr")),
        "SlurmctldLogFile": lambda: _null(c.slurmctld_log_file),
        "SlurmctldPort": lambda: str(c.slurmctld_port),
        "SlurmctldTimeout": lambda: f"{c.slurmctld_timeout} sec",
        "SlurmctldParameters": lambda: _list(c.slurmctld_parameters),
        "SlurmdLogFile": lambda: _null(c.slurmd_log_file),
        "SlurmdParameters": lambda: _list(c.slurmd_parameters),
        "SlurmdPidFile": lambda: c.slurmd_pid_file, "SlurmdPort": lambda: str(c.slurmd_port),
        "SlurmdSpoolDir": lambda: c.slurmd_spool_dir,
        "SlurmdTimeout": lambda: f"{c.slurmd_timeout} sec",
        "SlurmdUser": lambda: _user(c.slurmd_user),
        "SlurmctldPidFile": lambda: c.slurmctld_pid_file,
        "SLURM_CONF": lambda: c.path, "StateSaveLocation": lambda: c.state_save_location,
        "TaskEpilog": lambda: _null(c.task_epilog), "TaskPlugin": lambda: c.task_plugin,
        "TaskProlog": lambda: _null(c.task_prolog), "TmpFS": lambda: c.tmp_fs,
        "TopologyPlugin": lambda: c.topology_plugin, "TreeWidth": lambda: str(c.tree_width),
        "UnkillableStepTimeout": lambda: f"{c.unkillable_step_timeout} sec",
        "WaitTime": lambda: f"{c.wait_time} sec",
    }


def _raw_bool(cfg: ClusterConfig, key: str) -> str:
    v = cfg.raw.get(key, "").strip().lower()
    return "Yes" if v in ("yes", "1", "true") else "No"


# slurmctld's order (22.05); SlurmctldHost[i], the DefMem/MaxMem pair and the run-time
# values (BOOT_TIME, HASH_VAL, NEXT_JOB_ID, ...) are filled in by show_config_items.
ORDER: tuple[str, ...] = tuple("""
AccountingStorageBackupHost AccountingStorageEnforce AccountingStorageHost
AccountingStorageExternalHost AccountingStorageParameters AccountingStoragePort
AccountingStorageTRES AccountingStorageType AccountingStorageUser AccountingStoreFlags
AcctGatherEnergyType AcctGatherFilesystemType AcctGatherInterconnectType AcctGatherNodeFreq
AcctGatherProfileType AllowSpecResourcesUsage AuthAltTypes AuthAltParameters AuthInfo AuthType
BatchStartTimeout BcastExclude BcastParameters BOOT_TIME BurstBufferType CliFilterPlugins
ClusterName CommunicationParameters CompleteWait CoreSpecPlugin CpuFreqDef CpuFreqGovernors
CredType DebugFlags @DefMem DependencyParameters DisableRootJobs EioTimeout
EnforcePartLimits Epilog EpilogMsgTime EpilogSlurmctld ExtSensorsType ExtSensorsFreq
FairShareDampeningFactor FederationParameters FirstJobId GetEnvTimeout GresTypes GpuFreqDef
GroupUpdateForce GroupUpdateTime HASH_VAL HealthCheckInterval HealthCheckNodeState
HealthCheckProgram InactiveLimit InteractiveStepOptions JobAcctGatherFrequency
JobAcctGatherType JobAcctGatherParams JobCompHost JobCompLoc JobCompPort JobCompType
JobCompUser JobContainerType JobCredentialPrivateKey JobCredentialPublicCertificate
JobDefaults JobFileAppend JobRequeue JobSubmitPlugins KillOnBadExit KillWait
LaunchParameters LaunchType Licenses LogTimeFormat MailDomain MailProg MaxArraySize
MaxDBDMsgs MaxJobCount MaxJobId @MaxMem MaxNodeCount MaxStepCount MaxTasksPerNode MCSPlugin
MCSParameters MessageTimeout MinJobAge MpiDefault MpiParams MULTIPLE_SLURMD NEXT_JOB_ID
NodeFeaturesPlugins OverTimeLimit PluginDir PlugStackConfig PowerParameters PowerPlugin
PreemptMode PreemptType PreemptExemptTime PrEpParameters PrEpPlugins PriorityParameters
PrioritySiteFactorParameters PrioritySiteFactorPlugin PriorityDecayHalfLife
PriorityCalcPeriod PriorityFavorSmall PriorityFlags PriorityMaxAge PriorityUsageResetPeriod
PriorityType PriorityWeightAge PriorityWeightAssoc PriorityWeightFairShare
PriorityWeightJobSize PriorityWeightPartition PriorityWeightQOS PriorityWeightTRES
PrivateData ProctrackType Prolog PrologEpilogTimeout PrologSlurmctld PrologFlags
PropagatePrioProcess PropagateResourceLimits PropagateResourceLimitsExcept RebootProgram
ReconfigFlags RequeueExit RequeueExitHold ResumeFailProgram ResumeProgram ResumeRate
ResumeTimeout ResvEpilog ResvOverRun ResvProlog ReturnToService RoutePlugin
SchedulerParameters SchedulerTimeSlice SchedulerType ScronParameters SelectType
SelectTypeParameters SlurmUser SlurmctldAddr SlurmctldDebug @SlurmctldHost SlurmctldLogFile
SlurmctldPort SlurmctldSyslogDebug SlurmctldPrimaryOffProg SlurmctldPrimaryOnProg
SlurmctldTimeout SlurmctldParameters SlurmdDebug SlurmdLogFile SlurmdParameters
SlurmdPidFile SlurmdPort SlurmdSpoolDir SlurmdSyslogDebug SlurmdTimeout SlurmdUser
SlurmSchedLogFile SlurmSchedLogLevel SlurmctldPidFile SlurmctldPlugstack SLURM_CONF
SLURM_VERSION SrunEpilog SrunPortRange SrunProlog StateSaveLocation SuspendExcNodes
SuspendExcParts SuspendProgram SuspendRate SuspendTime SuspendTimeout SwitchParameters
SwitchType TaskEpilog TaskPlugin TaskPluginParam TaskProlog TCPTimeout TmpFS TopologyParam
TopologyPlugin TrackWCKey TreeWidth UsePam UnkillableStepProgram UnkillableStepTimeout
VSizeFactor WaitTime X11Parameters
""".split())


def show_config_items(cfg: ClusterConfig, *, boot_time: int | None, next_job_id: int,
                      version: str) -> list[tuple[str, str]]:
    """(key, value) for every line of ``scontrol show config``, in slurmctld's order."""
    typed = _typed(cfg)
    runtime = {"BOOT_TIME": fmt_iso(boot_time), "HASH_VAL": "Match",
               "MULTIPLE_SLURMD": "Yes", "NEXT_JOB_ID": str(next_job_id),
               "SLURM_VERSION": version}
    out: list[tuple[str, str]] = []
    for key in ORDER:
        if key == "@DefMem" or key == "@MaxMem":
            out.append(_mem(cfg, key[1:4]))
        elif key == "@SlurmctldHost":
            hosts = cfg.slurmctld_hosts or (cfg.slurmctld_host,)
            for i, h in enumerate(hosts):
                addr = cfg.slurmctld_addr if i == 0 and "(" not in h else ""
                out.append((f"SlurmctldHost[{i}]", f"{h}({addr})" if addr else h))
        elif key in runtime:
            out.append((key, runtime[key]))
        elif key in typed:
            out.append((key, typed[key]()))
        else:
            raw = cfg.raw.get(_RAW_ALIASES.get(key, key))
            out.append((key, raw if raw is not None else _RAW_DEFAULTS.get(key, "(null)")))
    return out
