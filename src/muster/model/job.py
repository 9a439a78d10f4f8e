"""The controller's job record.

A ``Job`` is one row of the queue: a plain job, a pending array (the *master*, holding the
indices not yet started), or an array task split off from its master when it starts. Fields
are exactly the wire record of docs/records.md plus a few internal ones (prefixed in
``INTERNAL_FIELDS``) that never leave the controller. The class is a slotted dataclass, so
the field list is the class body itself (typed, and checked by mypy); slots keep a pending
job near 1 KiB: the script and the environment live only in the store, never in memory.

State vocabulary (states.md): ``state`` is the base state; ``completing`` is the COMPLETING
flag (the job has ended or been cancelled, but its processes have not yet been confirmed gone,
so its resources stay allocated). Terminal states are in ``TERMINAL``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
import dataclasses
from dataclasses import dataclass
from itertools import repeat as _repeat
from operator import attrgetter, call as _call
from sys import intern as _intern
from typing import Any

from muster.model.alloc import NodeAlloc
from muster.model.arrays import compress_indices

PENDING = "PENDING"
RUNNING = "RUNNING"
COMPLETED = "COMPLETED"
CANCELLED = "CANCELLED"
FAILED = "FAILED"
TIMEOUT = "TIMEOUT"
NODE_FAIL = "NODE_FAIL"
OUT_OF_MEMORY = "OUT_OF_MEMORY"
PREEMPTED = "PREEMPTED"
DEADLINE = "DEADLINE"  # --deadline could not be met (ended while pending)
TERMINAL = frozenset({COMPLETED, CANCELLED, FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED,
                      DEADLINE})
ACTIVE = frozenset({PENDING, RUNNING})


# Strings that repeat across many jobs (a user's 5,000 jobs share user, account, partition,
# work dir, command line...): one shared copy each keeps a pending job small in memory.
_INTERNED = ("name", "user", "group", "account", "qos", "partition", "reason", "state",
             "tres_per_node", "tres_req", "work_dir", "std_in", "command", "submit_host",
             "submit_line", "submit_dir", "scheduler", "export", "comment", "gpu_type")


@dataclass(slots=True, eq=False, repr=False, kw_only=True)
class Job:
    """One job record. The field declarations *are* the field list: public fields first, in
    the order of docs/records.md, then the internal ones from ``script_id`` on (see
    ``_FIRST_INTERNAL``). Every default is immutable (a dataclass refuses list/dict defaults),
    so jobs never share mutable state. ``eq=False``: jobs compare and hash by identity."""

    # ---- public fields: the wire record --------------------------------------------------
    job_id: int = 0
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_task_str: str | None = None
    array_max_tasks: int = 0
    name: str = ""
    user: str = ""
    uid: int = 0
    group: str = ""
    gid: int = 0
    account: str = ""
    qos: str = "normal"
    partition: str = ""
    state: str = PENDING
    reason: str = "None"
    reason_desc: str | None = None
    priority: int = 1
    nice: int = 0
    hold: str | None = None
    dependency: str | None = None
    requeue: bool = True
    restarts: int = 0
    batch: bool = True
    exit_code: int = 0
    exit_signal: int = 0
    derived_exit_code: int = 0
    derived_exit_signal: int = 0
    submit_time: int = 0
    eligible_time: int | None = None
    start_time: int | None = None
    end_time: int | None = None
    time_limit: int | None = None
    time_min: int | None = None
    nodes_min: int = 1
    nodes_max: int | None = None
    num_nodes: int = 1
    num_cpus: int = 1
    num_tasks: int = 1
    ntasks_set: bool = False
    cpus_per_task: int = 1
    ntasks_per_node: int | None = None
    mem_per_node: int | None = None
    mem_per_cpu: int | None = None
    mem_per_gpu: int | None = None
    gpus_per_node: int = 0
    gpu_type: str | None = None
    gpus: int | None = None
    gpus_per_task: int | None = None
    tres_per_node: str | None = None
    req_nodes: str | None = None
    exc_nodes: str | None = None
    node_list: str | None = None
    batch_host: str | None = None
    alloc: tuple[NodeAlloc, ...] = ()  # per node (muster.model.alloc), batch host first
    tres_req: str = ""
    tres_alloc: str | None = None
    work_dir: str = "/"
    std_out: str = ""
    std_err: str = ""
    std_in: str = "/dev/null"
    command: str | None = None
    comment: str | None = None
    submit_host: str = ""
    exclusive: bool = False
    open_mode: str | None = None
    signal: str | None = None
    cancelled_by: int | None = None
    scheduler: str = "Main"
    last_sched_eval: int | None = None
    sched_nodes: str | None = None
    completing: bool = False
    failed_node: str | None = None
    submit_line: str = ""
    partitions_req: list[str] | None = None
    begin_time: int | None = None
    features: str | None = None
    cpus_per_gpu: int | None = None
    deadline: int | None = None
    mail_type: str | None = None
    mail_user: str | None = None
    min_cpus_node: int | None = None
    min_tmp_disk: int | None = None  # --tmp (MB): MinTmpDiskNode
    contiguous: bool = False
    wckey: str | None = None
    overcommit: bool = False  # -O: CPUs as for one task per node (SLURM_OVERCOMMIT=1)
    use_min_nodes: bool = False  # --use-min-nodes: a node range takes as few nodes as fit
    req_switch: int | None = None  # --switches=N: at most N leaf switches (blocks)
    wait4switch: int | None = None  # --switches=N@TIME (seconds); None: max_switch_wait
    system_comment: str | None = None  # why the run could not launch (scontrol SystemComment=)

    # ---- internal fields: persisted, never sent to clients ---------------------------------
    script_id: int = 0                  # job id whose stored script/env this job runs (array master)
    pending_tasks: list[int] | None = None  # array master: sorted indices not yet started
    array_spec: dict[str, int] | None = None  # {"min","max","step","count"}: SLURM_ARRAY_* vars
    dep_terms: list[list[Any]] | None = None  # parsed terms [[type, job_id, task|None, minutes]...]
    dep_any: bool = False               # '?' separated dependency
    groups: Sequence[int] = ()          # supplementary gids of the submitter
    argv: Sequence[str] = ()            # script arguments
    umask: int = 0o022
    signal_spec: dict[str, Any] | None = None  # {"signal", "secs", "batch"}
    launch_confirmed: bool = False
    timelimit_from_partition: bool = False
    mem_all: bool = False               # job takes all memory of each node
    export: str | None = None
    submit_dir: str | None = None
    ntasks_given: bool = False          # -n given explicitly (else tasks follow the node count)
    expected_start: int | None = None   # backfill's expected start of a pending job (squeue --start)
    next_step_id: int = 0
    requeue_pending: bool = False       # requeue when the running processes are confirmed gone
    requeue_hold: bool = False
    cpus_per_task_set: bool = False
    io_patterns: tuple[str | None, ...] = ("slurm-%j.out", None, "/dev/null")  # raw -o/-e/-i
    mail_sent: list[int] | None = None  # [run, bits]: --mail-type events already sent for that run
    leased: bool = False                # an srun/salloc allocation held by its client (controller.leases)

    def __post_init__(self) -> None:
        self.intern_strings()

    def intern_strings(self) -> None:
        """Share the strings that repeat across jobs (names, users, partitions, paths): one
        copy for thousands of jobs. Run at construction; run again by code that builds a job
        in steps (controller.submit.build_job)."""
        for name in _INTERNED:
            v = getattr(self, name)
            if type(v) is str:
                setattr(self, name, _intern(v))
        if self.io_patterns is not None:
            self.io_patterns = tuple(_intern(p) if type(p) is str else p for p in self.io_patterns)

    # ---- views -----------------------------------------------------------------------
    @property
    def is_array_master(self) -> bool:
        return self.array_job_id is not None and self.array_task_id is None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def holds_resources(self) -> bool:
        return self.state == RUNNING or (self.completing and bool(self.alloc))

    @property
    def display_id(self) -> str:
        if self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        if self.is_array_master:
            return f"{self.array_job_id}_[{self.array_task_str}]"
        return str(self.job_id)

    def to_record(self, fields: Iterable[str] | None = None) -> dict[str, Any]:
        """The wire record (docs/records.md); ``fields`` (names) projects it."""
        if fields is not None:
            rec: dict[str, Any] = {n: getattr(self, n) for n in fields}
            if "alloc" in rec:
                rec["alloc"] = [a.to_wire() for a in self.alloc]
        else:
            rec = {n: getattr(self, n) for n in PUBLIC_NAMES}
            rec["alloc"] = [a.to_wire() for a in self.alloc]
        if self.pending_tasks and "array_task_str" in rec:
            rec["array_task_str"] = compress_indices(self.pending_tasks)
        if self.state == "PENDING" and self.expected_start is not None and "start_time" in rec:
            rec["start_time"] = self.expected_start  # Slurm shows the expected start here
        return rec

    def to_store(self) -> dict[str, Any]:
        rec = dict(zip(_NAMES, _values(self)))
        rec["alloc"] = [a.to_wire() for a in self.alloc]
        rec["groups"] = list(self.groups)
        rec["argv"] = list(self.argv)
        return rec

    @classmethod
    def from_store(cls, rec: Mapping[str, Any]) -> Job:
        job = cls(**{k: v for k, v in rec.items() if k in _ALL_NAMES})
        job.alloc = tuple(a if isinstance(a, NodeAlloc) else NodeAlloc.from_wire(a)
                          for a in job.alloc or ())
        job.groups = tuple(job.groups or ())
        job.argv = tuple(job.argv or ())
        return job

    def copy(self, **changes: Any) -> Job:
        """A field-for-field copy (values shared: every one is immutable) with ``changes``
        set on it, their strings interned as construction does. Slot by slot in C (a map
        over the slots' setters) instead of through ``__init__``'s 112 keywords: 7.3 µs
        instead of 17 µs, and every lifecycle event's draft (jobfsm) makes one (a release
        of 10,000 jobs spent a third of its time here)."""
        new = _new_job(Job)
        _consume(map(_call, _SETTERS, _repeat(new), _values(self)))
        if changes:
            for name, value in changes.items():
                setattr(new, name, value)
            new.intern_strings()
        return new

    def __repr__(self) -> str:
        return f"Job({self.display_id}, {self.state}, reason={self.reason})"


# (name, default) pairs, derived from the class body: public fields in the order of
# docs/records.md, then the internal ones (persisted by the store, never sent to clients).
_FIRST_INTERNAL = "script_id"
ALL_FIELDS: tuple[tuple[str, object], ...] = tuple(
    (f.name, f.default) for f in dataclasses.fields(Job))
_SPLIT = [n for n, _ in ALL_FIELDS].index(_FIRST_INTERNAL)
PUBLIC_FIELDS = ALL_FIELDS[:_SPLIT]
INTERNAL_FIELDS = ALL_FIELDS[_SPLIT:]
PUBLIC_NAMES = tuple(n for n, _ in PUBLIC_FIELDS)
_ALL_NAMES = frozenset(n for n, _ in ALL_FIELDS)
_NAMES = tuple(n for n, _ in ALL_FIELDS)
_values = attrgetter(*_NAMES)  # every field's value in one C call (copy, to_store: per save)
_SETTERS = tuple(getattr(Job, n).__set__ for n in _NAMES)  # each slot's setter (Job.copy)
_new_job = object.__new__
_consume: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend
