"""throughput: 1,000 `sbatch --wrap true` → all completed.

Two phases, each on a fresh cluster: (a) one sequential submitter, (b) 8 parallel submitters
(threads, each running `sbatch` as a subprocess).  Clock starts before the first sbatch; we
record when the last sbatch returned and when `squeue -h -o %i -n musterbench` first comes back
empty (polled every 0.5 s, so completion times carry up to +0.5 s), then check in `sacct` that
every job COMPLETED.  Goal: the 8-submitter run completes ≥ 2× faster than Slurm's 33 s.
"""

from __future__ import annotations

import time

from bench import common

NAME = "throughput"


def phase(target, n: int, workers: int) -> dict:
    epoch = int(time.time())
    meter = common.CpuMeter(target)
    with meter:
        t0 = time.perf_counter()
        common.parallel(workers, n, lambda i: common.sbatch(target, "--wrap", "true"))
        t_sub = time.perf_counter() - t0
        t_end = common.wait_drained(target, timeout=max(120, n * 0.5), interval=0.5)
    t_all = (t_end - t0) if t_end else None
    counts = common.acct_states(target, epoch)
    return {"submit_s": t_sub, "complete_s": t_all, "acct": counts, "cpu": meter.summary()}


def run(ctx) -> dict:
    n = 200 if ctx.quick else 1000
    scale = n / 1000
    res = {}
    for label, workers in (("sequential", 1), ("parallel8", 8)):
        with common.MusterCluster() as c:
            res[label] = phase(c, n, workers)
    ref = {"seq_sub": common.SLURM_REF["seq_1000_submit_s"] * scale,
           "par_sub": common.SLURM_REF["par8_1000_submit_s"] * scale,
           "complete": common.SLURM_REF["complete_1000_s"] * scale}
    src = "recorded ref" + (" (scaled to n)" if scale != 1 else "")
    if ctx.slurm:
        with ctx.slurm as s:
            sres = {lab: phase(s, n, w) for lab, w in (("sequential", 1), ("parallel8", 8))}
        ref = {"seq_sub": sres["sequential"]["submit_s"], "par_sub": sres["parallel8"]["submit_s"],
               "complete": sres["parallel8"]["complete_s"]}
        src = "real Slurm, same run"
        res["slurm"] = sres
    seq, par = res["sequential"], res["parallel8"]
    ok_par = par["acct"].get("COMPLETED", 0) == n
    rows = [
        common.row(f"{n} sbatch, 1 submitter: all submitted", seq["submit_s"], ref["seq_sub"], src,
                   "-", None, note=f"{n / seq['submit_s']:.0f} submits/s"),
        common.row(f"{n} sbatch, 1 submitter: all completed", seq["complete_s"], None, "-", "-", None,
                   note=f"acct {seq['acct']}"),
        common.row(f"{n} sbatch, 8 submitters: all submitted", par["submit_s"], ref["par_sub"], src,
                   "-", None, note=f"{n / par['submit_s']:.0f} submits/s"),
        common.row(f"{n} sbatch, 8 submitters: all completed", par["complete_s"], ref["complete"], src,
                   f"<= {ref['complete'] / 2:.1f} s (2x faster)",
                   bool(par["complete_s"] and ok_par and par["complete_s"] <= ref["complete"] / 2),
                   note=(f"{n / par['complete_s']:.0f} jobs/s; " if par["complete_s"] else "")
                   + f"acct {par['acct']}"),
    ]
    return {"rows": rows, "info": res}
