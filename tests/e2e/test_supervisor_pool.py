"""Batch supervisors are reused (muster.agent.zygote's pool, supervisor.run_pooled): a job on a
reused supervisor sees exactly what a job on a fresh one sees, signals and time limits reach
the job the supervisor runs now, and idle supervisors go when their agent goes. Real daemons,
one node, so consecutive jobs land on the same agent and its pool."""

from __future__ import annotations

import os
import signal

import pytest

from cluster import _alive, private_cluster, read, start_agent, wait_for

# what the job reports: its parent (the supervisor: the wrapper shell execs the script) and
# the descriptors it holds
PROBE = ("#!/bin/sh\n"
         "set -- $(cat /proc/$$/stat | sed 's/.*) //')\n"
         "echo ppid=$2\n"
         "echo fds=$(ls /proc/$$/fd | sort -n | tr '\\n' ' ')\n")


@pytest.fixture(scope="module")
def one_node():
    with private_cluster("muster-pool-", nodes=1, cpus=4) as c:
        yield c


def probe(c, name: str) -> dict[str, str]:
    out = os.path.join(c.workdir, name)
    jid = c.sbatch("-o", out, cwd=c.workdir, input=PROBE)
    assert c.wait_done(jid) == "COMPLETED"
    return dict(line.split("=", 1) for line in read(out).splitlines() if "=" in line)


def test_a_reused_supervisor_runs_the_next_job_as_a_fresh_one_would(one_node):
    c = one_node
    first = probe(c, "first.out")
    second = probe(c, "second.out")
    third = probe(c, "third.out")
    # one after the other on one node: the supervisor freed by the last job takes the next
    assert first["ppid"] == second["ppid"] == third["ppid"], (first, second, third)
    assert _alive(int(first["ppid"])), "an idle pooled supervisor should wait for work"
    # nothing of an earlier job (its stderr, its wake-up pipe) is held by the next one
    assert first["fds"] == second["fds"] == third["fds"], (first, second, third)


def test_cancel_and_time_limit_reach_the_job_of_a_reused_supervisor(one_node):
    c = one_node
    warm = probe(c, "warm.out")  # an idle supervisor is there for the next job
    out = os.path.join(c.workdir, "cancel.out")
    jid = c.sbatch("-o", out, cwd=c.workdir, input="#!/bin/sh\necho started\nsleep 60\n")
    wait_for(lambda: "started" in read(out), timeout=30, what="job running")
    assert c.run(["scancel", str(jid)]).rc == 0
    assert c.wait_done(jid) == "CANCELLED"
    assert f"*** JOB {jid} ON node1 CANCELLED AT" in read(out)
    out2 = os.path.join(c.workdir, "limit.out")
    # 0:02 is two seconds, which Slurm (and Muster) round up to the one-minute minimum: the
    # job ends a minute after it starts, so the wait must outlast that minute
    jid2 = c.sbatch("-t", "0:02", "-o", out2, cwd=c.workdir,
                    input="#!/bin/sh\necho ppid=$PPID\nsleep 300\n")
    assert c.wait_done(jid2, timeout=150) == "TIMEOUT"
    assert "DUE TO TIME LIMIT" in read(out2)
    assert _alive(int(warm["ppid"]))


def test_idle_supervisors_exit_with_their_agent(one_node):
    c = one_node
    idle = int(probe(c, "idle.out")["ppid"])
    assert _alive(idle)
    agent = c.pids()["agents"]["node1"]
    os.kill(agent, signal.SIGKILL)  # its zygote sees the channel close and exits
    wait_for(lambda: not _alive(agent), what="agent gone")
    wait_for(lambda: not _alive(idle), timeout=20, what="the idle supervisor gone")
    start_agent(c, "node1")
    wait_for(lambda: "idle" in c.ok("sinfo", "-h", "-o", "%T"), timeout=30, what="node back")
    after = probe(c, "after.out")
    assert int(after["ppid"]) != idle
