"""Changes and effects: what a state machine's ``handle`` asks the controller to do. Pure.

``handle(record, event, now) -> (changes, effects)``:

* **changes** are durable: an ordered tuple of the operations below, applied to the record
  (and the store) by the controller's applier inside ONE store transaction. Order matters
  where the controller reacts to the record's fields (``ReleaseResources`` runs the Epilogs
  of the run that ended, so it comes before the ``SetFields`` of a requeue that bumps
  ``restarts``).
* **effects** are what happens outside the store, dispatched only after that commit:
  messages to agents, wake-ups of waiting clients, timers, a scheduling pass. A crash between
  the commit and the dispatch loses effects, never state (the agents reconcile on
  registration, a requeued job is rescheduled).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


# what ``handle`` returns: (changes, effects), each of the dataclasses below
Outcome = tuple[tuple[Any, ...], tuple[Any, ...]]


# ---- changes ------------------------------------------------------------------------------
@dataclass(frozen=True)
class SetFields:
    """Assign these record fields (name → value)."""
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReleaseResources:
    """Give the job's resources back on its nodes (node Epilogs, EpilogSlurmctld follow)."""


@dataclass(frozen=True)
class AllocateResources:
    """Take the job's new allocation (``Job.alloc``) on its nodes."""


@dataclass(frozen=True)
class HoldResources:
    """Keep the job's resources allocated as COMPLETING until the agent confirms the end."""


@dataclass(frozen=True)
class ForgetSteps:
    """The allocation is gone: its steps end as lost, their live usage samples are dropped."""


@dataclass(frozen=True)
class PutStep:
    """Store a step's accounting record (the batch step, at the job's end)."""
    step_id: str
    record: dict[str, Any]


@dataclass(frozen=True)
class PutUsage:
    """Store a step's final usage statistics from ``{node: raw report}``."""
    step_id: str
    reports: dict[str, Any]


@dataclass(frozen=True)
class PutRun:
    """Store the record of a run that ended (``sacct --duplicates``) under its run number."""
    run: int
    record: dict[str, Any]


@dataclass(frozen=True)
class Log:
    """One row of the event log (``kind``, ``detail``)."""
    kind: str
    detail: str = ""


# ---- effects ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Launch:
    """The job has started: once its prologs allow (PrologSlurmctld, PrologFlags=Alloc),
    send the batch script to its batch host, or wake the srun/salloc waiting for it."""
    job_id: int


@dataclass(frozen=True)
class Terminate:
    """Kill the job's processes of run ``run`` on ``nodes``."""
    job_id: int
    run: int
    nodes: tuple[str | None, ...]  # (None: a job without a batch host)
    why: str


@dataclass(frozen=True)
class Signal:
    """Deliver ``signal`` to the job's processes of run ``run`` on ``nodes``."""
    job_id: int
    run: int
    nodes: tuple[str | None, ...]
    signal: int
    scope: str = "full"
    cont: bool = False


@dataclass(frozen=True)
class Notify:
    """Wake the srun/salloc waiting on this job (it started or ended)."""
    job_id: int


@dataclass(frozen=True)
class Schedule:
    """Resources or the queue changed: run a scheduling pass soon."""


@dataclass(frozen=True)
class Timer:
    """Deliver ``event`` to job ``job_id`` (run ``run``) after ``delay`` seconds."""
    delay: float
    job_id: int
    run: int
    event: object


@dataclass(frozen=True)
class Reply:
    """The answer to the request that caused the event."""
    payload: dict[str, Any]


CHANGES = (SetFields, AllocateResources, ReleaseResources, HoldResources, ForgetSteps, PutStep,
           PutUsage, PutRun, Log)
EFFECTS = (Launch, Terminate, Signal, Notify, Schedule, Timer, Reply)
