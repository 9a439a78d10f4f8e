"""Job lifecycle: the pure state transitions of one job.

Each function takes a ``Job`` (mutated in place: the controller owns the only copy) plus the
event's data and ``now``, and returns nothing or a small result; none of them does I/O. The
controller persists the job after calling them, the simulator just keeps going.

    PENDING ──start──► RUNNING ──ended──► COMPLETED | FAILED | TIMEOUT | NODE_FAIL (+requeue)
       │                  │
       ├──cancel──► CANCELLED   └──cancel/requeue──► CANCELLED|PENDING, completing until the
       │                                             agent confirms the processes are gone
       └──deadline missed──► DEADLINE

Completion rule (states.md §1): node failure → NODE_FAIL; cancelled → CANCELLED; timed out →
TIMEOUT; the OOM killer struck in the batch step's cgroup → OUT_OF_MEMORY/OutOfMemory (exit
0:125, Slurm's SIG_OOM); killed by a signal → FAILED/RaisedSignal; non-zero exit →
FAILED/NonZeroExitCode; else COMPLETED.
"""

from __future__ import annotations

import posixpath
import signal as _signal
from collections.abc import Sequence
from typing import Any

from muster.common.patterns import expand_pattern
from muster.model.alloc import NodeAlloc

from muster.model.job import (CANCELLED, COMPLETED, DEADLINE, FAILED, NODE_FAIL, OUT_OF_MEMORY,
                              PENDING, PREEMPTED, RUNNING, TIMEOUT, Job)

# Slurm reports an OOM-killed step as signal 125 (its SIG_OOM, 253, less the 128 flag), exit 0
OOM_SIGNAL = 125


def start(job: Job, *, partition: str, alloc: Sequence[NodeAlloc], node_list: str,
          tres_alloc: str, now: int) -> None:
    job.state = RUNNING
    job.reason = "None"
    job.reason_desc = None
    job.system_comment = None  # a failed launch of an earlier run is that run's
    job.partition = partition
    job.start_time = now
    job.end_time = None if job.time_limit is None else now + 60 * job.time_limit
    job.alloc = tuple(alloc)
    job.node_list = node_list
    job.batch_host = alloc[0].node if alloc else None
    job.num_nodes = len(alloc)
    job.num_cpus = sum(a.cpus for a in alloc)
    if job.nodes_max is not None and job.nodes_max > job.nodes_min and not job.ntasks_given:
        # a node range without -n: one task per node (or --ntasks-per-node) on the nodes
        # it got, which may be more than its minimum (SLURM_NTASKS, NumTasks)
        job.num_tasks = sum(a.tasks for a in alloc) or job.num_tasks
    job.tres_alloc = tres_alloc
    job.last_sched_eval = now
    job.launch_confirmed = False
    job.completing = False


def cancel_pending(job: Job, *, by_uid: int | None, now: int) -> None:
    job.state = CANCELLED
    job.reason = "None"
    job.cancelled_by = by_uid
    job.end_time = now
    if job.start_time is None:
        job.start_time = now  # Slurm shows Start=End for jobs cancelled while pending


def immediate_failed(job: Job, *, now: int) -> None:
    """An ``--immediate`` allocation could not start at once: it ends FAILED with exit code
    1 and no nodes, Start=End (what Slurm's accounting shows for it)."""
    job.state = FAILED
    job.reason = "None"
    job.exit_code, job.exit_signal = 1, 0
    job.end_time = now
    if job.start_time is None:
        job.start_time = now


def deadline_missed(job: Job, *, now: int) -> None:
    """A pending job can no longer end before its ``--deadline``: it ends without running
    (Slurm: state DEADLINE, reason DeadLine), Start=End as for a job cancelled while pending."""
    job.state = DEADLINE
    job.reason = "DeadLine"
    job.reason_desc = None
    job.end_time = now
    if job.start_time is None:
        job.start_time = now


def begin_kill(job: Job, *, final_state: str, by_uid: int | None, now: int,
               reason: str = "None") -> None:
    """A running job is being terminated on purpose: its final state is decided now, the
    resources stay allocated (``completing``) until the agent reports the processes gone."""
    job.state = final_state
    job.reason = reason
    job.cancelled_by = by_uid
    job.end_time = now
    job.completing = True


def finish(job: Job, *, exit_code: int, signal: int, timed_out: bool, now: int,
           end_time: int | None = None, launch_failed: bool = False, oom: bool = False,
           launch_error: str | None = None) -> dict[str, Any]:
    """The batch script ended. Sets the final state unless a cancel already decided it.
    ``oom``: the OOM killer took processes of the batch step (its cgroup counted kills).
    ``launch_error``: why the batch step could not launch (its node's words), kept as the
    job's SystemComment. Returns the batch step's accounting record."""
    end = end_time or now
    step_state = _step_state(exit_code, signal, timed_out)
    if oom and not timed_out:
        step_state, exit_code, signal = OUT_OF_MEMORY, 0, OOM_SIGNAL
    if job.completing and job.state != RUNNING:
        # cancel / requeue / node failure already chose the job's state
        pass
    elif launch_failed:
        job.state, job.reason = FAILED, "JobLaunchFailure"
        job.system_comment = launch_error[:1000] if launch_error else job.system_comment
    elif timed_out:
        job.state, job.reason = TIMEOUT, "TimeLimit"
    elif oom:
        job.state, job.reason = OUT_OF_MEMORY, "OutOfMemory"
    elif signal:
        job.state, job.reason = FAILED, "RaisedSignal"
    elif exit_code:
        job.state, job.reason = FAILED, "NonZeroExitCode"
    else:
        job.state, job.reason = COMPLETED, "None"
    if job.state == CANCELLED:
        step_state = CANCELLED if (signal or exit_code) else step_state
    job.exit_code = exit_code
    job.exit_signal = signal
    if job.state in (TIMEOUT, CANCELLED, NODE_FAIL, PREEMPTED) and (
            job.completing or job.state == TIMEOUT):
        # killed on purpose (time limit, scancel, requeue, node failure): the job line shows
        # 0:0 and the batch step keeps the signal (Slurm's accounting does the same)
        job.exit_code, job.exit_signal = 0, 0
    job.derived_exit_code = max(job.derived_exit_code, exit_code)
    if job.end_time is None or not job.completing:
        job.end_time = end
    job.completing = False
    return {
        "job_id": job.job_id, "step_id": "batch", "name": "batch", "state": step_state,
        "exit_code": exit_code, "exit_signal": signal, "start_time": job.start_time,
        "end_time": end, "node_list": job.batch_host, "num_nodes": 1,
        "num_cpus": job.alloc[0].cpus if job.alloc else job.num_cpus, "num_tasks": 1,
        "tres_alloc": None,
    }


def _step_state(exit_code: int, signal: int, timed_out: bool) -> str:
    if signal:
        return CANCELLED if signal in (_signal.SIGTERM, _signal.SIGKILL) else FAILED
    return FAILED if exit_code else COMPLETED


def requeue(job: Job, *, now: int, delay: int, hold: bool = False, held_desc: str | None = None,
            partition_default_time: int | None = None) -> dict[str, Any]:
    """Return a finished or terminated run to the queue under the same id.
    Returns the record of the run that ended (for sacct --duplicates)."""
    prev = job.to_record()
    prev["state"] = "REQUEUED" if job.state in (CANCELLED, RUNNING, PENDING) else job.state
    job.state = PENDING
    job.restarts += 1
    job.completing = False
    job.start_time = None
    job.end_time = None
    job.alloc = ()
    job.node_list = None
    job.batch_host = None
    job.tres_alloc = None
    job.exit_code = job.exit_signal = 0
    job.cancelled_by = None
    job.submit_time = now
    job.eligible_time = now + delay
    job.begin_time = now + delay
    job.reason = "BeginTime" if delay > 0 else "None"
    if partition_default_time is not None and job.timelimit_from_partition:
        job.time_limit = partition_default_time
    if hold:
        job.hold = "user"
        job.priority = 0
        job.reason = "JobHeldUser"
        job.reason_desc = held_desc
    return prev


def hold(job: Job, *, admin: bool) -> None:
    job.hold = "admin" if admin else "user"
    job.priority = 0
    if job.state == PENDING:
        job.reason = "JobHeldAdmin" if admin else "JobHeldUser"


def release(job: Job, *, base_priority: int) -> None:
    job.hold = None
    job.priority = base_priority
    job.reason_desc = None
    if job.state == PENDING and job.reason in ("JobHeldUser", "JobHeldAdmin"):
        job.reason = "None"


def node_failed(job: Job, *, node: str, now: int) -> None:
    job.state = NODE_FAIL
    job.reason = "NodeDown"
    job.end_time = now
    job.completing = False


def expand_io_paths(job: Job) -> None:
    """Fill std_out/std_err/std_in with the controller-side expansion of the job's patterns
    (``%j``, ``%A``, ``%a``, ``%u``, ``%x``; ``%N`` is left to the node), relative paths under
    the working directory. Pure string work: the paths are not touched."""
    arr_id = job.array_job_id
    task = job.array_task_id

    def exp(pat: str) -> str:
        path = expand_pattern(pat, job_id=job.job_id, array_job_id=arr_id,
                              array_task_id=task, user=job.user, name=job.name)
        return path if posixpath.isabs(path) else posixpath.join(job.work_dir, path)

    out, err, inp = job.io_patterns
    assert out is not None and inp is not None  # only -e may be unset (then it follows -o)
    job.std_out = exp(out)
    job.std_err = exp(err) if err else job.std_out
    job.std_in = exp(inp) if inp != "/dev/null" else inp
