"""submit_latency: sbatch call → the job's first instruction runs, on an idle cluster.

The job's first (only) action is ``date +%s.%N > ts.$SLURM_JOB_ID``.  We take ``time.time()``
just before starting ``sbatch`` (t0) and just after it returns (t1); start − t0 is the
submit→running latency (goal ≤ 0.1 s), start − t1 the part after sbatch returned.  Each job
is waited for (squeue empty) before the next, so the cluster is idle at every submission.
"""

from __future__ import annotations

import os
import subprocess
import time

from bench import common

NAME = "submit_latency"


def measure(target, n: int) -> dict[str, list[float]]:
    total, after, call = [], [], []
    for _ in range(n):
        t0 = time.time()
        cp = subprocess.run([target.cmd("sbatch"), "--parsable", "-J", common.JOB_NAME, "-o", "/dev/null",
                             "--wrap", f"date +%s.%N > {target.work}/ts.$SLURM_JOB_ID"],
                            env=target.env, capture_output=True, text=True, cwd=target.work)
        t1 = time.time()
        if cp.returncode != 0:
            raise RuntimeError(f"sbatch failed: {cp.stderr}")
        job_id = cp.stdout.strip().split(";")[0]
        path = os.path.join(target.work, f"ts.{job_id}")
        deadline = time.time() + 60
        ts = None
        while time.time() < deadline:
            try:
                with open(path) as fh:
                    text = fh.read().strip()
                if text:
                    ts = float(text)
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.002)
        if ts is None:
            raise RuntimeError(f"job {job_id} did not start within 60 s")
        total.append(ts - t0)
        after.append(ts - t1)
        call.append(t1 - t0)
        # let it finish and the cluster go idle again
        if common.wait_drained(target, 60, interval=0.05) is None:
            raise RuntimeError(f"job {job_id} did not finish")
        time.sleep(0.2)
    return {"total": total, "after": after, "call": call}


def run(ctx) -> dict:
    n = 8 if ctx.quick else 20
    with common.MusterCluster() as c:
        m = measure(c, n)
    ref, src = common.SLURM_REF["submit_to_running_s"], "recorded ref"
    if ctx.slurm:
        with ctx.slurm as s:
            sm = measure(s, min(n, 10))
        ref, src = common.stats(sm["total"])["median"], "real Slurm, same run"
    tot = common.stats(m["total"])
    rows = [
        common.row("submit→running (sbatch invoked → job runs)", tot, ref, src, "<= 0.1 s",
                   tot["median"] <= 0.1),
        common.row("  of which: sbatch call itself", common.stats(m["call"]), None, "-", "-", None),
        common.row("  of which: sbatch returned → job runs", common.stats(m["after"]), None, "-", "-",
                   None),
    ]
    return {"rows": rows, "info": {"jobs": n, "worst_s": tot["max"]}}
