"""The field names of the wire records, standard library only: what the CLI formatters may
read (the CLI never imports msgspec, so it cannot import :mod:`muster.protocol.records`).

Invariant (tests/unit/test_protocol.py): each tuple equals, in order, the fields of its Struct
in :mod:`muster.protocol.records`; every key a CLI formatter reads from a record is in these
tuples or in :data:`NOT_SENT` / :data:`CLIENT_SIDE`.
"""

from __future__ import annotations

# Per allocated node of a job (Job.alloc).
ALLOC: tuple[str, ...] = ("node", "cpus", "mem", "gpus", "tasks")

# A job's audit-trail entry (Job.events, `scontrol show job` only).
JOB_EVENT: tuple[str, ...] = ("time", "event", "detail")

# The job record: model.job.PUBLIC_NAMES, then ``events`` (set only for `scontrol show job`).
JOB: tuple[str, ...] = (
    "job_id", "array_job_id", "array_task_id", "array_task_str", "array_max_tasks", "name",
    "user", "uid", "group", "gid", "account", "qos", "partition", "state", "reason",
    "reason_desc", "priority", "nice", "hold", "dependency", "requeue", "restarts", "batch",
    "exit_code", "exit_signal", "derived_exit_code", "derived_exit_signal", "submit_time",
    "eligible_time", "start_time", "end_time", "time_limit", "time_min", "nodes_min",
    "nodes_max", "num_nodes", "num_cpus", "num_tasks", "ntasks_set", "cpus_per_task",
    "ntasks_per_node", "mem_per_node", "mem_per_cpu", "mem_per_gpu", "gpus_per_node",
    "gpu_type", "gpus", "gpus_per_task", "tres_per_node", "req_nodes", "exc_nodes",
    "node_list", "batch_host", "alloc", "tres_req", "tres_alloc", "work_dir", "std_out",
    "std_err", "std_in", "command", "comment", "submit_host", "exclusive", "open_mode",
    "signal", "cancelled_by", "scheduler", "last_sched_eval", "sched_nodes", "completing",
    "failed_node", "submit_line", "partitions_req", "begin_time", "features", "cpus_per_gpu",
    "deadline", "mail_type", "mail_user", "min_cpus_node", "min_tmp_disk", "contiguous", "wckey",
    "overcommit", "use_min_nodes", "req_switch", "wait4switch", "system_comment", "events")

# An accounting step (`{"op": "acct"}` jobs carry ``steps``); ``usage`` once it has ended.
STEP: tuple[str, ...] = (
    "job_id", "step_id", "name", "state", "exit_code", "exit_signal", "start_time", "end_time",
    "node_list", "num_nodes", "num_cpus", "num_tasks", "tres_alloc", "usage", "launch_error")

# An accounting job: the job record plus its steps.
ACCT_JOB: tuple[str, ...] = (*JOB, "steps")

# A running step (`{"op": "steps"}`).
STEP_INFO: tuple[str, ...] = (
    "job_id", "array_job_id", "array_task_id", "uid", "user", "partition", "time_limit",
    "step_id", "name", "state", "start_time", "node_list", "num_nodes", "num_cpus",
    "num_tasks", "dist", "resv_ports", "tres", "srun_host", "srun_pid")

NODE: tuple[str, ...] = (
    "name", "addr", "hostname", "port", "state", "flags", "cpus", "cpus_alloc", "sockets",
    "cores_per_socket", "threads_per_core", "boards", "real_memory", "mem_alloc", "free_mem",
    "gres", "gres_used", "gpus_total", "gpus_alloc", "partitions", "reason", "reason_user",
    "reason_time", "boot_time", "slurmd_start_time", "last_heartbeat", "weight", "tmp_disk",
    "features", "active_features", "cpu_load", "version", "arch", "os", "cfg_tres",
    "alloc_tres")

PARTITION: tuple[str, ...] = (
    "name", "default", "state", "max_time", "default_time", "nodes", "node_names", "max_nodes",
    "min_nodes", "priority_tier", "priority_job_factor", "allow_accounts", "allow_groups",
    "allow_qos", "over_subscribe", "total_cpus", "total_nodes", "tres", "grace_time", "hidden")

# Slurm fields the formatters read with a default (Slurm prints them) that Muster does not
# record yet: the controller never sends them, so the default is what users see.
NOT_SENT: frozenset[str] = frozenset({
    "reservation",     # job: the reservation it runs in (squeue %v, sacct Reservation)
    "alloc_sid",       # job: AllocNode:Sid's session id
    "cpu_ids",         # alloc entry: CPU_IDs (scontrol show job -d); 0-(cpus-1) is shown
    "last_busy_time",  # node: LastBusyTime
    "reason_uid",      # node: the uid in sinfo's %U
    "tres_per_node",   # step (squeue -s %b): a step record carries `tres`, not this
})

# Keys the CLI itself adds to a record it received before formatting it.
CLIENT_SIDE: frozenset[str] = frozenset({
    "cluster",      # squeue/sacct: the reply's cluster name, copied onto each row
    "_steps_only",  # sacct -j A.S: print only the named steps of that job
    "step_str",     # squeue -s: the step's display id (`12.batch`, `12_3.0`)
})
