"""srun -W/--wait and -O/--overcommit (issue 19) with real daemons, matched line for line and
exit code for exit code against the Slurm 22.05.8 reference cluster on this machine:

* ``srun -W N``: N seconds after the step's first task exits, srun prints how long ago, each
  task's state, the termination and "Waiting up to KillWait+2 seconds", kills the rest
  (exit 137); SLURM_WAIT does the same; a bad value is refused.
* ``-O``: a job gets one task's CPUs per node whatever -n (srun, sbatch, salloc) and
  SLURM_OVERCOMMIT=1, which its steps follow; a step with -O (or that variable) may have more
  tasks than its allocation has CPUs, one without is refused as Slurm refuses it.

One 2-node cluster of 16-CPU nodes (KillWait=30, so "32 seconds") for the module."""

from __future__ import annotations

import re
import time

import pytest

from cluster import TEST_USER, private_cluster, wait_for

_ENV_VARS = ("SLURM_OVERCOMMIT", "SLURM_CPUS_ON_NODE", "SLURM_JOB_CPUS_PER_NODE", "SLURM_NTASKS",
             "SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_NPROCS")
# task 0 prints the variables above that are set (the others print nothing and exit 0)
_SHOW = ("if [ $SLURM_PROCID = 0 ]; then env | grep -E '^(" + "|".join(_ENV_VARS) + ")=' "
         "| sort; fi")
_STEPD = r"slurmstepd: error: \*\*\* STEP {step} ON {node} CANCELLED AT \S+ \*\*\*\n"


@pytest.fixture(scope="module")
def c():
    with private_cluster("muster-waitoc-", nodes=2, cpus=16, gpus=1) as cl:
        yield cl


def run(c, *argv, env=None, timeout=60):
    return c.run(list(argv), user=TEST_USER, cwd=c.workdir, env=env, timeout=timeout)


def last_job(c) -> int:
    r = c.run(["sacct", "-X", "-n", "-P", "-a", "-o", "JobID"])
    return max(int(x) for x in r.out.split())


def env_of(out: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


# ---- -W / --wait --------------------------------------------------------------------------------

def test_wait_kills_the_other_tasks_n_seconds_after_the_first_exits(c):
    t0 = time.monotonic()
    r = run(c, "srun", "-n2", "-W", "2", "bash", "-c",
            "if [ $SLURM_PROCID = 0 ]; then exit 0; fi; sleep 30")
    took = time.monotonic() - t0
    jid = last_job(c)
    head = (f"srun: First task exited 2s ago\n"
            f"srun: StepId={jid}.0 task 1: running\n"
            f"srun: StepId={jid}.0 task 0: exited\n"
            f"srun: launch/slurm: _step_signal: Terminating StepId={jid}.0\n"
            "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n")
    want = (re.escape(head) + _STEPD.format(step=re.escape(f"{jid}.0"), node="node1")
            + re.escape("srun: error: node1: task 1: Killed\n"))
    assert r.rc == 137 and r.out == "", r
    assert re.fullmatch(want, r.err), r
    assert 2 <= took < 25, took  # killed after 2 s, not at the end of the sleep


def test_slurm_wait_with_failed_and_running_tasks_on_two_nodes(c):
    # tasks 0-1 on node1 exit at once (3 and 0), tasks 2-3 on node2 run on
    r = run(c, "srun", "-N2", "-n4", "bash", "-c",
            "case $SLURM_PROCID in 0) exit 3;; 1) exit 0;; esac; sleep 30",
            env={"SLURM_WAIT": "1"})
    jid = last_job(c)
    step = f"{jid}.0"
    lines = r.err.splitlines(keepends=True)
    stepd = [ln for ln in lines if ln.startswith("slurmstepd: ")]
    rest = [ln for ln in lines if not ln.startswith("slurmstepd: ")]
    assert r.rc == 137, r
    assert rest == ["srun: error: node1: task 0: Exited with exit code 3\n",
                    "srun: First task exited 1s ago\n",
                    f"srun: StepId={step} tasks 2-3: running\n",
                    f"srun: StepId={step} task 0: exited abnormally\n",
                    f"srun: StepId={step} task 1: exited\n",
                    f"srun: launch/slurm: _step_signal: Terminating StepId={step}\n",
                    "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n",
                    "srun: error: node2: tasks 2-3: Killed\n"], r
    # the node whose tasks were still running reports the cancel
    assert any(re.fullmatch(_STEPD.format(step=re.escape(step), node="node2"), ln)
               for ln in stepd), r


def test_wait_is_quiet_when_every_task_ends_in_time(c):
    r = run(c, "srun", "-n3", "-W", "20", "bash", "-c", "exit $SLURM_PROCID")
    assert (r.rc, r.out, r.err) == (2, "", "srun: error: node1: task 1: Exited with exit code 1\n"
                                          "srun: error: node1: task 2: Exited with exit code 2\n"), r
    r = run(c, "srun", "-n2", "-W", "0", "true")  # 0: wait for every task
    assert (r.rc, r.err) == (0, ""), r


@pytest.mark.parametrize("value", ["abc", "-1", "2x"])
def test_wait_value_refused_as_slurm(c, value):
    r = run(c, "srun", "-W", value, "true")
    assert (r.rc, r.out, r.err) == (1, "", f'srun: error: Invalid numeric value "{value}" for '
                                           "--wait.\n"), r


# ---- -O / --overcommit --------------------------------------------------------------------------

def test_srun_overcommit_runs_17_tasks_on_one_cpu_of_a_16_cpu_node(c):
    r = run(c, "srun", "-O", "-N1", "-n17", "bash", "-c", _SHOW)
    assert (r.rc, r.err) == (0, ""), r
    assert env_of(r.out) == {"SLURM_CPUS_ON_NODE": "1", "SLURM_JOB_CPUS_PER_NODE": "1",
                             "SLURM_NTASKS": "17", "SLURM_NPROCS": "17", "SLURM_OVERCOMMIT": "1",
                             "SLURM_STEP_TASKS_PER_NODE": "17", "SLURM_TASKS_PER_NODE": "17"}, r
    assert c.job(last_job(c))["cpus"] == "1"
    r = run(c, "srun", "-N1", "-n17", "true")  # without -O: more tasks than the node's CPUs
    assert (r.rc, r.err) == (1, "srun: error: Unable to allocate resources: Requested node "
                                "configuration is not available\n"), r


def test_sbatch_overcommit_job_and_its_steps(c):
    script = ("#!/bin/bash\n" + _SHOW.replace("$SLURM_PROCID", "0") + "\n"
              "echo step; srun bash -c " + repr(_SHOW) + "\n"
              "srun -n20 true; echo rc20=$?\n")
    jid = c.sbatch("-O", "-N1", "-n17", "-o", "oc-%j.out", user=TEST_USER, cwd=c.workdir,
                   input=script)
    assert c.wait_done(jid) == "COMPLETED"
    show = c.run(["scontrol", "show", "job", str(jid)]).out
    assert re.search(r"NumNodes=1 NumCPUs=1 NumTasks=17 CPUs/Task=1 ", show), show
    with open(f"{c.workdir}/oc-{jid}.out") as fh:
        job_part, _, step_part = fh.read().partition("step\n")
    assert env_of(job_part) == {"SLURM_CPUS_ON_NODE": "1", "SLURM_JOB_CPUS_PER_NODE": "1",
                                "SLURM_NPROCS": "17", "SLURM_NTASKS": "17", "SLURM_OVERCOMMIT": "1",
                                "SLURM_TASKS_PER_NODE": "17"}, job_part
    step_env = env_of(step_part)
    assert (step_env["SLURM_OVERCOMMIT"], step_env["SLURM_STEP_TASKS_PER_NODE"],
            step_env["SLURM_CPUS_ON_NODE"]) == ("1", "17", "1"), step_part
    assert "rc20=0" in step_part  # the job's SLURM_OVERCOMMIT lets its steps overcommit


def test_step_with_more_tasks_than_cpus_needs_overcommit(c):
    script = ("#!/bin/bash\n"
              "srun -n5 true; echo rc5=$?\n"
              "srun -O -n5 bash -c " + repr(_SHOW) + "; echo rcO5=$?\n"
              "SLURM_OVERCOMMIT=1 srun -n5 true; echo rcenv=$?\n")
    jid = c.sbatch("-N1", "-n2", "-o", "oc2-%j.out", "-e", "oc2-%j.err", user=TEST_USER,
                   cwd=c.workdir, input=script)
    assert c.wait_done(jid) == "COMPLETED"
    with open(f"{c.workdir}/oc2-{jid}.out") as fh:
        out = fh.read()
    with open(f"{c.workdir}/oc2-{jid}.err") as fh:
        err = fh.read()
    assert err == (f"srun: error: Unable to create step for job {jid}: More processors "
                   "requested than permitted\n"), err
    assert "rc5=1\n" in out and "rcO5=0\n" in out and "rcenv=0\n" in out, out
    got = env_of(out)
    assert (got["SLURM_OVERCOMMIT"], got["SLURM_STEP_TASKS_PER_NODE"], got["SLURM_NTASKS"],
            got["SLURM_CPUS_ON_NODE"]) == ("1", "5", "5", "2"), out


@pytest.mark.parametrize("how", ["-O", "SALLOC_OVERCOMMIT"])
def test_salloc_overcommit(c, how):
    args = ["-O"] if how == "-O" else []
    env = {"SALLOC_OVERCOMMIT": "1"} if how != "-O" else None
    r = run(c, "salloc", *args, "-N1", "-n17", "bash", "-c",
            "env | grep -E '^(" + "|".join(_ENV_VARS) + ")=' | sort", env=env)
    assert r.rc == 0, r
    # salloc's command runs on the submit host: no SLURM_CPUS_ON_NODE there (as Slurm)
    assert env_of(r.out) == {"SLURM_JOB_CPUS_PER_NODE": "1", "SLURM_NPROCS": "17",
                             "SLURM_NTASKS": "17", "SLURM_OVERCOMMIT": "1",
                             "SLURM_TASKS_PER_NODE": "17"}, r
    jid = last_job(c)
    wait_for(lambda: c.job(jid).get("state") == "COMPLETED", what="salloc job completed")
    assert c.job(jid)["cpus"] == "1"
