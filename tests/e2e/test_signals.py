"""Who receives a signal: Slurm 23.11's rules, checked process by process.

Every job runs a batch shell and one step with a task on each of 2 nodes; each of them traps
USR1, USR2 and TERM and appends "<SIGNAL> <unix time>" to a file of its own (``batch``,
``task0``, ``task1``), so a test sees exactly which process got what, and when.

* ``scancel --signal SIG``: the tasks of every running step, never the batch shell;
* ``scancel -b``: the batch shell alone (not srun, its child — which would forward it);
* ``scancel -f``: the batch shell's process group and every step;
* ``--signal=SIG@T``: the steps' tasks at T s before the limit, once; with no step running
  at that moment nothing is signalled, and a step started later gets nothing either;
* ``--signal=B:SIG@T``: the batch shell alone;
* the time limit: SIGTERM to the shell, srun and every task on every node; SIGKILL after
  KillWait to what is left.

The jobs with a time limit (``-t 1``: the warnings come 5 s after the start, the limit after
60 s) are all submitted when the module starts, so they run side by side with the quick
tests; the module takes about the limit plus KillWait (5 s here, on a cluster of its own).
A negative ("this process got nothing") is checked after the positive that would have come
with it, plus a short window (``NEGATIVE_WINDOW``) for what could only come later (srun's
forwarding of a signal it got, a controller pass).
"""

import os
import re
import sys
import time
from datetime import datetime

import pytest

from cluster import private_cluster, wait_for

KILL_WAIT = 5
NEGATIVE_WINDOW = 1.5  # > srun's forwarding latency (0.2 s) and one controller pass (1 s)

TASK = r'''
import os, signal, sys, time
d = sys.argv[1]
who = "task" + os.environ["SLURM_PROCID"]

def mark(text):
    fd = os.open(os.path.join(d, who), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, f"{text} {time.time():.3f}\n".encode())
    os.close(fd)

for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM):
    signal.signal(s, lambda n, f: mark(signal.Signals(n).name[3:]))
mark("node=" + os.environ["SLURMD_NODENAME"])
open(os.path.join(d, "ready." + who), "w").close()
while not os.path.exists(os.path.join(d, "stop")):
    time.sleep(0.05)
'''

# $1: the job's directory. The shell waits for srun in the background: a trap runs at once
# (bash runs traps only between commands, and `wait` is interrupted by a trapped signal).
BATCH = r'''#!/bin/bash
D=$1
# no fork in the trap ($EPOCHREALTIME, bash 5): a child of the trap could itself be hit by the
# next signal of the same kill (the time limit signals the process group and the cgroup)
mark() { echo "$1 $EPOCHREALTIME" >> "$D/batch"; }
trap 'mark USR1' USR1
trap 'mark USR2' USR2
trap 'mark TERM' TERM
touch "$D/ready.batch"
while [ -n "$WAIT_FOR_GO" ] && [ ! -e "$D/go" ]; do sleep 0.05; done
srun --ntasks-per-node=1 {python} {task} "$D" &
pid=$!
while kill -0 $pid 2>/dev/null; do wait $pid; done
echo "batch shell done"
'''


def read(path):
    try:
        with open(path) as fh:
            return fh.read()
    except FileNotFoundError:
        return ""


def marks(d: str, who: str) -> list[tuple[str, float]]:
    """(signal name, time) of each signal ``who`` received, in order."""
    out = []
    text = read(os.path.join(d, who))
    # only whole lines: the job may be writing the next mark while we read
    for line in text[:text.rfind("\n") + 1].splitlines():
        name, _, t = line.partition(" ")
        if not name.startswith("node="):
            out.append((name, float(t)))
    return out


def names(d: str, who: str) -> list[str]:
    return [n for n, _ in marks(d, who)]


def node_of(d: str, who: str) -> str:
    return re.search(r"node=(\S+)", read(os.path.join(d, who))).group(1)


def stays_empty(d: str, *who: str) -> None:
    """Nothing arrives for ``who`` during NEGATIVE_WINDOW (checked after the positive)."""
    deadline = time.monotonic() + NEGATIVE_WINDOW
    while time.monotonic() < deadline:
        got = {w: names(d, w) for w in who if names(d, w)}
        assert not got, f"unexpected signals: {got}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def sig_cluster():
    with private_cluster("muster-sig-", nodes=2, extra_conf=f"KillWait={KILL_WAIT}") as c:
        task = os.path.join(c.workdir, "task.py")
        with open(task, "w") as fh:
            fh.write(TASK)
        c.batch_script = os.path.join(c.workdir, "job.sh")
        with open(c.batch_script, "w") as fh:
            fh.write(BATCH.replace("{python}", sys.executable).replace("{task}", task))
        yield c


def submit(c, name: str, *opts: str, env: dict | None = None) -> tuple[int, str]:
    """A 2-node job (batch shell + one task per node); returns (job id, its directory)."""
    d = os.path.join(c.workdir, name)
    os.makedirs(d)
    jid = c.sbatch("-N2", "--ntasks-per-node=1", "-J", name, "-o", os.path.join(d, "out"),
                   *opts, c.batch_script, d, env=env)
    return jid, d


def wait_ready(d: str, step: bool = True) -> None:
    who = ["batch", "task0", "task1"] if step else ["batch"]
    wait_for(lambda: all(os.path.exists(os.path.join(d, "ready." + w)) for w in who),
             timeout=30, what=f"{who} ready in {d}")


def finish(c, jid: int, d: str) -> None:
    """Let the tasks end; the batch shell (alive and well) then ends the job cleanly."""
    open(os.path.join(d, "stop"), "w").close()
    assert c.wait_done(jid, timeout=30) == "COMPLETED", read(os.path.join(d, "out"))
    assert "batch shell done" in read(os.path.join(d, "out"))


def start_time(c, jid: int) -> int:
    r = c.run(["sacct", "-j", str(jid), "-X", "-n", "-P", "-o", "Start"])
    return int(datetime.fromisoformat(r.out.strip()).timestamp())


@pytest.fixture(scope="module")
def timed_jobs(sig_cluster):
    """The jobs that wait for their clock, started together as the module begins."""
    c = sig_cluster
    return {
        "limit": submit(c, "limit", "-t", "1"),
        "warn_steps": submit(c, "warn_steps", "-t", "1", "--signal=USR1@55"),
        "warn_batch": submit(c, "warn_batch", "-t", "1", "--signal=B:USR1@55"),
        "warn_late_step": submit(c, "warn_late_step", "-t", "1", "--signal=USR1@55",
                                 env={"WAIT_FOR_GO": "1"}),
    }


# ---- scancel --------------------------------------------------------------------------------

def test_scancel_signal_goes_to_the_steps_not_the_batch_shell(sig_cluster, timed_jobs):
    """submitit's preemption call (``scancel --signal USR2 JOB``): every task of the step, on
    both nodes, gets USR2; the batch shell (bash's default for USR2 would end the job) none."""
    c = sig_cluster
    jid, d = submit(c, "steps")
    wait_ready(d)
    assert node_of(d, "task0") != node_of(d, "task1")
    assert c.run(["scancel", "--signal", "USR2", str(jid)]).rc == 0
    wait_for(lambda: names(d, "task0") == ["USR2"] and names(d, "task1") == ["USR2"],
             what="USR2 at both tasks")
    stays_empty(d, "batch")
    assert names(d, "task0") == names(d, "task1") == ["USR2"]  # once each
    finish(c, jid, d)


def test_scancel_batch_signals_only_the_batch_shell(sig_cluster, timed_jobs):
    """``-b``: the shell itself; not its children (srun would forward it to the tasks)."""
    c = sig_cluster
    jid, d = submit(c, "batch_only")
    wait_ready(d)
    assert c.run(["scancel", "-b", "--signal=USR2", str(jid)]).rc == 0
    wait_for(lambda: names(d, "batch") == ["USR2"], what="USR2 at the batch shell")
    stays_empty(d, "task0", "task1")
    finish(c, jid, d)


def test_scancel_full_signals_the_batch_shell_and_the_steps(sig_cluster, timed_jobs):
    """``-f``: the shell, its children and every step. srun is one of the children and
    forwards what it gets, so a task may get the signal twice — as under Slurm."""
    c = sig_cluster
    jid, d = submit(c, "full")
    wait_ready(d)
    assert c.run(["scancel", "--full", "--signal=USR2", str(jid)]).rc == 0
    wait_for(lambda: names(d, "batch") == ["USR2"] and "USR2" in names(d, "task0")
             and "USR2" in names(d, "task1"), what="USR2 at the shell and both tasks")
    assert set(names(d, "task0")) == set(names(d, "task1")) == {"USR2"}
    finish(c, jid, d)


# ---- --signal=[B:]SIG@T ---------------------------------------------------------------------

def test_signal_warning_goes_to_the_steps_on_every_node(sig_cluster, timed_jobs):
    """``--signal=USR1@55`` with ``-t 1``: USR1 to both tasks 5 s after the start (Muster
    sends it on time; Slurm up to 60 s early), nothing to the batch shell."""
    c = sig_cluster
    jid, d = timed_jobs["warn_steps"]
    wait_ready(d)
    wait_for(lambda: names(d, "task0") == ["USR1"] and names(d, "task1") == ["USR1"],
             timeout=30, what="USR1 at both tasks")
    stays_empty(d, "batch")
    t0 = start_time(c, jid)
    for who in ("task0", "task1"):
        (_, at), = marks(d, who)
        assert t0 + 60 - 55 <= at < t0 + 60 - 40, (who, at - t0)
    assert names(d, "task0") == ["USR1"]  # once
    finish(c, jid, d)


def test_signal_warning_with_b_goes_to_the_batch_shell_only(sig_cluster, timed_jobs):
    c = sig_cluster
    jid, d = timed_jobs["warn_batch"]
    wait_ready(d)
    wait_for(lambda: names(d, "batch") == ["USR1"], timeout=30, what="USR1 at the batch shell")
    stays_empty(d, "task0", "task1")
    (_, at), = marks(d, "batch")
    assert at >= start_time(c, jid) + 5
    finish(c, jid, d)


def test_signal_warning_with_no_step_running_signals_nothing(sig_cluster, timed_jobs):
    """At the warning time the job runs no step: nothing is signalled (the shell is not a
    stand-in), and the step started afterwards gets nothing: the warning is sent once."""
    c = sig_cluster
    jid, d = timed_jobs["warn_late_step"]
    wait_ready(d, step=False)
    warn_at = start_time(c, jid) + 60 - 55
    wait_for(lambda: time.time() > warn_at + 1.5, timeout=30, what="the warning time passed")
    open(os.path.join(d, "go"), "w").close()
    wait_ready(d)
    stays_empty(d, "batch", "task0", "task1")
    # the path itself works for this job's step
    assert c.run(["scancel", "--signal=USR2", str(jid)]).rc == 0
    wait_for(lambda: names(d, "task0") == ["USR2"] and names(d, "task1") == ["USR2"],
             what="USR2 at both tasks")
    assert names(d, "batch") == []
    finish(c, jid, d)


# ---- the time limit -------------------------------------------------------------------------

def test_time_limit_terms_everything_then_kills_after_killwait(sig_cluster, timed_jobs):
    """At the limit: SIGTERM to the batch shell and to the tasks on both nodes (they trap it
    and go on); KillWait later SIGKILL ends them all: the job is TIMEOUT, its step and its
    batch step were killed by signal 9."""
    c = sig_cluster
    jid, d = timed_jobs["limit"]
    wait_ready(d)
    t0 = start_time(c, jid)
    assert c.wait_done(jid, timeout=150) == "TIMEOUT", read(os.path.join(d, "out"))
    for who in ("batch", "task0", "task1"):
        got = marks(d, who)
        assert got and {n for n, _ in got} == {"TERM"}, (who, got)
        assert t0 + 60 <= got[0][1] < t0 + 60 + KILL_WAIT, (who, got[0][1] - t0)

    def rows():  # once the step's nodes have reported its end (it may come after the job's)
        r = c.run(["sacct", "-j", str(jid), "-n", "-P", "-o", "JobID,ExitCode,End"])
        got = {line.split("|")[0]: line.split("|")[1:] for line in r.out.splitlines()}
        return got if got.get(f"{jid}.0", ["", "Unknown"])[1] != "Unknown" else None
    rows = wait_for(rows, timeout=2 * KILL_WAIT + 5, what="the step's end in sacct")
    assert rows[f"{jid}.0"][0] == "0:9", rows
    assert rows[f"{jid}.batch"][0] == "0:9", rows
    first_term = min(at for who in ("task0", "task1") for _, at in marks(d, who))
    step_end = datetime.fromisoformat(rows[f"{jid}.0"][1]).timestamp()
    assert step_end >= int(first_term) + KILL_WAIT - 1, (step_end, first_term)
    assert "DUE TO TIME LIMIT" in read(os.path.join(d, "out"))
