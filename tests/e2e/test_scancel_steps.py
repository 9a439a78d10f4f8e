"""``scancel [-s SIG] JOB.STEP``: the named step alone; the job and its other steps run on.

Each job (submitted as a test user) runs two srun steps in the background, one task on each
of 2 nodes; every task traps USR1, USR2 and TERM and appends the signal's name to a file of
its own (``sig.<step>.<rank>``; TERM also ends it), so a test sees exactly which task got
what. The batch shell traps nothing: a signal meant for a step that reached it would kill
it, and the job would not end COMPLETED with "batch shell done".

A negative ("these tasks got nothing") is checked after the positive that would have come
with it, over a short window (``NEGATIVE_WINDOW``) covering a controller pass and the agent's
delivery. Errors and exit codes are Slurm 23.11's scancel (controller.stepkill).
"""

import os
import sys
import time

import pytest

from cluster import (TEST_USER, TEST_USER2, private_cluster, read, require_root_and_users,
                     wait_for)

NEGATIVE_WINDOW = 1.5
TASKS = ("0.0", "0.1", "1.0", "1.1")  # <step>.<rank>

TASK = r'''
import os, signal, sys, time
d = sys.argv[1]
who = os.environ.get("SLURM_ARRAY_TASK_ID", "x") + "." + os.environ["SLURM_STEP_ID"] \
    + "." + os.environ["SLURM_PROCID"]

def mark(name):
    fd = os.open(os.path.join(d, "sig." + who), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, (name + "\n").encode())
    os.close(fd)

def on(n, f):
    mark(signal.Signals(n).name[3:])
    if n == signal.SIGTERM:
        sys.exit(143)

for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM):
    signal.signal(s, on)
open(os.path.join(d, "ready." + who), "w").close()
while not os.path.exists(os.path.join(d, "stop")):
    time.sleep(0.05)
'''

# $1: the job's directory. Step 1 starts once step 0's tasks are up, so the ids are 0 and 1.
BATCH = r'''#!/bin/bash
D=$1
srun -N2 --ntasks-per-node=1 --overlap {python} {task} "$D" &
p0=$!
while [ ! -e "$D/ready.x.0.0" ] || [ ! -e "$D/ready.x.0.1" ]; do sleep 0.05; done
srun -N2 --ntasks-per-node=1 --overlap {python} {task} "$D" &
p1=$!
wait $p0
wait $p1
echo "batch shell done"
'''


@pytest.fixture(scope="module")
def c():
    require_root_and_users(TEST_USER, TEST_USER2)
    with private_cluster("muster-scstep-", nodes=2, gpus=0, cpus=4,
                         extra_conf="KillWait=5") as cl:
        cl.task = os.path.join(cl.workdir, "task.py")
        with open(cl.task, "w") as fh:
            fh.write(TASK)
        cl.batch_script = os.path.join(cl.workdir, "job.sh")
        with open(cl.batch_script, "w") as fh:
            fh.write(BATCH.replace("{python}", sys.executable).replace("{task}", cl.task))
        os.chmod(cl.batch_script, 0o755)
        yield cl


def got(d: str, who: str) -> list[str]:
    """Signal names task ``who`` (``<step>.<rank>``, or ``<array task>.<step>.<rank>``) got."""
    name = who if who.count(".") == 2 else "x." + who
    return read(os.path.join(d, "sig." + name)).split()


def stays_empty(d: str, *who: str) -> None:
    deadline = time.monotonic() + NEGATIVE_WINDOW
    while time.monotonic() < deadline:
        seen = {w: got(d, w) for w in who if got(d, w)}
        assert not seen, f"unexpected signals: {seen}"
        time.sleep(0.05)


def start_job(c, name: str) -> tuple[int, str]:
    """A running 2-node job (as the test user) with steps 0 and 1 up on both nodes."""
    d = os.path.join(c.workdir, name)
    os.makedirs(d)
    os.chmod(d, 0o777)
    jid = c.sbatch("-N2", "--ntasks-per-node=1", "-J", name, "-o", os.path.join(d, "out"),
                   c.batch_script, d, cwd=d, user=TEST_USER)
    wait_for(lambda: all(os.path.exists(os.path.join(d, "ready.x." + w)) for w in TASKS),
             timeout=90, what=f"steps 0 and 1 of job {jid} up ({read(os.path.join(d, 'out'))})")
    return jid, d


def finish(c, jid: int, d: str) -> None:
    open(os.path.join(d, "stop"), "w").close()
    assert c.wait_done(jid, timeout=60) == "COMPLETED", read(os.path.join(d, "out"))
    assert "batch shell done" in read(os.path.join(d, "out"))


def scancel(c, *args: str, user: str | None = TEST_USER):
    return c.run(["scancel", *args], user=user)


def step_states(c, jid: int) -> dict[str, str]:
    out = c.ok("sacct", "-j", str(jid), "-n", "-P", "-o", "JobID,State")
    return {i: s.split()[0] for i, s in (line.split("|") for line in out.splitlines() if line)}


def test_signal_reaches_only_the_named_step(c):
    jid, d = start_job(c, "sig")
    try:
        r = scancel(c, "-s", "USR1", f"{jid}.1")
        assert (r.rc, r.err) == (0, ""), r
        wait_for(lambda: got(d, "1.0") == ["USR1"] and got(d, "1.1") == ["USR1"], timeout=30,
                 what="USR1 at both tasks of step 1")
        stays_empty(d, "0.0", "0.1")
        # -b / -f never widen a step id to the job: the batch shell (no trap) would die
        for flag, step in (("-b", "0"), ("-f", "1")):
            r = scancel(c, flag, "-s", "USR2", f"{jid}.{step}")
            assert (r.rc, r.err) == (0, ""), r
        wait_for(lambda: got(d, "0.0") == got(d, "0.1") == ["USR2"]
                 and got(d, "1.0") == got(d, "1.1") == ["USR1", "USR2"], timeout=30,
                 what="USR2 at the tasks of steps 0 and 1, once each")
        assert c.state_of(jid) == "RUNNING"
    finally:
        finish(c, jid, d)
    assert step_states(c, jid)[f"{jid}.1"] == "COMPLETED"


def test_cancel_ends_the_step_and_the_job_runs_on(c):
    jid, d = start_job(c, "cancel")
    try:
        r = scancel(c, f"{jid}.0")
        assert (r.rc, r.err) == (0, ""), r
        wait_for(lambda: got(d, "0.0") == got(d, "0.1") == ["TERM"], timeout=30,
                 what="TERM at both tasks of step 0")
        wait_for(lambda: step_states(c, jid).get(f"{jid}.0") == "CANCELLED", timeout=30,
                 what="step 0 CANCELLED")
        stays_empty(d, "1.0", "1.1")
        assert c.state_of(jid) == "RUNNING"
        steps = c.ok("squeue", "-s", "-h", "-j", str(jid), "-o", "%i").split()
        assert f"{jid}.1" in steps and f"{jid}.0" not in steps, steps
        assert "CANCELLED" in read(os.path.join(d, "out"))  # *** STEP J.0 … CANCELLED … ***
    finally:
        finish(c, jid, d)
    states = step_states(c, jid)
    assert (states[str(jid)], states[f"{jid}.0"], states[f"{jid}.1"]) == \
        ("COMPLETED", "CANCELLED", "COMPLETED"), states


def test_step_errors_as_slurm_scancel(c):
    jid, d = start_job(c, "errors")
    try:
        # a running job without that step: slurmctld's ESLURM_INVALID_JOB_ID (2017 → 225)
        for args in ([f"{jid}.7"], ["-s", "USR1", f"{jid}.7"]):
            r = scancel(c, *args)
            assert r.rc == 225, r
            assert r.err == (f"scancel: error: Kill job error on job step id {jid}.7: "
                             "Invalid job id specified\n"), r
        # another user's step: refused, the step untouched (Access/permission denied: 210)
        for args in ([f"{jid}.0"], ["-s", "USR1", f"{jid}.1"]):
            r = scancel(c, *args, user=TEST_USER2)
            assert r.rc == 210, r
            assert r.err == (f"scancel: error: Kill job error on job step id {args[-1]}: "
                             "Access/permission denied\n"), r
        stays_empty(d, *TASKS)
        assert c.state_of(jid) == "RUNNING"
    finally:
        finish(c, jid, d)
    # a finished job is no job to scancel: its own check, exit 1 (-Q: silent)
    r = scancel(c, f"{jid}.0")
    assert (r.rc, r.err) == (1, f"scancel: error: Kill job error on job step id {jid}.0: "
                                "Invalid job id specified\n"), r
    for args, err in ((["999999.0"], "scancel: error: Kill job error on job step id "
                       "999999.0: Invalid job id specified\n"), (["-Q", "999999.0"], ""),
                      (["-s", "USR1", "999999_3.2"], "scancel: error: Kill job error on job "
                       "step id 999999_3.2: Invalid job id specified\n")):
        r = scancel(c, *args)
        assert (r.rc, r.err) == (1, err), r
    for bad in ("12.x", "12.", "12.-1", "12.4294967296"):
        r = scancel(c, bad)
        assert (r.rc, r.err) == (1, f"scancel: error: Invalid job id {bad}\n"), r


def test_array_task_step(c):
    """``J_T.S`` names the step of task T only; task 0's step runs on untouched."""
    d = os.path.join(c.workdir, "array")
    os.makedirs(d)
    os.chmod(d, 0o777)
    out = c.run(["sbatch", "--parsable", "--array=0-1", "-N1", "-n1", "-o",
                 os.path.join(d, "out.%a"), "--wrap",
                 f"srun --overlap {sys.executable} {c.task} {d}; echo script done"],
                user=TEST_USER, cwd=d)
    assert out.rc == 0, out
    arr = int(out.out.strip().split(";")[0])
    wait_for(lambda: all(os.path.exists(os.path.join(d, f"ready.{t}.0.0")) for t in (0, 1)),
             timeout=90, what="the steps of both array tasks up")
    try:
        r = scancel(c, "-s", "USR1", f"{arr}_1.0")
        assert (r.rc, r.err) == (0, ""), r
        wait_for(lambda: got(d, "1.0.0") == ["USR1"], timeout=30, what="USR1 at task 1's step")
        stays_empty(d, "0.0.0")
        r = scancel(c, f"{arr}_1.0")
        assert (r.rc, r.err) == (0, ""), r
        wait_for(lambda: got(d, "1.0.0") == ["USR1", "TERM"], timeout=30,
                 what="TERM at task 1's step")
        stays_empty(d, "0.0.0")
    finally:
        open(os.path.join(d, "stop"), "w").close()

    def states():
        out = c.ok("sacct", "-j", str(arr), "-n", "-P", "-o", "JobID,State")
        return dict(line.split("|") for line in out.splitlines() if line)
    # both tasks end COMPLETED (their scripts ran on); only task 1's step was cancelled
    want = {f"{arr}_0": "COMPLETED", f"{arr}_1": "COMPLETED", f"{arr}_0.0": "COMPLETED"}
    wait_for(lambda: all(states().get(k) == v for k, v in want.items()), timeout=60,
             what=f"array {arr} done: {want}")
    assert states()[f"{arr}_1.0"].startswith("CANCELLED"), states()
