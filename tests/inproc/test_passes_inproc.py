"""Scheduling passes off the request path (muster.controller.passes), on the in-process
controller: the pure part of a pass runs off the loop (a forked child; the thread as its
fallback) while the event loop answers requests, and the plan is applied against the state as
it is when the pass ends.

The in-flight tests hold the scheduling thread inside its pass (``_Gate``) until the test, on
the loop, has made the requests it needs; nothing waits on time. The forked worker's tests
compare its plan with the core's in this process, and check what a failed or signalled child
does to the controller: nothing but a logged fallback.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
import time

from muster.controller import passes as passes_mod
from muster.core import schedule
from muster.model.job import PENDING, RUNNING

TIMEOUT = 30


class _Gate:
    """Wraps ``PassRunner.compute``: the scheduling thread computes the plan, says so, then
    waits until the test opens the gate."""

    def __init__(self, passes):
        self.computed = threading.Event()
        self.open = threading.Event()
        inner = passes.compute

        def compute(prep):
            got = inner(prep)
            self.computed.set()
            assert self.open.wait(TIMEOUT), "the test never opened the gate"
            return got
        passes.compute = compute


async def _in_flight(ip, meanwhile) -> None:
    """One daemon-style pass; ``meanwhile()`` runs on the loop while its plan is computed
    (in the thread: the gate holds it there)."""
    ip.ctl.passes.mode = "thread"
    gate = _Gate(ip.ctl.passes)
    task = asyncio.ensure_future(ip.ctl.passes.run_async())
    while not gate.computed.is_set():
        await asyncio.sleep(0.001)
    assert ip.ctl.passes.in_flight
    try:
        meanwhile()
    finally:
        gate.open.set()
    await asyncio.wait_for(task, TIMEOUT)


def test_requests_are_answered_while_a_pass_runs_and_its_plan_then_applies(ip):
    a, b, c = (ip.submit(ntasks=4) for _ in range(3))  # two nodes of 4 CPUs: two fit
    answers = []
    asyncio.run(_in_flight(ip, lambda: answers.append(ip.request("jobs"))))
    assert answers and answers[0]["ok"]  # answered on the loop, the plan not yet applied
    assert [j["state"] for j in answers[0]["jobs"] if j["job_id"] in (a, b, c)] == \
        [PENDING] * 3
    states = [ip.job(j).state for j in (a, b, c)]
    assert states == [RUNNING, RUNNING, PENDING]
    assert ip.job(c).reason == "Resources"
    last = ip.ctl.passes.log[-1]
    assert last["starts"] == 2 and not last["discarded"]


def test_a_job_held_while_the_plan_is_computed_is_not_started(ip):
    a, b = ip.submit(ntasks=4), ip.submit(ntasks=4)

    def hold_b():
        assert ip.request("hold", jobs=[{"job_id": b}])["ok"]
    asyncio.run(_in_flight(ip, hold_b))
    assert ip.job(a).state == RUNNING  # its decision still stands
    held = ip.job(b)
    assert held.state == PENDING and held.reason == "JobHeldUser"  # the plan's reason dropped
    assert ip.ctl.passes.log[-1]["changed"] >= 1
    assert ip.ctl._wake.is_set()  # the next pass is already asked for


def test_a_cluster_change_while_the_plan_is_computed_drops_it_whole(ip):
    a, b = ip.submit(ntasks=4), ip.submit(ntasks=4)

    def drain_n2():
        assert ip.request("update_node", uid=0, nodes=["n2"], state="DRAIN",
                          reason="maintenance")["ok"]
    asyncio.run(_in_flight(ip, drain_n2))
    assert ip.ctl.passes.log[-1]["discarded"]
    assert ip.job(a).state == PENDING and ip.job(b).state == PENDING
    ip.settle()  # the next pass decides on the drained cluster: one job on n1
    started = [j for j in (a, b) if ip.job(j).state == RUNNING]
    assert len(started) == 1 and ip.job(started[0]).node_list == "n1"


def _all_reaped(passes) -> None:
    """The forked passes are reaped once they have exited (at the latest by the next pass:
    the reply can come before the child is gone)."""
    deadline = time.monotonic() + TIMEOUT
    while passes._children:
        assert time.monotonic() < deadline, f"forked passes never exited: {passes._children}"
        time.sleep(0.01)
        passes._reap()


def test_a_forked_pass_makes_the_plan_the_core_makes_here(ip):
    jobs = [ip.submit(ntasks=n) for n in (4, 2, 2, 4, 1, 3)]
    passes = ip.ctl.passes
    assert passes.mode == "fork"  # the daemon's default
    prep = passes.prepare()
    here = schedule(prep.snap, prep.sched_cfg)
    plan, core_s, cpu_s = asyncio.run(passes._forked(prep))
    assert plan == here and core_s > 0 and 0 < cpu_s < 60
    assert plan.starts and set(plan.reasons) | {s.job_id for s in plan.starts} >= set(jobs)
    _all_reaped(passes)
    asyncio.run(passes.run_async())  # and a whole daemon-style pass through it applies
    started = {s.job_id for s in here.starts}
    assert {j for j in jobs if ip.job(j).state == RUNNING} == started == {jobs[0], jobs[1]}
    assert passes.log[-1]["worker"] == "fork" and passes.log[-1]["starts"] == 2


def test_a_forked_pass_makes_its_snapshot_in_the_child(ip):
    """Handed off, the pass's snapshot is made in the child from the state at the fork: its
    plan, the shell's reasons and the depth are those of the snapshot made here; the loop
    made only the views of the jobs that changed (not of a held one)."""
    jobs = [ip.submit(ntasks=n) for n in (4, 2, 2, 4, 1, 3)]
    held = ip.submit(ntasks=1, hold=True)
    state, passes = ip.ctl.state, ip.ctl.passes
    assert {*jobs, held} <= state.unviewed
    prep = passes.prepare(snapshot=False)
    assert prep.snap is None and prep.shell_reasons is None
    assert not state.unviewed  # all warmed within WARM_S: six views
    assert set(jobs) <= set(state.view_cache) and held not in state.view_cache
    here, shell_here = passes_mod.build_snapshot(state, prep.t)
    plan, core_s, _cpu_s = asyncio.run(passes._forked(prep))
    assert plan == schedule(here, prep.sched_cfg) and core_s > 0
    assert prep.shell_reasons == shell_here == {held: "JobHeldUser"}
    assert prep.depth == len(here.pending) == len(jobs) and prep.snap_s > 0
    _all_reaped(passes)


def test_a_snapshot_made_on_the_loop_leaves_nothing_to_warm(ip):
    """A pass whose snapshot is made here (a small queue's, the thread's, the inline one's)
    made the views of every job it lists: the changed jobs are forgotten, so they never
    pile up where no child is forked."""
    jobs = [ip.submit(ntasks=1) for _ in range(3)]
    state = ip.ctl.state
    assert set(jobs) <= state.unviewed
    ip.ctl.passes.prepare()
    assert not state.unviewed and set(jobs) <= set(state.view_cache)


def test_warming_stops_after_its_share_of_the_loop(ip, monkeypatch):
    """At most WARM_S of a pass goes to making views; the rest wait in ``unviewed`` (the
    child makes what it lacks) and are made by the next passes."""
    jobs = [ip.submit(ntasks=1) for _ in range(200)]
    state, passes = ip.ctl.state, ip.ctl.passes
    monkeypatch.setattr(passes_mod, "WARM_S", -1.0)  # spent at once: one batch of 64
    passes.prepare(snapshot=False)
    assert len(state.unviewed) == len(jobs) - 64
    monkeypatch.setattr(passes_mod, "WARM_S", 60.0)
    passes.prepare(snapshot=False)
    assert not state.unviewed and set(jobs) <= set(state.view_cache)


def test_a_failing_forked_pass_is_logged_and_computed_in_the_thread(ip, monkeypatch, caplog):
    a = ip.submit(ntasks=4)
    passes = ip.ctl.passes
    calls = []

    def broken(snap, cfg):  # inherited by the child; the thread's call (here) works
        if os.getpid() != parent:
            raise RuntimeError("core bug in the child")
        calls.append(snap)
        return schedule(snap, cfg)
    parent = os.getpid()
    monkeypatch.setattr(passes_mod, "schedule", broken)
    with caplog.at_level(logging.ERROR, logger="musterctld"):
        asyncio.run(passes.run_async())
    assert "core bug in the child" in caplog.text  # the child's traceback, logged
    assert len(calls) == 1  # computed once more, in the thread
    assert ip.job(a).state == RUNNING


def test_a_signal_to_the_forked_pass_never_reaches_the_controller(ip, monkeypatch):
    """The child resets the loop's signal handlers and wake-up fd: a SIGTERM sent to it
    ends it (the pass falls back to the thread) and is not the controller's SIGTERM."""
    a = ip.submit(ntasks=4)
    passes = ip.ctl.passes
    parent = os.getpid()

    def slow(snap, cfg):
        if os.getpid() != parent:
            time.sleep(60)  # until the test's signal
        return schedule(snap, cfg)
    monkeypatch.setattr(passes_mod, "schedule", slow)
    got = []

    async def scenario():
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, got.append, "controller's SIGTERM")
        try:
            task = asyncio.ensure_future(passes.run_async())
            deadline = loop.time() + TIMEOUT
            while not passes._children:
                assert loop.time() < deadline, "no child was forked"
                await asyncio.sleep(0.001)
            (child,) = passes._children
            os.kill(child, signal.SIGTERM)
            await asyncio.wait_for(task, TIMEOUT)
            await asyncio.sleep(0)  # a signal byte on the wake-up fd would be handled now
        finally:
            loop.remove_signal_handler(signal.SIGTERM)
    asyncio.run(scenario())
    assert got == []
    assert ip.job(a).state == RUNNING  # the thread computed the pass
    _all_reaped(passes)


def test_the_forked_pass_holds_none_of_the_controllers_descriptors(ip, monkeypatch):
    """A listening socket (as the controller's) is closed in the child: a controller
    restarted while a pass computes binds its ports, and peers see its end when it ends."""
    a = ip.submit(ntasks=4)
    passes = ip.ctl.passes
    parent = os.getpid()
    in_parent = []
    with socket.socket() as lsock:
        lsock.bind(("127.0.0.1", 0))
        lsock.listen()
        fd = lsock.fileno()

        def probe(snap, cfg):
            if os.getpid() == parent:
                in_parent.append(snap)  # the thread's fallback: the child failed
            else:
                try:
                    os.fstat(fd)
                except OSError:
                    return schedule(snap, cfg)  # closed there, as it must be
                raise RuntimeError("the listening socket is open in the forked pass")
            return schedule(snap, cfg)
        monkeypatch.setattr(passes_mod, "schedule", probe)
        asyncio.run(passes.run_async())
    assert in_parent == []  # the child's plan was taken
    assert ip.job(a).state == RUNNING
    _all_reaped(passes)


def test_a_pass_after_a_cheap_one_is_computed_on_the_loop(ip, monkeypatch):
    """Handing a pass off costs a fork and the plan's transfer: after a pass that computed
    in under SMALL_PASS_S the next one is computed at once, on the loop; after a costly one
    the next is handed off again."""
    passes = ip.ctl.passes
    a = ip.submit(ntasks=4)
    asyncio.run(passes.run_async())  # nothing measured yet: handed off
    assert passes.log[-1]["worker"] == "fork" and ip.job(a).state == RUNNING
    assert passes.last_core_s < passes_mod.SMALL_PASS_S  # one job: well under
    b = ip.submit(ntasks=4)
    asyncio.run(passes.run_async())
    assert passes.log[-1]["worker"] == "loop" and ip.job(b).state == RUNNING
    passes.last_core_s = 1.0  # as after a pass over a large queue
    c = ip.submit(ntasks=4)
    asyncio.run(passes.run_async())
    assert passes.log[-1]["worker"] == "fork" and ip.job(c).state == PENDING  # no room left
    _all_reaped(passes)


def test_where_the_next_pass_runs_follows_the_cores_cpu_time_not_its_wall_time(ip, monkeypatch):
    """On a busy machine a tiny pass can be preempted for longer than SMALL_PASS_S. Measured
    by wall time, that sent the next pass to a child, whose fork and copy-on-write faults
    then kept every later pass forked (~30 ms each for a one-job queue). The decision takes
    the core's CPU time: a pass that waited (here: slept) but computed little keeps the next
    one on the loop, whether it ran in a child or on the loop."""
    real = passes_mod.schedule

    def waits(snap, cfg):  # 30 ms of wall time, no CPU time
        time.sleep(0.03)
        return real(snap, cfg)
    monkeypatch.setattr(passes_mod, "schedule", waits)
    passes = ip.ctl.passes
    a = ip.submit(ntasks=4)
    asyncio.run(passes.run_async())  # nothing measured yet: handed off (the child sleeps)
    first = passes.log[-1]
    assert first["worker"] == "fork" and ip.job(a).state == RUNNING
    assert first["pure_ms"] >= 30 and first["cpu_ms"] < passes_mod.SMALL_PASS_S * 1000
    b = ip.submit(ntasks=4)
    asyncio.run(passes.run_async())
    second = passes.log[-1]
    assert second["worker"] == "loop" and ip.job(b).state == RUNNING
    assert second["core_ms"] >= 30 and second["cpu_ms"] < passes_mod.SMALL_PASS_S * 1000
    ip.submit(ntasks=4)  # (no room left for it: the pass decides that much)
    asyncio.run(passes.run_async())
    assert passes.log[-1]["worker"] == "loop"  # still: the wait was not the core's work
    _all_reaped(passes)


def test_a_plans_starts_are_applied_in_slices_with_requests_answered_between(ip, monkeypatch):
    """The starts of one plan are committed START_SLICE at a time with the loop free between
    slices; a job cancelled between two slices is not started by a later one, the others
    are, and the next pass is asked for."""
    monkeypatch.setattr(passes_mod, "START_SLICE", 2)  # (one slice of 8: the test fails)
    jobs = [ip.submit(ntasks=1, mem_per_cpu=100) for _ in range(8)]  # 8 CPUs: all eight fit
    ip.ctl.passes.mode = "thread"
    seen: list[int] = []

    async def meanwhile() -> None:  # a client, on the loop, between the pass's slices
        while not any(ip.job(j).state == RUNNING for j in jobs):
            await asyncio.sleep(0)
        seen.append(sum(ip.job(j).state == RUNNING for j in jobs))
        assert ip.request("cancel", jobs=[{"job_id": jobs[-1]}])["ok"]

    async def both() -> None:
        client = asyncio.ensure_future(meanwhile())
        await asyncio.wait_for(ip.ctl.passes.run_async(), TIMEOUT)
        await asyncio.wait_for(client, TIMEOUT)
    ip.ctl._wake.clear()
    asyncio.run(both())
    assert seen and 0 < seen[0] < 8  # a request was answered with the plan half applied
    assert [ip.job(j).state for j in jobs[:-1]] == [RUNNING] * 7
    assert ip.job(jobs[-1]).state == "CANCELLED"
    last = ip.ctl.passes.log[-1]
    assert last["starts"] == 7 and last["changed"] >= 1 and not last["discarded"]
    assert ip.ctl._wake.is_set()  # the next pass is already asked for
