"""The one place where a state machine's answer takes effect.

``handle(record, event, now) -> (changes, effects)`` (muster.lifecycle.jobfsm) decides;
the applier commits and acts:

    event ─► jobfsm.handle ─► changes ──► ONE store transaction (fields, resources, step/run
                         │                records, event log, then the job saved once)
                         └──► effects ──► dispatched after that commit (agent messages,
                                          wake-ups of srun/salloc, timers, scheduling pass)

Invariants:
  * the changes of one ``apply`` (and of every ``apply`` inside one ``transaction()``) are
    committed together or not at all;
  * no effect leaves before the transaction that produced it has committed: effects are
    queued and dispatched when the outermost ``transaction()`` of the applier exits without
    an error (a failed transaction drops them). A caller holding a bare
    ``store.transaction()`` around an ``apply`` gets its effects at the end of the apply,
    before its own commit; the converted paths use ``applier.transaction()`` instead.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import contextmanager

from muster.controller import state as state_mod
from muster.controller.faults import crash_point
from muster.lifecycle import effects as fx
from muster.lifecycle import jobfsm, nodefsm

log = logging.getLogger("musterctld")


class Applier:
    def __init__(self, ctl):
        self.ctl = ctl
        self._depth = 0
        self._queue: list = []
        self._after: list = []  # callables for after the commit (after_commit)
        self._policy: jobfsm.Policy | None = None
        self.armed: set[int] = set()  # jobs with a timer set (a preemption's grace time)

    def configure(self) -> None:
        """The configuration changed (muster.controller.reconfig.apply_settings): the policy
        is built again from it on next use."""
        self._policy = None

    @property
    def policy(self) -> jobfsm.Policy:
        """What the job machine reads of the configuration (built once, on first use: the
        controller sets ``requeue_delay`` after creating the applier)."""
        if self._policy is None:
            ctl = self.ctl
            self._policy = jobfsm.Policy(
                requeue_delay=ctl.requeue_delay,
                requeue_exit=frozenset(ctl.cfg.requeue_exit or ()),
                requeue_exit_hold=frozenset(ctl.cfg.requeue_exit_hold or ()))
        return self._policy

    # ---- entry points ----------------------------------------------------------------------
    def job(self, job, event, now: int) -> None:
        """Feed ``event`` to ``job``'s state machine and apply the answer."""
        changes, effects = jobfsm.handle(job, event, now, self.policy)
        self.apply(job, changes, effects)

    def node(self, node, event, now: int) -> None:
        """Feed ``event`` to the node machine. ``FailJobs`` is a cascade, not I/O: the
        node's jobs get ``NodeFailed`` inside the same transaction (``ctl.fail_jobs_on``)."""
        changes, effects = nodefsm.handle(node, event, now)
        with self.transaction():
            for c in changes:
                if isinstance(c, fx.SetFields):
                    for k, v in c.fields.items():
                        setattr(node, k, v)
                elif isinstance(c, fx.Log):
                    self.ctl.state.event(None, c.kind, c.detail, node=node.name)
                else:
                    raise TypeError(f"unknown node change {c!r}")
            if changes:
                self.ctl.state.store.put_node(node.name, node.admin_record())
            for e in effects:
                if isinstance(e, nodefsm.FailJobs):
                    self.ctl.fail_jobs_on(node, now)
                else:
                    self._queue.append((None, e))

    def apply(self, job, changes, effects) -> None:
        with self.transaction():
            if changes:
                self._commit(job, changes)
            self._queue.extend((job, e) for e in effects)

    @contextmanager
    def transaction(self):
        """One store transaction around any number of applies; their effects are dispatched
        once it has committed."""
        self._depth += 1
        try:
            with self.ctl.state.store.transaction():
                yield
        except BaseException:
            self._depth -= 1
            if self._depth == 0:
                self._queue.clear()
                self._after.clear()
            raise
        self._depth -= 1
        if self._depth == 0:
            self._flush()

    # ---- changes (inside the transaction) --------------------------------------------------
    def _commit(self, job, changes) -> None:
        ctl, st = self.ctl, self.ctl.state
        before = job.state
        for c in changes:
            if isinstance(c, fx.SetFields):
                for k, v in c.fields.items():
                    setattr(job, k, v)
            elif isinstance(c, fx.AllocateResources):
                st.allocate(job)
            elif isinstance(c, fx.ReleaseResources):
                st.release(job)
            elif isinstance(c, fx.HoldResources):
                st.mark_completing(job)
            elif isinstance(c, fx.ForgetSteps):
                ctl.steps.forget_job(job.job_id)
                ctl.usage.forget(job.job_id)
            elif isinstance(c, fx.PutStep):
                st.store.put_step(job.job_id, c.step_id, c.record)
            elif isinstance(c, fx.PutUsage):
                ctl.usage.finish(job.job_id, c.step_id, c.reports)
            elif isinstance(c, fx.PutRun):
                st.store.put_run(job.job_id, c.run, c.record)
            elif isinstance(c, fx.Log):
                st.event(job, c.kind, c.detail)
            else:
                raise TypeError(f"unknown change {c!r}")
        st.save(job)
        diag = getattr(ctl, "diag", None)  # sdiag's job counters, TraceJobs
        if diag is not None:  # (absent from the unit tests' controller stand-ins)
            diag.job_transition(job, before)

    # ---- effects (after the commit) --------------------------------------------------------
    def after_commit(self, fn) -> None:
        """Run ``fn()`` once the transaction now open has committed, after its effects; never
        if it fails. Outside a transaction, at once. For the controller's own messages that
        follow from a change made inside one (the end-of-job message of released resources,
        muster.controller.prologs): nothing leaves before the change it reports is durable."""
        if self._depth == 0:
            fn()
        else:
            self._after.append(fn)

    def _flush(self) -> None:
        while self._queue or self._after:
            batch, self._queue = self._queue, []
            if any(isinstance(e, fx.Launch) for _, e in batch):
                crash_point("after_start_commit")  # starts committed, launches not yet sent
            for job, e in batch:
                try:
                    self._dispatch(job, e)
                except Exception:  # one failed send must not lose the others
                    log.exception("dispatching %r failed", e)
            after, self._after = self._after, []
            for fn in after:
                try:
                    fn()
                except Exception:
                    log.exception("after-commit action %r failed", fn)

    def _dispatch(self, job, e) -> None:
        ctl = self.ctl
        if isinstance(e, fx.Terminate):
            for node in e.nodes:
                ctl.send_to_node(node, {"op": "terminate", "job_id": e.job_id, "run": e.run,
                                        "why": e.why})
        elif isinstance(e, fx.Signal):
            for node in e.nodes:
                if node:
                    ctl.send_to_node(node, {"op": "signal", "job_id": e.job_id, "run": e.run,
                                            "signal": e.signal, "scope": e.scope,
                                            "cont": e.cont})
        elif isinstance(e, fx.Notify):
            ctl.steps.notify(job)
        elif isinstance(e, fx.Schedule):
            ctl.request_schedule()
        elif isinstance(e, fx.Launch):
            ctl.prologs.job_started(job)  # PrologSlurmctld / Alloc prologs, then launch or wake
        elif isinstance(e, fx.Timer):
            self._arm(e)
        elif not isinstance(e, fx.Reply):  # replies go back through the request handler
            raise TypeError(f"unknown effect {e!r}")

    def _arm(self, e: fx.Timer) -> None:
        self.armed.add(e.job_id)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (in-process tests): the timer fires at once
            self._fire(e)
            return
        loop.call_later(e.delay, self._fire, e)

    def _fire(self, e: fx.Timer) -> None:
        """A timer's event reaches the job only if it is still the same run; an event the
        job's phase no longer takes (it ended meanwhile) is dropped."""
        self.armed.discard(e.job_id)
        job = self.ctl.state.jobs.get(e.job_id)
        if job is None or job.restarts != e.run:
            return
        try:
            self.job(job, e.event, self.ctl_now())
        except jobfsm.Refused:
            pass

    def ctl_now(self) -> int:
        return state_mod.now()
