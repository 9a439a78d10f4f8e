"""The query records and the submit request as msgspec Structs (docs/records.md).

Field order and names are :mod:`muster.protocol.fields` (a test holds them equal); the prose of
each field (units, ``null`` conventions) is docs/records.md, whose tables a test holds equal to
these Structs. Times are Unix seconds, limits minutes, memory MB, as the document says.

Query records have no defaults: a record that lacks a field does not convert, so the test that
converts the controller's live replies (``msgspec.convert(..., strict=True)``) proves every
field is sent with the documented type. ``events``/``usage`` are the exceptions: present only
in the replies that carry them (``UNSET`` otherwise, and then not encoded at all).
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

__all__ = ["AcctJob", "AllocEntry", "GpuCount", "GresRequest", "Job", "JobEvent", "Node",
           "Partition", "SignalRequest", "Step", "StepInfo", "SubmitRequest"]


class AllocEntry(msgspec.Struct, kw_only=True):
    """One allocated node of a job. ``tasks``: the tasks the scheduler placed there (rows
    written before it was recorded read as 1)."""
    node: str
    cpus: int
    mem: int
    gpus: list[int]
    tasks: int = 1


class JobEvent(msgspec.Struct, kw_only=True):
    time: int
    event: str
    detail: str


class Job(msgspec.Struct, kw_only=True):
    """The job record (``{"op": "jobs"}``): model.job.PUBLIC_NAMES, then ``events``."""
    job_id: int
    array_job_id: int | None
    array_task_id: int | None
    array_task_str: str | None
    array_max_tasks: int
    name: str
    user: str
    uid: int
    group: str
    gid: int
    account: str
    qos: str
    partition: str
    state: str
    reason: str
    reason_desc: str | None
    priority: int
    nice: int
    hold: str | None
    dependency: str | None
    requeue: bool
    restarts: int
    batch: bool
    exit_code: int
    exit_signal: int
    derived_exit_code: int
    derived_exit_signal: int
    submit_time: int
    eligible_time: int | None
    start_time: int | None
    end_time: int | None
    time_limit: int | None
    time_min: int | None
    nodes_min: int
    nodes_max: int | None
    num_nodes: int
    num_cpus: int
    num_tasks: int
    ntasks_set: bool
    cpus_per_task: int
    ntasks_per_node: int | None
    mem_per_node: int | None
    mem_per_cpu: int | None
    mem_per_gpu: int | None
    gpus_per_node: int
    gpu_type: str | None
    gpus: int | None
    gpus_per_task: int | None
    tres_per_node: str | None
    req_nodes: str | None
    exc_nodes: str | None
    node_list: str | None
    batch_host: str | None
    alloc: list[AllocEntry]
    tres_req: str
    tres_alloc: str | None
    work_dir: str
    std_out: str
    std_err: str
    std_in: str
    command: str | None
    comment: str | None
    submit_host: str
    exclusive: bool
    open_mode: str | None
    signal: str | None
    cancelled_by: int | None
    scheduler: str
    last_sched_eval: int | None
    sched_nodes: str | None
    completing: bool
    failed_node: str | None
    submit_line: str
    partitions_req: list[str] | None
    begin_time: int | None
    features: str | None
    cpus_per_gpu: int | None
    deadline: int | None
    mail_type: str | None
    mail_user: str | None
    min_cpus_node: int | None
    min_tmp_disk: int | None
    contiguous: bool
    wckey: str | None
    overcommit: bool = False
    use_min_nodes: bool = False
    req_switch: int | None = None
    wait4switch: int | None = None
    system_comment: str | None = None
    events: list[JobEvent] | UnsetType = UNSET  # `scontrol show job` of one job only


class Step(msgspec.Struct, kw_only=True):
    """A step in accounting (``{"op": "acct"}``); ``usage`` (controller.usage) once ended."""
    job_id: int
    step_id: int | str  # "batch" or the step number
    name: str
    state: str
    exit_code: int
    exit_signal: int
    start_time: int | None
    end_time: int | None
    node_list: str | None
    num_nodes: int
    num_cpus: int
    num_tasks: int
    tres_alloc: str | None
    usage: dict[str, Any] | UnsetType = UNSET
    launch_error: str | UnsetType = UNSET  # its tasks could not start (a container): why


class AcctJob(Job, kw_only=True):
    """A job as ``{"op": "acct"}`` returns it: the job record and its steps."""
    steps: list[Step]


class StepInfo(msgspec.Struct, kw_only=True):
    """A running step (``{"op": "steps"}``): the batch step or an srun step."""
    job_id: int
    array_job_id: int | None
    array_task_id: int | None
    uid: int
    user: str
    partition: str
    time_limit: None  # steps have no limit of their own
    step_id: int | str
    name: str
    state: str
    start_time: int | None
    node_list: str | None
    num_nodes: int
    num_cpus: int
    num_tasks: int
    dist: str | None
    resv_ports: str | None
    tres: str
    srun_host: str | None
    srun_pid: int


class Node(msgspec.Struct, kw_only=True):
    name: str
    addr: str
    hostname: str
    port: int
    state: str
    flags: list[str]
    cpus: int
    cpus_alloc: int
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    boards: int
    real_memory: int
    mem_alloc: int
    free_mem: int | None
    gres: str | None
    gres_used: str
    gpus_total: int
    gpus_alloc: list[int]
    partitions: list[str]
    reason: str | None
    reason_user: str | None
    reason_time: int | None
    boot_time: int | None
    slurmd_start_time: int | None
    last_heartbeat: int | None
    weight: int
    tmp_disk: int
    features: str | None
    active_features: str | None
    cpu_load: float | None
    version: str
    arch: str
    os: str
    cfg_tres: str
    alloc_tres: str


class Partition(msgspec.Struct, kw_only=True):
    name: str
    default: bool
    state: str
    max_time: int | None
    default_time: int | None
    nodes: str
    node_names: list[str]
    max_nodes: int | None
    min_nodes: int
    priority_tier: int
    priority_job_factor: int
    allow_accounts: str
    allow_groups: str
    allow_qos: str
    over_subscribe: str
    total_cpus: int
    total_nodes: int
    tres: str
    grace_time: int
    hidden: bool


# ---- the submit request ------------------------------------------------------------------

class GresRequest(msgspec.Struct, kw_only=True):
    name: str
    type: str | None
    count: int


class GpuCount(msgspec.Struct, kw_only=True):
    type: str | None
    count: int


class SignalRequest(msgspec.Struct, kw_only=True):
    signal: int
    secs: int
    batch: bool


class SubmitRequest(msgspec.Struct, kw_only=True):
    """The ``job`` of ``{"op": "submit"}`` as sbatch/srun/salloc build it (muster.cli.jobopts;
    absent or null = not given). The controller validates every field again (submit.py): this
    is the shape a well-behaved client sends, not a trust boundary."""
    name: str | None = None
    script_name: str | None = None
    wrap: bool = False
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    time_limit: int | None = None
    time_min: int | None = None
    nodes_min: int | None = None
    nodes_max: int | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    mem_per_node: int | None = None
    mem_per_cpu: int | None = None
    mem_per_gpu: int | None = None
    gres: list[GresRequest] = []
    gpus: GpuCount | None = None
    gpus_per_task: GpuCount | None = None
    cpus_per_gpu: int | None = None
    array: str | None = None
    dependency: str | None = None
    requeue: bool | None = None
    signal: SignalRequest | None = None
    open_mode: str | None = None
    export: str | None = None
    hold: bool = False
    begin: int | None = None
    nodelist: str | None = None
    exclude: str | None = None
    exclusive: bool = False
    comment: str | None = None
    nice: int | None = None
    priority: int | None = None
    work_dir: str | None = None
    submit_dir: str | None = None
    std_out: str | None = None
    std_err: str | None = None
    std_in: str | None = None
    command: str | None = None
    argv: list[str] = []
    submit_line: str | None = None
    submit_host: str | None = None
    umask: int | None = None
    constraint: str | None = None
    mail_type: str | None = None
    mail_user: str | None = None
    wckey: str | None = None
    mincpus: int | None = None
    contiguous: bool = False
    use_min_nodes: bool = False
    no_kill: bool = False
    oversubscribe: bool = False
    exclusive_mode: str | None = None
    deadline: int | None = None
    kill_on_invalid_dep: bool | None = None
    uid: int | None = None
    gid: int | None = None
    overcommit: bool = False
    hint: str | None = None
    distribution: str | None = None
    tres_per_task: str | None = None
    gpu_bind: str | None = None
    clusters: str | None = None
    mpi: str | None = None
    propagate: str | None = None
    get_user_env: str | None = None
    licenses: str | None = None
    tmp: int | None = None
    switches: int | None = None
    wait4switch: int | None = None
