"""Containers on a real `muster up` cluster with a real OCI runtime (rootless runc as the
job's user): Slurm's ``--container=<bundle>`` and the pyxis-style ``--container-image``.

The bundle and the image are built here from busybox-static (a shell and coreutils in one
static binary); Python comes from the host, bound read-only (``/usr``, ``/lib``, ``/lib64`` and
the repository with its venv) so that torch imports inside. The cluster confines jobs (root,
cgroup v1/v2: `muster up` turns ConstrainRAMSpace and ConstrainDevices on), so the memory and
GPU-device tests show the job's cgroup still holds inside the container.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import tarfile

import pytest

from cluster import TEST_USER, _alive, private_cluster, start_agent, user_exists, wait_for
from muster.agent import userns

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DDP = os.path.join(REPO, "examples", "ddp_allreduce.py")
PY = os.path.join(REPO, ".venv", "bin", "python")
HOST_BINDS = "/usr:/usr:ro,/lib:/lib:ro,/lib64:/lib64:ro," + f"{REPO}:{REPO}:ro"
BUSYBOX = shutil.which("busybox")

pytestmark = [
    pytest.mark.skipif(os.getuid() != 0, reason="the agents must run as root to switch users"),
    pytest.mark.skipif(shutil.which("runc") is None, reason="runc is not installed"),
    pytest.mark.skipif(BUSYBOX is None, reason="busybox-static is not installed"),
    pytest.mark.skipif(not user_exists(TEST_USER), reason=f"no user {TEST_USER}"),
]


def read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def _rootfs(path: str, extra_dirs=()) -> None:
    """A busybox root filesystem: /bin/<applet> links, empty mount points for the host binds."""
    os.makedirs(os.path.join(path, "bin"))
    shutil.copy(BUSYBOX, os.path.join(path, "bin", "busybox"))
    for applet in ("sh", "ls", "cat", "id", "echo", "pwd", "stat", "sleep", "touch", "test",
                   "readlink"):
        os.symlink("busybox", os.path.join(path, "bin", applet))
    for d in ("usr", "lib", "lib64", "proc", "dev", "sys", "tmp", "run", *extra_dirs):
        os.makedirs(os.path.join(path, d.lstrip("/")), exist_ok=True)


def _chown_tree(path: str, user: str) -> None:
    pw = pwd.getpwnam(user)
    for top, dirs, files in os.walk(path):
        for name in [top, *(os.path.join(top, n) for n in dirs + files)]:
            os.lchown(name, pw.pw_uid, pw.pw_gid)


@pytest.fixture(scope="module")
def cc():
    with private_cluster("muster-oci-", nodes=2, cpus=4, mem=8000, gpus=4) as c:
        yield c


@pytest.fixture(scope="module")
def image(cc):
    """A rootfs tarball (the image most tests use), readable by the test user."""
    d = os.path.join(cc.workdir, "img")
    _rootfs(os.path.join(d, "rootfs"), extra_dirs=(REPO, "gpus"))
    path = os.path.join(cc.workdir, "busybox.tar")
    with tarfile.open(path, "w") as tf:
        tf.add(os.path.join(d, "rootfs"), arcname=".")
    os.chmod(path, 0o644)
    return path


def test_batch_job_in_a_bundle_runs_as_its_user_with_its_mounts_and_workdir(cc):
    """sbatch --container=<bundle>: the script runs inside (busybox's sh, not the host's),
    as the submitter (files it makes in a bound directory are the user's on the host), in its
    working directory (bound at the same path), and sees no /home: the bundle binds none."""
    base = os.path.join(cc.workdir, "bundle-case")
    work = os.path.join(base, "work")
    os.makedirs(work)
    bundle = os.path.join(base, "bundle")
    _rootfs(os.path.join(bundle, "rootfs"), extra_dirs=(work, "data"))
    data = os.path.join(base, "data")
    os.makedirs(data)
    with open(os.path.join(data, "marker"), "w") as fh:
        fh.write("from-the-host\n")
    cfg = {"ociVersion": "1.0.2", "process": {"args": ["sh"], "cwd": "/",
                                              "env": ["PATH=/bin", "IMAGE_VAR=kept"]},
           "root": {"path": "rootfs", "readonly": True},
           "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                      {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
                      {"destination": "/data", "type": "none", "source": data,
                       "options": ["rbind", "ro"]},
                      {"destination": work, "type": "none", "source": work,
                       "options": ["rbind", "rw"]}],
           "linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}, {"type": "ipc"}]}}
    with open(os.path.join(bundle, "config.json"), "w") as fh:
        json.dump(cfg, fh)
    _chown_tree(base, TEST_USER)
    script = ("#!/bin/sh\n"
              "echo shell=$(readlink /bin/sh)\n"
              "echo cwd=$(pwd)\n"
              "cat /data/marker\n"
              "echo var=$IMAGE_VAR job=$SLURM_JOB_ID container=$SLURM_CONTAINER\n"
              "test -e /home && echo home=visible || echo home=absent\n"
              "touch made-inside\n")
    jid = cc.sbatch("--container", bundle, "-o", os.path.join(work, "out"), user=TEST_USER,
                    cwd=work, input=script)
    out = os.path.join(work, "out")
    assert cc.wait_done(jid, timeout=90) == "COMPLETED", read(out)
    text = read(out)
    assert "shell=busybox" in text, text
    assert f"cwd={work}" in text, text
    assert "from-the-host" in text, text
    assert f"var=kept job={jid} container={bundle}" in text, text
    assert "home=absent" in text, text
    assert os.stat(os.path.join(work, "made-inside")).st_uid == pwd.getpwnam(TEST_USER).pw_uid


def test_image_step_sees_home_only_when_asked_and_the_workdir_given(cc, image):
    home = pwd.getpwnam(TEST_USER).pw_dir
    if not os.path.isdir(home):
        pytest.skip(f"{TEST_USER} has no home directory")
    cmd = ["srun", "-N1", f"--container-image={image}", "--container-workdir=/tmp", "sh",
           "-c", f"pwd; test -d {home} && echo home=visible || echo home=absent"]
    r = cc.run(cmd, user=TEST_USER, cwd=cc.workdir, timeout=90)
    assert r.rc == 0 and r.out.split() == ["/tmp", "home=absent"], r
    r = cc.run(cmd[:2] + ["--container-mount-home"] + cmd[2:], user=TEST_USER,
               cwd=cc.workdir, timeout=90)
    assert r.rc == 0 and r.out.split() == ["/tmp", "home=visible"], r


def test_gloo_allreduce_across_two_nodes_in_containers(cc, image):
    r = cc.run(["srun", "-N2", "--ntasks-per-node=2", f"--container-image={image}",
                f"--container-mounts={HOST_BINDS}", PY, DDP], user=TEST_USER,
               cwd=cc.workdir, timeout=240)
    assert r.rc == 0, r
    ranks = {}
    for line in r.out.splitlines():
        m = re.fullmatch(r"rank (\d)/4 local (\d) sum 6 ok", line)
        assert m, line
        ranks[int(m.group(1))] = int(m.group(2))
    assert ranks == {0: 0, 1: 1, 2: 0, 3: 1}, r


def test_named_container_is_reused_by_a_later_step(cc, image):
    """The first step makes the named container from the image and writes into its root; the
    second names it without an image and finds the file; a fresh image step does not."""
    script = (f"#!/bin/sh\nsrun --container-image={image} --container-name=keep "
              "sh -c 'echo $SLURM_STEP_ID > /state'\n"
              "srun --container-name=keep cat /state\n"
              f"srun --container-image={image} sh -c 'cat /state 2>/dev/null || echo fresh'\n")
    script += ('test -d /tmp/muster-oci-$(id -u)/jobs/$SLURMD_NODENAME.$SLURM_JOB_ID/keep '
               '&& echo present\n')
    out = os.path.join(cc.workdir, "named.out")
    jid = cc.sbatch("-N1", "-o", out, user=TEST_USER, cwd=cc.workdir, input=script)
    assert cc.wait_done(jid, timeout=120) == "COMPLETED", read(out)
    assert read(out).split() == ["0", "fresh", "present"], read(out)
    # the job is over on its node: the agent has its named containers removed, as the user
    uid = pwd.getpwnam(TEST_USER).pw_uid
    jobs = f"/tmp/muster-oci-{uid}/jobs"
    wait_for(lambda: not any(n.endswith(f".{jid}") for n in os.listdir(jobs)), timeout=30,
             what="the job's named containers removed")


def _named_on(jid: int) -> list[str]:
    """The nodes that hold named containers of job ``jid`` (the test user's node dirs)."""
    jobs = f"/tmp/muster-oci-{pwd.getpwnam(TEST_USER).pw_uid}/jobs"
    return sorted(n.rsplit(".", 1)[0] for n in os.listdir(jobs) if n.endswith(f".{jid}"))


def test_named_containers_go_on_every_node_of_a_batch_job(cc, image):
    """A 2-node batch job whose steps make a named container on both nodes ends by itself,
    with no Epilog configured: its batch host saw its script end, and the other node hears
    the end from the controller (the end-of-job message); both remove the containers."""
    script = (f"#!/bin/sh\nsrun -N2 --ntasks-per-node=1 --container-image={image} "
              "--container-name=both sh -c 'echo $SLURM_NODEID > /where'\n"
              "srun -N2 --ntasks-per-node=1 sh -c 'test -d /tmp/muster-oci-$(id -u)/jobs/"
              "$SLURMD_NODENAME.$SLURM_JOB_ID/both && echo present'\n")
    out = os.path.join(cc.workdir, "named2.out")
    jid = cc.sbatch("-N2", "-o", out, user=TEST_USER, cwd=cc.workdir, input=script)
    assert cc.wait_done(jid, timeout=120) == "COMPLETED", read(out)
    assert read(out).split() == ["present", "present"], read(out)
    wait_for(lambda: not _named_on(jid), timeout=30,
             what=f"job {jid}'s named containers removed on both nodes")


def test_named_containers_go_on_every_node_of_an_srun_allocation(cc, image):
    """srun -N2 as its own allocation (no batch host): when it ends, every node hears it."""
    r = cc.run(["srun", "-N2", "--ntasks-per-node=1", f"--container-image={image}",
                "--container-name=both", "sh", "-c",
                "echo $SLURM_JOB_ID; echo kept > /state; cat /state"],
               user=TEST_USER, cwd=cc.workdir, timeout=90)
    assert r.rc == 0, r
    jid = int(r.out.split()[0])
    assert sorted(r.out.split()) == sorted([str(jid), "kept"] * 2), r
    wait_for(lambda: not _named_on(jid), timeout=30,
             what=f"job {jid}'s named containers removed on both nodes")


def test_named_containers_go_when_the_job_ended_while_its_agent_was_down(cc, image):
    """The agent's table of container jobs outlives it: node1's agent is killed while the
    job runs, the batch script ends with no agent there, and the agent started afterwards
    finds the end (its status file) and has the named container removed."""
    go = os.path.join(cc.workdir, "restart.go")
    out = os.path.join(cc.workdir, "restart.out")
    script = (f"#!/bin/sh\nsrun --container-image={image} --container-name=kept "
              "sh -c 'echo made > /state'\n"
              f"while [ ! -e {go} ]; do sleep 0.1; done\necho finished\n")
    jid = cc.sbatch("-w", "node1", "-o", out, user=TEST_USER, cwd=cc.workdir, input=script)
    wait_for(lambda: _named_on(jid) == ["node1"], timeout=90, what="the named container made")
    old = cc.pids()["agents"]["node1"]
    os.kill(old, 9)
    wait_for(lambda: not _alive(old), what="node1's agent gone")
    with open(go, "w"):
        pass
    wait_for(lambda: "finished" in read(out), timeout=30, what="the script's end, agent away")
    assert _named_on(jid) == ["node1"]  # no agent: nothing removed it yet
    start_agent(cc, "node1")
    wait_for(lambda: not _named_on(jid), timeout=60,
             what=f"job {jid}'s named container removed by the restarted agent")
    assert cc.wait_done(jid, timeout=60) == "COMPLETED", read(out)


def test_memory_limit_holds_inside_the_container(cc, image):
    alloc = "x = bytearray(400 << 20); print('allocated')"
    r = cc.run(["srun", "-N1", "--mem=100M", f"--container-image={image}",
                f"--container-mounts={HOST_BINDS}", PY, "-c", alloc], user=TEST_USER,
               cwd=cc.workdir, timeout=120)
    assert r.rc != 0 and "allocated" not in r.out, r
    assert re.search(r"Detected \d+ oom-kill event\(s\)", r.err), r


GPU_PROBE = ("import errno, os\n"
             "res = []\n"
             "for i in range(4):\n"
             "    try:\n"
             "        os.close(os.open('/gpus/nvidia%d' % i, os.O_RDWR)); res.append('OK')\n"
             "    except OSError as e:\n"
             "        res.append(errno.errorcode[e.errno])\n"
             "print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['SLURM_JOB_GPUS'], *res)\n")


def test_gpu_device_confinement_holds_inside_the_container(cc, image):
    """The node's emulated GPU device files, bound into the container: the two allocated
    reach the (absent) driver (ENXIO), the others are refused by the job's device cgroup
    (EPERM) — inside the container as outside (tests/e2e/test_gpu_devices.py)."""
    devs = os.path.join(cc.state_dir, "dev", "node1")
    if not os.path.exists(os.path.join(devs, "nvidia0")):
        pytest.skip("this cluster has no emulated GPU device files")
    probe = os.path.join(cc.workdir, "gpuprobe.py")
    with open(probe, "w") as fh:
        fh.write(GPU_PROBE)
    r = cc.run(["srun", "-w", "node1", "--gres=gpu:2", f"--container-image={image}",
                f"--container-mounts={HOST_BINDS},{devs}:/gpus,{cc.workdir}:{cc.workdir}:ro",
                PY, probe], user=TEST_USER, cwd=cc.workdir, timeout=90)
    assert r.rc == 0, r
    cvd, gpus, *res = r.out.split()
    allocated = {int(g) for g in gpus.split(",")}
    assert len(allocated) == 2 and cvd == "0,1", r
    assert [res[i] == "ENXIO" for i in range(4)] == [i in allocated for i in range(4)], r
    assert sorted(set(res)) == ["ENXIO", "EPERM"], r


def test_a_bad_image_fails_the_job_with_the_reason(cc):
    """The runner's reason reaches the controller: the job is a launch failure
    (Reason=JobLaunchFailure, ExitCode 1:0) and scontrol shows why (SystemComment=)."""
    out = os.path.join(cc.workdir, "bad.out")
    missing = os.path.join(cc.workdir, "no-such-image.tar")
    jid = cc.sbatch("-N1", f"--container-image={missing}", "-o", out, "--wrap", "echo ran",
                    user=TEST_USER, cwd=cc.workdir)
    assert cc.wait_done(jid, timeout=60) == "FAILED", read(out)
    text = read(out)
    assert "ran" not in text
    assert f"error: container: image {missing}: No such file or directory" in text, text
    show = cc.ok("scontrol", "show", "job", str(jid))
    assert "JobState=FAILED Reason=JobLaunchFailure" in show and "ExitCode=1:0" in show, show
    assert (f"   SystemComment=container: image {missing}: No such file or directory \n"
            in show), show


def _job_named(cc, name: str) -> int:
    """The id of the (only) job called ``name`` (an srun's own allocation prints none)."""
    r = cc.run(["sacct", "-X", "-n", "-P", "--name", name, "-o", "JobIDRaw"])
    ids = [int(x) for x in r.out.split()]
    assert r.rc == 0 and len(ids) == 1, r
    return ids[0]


def test_a_missing_runtime_is_a_launch_failure_with_the_reason(cc, image):
    """oci.conf's RunTimeRun names a binary that does not exist: the batch job ends FAILED
    with Reason=JobLaunchFailure and the reason in scontrol; srun prints Slurm's "task N
    launch failed" line, exits 1, and its job and step say why."""
    conf = os.path.join(os.path.dirname(cc.conf), "oci.conf")
    runtime = os.path.join(cc.workdir, "no-such-runc")
    why = f"container: OCI runtime '{runtime}' not found (install it, or set RunTimeRun in oci.conf)"
    with open(conf, "w") as fh:
        fh.write(f'RunTimeRun="{runtime} --rootless=true run --bundle %b muster-%j-%s-%t"\n')
    try:
        out = os.path.join(cc.workdir, "nort.out")
        jid = cc.sbatch("-N1", f"--container-image={image}", "-o", out, "--wrap", "echo ran",
                        user=TEST_USER, cwd=cc.workdir)
        assert cc.wait_done(jid, timeout=60) == "FAILED", read(out)
        assert why in read(out) and "ran" not in read(out), read(out)
        show = cc.ok("scontrol", "show", "job", str(jid))
        assert "Reason=JobLaunchFailure" in show and "ExitCode=1:0" in show, show
        assert f"SystemComment={why}" in show, show
        r = cc.run(["srun", "-N1", "-J", "nort-srun", f"--container-image={image}", "echo",
                    "ran"], user=TEST_USER, cwd=cc.workdir, timeout=90)
        assert r.rc == 1 and "ran" not in r.out, r
        assert f"srun: error: task 0 launch failed: {why}\n" in r.err, r
        assert "Exited with exit code" not in r.err and "Traceback" not in r.err, r
        sid = _job_named(cc, "nort-srun")
        assert cc.wait_done(sid, timeout=30) == "FAILED"

        def shown():
            s = cc.ok("scontrol", "show", "job", str(sid))
            return s if "SystemComment=" in s else None
        show = wait_for(shown, timeout=30, what="the step's launch failure reported")
        assert f"SystemComment=step 0: task 0: {why}" in show, show
    finally:
        os.unlink(conf)


def test_a_container_job_that_exits_1_itself_is_no_launch_failure(cc, image):
    """Exit status 1 from the script inside the container is the job's own failure:
    NonZeroExitCode and no SystemComment, as for a job without a container."""
    out = os.path.join(cc.workdir, "exit1.out")
    jid = cc.sbatch("-N1", f"--container-image={image}", "-o", out, "--wrap",
                    "echo inside; exit 1", user=TEST_USER, cwd=cc.workdir)
    assert cc.wait_done(jid, timeout=90) == "FAILED", read(out)
    assert "inside" in read(out), read(out)
    show = cc.ok("scontrol", "show", "job", str(jid))
    assert "Reason=NonZeroExitCode" in show and "ExitCode=1:0" in show, show
    assert "SystemComment=" not in show, show


def test_bad_container_options_are_refused_before_submission(cc):
    r = cc.run(["srun", "--container-mounts=/a:/b", "true"], user=TEST_USER, cwd=cc.workdir)
    assert r.rc != 0 and "srun: error: --container-image or --container-name is required" \
        in r.err and "Traceback" not in r.err, r


def test_a_container_task_is_pid_1_of_its_own_pid_namespace(cc, image):
    r = cc.run(["srun", "-N1", f"--container-image={image}", "sh", "-c", "echo pid=$$"],
               user=TEST_USER, cwd=cc.workdir, timeout=90)
    assert r.rc == 0 and r.out.split() == ["pid=1"], r


def test_the_task_is_the_submitters_own_uid_and_gid_inside(cc, image):
    """pyxis's default: the user's own ids inside (files it makes are the user's on the
    host); --container-remap-root shows root instead (the user on the host all the same)."""
    pw = pwd.getpwnam(TEST_USER)
    if userns.usable(TEST_USER, pw.pw_uid, pw.pw_gid) is None:  # scripts/test.sh provides both
        pytest.fail(f"{TEST_USER} has no subordinate ids or newuidmap is missing "
                    "(Debian's uidmap; useradd gives new users /etc/subuid entries)")
    out = os.path.join(cc.workdir, "ids")
    os.makedirs(out, exist_ok=True)
    os.chown(out, pw.pw_uid, pw.pw_gid)
    cmd = ["srun", "-N1", f"--container-image={image}", f"--container-mounts={out}:/out",
           "sh", "-c", 'echo $(id -u) $(id -g); touch /out/f$(id -u)']
    r = cc.run(cmd, user=TEST_USER, cwd=cc.workdir, timeout=90)
    assert r.rc == 0 and r.out.split() == [str(pw.pw_uid), str(pw.pw_gid)], r
    r = cc.run(cmd[:2] + ["--container-remap-root"] + cmd[2:], user=TEST_USER,
               cwd=cc.workdir, timeout=90)
    assert r.rc == 0 and r.out.split() == ["0", "0"], r
    for name in (f"f{pw.pw_uid}", "f0"):
        assert os.stat(os.path.join(out, name)).st_uid == pw.pw_uid, name


WRAPPER = """#!/bin/sh
# runc, logging which oci.conf command ran (its runc verb)
for word in "$@"; do
  case "$word" in create|start|state|kill|delete) echo "$word" >> {log}; break;; esac
done
exec runc "$@"
"""


def test_create_start_mode_ends_through_runtime_kill_and_delete(cc, image):
    """oci.conf's RunTimeCreate/RunTimeStart style, through a wrapper that logs runc's verbs:
    a step that ends by itself is deleted after RunTimeQuery; a cancelled one is killed
    through RunTimeKill first (Slurm's order)."""
    log = os.path.join(cc.workdir, "runtime.log")
    wrap = os.path.join(cc.workdir, "runc-wrap")
    with open(wrap, "w") as fh:
        fh.write(WRAPPER.format(log=log))
    os.chmod(wrap, 0o755)
    rt = f"{wrap} --rootless=true --root=%m/runc"
    cid = "muster-%n-%j-%s-%t"
    conf = os.path.join(os.path.dirname(cc.conf), "oci.conf")
    with open(conf, "w") as fh:
        fh.write(f'RunTimeQuery="{rt} state {cid}"\n'
                 f'RunTimeCreate="{rt} create --no-new-keyring --bundle %b {cid}"\n'
                 f'RunTimeStart="{rt} start {cid}"\n'
                 f'RunTimeKill="{rt} kill {cid} SIGTERM"\n'
                 f'RunTimeDelete="{rt} delete --force {cid}"\n')
    try:
        open(log, "w").close()
        os.chmod(log, 0o666)
        r = cc.run(["srun", "-N1", f"--container-image={image}", "sh", "-c", "exit 3"],
                   user=TEST_USER, cwd=cc.workdir, timeout=90)
        assert r.rc == 3, r
        assert read(log).split() == ["create", "start", "state", "delete"], read(log)
        open(log, "w").close()
        out = os.path.join(cc.workdir, "killed.out")
        loop = "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 1; done"
        jid = cc.sbatch("-N1", f"--container-image={image}", "-o", out, "--wrap", loop,
                        user=TEST_USER, cwd=cc.workdir)
        wait_for(lambda: os.path.exists(out) and "ready" in read(out), timeout=60,
                 what="the container running")
        cc.ok("scancel", str(jid))
        assert cc.wait_done(jid, timeout=60) == "CANCELLED", read(out)
        # the job is CANCELLED at once; its runner ends the container while it completes
        verbs = wait_for(lambda: (v := read(log).split()) and v[-1] == "delete" and v,
                         timeout=60, what="RunTimeDelete")
        assert "got-term" in read(out), read(out)  # the container's init got the TERM
        # RunTimeKill runs while the runtime says the container runs (Slurm's order); when the
        # step daemon's TERM to the group already ended it, the query says so and only
        # RunTimeDelete follows: either way delete is last and nothing comes after it
        assert verbs[:2] == ["create", "start"] and verbs[-1] == "delete", verbs
        assert "kill" not in verbs or verbs.index("kill") < len(verbs) - 1, verbs
        assert verbs.count("delete") == 1, verbs
    finally:
        os.unlink(conf)
