"""The controller's scheduling views (ClusterState.view_cache) survive what a pass writes
back for display — reasons, expected starts, planned nodes, computed priorities — and are
dropped by every other change; a pass over the kept views decides exactly what a pass over
views built afresh decides (harness: tests/inproc/conftest.py)."""

from __future__ import annotations

from muster.controller.scheduling import build_snapshot, sched_config_of
from muster.controller.server import Controller
from muster.core import schedule
from muster.store.sqlite import SqliteStore

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


def test_reasons_are_shown_not_written_and_a_new_controller_derives_them_again(ip,
                                                                               monkeypatch):
    """A pass's reasons and expected starts refresh listings but write nothing
    (ClusterState.shown); a controller started on the same store (a restart, a new leader)
    derives the same ones in its first pass."""
    running = ip.submit(ntasks=8, nodes_min=2, time_limit=60)
    waiting = [ip.submit(time_limit=10 * (i + 1)) for i in range(3)]
    written: list[int] = []
    put = ip.store.put_job
    monkeypatch.setattr(ip.store, "put_job", lambda rec: (written.append(rec["job_id"]), put(rec)))
    ip.settle()
    assert ip.job(running).state == "RUNNING" and running in written
    shown = {j: (ip.job(j).reason, ip.job(j).expected_start) for j in waiting}
    assert shown[waiting[0]] == ("Resources", ip.job(running).end_time)
    assert [shown[j][0] for j in waiting[1:]] == ["Priority", "Priority"]
    assert not set(written) & set(waiting)  # reasons only: nothing written
    rows = ip.request("jobs", job_ids=waiting)["jobs"]
    assert {r["job_id"]: r["reason"] for r in rows} == {j: shown[j][0] for j in waiting}

    ip.store.close()
    ip.store = SqliteStore(ip.cfg.db_path)  # a new controller process on the same database
    ip.ctl = Controller(ip.cfg, ip.store, ip.clock)
    for name in ip.agents:
        ip.connect(name, running=[running])
    ip.settle()
    assert ip.job(running).state == "RUNNING"
    assert {j: (ip.job(j).reason, ip.job(j).expected_start) for j in waiting} == shown
    # what was shown reaches the store with the job's next real change: its whole record
    assert ip.store.get_job(waiting[0])["expected_start"] is None
    assert ip.request("update_job", jobs=[{"job_id": waiting[0]}],
                      changes={"Comment": "next"})["ok"]
    stored = ip.store.get_job(waiting[0])
    assert (stored["comment"], stored["reason"], stored["expected_start"]) == \
        ("next", *shown[waiting[0]])
