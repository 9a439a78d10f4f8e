"""QOS limits give Slurm's pending reasons; preemption (preempt/qos, REQUEUE): a
high-priority QOS job requeues a running low-priority job, which keeps its id and runs
again later."""

import os

import pytest

from cluster import TEST_USER, private_cluster, user_exists, wait_for

CONF = ("AccountingStorageEnforce=limits\nPreemptType=preempt/qos\nPreemptMode=REQUEUE\n")


@pytest.fixture(scope="module")
def c():
    if os.getuid() != 0 or not user_exists(TEST_USER):
        pytest.skip("needs root and the test user")
    with private_cluster("muster-limits-", nodes=1, gpus=4, cpus=8, partitions="gpu", extra_conf=CONF) as cl:
        yield cl



def sq(c, jid, fmt):
    return c.run(["squeue", "-h", "-j", str(jid), "-o", fmt]).out.strip()


def test_qos_limit_gives_pending_reason(c):
    w = c.workdir
    c.ok("sacctmgr", "-i", "add", "qos", "capped", "MaxTRESPerUser=gres/gpu=2",
       "MaxJobsPerUser=5")
    a = c.sbatch("-q", "capped", "--gres=gpu:2", "--wrap", "sleep 8", user=TEST_USER, cwd=w)
    c.wait_state(a, "RUNNING")
    b = c.sbatch("-q", "capped", "--gres=gpu:1", "--wrap", "true", user=TEST_USER, cwd=w)
    wait_for(lambda: sq(c, b, "%r") == "QOSMaxGRESPerUser", what="QOS reason")
    c.ok("sacctmgr", "-i", "modify", "qos", "capped", "set", "MaxJobsPerUser=1",
       "MaxTRESPerUser=gres/gpu=-1")
    wait_for(lambda: sq(c, b, "%r") == "QOSMaxJobsPerUserLimit", what="jobs-per-user reason")
    c.ok("sacctmgr", "-i", "modify", "qos", "capped", "set", "MaxSubmitJobsPerUser=2")
    r = c.run(["sbatch", "-q", "capped", "--wrap", "true"], user=TEST_USER, cwd=w)
    assert r.rc != 0 and "Job violates accounting/QOS policy" in r.err
    assert c.wait_done(b, timeout=60) == "COMPLETED"


def test_preemption_requeues_the_victim_under_its_id(c):
    w = c.workdir
    c.ok("sacctmgr", "-i", "add", "qos", "urgent", "Priority=1000", "Preempt=normal")
    low = c.sbatch("--gres=gpu:4", "-n", "8", "--wrap", "sleep 4; echo run", user=TEST_USER, cwd=w)
    c.wait_state(low, "RUNNING")
    high = c.sbatch("-q", "urgent", "--gres=gpu:4", "-n", "8", "--wrap", "sleep 2", cwd=w)
    c.wait_state(high, ("RUNNING", "COMPLETED"), timeout=30)
    show = c.run(["scontrol", "show", "job", str(low)]).out
    assert f"JobId={low} " in show and "Restarts=1" in show
    assert c.wait_done(high) == "COMPLETED"
    assert c.wait_done(low, timeout=60) == "COMPLETED"
    dup = c.run(["sacct", "-j", str(low), "-X", "-D", "-n", "-P", "-o", "JobIDRaw,State"]).out
    states = [line.split("|")[1] for line in dup.splitlines() if line]
    assert states[-1] == "COMPLETED" and len(states) >= 2
