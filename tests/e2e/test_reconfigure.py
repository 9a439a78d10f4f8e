"""scontrol reconfigure against real daemons (issue 16): the controller re-reads slurm.conf
and applies what changed while a job runs, without touching it.

One cluster of three nodes. With a job running on node1 and another on node3: node4 and a
partition are added, a partition's MaxTime and a priority weight change, node2 (idle) and
node3 (busy) are removed. node2 is gone at once; node3 drains ("removed by reconfigure") and
disappears when its job ends; node4 registers once its agent starts and runs a job in the new
partition; the first job completes with its whole output. A file with a bad value on line N
is refused as a whole (``slurm.conf:N``) and the configuration in force stays; a plain user
may not reconfigure.
"""

import os
import re

import pytest

from cluster import TEST_USER, private_cluster, start_agent, user_exists, wait_for


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def c(request):
    """The cluster, once on each state store (a reconfigure commits node and partition
    changes: both backends must take them)."""
    if not user_exists(TEST_USER):
        pytest.fail(f"test user {TEST_USER} missing: `useradd -m {TEST_USER}`")
    extra = ""
    if request.param == "postgres":
        extra = f"MusterStateStore={request.getfixturevalue('pg_server').new_db()}"
    with private_cluster("muster-reconf-", nodes=3, gpus=0, cpus=4, mem=8000,
                         partitions="gpu,debug:1:00:00", extra_conf=extra) as cl:
        yield cl


def gated_job(c, node: str, gate: str, out: str) -> int:
    """A job on ``node`` that prints, waits for ``gate`` to exist, and prints again."""
    script = (f"#!/bin/bash\necho begin $SLURM_JOB_ID $SLURMD_NODENAME\n"
              f"while [ ! -e {gate} ]; do sleep 0.1; done\n"
              "for i in 1 2 3; do echo line $i; done\necho end\n")
    return c.sbatch("-w", node, "-o", out, user=TEST_USER, cwd=c.workdir, input=script)


def show(c, *what) -> str:
    return c.ok("scontrol", "show", *what)


def field(text: str, key: str) -> str:
    m = re.search(rf"\b{key}=(\S*)", text)
    assert m, (key, text)
    return m.group(1)


def node_names(c) -> set[str]:
    return set(c.ok("sinfo", "-h", "-N", "-o", "%N").split())


def edit_conf(c, fn) -> str:
    with open(c.conf) as fh:
        old = fh.read()
    with open(c.conf, "w") as fh:
        fh.write(fn(old))
    return old


def grow_and_shrink(text: str) -> str:
    """node4 and partition 'extra' added; debug's MaxTime 1:00:00 -> 30 minutes; a priority
    weight set; node2 and node3 removed."""
    node1 = re.search(r"^NodeName=node1 .*$", text, re.M).group(0)
    node4 = node1.replace("node1", "node4").replace("127.0.1.1", "127.0.1.4")
    text = re.sub(r"^NodeName=node[23] .*\n", "", text, flags=re.M)
    text = text.replace("node[1-3]", "node1").replace("MaxTime=1:00:00", "MaxTime=30")
    return (text + node4 + "\nPartitionName=extra Nodes=node4 MaxTime=20\n"
            "PriorityWeightAge=777\n")


def test_reconfigure_applies_changes_and_leaves_running_jobs(c):
    gate = os.path.join(c.workdir, "gate")
    out1, out3 = os.path.join(c.workdir, "j1.out"), os.path.join(c.workdir, "j3.out")
    j1 = gated_job(c, "node1", gate, out1)
    j3 = gated_job(c, "node3", gate, out3)
    for j in (j1, j3):
        c.wait_state(j, "RUNNING")
    before = show(c, "job", str(j1))
    edit_conf(c, grow_and_shrink)
    try:
        r = c.run(["scontrol", "reconfigure"])
        assert (r.rc, r.out, r.err) == (0, "", ""), r
        # added: node4 (no agent yet: not responding) and its partition
        assert "node4" in node_names(c)
        assert field(show(c, "partition", "extra"), "Nodes") == "node4"
        assert field(show(c, "partition", "debug"), "MaxTime") == "00:30:00"
        assert field(show(c, "partition", "debug"), "Nodes") == "node1"
        assert "777" in [ln.split("=")[-1].strip() for ln in show(c, "config").splitlines()
                         if ln.startswith("PriorityWeightAge")]
        # removed: node2 at once (idle); node3 drains until its job is gone
        assert "node2" not in node_names(c)
        n3 = show(c, "node", "node3")
        assert "DRAIN" in field(n3, "State") and "removed by reconfigure" in n3
        # the running jobs are untouched
        after = show(c, "job", str(j1))
        for key in ("JobState", "StartTime", "NodeList", "TimeLimit", "Partition"):
            assert field(after, key) == field(before, key), key
        # node4 serves once its agent runs; the new partition takes jobs
        start_agent(c, "node4")
        wait_for(lambda: "idle" in c.ok("sinfo", "-h", "-n", "node4", "-o", "%t"), 30,
                 what="node4 registered")
        j4 = c.sbatch("-p", "extra", "--wrap", "hostname", user=TEST_USER, cwd=c.workdir)
        assert c.wait_done(j4) == "COMPLETED"
        assert c.job(j4)["nodes"] == "node4"
        # the new MaxTime binds new submissions
        j5 = c.sbatch("-p", "debug", "-t", "45", "--wrap", "true", user=TEST_USER,
                      cwd=c.workdir)
        wait_for(lambda: "PartitionTimeLimit" in c.ok("squeue", "-h", "-j", str(j5), "-o", "%r"),
                 what="j5 held by the new MaxTime")
        c.ok("scancel", str(j5))
    finally:
        with open(gate, "w"):
            pass
    for j in (j1, j3):
        assert c.wait_done(j) == "COMPLETED"
    for j, out, node in ((j1, out1, "node1"), (j3, out3, "node3")):
        with open(out) as fh:
            assert fh.read() == f"begin {j} {node}\nline 1\nline 2\nline 3\nend\n"
    wait_for(lambda: "node3" not in node_names(c), 20, what="node3 gone once idle")


def test_invalid_file_is_refused_with_its_line(c):
    lines = open(c.conf).read().splitlines(keepends=True)
    kw = next(i for i, ln in enumerate(lines) if ln.startswith("KillWait="))
    good = "".join(lines)
    edit_conf(c, lambda t: "".join(ln if i != kw else "KillWait=soon\n"
                                   for i, ln in enumerate(lines)) + "NodeName=node9 CPUs=1\n")
    try:
        r = c.run(["scontrol", "reconfigure"])
        assert r.rc == 1 and r.out == ""
        assert r.err.startswith("slurm_reconfigure error: ")
        assert f"{c.conf}:{kw + 1}: " in r.err and "KillWait" in r.err, r.err
        assert "Traceback" not in r.err
        # nothing of the file applied; the configuration in force still works
        assert "node9" not in node_names(c)
        j = c.sbatch("-p", "extra", "--wrap", "true", user=TEST_USER, cwd=c.workdir)
        assert c.wait_done(j) == "COMPLETED"
        # a change that needs a restart is refused too, and named
        edit_conf(c, lambda t: re.sub(r"^SlurmctldPort=\d+", "SlurmctldPort=1", good,
                                      flags=re.M))
        r = c.run(["scontrol", "reconfigure"])
        assert r.rc == 1 and "SlurmctldPort cannot change without a restart" in r.err, r
    finally:
        edit_conf(c, lambda t: good)
    assert c.run(["scontrol", "reconfigure"]).rc == 0


def test_plain_user_may_not_reconfigure(c):
    r = c.run(["scontrol", "reconfigure"], user=TEST_USER)
    assert (r.rc, r.err) == (1, "slurm_reconfigure error: Access/permission denied\n"), r
    r = c.run(["scontrol", "reconfigure", "now"])
    assert r.rc == 1 and "too many arguments for keyword:reconfigure" in r.err


def test_health_check_program_is_taken_up_live(c):
    """HealthCheckProgram/Interval added by ``scontrol reconfigure`` run on the agents at once
    (no agent restart): a failing check drains the node with its message, a passing one
    undoes that drain."""
    hc = os.path.join(c.state_dir, "hc.sh")  # root runs it: not in the world-writable workdir
    flag = os.path.join(c.state_dir, "hc.fail")
    with open(hc, "w") as fh:
        fh.write(f"#!/bin/sh\nif [ -e {flag} ]; then echo \"bad disk on $SLURMD_NODENAME\"; "
                 "exit 1; fi\nexit 0\n")
    os.chmod(hc, 0o755)
    node = sorted(node_names(c))[0]
    old = edit_conf(c, lambda t: t + f"\nHealthCheckProgram={hc}\nHealthCheckInterval=1\n")
    try:
        assert c.run(["scontrol", "reconfigure"]).rc == 0
        open(flag, "w").close()
        wait_for(lambda: f"bad disk on {node}" in show(c, "node", node), timeout=20,
                 what="the new health check draining the node")
        assert "DRAIN" in field(show(c, "node", node), "State")
        os.unlink(flag)
        wait_for(lambda: "DRAIN" not in field(show(c, "node", node), "State"), timeout=20,
                 what="the passing check undoing its drain")
    finally:
        with open(c.conf, "w") as fh:
            fh.write(old)
        c.run(["scontrol", "reconfigure"])
        if os.path.exists(flag):
            os.unlink(flag)
