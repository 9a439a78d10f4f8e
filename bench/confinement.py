"""confinement: what cgroup confinement costs — submit→running and 1,000-job throughput, on vs off.

Each round starts two fresh 4-node clusters one after the other: one as `muster up` makes it
(proctrack/cgroup, task/cgroup + task/affinity, cgroup.conf constraining cores, RAM, swap and
devices) and one with `muster up --no-confine` (proctrack/linuxproc, task/none). Rounds alternate
which goes first, so a drift in the machine's load falls on both. Per cluster: submit→running of
idle-cluster jobs (bench.submit_latency.measure) and 1,000 `sbatch --wrap true` from 8
submitters until all completed (bench.throughput.phase). The goal is a cost under 10%.

Real Slurm's figures are the comparison of the submit_latency and throughput benchmarks; this
one compares Muster with itself, so no Slurm column.
"""

from __future__ import annotations

from bench import common, submit_latency, throughput

NAME = "confinement"


def _one(confine: bool, n_lat: int, n_jobs: int) -> dict:
    extra = () if confine else ("--no-confine",)
    with common.MusterCluster(extra=extra) as c:
        lat = submit_latency.measure(c, n_lat)["total"]
    with common.MusterCluster(extra=extra) as c:
        thr = throughput.phase(c, n_jobs, 8)
    if thr["acct"].get("COMPLETED", 0) != n_jobs:
        raise RuntimeError(f"confine={confine}: not every job completed: {thr['acct']}")
    return {"latency": lat, "complete_s": thr["complete_s"]}


def run(ctx) -> dict:
    rounds = 2 if ctx.quick else 3
    n_lat, n_jobs = (8, 200) if ctx.quick else (15, 1000)
    got: dict[bool, dict[str, list[float]]] = {True: {"latency": [], "complete_s": []},
                                              False: {"latency": [], "complete_s": []}}
    for r in range(rounds):
        for confine in ((True, False) if r % 2 == 0 else (False, True)):
            one = _one(confine, n_lat, n_jobs)
            got[confine]["latency"] += one["latency"]
            got[confine]["complete_s"].append(one["complete_s"])
    rows = []
    for key, label, per in (("latency", "submit→running", ""),
                            ("complete_s", f"{n_jobs} sbatch, 8 submitters: all completed",
                             f" ({rounds} rounds)")):
        on, off = common.stats(got[True][key]), common.stats(got[False][key])
        cost = on["median"] / off["median"] - 1
        rows.append(common.row(f"{label}, confinement off{per}", off, None, "-", "-", None))
        rows.append(common.row(f"{label}, confinement on{per}", on, off["median"],
                               "confinement off, same run", "cost < 10%", cost < 0.10,
                               note=f"cost {cost * 100:+.1f}%"))
    return {"rows": rows, "info": {"rounds": rounds, "raw": {str(k): v for k, v in got.items()}}}
