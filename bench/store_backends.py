"""store_backends: submission on the SQLite store vs the PostgreSQL store, same run (issue 16).

Two real 4-node clusters, one after the other: ``muster up`` as it is (SQLite in
StateSaveLocation) and the same with ``MusterStateStore=postgresql://…`` on a private server
started like the tests' (tests/pg.py: Debian's initdb/pg_ctl, Unix socket, fsync on).
Jobs are submitted held (``--hold``): what is timed is sbatch → controller → one committed
transaction (job, script, id counter) → reply, not the running of jobs.

  * latency: ``sbatch`` wall time of N sequential submissions (median, min–max);
  * throughput: 500 submissions from 8 parallel submitters, accepted jobs per second.

    .venv/bin/python bench/store_backends.py [--latency N] [--jobs N] [--workers N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(_HERE)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, _REPO)
sys.path.insert(0, os.path.join(_REPO, "tests"))

from bench import common  # noqa: E402


class StoreCluster(common.MusterCluster):
    """A MusterCluster whose slurm.conf gets ``MusterStateStore=url`` (restarted on it)."""

    def __init__(self, url: str | None):
        super().__init__()
        self.url = url

    def __enter__(self) -> StoreCluster:
        super().__enter__()
        if self.url:
            common.run([self.cmd("muster"), "down", "--state-dir", self.dir], self.env)
            with open(self.conf, "a") as fh:
                fh.write(f"\nMusterStateStore={self.url}\n")
            common.run([self.cmd("muster"), "up", "--state-dir", self.dir, "--config", self.conf],
                       self.env, timeout=180)
        return self


def _submit(c) -> float:
    t0 = time.perf_counter()
    cp = subprocess.run([c.cmd("sbatch"), "--parsable", "--hold", "-J", common.JOB_NAME,
                         "-o", "/dev/null", "--wrap", "true"], env=c.env, capture_output=True,
                        text=True, cwd=c.work)
    if cp.returncode != 0:
        raise RuntimeError(f"sbatch failed: {cp.stderr}")
    return time.perf_counter() - t0


def measure(url: str | None, latency_n: int, jobs: int, workers: int) -> dict:
    with StoreCluster(url) as c:
        for _ in range(5):  # warm: page cache, prepared statements
            _submit(c)
        lat = [_submit(c) for _ in range(latency_n)]
        t0 = time.perf_counter()
        common.parallel(workers, jobs, lambda i: _submit(c))
        wall = time.perf_counter() - t0
    return {"latency": common.stats(lat), "throughput": jobs / wall, "wall": wall}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--latency", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--workers", type=int, default=8)
    a = ap.parse_args()
    from pg import PgServer
    srv = PgServer(fsync=True)
    try:
        res = {"SQLite (default)": measure(None, a.latency, a.jobs, a.workers),
               "PostgreSQL 15 (local socket)": measure(srv.new_db(), a.latency, a.jobs, a.workers)}
    finally:
        srv.stop()
    print(f"| store | sbatch latency, median (min–max), n={a.latency} | "
          f"{a.jobs} sbatch from {a.workers} submitters |")
    print("|---|---|---|")
    for name, r in res.items():
        st = r["latency"]
        print(f"| {name} | {st['median'] * 1000:.1f} ms ({st['min'] * 1000:.1f}–"
              f"{st['max'] * 1000:.1f}) | {r['throughput']:.0f} jobs/s ({r['wall']:.1f} s) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
