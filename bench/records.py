"""Wire-record cost (issue 15, typed records): the controller's ``jobs`` reply on 10,000 jobs
(full records, and squeue's projected columnar form), the ``nodes`` reply, each through
``dispatch`` and the same msgspec encoder the daemon frames with, and one scheduling pass
(``schedule_once``) over those jobs, on an in-process controller (real store, virtual clock,
no daemons).

    .venv/bin/python bench/records.py [--jobs N] [--repeat R]

Best of ``--repeat`` runs each (the machine is shared: the minimum is the stable figure).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)

import msgspec  # noqa: E402

from tests.inproc.conftest import InProc  # noqa: E402

SQUEUE_FIELDS = ["job_id", "array_job_id", "array_task_id", "array_task_str", "partition", "name",
                 "user", "state", "reason", "reason_desc", "start_time", "time_limit",
                 "num_nodes", "node_list", "submit_time", "end_time", "completing"]


def best(fn, repeat: int) -> float:
    out = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    enc = msgspec.json.Encoder()
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o700)
        ip = InProc(d, "NodeName=g[1-64] CPUs=64 RealMemory=512000 Gres=gpu:8\n"
                       "PartitionName=gpu Nodes=g[1-64] MaxTime=UNLIMITED State=UP\n"
                       "GresTypes=gpu\n")
        try:
            for i in range(a.jobs):
                ip.submit(partition="gpu", nodes_min=1 + i % 3, time_limit=30 + i % 7,
                          gres=[{"name": "gpu", "type": None, "count": 1 + i % 8}],
                          name=f"job{i % 50}")
            sched = best(ip.ctl.schedule_once, 1)  # the first pass starts what fits
            ip.pump()
            sched_again = best(ip.ctl.schedule_once, a.repeat)
            uid, gid = ip.uid, ip.gid
            full = best(lambda: enc.encode(ip.ctl.dispatch({"op": "jobs"}, uid, gid)), a.repeat)
            rows = best(lambda: enc.encode(ip.ctl.dispatch(
                {"op": "jobs", "fields": SQUEUE_FIELDS, "rows": True}, uid, gid)), a.repeat)
            nodes = best(lambda: enc.encode(ip.ctl.dispatch({"op": "nodes"}, uid, gid)),
                         a.repeat * 10)
        finally:
            ip.close()
    n = a.jobs
    print(f"jobs={n}  jobs(full)+encode {full * 1e3:.1f} ms  jobs(squeue rows)+encode "
          f"{rows * 1e3:.1f} ms  nodes(66)+encode {nodes * 1e3:.2f} ms  "
          f"schedule_once first {sched * 1e3:.0f} ms, next {sched_again * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
