"""muster.agent.cgroup on cgroup v2.

* The BPF device filter, freezing/killing and removal run on the real cgroup2 mount of this
  host (``/sys/fs/cgroup/unified`` here, or ``/sys/fs/cgroup`` on a pure-v2 host; root only).
* The file-writing logic (``cgroup.subtree_control``, ``memory.max``, ``cpuset.cpus``, the
  ``own_base`` leaf move) runs against :class:`FakeCgroup2`, a directory tree that behaves like
  cgroupfs where the module depends on it -- because the real mount here has no memory, cpuset
  or pids controller.
"""

import errno
import os
import re
import struct
import subprocess
import sys

import pytest

from cluster import wait_for
from muster.agent import cgroup as cg
from muster.agent.cgroup import CgroupError, V2Hierarchy

# ---------------------------------------------------------------------------------------------
# the real cgroup2 mount

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="cgroup writes need root")

PROBE = """
import os
for path in ("/dev/full", "/dev/null", "/dev/zero"):
    try:
        os.close(os.open(path, os.O_RDONLY))
        print("ok")
    except OSError as exc:
        print(exc.errno)
"""
EPERM = str(errno.EPERM)


@pytest.fixture(scope="module")
def h():
    if os.geteuid() != 0:
        pytest.skip("cgroup writes need root")
    hier = cg.open_hierarchy("cgroup/v2")
    if hier is None:
        pytest.skip("no writable cgroup2 mount on this host")
    return hier


@pytest.fixture
def parent(h, request):
    name = re.sub(r"[^A-Za-z0-9_]", "_", request.node.name)[:40]
    base = h.own_base()
    rel = f"{base}/muster_test_{name}_{os.getpid()}".lstrip("/")
    h.make(rel)
    yield rel
    h.kill_all(rel, timeout=60)
    h.remove(rel)


def gated(*cmd):
    """A child that waits for one line on stdin, then exec's *cmd* (attach it in between)."""
    return subprocess.Popen(["sh", "-c", 'read _; exec "$@"', "sh", *cmd],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def probe(h, rel):
    p = gated(sys.executable, "-c", PROBE)
    h.attach(rel, p.pid)
    out, err = p.communicate("go\n", timeout=120)
    assert p.returncode == 0, err
    return out.split()


@root_only
def test_v2_hierarchy_found_with_bpf_devices(h):
    assert h.version == 2
    assert {"devices", "freezer", "cpuacct"} <= h.controllers, h.controllers
    assert cg.bpf_device_filter_supported()


@root_only
def test_bpf_filter_denies_listed_device_and_is_replaced_without_gap(h, parent):
    job = f"{parent}/job_1"
    task = f"{job}/step_0/task_0"
    h.make(task)
    job_dir = os.path.join(h.root, job)
    assert probe(h, task) == ["ok", "ok", "ok"]  # no filter yet

    h.deny_devices(job, [("c", 1, 7)])  # /dev/full
    first = cg.attached_device_filters(job_dir)
    assert len(first) == 1
    assert probe(h, task) == [EPERM, "ok", "ok"]  # inherited by the task below

    h.deny_devices(job, [("c", 1, 3), ("b", None, None)])  # /dev/null, every block device
    second = cg.attached_device_filters(job_dir)
    assert len(second) == 1 and second != first  # the old program was detached
    assert probe(h, task) == ["ok", EPERM, "ok"]

    h.deny_devices(job, [("a", 1, None)])  # every minor of major 1
    assert probe(h, task) == [EPERM, EPERM, EPERM]

    h.deny_devices(job, [])
    assert cg.attached_device_filters(job_dir) == []
    assert probe(h, task) == ["ok", "ok", "ok"]


@root_only
def test_kill_all_and_remove_on_v2(h, parent):
    task = f"{parent}/job_2/step_0/task_0"
    h.make(task)
    p = gated("sh", "-c", "(setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!); "
                          "echo ready; exec sleep 1000")
    h.attach(task, p.pid)
    p.stdin.write("go\n")
    p.stdin.flush()
    orphan = int(p.stdout.readline())
    assert p.stdout.readline().strip() == "ready"
    assert set(h.procs(parent)) >= {p.pid, orphan}
    assert h.kill_all(f"{parent}/job_2", timeout=60)
    assert h.procs(parent) == []
    assert p.wait(timeout=60) == -9
    wait_for(lambda: not os.path.exists(f"/proc/{orphan}/cmdline")
             or open(f"/proc/{orphan}/cmdline").read() == "", timeout=60, what="orphan dead")
    use = h.usage(task)
    assert use["cpu_user_us"] is not None and use["cpu_sys_us"] is not None
    h.remove(f"{parent}/job_2")
    assert not os.path.exists(os.path.join(h.root, parent, "job_2"))


def test_device_program_assembly():
    code = cg.assemble_device_filter([("c", 195, None)])
    assert len(code) % 8 == 0
    # 4 loads, 2 conditions + deny tail, allow tail
    assert len(code) // 8 == 4 + 2 + 2 + 2
    op, regs, off, imm = struct.unpack_from("<BBhi", code, 4 * 8)
    assert (op, regs & 0xF, off, imm) == (0x55, 2, 3, 2)  # type != char: skip 3 insns
    with pytest.raises(CgroupError):
        cg.assemble_device_filter([("c", 2 ** 31, 0)])


# ---------------------------------------------------------------------------------------------
# the fake tree


class FakeCgroup2(V2Hierarchy):
    """V2Hierarchy over a plain directory tree that behaves like cgroupfs where it matters:

    * mkdir creates the interface files, with ``cgroup.controllers`` = the parent's
      ``cgroup.subtree_control`` and controller files only for those controllers;
    * ``cgroup.subtree_control`` takes ``+ctl``/``-ctl`` tokens, EINVAL for a controller not in
      ``cgroup.controllers``, EBUSY on a non-root cgroup that has processes;
    * ``cgroup.procs`` moves a pid (out of every other cgroup), EBUSY into a non-root cgroup
      that hands controllers to children, EINVAL for pids listed in ``unmovable``;
    * other files: plain writes, and a missing file is an error (no O_CREAT, as on cgroupfs).
    """

    unmovable: set = set()

    def __init__(self, root, own):
        self.proc_file = os.path.join(root, "proc_self_cgroup")
        with open(self.proc_file, "w") as fh:
            fh.write(f"0::/{own}\n")
        super().__init__(root, proc_cgroup=self.proc_file, devices=False)

    def _mkdir(self, path):
        created = cg._mkdir(path)
        if created:
            populate(path, read(os.path.dirname(path), "cgroup.subtree_control").split())
        return created

    def _write(self, path, value):
        d, name = os.path.split(path)
        if name == "cgroup.subtree_control":
            return self._subtree(d, path, value)
        if name == "cgroup.procs":
            return self._move(d, path, value)
        return cg._write(path, value)

    def _fail(self, path, value, code):
        raise CgroupError(f"{path}: cannot write {value!r}: {os.strerror(code)}")

    def _subtree(self, d, path, value):
        avail = read(d, "cgroup.controllers").split()
        have = set(read(d, "cgroup.subtree_control").split())
        for tok in value.split():
            if tok[1:] not in avail or tok[0] not in "+-":
                self._fail(path, value, errno.EINVAL)
            if d != self.root and read(d, "cgroup.procs").split() and tok[0] == "+":
                self._fail(path, value, errno.EBUSY)
            (have.add if tok[0] == "+" else have.discard)(tok[1:])
        write(d, "cgroup.subtree_control", " ".join(sorted(have)))

    def _move(self, d, path, value):
        if value in self.unmovable:
            self._fail(path, value, errno.EINVAL)
        if d != self.root and read(d, "cgroup.subtree_control").split():
            self._fail(path, value, errno.EBUSY)
        for cur, _dirs, files in os.walk(self.root):
            if "cgroup.procs" in files:
                pids = [p for p in read(cur, "cgroup.procs").split() if p != value]
                write(cur, "cgroup.procs", "\n".join(pids))
        write(d, "cgroup.procs", "\n".join(read(d, "cgroup.procs").split() + [value]))


def read(d, name):
    with open(os.path.join(d, name)) as fh:
        return fh.read()


def write(d, name, text):
    with open(os.path.join(d, name), "w") as fh:
        fh.write(text)


def populate(path, controllers, procs=()):
    files = {"cgroup.controllers": " ".join(controllers), "cgroup.subtree_control": "",
             "cgroup.procs": "\n".join(procs), "cgroup.events": "populated 0\nfrozen 0\n",
             "cgroup.freeze": "0", "cpu.stat": "usage_usec 0\nuser_usec 0\nsystem_usec 0\n"}
    if "memory" in controllers:
        files.update({"memory.max": "max", "memory.swap.max": "max", "memory.current": "0",
                      "memory.peak": "0", "memory.events": "oom 0\noom_kill 0\n",
                      "memory.events.local": "oom 0\noom_kill 0\n"})
    if "cpuset" in controllers:
        files.update({"cpuset.cpus": "", "cpuset.mems": ""})
    if "pids" in controllers:
        files["pids.max"] = "max"
    for name, text in files.items():
        write(path, name, text)


ALL = ["cpuset", "cpu", "io", "memory", "hugetlb", "pids"]
ME = str(os.getpid())


@pytest.fixture
def fake_root(tmp_path):
    """A host like a systemd one: the root hands every controller down; user.slice hands down
    only memory and pids (no cpuset); the caller sits in user.slice/session-1.scope together
    with another process."""
    root = tmp_path / "cgroup"
    root.mkdir()
    populate(root, ALL, procs=["1"])
    write(root, "cgroup.subtree_control", "cpu io memory pids")
    (root / "user.slice").mkdir()
    populate(root / "user.slice", ["cpu", "io", "memory", "pids"])
    write(root / "user.slice", "cgroup.subtree_control", "memory pids")
    (root / "user.slice" / "session-1.scope").mkdir()
    populate(root / "user.slice" / "session-1.scope", ["memory", "pids"], procs=[ME, "4242"])
    return str(root)


def test_controllers_follow_what_the_own_cgroup_is_given(fake_root):
    h = FakeCgroup2(fake_root, "user.slice/session-1.scope")
    assert h.controllers == {"memory", "pids", "freezer", "cpuacct"}  # no cpuset, no BPF


def test_own_base_moves_every_process_into_the_agent_leaf(fake_root):
    own = "user.slice/session-1.scope"
    h = FakeCgroup2(fake_root, own)
    assert h.own_base() == own
    leaf = os.path.join(fake_root, own, "muster_agent")
    assert sorted(read(leaf, "cgroup.procs").split()) == sorted([ME, "4242"])
    assert read(os.path.join(fake_root, own), "cgroup.procs").split() == []
    # called again from inside the leaf: same base, nothing nested further
    write(fake_root, "proc_self_cgroup", f"0::/{own}/muster_agent\n")
    assert h.own_base() == own
    assert not os.path.exists(os.path.join(leaf, "muster_agent"))


def test_own_base_refuses_when_a_process_cannot_leave(fake_root):
    h = FakeCgroup2(fake_root, "user.slice/session-1.scope")
    h.unmovable = {"4242"}
    with pytest.raises(CgroupError, match=r"session-1.scope/cgroup.procs: processes 4242"):
        h.own_base()


def test_make_without_leaf_move_hits_no_internal_processes_rule(fake_root):
    h = FakeCgroup2(fake_root, "user.slice/session-1.scope")
    with pytest.raises(CgroupError, match=r"session-1.scope/cgroup.subtree_control: .*busy"):
        h.make("user.slice/session-1.scope/muster_n1/job_1")


def test_make_enables_available_controllers_below_the_base_only(fake_root):
    own = "user.slice/session-1.scope"
    h = FakeCgroup2(fake_root, own)
    base = h.own_base()
    h.make(f"{base}/muster_n1/job_1/step_0/task_0")
    sub = {lvl: read(os.path.join(fake_root, lvl), "cgroup.subtree_control").split()
           for lvl in (base, f"{base}/muster_n1", f"{base}/muster_n1/job_1",
                       f"{base}/muster_n1/job_1/step_0", f"{base}/muster_n1/job_1/step_0/task_0")}
    assert sub[base] == ["memory", "pids"]
    assert sub[f"{base}/muster_n1"] == ["memory", "pids"]
    assert sub[f"{base}/muster_n1/job_1/step_0"] == ["memory", "pids"]
    assert sub[f"{base}/muster_n1/job_1/step_0/task_0"] == []  # the leaf keeps processes
    assert read(os.path.join(fake_root, "user.slice"), "cgroup.subtree_control") == "memory pids"
    job = f"{base}/muster_n1/job_1"
    h.set_memory(job, 100 << 20, 0, swappiness=10)
    assert read(os.path.join(fake_root, job), "memory.max") == str(100 << 20)
    assert read(os.path.join(fake_root, job), "memory.swap.max") == "0"
    h.set_memory(job, None, None)
    assert read(os.path.join(fake_root, job), "memory.max") == "max"
    assert read(os.path.join(fake_root, job), "memory.swap.max") == "max"
    h.set_pids_max(job, 64)
    assert read(os.path.join(fake_root, job), "pids.max") == "64"
    # the cpuset controller was never handed down: a clear error naming the file
    with pytest.raises(CgroupError, match=re.escape(f"{job}/cpuset.cpus")):
        h.set_cpus(job, [0, 1])
    h.attach(f"{job}/step_0/task_0", 4242)
    assert h.procs(job) == [4242]
    with pytest.raises(CgroupError, match=r"step_0/cgroup.procs: .*busy"):
        h.attach(f"{job}/step_0", 4242)  # an inner node with controllers takes no process


def test_make_at_root_enables_cpuset_and_writes_cpus(fake_root):
    write(fake_root, "proc_self_cgroup", "0::/\n")
    h = FakeCgroup2(fake_root, "")
    assert h.own_base() == ""
    assert {"cpuset", "memory", "pids"} <= h.controllers
    h.make("muster_n1/job_1")
    assert read(fake_root, "cgroup.subtree_control").split() == ["cpu", "cpuset", "io",
                                                                 "memory", "pids"]
    assert read(os.path.join(fake_root, "muster_n1"), "cgroup.subtree_control").split() == [
        "cpuset", "memory", "pids"]
    h.set_cpus("muster_n1/job_1", [5, 0, 1, 2])
    assert read(os.path.join(fake_root, "muster_n1/job_1"), "cpuset.cpus") == "0-2,5"


def test_oom_kills_sum_local_events_and_usage_reads_stat_files(fake_root):
    write(fake_root, "proc_self_cgroup", "0::/\n")
    h = FakeCgroup2(fake_root, "")
    h.make("n/job/step_0/task_0")
    h.make("n/job/step_1")
    write(os.path.join(fake_root, "n/job/step_0/task_0"), "memory.events.local",
          "oom 2\noom_kill 2\n")
    write(os.path.join(fake_root, "n/job/step_1"), "memory.events.local", "oom 1\noom_kill 1\n")
    assert h.oom_kills("n/job") == 3
    assert h.oom_kills("n/job/step_1") == 1
    write(os.path.join(fake_root, "n/job"), "cpu.stat",
          "usage_usec 9000\nuser_usec 7000\nsystem_usec 2000\n")
    write(os.path.join(fake_root, "n/job"), "memory.peak", "123456\n")
    write(os.path.join(fake_root, "n/job"), "memory.current", "4096\n")
    assert h.usage("n/job") == {"cpu_user_us": 7000, "cpu_sys_us": 2000, "mem_peak": 123456,
                                "mem_cur": 4096}


def test_remove_is_bottom_up_and_idempotent(fake_root):
    write(fake_root, "proc_self_cgroup", "0::/\n")
    h = FakeCgroup2(fake_root, "")
    h.make("n/job/step_0/task_0")
    for d, _dirs, files in os.walk(os.path.join(fake_root, "n")):
        for f in files:  # cgroupfs removes the interface files with the directory
            os.unlink(os.path.join(d, f))
    h.remove("n/job")
    assert not os.path.exists(os.path.join(fake_root, "n/job"))
    h.remove("n/job")


def test_open_hierarchy_reads_mountinfo(tmp_path):
    unified = tmp_path / "fs" / "unified"
    unified.mkdir(parents=True)
    populate(unified, ["memory", "pids"])
    info = tmp_path / "mountinfo"
    info.write_text(
        f"31 23 0:28 / {tmp_path}/fs rw,relatime - tmpfs tmpfs rw,mode=755\n"
        f"40 31 0:37 / {unified} rw,relatime - cgroup2 cgroup2 rw\n")
    assert cg.open_hierarchy("cgroup/v1", str(tmp_path / "fs"), str(info)) is None
    auto = cg.open_hierarchy("autodetect", str(tmp_path / "fs"), str(info))
    assert isinstance(auto, V2Hierarchy) and auto.root == str(unified)
    with pytest.raises(CgroupError, match="unknown plugin"):
        cg.open_hierarchy("cgroup/v3", str(tmp_path / "fs"), str(info))
