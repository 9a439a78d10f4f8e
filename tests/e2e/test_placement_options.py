"""Placement options with real daemons: node features and --constraint, CPUs and memory per
GPU (options and partition defaults), --nice under priority/multifactor and priority/basic,
--deadline, --mail-type through MailProg, and the refusals of what cannot be honoured.

One 4-node cluster for the module: node1-2 are ``h100,ib``, node3-4 ``a100`` (node4 also lists
``old`` but has it inactive), 4 GPUs and 16 CPUs each, ``PriorityWeightPartition=1000`` (so that
nice shows under multifactor), a partition ``gpud`` with DefCpuPerGPU/DefMemPerGPU, and a
MailProg that records every call."""

from __future__ import annotations

import contextlib
import glob
import os
import re
import time

import pytest

from cluster import private_cluster, wait_for

FEATURES = {"node1": "h100,ib", "node2": "h100,ib", "node3": "a100",
            "node4": "a100,old ActiveFeatures=a100"}
MAILPROG = """#!/bin/sh
# records how the controller runs it: arguments (one per line), then stdin
f="{dir}/mail.$(date +%s%N).$$"
printf '%s\\n' "$@" > "$f.tmp"
echo "--stdin--" >> "$f.tmp"
cat >> "$f.tmp"
echo "--env--" >> "$f.tmp"
env | grep '^SLURM_JOB_MAIL_TYPE=' >> "$f.tmp"
mv "$f.tmp" "$f"
"""


@contextlib.contextmanager
def feature_cluster(prefix: str, extra: str, **kw):
    """A private cluster whose slurm.conf gets node features and ``extra`` lines."""
    with private_cluster(prefix, **kw) as c:
        c.down()
        with open(c.conf) as fh:
            text = fh.read()
        text = re.sub(r"^(NodeName=(node\d+)\b.*)$",
                      lambda m: m.group(1) + (f" Features={FEATURES[m.group(2)]}"
                                              if m.group(2) in FEATURES else ""),
                      text, flags=re.M)
        with open(c.conf, "w") as fh:
            fh.write(text + "\n" + extra + "\n")
        r = c.run(["muster", "up", "--no-link", "--state-dir", c.state_dir, "--config", c.conf])
        assert r.rc == 0, r
        yield c


@pytest.fixture(scope="module")
def c():
    base = "/tmp/muster-mailprog"
    os.makedirs(base, exist_ok=True)
    os.chmod(base, 0o755)
    mails = os.path.join(base, f"out-{os.getpid()}")
    os.makedirs(mails, exist_ok=True)
    prog = os.path.join(base, "mailprog.sh")
    with open(prog, "w") as fh:
        fh.write(MAILPROG.replace("{dir}", base + f"/out-{os.getpid()}"))
    os.chmod(prog, 0o755)
    extra = (f"MailProg={prog}\nPriorityWeightPartition=1000\n"
             "PartitionName=gpud Nodes=node[1-4] DefCpuPerGPU=3 DefMemPerGPU=1000 State=UP "
             "MaxTime=INFINITE")
    with feature_cluster("muster-placeopt-", extra, nodes=4, gpus=4, cpus=16) as cl:
        cl.mails = mails
        yield cl


def nodes_of(c, jid) -> set[str]:
    from muster.common.hostlist import expand
    c.wait_done(jid)
    return set(expand(c.job(jid)["nodes"]))


def field(c, jid, fmt) -> str:
    return c.run(["squeue", "-h", "-j", str(jid), "-o", fmt]).out.strip()


def refused(c, *args) -> str:
    r = c.run(["sbatch", *args, "--wrap", "true"], cwd=c.workdir)
    assert r.rc != 0, r
    return r.err


def test_node_features_are_shown(c):
    out = c.ok("sinfo", "-N", "-h", "-o", "%N %f %b").split("\n")
    rows = {line.split()[0]: line.split()[1:] for line in out if line.strip()}
    assert rows["node1"] == ["h100,ib", "h100,ib"]
    assert rows["node4"] == ["a100,old", "a100"]
    show = c.ok("scontrol", "show", "node", "node4")
    assert "AvailableFeatures=a100,old" in show and "ActiveFeatures=a100" in show


def test_constraint_selects_nodes(c):
    w = c.workdir
    h = c.sbatch("-N2", "-C", "h100", "--wrap", "true", cwd=w)
    either = c.sbatch("-N4", "-C", "a100|h100", "--wrap", "true", cwd=w)
    one_kind = c.sbatch("-N2", "--exclusive", "-C", "[a100|h100]", "--wrap", "true", cwd=w)
    counted = c.sbatch("-N3", "-C", "ib*2", "--wrap", "true", cwd=w)
    assert nodes_of(c, h) == {"node1", "node2"}
    assert nodes_of(c, either) == {"node1", "node2", "node3", "node4"}
    assert nodes_of(c, one_kind) in ({"node1", "node2"}, {"node3", "node4"})
    got = nodes_of(c, counted)
    assert len(got) == 3 and {"node1", "node2"} <= got
    # a job of one feature never lands elsewhere, even with the other nodes idle
    for _ in range(2):
        j = c.sbatch("-C", "ib&h100", "--wrap", "true", cwd=w)
        assert nodes_of(c, j) <= {"node1", "node2"}
    job = c.ok("scontrol", "show", "job", str(h))
    assert "Features=h100" in job


def test_constraint_refusals(c):
    assert "Invalid feature specification" in refused(c, "-C", "nosuch")
    assert "Invalid feature specification" in refused(c, "-C", "h100&&a100")
    # three nodes of one kind do not exist; either kind for each node does
    assert "Requested node configuration is not available" in refused(
        c, "-N3", "-C", "[a100|h100]")
    # "old" is a listed feature of node4, but not an active one
    assert "Requested node configuration is not available" in refused(c, "-C", "old")


def test_scontrol_update_features_mail_and_deadline_of_a_pending_job(c):
    """Features, MailType/MailUser and Deadline are updatable (re-checked as at submit); the
    job keeps its queue age and then lands where its new constraint says."""
    w = c.workdir
    jid = c.sbatch("-H", "-C", "a100", "--wrap", "true", cwd=w)
    submit = field(c, jid, "%V")
    r = c.run(["scontrol", "update", f"JobId={jid}", "Features=nosuch"])
    assert (r.rc, r.err) == (1, "slurm_update error: Invalid feature specification\n"), r
    c.ok("scontrol", "update", f"JobId={jid}", "Features=h100", "MailType=END",
         "MailUser=root")
    show = c.ok("scontrol", "show", "job", str(jid))
    assert "Features=h100" in show and "MailType=END" in show and "MailUser=root" in show, show
    c.ok("scontrol", "update", f"JobId={jid}", "Deadline=now+1hour")
    assert "Deadline=N/A" not in c.ok("scontrol", "show", "job", str(jid))
    assert field(c, jid, "%V") == submit  # queue age kept
    c.ok("scontrol", "release", str(jid))
    assert nodes_of(c, jid) <= {"node1", "node2"}


def test_squeue_start_plans_on_matching_nodes_only(c):
    w = c.workdir
    busy = c.sbatch("-N2", "--exclusive", "-C", "h100", "-t", "2", "--wrap", "sleep 30", cwd=w)
    c.wait_state(busy, "RUNNING")
    try:
        waiting = c.sbatch("-C", "h100", "-t", "1", "--wrap", "true", cwd=w)
        wait_for(lambda: field(c, waiting, "%r") == "Resources", what="h100 job waits")
        planned = wait_for(lambda: (v := field(c, waiting, "%Y")) not in ("", "(null)") and v,
                           what="planned nodes")
        assert planned in ("node1", "node2")
        start = c.run(["squeue", "--start", "-h", "-j", str(waiting)]).out
        assert str(waiting) in start and "N/A" not in start.split()[5]
    finally:
        c.run(["scancel", str(busy)])
    assert nodes_of(c, waiting) <= {"node1", "node2"}


def alloc(c, jid) -> tuple[int, str]:
    c.wait_done(jid)
    show = c.ok("scontrol", "show", "job", str(jid))
    tres = re.search(r"AllocTRES=(\S+)", show).group(1)
    return int(c.job(jid)["cpus"]), dict(kv.split("=") for kv in tres.split(","))["mem"]


def test_cpus_and_memory_per_gpu(c):
    w = c.workdir
    j = c.sbatch("--cpus-per-gpu=4", "--gres=gpu:2", "--wrap", "true", cwd=w)
    assert alloc(c, j)[0] == 8
    assert "CpusPerTres=gres:gpu:4" in c.ok("scontrol", "show", "job", str(j))
    j = c.sbatch("--mem-per-gpu=1500", "--gres=gpu:2", "--wrap", "true", cwd=w)
    assert alloc(c, j)[1] == "3000M"
    # --gpus spread over nodes: each node's memory follows its own GPUs
    j = c.sbatch("--mem-per-gpu=1024", "--gpus=6", "-N2", "--wrap", "true", cwd=w)
    assert alloc(c, j)[1] == "6G"
    # partition defaults: DefCpuPerGPU=3, DefMemPerGPU=1000
    j = c.sbatch("-p", "gpud", "--gres=gpu:2", "--wrap", "true", cwd=w)
    assert alloc(c, j) == (6, "2000M")
    assert "Invalid generic resource" in refused(c, "--cpus-per-gpu=2")
    assert "Invalid generic resource" in refused(c, "--mem-per-gpu=100")
    assert "Invalid license specification" in refused(c, "-L", "matlab")


def test_nice_lowers_priority_and_reorders_equal_jobs(c):
    w = c.workdir
    block = c.sbatch("-w", "node4", "--exclusive", "-t", "1", "--wrap", "sleep 4", cwd=w)
    c.wait_state(block, "RUNNING")
    nice = c.sbatch("-w", "node4", "--exclusive", "--nice=100", "-t", "1", "--wrap", "sleep 1",
                    cwd=w, user="mustertest")
    plain = c.sbatch("-w", "node4", "--exclusive", "-t", "1", "--wrap", "sleep 1", cwd=w,
                     user="mustertest")
    wait_for(lambda: field(c, nice, "%Q") == "900" and field(c, plain, "%Q") == "1000",
             what="priorities with nice")
    row = [line.split() for line in c.ok("sprio", "-l", "-j", str(nice)).splitlines()[1:]]
    assert row and row[0][3] == "900" and row[0][11] == "100"  # PRIORITY ... NICE
    assert c.wait_done(nice, timeout=60) == "COMPLETED"
    start = {j: c.run(["sacct", "-j", str(j), "-X", "-n", "-P", "-o", "Start"]).out.strip()
             for j in (nice, plain)}
    assert start[plain] < start[nice]  # submitted later, started first
    # a negative nice is for operators only
    r = c.run(["sbatch", "--nice=-5", "--wrap", "true"], cwd=w, user="mustertest")
    assert r.rc != 0 and "Invalid --nice value" in r.err


def test_deadline(c):
    w = c.workdir
    block = c.sbatch("-w", "node3", "--exclusive", "-t", "1", "--wrap", "sleep 20", cwd=w)
    c.wait_state(block, "RUNNING")
    try:
        # needs a minute, the deadline leaves 62 s: it misses it within seconds while waiting
        late = c.sbatch("-w", "node3", "-t", "1", "--deadline", "now+62seconds",
                        "--wrap", "true", cwd=w)
        past = c.sbatch("-t", "1", "--deadline", "now-1", "--wrap", "true", cwd=w)
        assert c.wait_state(past, "DEADLINE", timeout=10) == "DEADLINE"
        assert c.wait_state(late, "DEADLINE", timeout=15) == "DEADLINE"
        show = c.ok("scontrol", "show", "job", str(late))
        assert "JobState=DEADLINE Reason=DeadLine" in show and "Deadline=20" in show
    finally:
        c.run(["scancel", str(block)])
    # as in Slurm, the time limit must fit before the deadline ...
    full = c.sbatch("-t", "30", "--deadline", "now+5minutes", "--wrap", "true", cwd=w)
    assert c.wait_state(full, "DEADLINE", timeout=10) == "DEADLINE"
    # ... or --time-min: the job then starts with its limit cut to the deadline
    cut = c.sbatch("-t", "30", "--time-min", "2", "--deadline", "now+5minutes",
                   "--wrap", "sleep 1", cwd=w)
    c.wait_state(cut, ("RUNNING", "COMPLETED"))
    assert re.search(r"TimeLimit=00:0[45]:00", c.ok("scontrol", "show", "job", str(cut)))


def mails(c, n, timeout=20.0) -> list[list[str]]:
    def got():
        files = sorted(f for f in glob.glob(os.path.join(c.mails, "mail.*"))
                       if not f.endswith(".tmp"))
        return files if len(files) >= n else None
    out = []
    for f in wait_for(got, timeout, what=f"{n} mails"):
        with open(f) as fh:
            out.append(fh.read().splitlines())
    return out


def test_mail_through_mailprog(c):
    for f in glob.glob(os.path.join(c.mails, "mail.*")):
        os.unlink(f)
    j = c.sbatch("-J", "mailtest", "--mail-type=BEGIN,END", "--mail-user=ops@example.org",
                 "--wrap", "sleep 1", cwd=c.workdir, user="mustertest")
    assert c.wait_done(j) == "COMPLETED"
    got = mails(c, 2)
    begin = next(m for m in got if "Began" in m[1])
    end = next(m for m in got if "Ended" in m[1])
    assert begin[0] == "-s" and begin[2] == "ops@example.org"
    assert re.fullmatch(rf"Slurm Job_id={j} Name=mailtest Began, Queued time 00:00:0\d",
                        begin[1])
    assert re.fullmatch(rf"Slurm Job_id={j} Name=mailtest Ended, Run time 00:00:0\d, "
                        r"COMPLETED, ExitCode 0", end[1])
    assert begin[3:] == ["--stdin--", "--env--", "SLURM_JOB_MAIL_TYPE=Began"]
    # FAIL only, default recipient: the job's user
    f = c.sbatch("-J", "failing", "--mail-type=FAIL", "--wrap", "exit 3", cwd=c.workdir,
                 user="mustertest")
    assert c.wait_done(f) == "FAILED"
    fail = [m for m in mails(c, 3) if "Failed" in m[1]]
    assert fail and fail[0][2] == "mustertest"
    assert re.fullmatch(rf"Slurm Job_id={f} Name=failing Failed, Run time 00:00:0\d, FAILED, "
                        r"ExitCode 3", fail[0][1])
    time.sleep(0.5)  # nothing else arrives: one mail per event
    assert len(glob.glob(os.path.join(c.mails, "mail.*"))) == 3


def test_priority_basic_counts_down_by_submission():
    with private_cluster("muster-prio-basic-", nodes=1, gpus=0, cpus=2,
                         extra_conf="PriorityType=priority/basic") as b:
        w = b.workdir
        block = b.sbatch("-c", "2", "-t", "1", "--wrap", "sleep 3", cwd=w)
        b.wait_state(block, "RUNNING")
        nice = b.sbatch("-c", "2", "--nice=100", "--wrap", "true", cwd=w)
        plain = b.sbatch("-c", "2", "--wrap", "true", cwd=w)
        top = 0xFFFF0000
        wait_for(lambda: field(b, nice, "%Q") == str(top - nice - 100)
                 and field(b, plain, "%Q") == str(top - plain), what="priority/basic values")
        r = b.run(["sprio"])
        assert r.rc != 0 and "priority/multifactor" in r.err
        b.wait_done(nice, timeout=30)
        start = {j: b.run(["sacct", "-j", str(j), "-X", "-n", "-P", "-o", "Start"]).out.strip()
                 for j in (nice, plain)}
        assert start[plain] <= start[nice]
        assert b.state_of(plain) == "COMPLETED"
