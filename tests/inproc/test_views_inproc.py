"""The controller's scheduling views (ClusterState.view_cache) survive what a pass writes
back for display — reasons, expected starts, planned nodes, computed priorities — and are
dropped by every other change; a pass over the kept views decides exactly what a pass over
views built afresh decides (harness: tests/inproc/conftest.py)."""

from __future__ import annotations

from muster.controller.scheduling import build_snapshot, sched_config_of
from muster.core import schedule

# age moves every waiting job's priority at every pass: the case that dropped every view
MULTIFACTOR = """PriorityType=priority/multifactor
PriorityWeightAge=1000
PriorityMaxAge=1-0
PriorityWeightJobSize=100
SchedulerType=sched/backfill
"""


def plans_agree(ip) -> None:
    """The plan from the cached views equals the plan from views built from the jobs now."""
    state = ip.ctl.state
    t = ip.clock.time()
    cfg = sched_config_of(state)
    kept, _ = build_snapshot(state, int(t))
    saved = dict(state.view_cache)
    state.view_cache.clear()
    fresh, _ = build_snapshot(state, int(t))
    state.view_cache.update(saved)
    a, b = schedule(kept, cfg), schedule(fresh, cfg)
    assert a.starts == b.starts and a.reasons == b.reasons
    assert a.expected_start == b.expected_start and a.sched_nodes == b.sched_nodes

    # Plan.priorities lists what differs from the view's priority, which a kept view may
    # hold from before the last write-back: what is written (_store_priorities: only where
    # it differs from the job's) is the same either way, and not empty by accident
    def written(plan):
        return {j: p for j, p in plan.priorities.items() if p != state.jobs[j].priority}
    assert written(a) == written(b)


def test_display_writes_keep_the_views_and_changes_drop_them(make_inproc):
    ip = make_inproc(MULTIFACTOR)
    running = ip.submit(ntasks=8, nodes_min=2, time_limit=60)  # every CPU, for an hour
    waiting = [ip.submit(time_limit=10 * (i + 1)) for i in range(4)]
    ip.settle()
    assert ip.job(running).state == "RUNNING"
    views = {j: ip.ctl.state.view_cache[j] for j in waiting}
    first = {j: (ip.job(j).priority, ip.job(j).reason, ip.job(j).expected_start) for j in waiting}
    assert all(r == "Resources" or r == "Priority" for _, r, _ in first.values())
    for _ in range(3):  # later passes: priorities grow with age, reasons are rewritten
        ip.advance(600)
        ip.settle()
        plans_agree(ip)
    assert any(ip.job(j).priority != first[j][0] for j in waiting)  # display changed ...
    assert all(ip.ctl.state.view_cache[j] is views[j] for j in waiting)  # ... views kept
    # a change the scheduler reads drops the view: rebuilt with the new limit
    assert ip.request("update_job", jobs=[{"job_id": waiting[0]}],
                      changes={"TimeLimit": "5"})["ok"]
    assert waiting[0] not in ip.ctl.state.view_cache
    ip.settle()
    assert ip.ctl.state.view_cache[waiting[0]].time_limit == 5
    assert ip.ctl.state.view_cache[waiting[1]] is views[waiting[1]]
    plans_agree(ip)
