"""The controller's decisions, driven in process by requests, agent reports and a virtual clock
(harness: tests/inproc/conftest.py). No sockets, no sleeps: each test runs in milliseconds and
sees the same times on every run."""

from __future__ import annotations

DAY = 86400


def test_submit_schedule_start_end(ip):
    jid = ip.submit(ntasks=2)
    assert ip.job(jid).state == "PENDING"
    ip.settle()
    job = ip.job(jid)
    assert job.state == "RUNNING" and job.start_time == ip.start
    launch = ip.agents[job.batch_host].ops("launch", jid)
    assert len(launch) == 1 and launch[0]["uid"] == ip.uid
    assert launch[0]["time_limit_s"] == 600
    assert job.launch_confirmed  # the fake agent's job_started went through the handler
    ip.advance(42)
    ip.end(jid, exit_code=3)
    ip.settle()
    rec = ip.request("jobs", job_ids=[jid])["jobs"][0]
    assert (rec["state"], rec["exit_code"]) == ("FAILED", 3)
    assert rec["end_time"] == ip.start + 42
    ok = ip.submit()
    ip.settle()
    ip.end(ok)
    assert ip.job(ok).state == "COMPLETED" and ip.job(ok).exit_code == 0


def test_cancel_pending_and_running(ip):
    running = ip.submit(ntasks=4, nodes_min=2)  # takes every CPU
    pending = ip.submit()
    ip.settle()
    assert ip.job(running).state == "RUNNING" and ip.job(pending).state == "PENDING"
    assert ip.request("cancel", jobs=[{"job_id": pending}])["ok"]
    assert ip.job(pending).state == "CANCELLED"
    assert not any(a.ops("terminate", pending) for a in ip.agents.values())
    ip.advance(5)
    assert ip.request("cancel", jobs=[{"job_id": running}])["ok"]
    assert all(a.ops("terminate", running) for a in ip.agents.values())  # both of its nodes
    ip.pump()  # the batch host reports the SIGKILLed script
    job = ip.job(running)
    assert job.state == "CANCELLED" and not job.completing
    assert job.end_time == ip.start + 5


def test_other_users_may_not_cancel(ip):
    jid = ip.submit()
    reply = ip.request("cancel", uid=ip.uid + 12345, jobs=[{"job_id": jid}])
    assert reply.get("errors") or not reply["ok"], reply
    assert ip.job(jid).state == "PENDING"


def test_requeue_running_job_runs_again(ip):
    jid = ip.submit()
    ip.settle()
    first_host = ip.job(jid).batch_host
    assert ip.request("requeue", jobs=[{"job_id": jid}])["ok"]
    assert [m["why"] for m in ip.agents[first_host].ops("terminate", jid)] == ["requeue"]
    ip.pump()
    job = ip.job(jid)
    assert job.restarts == 1
    ip.advance(1)  # past requeue_delay=0's begin time
    job = ip.job(jid)
    assert job.state == "RUNNING" and job.restarts == 1
    launches = [m for a in ip.agents.values() for m in a.ops("launch", jid)]
    assert [m["run"] for m in launches] == [0, 1]


def test_node_failure_requeues_batch_job(ip):
    jid = ip.submit(nodes_min=2, ntasks=2)
    ip.settle()
    host = ip.job(jid).batch_host
    other = next(n for n in ip.agents if n != host)
    ip.disconnect(other)
    ip.advance(29)  # SlurmdTimeout=30: not yet
    assert ip.ctl.state.nodes[other].down is False and ip.job(jid).state == "RUNNING"
    ip.advance(2)
    node = ip.ctl.state.nodes[other]
    assert node.down and node.reason == "Not responding"
    assert [m["why"] for m in ip.agents[host].ops("terminate", jid)] == ["node_fail"]
    job = ip.job(jid)
    assert job.restarts == 1 and job.state == "PENDING"  # requeued; only one node left
    runs = ip.request("acct", job_ids=[jid], duplicates=True)
    assert "NODE_FAIL" in str(runs)


def test_node_failure_without_requeue_is_node_fail(ip):
    jid = ip.submit(requeue=False)
    ip.settle()
    host = ip.job(jid).batch_host
    ip.disconnect(host)
    ip.advance(31)
    job = ip.job(jid)
    assert job.state == "NODE_FAIL" and job.restarts == 0
    assert job.end_time == ip.start + 31


def test_interactive_allocation_times_out(ip):
    reply = ip.request("allocate", job={"ntasks": 1, "time_limit": 2, "work_dir": "/tmp",
                                        "name": "alloc"}, lease=False)
    jid = reply["job_id"]
    ip.settle()
    assert ip.job(jid).state == "RUNNING"
    ip.advance(119)
    assert ip.job(jid).state == "RUNNING"
    assert not any(a.ops("terminate", jid) for a in ip.agents.values())
    ip.advance(1)  # the 2-minute limit
    job = ip.job(jid)
    assert job.state == "TIMEOUT"
    assert [m["why"] for a in ip.agents.values() for m in a.ops("terminate", jid)] == ["timeout"]


def test_batch_job_times_out(ip):
    """At the limit the controller ends the job's steps (``scope: steps``) and the agent's
    supervisor, whose deadline came with the launch, ends the script: TIMEOUT."""
    jid = ip.submit(time_limit=1)
    ip.settle()
    ip.advance(59)
    assert ip.job(jid).state == "RUNNING"
    ip.advance(1)
    host = ip.job(jid).batch_host
    assert [(m["why"], m.get("scope")) for m in ip.agents[host].ops("terminate", jid)] \
        == [("timeout", "steps")]
    job = ip.job(jid)
    assert (job.state, job.reason) == ("TIMEOUT", "TimeLimit")
    assert job.end_time == ip.start + 60


PREEMPT = """PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PartitionName=low Nodes=ALL PriorityTier=1 MaxTime=UNLIMITED State=UP
PartitionName=high Nodes=ALL PriorityTier=2 MaxTime=UNLIMITED State=UP
"""


def test_partition_priority_preempts_and_requeues(make_inproc):
    ip = make_inproc(PREEMPT)
    victim = ip.submit(partition="low", nodes_min=2, ntasks=8)
    ip.settle()
    assert ip.job(victim).state == "RUNNING"
    ip.advance(10)
    urgent = ip.submit(partition="high", ntasks=4)
    ip.settle()
    assert [m["why"] for a in ip.agents.values() for m in a.ops("terminate", victim)] \
        == ["preempt", "preempt"]
    assert ip.job(urgent).state == "RUNNING" and ip.job(urgent).start_time == ip.start + 10
    v = ip.job(victim)
    assert v.state == "PENDING" and v.restarts == 1  # requeued under the same id


RESV_DAILY = dict(name="maint", users=["root"], nodes=["n1", "n2"], flags=["DAILY"],
                  start=0, duration=60)  # start: set per test (ip.start + 3600)


def test_daily_reservation_rolls_over(ip):
    assert ip.request("resv_create", uid=0, spec={**RESV_DAILY, "start": ip.start + 3600})["ok"]
    r = ip.request("reservations", name="maint")
    assert "reservations" in r
    first = ip.ctl.state.reservations.get("maint")
    assert (first["start"], first["end"]) == (ip.start + 3600, ip.start + 3600 + 3600)
    ip.advance(3600 + 3600 - 1)  # inside the window
    assert ip.ctl.state.reservations.get("maint")["start"] == ip.start + 3600
    ip.advance(1)  # the window's end: the reservation moves to the same hour tomorrow
    rolled = ip.ctl.state.reservations.get("maint")
    assert (rolled["start"], rolled["end"]) == (ip.start + 3600 + DAY, ip.start + 7200 + DAY)
    stored = {r["name"]: r for r in ip.store.load_reservations()}  # committed, not only in memory
    assert stored["maint"]["start"] == ip.start + 3600 + DAY


def test_reservation_blocks_job_that_would_overlap(ip):
    assert ip.request("resv_create", uid=0, spec={**RESV_DAILY, "start": ip.start + 3600})["ok"]
    jid = ip.submit(nodes_min=2, ntasks=2, time_limit=120)  # would run into the window
    ip.settle()
    assert ip.job(jid).state == "PENDING"
    short = ip.submit(nodes_min=2, ntasks=2, time_limit=30)  # ends before it
    ip.settle()
    assert ip.job(short).state == "RUNNING"


def _scenario(ip) -> list:
    """A mixed run: starts, an end, a cancel, a node failure; what the agents were sent and
    the jobs' records (without the per-run temporary paths)."""
    jobs = [ip.submit(ntasks=n) for n in (1, 2, 3, 2)]
    ip.settle()
    ip.advance(7)
    ip.end(jobs[0], exit_code=1)
    ip.request("cancel", jobs=[{"job_id": jobs[1]}])
    ip.advance(3)
    ip.disconnect("n2")
    ip.advance(40)
    sent = [(a.name, m.get("op"), m.get("job_id"), m.get("run"), m.get("why"))
            for a in ip.agents.values() for m in a.sent]
    recs = [(r["job_id"], r["state"], r.get("start_time"), r.get("end_time"), r.get("nodes"))
            for r in ip.request("jobs", job_ids=jobs)["jobs"]]
    return [sent, recs]


def test_same_events_same_decisions(make_inproc):
    first, second = _scenario(make_inproc()), _scenario(make_inproc())
    assert first == second
    assert any(r[1] == "CANCELLED" for r in first[1])


def _ends(ip, job_id: int) -> dict[str, list[int]]:
    """Per node: the runs of ``job_id`` it was sent the end-of-job message (op ``epilog``) for."""
    return {name: [m["run"] for m in a.ops("epilog", job_id)] for name, a in ip.agents.items()}


def test_every_node_of_a_job_hears_its_end_without_an_epilog(ip):
    """No Prolog/Epilog configured: a 2-node batch job that ends by itself still has its other
    node told, once (the batch host saw its script end); an srun/salloc allocation, which has
    no batch host, tells both."""
    jid = ip.submit(ntasks=2, nodes_min=2)
    ip.settle()
    host = ip.job(jid).batch_host
    other = next(n for n in ip.agents if n != host)
    assert _ends(ip, jid) == {host: [], other: []}
    ip.end(jid)
    ip.settle()
    assert ip.job(jid).state == "COMPLETED"
    assert _ends(ip, jid) == {host: [], other: [0]}
    assert ip.agents[other].ops("epilog", jid)[0]["uid"] == ip.uid  # the cleanup's user
    reply = ip.request("allocate", job={"ntasks": 2, "nodes_min": 2, "time_limit": 5,
                                        "work_dir": "/tmp", "name": "alloc"}, lease=False)
    alloc = reply["job_id"]
    ip.settle()
    assert ip.job(alloc).state == "RUNNING" and _ends(ip, alloc) == {"n1": [], "n2": []}
    assert ip.request("release_alloc", job_id=alloc, exit_code=0, signal=0)["ok"]
    assert ip.job(alloc).state == "COMPLETED"
    assert _ends(ip, alloc) == {"n1": [0], "n2": [0]}


def test_a_node_away_hears_the_end_when_it_comes_back(ip):
    """The end-of-job message to a node whose agent is away waits in the outbox."""
    jid = ip.submit(ntasks=2, nodes_min=2)
    ip.settle()
    other = next(n for n in ip.agents if n != ip.job(jid).batch_host)
    ip.disconnect(other)
    ip.end(jid)
    assert ip.job(jid).state == "COMPLETED"
    assert _ends(ip, jid)[other] == []
    assert [m["op"] for m in ip.ctl.outbox[other]] == ["epilog"]
    ip.connect(other)
    assert _ends(ip, jid)[other] == [0] and other not in ip.ctl.outbox


def test_with_an_epilog_every_node_including_the_batch_host_hears_the_end(make_inproc):
    """With an Epilog each node runs it, the batch host too, and holds its share of the job
    until it reports (the same message: the Epilog request is the end-of-job message)."""
    ip = make_inproc("Epilog=/nonexistent/epilog\n")
    jid = ip.submit(ntasks=2, nodes_min=2)
    ip.settle()
    ip.end(jid)
    assert _ends(ip, jid) == {"n1": [0], "n2": [0]}
    assert all(jid in ip.ctl.state.nodes[n].completing_jobs for n in ("n1", "n2"))
    for n in ("n1", "n2"):
        ip.report(n, {"op": "epilog_done", "job_id": jid, "run": 0, "ok": True})
    assert not any(jid in ip.ctl.state.nodes[n].completing_jobs for n in ("n1", "n2"))


def test_the_end_message_leaves_only_after_its_commit(ip):
    """The end-of-job message follows the commit that released the job's resources: after
    that transaction's own effects (a cancel's terminate first), and never for a transaction
    that fails."""
    from muster.lifecycle import events
    jid = ip.submit(ntasks=2, nodes_min=2)
    ip.settle()
    other = next(n for n in ip.agents if n != ip.job(jid).batch_host)
    assert ip.request("cancel", jobs=[{"job_id": jid}])["ok"]
    ip.settle()
    ops = [m["op"] for m in ip.agents[other].sent if m.get("job_id") == jid]
    assert ops[-2:] == ["terminate", "epilog"], ops
    jid = ip.submit(ntasks=2, nodes_min=2)
    ip.settle()
    job = ip.job(jid)
    assert job.state == "RUNNING"
    other = next(n for n in ip.agents if n != job.batch_host)
    applier = ip.ctl.applier
    try:
        with applier.transaction():
            applier.job(job, events.Cancel(by_uid=ip.uid), applier.ctl_now())
            applier.job(job, events.Ended(node=job.batch_host), applier.ctl_now())
            assert _ends(ip, jid)[other] == []  # not while the transaction is open
            raise RuntimeError("the commit fails")
    except RuntimeError:
        pass
    # never for a rolled-back change (in the daemon a failed commit is StoreLost: a restart)
    assert _ends(ip, jid)[other] == []
