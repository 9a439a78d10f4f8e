"""Researchers' Slurm tools drive Muster's commands unmodified, exactly as they drive Slurm.

Each test runs the real, unpatched PyPI package (the ``tools`` extra of pyproject.toml) against
the session's 4-node cluster.  The tools call ``sbatch``/``squeue``/``sacct``/``scancel``/...
through ``subprocess`` from *this* process, so ``tool_env`` points this process's own
environment at the cluster (the virtualenv's bin first on PATH, MUSTER_CONF, no inherited
SLURM_* variables) exactly as a user's login shell on a Slurm cluster would be.
"""

import os
import shutil
import subprocess
import time

import pytest

from cluster import BIN, wait_for

def read(path):
    with open(path) as fh:
        return fh.read()


@pytest.fixture
def tool_env(cluster, monkeypatch):
    for k in list(os.environ):
        if k.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SACCT_", "SINFO_", "SCANCEL_", "SRUN_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("PATH", cluster.env["PATH"])
    monkeypatch.setenv("MUSTER_CONF", cluster.conf)
    return cluster


def _have_srun(cluster) -> bool:
    return shutil.which("srun", path=cluster.env["PATH"]) is not None


# ------------------------------------------------------------------------------------------------
# submitit
# ------------------------------------------------------------------------------------------------


def _settled(job):
    """The job's sacct state once it has left RUNNING (the result file is written just before
    the batch script exits, so ``result()`` can return while sacct still says RUNNING)."""
    return wait_for(lambda: (s := job.watcher.get_state(job.job_id, mode="force")) not in (
        "PENDING", "RUNNING", "COMPLETING", "UNKNOWN") and s, timeout=20, what="job settled")


def test_submitit(tool_env, workdir):
    """submitit's SlurmExecutor: submit, job arrays (``map_array``), cancel, remote exceptions.

    What submitit needs from Muster: ``sbatch <file>`` printing ``Submitted batch job N``
    (it parses ``job (\\d+)``), the ``#SBATCH`` lines it writes (``--signal=USR2@90``,
    ``--open-mode=append``, ``--wckey=submitit``, ``--gpus-per-node``, ``--array=0-2%3``,
    ``%j``/``%A_%a`` in ``--output``/``--error`` file names), the batch
    environment (SLURM_JOB_ID, SLURM_ARRAY_JOB_ID/TASK_ID, SLURM_NTASKS, SLURM_PROCID, ...),
    ``sacct -o JobID,State,NodeList --parsable2 -j A -j B`` (``A_T`` rows for array tasks,
    ``CANCELLED by UID``), and ``scancel A``.

    srun: submitit's generated script runs each task through ``srun --unbuffered --output
    ... --error ... python -u -m submitit.core._submit FOLDER`` inside the allocation, and it
    only picks the Slurm executor when ``srun`` is on PATH.  This test uses that default path
    (Muster's srun); a ``tasks_per_node=2`` job checks that srun gives each task its rank.

    Log folder: submitit's usual ``folder="logs/%j"`` puts ``%j`` in a *directory* of
    ``--output``, and submitit creates ``logs/<id>/`` only after sbatch has returned the id.
    Muster launches a job within milliseconds of the submission, often before that directory
    exists; like slurmstepd it then cannot open the output file and the job fails
    (``JobLaunchFailure``, "execve(): No such file or directory: .../<id>_0_log.out") — about
    one job in three here.  Slurm's slower launch path hides the same race.  The test therefore
    uses a flat folder (which submitit creates before submitting); see the report on the
    agent's output-file handling.
    """
    import submitit
    from submitit.core.utils import FailedJobError

    def work(a, b):
        env = submitit.JobEnvironment()
        return a + b, env.job_id, os.environ.get("CUDA_VISIBLE_DEVICES", ""), env.global_rank

    def boom():
        raise ValueError("kaboom from the job")

    folder = os.path.join(workdir, "submitit")  # no "%j" directory level: see the docstring
    ex = submitit.AutoExecutor(folder=folder)
    assert ex.cluster == "slurm"
    ex.update_parameters(slurm_partition="gpu", timeout_min=5, gpus_per_node=1,
                         name="submitit-tools")
    assert "\nsrun --unbuffered" in ex._executor._make_submission_file_text("true", "x")

    job = ex.submit(work, 2, 3)
    value, job_id, gpus, rank = job.result()
    assert value == 5 and job_id == job.job_id and gpus.isdigit() and rank == 0
    assert _settled(job) == "COMPLETED"
    assert tool_env.state_of(int(job.job_id)) == "COMPLETED"

    jobs = ex.map_array(work, [1, 2, 3], [10, 20, 30])
    master = jobs[0].job_id.split("_")[0]
    assert [j.job_id for j in jobs] == [f"{master}_{i}" for i in range(3)]
    results = [j.result() for j in jobs]
    assert [r[0] for r in results] == [11, 22, 33]
    assert [r[1] for r in results] == [j.job_id for j in jobs]
    assert [_settled(j) for j in jobs] == ["COMPLETED"] * 3

    ex.update_parameters(tasks_per_node=2)
    pair = ex.submit(work, 1, 1)
    assert sorted(r[3] for r in pair.results()) == [0, 1]
    assert {r[1] for r in pair.results()} == {pair.job_id}
    ex.update_parameters(tasks_per_node=1)

    bad = ex.submit(boom)
    with pytest.raises(FailedJobError, match="kaboom from the job"):
        bad.result()
    assert _settled(bad) == "FAILED"

    slow = ex.submit(time.sleep, 300)
    wait_for(lambda: slow.watcher.get_state(slow.job_id, mode="force") == "RUNNING",
             timeout=20, what="submitit job running")
    slow.cancel(check=True)
    wait_for(lambda: slow.watcher.get_state(slow.job_id, mode="force").startswith("CANCELLED"),
             timeout=20, what="submitit job cancelled")
    assert slow.state.startswith("CANCELLED")
    assert slow.done()


# ------------------------------------------------------------------------------------------------
# dask-jobqueue
# ------------------------------------------------------------------------------------------------


def _array_states(array_id):
    r = subprocess.run(["sacct", "-X", "-P", "-n", "-o", "JobID,State", "-j", str(array_id)],
                       capture_output=True, text=True, check=True)
    return dict(line.split("|") for line in r.stdout.splitlines() if line)


def _squeue_ids(name):
    r = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i %T"], capture_output=True,
                       text=True, check=True)
    return {int(line.split()[0]): line.split()[1] for line in r.stdout.splitlines() if line}


def test_dask_jobqueue(tool_env, workdir):
    """dask-jobqueue's SLURMCluster: each worker is an ``sbatch`` job (``#SBATCH -J -e -o -p -n
    --cpus-per-task --mem=954M -t``, script file argument, job id from sbatch's stdout); scaling
    down runs ``scancel ID``.  The scheduler and workers listen on the loopback interface only.
    """
    from dask.distributed import Client
    from dask_jobqueue import SLURMCluster

    name = "dask-tools-test"
    with SLURMCluster(cores=1, memory="1GB", processes=1, queue="gpu", walltime="00:10:00",
                      job_name=name, interface="lo", log_directory=os.path.join(workdir, "dask"),
                      scheduler_options={"interface": "lo", "dashboard": False,
                                         "dashboard_address": "127.0.0.1:0"}) as cl:
        assert cl.scheduler_address.startswith("tcp://127.0.0.1:")
        script = cl.job_script()
        assert "#SBATCH -p gpu" in script and "#SBATCH -t 00:10:00" in script
        cl.scale(2)
        with Client(cl) as client:
            client.wait_for_workers(2, timeout=40)
            job_ids = {int(j.job_id) for j in cl.workers.values()}
            assert len(job_ids) == 2
            queued = _squeue_ids(name)
            assert set(queued) == job_ids and set(queued.values()) == {"RUNNING"}, queued
            assert client.submit(lambda x: x * x, 7).result(timeout=30) == 49
            assert sum(client.gather(client.map(lambda x: x + 1, range(10)))) == 55
            cl.scale(0)
            wait_for(lambda: not _squeue_ids(name), timeout=30, what="dask workers gone")
    for jid in job_ids:
        assert tool_env.wait_done(jid) == "CANCELLED"
        assert os.path.exists(os.path.join(workdir, "dask", f"{name}-{jid}.err"))


# ------------------------------------------------------------------------------------------------
# simple-slurm
# ------------------------------------------------------------------------------------------------


def test_simple_slurm(tool_env, workdir, monkeypatch):
    """simple-slurm: ``#SBATCH --option    value`` lines (space-separated, padded), the script
    fed to ``sbatch`` on stdin through a shell here-document, ``--parsable`` as a directive,
    its squeue wrapper (``squeue --me -o '"%i","%j",...'`` read back as CSV) and scancel."""
    from simple_slurm import Slurm

    monkeypatch.chdir(workdir)
    s = Slurm(job_name="simple", partition="gpu", nodes=1, ntasks=1, cpus_per_task=2,
              gres="gpu:1", mem="1G", time="0:05:00",
              output=f"simple_{Slurm.JOB_ID}.out", error=f"simple_{Slurm.JOB_ID}.err")
    s.add_cmd("echo hello from $SLURM_JOB_ID cpus=$SLURM_CPUS_ON_NODE")
    jid = s.sbatch("echo gpus=$CUDA_VISIBLE_DEVICES", verbose=False)
    assert isinstance(jid, int)
    assert tool_env.wait_done(jid) == "COMPLETED"
    out = read(os.path.join(workdir, f"simple_{jid}.out")).splitlines()
    assert out[0] == f"hello from {jid} cpus=2"
    assert out[1].startswith("gpus=") and out[1][5:].isdigit()
    assert read(os.path.join(workdir, f"simple_{jid}.err")) == ""

    arr = Slurm(array=range(3, 6), job_name="simple-arr", parsable=True, time="1",
                output=f"arr_{Slurm.JOB_ARRAY_MASTER_ID}_{Slurm.JOB_ARRAY_ID}.out")
    aid = arr.sbatch("echo task $SLURM_ARRAY_TASK_ID", verbose=False)
    wait_for(lambda: all(os.path.exists(os.path.join(workdir, f"arr_{aid}_{t}.out"))
                         for t in (3, 4, 5)), timeout=30, what="array outputs")
    wait_for(lambda: _array_states(aid) == {f"{aid}_{t}": "COMPLETED" for t in (3, 4, 5)},
             timeout=30, what="array tasks COMPLETED")
    for t in (3, 4, 5):
        assert read(os.path.join(workdir, f"arr_{aid}_{t}.out")) == f"task {t}\n"

    sl = Slurm(job_name="simple-sleep", time="5")
    sid = sl.sbatch("sleep 300", verbose=False)
    wait_for(lambda: (sl.squeue.update_squeue() or sl.squeue.jobs.get(sid, {}).get("ST")) == "R",
             timeout=20, what="squeue wrapper shows the job running")
    row = sl.squeue.jobs[sid]
    assert row["NAME"] == "simple-sleep" and row["NODES"] == "1"
    sl.scancel.cancel_job(sid)
    assert tool_env.wait_done(sid) == "CANCELLED"


# ------------------------------------------------------------------------------------------------
# Snakemake (snakemake-executor-plugin-slurm)
# ------------------------------------------------------------------------------------------------

SNAKEFILE = """\
rule all:
    input: "result.txt"

rule make:
    output: "data_{i}.txt"
    shell: "echo data {wildcards.i} job=$SLURM_JOB_ID > {output}"

rule combine:
    input: expand("data_{i}.txt", i=[1, 2])
    output: "result.txt"
    shell: "cat {input} > {output}"
"""


def test_snakemake_slurm_executor(tool_env, workdir):
    """``snakemake --executor slurm``: two rules, three Muster jobs, no conda.

    The submitting side (snakemake-executor-plugin-slurm) needs: ``sbatch --parsable`` with the
    job script on stdin (``--job-name <run uuid> --output .../%j.log --export=ALL --comment
    rule_make -p gpu -t 5 --mem 500 --ntasks=1 --cpus-per-task=1``), ``sacct -X --parsable2
    --clusters all --noheader --format=JobIdRaw,State --starttime <2 days ago> --endtime now
    --name <uuid>`` to poll, ``sacct -j ID.STEP --format=Reason --noheader`` for failure
    reasons (must print only that step's row: nothing for a missing step), ``scontrol show
    config`` (MinJobAge), ``which sinfo/sacct/squeue``, ``scancel`` on interrupt.  Without an
    account it tries ``sacct -nu USER -o Account%256 | tail -1`` as one argv (fails, as on
    Slurm, and it proceeds); with ``slurm_account`` it would need ``sacctmgr``/``sshare``.

    Inside each job the jobstep plugin (snakemake-executor-plugin-slurm-jobstep) runs the rule
    as ``srun -n1 --cpu-bind=q --cpus-per-task=1 --nodes=1 <snakemake ...>`` — unconditionally
    for ordinary (non-``mpi``) rules, so this test runs on Muster's ``srun`` (without it every
    job fails with ``srun: not found``).
    """
    with open(os.path.join(workdir, "Snakefile"), "w") as fh:
        fh.write(SNAKEFILE)
    argv = [os.path.join(BIN, "snakemake"), "--executor", "slurm", "--jobs", "2",
            "--default-resources", "slurm_partition=gpu", "runtime=5", "mem_mb=500",
            "--latency-wait", "5", "--slurm-init-seconds-before-status-checks", "1",
            "--nocolor"]
    r = tool_env.run(argv, cwd=workdir, timeout=150)
    logs = []
    for root, _dirs, files in os.walk(os.path.join(workdir, ".snakemake", "slurm_logs")):
        for f in sorted(files):
            logs.append(f"--- {f}\n" + read(os.path.join(root, f))[-1500:])
    detail = f"{r}\n" + "\n".join(logs)
    if not _have_srun(tool_env):
        detail = ("Muster has no srun; the Snakemake jobstep plugin runs every rule through "
                  "`srun -n1 ...` inside the job.\n" + detail)
    assert r.rc == 0, detail
    data = {i: read(os.path.join(workdir, f"data_{i}.txt")).split() for i in (1, 2)}
    for i in (1, 2):
        assert data[i][:2] == ["data", str(i)] and data[i][2].startswith("job=")
    assert data[1][2] != data[2][2]  # two different Muster jobs
    assert read(os.path.join(workdir, "result.txt")) == (
        read(os.path.join(workdir, "data_1.txt")) + read(os.path.join(workdir, "data_2.txt")))
