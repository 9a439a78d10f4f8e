"""The job and node state machines (muster.lifecycle.jobfsm / nodefsm): every (phase, event)
pair is handled or explicitly refused; over random event sequences a finished job stays
finished (unless requeued), and every transition into a terminal state sets the end time and
the exit fields; handle never mutates the job it is given."""

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from muster.lifecycle import effects as fx
from muster.lifecycle import events as ev
from muster.lifecycle import jobfsm, nodefsm
from muster.model.alloc import NodeAlloc
from muster.model.job import TERMINAL, Job

ALLOC = (NodeAlloc("n1", 2, 100), NodeAlloc("n2", 2, 100))


def _job(**kw) -> Job:
    return Job(job_id=7, uid=1000, user="u", batch=kw.pop("batch", True), **kw)


def _apply(job, changes) -> None:
    jobfsm.apply_fields(job, changes)


def test_every_pair_is_handled_or_refused_never_both():
    for p, t in itertools.product(jobfsm.PHASES, ev.JOB_EVENTS):
        handled, refused = (p, t) in jobfsm.TABLE, (p, t) in jobfsm.REFUSED
        assert handled != refused, (p, t.__name__)
    for p, t in itertools.product(nodefsm.PHASES, ev.NODE_EVENTS):
        assert ((p, t) in nodefsm.TABLE) != ((p, t) in nodefsm.REFUSED), (p, t.__name__)


def test_refused_pair_raises():
    job = _job(state="COMPLETED", end_time=5)
    try:
        jobfsm.handle(job, ev.Cancel(0), 10)
    except jobfsm.Refused as e:
        assert "finished" in str(e)
    else:
        raise AssertionError("a finished job took a cancel")


def _running(**kw) -> Job:
    job = _job(**kw)
    ch, eff = jobfsm.handle(job, ev.Start("p", ALLOC, "n[1-2]", "cpu=4"), 100)
    _apply(job, ch)
    assert eff == (fx.Launch(7),)  # the batch script, or srun/salloc woken, after prologs
    assert fx.AllocateResources() in ch
    return job


def test_cancel_running_holds_resources_and_terminates_every_node():
    job = _running()
    before = job.to_store()
    ch, eff = jobfsm.handle(job, ev.Cancel(1000), 150)
    assert job.to_store() == before  # the input is never mutated
    assert fx.HoldResources() in ch
    assert eff == (fx.Terminate(7, 0, ("n1", "n2"), "cancel"),)
    _apply(job, ch)
    assert (job.state, job.completing, job.end_time, job.cancelled_by) == \
        ("CANCELLED", True, 150, 1000)
    assert jobfsm.phase(job) == jobfsm.COMPLETING_P


def test_end_releases_before_a_requeue_bumps_the_run():
    job = _running(requeue=True)
    pol = jobfsm.Policy(requeue_delay=3, requeue_exit=frozenset({42}))
    ch, eff = jobfsm.handle(job, ev.Ended("n1", exit_code=42, steps_running=True), 200, pol)
    kinds = [type(c) for c in ch]
    rel = kinds.index(fx.ReleaseResources)
    bump = next(i for i, c in enumerate(ch) if isinstance(c, fx.SetFields)
                and "restarts" in c.fields)
    assert rel < bump
    assert fx.PutRun(0, next(c.record for c in ch if isinstance(c, fx.PutRun))) in ch
    assert fx.Terminate(7, 0, ("n2",), "cancel") in eff and fx.Schedule() in eff
    _apply(job, ch)
    assert (job.state, job.restarts, job.begin_time) == ("PENDING", 1, 203)


def test_a_launch_failure_keeps_its_reason_until_the_next_run_starts():
    """A batch step that could not launch (a container): FAILED, JobLaunchFailure, 1:0, the
    node's reason as SystemComment and in the event log; a job's own exit 1 is none of it."""
    job = _running(requeue=True)
    why = "container: image /x.tar: No such file or directory"
    ch, _ = jobfsm.handle(job, ev.Ended("n1", exit_code=1, launch_failed=True,
                                        launch_error=why), 200)
    _apply(job, ch)
    assert (job.state, job.reason, job.exit_code, job.exit_signal) == \
        ("FAILED", "JobLaunchFailure", 1, 0)
    assert job.system_comment == why
    assert any(isinstance(c, fx.Log) and why in c.detail for c in ch)
    plain = _running()
    ch, _ = jobfsm.handle(plain, ev.Ended("n1", exit_code=1), 200)
    _apply(plain, ch)
    assert (plain.reason, plain.system_comment) == ("NonZeroExitCode", None)
    job.state, job.end_time = "PENDING", None  # as a requeue leaves it
    ch, _ = jobfsm.handle(job, ev.Start("p", ALLOC, "n[1-2]", "cpu=4"), 300)
    _apply(job, ch)
    assert job.system_comment is None


def test_node_failure_requeues_a_batch_job_and_kills_the_rest():
    job = _running(requeue=True)
    ch, eff = jobfsm.handle(job, ev.NodeFailed("n1"), 300)
    assert fx.Terminate(7, 0, ("n2",), "node_fail") in eff
    assert any(isinstance(c, fx.PutRun) and c.record["state"] == "NODE_FAIL" for c in ch)
    _apply(job, ch)
    assert (job.state, job.failed_node, job.restarts) == ("PENDING", "n1", 1)


def test_preempt_cancel_mode_ends_preempted():
    job = _running()
    ch, _ = jobfsm.handle(job, ev.Preempt("CANCEL"), 300)
    _apply(job, ch)
    assert (job.state, job.reason, job.completing) == ("PREEMPTED", "Preempted", True)


def test_start_takes_backfills_limit_and_expands_the_output_paths():
    job = _job(time_limit=60, work_dir="/w", name="nm")
    ch, _ = jobfsm.handle(job, ev.Start("p", ALLOC, "n[1-2]", "cpu=4", time_limit=10,
                                        scheduler="Backfill"), 100)
    _apply(job, ch)
    assert (job.time_limit, job.end_time, job.scheduler) == (10, 100 + 600, "Backfill")
    assert job.std_out == "/w/slurm-7.out" and job.alloc == ALLOC


def test_signal_scopes_name_their_nodes():
    job = _running()
    _, eff = jobfsm.handle(job, ev.SignalJob(10, "steps", cont=True), 120)
    assert eff == (fx.Signal(7, 0, ("n1", "n2"), 10, "steps", True),)
    _, eff = jobfsm.handle(job, ev.SignalJob(12, "batch"), 120)
    assert eff == (fx.Signal(7, 0, ("n1",), 12, "batch", False),)
    alloc = _running(batch=False)  # an allocation has no batch shell to signal
    assert jobfsm.handle(alloc, ev.SignalJob(12, "batch"), 120) == ((), ())


def test_release_allocation_ends_at_once_or_after_its_last_step():
    job = _running(batch=False)
    ch, eff = jobfsm.handle(job, ev.ReleaseAllocation(1000, exit_code=3), 130)
    assert fx.ReleaseResources() in ch and fx.Schedule() in eff
    done = _running(batch=False)
    _apply(done, ch)
    assert (done.state, done.exit_code, done.reason) == ("FAILED", 3, "NonZeroExitCode")
    ch, eff = jobfsm.handle(job, ev.ReleaseAllocation(1000, steps_live=True), 130)
    _apply(job, ch)
    assert (job.state, job.completing) == ("COMPLETED", True)
    assert eff[0] == fx.Terminate(7, 0, ("n1", "n2"), "cancel")
    ch, eff = jobfsm.handle(job, ev.StepsDrained(), 131)
    _apply(job, ch)
    # the end was decided at the release; the resources are given back now
    assert (job.state, job.completing, job.end_time) == ("COMPLETED", False, 130)
    assert fx.ReleaseResources() in ch and fx.Notify(7) in eff
    try:
        jobfsm.handle(_running(), ev.ReleaseAllocation(1000), 130)
    except jobfsm.Refused:
        pass
    else:
        raise AssertionError("a batch job took an allocation's release")


def test_prolog_failure_requeues_held_or_ends_the_job():
    job = _running(requeue=True)
    ch, eff = jobfsm.handle(job, ev.PrologFailed("prolog failed on n2", requeue=True,
                                                 hold=True, held_desc="launch held"), 140)
    kinds = [type(c) for c in ch]
    assert kinds.index(fx.ReleaseResources) < kinds.index(fx.PutRun)
    assert fx.Terminate(7, 0, ("n1", "n2"), "requeue") in eff
    _apply(job, ch)
    assert (job.state, job.restarts, job.hold, job.reason_desc) == \
        ("PENDING", 1, "user", "launch held")
    job = _running()
    ch, eff = jobfsm.handle(job, ev.PrologFailed("x", requeue=False, reason="JobLaunchFailure"),
                            140)
    _apply(job, ch)
    assert (job.state, job.reason, job.completing) == ("FAILED", "JobLaunchFailure", True)


EVENTS = st.one_of(
    st.builds(ev.Start, st.just("p"), st.just(ALLOC), st.just("n[1-2]"), st.just("cpu=4")),
    st.builds(ev.Ended, st.sampled_from(["n1", "n2"]), exit_code=st.integers(0, 3),
              signal=st.sampled_from([0, 9, 15]), timed_out=st.booleans(), oom=st.booleans(),
              launch_failed=st.booleans(), steps_running=st.booleans()),
    st.builds(ev.Cancel, st.sampled_from([0, 1000])),
    st.builds(ev.SignalJob, st.sampled_from([10, 15])),
    st.just(ev.Timeout()),
    st.builds(ev.Requeue, st.just(0), st.booleans()),
    st.builds(ev.Hold, st.just(0), st.booleans()),
    st.builds(ev.Release, st.just(0)),
    st.builds(ev.NodeFailed, st.sampled_from(["n1", "n2"])),
    st.builds(ev.Preempt, st.sampled_from(["REQUEUE", "CANCEL"])),
    st.just(ev.DeadlineMissed()),
    st.builds(ev.ReleaseAllocation, st.just(1000), exit_code=st.integers(0, 2),
              steps_live=st.booleans()),
    st.just(ev.StepsDrained()),
    st.builds(ev.PrologFailed, st.just("x"), st.booleans(), hold=st.booleans()),
)


@settings(max_examples=300, deadline=None)
@given(batch=st.booleans(), requeue=st.booleans(), events=st.lists(EVENTS, max_size=25))
def test_random_event_sequences_keep_the_invariants(batch, requeue, events):
    job = _job(batch=batch, requeue=requeue)
    for t, e in enumerate(events, start=1000):
        before = jobfsm.phase(job)
        snap = job.to_store()
        try:
            ch, eff = jobfsm.handle(job, e, t)
        except jobfsm.Refused:
            # guarded pairs: Requeue needs a batch job that may requeue, an allocation's
            # events an allocation
            assert (before, type(e)) in jobfsm.REFUSED or (
                isinstance(e, ev.Requeue) and not (job.batch and job.requeue)) or (
                isinstance(e, (ev.ReleaseAllocation, ev.StepsDrained)) and job.batch)
            continue
        assert job.to_store() == snap  # pure: the job given is untouched
        assert all(isinstance(c, fx.CHANGES) for c in ch)
        assert all(isinstance(x, fx.EFFECTS) for x in eff)
        _apply(job, ch)
        after = jobfsm.phase(job)
        if before == jobfsm.DONE_P:  # only a requeue leaves a finished job, to PENDING
            assert isinstance(e, ev.Requeue) and after == jobfsm.PENDING_P
        if after == jobfsm.DONE_P and before != jobfsm.DONE_P:
            assert job.state in TERMINAL and job.end_time is not None
            assert isinstance(job.exit_code, int) and isinstance(job.exit_signal, int)
            if job.state in ("TIMEOUT", "CANCELLED", "NODE_FAIL", "PREEMPTED", "DEADLINE"):
                assert (job.exit_code, job.exit_signal) == (0, 0)
        if after == jobfsm.COMPLETING_P:
            assert job.end_time is not None and job.alloc


class _Node:
    def __init__(self):
        self.name, self.down, self.drain, self.down_auto = "n1", False, False, False
        self.reason = self.reason_user = self.reason_time = None


def test_node_machine_down_fails_jobs_and_registration_undoes_only_auto_down():
    node = _Node()
    ch, eff = nodefsm.handle(node, ev.NodeSilent(), 50)
    assert nodefsm.FailJobs("n1") in eff
    jobfsm.apply_fields(node, ch)
    assert (nodefsm.phase(node), node.reason, node.down_auto) == ("DOWN", "Not responding", True)
    ch, _ = nodefsm.handle(node, ev.NodeRegistered(), 60)
    jobfsm.apply_fields(node, ch)
    assert nodefsm.phase(node) == "UP"
    ch, _ = nodefsm.handle(node, ev.NodeDown("broken", "root"), 70)
    jobfsm.apply_fields(node, ch)
    assert nodefsm.handle(node, ev.NodeRegistered(), 80) == ((), ())  # admin DOWN stays
    assert nodefsm.handle(node, ev.NodeRegistered(0), 80) == ((), ())
    ch, _ = nodefsm.handle(node, ev.NodeRegistered(return_to_service=2), 90)
    jobfsm.apply_fields(node, ch)
    assert (nodefsm.phase(node), node.reason) == ("UP", None)  # ReturnToService=2: any DOWN


def test_node_drain_keeps_its_detail_in_the_log_only():
    node = _Node()
    ch, eff = nodefsm.handle(node, ev.NodeDrain("Prolog error", "root", "job 5: exit 1"), 10)
    assert fx.Log("node_drain", "Prolog error: job 5: exit 1") in ch and fx.Schedule() in eff
    jobfsm.apply_fields(node, ch)
    assert (nodefsm.phase(node), node.reason) == ("DRAIN", "Prolog error")


def test_preempt_with_grace_signals_now_and_kills_when_the_timer_fires():
    job = _running(requeue=True)
    ch, eff = jobfsm.handle(job, ev.Preempt("REQUEUE", preemptor=9, grace=30), 300)
    assert ch == (fx.Log("preempted", "by job 9 (REQUEUE, grace 30s)"),)
    sig, timer = eff
    assert sig == fx.Signal(7, 0, ("n1", "n2"), 15, "full")
    assert (timer.delay, timer.job_id, timer.run, timer.event.expired) == (30, 7, 0, True)
    ch, eff = jobfsm.handle(job, timer.event, 330)
    assert not any(isinstance(c, fx.Log) for c in ch)  # logged once, at the decision
    _apply(job, ch)
    assert (job.state, job.requeue_pending, job.completing) == ("CANCELLED", True, True)
    assert fx.Terminate(7, 0, ("n1", "n2"), "preempt") in eff
