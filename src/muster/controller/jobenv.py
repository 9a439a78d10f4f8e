"""The environment of a batch script (env.md §1, column B). Pure.

Built by the controller, which knows the whole allocation; the agent adds only what exists
once the process does (``SLURM_TASK_PID``). Base is the environment captured at submit time
(already filtered by ``--export`` on the client), then Slurm's output variables override it.
"""

from __future__ import annotations

from muster.common.hostlist import compress_counts
from muster.model.alloc import NodeAlloc
from muster.model.job import Job

NO_ARRAY_TASK = 4294967294


def batch_env(job: Job, submitted: dict, *, cluster_name: str, conf_path: str,
              login: dict | None = None) -> dict[str, str]:
    """The batch script's environment: ``submitted`` (the client's, already filtered by
    ``--export``), under ``--export=NONE`` completed by ``login`` (the user's login
    environment, never overriding what was submitted), ``TMPDIR`` if unset; then Slurm's
    variables override. Variables describe the first node of the allocation (where the
    script runs); a job without an allocation gets an empty node and its CPU count."""
    env = dict(submitted)
    if login and (job.export or "").upper().split(",")[0] in ("NONE", "NIL"):
        for k, v in login.items():
            env.setdefault(k, v)
    first = job.alloc[0] if job.alloc else NodeAlloc("", job.num_cpus, 0)
    s = _slurm_vars(job, first, cluster_name, conf_path)
    env.setdefault("TMPDIR", "/tmp")
    _optional_vars(job, first, s)
    env.update(s)
    return env


def _slurm_vars(job: Job, first: NodeAlloc, cluster_name: str, conf_path: str
                ) -> dict[str, str]:
    """The variables every batch script gets, in a fixed order (the environment keeps it)."""
    node = first.node
    return {
        "ENVIRONMENT": "BATCH",
        "HOSTNAME": node,
        "SLURMD_NODENAME": node,
        "SLURM_CLUSTER_NAME": cluster_name,
        "SLURM_CONF": conf_path,
        "MUSTER_CONF": conf_path,
        "SLURM_CPUS_ON_NODE": str(first.cpus),
        "SLURM_GTIDS": "0",
        "SLURM_JOB_ID": str(job.job_id),
        "SLURM_JOBID": str(job.job_id),
        "SLURM_JOB_ACCOUNT": job.account,
        "SLURM_JOB_CPUS_PER_NODE": compress_counts([a.cpus for a in job.alloc] or [job.num_cpus]),
        "SLURM_JOB_GID": str(job.gid),
        "SLURM_JOB_GROUP": job.group,
        "SLURM_JOB_NAME": job.name,
        "SLURM_JOB_NODELIST": job.node_list or node,
        "SLURM_NODELIST": job.node_list or node,
        "SLURM_JOB_NUM_NODES": str(job.num_nodes),
        "SLURM_NNODES": str(job.num_nodes),
        "SLURM_JOB_PARTITION": job.partition,
        "SLURM_JOB_QOS": job.qos,
        "SLURM_JOB_UID": str(job.uid),
        "SLURM_JOB_USER": job.user,
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_PROCID": "0",
        "SLURM_PRIO_PROCESS": str(job.nice or 0),
        "SLURM_SUBMIT_DIR": job.submit_dir or job.work_dir,
        "SLURM_SUBMIT_HOST": job.submit_host,
        "SLURM_TASKS_PER_NODE": compress_counts([a.tasks for a in job.alloc] or [1]),
        "SLURM_TOPOLOGY_ADDR": node,
        "SLURM_TOPOLOGY_ADDR_PATTERN": "node",
        "SLURM_JOB_START_TIME": str(job.start_time or 0),
        "SLURM_JOB_END_TIME": str(job.end_time or 0),
    }


def _optional_vars(job: Job, first: NodeAlloc, s: dict[str, str]) -> None:
    """Add to ``s`` the variables that exist only for some jobs: exactly one memory
    variable, task/CPU counts the user set, GPUs (the first node's indices), restarts,
    export/open mode, dependency, array task."""
    if job.mem_per_cpu:
        s["SLURM_MEM_PER_CPU"] = str(job.mem_per_cpu)
    elif job.mem_per_gpu:
        s["SLURM_MEM_PER_GPU"] = str(job.mem_per_gpu)
    else:
        s["SLURM_MEM_PER_NODE"] = str(first.mem or job.mem_per_node or 0)
    if job.ntasks_set:
        s["SLURM_NTASKS"] = s["SLURM_NPROCS"] = str(job.num_tasks)
    if job.ntasks_per_node:
        s["SLURM_NTASKS_PER_NODE"] = str(job.ntasks_per_node)
    if job.cpus_per_task and job.cpus_per_task_set:
        s["SLURM_CPUS_PER_TASK"] = str(job.cpus_per_task)
    if job.overcommit:  # srun reads it: the job's steps overcommit too, as in Slurm
        s["SLURM_OVERCOMMIT"] = "1"
    if first.gpus:
        gpus = ",".join(str(g) for g in first.gpus)
        for var in ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES",
                    "ZE_AFFINITY_MASK", "SLURM_JOB_GPUS"):
            s[var] = gpus
        s["SLURM_GPUS_ON_NODE"] = str(len(first.gpus))
    if job.gpus_per_node:
        s["SLURM_GPUS_PER_NODE"] = (f"{job.gpu_type}:" if job.gpu_type else "") + str(job.gpus_per_node)
    if job.gpus:
        s["SLURM_GPUS"] = str(job.gpus)
    if job.gpus_per_task:
        s["SLURM_GPUS_PER_TASK"] = str(job.gpus_per_task)
    if job.restarts:
        s["SLURM_RESTART_COUNT"] = str(job.restarts)
    if job.export:
        s["SLURM_EXPORT_ENV"] = job.export
    if job.open_mode:
        s["SLURM_OPEN_MODE"] = job.open_mode[0]
    if job.dependency:
        s["SLURM_JOB_DEPENDENCY"] = job.dependency
    if job.array_job_id is not None:
        spec = job.array_spec or {}
        s["SLURM_ARRAY_JOB_ID"] = str(job.array_job_id)
        s["SLURM_ARRAY_TASK_ID"] = str(job.array_task_id)
        s["SLURM_ARRAY_TASK_COUNT"] = str(spec.get("count", 1))
        s["SLURM_ARRAY_TASK_MIN"] = str(spec.get("min", job.array_task_id))
        s["SLURM_ARRAY_TASK_MAX"] = str(spec.get("max", job.array_task_id))
        s["SLURM_ARRAY_TASK_STEP"] = str(spec.get("step", 1))
