"""Resilience with real daemons: signals before the time limit and self-requeue, agent crashes,
drain/resume, health checks, RequeueExit/RequeueExitHold, requeuehold."""

import os
import signal
import subprocess
import tempfile
import time

import pytest

from cluster import BIN, Cluster, _alive, cleanup, shared_tmp, wait_for


@pytest.fixture(scope="module")
def c():
    base = tempfile.mkdtemp(prefix="muster-res-", dir="/tmp")
    os.chmod(base, 0o755)
    hc = os.path.join(base, "healthcheck.sh")
    with open(hc, "w") as fh:
        fh.write(f"#!/bin/sh\n[ -e {base}/sick-$SLURMD_NODENAME ] && "
                 "{ echo 'GPU 3 lost (test)'; exit 1; }\nexit 0\n")
    os.chmod(hc, 0o755)
    cl = Cluster(os.path.join(base, "state"), nodes=3, cpus=4, extra_conf=(
        "RequeueExit=42\nRequeueExitHold=43\nSchedulerParameters=requeue_delay=1\n"
        f"HealthCheckProgram={hc}\nHealthCheckInterval=1")).up()
    cl.workdir = shared_tmp(os.path.join(base, "work"))
    cl.base = base
    yield cl
    cl.down()
    cleanup(base)


def read(p):
    return open(p).read() if os.path.exists(p) else ""


def test_signal_before_time_limit_then_self_requeue_completes(c):
    """submitit's pattern: checkpoint on the warning signal, requeue yourself, finish next run."""
    out = os.path.join(c.workdir, "sig.out")
    script = ("if [ \"${SLURM_RESTART_COUNT:-0}\" = 0 ]; then\n"
              "  trap 'echo got USR1 at $(date +%s); scontrol requeue $SLURM_JOB_ID; exit 0' USR1\n"
              "  echo started at $(date +%s); while true; do sleep 0.2; done\n"
              "else echo resumed run $SLURM_RESTART_COUNT; fi\n")
    t0 = time.time()
    jid = c.sbatch("-t", "1", "--signal=B:USR1@55", "--open-mode=append", "-o", out,
                   "--wrap", script, cwd=c.workdir)
    wait_for(lambda: "resumed run 1" in read(out), timeout=40, what="second run")
    text = read(out)
    started = int(text.split("started at ")[1].split()[0])
    got = int(text.split("got USR1 at ")[1].split()[0])
    assert 3 <= got - started <= 8, text  # limit 60 s - warning 55 s = 5 s after start
    assert c.wait_done(jid) == "COMPLETED"
    assert time.time() - t0 < 40
    r = c.run(["sacct", "--duplicates", "-j", str(jid), "-X", "-P", "-n", "-o", "JobID,State"])
    assert r.out.splitlines() == [f"{jid}|REQUEUED", f"{jid}|COMPLETED"]


def test_agent_crash_job_keeps_running_and_is_reported(c):
    out = os.path.join(c.workdir, "ac.out")
    jid = c.sbatch("-w", "node2", "-o", out, "--wrap",
                   f"echo up; while [ ! -e {c.workdir}/go ]; do sleep 0.1; done; echo finishing; exit 4",
                   cwd=c.workdir)
    wait_for(lambda: "up" in read(out), what="job started")
    agent = c.pids()["agents"]["node2"]
    os.kill(agent, signal.SIGKILL)
    wait_for(lambda: not _alive(agent), what="agent gone")
    open(os.path.join(c.workdir, "go"), "w").close()  # the job ends while its agent is dead
    wait_for(lambda: "finishing" in read(out), what="job finished without its agent")
    assert c.state_of(jid) == "RUNNING"
    log = os.path.join(c.state_dir, "log", "musterd-node2.log")
    p = subprocess.Popen([os.path.join(BIN, "musterd"), "-f", c.conf, "-N", "node2", "-L", log],
                         start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rec = c.pids()
    rec["agents"]["node2"] = p.pid
    import json
    with open(os.path.join(c.state_dir, "muster.pids"), "w") as fh:
        json.dump(rec, fh)
    assert c.wait_done(jid) == "FAILED"
    assert c.job(jid)["exit"] == "4:0"
    assert read(out).count("up") == 1  # never ran twice


def test_agent_crash_and_restart_while_job_runs(c):
    out = os.path.join(c.workdir, "ac2.out")
    jid = c.sbatch("-w", "node3", "-o", out, "--wrap", "echo up; sleep 3; echo done", cwd=c.workdir)
    wait_for(lambda: "up" in read(out), what="job started")
    agent = c.pids()["agents"]["node3"]
    os.kill(agent, signal.SIGKILL)
    wait_for(lambda: not _alive(agent), what="agent gone")
    log = os.path.join(c.state_dir, "log", "musterd-node3.log")
    p = subprocess.Popen([os.path.join(BIN, "musterd"), "-f", c.conf, "-N", "node3", "-L", log],
                         start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rec = c.pids()
    rec["agents"]["node3"] = p.pid
    import json
    with open(os.path.join(c.state_dir, "muster.pids"), "w") as fh:
        json.dump(rec, fh)
    assert c.wait_done(jid) == "COMPLETED"  # found again by the restarted agent, supervised to the end
    assert read(out) == "up\ndone\n"


def node_state(c, node):
    return c.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"]).out.split()[0]


def test_drain_then_resume(c):
    jid = c.sbatch("-w", "node1", "--wrap", f"while [ ! -e {c.workdir}/drained-go ]; do sleep 0.1; done",
                   cwd=c.workdir)
    c.wait_state(jid, "RUNNING")
    r = c.run(["scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=disk swap"])
    assert r.rc == 0, r
    assert node_state(c, "node1") == "draining"
    other = c.sbatch("-w", "node1", "--wrap", "true", cwd=c.workdir)
    r = c.run(["squeue", "-h", "-j", str(other), "-o", "%t"])
    assert r.out.strip() == "PD"
    open(os.path.join(c.workdir, "drained-go"), "w").close()
    assert c.wait_done(jid) == "COMPLETED"
    wait_for(lambda: node_state(c, "node1") == "drained", what="drained")
    r = c.run(["sinfo", "-R", "-h", "-o", "%E|%N"])
    assert "disk swap|node1" in r.out
    assert c.state_of(other) == "PENDING"
    assert c.run(["scontrol", "update", "NodeName=node1", "State=RESUME"]).rc == 0
    assert c.wait_done(other) == "COMPLETED"
    assert node_state(c, "node1") == "idle"


def test_failing_health_check_drains_node(c):
    sick = os.path.join(c.base, "sick-node3")
    open(sick, "w").close()
    try:
        wait_for(lambda: node_state(c, "node3") in ("drained", "draining"), timeout=20,
                 what="node3 drained by health check")
        r = c.run(["sinfo", "-R", "-h", "-o", "%E|%N"])
        assert "GPU 3 lost (test)|node3" in r.out
    finally:
        os.unlink(sick)
    wait_for(lambda: node_state(c, "node3") == "idle", timeout=20, what="node3 back")


def test_requeue_exit_codes(c):
    out = os.path.join(c.workdir, "rqx.out")
    jid = c.sbatch("-o", out, "--open-mode=append", "--wrap",
                   "echo run ${SLURM_RESTART_COUNT:-0}; [ ${SLURM_RESTART_COUNT:-0} = 0 ] && exit 42; exit 0",
                   cwd=c.workdir)
    wait_for(lambda: "run 1" in read(out), timeout=30, what="requeued by RequeueExit")
    assert c.wait_done(jid) == "COMPLETED"
    held = c.sbatch("--wrap", "exit 43", cwd=c.workdir)
    wait_for(lambda: c.run(["squeue", "-h", "-j", str(held), "-o", "%t %r"]).out.strip() == "PD JobHeldUser",
             timeout=30, what="held by RequeueExitHold")
    assert "Restarts=1" in c.run(["scontrol", "show", "job", str(held)]).out
    c.run(["scancel", str(held)])


def test_requeuehold_and_release(c):
    jid = c.sbatch("--wrap", "sleep 300", cwd=c.workdir)
    c.wait_state(jid, "RUNNING")
    assert c.run(["scontrol", "requeuehold", str(jid)]).rc == 0
    wait_for(lambda: c.run(["squeue", "-h", "-j", str(jid), "-o", "%t %R"]).out.strip()
             == "PD (job requeued in held state)", what="requeued held")
    assert c.run(["scontrol", "release", str(jid)]).rc == 0
    c.wait_state(jid, "RUNNING")
    c.run(["scancel", str(jid)])
    assert c.wait_done(jid) == "CANCELLED"


def test_no_requeue_refused(c):
    jid = c.sbatch("--no-requeue", "--wrap", "sleep 300", cwd=c.workdir)
    c.wait_state(jid, "RUNNING")
    r = c.run(["scontrol", "requeue", str(jid)])
    assert r.rc == 1 and "Requested operation is presently disabled" in r.err
    c.run(["scancel", str(jid)])
