"""Restarts and upgrades never kill work; clients ride through a restart (issue 16). Real
daemons, real processes: `muster restart`, `muster down --keep-jobs`, a controller SIGKILLed
during a burst of submissions, an agent one protocol version older, daemons restarted by hand
and found through their pid files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import pytest

from cluster import BIN, _alive, private_cluster, read, restart_controller, start_agent, wait_for
from muster.common import pidfile
from muster.protocol.agentmsg import PROTOCOL_VERSION


@pytest.fixture
def own_cluster():
    with private_cluster("muster-restart-", nodes=2, cpus=8) as c:
        yield c


def status(c) -> dict:
    r = c.run(["muster", "status", "--json", "--state-dir", c.state_dir])
    return json.loads(r.out)


def running_pids(c) -> dict[str, int]:
    return {d["name"]: d["pid"] for d in status(c)["daemons"] if d["running"]}


def test_rolling_restart_while_a_step_streams_output(own_cluster):
    """Every agent, then the controller, restarted one by one while a batch job's srun step
    prints a line every 0.2 s: the job ends COMPLETED with every line, in order."""
    c = own_cluster
    out = os.path.join(c.workdir, "roll.out")
    script = ("#!/bin/bash\n"
              "srun -N2 -n2 -l bash -c 'for i in $(seq 1 100); do echo tick $i; sleep 0.2; done'\n"
              "echo batch done\n")
    jid = c.sbatch("-N2", "-n2", "-o", out, cwd=c.workdir, input=script)
    wait_for(lambda: "tick 3" in read(out), timeout=30, what="step streaming")
    before = running_pids(c)
    api = status(c)["api"]  # musterrestd, when the api extra is installed, goes last
    r = c.run(["muster", "restart", "--state-dir", c.state_dir], timeout=120)
    assert r.rc == 0, r
    assert [line.split()[0] for line in r.out.splitlines()] == \
        ["musterd", "musterd", "musterctld"] + (["musterrestd"] if api else [])
    after = running_pids(c)
    assert set(after) == set(before) == {"musterctld", "musterd node1", "musterd node2"}
    assert all(after[n] != before[n] for n in before), (before, after)
    assert "tick 100" not in read(out), "the restart finished after the step: it proves nothing"
    assert c.wait_done(jid, timeout=60) == "COMPLETED"
    lines = read(out).splitlines()
    for task in (0, 1):
        mine = [ln.split(": ", 1)[1] for ln in lines if ln.startswith(f"{task}: ")]
        assert mine == [f"tick {i}" for i in range(1, 101)], mine
    assert lines[-1] == "batch done"
    steps = c.run(["sacct", "-j", str(jid), "-n", "-P", "-o", "JobID,State"]).out.split()
    assert f"{jid}.0|COMPLETED" in steps and f"{jid}.batch|COMPLETED" in steps


def test_submission_burst_across_a_controller_sigkill(own_cluster):
    """6 parallel submitters; the controller is SIGKILLed and restarted 1.5 s later in the
    middle: every sbatch succeeds, and the jobs are exactly the acknowledged ones, once each."""
    c = own_cluster
    per_thread = 30
    acked: list[int] = []
    failures: list[object] = []
    lock = threading.Lock()

    def submitter(k: int) -> None:
        for i in range(per_thread):
            r = c.run(["sbatch", "--parsable", "-J", f"burst{k}-{i}", "-o", "/dev/null",
                       "--wrap", "true"], cwd=c.workdir, timeout=120)
            with lock:
                if r.rc == 0:
                    acked.append(int(r.out.strip()))
                else:
                    failures.append(r)

    threads = [threading.Thread(target=submitter, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    wait_for(lambda: len(acked) >= 40, timeout=120, what="40 submissions before the crash")
    at_kill = len(acked)
    restart_controller(c, down_s=1.5, wait=False)
    for t in threads:
        t.join()
    assert not failures, failures[:3]
    assert len(acked) == 6 * per_thread and at_kill < len(acked)
    assert len(set(acked)) == len(acked), "one job id acknowledged twice"
    r = c.run(["sacct", "-X", "-n", "-P", "-o", "JobIDRaw,JobName", "-S", "now-1hour"])
    assert r.rc == 0, r
    rows = [line.split("|") for line in r.out.splitlines() if line]
    names = [name for _jid, name in rows if name.startswith("burst")]
    assert sorted(int(j) for j, name in rows if name.startswith("burst")) == sorted(acked)
    assert len(names) == len(set(names)) == 6 * per_thread, "a submission was run twice"


def test_down_keep_jobs_then_up_adopts_the_job(own_cluster):
    c = own_cluster
    out = os.path.join(c.workdir, "kept.out")
    flag = os.path.join(c.workdir, "go")
    jid = c.sbatch("-o", out, "--wrap",
                   f"echo start; while [ ! -e {flag} ]; do sleep 0.1; done; echo end",
                   cwd=c.workdir)
    wait_for(lambda: "start" in read(out), what="job started")
    daemons = running_pids(c)
    r = c.run(["muster", "down", "--keep-jobs", "--state-dir", c.state_dir])
    assert r.rc == 0, r
    assert not any(_alive(p) for p in daemons.values()), "a daemon survived down --keep-jobs"
    job_pid = _job_pid(os.path.join(c.state_dir, "spool"), jid)
    assert job_pid and _alive(job_pid), "down --keep-jobs killed the job"
    r = c.run(["muster", "status", "--state-dir", c.state_dir])
    assert r.rc == 1, r
    r = c.run(["muster", "up", "--no-link", "--state-dir", c.state_dir])
    assert r.rc == 0, r
    assert "adopted" in r.err
    assert c.state_of(jid) == "RUNNING"
    open(flag, "w").close()
    assert c.wait_done(jid) == "COMPLETED"
    assert read(out) == "start\nend\n"


def _job_pid(spool: str, jid: int) -> int | None:
    for root, _dirs, files in os.walk(spool):
        if os.path.basename(root).startswith(f"job{jid}.") and "job.pid" in files:
            return int(read(os.path.join(root, "job.pid")).split()[0])
    return None


def test_agent_one_protocol_version_older_still_serves(own_cluster):
    c = own_cluster
    old = c.pids()["agents"]["node1"]
    os.kill(old, signal.SIGTERM)
    wait_for(lambda: not _alive(old), what="agent stopped")
    since = int(time.time())
    start_agent(c, "node1", env={"MUSTER_AGENT_PROTO": str(PROTOCOL_VERSION - 1)})
    wait_for(lambda: (n := _node(c, "node1"))["slurmd_start_time"] >= since
             and "NOT_RESPONDING" not in n["flags"], what="older agent registered")
    out = os.path.join(c.workdir, "older.out")
    jid = c.sbatch("-w", "node1", "-o", out, "--wrap", "echo served by $SLURMD_NODENAME",
                   cwd=c.workdir)
    assert c.wait_done(jid) == "COMPLETED"
    assert read(out) == "served by node1\n"
    # two versions apart is refused, with a clear line in the controller's log
    old = c.pids()["agents"]["node2"]
    os.kill(old, signal.SIGTERM)
    wait_for(lambda: not _alive(old), what="agent stopped")
    start_agent(c, "node2", env={"MUSTER_AGENT_PROTO": str(PROTOCOL_VERSION - 2)})
    log = os.path.join(c.state_dir, "log", "musterctld.log")
    wait_for(lambda: f"refused agent node2: protocol version {PROTOCOL_VERSION - 2} is "
             "incompatible" in read(log), what="refusal logged")
    assert "NOT_RESPONDING" in _node(c, "node2")["flags"]


def _node(c, name: str) -> dict:
    """The controller's record of node ``name`` (the ``nodes`` request, as sinfo makes it)."""
    code = ("import json; from muster.cli import client; "
            "print(json.dumps(client.call({'op': 'nodes'})['nodes']))")
    r = c.run([os.path.join(BIN, "python"), "-c", code])
    assert r.rc == 0, r
    return next(n for n in json.loads(r.out) if n["name"] == name)


def test_status_and_down_find_daemons_restarted_by_hand(own_cluster):
    """Daemons restarted by hand (muster.pids not updated) are found by their pid files;
    a pid file naming a process that is not the daemon is ignored, and that process lives."""
    c = own_cluster
    rec = c.pids()
    os.kill(rec["agents"]["node2"], signal.SIGTERM)
    wait_for(lambda: not _alive(rec["agents"]["node2"]), what="agent stopped")
    log = os.path.join(c.state_dir, "log", "musterd-node2.log")
    by_hand = subprocess.Popen([os.path.join(BIN, "musterd"), "-f", c.conf, "-N", "node2",
                                "-L", log], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    wait_for(lambda: running_pids(c).get("musterd node2") == by_hand.pid,
             what="status to show the agent started by hand")
    assert c.pids()["agents"]["node2"] == rec["agents"]["node2"]  # the record is stale
    # the controller's pid file names an unrelated process (its real start time, too): it
    # is neither trusted nor signalled; the controller is still found (muster.pids, verified)
    bystander = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        ctld_pid = running_pids(c)["musterctld"]
        with open(os.path.join(c.state_dir, "musterctld.pid"), "w") as fh:
            fh.write(f"{bystander.pid} {pidfile.start_time(bystander.pid)}\n")
        assert status(c)["daemons"][0] == {"name": "musterctld", "pid": ctld_pid,
                                           "running": True}
        r = c.run(["muster", "down", "--state-dir", c.state_dir])
        assert r.rc == 0, r
        assert by_hand.wait(timeout=15) is not None
        assert not _alive(ctld_pid)
        assert bystander.poll() is None, "muster down signalled a process that is not ours"
    finally:
        bystander.kill()
        bystander.wait()
