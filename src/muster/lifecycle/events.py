"""Events: what happened to a job or a node, as plain frozen data. Pure.

The controller turns every input (an RPC, an agent report, a tick of its clock, a plan from
the scheduling core) into one of these, hands it to the record's state machine
(:mod:`muster.lifecycle.jobfsm`, :mod:`muster.lifecycle.nodefsm`) and applies what comes
back. An event carries every fact the machine needs that is not in the record itself (who
asked, what the agent reported, whether steps are still running), so ``handle`` never looks
anything up: same record, same event, same ``now`` → same answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from muster.model.alloc import NodeAlloc


@dataclass(frozen=True)
class Start:
    """The scheduler placed a pending job (scheduling.apply_plan). ``time_limit``: the limit
    backfill chose for a ``--time-min`` job (None: keep the job's); ``scheduler``: the pass
    that started it (``Main`` or ``Backfill``, scontrol's ``Scheduler=``)."""
    partition: str
    alloc: tuple[NodeAlloc, ...]  # per node, as Job.alloc
    node_list: str
    tres_alloc: str
    time_limit: int | None = None
    scheduler: str = "Main"


@dataclass(frozen=True)
class Ended:
    """The agent reported the batch script's end (``job_ended``), or its processes lost."""
    node: str
    exit_code: int = 0
    signal: int = 0
    timed_out: bool = False
    end_time: int | None = None
    launch_failed: bool = False
    oom: bool = False
    lost: bool = False
    launch_error: str | None = None
    usage: dict[str, Any] | None = None  # the batch step's raw usage report from that node
    steps_running: bool = False  # steps of the job still known: killed on the other nodes


@dataclass(frozen=True)
class Cancel:
    """scancel (or the end of an srun/salloc allocation) by ``by_uid``."""
    by_uid: int | None


@dataclass(frozen=True)
class SignalJob:
    """scancel -s, or a ``--signal`` warning: deliver ``signal`` to the job's processes; the
    state does not change. ``scope``: ``steps`` (the tasks of every running step, not the
    batch shell), ``batch`` (the batch shell alone, on its node), ``full`` (both). ``cont``:
    SIGCONT first (Slurm does so before a ``--signal`` warning)."""
    signal: int
    scope: str = "full"
    cont: bool = False


@dataclass(frozen=True)
class ReleaseAllocation:
    """srun/salloc gives its allocation back (the command ended with ``exit_code``/``signal``).
    ``steps_live``: some of its steps have not reported their end yet, so the allocation is
    torn down (COMPLETING) and finishes with the last one. ``immediate``: a pending
    allocation asked for with ``--immediate`` did not start at once; it ends FAILED."""
    by_uid: int
    exit_code: int = 0
    signal: int = 0
    steps_live: bool = False
    immediate: bool = False


@dataclass(frozen=True)
class Timeout:
    """The time limit of an allocation without a batch script passed (batch jobs are timed
    by their agent and end with ``Ended(timed_out=True)``)."""


@dataclass(frozen=True)
class Requeue:
    """scontrol requeue[hold] by ``by_uid``."""
    by_uid: int
    hold: bool = False


@dataclass(frozen=True)
class Hold:
    by_uid: int
    admin: bool


@dataclass(frozen=True)
class Release:
    by_uid: int
    base_priority: int = 1


@dataclass(frozen=True)
class NodeFailed:
    """One of the job's nodes went down (silent agent, scontrol update state=down)."""
    node: str


@dataclass(frozen=True)
class Preempt:
    """The core chose this job as a victim (of ``preemptor``). ``mode``: the core's
    PreemptMode (REQUEUE sends a batch job that may requeue back to the queue; anything else
    ends it PREEMPTED). With ``grace`` seconds (GraceTime) the job gets SIGTERM now and the
    same event with ``expired`` set when the grace time is over."""
    mode: str
    preemptor: int = 0
    grace: int = 0
    expired: bool = False


@dataclass(frozen=True)
class DeadlineMissed:
    """A pending job can no longer end before its ``--deadline``."""


@dataclass(frozen=True)
class PrologFailed:
    """A prolog of the job's start failed (PrologSlurmctld, or a node's Prolog), so the run
    never started its script. ``requeue``: back to the queue under the same id (held with
    ``hold``, shown with ``held_desc``); else the job ends in ``final_state`` with ``reason``,
    cancelled by ``by_uid``."""
    why: str
    requeue: bool
    hold: bool = False
    held_desc: str | None = None
    final_state: str = "FAILED"
    reason: str = "None"
    by_uid: int | None = None


@dataclass(frozen=True)
class StepsDrained:
    """The last step of an srun/salloc allocation being torn down has reported its end."""


# Node events (muster.lifecycle.nodefsm)
@dataclass(frozen=True)
class NodeDown:
    reason: str
    user: str
    auto: bool = False  # set by the controller itself (silent agent): undone by registration


@dataclass(frozen=True)
class NodeDrain:
    reason: str
    user: str
    detail: str = ""  # for the event log only (a failed Prolog's output, say)


@dataclass(frozen=True)
class NodeResume:
    pass


@dataclass(frozen=True)
class NodeRegistered:
    """The node's agent registered (again). ``return_to_service``: slurm.conf's
    ReturnToService (0: a DOWN node stays DOWN; 1: only a DOWN the controller set for a silent
    agent is undone; 2: any DOWN is)."""
    return_to_service: int = 1


@dataclass(frozen=True)
class NodeSilent:
    """The agent has been silent for SlurmdTimeout."""


JOB_EVENTS = (Start, Ended, Cancel, SignalJob, Timeout, Requeue, Hold, Release, NodeFailed,
              Preempt, DeadlineMissed, ReleaseAllocation, StepsDrained, PrologFailed)
NODE_EVENTS = (NodeDown, NodeDrain, NodeResume, NodeRegistered, NodeSilent)
