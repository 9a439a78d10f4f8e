"""What the property tests of the incremental schedulers (pooled, node classes, GPU node
classes) share: a pass compared with ``schedule()``'s, and a started job's running view."""

from __future__ import annotations

import random

from hypothesis import strategies as st

from muster.core import RunningView, SchedConfig


def assert_same_pass(got, want, reservation, now, snap, *, named: bool = True) -> bool:
    """The incremental scheduler's starts (``got``) and reservation are ``want``'s, the
    plan ``schedule()`` made on ``snap``: the starts with their allocations and labels, the
    reservation's job and start and (``named``) its nodes. True when there is one."""
    assert [(s.job_id, s.allocation, s.scheduler) for s in got] == \
        [(s.job_id, s.allocation, s.scheduler) for s in want.starts], (now, snap)
    if named:
        want_res = {(j, want.expected_start[j], tuple(sorted(
            want.sched_nodes[j].split(","), key=lambda nm: int(nm[1:]))))
            for j in want.sched_nodes}
    else:
        want_res = {(j, want.expected_start[j]) for j in want.sched_nodes}
    got_res = {reservation} if reservation else set()
    assert got_res == want_res, (now, snap)
    return bool(got_res)


def started(rng: random.Random, s, job, now: int) -> tuple[RunningView, int]:
    """The running view of start ``s`` of ``job`` (expected to end at its limit) and when it
    really ends: early, at its limit, or 90 s past it (the timeline's late ends)."""
    lim = job.time_limit
    end_est = None if lim is None else now + lim * 60
    run = rng.choice([1, 60, 300, (lim or 5) * 60, (lim or 5) * 60 + 90])
    return RunningView(job_id=s.job_id, partition="p", nodes=s.allocation.nodes,
                       start_time=now, end_time=end_est), now + run


def history_config(draw, windows=(20 * 365 * 1440, 1440, 30)) -> SchedConfig:
    """A setting in the incremental schedulers' scope, drawn: every priority of the job alone
    (as given, priority/basic, multifactor without weights), the main scheduler or EASY,
    backfill windows of ``windows`` minutes, resolutions, KillWait and OverTimeLimit."""
    return SchedConfig(
        priority_type=draw(st.sampled_from(["none", "basic", "multifactor"])),
        backfill=draw(st.booleans()), bf_depth=1, bf_max_job_test=0,
        bf_window=draw(st.sampled_from(list(windows))),
        bf_resolution=draw(st.sampled_from([1, 60, 300])),
        kill_wait=draw(st.sampled_from([0, 30])), over_time_limit=draw(st.sampled_from([0, 2])))


def ending(rng: random.Random, running: dict, now: int) -> list:
    """The running views (taken out of ``running``) whose jobs end by ``now``: nine in ten
    of those due, so that some run past their end (the timeline's late ends)."""
    due = [j for j, (_, e) in running.items() if e <= now and rng.random() < 0.9]
    return [(j, running.pop(j)[0]) for j in due]
