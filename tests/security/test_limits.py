"""Request validation and Slurm's job limits, enforced by the controller (real daemons).

Every refusal is checked where a hostile user would meet it: the CLI (Slurm's message and exit
code) and the raw socket (the controller itself refuses; the CLI is only a convenience).

* MaxJobCount: the controller answers EAGAIN ("Resource temporarily unavailable"); sbatch says
  "Slurm temporarily unable to accept job, sleeping and retrying" and retries (1, 2, ... s)
  until the queue has room: here a cancelled job is purged after MinJobAge and the retry wins.
* MaxSubmitJobs (association) refuses at submit, MaxJobs (association) and MaxJobsPerUser (QOS)
  keep jobs pending with AssocMaxJobsLimit / QOSMaxJobsPerUserLimit.
* A negative nice is for operators; --uid/--gid for root; node counts 0 and max < min; scripts
  over max_script_size and oversized environments.
* /metrics and the events list show per-user detail to operators only.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys

import pytest

import wire
from cluster import (TEST_USER, TEST_USER2, private_cluster, restart_controller, user_exists,
                     wait_for)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "e2e"))  # api_helpers

MAX_JOBS = 20
SCRIPT_LIMIT = 65536
CONF = (f"MaxJobCount={MAX_JOBS}\nMinJobAge=2\nAccountingStorageEnforce=limits\n"
        f"SchedulerParameters=max_script_size={SCRIPT_LIMIT}\nMusterOperators={TEST_USER2}\n")
SCRIPT = "#!/bin/sh\ntrue\n"
POLICY = ("sbatch: error: Batch job submission failed: Job violates accounting/QOS policy "
          "(job submit limit, user's size and/or time limits)\n")


@pytest.fixture(scope="module")
def c():
    if os.getuid() != 0 or not (user_exists(TEST_USER) and user_exists(TEST_USER2)):
        pytest.skip("needs root and both test users")
    with private_cluster("muster-limits-sec-", nodes=1, gpus=0, cpus=8, partitions="debug",
                         extra_conf=CONF) as cl:
        # associations enforced (limits imply them): both test users get one
        cl.ok("sacctmgr", "-i", "add", "account", "lim")
        cl.ok("sacctmgr", "-i", "add", "user", f"{TEST_USER},{TEST_USER2}", "account=lim")
        yield cl


def submit(c, user=None, **job):
    """A raw submit over the Unix socket as ``user``: the controller's own answer."""
    job.setdefault("work_dir", c.workdir)
    return wire.call(c, {"op": "submit", "job": job, "script": SCRIPT,
                         "env": {"PATH": "/usr/bin:/bin"}}, user=user)


def clear_queue(c) -> None:
    """Cancel every job and wait until MinJobAge has purged them all from memory."""
    for user in ("root", TEST_USER, TEST_USER2):
        c.run(["scancel", "-u", user])
    wait_for(lambda: not wire.jobs(c), timeout=30, what="an empty queue")


def refused(reply: dict, code: str, error: str | None = None) -> None:
    assert reply["ok"] is False and reply["code"] == code, reply
    if error is not None:
        assert reply["error"] == error, reply


# ---- MaxJobCount ------------------------------------------------------------------------------

def test_max_job_count_refuses_and_sbatch_retries_until_there_is_room(c):
    clear_queue(c)
    array = c.sbatch("-H", f"--array=0-{MAX_JOBS - 1}", "--wrap", "true", user=TEST_USER,
                     cwd=c.workdir)  # one record, MAX_JOBS jobs: a full queue
    before = wire.jobs(c)
    for user in (TEST_USER, None):  # root gets no exception either
        refused(submit(c, user), "eagain", "Resource temporarily unavailable")
    refused(wire.call(c, {"op": "allocate", "job": {"work_dir": c.workdir}}, user=TEST_USER),
            "eagain")
    assert wire.jobs(c).keys() == before.keys()
    # sbatch announces the wait once and retries; a slot frees up when a cancelled task has
    # been purged (MinJobAge=2), and the next retry gets in
    p = subprocess.Popen(["sbatch", "--parsable", "--wrap", "true"], cwd=c.workdir,
                         env=c.env, user=TEST_USER, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        first = p.stderr.readline()
        assert first == ("sbatch: error: Slurm temporarily unable to accept job, sleeping and "
                         "retrying\n")
        c.ok("scancel", f"{array}_0")
        out, err = p.communicate(timeout=40)
    finally:
        p.kill()
    assert p.returncode == 0 and err == "", (p.returncode, err)
    new = int(out.strip())
    assert wire.jobs(c)[new]["user"] == TEST_USER
    clear_queue(c)


def test_sbatch_gives_up_after_fifteen_retries_with_slurms_message():
    """sbatch.c's loop: retries 1..15 s apart, announced once, then the controller's error.
    (The real wait is two minutes; the loop itself is pure and takes its sleep as input.)"""
    from muster.cli.sbatch import MAX_RETRIES, submit_with_retries
    from muster.common.errors import RequestError
    calls, sleeps, lines = [], [], []

    def full(msg):
        calls.append(msg)
        raise RequestError(None, "eagain")
    with pytest.raises(RequestError) as exc:
        submit_with_retries(full, {"op": "submit"}, lines.append, sleeps.append)
    assert exc.value.message == "Resource temporarily unavailable"
    assert len(calls) == MAX_RETRIES + 1 == 16 and sleeps == list(range(1, 16))
    assert lines == ["sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying"]
    # any other refusal is final at once
    calls.clear()

    def denied(msg):
        calls.append(msg)
        raise RequestError(None, "access_denied")
    with pytest.raises(RequestError):
        submit_with_retries(denied, {}, lines.append, sleeps.append)
    assert len(calls) == 1


def test_an_array_larger_than_the_room_left_is_refused(c):
    clear_queue(c)
    refused(submit(c, TEST_USER, array=f"0-{MAX_JOBS}"), "eagain")  # MAX_JOBS + 1 tasks
    reply = submit(c, TEST_USER, array=f"0-{MAX_JOBS - 1}", hold=True)
    assert reply["ok"], reply
    refused(submit(c, TEST_USER, hold=True), "eagain")
    # a restarted controller counts the same (the array's tasks are found again)
    restart_controller(c, kill_signal=15)
    refused(submit(c, TEST_USER, hold=True), "eagain")
    c.ok("scancel", f"{reply['job_id']}_3")  # split off and cancelled: still counted...
    refused(submit(c, TEST_USER, hold=True), "eagain")
    wait_for(lambda: submit(c, TEST_USER, hold=True)["ok"], timeout=30,
             what="room after MinJobAge")  # ...until purged
    clear_queue(c)


# ---- association and QOS limits -------------------------------------------------------------

def test_max_submit_jobs_refuses_with_slurms_policy_message(c):
    clear_queue(c)
    c.ok("sacctmgr", "-i", "modify", "user", "where", f"name={TEST_USER}", "set",
         "MaxSubmitJobs=2")
    try:
        for _ in range(2):
            c.sbatch("-H", "--wrap", "true", user=TEST_USER, cwd=c.workdir)
        r = c.run(["sbatch", "-H", "--wrap", "true"], user=TEST_USER, cwd=c.workdir)
        assert (r.rc, r.out, r.err) == (1, "", POLICY), r
        refused(submit(c, TEST_USER), "accounting_policy")
        # an array counts each of its tasks
        c.run(["scancel", "-u", TEST_USER])
        wait_for(lambda: not wire.jobs(c), timeout=30, what="purge")
        r = c.run(["sbatch", "-H", "--array=0-2", "--wrap", "true"], user=TEST_USER,
                  cwd=c.workdir)
        assert (r.rc, r.err) == (1, POLICY), r
        # another user of the account is not limited
        c.sbatch("-H", "--wrap", "true", user=TEST_USER2, cwd=c.workdir)
    finally:
        c.ok("sacctmgr", "-i", "modify", "user", "where", f"name={TEST_USER}", "set",
             "MaxSubmitJobs=-1")
    clear_queue(c)


def reason(c, jid: int) -> str:
    return c.run(["squeue", "-h", "-j", str(jid), "-o", "%r"]).out.strip()


def test_max_jobs_keeps_jobs_pending_with_slurms_reasons(c):
    clear_queue(c)
    c.ok("sacctmgr", "-i", "modify", "user", "where", f"name={TEST_USER}", "set", "MaxJobs=1")
    try:
        a = c.sbatch("--wrap", "sleep 60", user=TEST_USER, cwd=c.workdir)
        b = c.sbatch("--wrap", "true", user=TEST_USER, cwd=c.workdir)
        c.wait_state(a, "RUNNING")
        wait_for(lambda: reason(c, b) == "AssocMaxJobsLimit", what="AssocMaxJobsLimit")
        assert c.state_of(b) == "PENDING"
        c.ok("sacctmgr", "-i", "modify", "user", "where", f"name={TEST_USER}", "set", "MaxJobs=-1")
        c.ok("sacctmgr", "-i", "add", "qos", "one", "MaxJobsPerUser=1")
        c.ok("sacctmgr", "-i", "modify", "user", "where", f"name={TEST_USER}", "set",
             "QOS=normal,one")
        d = c.sbatch("-q", "one", "--wrap", "sleep 60", user=TEST_USER, cwd=c.workdir)
        e = c.sbatch("-q", "one", "--wrap", "true", user=TEST_USER, cwd=c.workdir)
        c.wait_state(d, "RUNNING")
        wait_for(lambda: reason(c, e) == "QOSMaxJobsPerUserLimit", what="QOSMaxJobsPerUserLimit")
        assert c.state_of(e) == "PENDING"
        c.ok("scancel", str(d))
        assert c.wait_done(e) == "COMPLETED"  # the limit holds, it does not refuse
    finally:
        c.ok("sacctmgr", "-i", "modify", "user", "where", f"name={TEST_USER}", "set", "MaxJobs=-1")
    clear_queue(c)


# ---- nice, uid/gid, node counts, sizes --------------------------------------------------------

def test_negative_nice_is_for_operators(c):
    clear_queue(c)
    r = c.run(["sbatch", "-H", "--nice=-5", "--wrap", "true"], user=TEST_USER, cwd=c.workdir)
    assert (r.rc, r.out, r.err) == (
        1, "", "sbatch: error: Batch job submission failed: Invalid --nice value\n"), r
    refused(submit(c, TEST_USER, nice=-1), "invalid_nice", "Invalid --nice value")
    r = c.run(["sbatch", "-H", "--nice=-2147483646", "--wrap", "true"], user=TEST_USER,
              cwd=c.workdir)
    assert (r.rc, r.err) == (
        255, "sbatch: error: Invalid --nice value, out of range (+/- 2147483645)\n"), r
    refused(submit(c, None, nice=-2147483646), "invalid_nice")  # not even root
    assert not wire.jobs(c)
    # root and operators may; a plain user may be nicer
    mine = c.sbatch("-H", "--nice=10", "--wrap", "true", user=TEST_USER, cwd=c.workdir)
    boosted = c.sbatch("-H", "--nice=-5", "--wrap", "true", cwd=c.workdir)
    op_job = c.sbatch("-H", "--nice=-7", "--wrap", "true", user=TEST_USER2, cwd=c.workdir)
    nice = {j: c.run(["squeue", "-h", "-j", str(j), "-o", "%y"]).out.strip()
            for j in (mine, boosted, op_job)}
    assert nice == {mine: "10", boosted: "-5", op_job: "-7"}
    # scontrol update: the same rule, and nothing changes when refused
    r = c.run(["scontrol", "update", f"JobId={mine}", "Nice=-3"], user=TEST_USER)
    assert (r.rc, r.err) == (1, "slurm_update error: Access/permission denied\n"), r
    r = c.run(["scontrol", "update", f"JobId={mine}", "Nice=-2147483646"], user=TEST_USER)
    assert (r.rc, r.err) == (
        1, "scontrol: error: Nice value out of range (+/- 2147483645). Value ignored\n"), r
    refused(wire.call(c, {"op": "update_job", "jobs": [{"job_id": mine}],
                          "changes": {"Nice": "-2147483646"}}), "invalid_nice")
    # a refused change among good ones changes nothing at all
    refused(wire.call(c, {"op": "update_job", "jobs": [{"job_id": mine}],
                          "changes": {"Comment": "x", "Nice": "-3"}}, user=TEST_USER),
            "access_denied")
    assert wire.jobs(c)[mine]["nice"] == 10 and not wire.jobs(c)[mine].get("comment")
    c.ok("scontrol", "update", f"JobId={mine}", "Nice=-3")
    assert c.run(["squeue", "-h", "-j", str(mine), "-o", "%y"]).out.strip() == "-3"
    c.ok("scontrol", "update", f"JobId={mine}", "Nice=20", user=TEST_USER)
    clear_queue(c)


def test_uid_and_gid_are_for_root(c):
    clear_queue(c)
    for opt in ("uid", "gid"):
        r = c.run(["sbatch", f"--{opt}=0", "--wrap", "true"], user=TEST_USER, cwd=c.workdir)
        assert (r.rc, r.out, r.err) == (
            255, "", f"sbatch: error: --{opt} only permitted by root user\n"), r
    # the controller refuses them too (a client need not be our sbatch)
    refused(submit(c, TEST_USER, uid=0), "invalid_user", "Invalid user id")
    refused(submit(c, TEST_USER, uid="root"), "invalid_user")
    refused(submit(c, TEST_USER, gid=0), "invalid_group", "Invalid group id")
    refused(submit(c, TEST_USER, uid=pwd.getpwnam(TEST_USER2).pw_uid), "invalid_user")
    refused(submit(c, TEST_USER, uid=[0]), "invalid_request")
    refused(submit(c, None, uid="no-such-user-xyz"), "invalid_user")
    assert not wire.jobs(c)
    # naming oneself is no escalation
    me = pwd.getpwnam(TEST_USER)
    assert submit(c, TEST_USER, uid=me.pw_uid, gid=me.pw_gid, hold=True)["ok"]
    # root submits as the user: the job is the user's and runs as the user
    out = os.path.join(c.workdir, "as-user.out")
    jid = c.sbatch(f"--uid={TEST_USER}", "-o", out, "--wrap", "id -u; id -g", cwd=c.workdir)
    rec = wire.jobs(c)[jid]
    assert (rec["user"], rec["uid"], rec["gid"]) == (TEST_USER, me.pw_uid, me.pw_gid)
    assert c.wait_done(jid) == "COMPLETED"
    with open(out) as fh:
        assert fh.read().split() == [str(me.pw_uid), str(me.pw_gid)]
    assert os.stat(out).st_uid == me.pw_uid
    clear_queue(c)


@pytest.mark.parametrize("args,rc,err", [
    # -N0 passes sbatch and the controller refuses it, as in Slurm 22.05
    (["-N", "0"], 1, "sbatch: error: Batch job submission failed: Node count specification "
                     "invalid\n"),
    (["-N", "3-1"], 255,
     "sbatch: error: Maximum node count 1 is less than minimum node count 3\n"),
])
def test_bad_node_counts_refused_by_sbatch(c, args, rc, err):
    r = c.run(["sbatch", *args, "--wrap", "true"], user=TEST_USER, cwd=c.workdir)
    assert (r.rc, r.out, r.err) == (rc, "", err), r


@pytest.mark.parametrize("job", [{"nodes_min": 0}, {"nodes_min": 3, "nodes_max": 1},
                                 {"nodes_max": 0}, {"nodes_min": -1}])
def test_bad_node_counts_refused_by_the_controller(c, job):
    before = wire.jobs(c).keys()
    refused(submit(c, TEST_USER, **job), "invalid_node_count", "Node count specification invalid")
    assert wire.jobs(c).keys() == before


def test_bad_node_count_update_refused(c):
    jid = c.sbatch("-H", "-N", "1", "--wrap", "true", user=TEST_USER, cwd=c.workdir)
    for value in ("0", "3-1"):
        r = c.run(["scontrol", "update", f"JobId={jid}", f"NumNodes={value}"], user=TEST_USER)
        assert (r.rc, r.err) == (1, "slurm_update error: Node count specification invalid\n"), r
    assert wire.jobs(c)[jid]["nodes_min"] == 1
    c.ok("scancel", str(jid))


def test_oversize_script_and_environment_refused(c):
    big = os.path.join(c.workdir, "big.sh")
    with open(big, "w") as fh:
        fh.write("#!/bin/sh\n" + "# padding line\n" * (SCRIPT_LIMIT // 15 + 10))
    os.chmod(big, 0o644)
    before = wire.jobs(c).keys()
    r = c.run(["sbatch", big], user=TEST_USER, cwd=c.workdir)
    size = os.path.getsize(big)
    assert (r.rc, r.out) == (1, ""), r
    assert r.err == ("sbatch: error: Batch job submission failed: Pathname of a file, directory "
                     "or other parameter too long: the batch script is too large "
                     f"({size} bytes; the limit is SchedulerParameters=max_script_size="
                     f"{SCRIPT_LIMIT})\n"), r
    reply = wire.call(c, {"op": "submit", "job": {"work_dir": c.workdir},
                          "script": SCRIPT + "#" * 200_000, "env": {}}, user=TEST_USER)
    refused(reply, "too_large")
    # multi-byte characters count as bytes, as Slurm's strlen does
    reply = wire.call(c, {"op": "submit", "job": {"work_dir": c.workdir},
                          "script": SCRIPT + "\u00e9" * (SCRIPT_LIMIT // 2), "env": {}},
                      user=TEST_USER)
    refused(reply, "too_large")
    for env, what in (({"BIG": "x" * 200_000}, "environment variable BIG is too long"),
                      ({f"V{i}": "y" * 60_000 for i in range(20)}, "environment too large")):
        reply = wire.call(c, {"op": "submit", "job": {"work_dir": c.workdir}, "script": SCRIPT,
                              "env": env}, user=TEST_USER)
        refused(reply, "too_large")
        assert reply["error"].startswith(what), reply
    # (one variable over 128 KiB could not even be passed to sbatch: execve refuses it)
    r = c.run(["sbatch", "--wrap", "true"], user=TEST_USER, cwd=c.workdir,
              env={f"HUGE{i}": "z" * 110_000 for i in range(10)})
    assert r.rc == 1 and r.err.startswith(
        "sbatch: error: Batch job submission failed: environment too large ("), r
    assert wire.jobs(c).keys() == before


# ---- least exposure: metrics and events ----------------------------------------------------------

def test_events_show_other_users_jobs_to_operators_only(c):
    clear_queue(c)
    theirs = c.sbatch("-H", "-J", "root-secret", "--wrap", "true", cwd=c.workdir)
    mine = c.sbatch("-H", "-J", "mine", "--wrap", "true", user=TEST_USER, cwd=c.workdir)
    c.run(["scontrol", "token", f"username={TEST_USER2}"])  # a token_issued event
    plain = wire.call(c, {"op": "events", "limit": 5000}, user=TEST_USER)
    assert plain["ok"], plain
    seen = {e["job_id"] for e in plain["events"]} - {None}
    assert mine in seen and theirs not in seen
    owners = wire.call(c, {"op": "acct", "job_ids": sorted(seen), "all_users": True})["jobs"]
    assert {j["user"] for j in owners} == {TEST_USER}  # only their own jobs...
    assert all(e["node"] for e in plain["events"] if e["job_id"] is None)  # ...and nodes
    assert not any(e["event"] == "token_issued" for e in plain["events"])
    refused(wire.call(c, {"op": "events", "job_id": theirs}, user=TEST_USER), "access_denied")
    own = wire.call(c, {"op": "events", "job_id": mine}, user=TEST_USER)
    assert [e["event"] for e in own["events"]] == ["submitted"]
    # a job's record with its events (scontrol show job, GET /job/{id}): the trail is the
    # owner's and the operators'
    for jid, trail in ((theirs, False), (mine, True)):
        rec = wire.call(c, {"op": "jobs", "job_ids": [jid], "events": True}, user=TEST_USER)
        assert ("events" in rec["jobs"][0]) is trail, rec
    rec = wire.call(c, {"op": "jobs", "job_ids": [mine], "events": True}, user=TEST_USER2)
    assert [e["event"] for e in rec["jobs"][0]["events"]] == ["submitted"]
    for who in (TEST_USER2, None):  # an operator, root
        full = wire.call(c, {"op": "events", "limit": 5000}, user=who)
        ids = {e["job_id"] for e in full["events"]}
        assert {mine, theirs} <= ids
        assert any(e["event"] == "token_issued" for e in full["events"])
    clear_queue(c)


def test_metrics_show_per_user_detail_to_operators_only(c):
    clear_queue(c)
    c.sbatch("-H", "--wrap", "true", user=TEST_USER, cwd=c.workdir)
    plain = wire.call(c, {"op": "metrics"}, user=TEST_USER)
    assert plain["jobs"] == [["PENDING", "debug", 1]] and plain["jobs_by_user"] is None
    op = wire.call(c, {"op": "metrics"}, user=TEST_USER2)
    assert op["jobs_by_user"] == [["PENDING", "debug", TEST_USER, 1]]
    assert wire.call(c, {"op": "metrics", "detail": False})["jobs_by_user"] is None
    # REST: anonymous scrapes and plain users' tokens get aggregates only
    pytest.importorskip("jwt")
    from api_helpers import call, token
    s, anon = call(c, "GET", "/metrics", raw=True)
    assert s == 200 and 'muster_jobs{partition="debug",state="PENDING"} 1.0' in anon
    assert "muster_jobs_by_user" not in anon and TEST_USER not in anon
    s, text = call(c, "GET", "/metrics", token(c, TEST_USER), raw=True)
    assert s == 200 and "muster_jobs_by_user" not in text and TEST_USER not in text
    s, text = call(c, "GET", "/metrics", token(c, TEST_USER2), raw=True)
    assert s == 200
    assert (f'muster_jobs_by_user{{partition="debug",state="PENDING",user="{TEST_USER}"}} 1.0'
            in text)
    s, text = call(c, "GET", "/metrics", "not-a-token", raw=True)
    assert s == 401
    s, body = call(c, "GET", "/muster/v0.0.40/events?limit=5000", token(c, TEST_USER))
    assert s == 200 and not any(e["event"] == "token_issued" for e in body["events"])
    clear_queue(c)
