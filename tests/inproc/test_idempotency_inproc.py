"""Request ids (issue 16): a request delivered twice — a client's retry after it lost the
connection before the reply — acts once, and its repeat gets the first reply, also after the
controller restarted on the same store."""

from __future__ import annotations

from muster.common.requestid import changes_state, new_rid, valid_rid
from muster.controller.server import Controller
from muster.store.sqlite import SqliteStore

JOB = {"ntasks": 1, "time_limit": 10, "work_dir": "/tmp", "name": "t"}


def _submit(ip, rid: str | None, uid: int | None = None) -> dict:
    fields = {"job": JOB, "script": "#!/bin/sh\ntrue\n", "env": {}}
    if rid is not None:
        fields["rid"] = rid
    return ip.request("submit", uid, **fields)


def test_repeated_submission_is_answered_not_run_again(ip):
    rid = new_rid()
    first = _submit(ip, rid)
    again = _submit(ip, rid)
    assert first["ok"] and again == first
    assert [j for j in ip.ctl.state.jobs] == [first["job_id"]]
    other = _submit(ip, new_rid())  # a new request is a new job
    assert other["job_id"] != first["job_id"] and len(ip.ctl.state.jobs) == 2


def test_repeat_after_a_restart_gets_the_committed_job(ip):
    rid = new_rid()
    first = _submit(ip, rid)
    ip.store.close()
    ip.store = SqliteStore(ip.cfg.db_path)  # a new controller process on the same database
    ip.ctl = Controller(ip.cfg, ip.store, ip.clock)
    again = _submit(ip, rid)
    assert again["job_id"] == first["job_id"]
    assert list(ip.ctl.state.jobs) == [first["job_id"]]


def test_request_ids_are_per_user(ip):
    rid = new_rid()
    mine = _submit(ip, rid)
    theirs = _submit(ip, rid, uid=0)  # same id, another user: their own request
    assert theirs["ok"] and theirs["job_id"] != mine["job_id"]
    assert ip.ctl.state.jobs[theirs["job_id"]].uid == 0
    assert _submit(ip, rid)["job_id"] == mine["job_id"]


def test_refusal_is_not_remembered(ip):
    rid = new_rid()
    fields = {"job": {**JOB, "partition": "nosuch"}, "script": "#!/bin/sh\ntrue\n", "env": {},
              "rid": rid}
    refused = ip.request("submit", **fields)
    assert not refused["ok"]
    assert ip.store.recall_request(ip.uid, rid) is None
    assert _submit(ip, rid)["ok"]  # the same id may still be used for a request that works


def test_repeated_cancel_gets_the_first_reply(ip):
    jid = ip.submit()
    rid = new_rid()
    first = ip.request("cancel", jobs=[{"job_id": jid}], rid=rid)
    assert first["ok"], first
    assert ip.job(jid).state == "CANCELLED"
    again = ip.request("cancel", jobs=[{"job_id": jid}], rid=rid)
    assert again == first
    assert ip.store.recall_request(ip.uid, rid) == first


def test_malformed_ids_are_ignored(ip):
    for bad in ("", "x" * 32, new_rid().upper(), 12345, new_rid() + "0"):
        assert not valid_rid(bad)
        reply = _submit(ip, bad)  # type: ignore[arg-type]
        assert reply["ok"]
    assert len(ip.ctl.state.jobs) == 5


def test_which_requests_carry_an_id():
    assert changes_state({"op": "submit"}) and changes_state({"op": "cancel"})
    assert changes_state({"op": "sacctmgr", "action": "add"})
    assert not changes_state({"op": "sacctmgr", "action": "show"})
    assert not changes_state({"op": "jobs"}) and not changes_state({"op": "ping"})
    assert not changes_state({"op": 3})
