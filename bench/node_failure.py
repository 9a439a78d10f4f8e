"""node_failure: a node dies under a running job → the job runs again elsewhere, resumed from
its checkpoint.

A 3-node cluster (Muster's defaults: a node is declared dead after 12 s without heartbeats,
a requeued job waits 2 s). The job (`--requeue`, one node) counts steps into a checkpoint file
ten times a second and, when it starts, logs the step it resumes at. Once it has checkpointed,
its node's agent and the job's processes are SIGKILLed (a node losing power); timed: from the
kill until the second run has logged that it resumed past step 0. Slurm's reference is its
defaults (SlurmdTimeout 300 s, then the requeued job waits ~120 s in BeginTime): about 10 min
(../shared/tools/slurm-ref/capture_nodefail.sh), so it is not re-measured here.
"""

from __future__ import annotations

import os
import signal
import time

from bench import common

NAME = "node_failure"
SLURM_DEFAULTS_S = 600.0

SCRIPT = """#!/bin/bash
#SBATCH -N1 --requeue --open-mode=append -J {name} -o {work}/log.txt
s=$(cat {work}/ckpt 2>/dev/null || echo 0)
echo "run ${{SLURM_RESTART_COUNT:-0}}: resuming at step $s"
while [ $s -lt 1000000 ]; do
  s=$((s+1)); echo $s > {work}/ckpt.tmp; mv {work}/ckpt.tmp {work}/ckpt; sleep 0.1
done
"""


def _wait(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def _kill_node(c, node: str) -> None:
    os.kill(c.daemon_pids()[f"musterd {node}"], signal.SIGKILL)
    for root, dirs, files in os.walk(os.path.join(c.dir, "spool", node)):
        dirs[:] = [d for d in dirs if d != ".trash"]
        for name in ("job.pid", "super.pid"):
            if name in files:
                for p in _read(os.path.join(root, name)).split():
                    for fn in (os.killpg, os.kill):
                        try:
                            fn(int(p), signal.SIGKILL)
                        except (ProcessLookupError, PermissionError, ValueError):
                            pass


def one(c, k: int) -> float:
    work = os.path.join(c.work, f"job{k}")
    os.makedirs(work, mode=0o777)
    os.chmod(work, 0o777)
    path = os.path.join(work, "job.sh")
    with open(path, "w") as fh:
        fh.write(SCRIPT.format(name=common.JOB_NAME, work=work))
    jid = common.sbatch(c, path)
    log = os.path.join(work, "log.txt")
    _wait(lambda: int(_read(os.path.join(work, "ckpt")) or 0) >= 10, 60, "ten checkpointed steps")
    node = common.run([c.cmd("squeue"), "-h", "-o", "%N", "-j", str(jid)], c.env).stdout.strip()
    t0 = time.perf_counter()
    _kill_node(c, node)
    _wait(lambda: "run 1: resuming at step" in _read(log), 120, "the requeued run to resume")
    dt = time.perf_counter() - t0
    resumed = int(_read(log).split("run 1: resuming at step ")[1].split()[0])
    if resumed < 10:
        raise RuntimeError(f"the second run resumed at step {resumed}, not from the checkpoint")
    common.run([c.cmd("scancel"), str(jid)], c.env, check=False)
    return dt


def run(ctx) -> dict:
    times = []
    # a fresh cluster per repetition: the killed node stays down
    for k in range(1 if ctx.quick else 3):
        with common.MusterCluster(nodes=3, gpus=0) as c:
            times.append(one(c, k))
    st = common.stats(times)
    return {"rows": [common.row("node death → job running again from its checkpoint", st,
                                SLURM_DEFAULTS_S, "Slurm defaults, recorded ≈ 10 min",
                                "<= 30 s", st["median"] <= 30)],
            "info": {"runs": len(times)}}
