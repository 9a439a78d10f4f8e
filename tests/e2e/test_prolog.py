"""Prolog, Epilog, PrologSlurmctld, EpilogSlurmctld, TaskProlog and TaskEpilog on real daemons.

The admin's scripts live in a root-owned directory (``D``, mode 0755: root runs nothing a user
could swap) and record what they saw there; control files in ``D`` make a script fail or hang
on one node (``fail_prolog.node3``...). Jobs run as the test user and can see the world-
writable ``W``. Each test undoes the drains and control files it made.
"""

import contextlib
import os
import shutil
import tempfile

import pytest

from cluster import private_cluster, wait_for

PROLOG = """#!/bin/sh
f="$D/prolog.$SLURM_JOB_ID.$SLURMD_NODENAME"
/usr/bin/env > "$f.tmp"; /bin/mv "$f.tmp" "$f"
echo "uid=$(/usr/bin/id -u) job=$SLURM_JOB_ID user=$SLURM_JOB_USER ctx=$SLURM_SCRIPT_CONTEXT" \\
    > "$W/prolog_seen.$SLURM_JOB_ID"
/bin/chmod 644 "$W/prolog_seen.$SLURM_JOB_ID"
[ -e "$D/slow_prolog.$SLURMD_NODENAME" ] && /bin/sleep 120
[ -e "$D/fail_prolog.$SLURMD_NODENAME" ] && exit 3
[ -e "$D/late_prolog.$SLURMD_NODENAME" ] && /bin/sleep 2
: > "$D/prolog_done.$SLURM_JOB_ID.$SLURMD_NODENAME"
exit 0
"""
EPILOG = """#!/bin/sh
if [ -e "$W/job_done.$SLURM_JOB_ID" ]; then when=after; else when=before; fi
f="$D/epilog.$SLURM_JOB_ID.$SLURMD_NODENAME"
{ /usr/bin/env; echo "WHEN=$when"; } > "$f.tmp"; /bin/mv "$f.tmp" "$f"
[ -e "$D/fail_epilog.$SLURMD_NODENAME" ] && exit 4
exit 0
"""
CTLD = """#!/bin/sh
f="$D/{name}.$SLURM_JOB_ID"
/usr/bin/env > "$f.tmp"; /bin/mv "$f.tmp" "$f"
[ -e "$D/fail_{name}" ] && exit 1
exit 0
"""
TASK_PROLOG = """#!/bin/sh
echo "print task prolog says hi"
echo "export TP_VAR=hello world \\$HOME"
echo "unset TP_UNSET_ME"
echo "export TP_CTX=$SLURM_SCRIPT_CONTEXT"
"""
TASK_EPILOG = """#!/bin/sh
echo "uid=$(/usr/bin/id -u) ctx=$SLURM_SCRIPT_CONTEXT" > "$W/task_epilog.$SLURM_JOB_ID.$SLURM_PROCID"
"""


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)
    os.chmod(path, 0o755)


def _scripts(d: str, w: str) -> str:
    """Write the scripts into ``d``; the slurm.conf lines naming them all."""
    head = f"D={d}\nW={w}\n"
    for name, text in (("prolog", PROLOG), ("epilog", EPILOG),
                       ("ctld_prolog", CTLD.replace("{name}", "ctld_prolog")),
                       ("ctld_epilog", CTLD.replace("{name}", "ctld_epilog")),
                       ("task_prolog", TASK_PROLOG), ("task_epilog", TASK_EPILOG)):
        _write(os.path.join(d, f"{name}.sh"), text.replace("#!/bin/sh\n", "#!/bin/sh\n" + head, 1))
    return (f"Prolog={d}/prolog.sh\nEpilog={d}/epilog.sh\n"
            f"PrologSlurmctld={d}/ctld_prolog.sh\nEpilogSlurmctld={d}/ctld_epilog.sh\n"
            f"TaskProlog={d}/task_prolog.sh\nTaskEpilog={d}/task_epilog.sh\nPrologTimeout=10\n")


@contextlib.contextmanager
def _site(more_conf: str = "", only=None):
    """(cluster, D, W): a 4-node cluster with the scripts configured (``only``: those lines)."""
    d = tempfile.mkdtemp(prefix="muster-prolog-d-", dir="/tmp")
    os.chmod(d, 0o755)
    w = tempfile.mkdtemp(prefix="muster-prolog-w-", dir="/tmp")
    os.chmod(w, 0o1777)
    lines = _scripts(d, w).splitlines()
    conf = "\n".join(x for x in lines if only is None or x.split("=")[0] in only)
    try:
        with private_cluster("muster-prolog-", nodes=4, cpus=4, gpus=2,
                             extra_conf=conf + "\n" + more_conf) as c:
            yield c, d, w
    finally:
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(w, ignore_errors=True)


@pytest.fixture(scope="module")
def site():
    """Every script configured, Slurm's default PrologFlags and SchedulerParameters."""
    with _site() as s:
        yield s


@pytest.fixture(scope="module")
def alloc_site():
    """PrologFlags=Alloc and SchedulerParameters=nohold_on_prolog_fail, node scripts only."""
    with _site("PrologFlags=Alloc\nSchedulerParameters=nohold_on_prolog_fail\n",
               only=("Prolog", "Epilog")) as s:
        yield s


def _env(path: str) -> dict:
    with open(path) as fh:
        return dict(line.split("=", 1) for line in fh.read().splitlines() if "=" in line)


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def _node_reason(c, node: str) -> str:
    out = c.ok("scontrol", "show", "node", node)
    return out.split("Reason=", 1)[1].split(" [")[0].strip() if "Reason=" in out else ""


def _resume(c, node: str) -> None:
    c.ok("scontrol", "update", f"nodename={node}", "state=resume")


def _field(c, jid: int, name: str) -> str:
    out = c.ok("scontrol", "show", "job", str(jid))
    return out.split(f"{name}=", 1)[1].split()[0]


def test_prolog_runs_as_root_before_the_job_and_epilog_after(site, test_user):
    c, d, w = site
    jid = c.sbatch("-w", "node1", "--gres=gpu:1", "-o", f"{w}/p_%j.out", "--wrap",
                   f"cat {w}/prolog_seen.$SLURM_JOB_ID; touch {w}/job_done.$SLURM_JOB_ID",
                   user=test_user)
    assert c.wait_done(jid, timeout=60) == "COMPLETED"
    # the job saw what the prolog wrote: the prolog ran first, as root, knowing the job
    assert _read(f"{w}/p_{jid}.out").splitlines()[-1] == \
        f"uid=0 job={jid} user={test_user} ctx=prolog_slurmd"
    env = _env(f"{d}/prolog.{jid}.node1")
    uid = str(os.stat(f"{w}/p_{jid}.out").st_uid)
    assert env["SLURM_JOB_ID"] == str(jid) and env["SLURM_JOB_UID"] == uid
    assert env["SLURM_JOB_USER"] == test_user and env["SLURMD_NODENAME"] == "node1"
    assert env["SLURM_JOB_PARTITION"] == "gpu" and env["SLURM_JOB_NODELIST"] == "node1"
    assert env["CUDA_VISIBLE_DEVICES"] == env["SLURM_JOB_GPUS"] != ""
    assert "PATH" not in env and "HOME" not in env  # a clean environment, as in Slurm
    # the epilog runs on the node once the job's processes are gone
    path = f"{d}/epilog.{jid}.node1"
    wait_for(lambda: os.path.exists(path), timeout=60, what="epilog")
    env = _env(path)
    assert env["WHEN"] == "after" and env["SLURM_SCRIPT_CONTEXT"] == "epilog_slurmd"
    assert env["SLURM_JOB_ID"] == str(jid)


def test_default_prolog_runs_only_where_the_job_starts_something(site, test_user):
    c, d, w = site
    jid = c.sbatch("-N2", "-w", "node1,node2", "-o", "/dev/null", "--wrap", "true",
                   user=test_user)
    assert c.wait_done(jid, timeout=60) == "COMPLETED"
    wait_for(lambda: os.path.exists(f"{d}/epilog.{jid}.node2"), timeout=60, what="epilogs")
    assert os.path.exists(f"{d}/prolog.{jid}.node1")
    assert not os.path.exists(f"{d}/prolog.{jid}.node2")  # no step ran there (no Alloc)
    assert os.path.exists(f"{d}/epilog.{jid}.node1")  # the epilog runs on every node


def test_slurmctld_prolog_and_epilog(site, test_user):
    c, d, w = site
    jid = c.sbatch("-J", "ctldjob", "-o", "/dev/null", "--wrap", "exit 3", user=test_user)
    assert c.wait_done(jid, timeout=60) == "FAILED"
    env = _env(f"{d}/ctld_prolog.{jid}")
    assert env["SLURM_JOB_ID"] == str(jid) and env["SLURM_JOB_NAME"] == "ctldjob"
    assert env["SLURM_SCRIPT_CONTEXT"] == "prolog_slurmctld" and env["SLURM_JOB_USER"] == test_user
    path = f"{d}/ctld_epilog.{jid}"
    wait_for(lambda: os.path.exists(path), timeout=60, what="EpilogSlurmctld")
    env = _env(path)
    assert env["SLURM_SCRIPT_CONTEXT"] == "epilog_slurmctld"
    assert env["SLURM_JOB_EXIT_CODE2"] == "3:0" and env["SLURM_JOB_EXIT_CODE"] == str(3 << 8)


def test_failing_slurmctld_prolog_requeues_the_batch_job(site, test_user):
    c, d, w = site
    flag = f"{d}/fail_ctld_prolog"
    _write(flag, "")
    try:
        jid = c.sbatch("-o", f"{w}/cp_%j.out", "--wrap", "echo ran", user=test_user)
        wait_for(lambda: int(_field(c, jid, "Restarts")) >= 1, timeout=60, what="requeue")
        assert c.state_of(jid) != "COMPLETED"  # the script never ran meanwhile
        assert not os.path.exists(f"{w}/cp_{jid}.out")
    finally:
        os.unlink(flag)
    assert c.wait_done(jid, timeout=90) == "COMPLETED"  # not held: it runs once it passes
    assert _read(f"{w}/cp_{jid}.out").splitlines()[-1] == "ran"


def test_task_prolog_sets_the_environment_and_prints(site, test_user):
    c, d, w = site
    script = ("echo TP_VAR=[$TP_VAR] UNSET=[${TP_UNSET_ME-gone}] CTX=[$TP_CTX]\n"
              "srun -n2 sh -c 'echo step$SLURM_PROCID TP_VAR=[$TP_VAR]'\n")
    jid = c.sbatch("-n2", "-o", f"{w}/tp_%j.out", user=test_user, input="#!/bin/sh\n" + script,
                   env={"TP_UNSET_ME": "here"})
    assert c.wait_done(jid, timeout=60) == "COMPLETED"
    lines = _read(f"{w}/tp_{jid}.out").splitlines()
    assert lines[0] == "task prolog says hi"  # "print" reaches the task's stdout first
    assert lines[1] == "TP_VAR=[hello world $HOME] UNSET=[gone] CTX=[prolog_task]"
    assert sorted(x for x in lines if x.startswith("step")) == \
        ["step0 TP_VAR=[hello world $HOME]", "step1 TP_VAR=[hello world $HOME]"]
    assert lines.count("task prolog says hi") == 3  # the batch script and both tasks
    # TaskEpilog: as the user, after each task
    uid = os.stat(f"{w}/tp_{jid}.out").st_uid
    wait_for(lambda: os.path.exists(f"{w}/task_epilog.{jid}.1"), timeout=30, what="TaskEpilog")
    assert _read(f"{w}/task_epilog.{jid}.1") == f"uid={uid} ctx=epilog_task\n"


def test_failing_prolog_drains_the_node_and_requeues_the_job_held(site, test_user):
    c, d, w = site
    flag = f"{d}/fail_prolog.node3"
    _write(flag, "")
    try:
        jid = c.sbatch("-w", "node3", "-o", f"{w}/fp_%j.out", "--wrap", "echo ran",
                       user=test_user)
        wait_for(lambda: _node_reason(c, "node3") == "Prolog error", timeout=60,
                 what="node3 drained")
        assert "Prolog error" in c.ok("sinfo", "-R", "-h")
        wait_for(lambda: c.ok("squeue", "-h", "-j", str(jid), "-o", "%T %R").strip() ==
                 "PENDING (launch failed requeued held)", timeout=30, what="held requeue")
        assert _field(c, jid, "Restarts") == "1"
        assert not os.path.exists(f"{w}/fp_{jid}.out")  # the script never ran
    finally:
        os.unlink(flag)
        _resume(c, "node3")
    c.ok("scontrol", "release", str(jid))
    assert c.wait_done(jid, timeout=60) == "COMPLETED"
    r = c.run(["sacct", "--duplicates", "-j", str(jid), "-X", "-P", "-n", "-o", "State"])
    assert r.out.split() == ["REQUEUED", "COMPLETED"]


def test_prolog_past_its_timeout_fails_and_a_no_requeue_job_fails(site, test_user):
    c, d, w = site
    flag = f"{d}/slow_prolog.node4"
    _write(flag, "")
    try:
        jid = c.sbatch("--no-requeue", "-w", "node4", "-o", "/dev/null", "--wrap", "true",
                       user=test_user)
        wait_for(lambda: _node_reason(c, "node4") == "Prolog error", timeout=90,
                 what="node4 drained after PrologTimeout")
        assert c.wait_done(jid, timeout=60) == "FAILED"
        assert _field(c, jid, "Reason") == "JobLaunchFailure"
    finally:
        os.unlink(flag)
        _resume(c, "node4")


def test_failing_epilog_drains_the_node(site, test_user):
    c, d, w = site
    flag = f"{d}/fail_epilog.node2"
    _write(flag, "")
    try:
        jid = c.sbatch("-w", "node2", "-o", "/dev/null", "--wrap", "true", user=test_user)
        assert c.wait_done(jid, timeout=60) == "COMPLETED"
        wait_for(lambda: _node_reason(c, "node2") == "Epilog error", timeout=60,
                 what="node2 drained")
    finally:
        os.unlink(flag)
        _resume(c, "node2")


def test_alloc_prolog_runs_on_every_node_and_salloc_waits_for_it(alloc_site, test_user):
    c, d, w = alloc_site
    jid = c.sbatch("-N2", "-w", "node1,node2", "-o", "/dev/null", "--wrap", "true",
                   user=test_user)
    assert c.wait_done(jid, timeout=60) == "COMPLETED"
    wait_for(lambda: os.path.exists(f"{d}/epilog.{jid}.node2"), timeout=60, what="epilogs")
    assert os.path.exists(f"{d}/prolog_done.{jid}.node2")  # at allocation, without a step
    # salloc is granted only once every node's prolog is done (no NoHold)
    late = f"{d}/late_prolog.node2"
    _write(late, "")
    try:
        r = c.run(["salloc", "-N2", "-w", "node1,node2", "sh", "-c",
                   f"ls {d}/prolog_done.$SLURM_JOB_ID.node2"], user=test_user, timeout=90)
    finally:
        os.unlink(late)
    assert r.rc == 0, r
    assert "prolog_done" in r.out


def test_nohold_prolog_failure_requeues_and_runs_elsewhere(alloc_site, test_user):
    c, d, w = alloc_site
    blockers = [c.sbatch("-w", n, "-c4", "-o", "/dev/null", "--wrap", "sleep 300")
                for n in ("node2", "node3", "node4")]
    for b in blockers:
        c.wait_state(b, "RUNNING", timeout=60)
    flag = f"{d}/fail_prolog.node1"
    _write(flag, "")
    try:
        jid = c.sbatch("-o", f"{w}/nh_%j.out", "--wrap", "echo ran on $SLURMD_NODENAME",
                       user=test_user)
        wait_for(lambda: _node_reason(c, "node1") == "Prolog error", timeout=60,
                 what="node1 drained")
        wait_for(lambda: _field(c, jid, "Restarts") == "1", timeout=30, what="requeue")
        assert _field(c, jid, "Priority") != "0"  # not held: it waits for resources only
    finally:
        os.unlink(flag)
        c.ok("scancel", *map(str, blockers))
    assert c.wait_done(jid, timeout=90) == "COMPLETED"
    assert _read(f"{w}/nh_{jid}.out").strip() in ("ran on node2", "ran on node3", "ran on node4")
    _resume(c, "node1")
