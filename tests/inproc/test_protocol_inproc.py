"""The controller's replies are the protocol's records, and agent frames go through the
protocol's decoder (issue 15): every record of a live ``jobs``/``nodes``/``partitions``/
``steps``/``acct`` reply converts, strictly, to its Struct; a malformed agent frame is dropped
(logged), the node's link and its later frames go on working."""

from __future__ import annotations

import logging

import msgspec

from muster.protocol import records


def _strict(items, struct):
    out = [msgspec.convert(r, struct) for r in items]
    assert len(out) == len(items)
    return out


def test_live_replies_are_protocol_records(ip):
    running = ip.submit(ntasks=2, name="r")
    done = ip.submit(name="d")
    ip.submit(ntasks=8, nodes_min=2, name="waits")  # every CPU of both nodes: stays pending
    ip.settle()
    ip.advance(5)
    ip.end(done, exit_code=2)
    ip.settle()
    jobs = _strict(ip.request("jobs")["jobs"], records.Job)
    assert {j.state for j in jobs} >= {"RUNNING", "PENDING"}
    ran = next(j for j in jobs if j.job_id == running)
    assert ran.alloc and ran.alloc[0].cpus >= 1 and ran.alloc[0].tasks >= 1
    shown = ip.request("jobs", job_ids=[running], events=True)["jobs"]
    assert _strict(shown, records.Job)[0].events  # scontrol show job: with its trail
    nodes = _strict(ip.request("nodes")["nodes"], records.Node)
    assert sorted(n.name for n in nodes) == ["n1", "n2"]
    assert _strict(ip.request("partitions")["partitions"], records.Partition)[0].name == "main"
    steps = _strict(ip.request("steps")["steps"], records.StepInfo)
    assert any(s.job_id == running and s.step_id == "batch" for s in steps)
    acct = _strict(ip.request("acct", job_ids=[done])["jobs"], records.AcctJob)
    assert acct[0].exit_code == 2 and acct[0].steps[0].step_id == "batch"


def test_malformed_agent_frames_are_dropped_and_the_link_goes_on(ip, caplog):
    jid = ip.submit()
    ip.settle()
    host = ip.job(jid).batch_host
    agent = ip.agents[host]
    caplog.set_level(logging.WARNING, logger="muster")
    for bad in ({"op": "job_ended", "job_id": str(jid), "run": 0},
                {"op": "job_ended", "job_id": jid, "run": 0, "exit_code": "1"},
                {"op": "heartbeat", "load": "high"}, {"op": "no_such_op"}, ["x"]):
        ip.report(host, bad)
    assert ip.job(jid).state == "RUNNING"  # none of them ended the job
    assert not agent.ops("ack", jid)  # nor was any acknowledged
    assert sum("malformed" in r.getMessage() for r in caplog.records) == 5
    ip.end(jid, exit_code=0)  # the same link's next well-formed report is acted on
    assert ip.job(jid).state == "COMPLETED" and agent.ops("ack", jid)
