"""A SIGKILL of the controller loses no acknowledged job, runs none twice, and running jobs
keep running while it is away (agents reconcile when it returns)."""

import os
import subprocess
import threading
import time

import pytest

from cluster import private_cluster, restart_controller, wait_for


@pytest.fixture
def own_cluster():
    with private_cluster("muster-crash-", nodes=2, cpus=8) as c:
        yield c


def test_sigkill_during_submission_burst(own_cluster):
    c = own_cluster
    log = os.path.join(c.workdir, "runs.log")
    long_job = c.sbatch("-o", os.path.join(c.workdir, "long.out"), "--wrap",
                        f"echo start $SLURM_JOB_ID >> {log}; sleep 4; echo end $SLURM_JOB_ID >> {log}",
                        cwd=c.workdir)
    c.wait_state(long_job, "RUNNING")
    acked: list[int] = []
    lock = threading.Lock()
    stop = threading.Event()

    def submitter():
        while not stop.is_set():
            r = c.run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap",
                       f"echo run $SLURM_JOB_ID >> {log}"], cwd=c.workdir)
            if r.rc == 0:
                with lock:
                    acked.append(int(r.out.strip()))
            else:
                assert "Traceback" not in r.err
                time.sleep(0.01)

    threads = [threading.Thread(target=submitter) for _ in range(4)]
    for t in threads:
        t.start()
    # a burst of 1,000 submissions with two SIGKILLs of the controller in the middle of it
    wait_for(lambda: len(acked) >= 300, timeout=120, what="300 submissions")
    restart_controller(c)
    wait_for(lambda: len(acked) >= 650, timeout=120, what="650 submissions")
    restart_controller(c)
    wait_for(lambda: len(acked) >= 1000, timeout=120, what="1,000 submissions")
    stop.set()
    for t in threads:
        t.join()

    # every acknowledged job exists exactly once and ran exactly once
    def all_done():
        r = c.run(["sacct", "-X", "-n", "-P", "-o", "JobIDRaw,State", "-S", "now-1hour"])
        states = dict(line.split("|") for line in r.out.splitlines() if line)
        return all(states.get(str(j)) == "COMPLETED" for j in acked) and states
    states = wait_for(all_done, timeout=240, interval=0.5, what="all acknowledged jobs completed")
    r = c.run(["sacct", "-X", "-n", "-P", "-o", "JobIDRaw", "-S", "now-1hour"])
    ids = [int(x) for x in r.out.split()]
    assert len(ids) == len(set(ids)), "a job id appears twice in accounting"
    assert set(acked) <= set(ids)
    with open(log) as fh:
        lines = fh.read().splitlines()
    runs = [int(x.split()[1]) for x in lines if x.startswith("run ")]
    for j in acked:
        assert runs.count(j) == 1, f"job {j} ran {runs.count(j)} times"
    assert len(runs) == len(set(runs))
    # the long job survived two controller crashes and ran once
    assert c.wait_done(long_job) == "COMPLETED"
    with open(log) as fh:
        lines = fh.read().splitlines()
    assert lines.count(f"start {long_job}") == 1 and lines.count(f"end {long_job}") == 1
    assert states  # the accounting view answered


def test_job_ending_while_controller_down_is_reported(own_cluster):
    c = own_cluster
    jid = c.sbatch("-o", "/dev/null", "--wrap", "sleep 1; exit 5", cwd=c.workdir)
    c.wait_state(jid, "RUNNING")
    pid = c.pids()["controller"]
    os.kill(pid, 9)
    time.sleep(2.0)  # the job ends while no controller exists (this is the scenario, not a sync)
    restart_controller(c, kill_signal=0)
    assert c.wait_done(jid) == "FAILED"
    assert c.job(jid)["exit"] == "5:0"


def test_restart_keeps_pending_and_held_jobs(own_cluster):
    c = own_cluster
    held = c.sbatch("-H", "-J", "keepme", "-t", "7", "--wrap", "true", cwd=c.workdir)
    before = c.run(["scontrol", "show", "job", str(held)]).out
    restart_controller(c)
    after = c.run(["scontrol", "show", "job", str(held)]).out
    def strip(s):
        return [line for line in s.splitlines() if "RunTime" not in line and
                "LastSchedEval" not in line]
    assert strip(before) == strip(after)
    c.run(["scontrol", "release", str(held)])
    assert c.wait_done(held) == "COMPLETED"
    subprocess.run(["true"])


@pytest.mark.parametrize("point", ["after_start_commit", "before_end_commit"])
def test_crash_at_the_points_that_hurt(own_cluster, point):
    """Crash exactly between committing a start and sending the launch, or between an agent's
    end report and its commit: after a restart the job runs exactly once and ends COMPLETED."""
    c = own_cluster
    marker = os.path.join(c.workdir, f"{point}.log")
    pid = restart_controller(c, env={"MUSTER_CRASH_AT": f"{point}:1"})
    jid = c.sbatch("-o", "/dev/null", "--wrap", f"echo ran >> {marker}", cwd=c.workdir)
    wait_for(lambda: not os.path.exists(f"/proc/{pid}") or
             open(f"/proc/{pid}/stat").read().split(") ")[1][0] == "Z",
             timeout=30, what=f"controller to die at {point}")
    restart_controller(c, kill_signal=0)
    assert c.wait_done(jid) == "COMPLETED"
    wait_for(lambda: os.path.exists(marker), what="job output")
    assert open(marker).read() == "ran\n"
