"""Checkpoint and requeue as training tools do it under Slurm, unmodified.

* submitit: a ``submitit.helpers.Checkpointable`` job is warned by its ``--signal=USR2@T``
  before the time limit, and (another job) preempted the way submitit's own ``_interrupt``
  does it (``scancel --signal SIGTERM`` then ``scancel --signal USR2``); each time its task's
  handler checkpoints, calls ``scontrol requeue`` on the running job and exits, and the next
  run resumes from the checkpoint and returns the result.
* Lightning: ``SLURMEnvironment(auto_requeue=True)`` on SIGUSR1 (``scancel --signal USR1``
  once training runs) saves its HPC checkpoint and requeues; the next run restores the step
  it had reached and finishes.

The signals must reach the tasks and not the batch shell (bash dies of USR1/USR2), and a job
being requeued must never look finished to sacct (submitit polls it).
"""

import os
import sys
import time

import pytest

from cluster import wait_for

submitit = pytest.importorskip("submitit")
cloudpickle = pytest.importorskip("cloudpickle")
# submitit pickles the job's callable; the job's Python cannot import this module
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def read(path):
    with open(path) as fh:
        return fh.read()


class Resumable(submitit.helpers.Checkpointable):
    """First run: says it is ready, then works until a signal. The checkpoint submitit takes
    then is this object (``runs`` = 1); the next run returns."""

    def __init__(self, ready: str):
        self.ready = ready
        self.runs = 0

    def __call__(self):
        self.runs += 1
        if self.runs == 1:
            with open(self.ready, "w") as fh:
                fh.write(os.environ["SLURM_JOB_ID"])
            while True:
                time.sleep(0.05)
        return self.runs, os.environ.get("SLURM_RESTART_COUNT")


@pytest.fixture(scope="module")
def tools_env(cluster):
    """This process's environment pointed at the cluster, as a user's login shell would be
    (submitit runs sbatch, sacct, scancel from here): Muster's bin first, no SLURM_*."""
    with pytest.MonkeyPatch.context() as mp:
        for k in list(os.environ):
            if k.startswith(("SLURM_", "SBATCH_", "SACCT_", "SCANCEL_", "SRUN_")):
                mp.delenv(k)
        mp.setenv("PATH", cluster.env["PATH"])
        mp.setenv("MUSTER_CONF", cluster.conf)
        yield cluster


@pytest.fixture(scope="module")
def submitit_jobs(tools_env, tmp_path_factory):
    """Both submitit jobs, started together (the warned one waits for its clock)."""
    folder = str(tmp_path_factory.mktemp("submitit"))
    ex = submitit.SlurmExecutor(folder=folder)
    # -t 1 with USR2@50: the warning comes 10 s after the start
    ex.update_parameters(time=1, signal_delay_s=50, ntasks_per_node=1, job_name="warned")
    warned = ex.submit(Resumable(os.path.join(folder, "warned.ready")))
    ex.update_parameters(time=30, signal_delay_s=90, job_name="preempted")
    preempted = ex.submit(Resumable(os.path.join(folder, "preempted.ready")))
    return {"warned": warned, "preempted": preempted, "folder": folder}


def _resumed(cluster, job) -> None:
    assert job.result() == (2, "1")
    wait_for(lambda: cluster.state_of(int(job.job_id)) == "COMPLETED", 30, what="job completed")
    r = cluster.run(["sacct", "--duplicates", "-X", "-n", "-P", "-o", "State", "-j", job.job_id])
    assert r.out.split() == ["REQUEUED", "COMPLETED"], r.out


def test_submitit_checkpointable_resumes_after_preemption(tools_env, submitit_jobs):
    job = submitit_jobs["preempted"]
    ready = os.path.join(submitit_jobs["folder"], "preempted.ready")
    # written by the job's function: submitit's signal handlers are installed by then
    wait_for(lambda: os.path.exists(ready), 60, what="first run working")
    job._interrupt()  # submitit's own: scancel --signal SIGTERM, then --signal USR2
    _resumed(tools_env, job)
    assert "this job is preempted" in read(job.paths.stderr)


def test_submitit_checkpointable_resumes_after_the_time_limit_warning(tools_env, submitit_jobs):
    job = submitit_jobs["warned"]
    _resumed(tools_env, job)
    assert "this job is timed-out" in read(job.paths.stderr)


LIGHTNING = r'''
import os, sys, time
import torch
import lightning.pytorch as pl
from lightning.pytorch.plugins.environments import SLURMEnvironment
from torch.utils.data import DataLoader, TensorDataset

d = sys.argv[1]
restart = int(os.environ.get("SLURM_RESTART_COUNT", "0"))


class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)

    def on_train_start(self):
        print(f"run {restart} starts at step {self.trainer.global_step}", flush=True)

    def training_step(self, batch, i):
        if restart == 0 and self.global_step == 3:
            open(os.path.join(d, "ready"), "w").close()
            # SIGUSR1: Lightning checkpoints and requeues; the requeue's SIGTERM ends the wait
            while not self.trainer.received_sigterm:
                time.sleep(0.05)
        return self.layer(batch[0]).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


trainer = pl.Trainer(max_steps=6, accelerator="cpu", devices=1, logger=False,
                     enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, default_root_dir=d,
                     plugins=[SLURMEnvironment(auto_requeue=True)])
trainer.fit(Tiny(), DataLoader(TensorDataset(torch.ones(16, 1)), batch_size=1))
print(f"run {restart} done at step {trainer.global_step}", flush=True)
'''


def test_lightning_auto_requeue_on_sigusr1(cluster, workdir):
    pytest.importorskip("lightning")
    prog = os.path.join(workdir, "tiny.py")
    with open(prog, "w") as fh:
        fh.write(LIGHTNING)
    out = os.path.join(workdir, "lt.out")
    # SLURMEnvironment ignores jobs named bash/interactive: name it like a training job
    jid = cluster.sbatch("-J", "train", "-N1", "-n1", "-o", out, "--open-mode=append", "--wrap",
                         f"srun python {prog} {workdir}", cwd=workdir)
    wait_for(lambda: os.path.exists(os.path.join(workdir, "ready")), 120, what="training at step 3")
    assert cluster.run(["scancel", "--signal=USR1", str(jid)]).rc == 0
    assert cluster.wait_done(jid, timeout=120) == "COMPLETED", read(out)
    text = read(out)
    assert "run 0 starts at step 0" in text
    assert "run 1 starts at step 3" in text and "run 1 done at step 6" in text, text
    assert os.path.exists(os.path.join(workdir, "hpc_ckpt_1.ckpt"))
    r = cluster.run(["sacct", "--duplicates", "-X", "-n", "-P", "-o", "State", "-j", str(jid)])
    assert r.out.split() == ["REQUEUED", "COMPLETED"], r.out
