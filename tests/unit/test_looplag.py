"""The controller's event-loop lag probe (muster.controller.looplag)."""

from __future__ import annotations

import asyncio
import time

from muster.controller.looplag import LoopLag, RequestTimes


def test_report_gives_the_lag_of_the_recent_window():
    t = [100.0]
    lag = LoopLag(clock=lambda: t[0])
    for i in range(100):  # 99 on time, one 80 ms late
        lag.note(t[0], t[0] + (0.080 if i == 50 else 0.0))
    lag.note(0.0, 1.0)  # long ago: a stall of a second, outside any recent window
    lag.samples[-1] = (50.0, 1.0)
    rep = lag.report(window_s=20)
    assert rep["samples"] == 100 and rep["p50_ms"] == 0.0
    assert rep["p99_ms"] == 80.0 and rep["max_ms"] == 80.0  # the 99th of 100 is the worst
    assert rep["worst_ms"] == 1000.0  # since start, whatever the window
    lag.reset()
    assert lag.report()["worst_ms"] == 0.0


def test_a_stalled_loop_shows_as_lag():
    """A handler that holds the loop for 60 ms delays the probe's wake-up by about that."""
    lag = LoopLag()

    async def scenario():
        probe = asyncio.ensure_future(lag.run())
        try:
            await asyncio.sleep(0.02)  # the probe is sampling
            time.sleep(0.06)  # what a long slice of work does to everything on the loop
            deadline = time.monotonic() + 10
            while lag.worst < 0.04:
                assert time.monotonic() < deadline, lag.report()
                await asyncio.sleep(0.005)
        finally:
            probe.cancel()
    asyncio.run(scenario())
    rep = lag.report()
    assert rep["max_ms"] >= 40 and rep["samples"] >= 2


def test_request_times_are_kept_per_known_operation_over_the_window():
    t = [500.0]
    rt = RequestTimes({"submit", "jobs"}, clock=lambda: t[0])
    for i in range(100):
        rt.note("submit", 0.002 if i != 7 else 0.150)
    rt.note("jobs", 0.030)
    for i in range(50):
        rt.note(f"made-up-{i}", 1.0)  # names a client invents get no window
    rt.note(None, 1.0)
    rt.note({"op": "submit"}, 1.0)  # unhashable: what a hostile client may send as "op"
    rt.note(["jobs"], 1.0)
    rep = rt.report(window_s=20)
    assert set(rep) == {"submit", "jobs"} and set(rt.ops) == {"submit", "jobs"}
    assert rep["submit"]["samples"] == 100 and rep["submit"]["p50_ms"] == 2.0
    assert rep["submit"]["p99_ms"] == 150.0 and rep["submit"]["max_ms"] == 150.0
    assert rep["jobs"] == {"window_s": 20, "samples": 1, "worst_ms": 30.0, "p50_ms": 30.0,
                           "p99_ms": 30.0, "max_ms": 30.0}
    t[0] += 30  # all of it older than the window: nothing recent to report
    assert rt.report(window_s=20) == {}
    rt.note("jobs", 0.001)
    assert rt.report(window_s=20)["jobs"]["worst_ms"] == 30.0  # since start
    rt.reset()
    rt.note("jobs", 0.001)
    assert rt.report(window_s=20)["jobs"]["worst_ms"] == 1.0
