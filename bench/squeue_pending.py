"""squeue_pending: `squeue` with 5,000 pending (held) jobs vs Slurm's 64 ms.

The 5,000 jobs are `sbatch -H --wrap true` requests sent by bench/submit_direct.py (the request
sbatch builds, sent straight to the controller socket; see that file).  Against real Slurm they
are submitted with 8 parallel `sbatch -H` callers instead.  Then `squeue` (default format) and
`squeue -h -o %i` are each timed over N calls (interleaved): median, min–max. Then
`squeue --json` over N calls: wall time, bytes of output and the command's peak RSS (its own
rusage), against Slurm's in the same run (goal: ≥ 10× faster and leaner).
"""

from __future__ import annotations

import os
import time

from bench import common

NAME = "squeue_pending"
HERE = os.path.dirname(os.path.abspath(__file__))


def fill_direct(target, n: int) -> float:
    cp = common.run([common.PYTHON, os.path.join(HERE, "submit_direct.py"), str(n), "-H", "-J",
                     common.JOB_NAME, "--wrap", "true"], target.env, timeout=600)
    return float(cp.stdout.split()[1])


def fill_sbatch(target, n: int) -> float:
    t0 = time.perf_counter()
    common.parallel(8, n, lambda i: common.sbatch(target, "-H", "--wrap", "true"))
    return time.perf_counter() - t0


def time_squeue(target, rounds: int) -> dict[str, list[float]]:
    cmds = {"squeue": [target.cmd("squeue")],
            "squeue -h -o %i": [target.cmd("squeue"), "-h", "-o", "%i"]}
    out = {k: [] for k in cmds}
    for k in cmds:
        common.time_call(cmds[k], target.env)
    for _ in range(rounds):
        for k, argv in cmds.items():
            out[k].append(common.time_call(argv, target.env))
    return out


def time_json(target, rounds: int) -> dict[str, list[float]]:
    """``squeue --json``: wall time, bytes of output and the command's peak RSS per call."""
    argv = [target.cmd("squeue"), "--json"]
    common.measured_call(argv, target.env)
    out: dict[str, list[float]] = {"s": [], "bytes": [], "rss_kib": []}
    for _ in range(rounds):
        dt, size, rss = common.measured_call(argv, target.env)
        out["s"].append(dt)
        out["bytes"].append(size)
        out["rss_kib"].append(rss)
    return out


def json_rows(n: int, mine: dict, slurm: dict | None) -> list[dict]:
    """The issue's goal: ``squeue --json`` with n pending ≥ 10× faster and ≥ 10× leaner (bytes
    of output and peak RSS of the command) than Slurm's, in the same run."""
    import statistics
    rows = []
    src = "real Slurm, same run"
    for key, label, unit, scale in (("s", "time", "s", 1), ("bytes", "output", "KiB", 1 / 1024),
                                    ("rss_kib", "peak RSS of the command", "MiB", 1 / 1024)):
        med = common.stats([v * scale for v in mine[key]])
        ref = statistics.median(slurm[key]) * scale if slurm else None
        ok = None if ref is None else med["median"] * 10 <= ref
        rows.append(common.row(f"squeue --json, {n} pending: {label}", med, ref,
                               src if slurm else "no Slurm here", ">= 10x less than Slurm",
                               ok, unit=unit))
    return rows


def run(ctx) -> dict:
    n = 1000 if ctx.quick else 5000
    rounds = 10 if ctx.quick else 20
    info = {"pending": n}
    with common.MusterCluster() as c:
        empty = time_squeue(c, rounds)
        info["fill_s"] = fill_direct(c, n)
        got = common.active_count(c)
        if got != n:
            raise RuntimeError(f"expected {n} pending jobs, squeue shows {got}")
        full = time_squeue(c, rounds)
        mine_json = time_json(c, rounds)
    ref, src = common.SLURM_REF["squeue_5000_pending_s"], "recorded ref"
    slurm_json = None
    if ctx.slurm:
        with ctx.slurm as s:
            fill_sbatch(s, n)
            sfull = time_squeue(s, rounds)
            slurm_json = time_json(s, rounds)
        ref, src = common.stats(sfull["squeue"])["median"], "real Slurm, same run"
    rows = []
    for k in ("squeue", "squeue -h -o %i"):
        st = common.stats(full[k])
        rows.append(common.row(f"{k}, {n} pending", st, ref, src, f"<= {ref * 1000:.0f} ms",
                               st["median"] <= ref))
    rows += json_rows(n, mine_json, slurm_json)
    rows.append(common.row("squeue, empty queue (for scale)", common.stats(empty["squeue"]), None,
                           "-", "-", None))
    info["fill_rate_per_s"] = round(n / info["fill_s"], 1)
    return {"rows": rows, "info": info}
