"""squeue's cached records and rows (muster.controller.jobjson) never go stale: after every
kind of change a job goes through (scontrol update, hold/release, the scheduler's reasons and
priorities, start, end, cancel, requeue, node failure, purge), the ``encoded`` listing is byte
for byte what squeue built itself from the plain ``jobs`` reply before, the columnar rows are
those built afresh from the jobs, and jobs nothing changed are served from the cache
(harness: tests/inproc/conftest.py)."""

from __future__ import annotations

import json

from muster.cli.squeue import LIGHT_FIELDS
from muster.common import fmt_json, litejson
from muster.controller.handlers import row_of

DEFAULT = ["COMPLETING", "CONFIGURING", "PENDING", "RUNNING", "STAGE_OUT", "SUSPENDED"]
COLUMNS = [*LIGHT_FIELDS, "start_time", "array_task_str", "reason", "priority", "time_limit"]


def check(ip, **query) -> dict[int, dict]:
    """The encoded listing equals the one squeue built from the plain reply; its records, by
    job id."""
    enc = ip.request("jobs", encoded=True, **query)
    plain = ip.request("jobs", **query)
    assert enc["ok"] and plain["ok"], (enc, plain)
    got = bytes(enc["records"]).decode()
    want = fmt_json.list_text([litejson.dumps(fmt_json.job_json(r, 0, plain["cluster"]))
                               for r in plain["jobs"]])
    assert plain["cluster"] and enc["cluster"] == plain["cluster"]  # ClusterName, as Slurm
    assert got == want
    rows_reply = ip.request("jobs", fields=COLUMNS, rows=True, **query)
    fields = tuple(rows_reply["fields"])
    jobs = ip.ctl.state.jobs
    fresh = [row_of(jobs[r[fields.index("job_id")]], fields) for r in rows_reply["rows"]]
    assert rows_reply["rows"] == fresh  # the cached rows are the jobs' rows now
    assert {r[fields.index("job_id")] for r in rows_reply["rows"]} == \
        {r["job_id"] for r in plain["jobs"]}
    return {r["job_id"]: r for r in json.loads(got)}


def cached(ip, jid: int) -> bytes | None:
    hit = ip.ctl.state.records._by_id.get(jid)
    return None if hit is None else hit[1]


def test_encoded_listing_follows_every_change(ip):
    held = ip.submit(hold=True, time_limit=10)
    other = ip.submit(ntasks=8, nodes_min=2)  # takes every CPU once it starts
    waiting = ip.submit()
    recs = check(ip, states=DEFAULT)
    assert recs[held]["state_reason"] == "JobHeldUser" and recs[held]["priority"]["number"] == 0
    assert len(ip.ctl.state.records) == 3
    before = cached(ip, waiting)

    assert ip.request("update_job", jobs=[{"job_id": held}],
                      changes={"TimeLimit": "30", "Comment": "now é \"quoted\""})["ok"]
    recs = check(ip, states=DEFAULT)
    assert recs[held]["time_limit"]["number"] == 30
    assert recs[held]["comment"] == 'now é "quoted"'
    assert cached(ip, waiting) is before  # unchanged: not built again

    ip.settle()  # `other` starts; `waiting` gets the scheduler's reason and priority
    recs = check(ip, states=DEFAULT)
    assert recs[other]["job_state"] == ["RUNNING"] and recs[other]["nodes"]
    assert recs[waiting]["state_reason"] == "Resources"

    assert ip.request("release", jobs=[{"job_id": held}])["ok"]
    assert ip.request("update_job", uid=0, jobs=[{"job_id": waiting}],
                      changes={"Priority": "12345"})["ok"]
    recs = check(ip, states=DEFAULT)
    assert recs[held]["hold"] is False and recs[held]["state_reason"] != "JobHeldUser"
    assert recs[waiting]["priority"]["number"] == 12345

    assert ip.request("cancel", jobs=[{"job_id": waiting}, {"job_id": held}])["ok"]
    recs = check(ip)  # every state
    assert recs[waiting]["job_state"] == recs[held]["job_state"] == ["CANCELLED"]
    assert waiting not in check(ip, states=DEFAULT)

    assert ip.request("requeue", jobs=[{"job_id": other}])["ok"]
    check(ip, states=DEFAULT)
    ip.pump()
    recs = check(ip, states=DEFAULT)
    assert recs[other]["restart_cnt"] == 1 and recs[other]["job_state"] == ["PENDING"]
    ip.advance(1)  # past requeue_delay=0's begin time: it runs again
    ip.settle()
    assert check(ip, states=DEFAULT)[other]["job_state"] == ["RUNNING"]
    ip.advance(3)
    ip.end(other, exit_code=3)
    ip.settle()
    recs = check(ip)
    assert recs[other]["job_state"] == ["FAILED"]
    assert recs[other]["exit_code"]["return_code"]["number"] == 3


def test_node_failure_and_purge(ip):
    jid = ip.submit(nodes_min=2, ntasks=2, requeue=False)
    ip.settle()
    assert check(ip)[jid]["job_state"] == ["RUNNING"]
    ip.disconnect(next(n for n in ip.agents if n != ip.job(jid).batch_host))
    ip.advance(31)  # past SlurmdTimeout: the node is down, the job ends NODE_FAIL
    ip.settle()
    recs = check(ip)
    assert recs[jid]["job_state"] == [ip.job(jid).state] != ["RUNNING"]
    ip.advance(3600)  # past MinJobAge: forgotten, and so is its cached record
    ip.ctl.state.purge_old(int(ip.clock.time()))
    assert jid not in check(ip) and cached(ip, jid) is None


def test_encoded_reply_keeps_the_rows_and_the_missing_job_error(ip):
    a = ip.submit(name="a")
    b = ip.submit(name="b", hold=True)
    enc = ip.request("jobs", encoded=True, fields=["name"])
    assert list(enc)[-1] == "records"  # read raw by the command: it must come last
    rows = [dict(zip(enc["fields"], r)) for r in enc["rows"]]
    assert [(r["job_id"], r["name"]) for r in rows] == [(a, "a"), (b, "b")]
    assert [r["job_id"] for r in json.loads(bytes(enc["records"]))] == [a, b]
    gone = ip.request("jobs", encoded=True, job_ids=[999_999])
    assert (gone["ok"], gone["code"]) == (False, "invalid_job_id")
