"""GPU device confinement and CPU binding of tasks, on a real `muster up` cluster.

GPUs: ``muster up`` gives its emulated GPUs real character devices (``<state>/dev/<node>/
nvidia<i>``, major 195, minor i) listed as gres.conf ``File=``; with cgroup.conf
``ConstrainDevices=yes`` a job's device cgroup denies every GPU of the node it was not
allocated (Slurm's rule). There is no NVIDIA driver here, so the two outcomes of open() differ:
a device the cgroup allows reaches the (absent) driver and fails with ENXIO; one it denies
fails with EPERM before that. The probe prints, per GPU index, the errno name of an
open(O_RDWR) of its device file — the device files are 0666, so only the cgroup can say EPERM.

CPUs: with ``TaskPlugin=task/affinity`` (muster up sets it when it can confine), ``srun
--cpu-bind`` sets each task's affinity before it starts (read back from /proc/self/status
``Cpus_allowed_list``), within the job's CPUs.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile

import pytest

from cluster import Cluster, cleanup, shared_tmp

NGPUS = 8
PROBE = r'''#!/usr/bin/env python3
import errno, os, sys
dev, label = sys.argv[1], sys.argv[2]
res = []
for i in range(int(sys.argv[3])):
    try:
        os.close(os.open(os.path.join(dev, "nvidia%d" % i), os.O_RDWR))
        res.append("%d:OK" % i)
    except OSError as e:
        res.append("%d:%s" % (i, errno.errorcode.get(e.errno, e.errno)))
print(label, "gpus=" + os.environ.get("SLURM_JOB_GPUS", "-"),
      "cvd=" + os.environ.get("CUDA_VISIBLE_DEVICES", "-"), " ".join(res), flush=True)
'''

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="device nodes and cgroups need root")


@contextlib.contextmanager
def _gpu_cluster():
    """One node with 8 emulated GPUs and 4 CPUs, as `muster up` makes it as root: GPU device
    files, TaskPlugin=task/cgroup,task/affinity and a cgroup.conf with ConstrainDevices=yes."""
    base = tempfile.mkdtemp(prefix="muster-gpudev-", dir="/tmp")
    os.chmod(base, 0o755)
    c = Cluster(os.path.join(base, "state"), nodes=1, gpus=NGPUS, cpus=4, mem=8000,
                partitions="gpu")
    try:
        c.up()
        c.workdir = shared_tmp(os.path.join(base, "work"))
        yield c
    finally:
        c.down()
        cleanup(base)


@pytest.fixture(scope="module")
def gcluster():
    with _gpu_cluster() as c:
        yield c


def _probe(c) -> str:
    path = os.path.join(c.workdir, "probe.py")
    with open(path, "w") as fh:
        fh.write(PROBE)
    os.chmod(path, 0o755)
    return path


def _results(out: str) -> dict[str, tuple[set[int], dict[int, str]]]:
    """probe lines → {label: (allocated GPU indices, {index: errno name})}."""
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 3 or not parts[1].startswith("gpus="):
            continue
        gpus = parts[1][5:]
        alloc = {int(g) for g in gpus.split(",")} if gpus != "-" else set()
        found[parts[0]] = (alloc, {int(k): v for k, v in (p.split(":") for p in parts[3:])})
    return found


def test_emulated_gpus_are_device_files_in_gres_conf(gcluster):
    with open(os.path.join(gcluster.state_dir, "gres.conf")) as fh:
        gres = fh.read()
    dev = os.path.join(gcluster.state_dir, "dev", "node1")
    assert f"NodeName=node1 Name=gpu File={dev}/nvidia[0-7]" in gres
    st = os.stat(os.path.join(dev, "nvidia5"))
    assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (195, 5)
    with open(os.path.join(gcluster.state_dir, "cgroup.conf")) as fh:
        assert "ConstrainDevices=yes" in fh.read()
    with open(gcluster.conf) as fh:
        assert re.search(r"^TaskPlugin=\S*task/affinity", fh.read(), re.M)


def test_job_opens_only_its_two_gpus(gcluster, test_user):
    """--gres=gpu:2: its two device files pass the cgroup (ENXIO from the missing driver),
    the other six are denied (EPERM) — also with CUDA_VISIBLE_DEVICES unset, and in a step."""
    c = gcluster
    probe = _probe(c)
    dev = os.path.join(c.state_dir, "dev", "node1")
    out = os.path.join(c.workdir, "gpu2.out")
    script = (f"#!/bin/bash\n{probe} {dev} batch {NGPUS}\n"
              f"(unset CUDA_VISIBLE_DEVICES; {probe} {dev} unset {NGPUS})\n"
              f"srun -n1 {probe} {dev} step {NGPUS}\n")
    jid = c.sbatch("--gres=gpu:2", "-n1", "-o", out, cwd=c.workdir, user=test_user, input=script)
    assert c.wait_done(jid, timeout=120) == "COMPLETED", open(out).read()
    res = _results(open(out).read())
    assert set(res) == {"batch", "unset", "step"}, open(out).read()
    for label, (alloc, errs) in res.items():
        assert len(alloc) == 2 and alloc <= set(range(NGPUS)), (label, alloc)
        assert len(errs) == NGPUS
        allowed = {i for i, e in errs.items() if e == "ENXIO"}
        denied = {i for i, e in errs.items() if e == "EPERM"}
        assert allowed == alloc, (label, errs)
        assert denied == set(range(NGPUS)) - alloc, (label, errs)


def test_job_without_gpus_opens_none(gcluster, test_user):
    c = gcluster
    probe = _probe(c)
    dev = os.path.join(c.state_dir, "dev", "node1")
    r = c.run(["srun", "-n1", probe, dev, "nogpu", str(NGPUS)],
              user=test_user, cwd=c.workdir, timeout=120)
    assert r.rc == 0, r
    alloc, errs = _results(r.out)["nogpu"]
    assert alloc == set() and set(errs.values()) == {"EPERM"}, r.out


# ---- CPU binding -----------------------------------------------------------------------------

needs_two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2,
                                    reason="binding two tasks apart needs two CPUs")


def _allowed(out: str) -> dict[int, set[int]]:
    """``srun -l grep Cpus_allowed_list /proc/self/status`` → {task: CPUs}."""
    per = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\d+): Cpus_allowed_list:\s*(\S+)", line)
        if m:
            cpus = set()
            for part in m.group(2).split(","):
                lo, _, hi = part.partition("-")
                cpus.update(range(int(lo), int(hi or lo) + 1))
            per[int(m.group(1))] = cpus
    return per


@needs_two_cpus
def test_cpu_bind_cores_gives_disjoint_single_cpus(gcluster, test_user):
    r = gcluster.run(["srun", "-l", "-n2", "-c1", "--cpu-bind=verbose,cores", "grep",
                      "Cpus_allowed_list", "/proc/self/status"], user=test_user,
                     cwd=gcluster.workdir, timeout=120)
    assert r.rc == 0, r
    per = _allowed(r.out)
    assert set(per) == {0, 1}, r.out
    assert all(len(cpus) == 1 for cpus in per.values()), per
    assert per[0].isdisjoint(per[1]), per
    lines = re.findall(r"cpu-bind=MASK - node1, task  (\d)  (\d) \[\d+\]: mask 0x([0-9a-f]+) set",
                       r.err)
    assert sorted((int(g), int(m, 16)) for g, _, m in lines) == \
        sorted((t, 1 << next(iter(c))) for t, c in per.items()), r.err


@needs_two_cpus
def test_cpu_bind_map_cpu_and_none(gcluster, test_user):
    c = gcluster
    r = c.run(["srun", "-l", "-n2", "-c1", "--cpu-bind=map_cpu:1,0", "grep", "Cpus_allowed_list",
               "/proc/self/status"], user=test_user, cwd=c.workdir, timeout=120)
    assert r.rc == 0, r
    assert _allowed(r.out) == {0: {1}, 1: {0}}, r.out
    r = c.run(["srun", "-l", "-n2", "-c1", "--cpu-bind=none", "grep", "Cpus_allowed_list",
               "/proc/self/status"], user=test_user, cwd=c.workdir, timeout=120)
    assert r.rc == 0, r
    per = _allowed(r.out)  # unbound: both run on all of the job's CPUs
    assert set(per) == {0, 1} and per[0] == per[1] and len(per[0]) >= 2, r.out


def test_cpu_bind_sets_slurm_variables(gcluster, test_user):
    r = gcluster.run(["srun", "-n1", "-c1", "--cpu-bind=cores", "printenv", "SLURM_CPU_BIND_TYPE",
                      "SLURM_CPU_BIND_VERBOSE"], user=test_user, cwd=gcluster.workdir,
                     timeout=120)
    assert r.rc == 0, r
    assert r.out.split() == ["mask_cpu:", "quiet"], r.out


def test_bad_cpu_bind_is_refused_before_allocating(gcluster):
    def jobs():
        return gcluster.ok("sacct", "-a", "-n", "-X", "-P", "-o", "JobIDRaw").split()
    before = jobs()
    r = gcluster.run(["srun", "--cpu-bind=sideways", "true"])
    assert r.rc == 1 and "Traceback" not in r.err
    assert r.err.strip() == 'srun: error: unrecognized --cpu-bind argument "sideways"'
    assert jobs() == before  # nothing was allocated
