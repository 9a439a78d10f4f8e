"""The job state machine: ``handle(job, event, now) -> (changes, effects)``. Pure.

No I/O, no clock (``now`` is passed in), and the job given is never mutated: a handler works
on a private draft, and what differs comes back as ``SetFields`` changes, in order with the
other changes (muster.lifecycle.effects). The per-field rules (completion rule, exit codes,
requeue bookkeeping) stay in :mod:`muster.lifecycle.job`, which the simulator shares.

A job is in one of four phases (its Slurm state folded to what decides the transitions):

    PENDING     state PENDING
    RUNNING     state RUNNING, not completing
    COMPLETING  its end is decided (or it is being requeued), processes not yet confirmed gone
    DONE        a terminal state, resources free

Transition table (``TABLE``; ``-`` = refused, see ``REFUSED``):

    event \\ phase  PENDING          RUNNING               COMPLETING          DONE
    Start          start            -                     -                   -
    Ended          -                end                   end                 -  (duplicate)
    Cancel         cancel_pending   kill CANCELLED        -                   -
    SignalJob      -                signal                signal              -
    Timeout        -                kill TIMEOUT          -                   -
    Requeue        hold (if hold)   kill REQUEUED         requeue_later       requeue_done
    Hold           hold             hold                  hold                -
    Release        release          release               release             -
    NodeFailed     -                node_failed           node_failed         -
    Preempt        -                preempt (grace: timer) -                  -
    DeadlineMissed deadline         -                     -                   -
    ReleaseAlloc.  cancel_pending   end or tear down      -                   -
    StepsDrained   -                -                     end (allocation)    -
    PrologFailed   -                requeue or kill       -                   -

Requeue is further guarded: only a batch job that may requeue takes it (else ``Refused``);
ReleaseAllocation only an allocation without a batch script.

Invariants (tests/unit/test_jobfsm.py checks them over random event sequences): DONE is
never left except by Requeue (back to PENDING under the same id, the ended run recorded);
every transition into DONE sets ``end_time`` and the exit fields.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from muster.lifecycle import effects as fx
from muster.lifecycle import events as ev
from muster.lifecycle import job as lifecycle
from muster.model.job import ALL_FIELDS, CANCELLED, PENDING, RUNNING, TIMEOUT, Job

PENDING_P, RUNNING_P, COMPLETING_P, DONE_P = "PENDING", "RUNNING", "COMPLETING", "DONE"
PHASES = (PENDING_P, RUNNING_P, COMPLETING_P, DONE_P)
_FIELDS = tuple(n for n, _ in ALL_FIELDS)
_VALUES = attrgetter(*_FIELDS)  # job -> the tuple of its field values, in _FIELDS order
_HELD_DESC = "job requeued in held state"


@dataclass(frozen=True)
class Policy:
    """The configuration the machine reads: requeue delay and RequeueExit[Hold] codes."""
    requeue_delay: int = 2
    requeue_exit: frozenset[int] = frozenset()
    requeue_exit_hold: frozenset[int] = frozenset()


class Refused(Exception):
    """``handle`` of a (phase, event) pair in ``REFUSED``."""


def phase(job: Job) -> str:
    if job.completing:
        return COMPLETING_P
    if job.state == PENDING:
        return PENDING_P
    if job.state == RUNNING:
        return RUNNING_P
    return DONE_P


class _Draft:
    """A private copy of the job and the changes/effects gathered so far. ``change`` first
    records the fields changed since the last change, so the order of the list is the order
    in which the fields were set relative to the other changes."""

    def __init__(self, job: Job) -> None:
        self.j = job.copy()
        self._seen = _VALUES(job)
        self.changes: list[Any] = []
        self.effects: list[Any] = []

    def _flush(self) -> None:
        """One C-level read of every field (``attrgetter``) and one tuple comparison (which,
        like the per-field test it replaces, takes identical objects as equal): most flushes
        find nothing changed, and an event flushes several times (a pass of array starts
        spent most of its controller time here when this was a per-field Python loop)."""
        now = _VALUES(self.j)
        if now == self._seen:
            return
        diff = {n: v for n, v, was in zip(_FIELDS, now, self._seen)
                if v is not was and v != was}
        self._seen = now
        if diff:
            self.changes.append(fx.SetFields(diff))

    def change(self, c: object) -> None:
        self._flush()
        self.changes.append(c)

    def effect(self, e: object) -> None:
        self.effects.append(e)

    def done(self) -> fx.Outcome:
        self._flush()
        return tuple(self.changes), tuple(self.effects)


def _nodes(j: Job) -> tuple[str | None, ...]:
    """Every node the job's processes may be on (batch host first), once each."""
    return tuple(dict.fromkeys([j.batch_host] + [a.node for a in j.alloc]))


# ---- handlers: (draft, event, now, policy) -> None --------------------------------------
def _start(d: _Draft, e: ev.Start, now: int, _p: Policy) -> None:
    j = d.j
    if e.time_limit:
        j.time_limit = e.time_limit  # --time-min: backfill chose the limit
    j.scheduler = e.scheduler
    j.expected_start = j.sched_nodes = None
    lifecycle.start(j, partition=e.partition, alloc=e.alloc, node_list=e.node_list,
                    tres_alloc=e.tres_alloc, now=now)
    lifecycle.expand_io_paths(j)
    d.change(fx.AllocateResources())
    d.effect(fx.Launch(j.job_id))  # after its prologs: the batch script, or wake srun/salloc


def _cancel_pending(d: _Draft, e: ev.Cancel, now: int, _p: Policy) -> None:
    lifecycle.cancel_pending(d.j, by_uid=e.by_uid, now=now)
    d.change(fx.Log("cancelled", f"by uid {e.by_uid} while pending"))
    d.effect(fx.Notify(d.j.job_id))


def _kill(d: _Draft, final_state: str, by_uid: int | None, why: str, now: int) -> None:
    """A running job is terminated on purpose (controller's old ``kill_running``)."""
    lifecycle.begin_kill(d.j, final_state=final_state, by_uid=by_uid, now=now)
    d.change(fx.HoldResources())
    d.effect(fx.Terminate(d.j.job_id, d.j.restarts, _nodes(d.j), why))


def _cancel_running(d: _Draft, e: ev.Cancel, now: int, _p: Policy) -> None:
    _kill(d, CANCELLED, e.by_uid, "cancel", now)
    d.change(fx.Log("cancelled", f"by uid {e.by_uid}"))


def _timeout(d: _Draft, e: ev.Timeout, now: int, _p: Policy) -> None:
    _kill(d, TIMEOUT, None, "timeout", now)
    d.change(fx.Log("timeout", "time limit reached"))


def _signal(d: _Draft, e: ev.SignalJob, now: int, _p: Policy) -> None:
    """Each node's agent signals what of the job runs there (the steps a node runs are its
    own knowledge, which survives a controller restart); ``batch`` reaches the batch host
    alone."""
    j = d.j
    if e.scope == "batch":
        nodes: tuple[str | None, ...] = (j.batch_host,) if j.batch and j.batch_host else ()
    else:
        nodes = tuple(n for n in _nodes(j) if n)
    if nodes:
        d.effect(fx.Signal(j.job_id, j.restarts, nodes, e.signal, e.scope, e.cont))


def _allocation_only(j: Job) -> None:
    if j.batch:
        raise Refused("a batch job is not an srun/salloc allocation")


def _release_pending(d: _Draft, e: ev.ReleaseAllocation, now: int, p: Policy) -> None:
    """srun/salloc gave up before its allocation was granted: cancelled, or FAILED when
    --immediate found no resources at once (as slurmctld records such a job)."""
    _allocation_only(d.j)
    if not e.immediate:
        _cancel_pending(d, ev.Cancel(e.by_uid), now, p)
        return
    lifecycle.immediate_failed(d.j, now=now)
    d.change(fx.Log("failed", "--immediate: resources not available at once"))
    d.effect(fx.Notify(d.j.job_id))


def _release_running(d: _Draft, e: ev.ReleaseAllocation, now: int, _p: Policy) -> None:
    """srun/salloc gives its allocation back: the job ends with the command's status, at once
    when no step is left, else torn down (COMPLETING) until its last step reports."""
    j = d.j
    _allocation_only(j)
    if e.steps_live:
        _kill(d, "FAILED" if (e.exit_code or e.signal) else "COMPLETED", None, "cancel", now)
        j.exit_code, j.exit_signal = e.exit_code, e.signal
        j.reason = ("NonZeroExitCode" if e.exit_code
                    else "RaisedSignal" if e.signal else "None")
    else:
        lifecycle.finish(j, exit_code=e.exit_code, signal=e.signal, timed_out=False, now=now)
        d.change(fx.ReleaseResources())
    d.change(fx.Log("released", f"exit {e.exit_code}:{e.signal}"))
    d.effect(fx.Schedule())


def _may_requeue(j: Job) -> None:
    """Only a batch job that allows it requeues (the request is refused before; a stale or
    direct event is refused here, so an allocation never ends up REQUEUED)."""
    if not (j.batch and j.requeue):
        raise Refused("only a batch job that may requeue is requeued")


def _requeue_pending(d: _Draft, e: ev.Requeue, now: int, _p: Policy) -> None:
    _may_requeue(d.j)
    if e.hold:  # requeuehold of a pending job holds it (plain requeue is refused earlier)
        lifecycle.hold(d.j, admin=False)


def _requeue_running(d: _Draft, e: ev.Requeue, now: int, _p: Policy) -> None:
    # REQUEUED, not CANCELLED, while its processes end: tools that poll sacct (submitit)
    # must not take a job being requeued for a finished one
    _may_requeue(d.j)
    d.j.requeue_pending, d.j.requeue_hold = True, e.hold
    _kill(d, "REQUEUED", e.by_uid, "requeue", now)
    d.change(fx.Log("requeue_requested", f"by uid {e.by_uid}"))


def _requeue_later(d: _Draft, e: ev.Requeue, now: int, _p: Policy) -> None:
    _may_requeue(d.j)
    d.j.requeue_pending, d.j.requeue_hold = True, e.hold


def _requeue_done(d: _Draft, e: ev.Requeue, now: int, p: Policy) -> None:
    _may_requeue(d.j)
    prev = lifecycle.requeue(d.j, now=now, delay=p.requeue_delay, hold=e.hold,
                             held_desc=_HELD_DESC if e.hold else None)
    d.change(fx.PutRun(d.j.restarts - 1, prev))
    d.change(fx.Log("requeued", f"by uid {e.by_uid}"))
    d.effect(fx.Schedule())


def _hold(d: _Draft, e: ev.Hold, now: int, _p: Policy) -> None:
    lifecycle.hold(d.j, admin=e.admin)
    d.change(fx.Log("held", f"by uid {e.by_uid}"))


def _release(d: _Draft, e: ev.Release, now: int, _p: Policy) -> None:
    lifecycle.release(d.j, base_priority=e.base_priority)
    d.change(fx.Log("released", f"by uid {e.by_uid}"))
    d.effect(fx.Schedule())


def _deadline(d: _Draft, e: ev.DeadlineMissed, now: int, _p: Policy) -> None:
    lifecycle.deadline_missed(d.j, now=now)
    d.change(fx.Log("deadline", "cannot end before its deadline"))
    if not d.j.batch:
        d.effect(fx.Notify(d.j.job_id))


def _preempt(d: _Draft, e: ev.Preempt, now: int, _p: Policy) -> None:
    if not e.expired:
        d.change(fx.Log("preempted", f"by job {e.preemptor} ({e.mode}, grace {e.grace}s)"))
        if e.grace > 0:  # SIGTERM now, the kill when the grace time is over
            nodes = tuple(n for n in _nodes(d.j) if n)
            d.effect(fx.Signal(d.j.job_id, d.j.restarts, nodes, 15, "full"))
            d.effect(fx.Timer(e.grace, d.j.job_id, d.j.restarts,
                              ev.Preempt(e.mode, e.preemptor, e.grace, expired=True)))
            return
    if e.mode == "REQUEUE" and d.j.batch and d.j.requeue:
        d.j.requeue_pending = True
        _kill(d, CANCELLED, None, "preempt", now)
    else:
        _kill(d, "PREEMPTED", None, "preempt", now)
    if e.mode != "REQUEUE":
        d.j.reason = "Preempted"
    if not d.j.batch:
        d.effect(fx.Notify(d.j.job_id))
    d.effect(fx.Schedule())


def _end(d: _Draft, e: ev.Ended, now: int, p: Policy) -> None:
    if not d.j.batch:
        _end_allocation(d, e, now)
        return
    j = d.j
    step = lifecycle.finish(j, exit_code=e.exit_code, signal=e.signal, timed_out=e.timed_out,
                            now=now, end_time=e.end_time, launch_failed=e.launch_failed,
                            oom=e.oom, launch_error=e.launch_error)
    d.change(fx.ReleaseResources())  # Epilogs of the run that ended: before a requeue's fields
    if e.steps_running:  # steps still running when the batch script ends are killed
        others = tuple(n for n in dict.fromkeys(a.node for a in j.alloc) if n != e.node)
        if others:
            d.effect(fx.Terminate(j.job_id, j.restarts, others, "cancel"))
    if j.requeue and not j.requeue_pending and j.state == "FAILED" and e.exit_code:
        # RequeueExit / RequeueExitHold (states.md §6): the exit code asks for another run
        if e.exit_code in p.requeue_exit_hold:
            j.requeue_pending, j.requeue_hold = True, True
        elif e.exit_code in p.requeue_exit:
            j.requeue_pending = True
    d.change(fx.PutStep("batch", step))
    d.change(fx.PutUsage("batch", {e.node: e.usage}))
    if j.requeue_pending:
        j.requeue_pending = False
        prev = lifecycle.requeue(j, now=now, delay=p.requeue_delay, hold=j.requeue_hold,
                                 held_desc=_HELD_DESC if j.requeue_hold else None)
        j.requeue_hold = False
        d.change(fx.PutRun(j.restarts - 1, prev))
        d.change(fx.Log("requeued", f"run {j.restarts - 1} ended"))
    else:
        d.change(fx.Log("ended", f"{j.state} {j.exit_code}:{j.exit_signal}"
                        + (" (processes lost)" if e.lost else "")
                        + (f" ({str(e.launch_error)[:200]})" if e.launch_error else "")))
    d.effect(fx.Schedule())


def _end_allocation(d: _Draft, e: ev.Ended, now: int) -> None:
    """An srun/salloc allocation's agent-side end: it finishes once it is being torn down
    and its last step is gone."""
    if d.j.completing and not e.steps_running:
        _drained(d, ev.StepsDrained(), now, Policy())


def _drained(d: _Draft, e: ev.StepsDrained, now: int, _p: Policy) -> None:
    j = d.j
    _allocation_only(j)
    d.change(fx.ForgetSteps())
    lifecycle.finish(j, exit_code=j.exit_code, signal=j.exit_signal, timed_out=False, now=now)
    d.change(fx.ReleaseResources())
    d.effect(fx.Notify(j.job_id))
    d.effect(fx.Schedule())


def _prolog_failed(d: _Draft, e: ev.PrologFailed, now: int, p: Policy) -> None:
    """The run never started its script: requeue it (what of it runs anywhere is terminated,
    its resources released, its Epilogs run) or end it once its nodes confirm."""
    j = d.j
    if e.requeue:
        run = j.restarts
        d.change(fx.ForgetSteps())
        d.effect(fx.Terminate(j.job_id, run, tuple(dict.fromkeys(a.node for a in j.alloc)),
                              "requeue"))
        d.change(fx.ReleaseResources())  # Epilogs of this run: before the requeue's fields
        prev = lifecycle.requeue(j, now=now, delay=p.requeue_delay, hold=e.hold,
                                 held_desc=e.held_desc if e.hold else None)
        d.change(fx.PutRun(run, prev))
        d.change(fx.Log("requeued", e.why))
    else:
        _kill(d, e.final_state, e.by_uid, "cancel", now)
        j.reason = e.reason
        d.change(fx.Log("ended", e.why))
    d.effect(fx.Notify(j.job_id))
    d.effect(fx.Schedule())


def _node_failed(d: _Draft, e: ev.NodeFailed, now: int, p: Policy) -> None:
    """One of the job's nodes died: requeue (batch, requeue allowed) or NODE_FAIL. The
    caller has already ended the job's steps (their records must see the job as it was)."""
    j = d.j
    d.change(fx.ReleaseResources())
    others = tuple(n for n in dict.fromkeys(a.node for a in j.alloc) if n != e.node)
    if others:  # kill what is left of it on the nodes that are still alive
        d.effect(fx.Terminate(j.job_id, j.restarts, others, "node_fail"))
    if j.completing and j.state != RUNNING and not j.requeue_pending:
        lifecycle.finish(j, exit_code=0, signal=0, timed_out=False, now=now)
    elif j.batch and j.requeue:
        j.state, j.end_time = "NODE_FAIL", now
        prev = lifecycle.requeue(j, now=now, delay=p.requeue_delay, hold=j.requeue_hold,
                                 held_desc=_HELD_DESC if j.requeue_hold else None)
        prev["state"] = "NODE_FAIL"
        j.requeue_pending = j.requeue_hold = False
        d.change(fx.PutRun(j.restarts - 1, prev))
        d.change(fx.PutStep("batch", {
            "job_id": j.job_id, "step_id": "batch", "name": "batch", "state": "CANCELLED",
            "exit_code": 0, "exit_signal": 9, "start_time": prev.get("start_time"),
            "end_time": now, "node_list": prev.get("batch_host"), "num_nodes": 1,
            "num_cpus": 1, "num_tasks": 1, "tres_alloc": None}))
        d.change(fx.Log("requeued", f"node {e.node} failed"))
    else:
        lifecycle.node_failed(j, node=e.node, now=now)
        d.change(fx.Log("node_fail", f"node {e.node} failed"))
    j.failed_node = e.node
    d.effect(fx.Notify(j.job_id))


# ---- the table ------------------------------------------------------------------------------
P, R, C, D = PENDING_P, RUNNING_P, COMPLETING_P, DONE_P
TABLE: dict[tuple[str, type], Callable[[_Draft, Any, int, Policy], None]] = {
    (P, ev.Start): _start,
    (P, ev.Cancel): _cancel_pending,
    (P, ev.Requeue): _requeue_pending,
    (P, ev.Hold): _hold,
    (P, ev.Release): _release,
    (P, ev.DeadlineMissed): _deadline,
    (P, ev.ReleaseAllocation): _release_pending,
    (R, ev.ReleaseAllocation): _release_running,
    (R, ev.Ended): _end,
    (R, ev.Cancel): _cancel_running,
    (R, ev.SignalJob): _signal,
    (R, ev.Timeout): _timeout,
    (R, ev.Requeue): _requeue_running,
    (R, ev.Hold): _hold,
    (R, ev.Release): _release,
    (R, ev.NodeFailed): _node_failed,
    (R, ev.Preempt): _preempt,
    (R, ev.PrologFailed): _prolog_failed,
    (C, ev.Ended): _end,
    (C, ev.SignalJob): _signal,
    (C, ev.Requeue): _requeue_later,
    (C, ev.Hold): _hold,
    (C, ev.Release): _release,
    (C, ev.NodeFailed): _node_failed,
    (C, ev.StepsDrained): _drained,
    (D, ev.Requeue): _requeue_done,
}

_STALE = "stale: the job is no longer in a phase this event applies to"
REFUSED: dict[tuple[str, type], str] = {
    (P, ev.Ended): "no processes yet: an end report of an older run",
    (P, ev.SignalJob): "no processes to signal",
    (P, ev.Timeout): "a pending job has no time running",
    (P, ev.NodeFailed): "holds no node",
    (P, ev.Preempt): _STALE,
    (P, ev.StepsDrained): "holds no allocation",
    (P, ev.PrologFailed): _STALE,
    (R, ev.Start): "already running",
    (R, ev.DeadlineMissed): _STALE,
    (R, ev.StepsDrained): "not being torn down: its steps end, the allocation goes on",
    (C, ev.Start): "still completing",
    (C, ev.Cancel): "its end is already decided",
    (C, ev.Timeout): "its end is already decided",
    (C, ev.Preempt): _STALE,
    (C, ev.DeadlineMissed): _STALE,
    (C, ev.PrologFailed): _STALE,
    (C, ev.ReleaseAllocation): "its end is already decided",
    **{(D, t): "finished" for t in ev.JOB_EVENTS if t is not ev.Requeue},
}


def handle(job: Job, event: object, now: int, policy: Policy = Policy()) -> fx.Outcome:
    """The changes and effects of ``event`` on ``job`` at ``now``; raises ``Refused`` for a
    pair the table refuses, or a handled pair whose guard fails (Requeue of a job that may
    not requeue). Callers validate first; a refusal here is a stale event."""
    key = (phase(job), type(event))
    fn = TABLE.get(key)
    if fn is None:
        raise Refused(REFUSED.get(key, f"no transition for {key}"))
    d = _Draft(job)
    fn(d, event, now, policy)
    return d.done()


def apply_fields(job: Job, changes: Iterable[object]) -> None:
    """Apply the ``SetFields`` of ``changes`` to ``job`` (what the simulator and the tests
    need; the controller's applier handles every kind of change)."""
    for c in changes:
        if isinstance(c, fx.SetFields):
            for k, v in c.fields.items():
                setattr(job, k, v)
