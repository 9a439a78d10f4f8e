"""memory: controller RSS idle vs with 5,000 pending (held) jobs → KiB per pending job.

RSS is VmRSS from /proc/<pid>/status of musterctld (pid from `muster status --json`), read
after the cluster has been up a second (idle), and again after the 5,000 held jobs were queued
through bench/submit_direct.py (before any squeue), and once more after a few `squeue` calls
(which build a reply holding every job).  Goal: ≤ 2 KiB per pending job.
"""

from __future__ import annotations

import os
import time

from bench import common
from bench.squeue_pending import fill_direct

NAME = "memory"


def run(ctx) -> dict:
    n = 1000 if ctx.quick else 5000
    with common.MusterCluster() as c:
        pid = c.controller_pid()
        time.sleep(1.0)
        idle = common.rss_kib(pid)
        fill_direct(c, n)
        time.sleep(0.5)
        full = common.rss_kib(pid)
        for _ in range(3):
            common.run([c.cmd("squeue")], c.env)
        after_q = common.rss_kib(pid)
        db = sum(os.path.getsize(os.path.join(c.dir, f)) for f in os.listdir(c.dir)
                 if f.endswith((".db", ".sqlite", ".db-wal")))
    per_job = (full["VmRSS"] - idle["VmRSS"]) / n
    per_job_q = (after_q["VmRSS"] - idle["VmRSS"]) / n
    ref_per = (common.SLURM_REF["ctld_rss_5000_kib"] - common.SLURM_REF["ctld_rss_idle_kib"]) / 5000
    slurm = None
    if ctx.slurm:
        from bench.squeue_pending import fill_sbatch
        with ctx.slurm as s:
            spid = s.controller_pid()
            if spid:
                s_idle = common.rss_kib(spid)
                fill_sbatch(s, n)
                s_full = common.rss_kib(spid)
                slurm = {"idle": s_idle, "full": s_full}
                ref_per = (s_full["VmRSS"] - s_idle["VmRSS"]) / n
    src = "real Slurm, same run" if slurm else "recorded ref"
    rows = [
        common.row("controller RSS, idle", idle["VmRSS"] / 1024, common.SLURM_REF["ctld_rss_idle_kib"] / 1024,
                   "recorded ref", "-", None, unit="MiB"),
        common.row(f"controller RSS, {n} pending", full["VmRSS"] / 1024,
                   common.SLURM_REF["ctld_rss_5000_kib"] / 1024 * n / 5000 if n != 5000 else
                   common.SLURM_REF["ctld_rss_5000_kib"] / 1024, "recorded ref", "-", None, unit="MiB"),
        common.row("KiB per pending job", per_job, ref_per, src, "<= 2 KiB", per_job <= 2.0,
                   unit="KiB"),
        common.row("KiB per pending job, after 3 squeue calls", per_job_q, ref_per, src,
                   "<= 2 KiB", per_job_q <= 2.0, unit="KiB",
                   note=f"VmHWM (peak) {after_q['VmHWM'] / 1024:.1f} MiB"),
    ]
    return {"rows": rows, "info": {"idle": idle, "full": full, "after_squeue": after_q,
                                   "pending": n, "state_db_bytes": db, "slurm": slurm}}
