"""Usage accounting end to end: real jobs on real daemons, sampled from /proc by the node's
supervisors and step daemons, through the controller to sstat, sacct and seff.

Ground truth is what the job measures of itself (getrusage, os.times): the tools must agree
with it within 10%."""

import json
import os
import sys

import pytest

from cluster import TEST_USER, TEST_USER2, private_cluster, user_exists, wait_for

MB = 1 << 20

# Holds MEGS MB (every page touched), reports its own peak RSS and CPU time, and waits for the
# test's "stop" file while it burns BURN seconds of CPU first.
HOLDER = r"""
import json, os, resource, sys, time
megs, burn, tag = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
buf = bytearray(megs << 20)
for i in range(0, len(buf), 4096):
    buf[i] = 1
t0 = time.process_time()
while time.process_time() - t0 < burn:
    pass
open(tag + ".ready", "w").close()
while not os.path.exists(tag + ".stop"):
    time.sleep(0.05)
t = os.times()
cg = None  # what the kernel charged to our cgroup so far (v1 cpuacct), if we may read it
for line in open("/proc/self/cgroup"):
    _, ctrls, path = line.rstrip("\n").split(":", 2)
    for mount in ("cpuacct", "cpu,cpuacct"):
        if "cpuacct" in ctrls.split(",") and os.path.exists(f"/sys/fs/cgroup/{mount}{path}"):
            with open(f"/sys/fs/cgroup/{mount}{path}/cpuacct.usage") as fh:
                cg = int(fh.read()) / 1e9
with open(tag + ".json", "w") as fh:
    json.dump({"maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
               "cpu": t.user + t.system, "cg": cg}, fh)
"""


@pytest.fixture(scope="module")
def c():
    if os.getuid() != 0 or not (user_exists(TEST_USER) and user_exists(TEST_USER2)):
        pytest.skip("needs root and the two test users")
    with private_cluster("muster-usage-", nodes=2, gpus=0, cpus=4, mem=8000, partitions="gpu",
                         extra_conf="JobAcctGatherFrequency=task=1") as cl:
        with open(os.path.join(cl.workdir, "holder.py"), "w") as fh:
            fh.write(HOLDER)
        yield cl


def size(text: str) -> float:
    """A Slurm size (``153016K``, ``1.50G``, ``123``) in bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)


def cpu_secs(text: str) -> float:
    """TotalCPU ``MM:SS.mmm`` / ``HH:MM:SS`` in seconds."""
    secs = 0.0
    for part in text.split("-")[-1].split(":"):
        secs = secs * 60 + float(part)
    return secs


def shell_times(path: str) -> float:
    """The CPU seconds a POSIX shell's ``times`` printed: its own and its reaped children's,
    user and system (``0m0.010000s 0m0.000000s`` on two lines)."""
    def secs(field: str) -> float:
        m, _, s = field.rstrip("s").partition("m")
        return int(m) * 60 + float(s)
    with open(path) as fh:
        return sum(secs(f) for f in fh.read().split())


def sstat(c, spec, fields, user=TEST_USER):
    return c.run(["sstat", "-j", spec, "-P", "-n", "-o", fields], user=user)


def finish(c, tag, jid):
    open(os.path.join(c.workdir, tag + ".stop"), "w").close()
    assert c.wait_done(jid, timeout=120) == "COMPLETED"
    with open(os.path.join(c.workdir, tag + ".json")) as fh:
        return json.load(fh)


def test_sstat_shows_a_running_batch_steps_memory_to_its_owner_only(c):
    w = c.workdir
    jid = c.sbatch("--mem=1000", "--wrap", "python3 holder.py 200 0 live", user=TEST_USER, cwd=w)
    wait_for(lambda: os.path.exists(os.path.join(w, "live.ready")), 120, 0.1, what="job ready")

    def sampled():
        r = sstat(c, f"{jid}.batch", "JobID,MaxRSS,MaxRSSNode,MaxRSSTask,NTasks,AveRSS,MaxVMSize")
        assert r.rc == 0, r
        row = r.out.strip().split("|")
        return row if row[1] and size(row[1]) >= 200 * MB else None
    row = wait_for(sampled, 60, 0.2, what="a sample with the 200 MB held")
    node = c.job(jid)["nodes"]
    assert row[0] == f"{jid}.batch" and row[2] == node and row[3] == "0" and row[4] == "1"
    assert 200 * MB <= size(row[1]) < 260 * MB
    assert size(row[5]) >= 200 * MB and size(row[6]) >= size(row[1])
    # the default layout is Slurm's (JobID first, then MaxVMSize...), the job's own step
    out = c.run(["sstat", "-j", f"{jid}.batch"], user=TEST_USER).out.splitlines()
    assert out[0].split()[:3] == ["JobID", "MaxVMSize", "MaxVMSizeNode"]
    assert out[2].split()[0] == f"{jid}.batch"
    # the job alone (no step) is its lowest running step: here the batch step
    assert sstat(c, str(jid), "JobID").out.strip() == f"{jid}.batch"
    other = sstat(c, f"{jid}.batch", "JobID", user=TEST_USER2)
    assert other.rc != 0 and "Access/permission denied" in other.err and other.out == ""
    assert sstat(c, f"{jid}.batch", "MaxRSS", user="root").out.strip()  # operators see all
    # the dashboard's view: the job's use beside its allocation
    dash = json.loads(c.ok(sys.executable, "-c", "import json; from muster.cli.client import "
                           "call; print(json.dumps(call({'op': 'dash'})))"))
    cols = dash["job_columns"]
    mine = next(r for r in dash["jobs"] if r[cols.index("id")] == jid)
    cpu, rss, gpu = mine[cols.index("use")]
    assert rss >= 200 * MB and cpu >= 0 and gpu is None and mine[cols.index("mem")] == 1000
    did = finish(c, "live", jid)
    assert did["maxrss"] >= 200 * MB
    # ended: nothing runs any more
    r = c.run(["sstat", "-j", str(jid)], user=TEST_USER)
    assert r.rc != 0 and f"no steps running for job {jid}" in r.err


def test_sacct_and_seff_agree_with_what_the_job_did(c):
    w = c.workdir
    # What the step used, two ways: the batch shell's ``times`` (the shell, the interpreter's
    # start-up and exit, which the job's own os.times() cannot see, and the job) and, as
    # the job ends, the kernel's CPU counter of its task cgroup (one of the agent's sources).
    # sacct must land within 10 % of the range the two span. (It ran 13-25 % above it in
    # loaded CI runs while the agent took the cgroup's tick samples, usage_user+usage_sys,
    # over its exact runtime; cgroup.py's _precise_cpu.)
    jid = c.sbatch("--mem=1000", "--wrap", "python3 holder.py 150 2 burn; times > burn.times",
                   user=TEST_USER, cwd=w)
    wait_for(lambda: os.path.exists(os.path.join(w, "burn.ready")), 120, 0.1, what="job ready")
    did = finish(c, "burn", jid)
    assert did["cpu"] >= 2
    did["cpu"] = shell_times(os.path.join(w, "burn.times"))
    low, high = did["cpu"], max(did["cpu"], did["cg"] or 0)

    def agrees(secs: float) -> bool:
        return 0.9 * low <= secs <= 1.1 * high
    r = c.run(["sacct", "-j", str(jid), "-P", "-n", "-o",
               "JobID,MaxRSS,TotalCPU,UserCPU,MaxRSSTask,AveRSS,TRESUsageInMax,TRESUsageInTot"])
    assert r.rc == 0, r
    rows = {line.split("|")[0]: line.split("|") for line in r.out.splitlines()}
    job, batch = rows[str(jid)], rows[f"{jid}.batch"]
    assert job[1] == ""  # the allocation's row has no MaxRSS, only the CPU totals
    assert abs(size(batch[1]) - did["maxrss"]) <= 0.1 * did["maxrss"], (batch, did)
    assert agrees(cpu_secs(batch[2])), (batch, did)
    assert cpu_secs(job[2]) == cpu_secs(batch[2])
    assert cpu_secs(batch[3]) <= cpu_secs(batch[2]) and batch[4] == "0"
    assert batch[5] == batch[1]  # one task: its average is its peak
    tres = dict(kv.split("=", 1) for kv in batch[6].split(","))
    assert set(tres) >= {"cpu", "energy", "fs/disk", "mem", "pages", "vmem"}
    assert tres["mem"] == batch[1] and tres["cpu"].startswith("00:00:0")
    assert "mem=" in batch[7]
    seff = c.run(["seff", str(jid)], user=TEST_USER)
    assert seff.rc == 0, seff
    lines = dict(line.split(": ", 1) for line in seff.out.splitlines())
    assert lines["Job ID"] == str(jid) and lines["State"] == "COMPLETED (exit code 0)"
    assert lines["Cores"] == "1" and lines["User/Group"] == f"{TEST_USER}/{TEST_USER}"
    # seff prints whole seconds (Slurm's seff rounds the job's total half up): it must be the
    # total sacct printed, rounded -- a band around the job's own figures would fail on the
    # rounding alone (2.5 s is within it and prints as 00:00:03)
    total = cpu_secs(job[2])
    assert cpu_secs(lines["CPU Utilized"]) == int(total + 0.5), (lines, job, did)
    num, unit = lines["Memory Utilized"].split()
    mem = float(num) * {"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}[unit]
    assert abs(mem - did["maxrss"]) <= 0.1 * did["maxrss"], (lines, did)
    assert lines["Memory Efficiency"].endswith("of 1000.00 MB (1000.00 MB/node)")
    assert lines["CPU Efficiency"].endswith("core-walltime")


def test_multi_task_step_names_the_task_and_node_with_the_peak(c):
    """srun -N2: the task holding the most memory is named (MaxRSSTask, MaxRSSNode), AveRSS
    lies between the tasks; live through sstat, final through sacct."""
    w = c.workdir
    script = os.path.join(w, "two.sh")
    with open(script, "w") as fh:
        fh.write("#!/bin/sh\nsrun -N2 -n2 sh -c "
                 "'python3 holder.py $((20 + 100 * SLURM_PROCID)) 0 two$SLURM_PROCID'\n")
    jid = c.sbatch("-N2", "-n2", "--mem=1000", script, user=TEST_USER, cwd=w)
    for k in (0, 1):
        wait_for(lambda k=k: os.path.exists(os.path.join(w, f"two{k}.ready")), 120, 0.1,
                 what=f"task {k} ready")

    def sampled():  # both nodes have sent a sample taken since their task holds its memory
        r = sstat(c, str(jid), "JobID,NTasks,MaxRSS,MaxRSSTask,MaxRSSNode,AveRSS,"
                  "TRESUsageInMin,TRESUsageInMinTask")
        row = r.out.strip().split("|")
        if len(row) != 8 or not row[6]:
            return None
        low = dict(kv.split("=", 1) for kv in row[6].split(","))
        low_task = dict(kv.split("=", 1) for kv in row[7].split(","))
        both = low_task["mem"] == "0" and row[3] == "1"  # the min from task 0, the max task 1
        return row if both and size(low["mem"]) >= 20 * MB and size(row[2]) >= 120 * MB else None
    row = wait_for(sampled, 60, 0.2, what="both tasks sampled")
    nodes = c.ok("scontrol", "show", "hostnames", c.job(jid)["nodes"]).split()
    assert row[0] == f"{jid}.0" and row[1] == "2" and row[3] == "1"
    assert row[4] in nodes and 60 * MB <= size(row[5]) <= 110 * MB, row
    for k in (0, 1):
        open(os.path.join(w, f"two{k}.stop"), "w").close()
    assert c.wait_done(jid, timeout=120) == "COMPLETED"
    r = c.run(["sacct", "-j", f"{jid}.0", "-P", "-n", "-o",
               "JobID,NTasks,MaxRSSTask,MaxRSSNode,MinCPUTask,TRESUsageInMaxTask"])
    step = r.out.strip().split("|")
    assert step[0] == f"{jid}.0" and step[2] == "1" and step[3] == row[4], (r, row)
    assert step[4] in ("0", "1") and "mem=1" in step[5].split(",")


def test_bad_input_is_refused_as_slurm_does(c):
    def run(*argv, user=TEST_USER):
        return c.run(list(argv), user=user)
    r = run("sstat")
    assert r.rc == 1 and r.err == "sstat: error: You didn't give me any jobs to stat.\n"
    r = run("sstat", "-j", "abc")
    assert r.rc == 1 and r.err == "sstat: fatal: Bad job/step specified: abc\n"
    r = run("sstat", "-j", "1", "-o", "MaxRSS,Bogus")
    assert r.rc == 1 and r.err == 'sstat: error: Invalid field requested: "Bogus"\n'
    r = run("sstat", "-j", "999999")
    assert r.rc == 1 and r.err == "sstat: error: couldn't get steps for job 999999\n"
    r = run("sstat", "--bogus")
    assert r.rc == 1 and "unrecognized option '--bogus'" in r.err and "Traceback" not in r.err
    r = run("seff", "999999")
    assert r.rc == 2 and r.err == "Job not found.\n"
    r = run("seff")
    assert r.rc == 1 and r.out.startswith("Usage: seff [Options] <Jobid>")
    r = run("sacct", "-o", "MaxRSS,NoSuchField")
    assert r.rc == 1 and 'Invalid field requested: "NoSuchField"' in r.err


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def _uid_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("Uid:"))
    except (OSError, StopIteration):
        return None


def test_sstat_pidformat_lists_the_running_steps_processes(c):
    """``sstat -i``: the step's processes on each node, from the node's latest sample: the
    task's own pid (the shell's ``$$``) and its child's are among them, and every one runs
    as the job's owner; only the owner and operators see them."""
    import pwd
    w = c.workdir
    with open(os.path.join(w, "pids.sh"), "w") as fh:
        fh.write("#!/bin/sh\nsrun -N1 -n1 bash -c 'echo $$ > task.$SLURM_JOB_ID; sleep 300; true'\n")
    jid = c.sbatch("-N1", "pids.sh", user=TEST_USER, cwd=w)
    try:
        mark = os.path.join(w, f"task.{jid}")
        task_pid = wait_for(lambda: _read(mark), 120, 0.1, what="the task's pid")

        def listed():
            r = c.run(["sstat", "-i", "-P", "-n", "-j", f"{jid}.0"], user=TEST_USER)
            assert r.rc == 0, r
            rows = [line.split("|") for line in r.out.splitlines()]
            return rows if rows and task_pid in rows[0][2].split(",") else None
        rows = wait_for(listed, 60, 0.2, what="a sample listing the task's pid")
        node = c.job(jid)["nodes"]
        assert len(rows) == 1 and rows[0][:2] == [f"{jid}.0", node], rows
        pids = [int(p) for p in rows[0][2].split(",")]
        assert len(pids) >= 2, rows  # the shell and its child: every process of the task
        owner = pwd.getpwnam(TEST_USER).pw_uid
        assert {_uid_of(p) for p in pids} <= {owner, None}, rows  # None: ended since the sample
        # the layouts: fixed width (Slurm's 20 columns) and Pids on request without -i
        out = c.run(["sstat", "-i", "-j", f"{jid}.0"], user=TEST_USER).out.splitlines()
        assert out[0].split() == ["JobID", "Nodelist", "Pids"] and out[2].split()[:2] == [
            f"{jid}.0", node], out
        plain = c.run(["sstat", "-P", "-n", "-o", "JobID,Pids", "-j", f"{jid}.0"], user="root")
        assert plain.rc == 0 and task_pid in plain.out.strip().split("|")[1].split(","), plain
        other = c.run(["sstat", "-i", "-P", "-j", f"{jid}.0"], user=TEST_USER2)
        assert other.rc != 0 and "Access/permission denied" in other.err, other
        assert task_pid not in other.out
    finally:
        c.run(["scancel", str(jid)])
    c.wait_done(jid, timeout=60)
    r = c.run(["sstat", "-i", "-P", "-n", "-j", f"{jid}.0"], user=TEST_USER)
    assert r.out == "" and task_pid not in r.err, r  # ended: its pids are gone with it
