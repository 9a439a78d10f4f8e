"""The controller's job record.

A ``Job`` is one row of the queue: a plain job, a pending array (the *master*, holding the
indices not yet started), or an array task split off from its master when it starts. Fields
are exactly the wire record of docs/records.md plus a few internal ones (prefixed in
``INTERNAL``) that never leave the controller. ``__slots__`` keeps a pending job near 1 KiB:
the script and the environment live only in the store, never in memory.

State vocabulary (states.md): ``state`` is the base state; ``completing`` is the COMPLETING
flag (the job has ended or been cancelled, but its processes have not yet been confirmed gone,
so its resources stay allocated). Terminal states are in ``TERMINAL``.
"""

from __future__ import annotations

from sys import intern as _intern

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

# (name, default) — public fields, in the order of docs/records.md
PUBLIC_FIELDS: tuple[tuple[str, object], ...] = (
    ("job_id", 0), ("array_job_id", None), ("array_task_id", None), ("array_task_str", None),
    ("array_max_tasks", 0), ("name", ""), ("user", ""), ("uid", 0), ("group", ""), ("gid", 0),
    ("account", ""), ("qos", "normal"), ("partition", ""), ("state", PENDING), ("reason", "None"),
    ("reason_desc", None), ("priority", 1), ("nice", 0), ("hold", None), ("dependency", None),
    ("requeue", True), ("restarts", 0), ("batch", True), ("exit_code", 0), ("exit_signal", 0),
    ("derived_exit_code", 0), ("derived_exit_signal", 0), ("submit_time", 0),
    ("eligible_time", None), ("start_time", None), ("end_time", None), ("time_limit", None),
    ("time_min", None), ("nodes_min", 1), ("nodes_max", None), ("num_nodes", 1), ("num_cpus", 1),
    ("num_tasks", 1), ("ntasks_set", False), ("cpus_per_task", 1), ("ntasks_per_node", None),
    ("mem_per_node", None), ("mem_per_cpu", None), ("mem_per_gpu", None), ("gpus_per_node", 0),
    ("gpu_type", None), ("gpus", None), ("gpus_per_task", None), ("tres_per_node", None),
    ("req_nodes", None), ("exc_nodes", None), ("node_list", None), ("batch_host", None),
    ("alloc", ()), ("tres_req", ""), ("tres_alloc", None), ("work_dir", "/"), ("std_out", ""),
    ("std_err", ""), ("std_in", "/dev/null"), ("command", None), ("comment", None),
    ("submit_host", ""), ("exclusive", False), ("open_mode", None), ("signal", None),
    ("cancelled_by", None), ("scheduler", "Main"), ("last_sched_eval", None), ("sched_nodes", None),
    ("completing", False), ("failed_node", None), ("submit_line", ""), ("partitions_req", None), ("begin_time", None),
    ("features", None), ("cpus_per_gpu", None), ("deadline", None), ("mail_type", None),
    ("mail_user", None), ("min_cpus_node", None), ("contiguous", False), ("wckey", None),
)

# Internal fields: persisted, never sent to clients.
INTERNAL_FIELDS: tuple[tuple[str, object], ...] = (
    ("script_id", 0),          # job id whose stored script/env this job runs (array master)
    ("pending_tasks", None),   # master of an array: sorted list of indices not yet started
    ("array_spec", None),      # {"min","max","step","count"} for SLURM_ARRAY_* variables
    ("dep_terms", None),       # parsed dependency terms [[type, job_id, task|None, minutes]...]
    ("dep_any", False),        # '?' separated dependency
    ("groups", ()),            # supplementary gids of the submitter
    ("argv", ()),              # script arguments
    ("umask", 0o022),
    ("signal_spec", None),     # {"signal", "secs", "batch"}
    ("launch_confirmed", False),
    ("timelimit_from_partition", False),
    ("mem_all", False),        # job takes all memory of each node
    ("export", None),
    ("submit_dir", None),
    ("ntasks_given", False),
    ("expected_start", None),    # backfill's expected start of a pending job (squeue --start)
    ("next_step_id", 0),     # -n given explicitly (else tasks follow the node count)
    ("requeue_pending", False),  # requeue when the running processes are confirmed gone
    ("requeue_hold", False),
    ("cpus_per_task_set", False),
    ("io_patterns", ("slurm-%j.out", None, "/dev/null")),  # raw -o/-e/-i as given
    ("mail_sent", None),       # [run, bits]: --mail-type events already sent for that run
)

ALL_FIELDS = PUBLIC_FIELDS + INTERNAL_FIELDS
PUBLIC_NAMES = tuple(n for n, _ in PUBLIC_FIELDS)
_MUTABLE_DEFAULTS = (list, dict)


# Strings that repeat across many jobs (a user's 5,000 jobs share user, account, partition,
# work dir, command line...): one shared copy each keeps a pending job small in memory.
_INTERNED = ("name", "user", "group", "account", "qos", "partition", "reason", "state",
             "tres_per_node", "tres_req", "work_dir", "std_in", "command", "submit_host",
             "submit_line", "submit_dir", "scheduler", "export", "comment", "gpu_type")


class Job:
    __slots__ = tuple(n for n, _ in ALL_FIELDS)

    def __init__(self, **kw):
        for name, default in ALL_FIELDS:
            setattr(self, name, kw.pop(name, default))
        if kw:
            raise TypeError(f"unknown job fields: {sorted(kw)}")
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

    def to_record(self, fields=None) -> dict:
        """The wire record (docs/records.md); ``fields`` (names) projects it."""
        if fields is not None:
            rec = {n: getattr(self, n) for n in fields}
        else:
            rec = {n: getattr(self, n) for n in PUBLIC_NAMES}
            rec["alloc"] = list(self.alloc)
        if self.pending_tasks and "array_task_str" in rec:
            rec["array_task_str"] = compress_indices(self.pending_tasks)
        if self.state == "PENDING" and self.expected_start is not None and "start_time" in rec:
            rec["start_time"] = self.expected_start  # Slurm shows the expected start here
        return rec

    def to_store(self) -> dict:
        rec = {n: getattr(self, n) for n, _ in ALL_FIELDS}
        rec["alloc"] = list(self.alloc)
        rec["groups"] = list(self.groups)
        rec["argv"] = list(self.argv)
        return rec

    @classmethod
    def from_store(cls, rec: dict) -> "Job":
        known = {n for n, _ in ALL_FIELDS}
        job = cls(**{k: v for k, v in rec.items() if k in known})
        job.alloc = tuple(job.alloc or ())
        job.groups = tuple(job.groups or ())
        job.argv = tuple(job.argv or ())
        return job

    def copy(self, **changes) -> "Job":
        rec = {n: getattr(self, n) for n, _ in ALL_FIELDS}
        rec.update(changes)
        return Job(**rec)

    def __repr__(self) -> str:
        return f"Job({self.display_id}, {self.state}, reason={self.reason})"
