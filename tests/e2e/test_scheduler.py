"""The scheduler issue's seed scenario through the real CLI: while a large training job waits
for its reserved start, a short evaluation job starts at once on idle GPUs, a longer one that
would delay the training job does not, and the training job starts no later than expected."""

import time

import pytest

from cluster import private_cluster, wait_for


@pytest.fixture
def c():
    with private_cluster("muster-sched-", nodes=2, gpus=8, cpus=16) as cl:
        yield cl


def field(c, jid, fmt):
    return c.run(["squeue", "-h", "-j", str(jid), "-o", fmt]).out.strip()


def test_backfill_eval_jobs_around_a_reserved_training_run(c):
    w = c.workdir
    # node1's GPUs are busy for a while (limit 3 min; it really ends after ~12 s)
    busy = c.sbatch("-w", "node1", "--gres=gpu:8", "-t", "3", "--wrap", "sleep 12", cwd=w)
    c.wait_state(busy, "RUNNING")
    train = c.sbatch("-N2", "--gres=gpu:8", "-t", "5", "-J", "train", "--wrap", "sleep 1", cwd=w)
    wait_for(lambda: field(c, train, "%r") == "Resources", what="training job waits")
    expected = wait_for(lambda: (v := field(c, train, "%S")) not in ("", "N/A") and v,
                        what="expected start of the training job")
    exp_ts = time.mktime(time.strptime(expected, "%Y-%m-%dT%H:%M:%S"))
    assert exp_ts >= time.time() + 120  # reserved at the busy job's limit, not now
    short = c.sbatch("--gres=gpu:2", "-t", "1", "-J", "eval-short", "--wrap", "sleep 3", cwd=w)
    long_ = c.sbatch("--gres=gpu:2", "-t", "10", "-J", "eval-long", "--wrap", "sleep 3", cwd=w)
    c.wait_state(short, ("RUNNING", "COMPLETED"))  # backfilled at once on node2's idle GPUs
    assert "Scheduler=Backfill" in c.run(["scontrol", "show", "job", str(short)]).out
    assert field(c, long_, "%t") == "PD"  # would delay the reservation: stays pending
    assert c.state_of(long_) == "PENDING"
    r = c.run(["squeue", "--start", "-h", "-j", str(train)])
    assert expected in r.out
    # the training job starts no later than its expected start (here: as soon as node1 frees)
    c.wait_state(train, ("RUNNING", "COMPLETED"), timeout=60)
    started = c.run(["sacct", "-j", str(train), "-X", "-n", "-P", "-o", "Start"]).out.strip()
    assert time.mktime(time.strptime(started, "%Y-%m-%dT%H:%M:%S")) <= exp_ts
    assert c.state_of(long_) in ("PENDING", "RUNNING", "COMPLETED")
    assert c.wait_done(train) == "COMPLETED"
    assert c.wait_done(long_) == "COMPLETED"
