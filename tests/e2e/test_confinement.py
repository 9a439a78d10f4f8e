"""Confinement (issue 14): every job is held to what it was given, on real daemons and real
cgroups (a 2-node cluster of its own, made by `muster up`, which turns confinement on when it
runs as root with a writable cgroup hierarchy).

* memory: ``--mem=100M`` and 500 MB allocated → the OOM killer strikes in the job's cgroup,
  the job ends OUT_OF_MEMORY with ExitCode 0:125 and Slurm's line on its stderr, while a
  neighbour on the same node completes;
* CPUs: ``nproc`` in a ``-c 2`` job, and in an srun step inside it, prints 2;
* processes: a daemon double-forked out of the job's session (``setsid``) does not outlive
  the job, whether it ends by itself or by scancel, and the job's cgroup is removed;
* escape: a job (run as an ordinary user) cannot move itself out of its cgroup.
"""

import glob
import os
import re
import subprocess
import sys

import pytest

from cluster import TEST_USER, _alive, private_cluster, read, start_agent, user_exists, wait_for

ALLOCATE = r'''
import sys
chunks = []
for _ in range(50):  # 500 MB in 10 MB pieces, each one written (resident, not just mapped)
    chunks.append(bytearray(b"\x01") * (10 << 20))
print("allocated", len(chunks) * 10, "MB")
'''

# $1: where the daemon's pid goes. The daemon leaves the batch shell's session and process
# group (setsid) and is orphaned at once (its parent shell ends), as `nohup cmd &` in a
# login script would be; no session-based kill can find it.
DAEMON = r'''#!/bin/sh
setsid sh -c 'sleep 1000 & echo $! > "$0.tmp"; mv "$0.tmp" "$0"' "$1" &
while [ ! -s "$1" ]; do sleep 0.05; done
echo "daemon $(cat "$1")"
if [ -n "$2" ]; then exec sleep 1000; fi
'''

ESCAPE = r'''
import os
tried = []
for line in open("/proc/self/cgroup"):
    hid, ctrls, path = line.rstrip("\n").split(":", 2)
    if "/job_" not in path:
        continue
    mount = "/sys/fs/cgroup" if hid == "0" else "/sys/fs/cgroup/" + ctrls
    for where in (os.path.dirname(path), "/"):  # the parent (the step), the very top
        target = os.path.join(mount + where, "cgroup.procs")
        if not os.path.exists(target):
            continue
        try:
            with open(target, "w") as fh:
                fh.write(str(os.getpid()))
            print("MOVED", target)
        except OSError as exc:
            print("REFUSED", target, exc.errno)
print("AFTER", " ".join(l.split(":", 2)[2] for l in open("/proc/self/cgroup").read().split()))
'''


def _confined_here() -> bool:
    """Whether `muster up` turns confinement on here (root, a writable hierarchy)."""
    if os.geteuid() != 0:
        return False
    from muster.agent.cgroup import open_hierarchy
    return open_hierarchy() is not None


pytestmark = pytest.mark.skipif(not _confined_here(),
                                reason="confinement needs root and a writable cgroup hierarchy")


@pytest.fixture(scope="module")
def cc():
    if not user_exists(TEST_USER):
        pytest.fail(f"test user {TEST_USER} missing")
    with private_cluster("muster-confine-", nodes=2, gpus=0, cpus=4, mem=4000,
                         extra_conf="KillWait=5") as c:
        for name, text in (("allocate.py", ALLOCATE), ("daemon.sh", DAEMON),
                           ("escape.py", ESCAPE)):
            path = os.path.join(c.workdir, name)
            with open(path, "w") as fh:
                fh.write(text)
            os.chmod(path, 0o755)
        yield c


def sacct_rows(c, jid: int) -> dict[str, tuple[str, str]]:
    """JobID → (State, ExitCode) for the job and its steps."""
    out = c.ok("sacct", "-j", str(jid), "-P", "-n", "-o", "JobID,State,ExitCode")
    return {r.split("|")[0]: tuple(r.split("|")[1:3]) for r in out.splitlines() if r}


def job_cgroups(c, jid: int) -> list[str]:
    """The job's cgroup directories in the cluster's node trees (every controller)."""
    found = []
    for tree in glob.glob(os.path.join(c.state_dir, "spool", "*", "cgroup.tree")):
        base = read(tree).split("\n")[2]
        found += glob.glob(f"/sys/fs/cgroup/*/{base}/job_{jid}") + \
            glob.glob(f"/sys/fs/cgroup/{base}/job_{jid}")
    return found


def test_confinement_is_on(cc):
    text = read(cc.conf)
    assert "ProctrackType=proctrack/cgroup" in text
    assert "TaskPlugin=task/cgroup,task/affinity" in text
    conf = read(os.path.join(cc.state_dir, "cgroup.conf"))
    for key in ("ConstrainCores=yes", "ConstrainRAMSpace=yes", "ConstrainSwapSpace=yes",
                "AllowedSwapSpace=0", "ConstrainDevices=yes"):
        assert key in conf


def _kernel_at_least(major: int, minor: int) -> bool:
    m = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (major, minor)


@pytest.mark.skipif(not _kernel_at_least(6, 0), reason="favordynmods needs Linux 6.0+")
def test_the_agent_leaves_the_cgroup2_root_favouring_dynamic_migrations(cc):
    """MusterFavorDynMods (default yes): once the agent confines jobs, the cgroup2 root has
    favordynmods (set by it, or there before: its log says which, in one line)."""
    from muster.agent.cgroup import FAVOR_DYNMODS, cgroup2_mounts
    assert any(FAVOR_DYNMODS in opts for _p, _m, opts in cgroup2_mounts()), cgroup2_mounts()
    logs = "".join(read(p) for p in glob.glob(os.path.join(cc.state_dir, "log", "musterd*.log")))
    lines = [ln for ln in logs.splitlines() if FAVOR_DYNMODS in ln]
    assert lines and all("cannot" not in ln for ln in lines), lines


def test_out_of_memory_job_ends_oom_and_its_neighbour_completes(cc):
    d = cc.workdir
    oom_out = os.path.join(d, "oom.out")
    nb_out = os.path.join(d, "neighbour.out")
    oom = cc.sbatch("-w", "node1", "--mem=100M", "-o", oom_out, "--wrap",
                    f"{sys.executable} {d}/allocate.py", user=TEST_USER)
    nb = cc.sbatch("-w", "node1", "--mem=100M", "-o", nb_out, "--wrap",
                   f"{sys.executable} -c 'x = bytearray(20 << 20); print(\"neighbour ok\")'",
                   user=TEST_USER)
    assert cc.wait_done(oom, timeout=120) == "OUT_OF_MEMORY", read(oom_out)
    assert cc.wait_done(nb, timeout=120) == "COMPLETED", read(nb_out)
    assert cc.job(oom)["exit"] == "0:125"
    text = read(oom_out)
    assert "allocated" not in text
    assert re.search(rf"slurmstepd: error: Detected \d+ oom-kill event\(s\) in "
                     rf"StepId={oom}\.batch cgroup\. Some of your processes may have been "
                     r"killed by the cgroup out-of-memory handler\.", text), text
    rows = sacct_rows(cc, oom)
    assert rows[str(oom)] == ("OUT_OF_MEMORY", "0:125"), rows
    assert rows[f"{oom}.batch"] == ("OUT_OF_MEMORY", "0:125"), rows
    assert "neighbour ok" in read(nb_out)
    assert sacct_rows(cc, nb)[str(nb)] == ("COMPLETED", "0:0")


def test_oom_in_an_srun_step_marks_the_step(cc):
    out = os.path.join(cc.workdir, "step-oom.out")
    jid = cc.sbatch("-w", "node2", "--mem=100M", "-o", out, "--wrap",
                    f"srun {sys.executable} {cc.workdir}/allocate.py; echo srun=$?",
                    user=TEST_USER)
    assert cc.wait_done(jid, timeout=120) == "COMPLETED", read(out)
    text = read(out)
    assert re.search(rf"Detected \d+ oom-kill event\(s\) in StepId={jid}\.0 cgroup", text), text
    assert "srun: error: node2: task 0: Out Of Memory" in text, text
    assert sacct_rows(cc, jid)[f"{jid}.0"] == ("OUT_OF_MEMORY", "0:125")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_nproc_sees_the_cpus_of_the_job(cc):
    out = os.path.join(cc.workdir, "nproc.out")
    jid = cc.sbatch("-c", "2", "-o", out, "--wrap", "echo batch=$(nproc); srun nproc",
                    user=TEST_USER)
    assert cc.wait_done(jid, timeout=60) == "COMPLETED", read(out)
    lines = read(out).split()
    assert lines == ["batch=2", "2"], lines
    one = os.path.join(cc.workdir, "nproc1.out")
    jid = cc.sbatch("-c", "1", "-o", one, "--wrap", "nproc", user=TEST_USER)
    assert cc.wait_done(jid, timeout=60) == "COMPLETED"
    assert read(one).split() == ["1"]


def _daemon_pid(path: str) -> int:
    return int(wait_for(lambda: read(path).strip(), timeout=60, what=f"daemon pid in {path}"))


def _is_our_sleep(pid: int) -> bool:
    """The daemon is alive (not a zombie) and still the `sleep 1000` we started."""
    return _alive(pid) and read(f"/proc/{pid}/cmdline") == "sleep\x001000\x00"


def test_double_forked_daemon_dies_with_the_job(cc):
    pidfile = os.path.join(cc.workdir, "daemon-end.pid")
    out = os.path.join(cc.workdir, "daemon-end.out")
    jid = cc.sbatch("-w", "node1", "-o", out, f"{cc.workdir}/daemon.sh", pidfile,
                    user=TEST_USER)
    assert cc.wait_done(jid, timeout=60) == "COMPLETED", read(out)
    pid = _daemon_pid(pidfile)
    assert f"daemon {pid}" in read(out)
    wait_for(lambda: not _is_our_sleep(pid), timeout=60, what=f"daemon {pid} gone")
    wait_for(lambda: not job_cgroups(cc, jid), timeout=60, what=f"job {jid}'s cgroups removed")


def test_double_forked_daemon_dies_on_scancel(cc):
    pidfile = os.path.join(cc.workdir, "daemon-cancel.pid")
    out = os.path.join(cc.workdir, "daemon-cancel.out")
    jid = cc.sbatch("-w", "node2", "-o", out, f"{cc.workdir}/daemon.sh", pidfile, "stay",
                    user=TEST_USER)
    pid = _daemon_pid(pidfile)
    assert _is_our_sleep(pid), "the daemon should run while its job runs"
    assert job_cgroups(cc, jid)
    cc.ok("scancel", str(jid))
    assert cc.wait_done(jid, timeout=60) == "CANCELLED"
    wait_for(lambda: not _is_our_sleep(pid), timeout=60, what=f"daemon {pid} gone")
    wait_for(lambda: not job_cgroups(cc, jid), timeout=60, what=f"job {jid}'s cgroups removed")


def test_a_restarted_agent_removes_the_cgroups_of_jobs_it_lost(cc):
    """The agent and the job's supervisor die (SIGKILL); the job's processes live on in its
    cgroup. The new agent finds no supervisor for the job: its cgroup is stale, and what is in
    it is killed and removed before the job's loss is reported."""
    pidfile = os.path.join(cc.workdir, "daemon-stale.pid")
    out = os.path.join(cc.workdir, "daemon-stale.out")
    jid = cc.sbatch("-w", "node2", "-o", out, f"{cc.workdir}/daemon.sh", pidfile, "stay",
                    user=TEST_USER)
    pid = _daemon_pid(pidfile)
    spool = glob.glob(os.path.join(cc.state_dir, "spool", "node2", f"job{jid}.*"))[0]
    supervisor = int(read(os.path.join(spool, "super.pid")))
    agent = cc.pids()["agents"]["node2"]
    os.kill(agent, 9)
    wait_for(lambda: not _alive(agent), timeout=30, what="agent gone")
    os.kill(supervisor, 9)
    wait_for(lambda: not _alive(supervisor), timeout=30, what="supervisor gone")
    assert _is_our_sleep(pid) and job_cgroups(cc, jid), "the job outlives its supervisor"
    start_agent(cc, "node2")
    wait_for(lambda: not _is_our_sleep(pid), timeout=60, what=f"daemon {pid} gone")
    wait_for(lambda: not job_cgroups(cc, jid), timeout=60, what=f"job {jid}'s cgroups removed")
    assert cc.wait_done(jid, timeout=60) in ("FAILED", "NODE_FAIL", "CANCELLED")


def test_a_lost_supervisor_s_job_is_killed_before_its_end_is_reported(cc):
    """The supervisor dies (SIGKILL) under a running agent: what it left in the job's cgroup
    is killed by the agent's worker thread (off its event loop), and only then is the job's
    end reported: by the time the job has ended, nothing of it runs."""
    pidfile = os.path.join(cc.workdir, "daemon-lost.pid")
    out = os.path.join(cc.workdir, "daemon-lost.out")
    jid = cc.sbatch("-w", "node1", "-o", out, f"{cc.workdir}/daemon.sh", pidfile, "stay",
                    user=TEST_USER)
    pid = _daemon_pid(pidfile)
    spool = glob.glob(os.path.join(cc.state_dir, "spool", "node1", f"job{jid}.*"))[0]
    supervisor = int(read(os.path.join(spool, "super.pid")))
    os.kill(supervisor, 9)
    state = cc.wait_done(jid, timeout=60)
    assert not _is_our_sleep(pid), f"job {jid} ended ({state}) with its daemon {pid} alive"
    assert state in ("FAILED", "NODE_FAIL", "CANCELLED")
    wait_for(lambda: not job_cgroups(cc, jid), timeout=60, what=f"job {jid}'s cgroups removed")
    logs = "".join(read(p) for p in glob.glob(os.path.join(cc.state_dir, "log", "musterd*.log")))
    assert f"job {jid} left processes or cgroups" in logs
    assert cc.wait_done(cc.sbatch("-w", "node1", "--wrap", "true"), timeout=60) == "COMPLETED"


def test_a_job_cannot_leave_its_cgroup(cc):
    out = os.path.join(cc.workdir, "escape.out")
    jid = cc.sbatch("-o", out, "--wrap", f"{sys.executable} {cc.workdir}/escape.py",
                    user=TEST_USER)
    assert cc.wait_done(jid, timeout=60) == "COMPLETED", read(out)
    text = read(out)
    assert "MOVED" not in text, text
    assert "REFUSED" in text, text
    after = re.search(r"AFTER (.*)", text).group(1).split()
    assert any(p.endswith(f"/job_{jid}/step_batch/task_0") for p in after), after


def _may_protect() -> bool:
    """Whether this host lets root set oom_score_adj -1000 (CAP_SYS_RESOURCE; some container
    sandboxes withhold it, and the agent then keeps the score it was started with)."""
    r = subprocess.run(["sh", "-c", "echo -1000 > /proc/self/oom_score_adj"],
                       capture_output=True)
    return r.returncode == 0


def test_the_oom_killer_spares_the_daemons_not_the_tasks(cc):
    out = os.path.join(cc.workdir, "oomscore.out")
    jid = cc.sbatch("-o", out, "--wrap",
                    "echo task=$(cat /proc/self/oom_score_adj) "
                    "supervisor=$(cat /proc/$PPID/oom_score_adj)", user=TEST_USER)
    assert cc.wait_done(jid, timeout=60) == "COMPLETED", read(out)
    daemon = "-1000" if _may_protect() else read("/proc/self/oom_score_adj").strip()
    assert read(out).split() == ["task=0", f"supervisor={daemon}"]


def test_a_job_whose_cgroup_cannot_be_set_up_fails_at_once(test_user):
    """ConstrainDevices with a GPU whose device file is not one: the agent cannot confine
    the GPUs, so it refuses the launch (JobLaunchFailure, the reason in its log) instead of
    running the job unconfined or leaving it hanging."""
    with private_cluster("muster-confine-bad-", nodes=1, gpus=1, cpus=2, mem=2000) as c:
        dev = os.path.join(c.state_dir, "dev", "node1", "nvidia0")
        if not os.path.exists(dev):
            pytest.skip("no emulated GPU device files here (nodev file system)")
        c.down()
        os.unlink(dev)
        open(dev, "w").close()  # a regular file where the GPU's device node was
        r = c.run(["muster", "up", "--no-link", "--state-dir", c.state_dir, "--config", c.conf])
        assert r.rc == 0, r
        out = os.path.join(c.workdir, "never.out")
        jid = c.sbatch("-o", out, "--wrap", "echo ran", user=test_user)
        assert c.wait_done(jid, timeout=60) == "FAILED"
        assert "ran" not in read(out)
        assert "Reason=JobLaunchFailure" in c.ok("scontrol", "show", "job", str(jid))
        log = read(os.path.join(c.state_dir, "log", "musterd-node1.log"))
        assert re.search(rf"job {jid} cannot start: .*nvidia0.*not a character device", log), log
