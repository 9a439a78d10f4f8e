"""failover: how long a SIGKILLed leading controller leaves the cluster without one (issue 16).

A real 2-node cluster on PostgreSQL (a private server started like the tests', tests/pg.py,
fsync on) with a standby controller (``SlurmctldHost=standby(127.0.0.2)``), default
SlurmctldTimeout. Each run: SIGKILL whichever controller leads, then time until the first
``sbatch`` is acknowledged (by the new leader: the clients retry by themselves), then start
the killed one again and wait until it stands by. Also the price of fencing: sbatch latency
on the same store with one controller (no lease) and with the pair (every commit fenced).

    .venv/bin/python bench/failover.py [--runs N] [--latency N]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(_HERE)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, _REPO)
sys.path.insert(0, os.path.join(_REPO, "tests"))

from bench import common  # noqa: E402
from bench.store_backends import StoreCluster, _submit  # noqa: E402


class HACluster(StoreCluster):
    def __init__(self, url: str, standby: bool):
        super().__init__(url)
        self.standby = standby

    def __enter__(self) -> HACluster:
        common.MusterCluster.__enter__(self)
        common.run([self.cmd("muster"), "down", "--state-dir", self.dir], self.env)
        with open(self.conf, "a") as fh:
            fh.write(f"\nMusterStateStore={self.url}\n")
            if self.standby:
                fh.write("SlurmctldHost=standby(127.0.0.2)\n")
        common.run([self.cmd("muster"), "up", "--state-dir", self.dir, "--config", self.conf],
                   self.env, timeout=180)
        return self

    def pids(self) -> dict:
        with open(os.path.join(self.dir, "muster.pids")) as fh:
            return json.load(fh)

    def role(self, index: int) -> str | None:
        from muster.cli.ctldping import ask
        r = ask(os.path.join(self.dir, f"musterctld.{index}.sock"), {"op": "ping"})
        return None if not r or not r.get("ok") else r.get("role", "leader")

    def restart(self, index: int) -> None:
        log = os.path.join(self.dir, "log", f"musterctld.{index}.log")
        p = subprocess.Popen([self.cmd("musterctld"), "-f", self.conf, "--index", str(index),
                              "-L", log], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True, env=self.env)
        rec = self.pids()
        if index == 0:
            rec["controller"] = p.pid
        else:
            rec.setdefault("standby", {})[str(index)] = p.pid
        with open(os.path.join(self.dir, "muster.pids"), "w") as fh:
            json.dump(rec, fh)


def _wait(cond, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.02)


def failovers(c: HACluster, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        leader = 0 if c.role(0) == "leader" else 1
        pid = c.pids()["controller"] if leader == 0 else int(c.pids()["standby"]["1"])
        os.kill(pid, signal.SIGKILL)
        t0 = time.perf_counter()
        _submit(c)  # retried by sbatch itself until the new leader answers
        out.append(time.perf_counter() - t0)
        c.restart(leader)
        _wait(lambda old=leader: c.role(old) == "standby")
    return out


def commit_cost(url: str, n: int = 500) -> dict[str, float]:
    """Median seconds of one ``put_job`` commit on a PostgresStore, without and with the
    fencing check (the store alone: no sbatch start-up around it)."""
    import statistics

    from muster.store import open_store
    from muster.store.lease import Lease
    st = open_store(url, claim="musterctld", shared=True)
    lease = Lease(st, "bench#0", 8)
    lease.try_acquire()
    times: dict[str, list[float]] = {"unfenced": [], "fenced": []}
    try:
        for i in range(2 * n):  # interleaved, so load from elsewhere falls on both alike
            name = "fenced" if i % 2 else "unfenced"
            st.fence = lease.check if i % 2 else None
            t0 = time.perf_counter()
            st.put_job({"job_id": 10**6 + i, "state": "PENDING", "uid": 0})
            times[name].append(time.perf_counter() - t0)
        out = {k: statistics.median(v) for k, v in times.items()}
    finally:
        st.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--latency", type=int, default=50)
    a = ap.parse_args()
    from pg import PgServer
    srv = PgServer(fsync=True)
    try:
        lat = {}
        for name, standby in (("one controller (no lease)", False),
                              ("primary + standby (fenced commits)", True)):
            with HACluster(srv.new_db(), standby) as c:
                for _ in range(5):
                    _submit(c)
                lat[name] = common.stats([_submit(c) for _ in range(a.latency)])
                if standby:
                    times = failovers(c, a.runs)
        commit = commit_cost(srv.new_db())
    finally:
        srv.stop()
    st = common.stats(times)
    print(f"fail-over (SIGKILL of the leader -> first sbatch acknowledged), {a.runs} runs: "
          f"median {st['median']:.2f} s (min {st['min']:.2f}, max {st['max']:.2f}); "
          f"each: {', '.join(f'{t:.2f}' for t in times)}")
    print(f"| controllers on PostgreSQL | sbatch latency, median (min–max), n={a.latency} |")
    print("|---|---|")
    for name, s in lat.items():
        print(f"| {name} | {s['median'] * 1000:.1f} ms ({s['min'] * 1000:.1f}–"
              f"{s['max'] * 1000:.1f}) |")
    print(f"one put_job commit on PostgreSQL, median of 500: {commit['unfenced'] * 1e6:.0f} us "
          f"unfenced, {commit['fenced'] * 1e6:.0f} us fenced")
    return 0


if __name__ == "__main__":
    sys.exit(main())
