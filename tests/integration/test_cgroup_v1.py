"""muster.agent.cgroup on the real cgroup v1 hierarchy of this host (root only).

Each test works under its own parent cgroup ``muster_test_<test>_<pid>`` in every controller;
the fixture kills whatever is left there and removes the tree, whatever the test did.
"""

import errno
import os
import re
import subprocess
import sys

import pytest

from cluster import wait_for
from muster.agent.cgroup import CgroupError, V1Hierarchy, open_hierarchy

MB = 1024 * 1024
WANTED = {"cpuset", "memory", "devices", "pids", "freezer", "cpuacct"}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="cgroup writes need root")


@pytest.fixture(scope="module")
def h():
    hier = open_hierarchy("cgroup/v1")
    if hier is None:
        pytest.skip("no writable cgroup v1 hierarchy on this host")
    return hier


@pytest.fixture
def parent(h, request):
    name = re.sub(r"[^A-Za-z0-9_]", "_", request.node.name)[:40]
    rel = f"muster_test_{name}_{os.getpid()}"
    h.make(rel)
    yield rel
    h.kill_all(rel, timeout=60)
    h.remove(rel)


def gated(*cmd):
    """A child that waits for one line on stdin before exec'ing *cmd*: attach it first, then
    release it, so everything *cmd* does happens inside the cgroup."""
    return subprocess.Popen(["sh", "-c", 'read _; exec "$@"', "sh", *cmd],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def run_in(h, rel, *cmd, timeout=120):
    p = gated(*cmd)
    h.attach(rel, p.pid)
    out, err = p.communicate("go\n", timeout=timeout)
    return p.returncode, out, err


def cg_file(h, ctrl, rel, name):
    with open(os.path.join(h.mounts[ctrl], rel, name)) as fh:
        return fh.read().strip()


def test_autodetect_picks_v1_with_every_controller(h):
    auto = open_hierarchy("autodetect")
    assert isinstance(auto, V1Hierarchy) and auto.version == 1
    assert WANTED <= auto.controllers, auto.controllers
    assert auto.own_base() == ""
    assert open_hierarchy("disabled") is None


def test_cpuset_copied_without_clone_children_and_cpus_bind(h, parent):
    clone = os.path.join(h.mounts["cpuset"], parent, "cgroup.clone_children")
    with open(clone, "w") as fh:
        fh.write("0")  # the kernel will not copy cpus/mems into children: make() must
    job = f"{parent}/job_1"
    h.make(job)
    assert cg_file(h, "cpuset", job, "cpuset.cpus") == cg_file(h, "cpuset", parent,
                                                              "cpuset.cpus") != ""
    assert cg_file(h, "cpuset", job, "cpuset.mems") != ""
    h.set_cpus(job, [0])
    task = f"{job}/step_0/task_0"
    h.make(task)
    assert cg_file(h, "cpuset", task, "cpuset.cpus") == "0"
    p = gated("sleep", "1000")
    try:
        h.attach(task, p.pid)
        assert os.sched_getaffinity(p.pid) == {0}
        with open(f"/proc/{p.pid}/cgroup") as fh:
            lines = fh.read().splitlines()
        for ctrl in WANTED:
            assert any(re.match(rf"\d+:([^:]*,)?{ctrl}(,[^:]*)?:/{task}$", ln) for ln in lines), \
                (ctrl, lines)
        assert h.procs(parent) == [p.pid] and h.procs(task) == [p.pid]
    finally:
        p.kill()
        p.wait()


def test_memory_pids_device_files_written(h, parent):
    job = f"{parent}/job_2"
    h.make(job)
    h.set_memory(job, 100 * MB, 0, swappiness=0)
    assert int(cg_file(h, "memory", job, "memory.limit_in_bytes")) == 100 * MB
    if os.path.exists(os.path.join(h.mounts["memory"], job, "memory.memsw.limit_in_bytes")):
        assert int(cg_file(h, "memory", job, "memory.memsw.limit_in_bytes")) == 100 * MB
    assert cg_file(h, "memory", job, "memory.swappiness") == "0"
    assert cg_file(h, "memory", job, "memory.use_hierarchy") == "1"
    h.set_memory(job, 200 * MB, 50 * MB)  # raising works although memsw was at 100M
    assert int(cg_file(h, "memory", job, "memory.limit_in_bytes")) == 200 * MB
    h.set_pids_max(job, 7)
    assert cg_file(h, "pids", job, "pids.max") == "7"
    h.set_pids_max(job, None)
    assert cg_file(h, "pids", job, "pids.max") == "max"
    h.deny_devices(job, [("c", 1, 7), ("c", 195, None)])
    rc, out, _ = run_in(h, job, sys.executable, "-c", DEVICE_PROBE)
    assert rc == 0 and out.split() == [str(errno.EPERM), "ok", "ok"], out
    other = f"{parent}/job_2b"
    h.make(other)
    h.deny_devices(other, [("a", 1, 3)])  # any type, 1:3 = /dev/null only
    rc, out, _ = run_in(h, other, sys.executable, "-c", DEVICE_PROBE)
    assert rc == 0 and out.split() == ["ok", str(errno.EPERM), "ok"], out


DEVICE_PROBE = """
import os
for path in ("/dev/full", "/dev/null", "/dev/zero"):
    try:
        os.close(os.open(path, os.O_RDONLY))
        print("ok")
    except OSError as exc:
        print(exc.errno)
"""


def test_memory_limit_oom_kills_and_is_counted_over_the_subtree(h, parent):
    job = f"{parent}/job_3"
    task = f"{job}/step_0/task_0"
    h.make(task)
    h.set_memory(job, 100 * MB, 0)
    rc, _out, _err = run_in(h, task, sys.executable, "-c", "x = b'x' * (500 << 20)")
    assert rc == -9, rc
    # v1 counts the kill only in the victim's memcg: the job's own counter stays 0 ...
    with open(os.path.join(h.mounts["memory"], job, "memory.oom_control")) as fh:
        assert "oom_kill 0" in fh.read()
    # ... and oom_kills() finds it below
    assert h.oom_kills(job) == 1
    assert h.oom_kills(parent) == 1
    use = h.usage(job)
    assert 50 * MB < use["mem_peak"] <= 101 * MB, use


def test_pids_max_refuses_forks(h, parent):
    job = f"{parent}/job_4"
    h.make(job)
    h.set_pids_max(job, 3)
    code = ("import os, signal\nfailed = 0\n"
            "for _ in range(5):\n"
            "    try:\n        pid = os.fork()\n"
            "    except BlockingIOError:\n        failed += 1\n        continue\n"
            "    if pid == 0:\n        signal.pause()\n"
            "print(failed, flush=True)\n")
    p = gated(sys.executable, "-c", code)
    h.attach(job, p.pid)
    p.stdin.write("go\n")
    p.stdin.flush()
    assert p.stdout.readline().strip() == "3"  # the interpreter + 2 children = 3 tasks
    assert len(h.procs(job)) == 3
    assert h.kill_all(job, timeout=60)
    p.wait(timeout=60)


def _gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_kill_all_leaves_nothing_of_a_double_forked_child(h, parent):
    task = f"{parent}/job_5/step_0/task_0"
    h.make(task)
    p = gated("sh", "-c", "(setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!); "
                          "echo ready; exec sleep 1000")
    h.attach(task, p.pid)
    p.stdin.write("go\n")
    p.stdin.flush()
    orphan = int(p.stdout.readline())
    assert p.stdout.readline().strip() == "ready"
    wait_for(lambda: orphan in h.procs(parent), timeout=60, what="orphan in the cgroup")
    assert p.pid in h.procs(parent)
    assert h.kill_all(f"{parent}/job_5", timeout=60)
    assert h.procs(parent) == []
    assert p.wait(timeout=60) == -9
    wait_for(lambda: _gone(orphan), timeout=60, what="orphan dead")


def test_usage_counts_cpu_time(h, parent):
    """The CPU time is the scheduler's exact runtime (cpuacct.usage), which is what the
    process's own rusage sums to -- not the tick samples of usage_user/usage_sys, which ran
    16 % above it on a loaded host and 33 % below on another."""
    job = f"{parent}/job_6"
    h.make(job)
    # user and system time both (the pages of 100 MB touched, then a busy loop)
    burn = ("import time\nb = bytearray(100 << 20)\nfor i in range(0, len(b), 4096):\n"
            "    b[i] = 1\nwhile time.process_time() < 0.5:\n    pass\n")
    p = gated(sys.executable, "-c", burn)
    h.attach(job, p.pid)
    p.stdin.write("go\n")
    p.stdin.close()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = 0  # reaped here
    assert os.waitstatus_to_exitcode(status) == 0
    use = h.usage(job)
    total = use["cpu_user_us"] + use["cpu_sys_us"]
    assert total == int(cg_file(h, "cpuacct", job, "cpuacct.usage")) // 1000, use
    rusage = round((ru.ru_utime + ru.ru_stime) * 1e6)
    # the shell's few instructions before it was attached are in the rusage only
    assert rusage - 20_000 <= total <= rusage + 1_000, (use, rusage)
    assert use["cpu_sys_us"] > 0 and use["cpu_user_us"] > 0, use
    assert use["mem_peak"] > 1 * MB and use["mem_cur"] is not None


def test_remove_cleans_every_controller_and_tolerates_absence(h, parent):
    job = f"{parent}/job_7"
    h.make(f"{job}/step_0/task_0")
    h.make(f"{job}/step_1")
    h.remove(job)
    for mount in h.mounts.values():
        assert not os.path.exists(os.path.join(mount, job))
        assert os.path.isdir(os.path.join(mount, parent))
    h.remove(job)  # already gone: no error


def test_errors_name_the_path(h, parent):
    missing = f"{parent}/never_made"
    with pytest.raises(CgroupError) as info:
        h.set_memory(missing, 100 * MB)
    assert os.path.join(h.mounts["memory"], missing) in str(info.value)
    with pytest.raises(CgroupError, match="pids.max"):
        h.set_pids_max(missing, 5)
    with pytest.raises(CgroupError, match=r"'\.\.'"):
        h.make(f"{parent}/../escape")
    busy = f"{parent}/busy"
    h.make(busy)
    p = gated("sleep", "1000")
    try:
        h.attach(busy, p.pid)
        with pytest.raises(CgroupError, match="cannot remove cgroup"):
            h.remove(busy)
    finally:
        p.kill()
        p.wait()


def test_a_level_made_in_some_controllers_is_joined_there_and_its_parent_elsewhere(h, parent):
    """make(rel, only) / attach(rel, only=, elsewhere=): how confine places a task on v1 (a
    task_K level only where per-task figures are kept)."""
    step = f"{parent}/job_8/step_0"
    task = f"{step}/task_0"
    only = {"memory", "cpuacct"}
    h.make(step)
    h.make(task, only)
    for ctrl, mount in h.mounts.items():
        assert os.path.isdir(os.path.join(mount, task)) == (ctrl in only), ctrl
    p = gated("sleep", "1000")
    try:
        h.attach(task, p.pid, only=only, elsewhere=step)
        with open(f"/proc/{p.pid}/cgroup") as fh:
            where = {c: path for line in fh for _h, cs, path in [line.strip().split(":", 2)]
                     for c in cs.split(",")}
        for ctrl in h.mounts:
            want = task if ctrl in only else step
            assert where[ctrl] == "/" + want, (ctrl, where[ctrl])
        assert h.procs(task) == [p.pid] and h.procs(step) == [p.pid]
        assert not h.try_remove(step)  # busy: no wait, no walk, nothing removed
        assert all(os.path.isdir(os.path.join(m, step)) for m in h.mounts.values())
        assert h.kill_all(step, timeout=60)
    finally:
        p.kill()
        p.wait()
    assert h.try_remove(task) and h.try_remove(step)
    assert not any(os.path.exists(os.path.join(m, step)) for m in h.mounts.values())


def test_a_step_is_made_where_it_has_its_own_figures_and_its_tasks_join_the_job_elsewhere(
        h, parent):
    """confine.StepCgroup on v1: step_S only in memory, cpuacct, freezer and pids, task_K in
    memory and cpuacct; a task born confined sits in its task, step or job cgroup, whichever
    is deepest in each controller (cpuset and devices: the job's, which holds the limits).
    The step is still killed and removed whole."""
    from muster.agent import confine
    from muster.agent.cgroup import describe
    spec = {"hier": describe(h), "base": parent}
    job = f"{parent}/job_9"
    h.make(job)
    step = confine.StepCgroup(spec, 9, "batch")
    task = f"{step.rel}/task_0"
    with confine.born_confined(step, 0):
        p = subprocess.Popen(["sleep", "1000"])
    try:
        for ctrl, mount in h.mounts.items():
            assert os.path.isdir(os.path.join(mount, step.rel)) == \
                (ctrl in confine.STEP_CONTROLLERS), ctrl
            assert os.path.isdir(os.path.join(mount, task)) == \
                (ctrl in confine.TASK_CONTROLLERS), ctrl
        with open(f"/proc/{p.pid}/cgroup") as fh:
            where = {c: path for line in fh for _h, cs, path in [line.strip().split(":", 2)]
                     for c in cs.split(",")}
        for ctrl in h.mounts:
            want = (task if ctrl in confine.TASK_CONTROLLERS else step.rel
                    if ctrl in confine.STEP_CONTROLLERS else job)
            assert where[ctrl] == "/" + want, (ctrl, where[ctrl])
        with open("/proc/self/cgroup") as fh:  # the daemon went back where it was
            assert f"/{parent}/" not in fh.read()
        assert step.pids() == [p.pid] and step.pids(0) == [p.pid]
        got = step.finish()
        assert got["empty"] and "error" not in got, got
        assert p.wait(timeout=10) == -9
    finally:
        p.kill()
        p.wait()
    assert not any(os.path.exists(os.path.join(m, step.rel)) for m in h.mounts.values())
    assert all(os.path.isdir(os.path.join(m, job)) for m in h.mounts.values())
    assert h.try_remove(job)


def test_kill_all_thaws_a_step_left_frozen_by_a_dead_daemon(h, parent):
    """A step daemon froze its step to kill it and was killed itself: the step stays frozen
    on v1 (thawing the job does not thaw a child frozen by its own write), and SIGKILL cannot
    end a frozen task. kill_all on the job must still empty it."""
    job, step = f"{parent}/job_8", f"{parent}/job_8/step_0"
    h.make(step)
    p = gated("sleep", "600")
    h.attach(step, p.pid)
    p.stdin.write("go\n")
    p.stdin.flush()
    wait_for(lambda: "sleep" in open(f"/proc/{p.pid}/cmdline").read(), what="sleep running")
    state = os.path.join(h.mounts["freezer"], step, "freezer.state")
    with open(state, "w") as fh:
        fh.write("FROZEN")
    wait_for(lambda: open(state).read().strip() == "FROZEN", what="the step frozen")
    assert h.kill_all(job, timeout=10)  # before the subtree thaw: False after 10 s
    assert p.wait(timeout=10) == -9
    assert open(state).read().strip() == "THAWED"
    h.remove(job)
