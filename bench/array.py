"""array: `sbatch --array=1-1000 --wrap true` → all 1,000 tasks completed (goal ≤ 3 s).

Clock starts before sbatch; completion is when `squeue -h -o %i -n musterbench` first comes back
empty (polled every 0.25 s); `sacct -X` must then show 1,000 COMPLETED tasks.
"""

from __future__ import annotations

import time

from bench import common

NAME = "array"


def measure(target, n: int) -> dict:
    epoch = int(time.time())
    meter = common.CpuMeter(target)
    with meter:
        t0 = time.perf_counter()
        common.sbatch(target, f"--array=1-{n}", "-o", "/dev/null", "--wrap", "true")
        t_sub = time.perf_counter() - t0
        t_end = common.wait_drained(target, timeout=max(120, n * 0.5), interval=0.25)
    return {"submit_s": t_sub, "complete_s": (t_end - t0) if t_end else None,
            "acct": common.acct_states(target, epoch), "cpu": meter.summary()}


def run(ctx) -> dict:
    n = 200 if ctx.quick else 1000
    with common.MusterCluster() as c:
        m = measure(c, n)
    ref, src = common.SLURM_REF["complete_1000_s"] * n / 1000, "Slurm ref: 1,000 single jobs"
    info = {"muster": m}
    if ctx.slurm:
        with ctx.slurm as s:
            sm = measure(s, n)
        ref, src = sm["complete_s"], "real Slurm array, same run"
        info["slurm"] = sm
    goal = 3.0 * n / 1000
    ok = m["acct"].get("COMPLETED", 0) == n and m["complete_s"] is not None
    rows = [common.row(f"--array=1-{n}: all tasks completed", m["complete_s"], ref, src,
                       f"<= {goal:.1f} s", bool(ok and m["complete_s"] <= goal),
                       note=(f"{n / m['complete_s']:.0f} tasks/s; " if m["complete_s"] else
                             "did not drain in time; ") + f"acct {m['acct']}")]
    return {"rows": rows, "info": info}
