"""A node that dies mid-run: DOWN "Not responding", its batch job is requeued under the same id
and runs again elsewhere (SLURM_RESTART_COUNT=1); srun steps report the failure; when the node
comes back its agent kills what the controller no longer runs there."""

import os
import signal
import subprocess
import time

import pytest

from cluster import _alive, private_cluster, start_agent, wait_for


@pytest.fixture
def c():
    conf = "SlurmdTimeout=3\nSchedulerParameters=requeue_delay=1"
    with private_cluster("muster-nf-", nodes=3, cpus=4, extra_conf=conf) as cl:
        yield cl


def kill_node(c, node: str) -> None:
    """Simulate the death of a host: its agent and every process it supervised die at once."""
    pid = c.pids()["agents"][node]
    os.kill(pid, signal.SIGKILL)
    spool = os.path.join(c.state_dir, "spool", node)
    for root, dirs, files in os.walk(spool):
        dirs[:] = [d for d in dirs if d != ".trash"]
        # supervisors first: one that outlived its tasks even briefly would report their
        # deaths (srun: "task 0: Killed"), which a host that died at once never does
        for name in ("super.pid", "job.pid"):
            if name in files:
                for p in open(os.path.join(root, name)).read().split():
                    for fn in (os.killpg, os.kill):
                        try:
                            fn(int(p), signal.SIGKILL)
                        except (ProcessLookupError, PermissionError):
                            pass
    wait_for(lambda: not _alive(pid), what="agent dead")


def restart_agent(c, node: str) -> int:
    return start_agent(c, node)


def node_state(c, node):
    return c.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"]).out.split()[0]


def test_batch_job_requeued_after_node_death(c):
    out = os.path.join(c.workdir, "nf.out")
    jid = c.sbatch("-w", "node2", "-o", out, "--open-mode=append", "--wrap",
                   "echo start restart=${SLURM_RESTART_COUNT:-0} on $SLURMD_NODENAME; sleep 600",
                   cwd=c.workdir)
    wait_for(lambda: os.path.exists(out) and "restart=0" in open(out).read(), what="first run")
    t0 = time.time()
    kill_node(c, "node2")
    wait_for(lambda: node_state(c, "node2").startswith("down"), timeout=30, what="node2 down")
    detect = time.time() - t0
    assert detect < 15, detect
    r = c.run(["sinfo", "-R", "-h", "-o", "%E|%N"])
    assert "Not responding|node2" in r.out
    # requeued under the same id; -w node2 cannot run until node2 is back
    r = c.run(["scontrol", "show", "job", str(jid)])
    assert "JobState=PENDING" in r.out and "Restarts=1" in r.out
    r = c.run(["sacct", "--duplicates", "-j", str(jid), "-X", "-P", "-n", "-o", "JobID,State"])
    assert r.out.splitlines()[0] == f"{jid}|NODE_FAIL"
    # the node comes back (ReturnToService=2): the job runs again, as restart 1
    restart_agent(c, "node2")
    wait_for(lambda: "restart=1" in open(out).read(), timeout=30, what="second run")
    text = open(out).read()
    assert text.count("start restart=0") == 1 and text.count("start restart=1") == 1
    c.run(["scancel", str(jid)])
    assert c.wait_done(jid) == "CANCELLED"


def test_no_requeue_job_ends_node_fail_and_srun_reports(c):
    jid = c.sbatch("--no-requeue", "-w", "node3", "--wrap", "sleep 600", cwd=c.workdir)
    c.wait_state(jid, "RUNNING")
    srun = subprocess.Popen(["srun", "-w", "node1", "sleep", "600"], env=c.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: c.run(["squeue", "-h", "-w", "node1", "-o", "%i"]).out.strip(),
             what="srun job running")
    kill_node(c, "node3")
    kill_node(c, "node1")
    assert c.wait_done(jid, timeout=30) == "NODE_FAIL"
    out, err = srun.communicate(timeout=60)
    assert srun.returncode != 0
    assert "Node failure on node1" in err
    restart_agent(c, "node1")
    restart_agent(c, "node3")
    wait_for(lambda: node_state(c, "node1") == "idle" and node_state(c, "node3") == "idle",
             timeout=30, what="nodes back")


def test_srun_learns_of_a_node_that_died_before_its_step_connected(c):
    """The node's agent stops before it launches the step (SIGSTOP), then the host dies: no
    step daemon ever connects to srun. srun asks the controller about a node that stays quiet,
    so it reports the failure once the node is declared DOWN, not at its 60 s connect limit."""
    agent = c.pids()["agents"]["node2"]
    os.kill(agent, signal.SIGSTOP)
    try:
        srun = subprocess.Popen(["srun", "-w", "node2", "sleep", "600"], env=c.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: c.run(["squeue", "-h", "-w", "node2", "-o", "%i"]).out.strip(),
                 what="srun job allocated")
        t0 = time.time()
        kill_node(c, "node2")
    finally:
        try:
            os.kill(agent, signal.SIGKILL)
        except ProcessLookupError:
            pass
    out, err = srun.communicate(timeout=40)
    took = time.time() - t0
    assert srun.returncode != 0
    assert "Node failure on node2" in err, err
    assert took < 20, took
    restart_agent(c, "node2")
    wait_for(lambda: node_state(c, "node2") == "idle", timeout=30, what="node2 back")


def test_returning_node_kills_leftovers_of_requeued_job(c):
    """A node that was only cut off (agent dead, job processes still alive) is declared DOWN,
    its job requeued elsewhere; when the agent returns it learns the job is gone and kills the
    leftover processes, so the job never runs twice at once."""
    out = os.path.join(c.workdir, "left.out")
    jid = c.sbatch("-x", "node1", "-o", out, "--open-mode=append", "--wrap",
                   "echo start $SLURMD_NODENAME restart=${SLURM_RESTART_COUNT:-0}; sleep 600",
                   cwd=c.workdir)
    wait_for(lambda: os.path.exists(out) and "restart=0" in open(out).read(), what="first run")
    first_node = open(out).read().split()[1]
    pid = c.pids()["agents"][first_node]
    spool = os.path.join(c.state_dir, "spool", first_node)
    job_pids = []
    for root, dirs, files in os.walk(spool):
        dirs[:] = [d for d in dirs if d != ".trash"]
        if "job.pid" in files:
            job_pids += [int(p) for p in open(os.path.join(root, "job.pid")).read().split()]
    assert job_pids
    os.kill(pid, signal.SIGKILL)  # only the agent dies: the job's processes live on
    wait_for(lambda: node_state(c, first_node).startswith("down"), timeout=30, what="node down")
    assert all(_alive(p) for p in job_pids)  # still running, cut off from the controller
    restart_agent(c, first_node)
    wait_for(lambda: not any(_alive(p) for p in job_pids), timeout=30,
             what="leftover processes killed by the returning agent")
    wait_for(lambda: "restart=1" in open(out).read(), timeout=30, what="job ran again")
    c.run(["scancel", str(jid)])
    assert c.wait_done(jid) == "CANCELLED"
