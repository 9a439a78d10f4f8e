"""REST API (musterrestd) end to end: JWT auth, authorization by the controller, submit as
the token's user, job/node control, events, output, metrics."""

import os
import time

import pytest

from api_helpers import call, restd_info, token, wait_api_state
from cluster import TEST_USER2

pytest.importorskip("jwt")

S = "/slurm/v0.0.40"


def test_no_token_is_401(cluster):
    s, b = call(cluster, "GET", f"{S}/jobs")
    assert s == 401 and b["errors"][0]["description"] == "auth"
    s, b = call(cluster, "GET", f"{S}/jobs", headers={"Authorization": "Bearer "})
    assert s == 401


def test_forged_and_expired_tokens_are_401(cluster):
    from muster.controller.api_ops import sign_hs256
    t = int(time.time())
    forged = sign_hs256({"iat": t, "exp": t + 600, "sun": "root"}, b"not-the-key" * 3)
    s, b = call(cluster, "GET", f"{S}/jobs", forged)
    assert s == 401, b
    token(cluster)  # make sure the key exists
    with open(os.path.join(cluster.state_dir, "jwt.key"), "rb") as fh:
        key = fh.read()
    expired = sign_hs256({"iat": t - 700, "exp": t - 100, "sun": "root"}, key)
    s, b = call(cluster, "GET", f"{S}/jobs", expired)
    assert s == 401 and "expired" in b["errors"][0]["error"]
    good = sign_hs256({"iat": t, "exp": t + 600, "sun": "root"}, key)
    assert call(cluster, "GET", f"{S}/jobs", good)[0] == 200
    # bearer form works as well
    assert call(cluster, "GET", f"{S}/ping", headers={"Authorization": f"Bearer {good}"})[0] == 200


def test_token_for_another_user_needs_an_operator(cluster, test_user):
    r = cluster.run([os.sys.executable, "-c",
                     "from muster.cli import client; client.call({'op':'token','username':'root'})"],
                    user=test_user)
    assert r.rc != 0 and "permission denied" in r.err.lower()
    tok = token(cluster, username=test_user, lifespan=120)  # root may
    s, b = call(cluster, "GET", "/muster/v0.0.40/whoami", tok)
    assert s == 200 and b["user"] == test_user and b["operator"] is False


def test_submit_via_api_runs_as_the_token_user(cluster, workdir, test_user):
    tok = token(cluster, user=test_user)
    s, b = call(cluster, "POST", f"{S}/job/submit", tok, {
        "script": "#!/bin/sh\nid -un\necho job=$SLURM_JOB_ID gpus=$CUDA_VISIBLE_DEVICES\n",
        "job": {"name": "api-submit", "current_working_directory": workdir,
                "tres_per_node": "gres/gpu:1", "environment": ["FOO=bar"],
                "standard_output": "api-%j.out"}})
    assert s == 200, b
    jid = b["job_id"]
    rec = wait_api_state(cluster, tok, jid, ("COMPLETED", "FAILED"))
    assert rec["state"]["current"] == ["COMPLETED"] and rec["user"] == test_user
    out_path = os.path.join(workdir, f"api-{jid}.out")
    assert open(out_path).read().splitlines()[0] == test_user
    assert os.stat(out_path).st_uid == __import__("pwd").getpwnam(test_user).pw_uid
    s, b = call(cluster, "GET", f"/muster/v0.0.40/job/{jid}/output", tok)
    assert s == 200 and b["output"]["available"] and b["output"]["data"].startswith(test_user)
    # the job's events explain its life
    s, b = call(cluster, "GET", f"/muster/v0.0.40/events?job_id={jid}", tok)
    kinds = [e["event"] for e in b["events"]]
    assert "submitted" in kinds and "ended" in kinds
    # squeue-style record through the slurm path
    s, b = call(cluster, "GET", f"{S}/job/{jid}", tok)
    assert s == 200 and b["jobs"][0]["user_name"] == test_user


def test_user_cannot_cancel_or_read_anothers_job(cluster, workdir, test_user):
    other = token(cluster, user=TEST_USER2)
    mine = token(cluster, user=test_user)
    s, b = call(cluster, "POST", f"{S}/job/submit", other, {
        "script": "#!/bin/sh\necho secret\nsleep 60\n",
        "job": {"current_working_directory": workdir, "name": "others"}})
    assert s == 200, b
    jid = b["job_id"]
    wait_api_state(cluster, other, jid, ("RUNNING",))
    s, b = call(cluster, "DELETE", f"{S}/job/{jid}", mine)
    assert s == 403, b
    s, b = call(cluster, "GET", f"/muster/v0.0.40/job/{jid}/output", mine)
    assert s == 403, b
    s, b = call(cluster, "POST", f"/muster/v0.0.40/job/{jid}/hold", mine)
    assert s == 403, b
    s, b = call(cluster, "DELETE", f"{S}/job/{jid}", other)
    assert s == 200, b
    rec = wait_api_state(cluster, other, jid, ("CANCELLED",))
    assert rec["state"]["current"] == ["CANCELLED"]


def test_hold_release_requeue_by_owner(cluster, workdir, test_user):
    tok = token(cluster, user=test_user)
    s, b = call(cluster, "POST", f"{S}/job/submit", tok, {
        "script": "#!/bin/sh\nsleep 30\n",
        "job": {"current_working_directory": workdir, "hold": True, "name": "held"}})
    jid = b["job_id"]
    s, b = call(cluster, "GET", f"{S}/job/{jid}", tok)
    assert b["jobs"][0]["hold"] is True and b["jobs"][0]["state_reason"] == "JobHeldUser"
    assert call(cluster, "POST", f"/muster/v0.0.40/job/{jid}/release", tok)[0] == 200
    wait_api_state(cluster, tok, jid, ("RUNNING",))
    assert call(cluster, "POST", f"/muster/v0.0.40/job/{jid}/requeue", tok)[0] == 200
    s, b = call(cluster, "GET", f"/muster/v0.0.40/events?job_id={jid}", tok)
    assert "requeue_requested" in [e["event"] for e in b["events"]]
    s, b = call(cluster, "POST", f"{S}/job/{jid}", tok, {"hold": True, "comment": "parked"})
    assert s in (200, 409), b
    call(cluster, "DELETE", f"{S}/job/{jid}", tok)


def test_node_drain_resume_is_for_operators(cluster, test_user):
    user = token(cluster, user=test_user)
    root = token(cluster)
    s, b = call(cluster, "POST", f"{S}/node/node4", user, {"state": ["DRAIN"], "reason": "x"})
    assert s == 403, b
    s, b = call(cluster, "POST", f"{S}/node/node4", root, {"state": ["DRAIN"], "reason": "api test"})
    assert s == 200, b
    try:
        s, b = call(cluster, "GET", f"{S}/node/node4", user)
        assert "DRAIN" in b["nodes"][0]["state"] and b["nodes"][0]["reason"] == "api test"
    finally:
        s, b = call(cluster, "POST", f"{S}/node/node4", root, {"state": ["RESUME"]})
        assert s == 200, b
    s, b = call(cluster, "GET", f"{S}/node/node4", user)
    assert "DRAIN" not in b["nodes"][0]["state"]
    assert call(cluster, "GET", f"{S}/node/nosuch", user)[0] == 404


def test_metrics_scrape(cluster):
    s, text = call(cluster, "GET", "/metrics", raw=True)
    assert s == 200
    for name in ("muster_up 1.0", "muster_nodes{", "muster_gpus ", "muster_gpus_allocated",
                 "muster_gpus_idle", "muster_cpus_idle", "muster_memory_allocated_bytes",
                 "muster_scheduler_cycle_duration_seconds", "muster_scheduler_queue_depth",
                 "muster_backfill_job_starts_total 0.0", "muster_controller_rpcs_total",
                 "muster_node_heartbeat_age_seconds{node=\"node1\"}",
                 "muster_job_requeues_total", "muster_node_failures_total",
                 "muster_store_commit_duration_seconds_count"):
        assert name in text, name


def test_muster_status_reports_urls(cluster):
    import json
    r = cluster.run(["muster", "status", "--json", "--state-dir", cluster.state_dir])
    api = json.loads(r.out)["api"]
    info = restd_info(cluster)
    assert api["url"] == info["url"] and api["running"] is True
    assert api["dashboard"].endswith("/dashboard/") and api["metrics"].endswith("/metrics")
    r = cluster.run(["muster", "status", "--state-dir", cluster.state_dir])
    assert f"Dashboard:  {info['dashboard']}" in r.out
