"""Scheduling passes off the request path (muster.controller.passes), on the in-process
controller: the pure part of a pass runs in the scheduling thread while the event loop answers
requests, and the plan is applied against the state as it is when the pass ends.

Each test holds the scheduling thread inside its pass (``_Gate``) until the test, on the
loop, has made the requests it needs; nothing waits on time.
"""

from __future__ import annotations

import asyncio
import threading

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
    """One daemon-style pass; ``meanwhile()`` runs on the loop while its plan is computed."""
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
