"""Fewer commits for bursts of short jobs (issue 17, `sbatch --array=1-1000 --wrap true`):
the agents' start and end reports that arrive in one turn of the event loop are applied in one
transaction, acknowledged only after its commit; a pass that starts many tasks of an array
saves their master once. Harness: tests/inproc/conftest.py (the real controller and store)."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from muster.controller import server


@pytest.fixture(autouse=True)
def whole_batches(monkeypatch):
    """A batch is one slice unless a test says otherwise: slices end after AGENT_SLICE_S of
    wall time, which a loaded machine can spend on a handful of frames."""
    monkeypatch.setattr(server, "AGENT_SLICE_S", 60.0)


def committed_state(ip, job_id: int) -> str | None:
    """The job's state as committed in the store, read through a connection of its own
    (which sees nothing of a transaction still open)."""
    db = sqlite3.connect(ip.cfg.db_path)
    try:
        row = db.execute("SELECT state FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
    finally:
        db.close()
    return row[0] if row else None


def count_commits(ip) -> list[float]:
    commits: list[float] = []
    ip.store.on_commit = commits.append
    return commits


def queue(ip, frames: list[tuple[str, dict]]) -> None:
    """The frames as the agents' links deliver them within one turn of the loop, then one
    more turn (where the controller applies what was queued)."""
    async def turn():
        for node, msg in frames:
            ip.ctl.queue_agent_message(ip.ctl.state.nodes[node], ip.agents[node], msg, 0)
        await asyncio.sleep(0)
    asyncio.run(turn())


def ended(ip, jid: int) -> tuple[str, dict]:
    job = ip.job(jid)
    return job.batch_host, {"op": "job_ended", "job_id": jid, "run": job.restarts,
                            "exit_code": 0, "signal": 0, "end_time": int(ip.clock.time())}


def running_jobs(ip, n: int) -> list[int]:
    jids = [ip.submit(mem_per_cpu=100) for _ in range(n)]
    ip.settle()
    assert all(ip.job(j).state == "RUNNING" for j in jids)
    return jids


def test_ends_in_one_turn_are_one_commit_and_acked_after_it(ip):
    jids = running_jobs(ip, 6)
    acked_when: dict[int, str | None] = {}
    for agent in ip.agents.values():
        def send(msg, _orig=agent.send):
            if msg.get("op") == "ack":  # what a crash right now would leave in the store
                acked_when[msg["job_id"]] = committed_state(ip, msg["job_id"])
            return _orig(msg)
        agent.send = send
    commits = count_commits(ip)
    queue(ip, [ended(ip, j) for j in jids] + [
        (ip.job(jids[0]).batch_host, {"op": "heartbeat", "load": 0.0, "free_mem": 4000})])
    assert len(commits) == 1  # six ends, one transaction (the pass they ask for comes later)
    assert all(ip.job(j).state == "COMPLETED" for j in jids)
    assert acked_when == {j: "COMPLETED" for j in jids}  # every ack after the commit


def test_a_long_batch_is_applied_in_slices_with_requests_between(ip, monkeypatch):
    """Past AGENT_SLICE_S the rest of a batch waits for the loop's next turn, after what came
    meanwhile: here a squeue-like request. Each slice is its own commit, its acks after it;
    the order of the reports is kept."""
    monkeypatch.setattr(server, "AGENT_SLICE_S", 0.0)  # one frame a slice
    jids = running_jobs(ip, 4)
    order: list = []
    orig = ip.ctl.on_agent_message

    def spy(n, link, msg):
        order.append(("report", msg["job_id"]))
        return orig(n, link, msg)
    ip.ctl.on_agent_message = spy
    acked_when: dict[int, str | None] = {}
    for agent in ip.agents.values():
        def send(msg, _orig=agent.send):
            if msg.get("op") == "ack":
                acked_when[msg["job_id"]] = committed_state(ip, msg["job_id"])
            return _orig(msg)
        agent.send = send
    commits = count_commits(ip)

    async def turns():
        for j in jids:
            node, msg = ended(ip, j)
            ip.ctl.queue_agent_message(ip.ctl.state.nodes[node], ip.agents[node], msg, 0)
        await asyncio.sleep(0)  # the first slice
        order.append(("request", [ip.ctl.state.jobs[j].state for j in jids]))
        for _ in range(len(jids) + 2):
            await asyncio.sleep(0)
    asyncio.run(turns())
    assert [o[1] for o in order if o[0] == "report"] == jids  # in arrival order
    kinds = [o[0] for o in order]
    assert kinds.index("request") == 1  # between the first slice and the rest
    assert order[1][1] == ["COMPLETED", "RUNNING", "RUNNING", "RUNNING"]
    assert len(commits) == len(jids)  # a commit per slice
    assert acked_when == {j: "COMPLETED" for j in jids}  # each ack after its slice's commit
    assert not ip.ctl._agent_batch


def test_a_failing_slice_keeps_the_committed_ones_and_resets_the_rest(ip, monkeypatch):
    """Slices before the failing one stay committed (and acknowledged); the failing one is
    rolled back, and the links of every frame still queued are reset (their agents report
    again), none of them applied."""
    monkeypatch.setattr(server, "AGENT_SLICE_S", 0.0)  # one frame a slice
    a, b, c = running_jobs(ip, 3)
    orig = server.Controller.job_ended
    calls = []

    def flaky(self, node, res):
        calls.append(res.job_id)
        if res.job_id == b:
            raise RuntimeError("boom")
        return orig(self, node, res)
    monkeypatch.setattr(server.Controller, "job_ended", flaky)

    async def turns():
        for j in (a, b, c):
            node, msg = ended(ip, j)
            ip.ctl.queue_agent_message(ip.ctl.state.nodes[node], ip.agents[node], msg, 0)
        for _ in range(5):
            await asyncio.sleep(0)
    asyncio.run(turns())
    assert calls == [a, b]  # c was never applied
    assert committed_state(ip, a) == "COMPLETED"
    acks = [m["job_id"] for ag in ip.agents.values() for m in ag.sent if m.get("op") == "ack"]
    assert acks == [a]
    assert committed_state(ip, b) == "RUNNING" and committed_state(ip, c) == "RUNNING"
    assert ip.agents[ip.job(b).batch_host].writer.closed
    assert ip.agents[ip.job(c).batch_host].writer.closed
    assert not ip.ctl._agent_batch


def test_other_reports_keep_their_order_and_their_own_handling(ip):
    jid = running_jobs(ip, 1)[0]
    node = ip.job(jid).batch_host
    seen: list[str] = []
    orig = ip.ctl.on_agent_message

    def spy(n, link, msg):
        seen.append(msg["op"])
        return orig(n, link, msg)
    ip.ctl.on_agent_message = spy
    health = {"op": "health", "ok": True, "message": ""}
    queue(ip, [(node, {"op": "heartbeat", "load": 0.0, "free_mem": 4000}), (node, health),
               ended(ip, jid)])
    assert seen == ["heartbeat", "health", "job_ended"]  # the queued heartbeat went first
    assert ip.job(jid).state == "COMPLETED"


def test_a_failing_batch_keeps_nothing_and_resets_its_links(ip, monkeypatch):
    a, b = running_jobs(ip, 2)
    calls = []
    orig = server.Controller.job_ended

    def flaky(self, node, res):
        calls.append(res.job_id)
        if len(calls) == 2:
            raise RuntimeError("boom")
        return orig(self, node, res)
    monkeypatch.setattr(server.Controller, "job_ended", flaky)
    sent_before = {n: len(ag.sent) for n, ag in ip.agents.items()}
    queue(ip, [ended(ip, a), ended(ip, b)])
    assert committed_state(ip, a) == "RUNNING"  # the first end was rolled back with the batch
    assert all(len(ag.sent) == sent_before[n] for n, ag in ip.agents.items())  # no ack
    assert ip.agents[ip.job(a).batch_host].writer.closed  # its agent reconnects, reports again


@pytest.mark.parametrize("size", [8, 10])
def test_a_pass_saves_the_array_master_once(ip, monkeypatch, size):
    """8 CPUs: one pass starts 8 tasks. With 8 the last takes the master's id (its own Start
    saves it); with 10 the master keeps 2 indices, saved once for the 8 splits, not once per
    task (its new pending reason is shown, not written: ClusterState.shown)."""
    reply = ip.request("submit", job={"ntasks": 1, "time_limit": 10, "work_dir": "/tmp",
                                      "name": "arr", "array": f"0-{size - 1}",
                                      "mem_per_cpu": 100},
                       script="#!/bin/sh\ntrue\n", env={})
    assert reply["ok"], reply
    master = reply["job_id"]
    saved: list[int] = []
    put = ip.store.put_job
    monkeypatch.setattr(ip.store, "put_job", lambda rec: (saved.append(rec["job_id"]), put(rec)))
    ip.ctl.schedule_once()
    assert saved.count(master) == 1, saved
    left = list(range(8, size)) or None
    assert ip.job(master).pending_tasks == left
    assert ip.store.get_job(master)["pending_tasks"] == left  # what a restart would reload
    started = [j for j in ip.ctl.state.jobs.values()
               if j.array_job_id == master and j.state == "RUNNING"]
    assert sorted(j.array_task_id for j in started) == list(range(8))
