"""Simulator speed and validation (docs/simulation.md).

    python bench/sim_speed.py                 # speed: full CTC under each policy the core offers
    python bench/sim_speed.py --validate      # RLScheduler protocol + full KTH/CTC/HPC2N replays
    python bench/sim_speed.py --gpu           # GPU traces: ITP (peak-sized and a third), openb
    python bench/sim_speed.py --multinode     # SWF traces on their node shapes, end to end
    python bench/sim_speed.py --gpu-speed     # ITP on a third of its peak size, end to end
    python bench/sim_speed.py --gpu-digests   # GPU traces: the engine's core vs the snapshot core
    python bench/sim_speed.py --profile fifo  # cProfile of one full CTC replay (top 15)
    python bench/sim_speed.py --core schedule # the snapshot core alone (no pooled scheduler)

Each speed run is a fresh subprocess, so its peak RSS (ru_maxrss) is the replay's own;
jobs/s counts the replayed jobs over the engine's wall time (trace reading excluded, shown
apart). AccaSim reference on the same 2-core class of machine: EASY 455 jobs/s, FIFO 67 jobs/s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

TRACES = os.environ.get("MUSTER_TRACES", "/work/shared/traces")
CTC = f"{TRACES}/swf/CTC-SP2-1996-3.1-cln.swf.gz"
ACCASIM = {"easy": 455, "fifo": 67}

_CHILD = r"""
import hashlib, json, resource, sys, time
from muster.sim.traces import read_trace
from muster.sim.replay import MachineSpec, build_cluster
from muster.sim.engine import Simulator
from muster.sim.metrics import compute
path, policy, core = sys.argv[1], sys.argv[2], sys.argv[3]
limit = int(sys.argv[4]) if len(sys.argv) > 4 else None
t0 = time.perf_counter(); tr = read_trace(path); t_read = time.perf_counter() - t0
jobs = tr.jobs[:limit]
res = Simulator(build_cluster(tr, jobs, MachineSpec()), jobs, policy,
                pooled=None if core == "auto" else False).run()
m = compute(res)
digest = hashlib.sha1(repr((res.start, res.end, res.nodes)).encode()).hexdigest()[:12]
print(json.dumps({"policy": policy, "core": res.core, "jobs": m["jobs"], "read_s": t_read,
                  "wall_s": res.wall_s, "core_s": res.core_s, "core_calls": res.core_calls,
                  "jobs_per_s": m["jobs"] / res.wall_s, "bsld": m["bounded_slowdown_mean"],
                  "wait_mean_s": m["wait_mean_s"], "utilization": m["utilization"],
                  "schedule": digest,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def speed(policies: list[str], path: str = CTC, jobs: int | None = None, core: str = "auto",
          quiet: bool = False) -> list[dict]:
    """One fresh process per policy. ``core``: "auto" (the incremental pooled scheduler where
    it applies, as ``muster sim`` does) or "schedule" (always the snapshot core)."""
    out = []
    for pol in policies:
        extra = [str(jobs)] if jobs else []
        p = subprocess.run([sys.executable, "-c", _CHILD, path, pol, core, *extra],
                           capture_output=True, text=True, check=True)
        r = json.loads(p.stdout)
        out.append(r)
        ref = ACCASIM.get(pol)
        vs = f"  ({r['jobs_per_s'] / ref:,.0f}x AccaSim)" if ref else ""
        if not quiet:
            print(f"{pol:<13} {r['jobs']:,} jobs  {r['wall_s']:6.2f} s  {r['jobs_per_s']:>9,.0f} "
                  f"jobs/s{vs}  core {r['core']}: {r['core_s']:.2f} s / {r['core_calls']:,} calls"
                  f"  read {r['read_s']:.2f} s  peak RSS {r['peak_rss_mib']:.0f} MiB"
                  f"  schedule {r['schedule']}", flush=True)
    return out


def run(ctx) -> dict:
    """Suite entry (bench/run.py): CTC under FIFO, EASY and conservative backfill, three
    fresh processes each (full trace; --quick: its first 20,000 jobs), and once more with the
    snapshot core alone (``Simulator(pooled=False)``) as the same-run baseline, whose
    schedule must be identical (conservative's takes ~3 minutes on the full trace).
    Goals: EASY ≥ 20,000 jobs/s; FIFO within 10× of EASY; conservative ≥ 5,000 jobs/s."""
    from bench import common

    jobs = 20_000 if ctx.quick else None
    pols = ("fifo", "easy", "conservative")
    runs = {pol: [r for _ in range(3) for r in speed([pol], jobs=jobs, quiet=True)]
            for pol in pols}
    base = {r["policy"]: r for r in speed(list(pols), jobs=jobs, core="schedule", quiet=True)}
    easy_wall = common.stats([r["wall_s"] for r in runs["easy"]])["median"]
    rows, info = [], {}
    for pol in pols:
        rs, b = runs[pol], base[pol]
        rate = common.stats([r["jobs_per_s"] for r in rs])
        wall = common.stats([r["wall_s"] for r in rs])
        same = all(r["schedule"] == b["schedule"] for r in rs)
        goal, met = {
            "easy": (">= 20,000 jobs/s", rate["median"] >= 20_000),
            "fifo": ("within 10× of EASY's time", wall["median"] <= 10 * easy_wall),
            "conservative": (">= 5,000 jobs/s", rate["median"] >= 5_000)}[pol]
        ref = ACCASIM.get(pol)
        rows.append(common.row(
            f"{pol}: {rs[0]['jobs']:,} CTC jobs, jobs/s", rate, ref if ref else b["jobs_per_s"],
            "AccaSim 1.1.3, recorded" if ref else "snapshot core, same run", goal, met,
            unit="jobs/s",
            note=f"{wall['median']:.2f} s, peak RSS {max(r['peak_rss_mib'] for r in rs):.0f} MiB, "
                 f"{rs[0]['core']} core"))
        rows.append(common.row(
            f"{pol}: the same replay against the snapshot core alone, jobs/s", rate,
            b["jobs_per_s"], f"snapshot core, same run, {b['wall_s']:.2f} s", "same schedule",
            same, unit="jobs/s",
            note=f"schedule {'identical' if same else 'DIFFERENT'} ({b['schedule']})"))
        info[pol] = {"runs": rs, "snapshot_core": b}
    return {"rows": rows, "info": info}


def validate(seed: int = 0) -> None:
    from muster.sim.replay import MachineSpec, random_starts, replay_trace
    from muster.sim.traces import read_trace

    pols = ["fifo", "easy"]
    published = {"lublin_256": (7273.77, 235.82), "lublin_256_new2": (7842.47, 247.61),
                 "HPC2N-2002-2.2-cln": (297.18, 127.38)}
    print("| trace | policy | Muster mean bsld (10 × 1,024 jobs, seed %d) | RLScheduler | ratio |" % seed)
    print("|---|---|---|---|---|")
    for name, pub in published.items():
        tr = read_trace(f"{TRACES}/swf/{name}.swf.gz")
        starts = random_starts(len(tr.jobs), 1024, 10, seed)
        for k, pol in enumerate(pols):
            vals = []
            for s in starts:
                _, m = replay_trace(tr, tr.jobs[s:s + 1024], pol, MachineSpec())
                vals.append(m["bounded_slowdown_mean"])
            mean = sum(vals) / len(vals)
            print(f"| {name} | {pol} | {mean:,.2f} (windows: {min(vals):,.0f}–{max(vals):,.0f}) "
                  f"| {pub[k]:,.2f} | {mean / pub[k]:.2f} |")
    print()
    print("| trace | policy | jobs | mean wait (s) | mean bsld | utilization | killed at limit |")
    print("|---|---|---|---|---|---|---|")
    for name in ("KTH-SP2-1996-2.1-cln", "CTC-SP2-1996-3.1-cln", "HPC2N-2002-2.2-cln"):
        tr = read_trace(f"{TRACES}/swf/{name}.swf.gz")
        for pol in pols:
            _, m = replay_trace(tr, tr.jobs, pol, MachineSpec())
            print(f"| {name} | {pol} | {m['jobs']:,} | {m['wait_mean_s']:,.0f} | "
                  f"{m['bounded_slowdown_mean']:,.1f} | {m['utilization']:.3f} | "
                  f"{m['killed_at_limit']:,} |")


def gpu_table() -> None:
    """GPU traces (docs/simulation.md, "GPU traces"): ITP clusters 04 and 08 on the
    peak-sized machine and on a third of it, FIFO and EASY; the Alibaba openb pod list on its
    own node list."""
    import time

    from muster.sim.replay import MachineSpec, replay_trace
    from muster.sim.traces import read_trace

    def row(label: str, tr, machine: MachineSpec, pol: str):
        t0 = time.perf_counter()
        res, m = replay_trace(tr, tr.jobs, pol, machine)
        print(f"| {label}, {pol} | {res.cluster.describe().split(' [')[0]} | {m['jobs']:,} | "
              f"{m['wait_mean_s']:,.0f} | {m['jct_mean_s']:,.0f} | {m['bounded_slowdown_mean']:,.1f} | "
              f"{m['gpu_utilization']:.3f} | {m['gpu_idle_while_waiting']:.3f} | "
              f"{m['gpu_free_on_partial_nodes']:.3f} | {time.perf_counter() - t0:.1f} s |", flush=True)
        return res

    print("| trace, policy | machine | jobs | mean wait (s) | mean JCT (s) | mean bsld | GPU util. "
          "| GPUs idle while GPU jobs wait | free GPUs on partly used nodes | wall |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for c in ("cluster04", "cluster08"):
        tr = read_trace(f"{TRACES}/gpu/microsoft-itp-2021/{c}.csv.gz")
        nodes = 0
        for pol in ("fifo", "easy"):
            nodes = len(row(f"ITP {c}", tr, MachineSpec(), pol).cluster.nodes)
        third = MachineSpec(nodes=max(1, nodes // 3), gpus_per_node=8)
        for pol in ("fifo", "easy"):
            row(f"ITP {c}", tr, third, pol)
    tr = read_trace(f"{TRACES}/gpu/alibaba-pai-2023/openb_pod_list_default.csv.gz")
    for pol in ("fifo", "easy"):
        row("Alibaba openb default", tr, MachineSpec(), pol)


MULTINODE = [("KTH-SP2-1996-2.1-cln.swf.gz", 100, 1), ("CTC-SP2-1996-3.1-cln.swf.gz", 430, 1),
             ("CTC-SP2-1996-3.1-cln.swf.gz", 144, 8), ("HPC2N-2002-2.2-cln.swf.gz", 120, 2)]
# GPU traces on a third of their peak-sized machine of 8-GPU nodes (so jobs queue)
GPU_THIRD = ["cluster04", "cluster08", "cluster03", "cluster07"]


def _third(path: str) -> int:
    """A third of the nodes of a GPU trace's peak-sized machine (``muster sim``'s default)."""
    from muster.sim.replay import MachineSpec, build_cluster
    from muster.sim.traces import read_trace

    tr = read_trace(path)
    return max(1, len(build_cluster(tr, tr.jobs, MachineSpec()).nodes) // 3)


def multinode_table(rounds: int = 3, gpu: bool = False) -> None:
    """SWF traces on their real node shapes (docs/simulation.md, "Multi-node"), EASY: the
    first 20,000 jobs and the whole trace, each ``rounds`` times in a fresh ``muster sim``
    process: jobs/s end to end (process start to exit) and by the engine's own clock
    (median, min-max), the core the engine chose, and the digest of the ``--schedule`` CSV
    (the same in every round, or the table says so). ``gpu``: the ITP traces of
    ``GPU_THIRD`` instead, whole, on a third of their peak-sized machine of 8-GPU nodes."""
    import hashlib
    import statistics
    import tempfile
    import time

    mst = os.path.join(os.path.dirname(sys.executable), "muster")
    cases: list[tuple[str, list[str], tuple[int | None, ...], int | None]]
    if gpu:
        cases = [(f"gpu/microsoft-itp-2021/{c}.csv.gz", ["--gpus-per-node", "8"], (None,), None)
                 for c in GPU_THIRD]
    else:
        cases = [(f"swf/{name}", ["--cpus-per-node", str(cpn)], (20_000, None), nodes)
                 for name, nodes, cpn in MULTINODE]
    print("| trace | machine | jobs | end to end, jobs/s | engine, jobs/s | core | schedule |")
    print("|---|---|---|---|---|---|---|")
    for rel, shape, limits, size in cases:
        path = f"{TRACES}/{rel}"
        nodes = size or _third(path)
        for limit in limits:
            with tempfile.NamedTemporaryFile(suffix=".csv") as sched:
                argv = [mst, "sim", path, "--nodes", str(nodes), *shape, "--policy", "easy",
                        "--json", "--schedule", sched.name]
                if limit:
                    argv += ["--jobs", str(limit)]
                e2e, eng, digests = [], [], set()
                for _ in range(rounds):
                    t0 = time.perf_counter()
                    p = subprocess.run(argv, capture_output=True, text=True, check=True)
                    wall = time.perf_counter() - t0
                    met = json.loads(p.stdout)["metrics"]
                    e2e.append(met["jobs"] / wall)
                    eng.append(met["sim"]["jobs_per_s"])
                    with open(sched.name, "rb") as fh:
                        digests.add(hashlib.sha1(fh.read()).hexdigest()[:12])

            def f(v):
                return f"{statistics.median(v):,.0f} ({min(v):,.0f}–{max(v):,.0f})"
            name = os.path.basename(path).split("-cln")[0].split(".csv")[0]
            machine = f"{nodes} × 8 GPUs" if gpu else f"{nodes} × {shape[1]} CPU"
            print(f"| {name} | {machine} | {met['jobs']:,} | {f(e2e)} | {f(eng)} | "
                  f"{met['sim']['core']} | {' / '.join(sorted(digests))} |", flush=True)


def gpu_digests() -> None:
    """Every GPU trace of ``TRACES`` but Alibaba's (its pods carry memory: the snapshot core's
    scope alone), on its peak-sized machine and on a third of it, FIFO and EASY: the engine's
    own choice of core against the snapshot core alone, jobs/s by the engine's clock and the
    digest of (start, end, nodes, the GPU metrics), which must be the same."""
    import glob
    import hashlib

    from muster.sim.engine import Simulator
    from muster.sim.replay import MachineSpec, build_cluster
    from muster.sim.traces import read_trace

    print("| trace | machine | policy | core | jobs/s | snapshot core, jobs/s | schedule |")
    print("|---|---|---|---|---|---|---|")
    for path in sorted(glob.glob(f"{TRACES}/gpu/*/*.csv.gz")):
        if "alibaba" in path:
            continue
        tr = read_trace(path)
        peak = build_cluster(tr, tr.jobs, MachineSpec())
        for label, spec in (("peak", MachineSpec()),
                            ("third", MachineSpec(nodes=max(1, len(peak.nodes) // 3),
                                                  gpus_per_node=8))):
            cl = build_cluster(tr, tr.jobs, spec)
            for pol in ("fifo", "easy"):
                row = []
                for pooled in (None, False):
                    res = Simulator(cl, tr.jobs, pol, pooled=pooled).run()
                    dig = hashlib.sha1(repr((res.start, res.end, res.nodes, res.gpu_free_partial,
                                             res.gpu_idle_waiting)).encode()).hexdigest()[:12]
                    row.append((res.core, f"{len(tr.jobs) / res.wall_s:,.0f}", dig))
                    if res.core == "schedule":  # out of the incremental cores' scope
                        row.append(("schedule", "(the same run)", dig))
                        break
                same = "identical" if row[0][2] == row[1][2] else "**DIFFERENT**"
                print(f"| {os.path.basename(path).split('.csv')[0]} | {len(cl.nodes)} × 8 GPUs "
                      f"({label}) | {pol} | {row[0][0]} | {row[0][1]} | {row[1][1]} | "
                      f"{same} (`{row[0][2]}`) |", flush=True)


def profile(policy: str) -> None:
    import cProfile
    import pstats

    from muster.sim.replay import MachineSpec, replay_trace
    from muster.sim.traces import read_trace
    tr = read_trace(CTC)
    pr = cProfile.Profile()
    pr.enable()
    replay_trace(tr, tr.jobs, policy, MachineSpec())
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(15)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--validate", action="store_true")
    ap.add_argument("--gpu", action="store_true", help="the GPU-trace table of docs/simulation.md")
    ap.add_argument("--profile", metavar="POLICY")
    ap.add_argument("--multinode", action="store_true",
                    help="SWF traces on their real node shapes, EASY (docs/simulation.md)")
    ap.add_argument("--gpu-speed", action="store_true",
                    help="ITP traces on a third of their peak-sized machine, EASY, end to end")
    ap.add_argument("--gpu-digests", action="store_true",
                    help="GPU traces: the engine's core against the snapshot core alone")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--policies", default=None, help="comma list (default: all available)")
    ap.add_argument("--core", choices=["auto", "schedule"], default="auto",
                    help="schedule: the snapshot core alone, never the pooled scheduler")
    ap.add_argument("--jobs", type=int, default=None, help="only the first N jobs")
    a = ap.parse_args()
    if a.validate:
        validate(a.seed)
        return
    if a.gpu:
        gpu_table()
        return
    if a.profile:
        profile(a.profile)
        return
    if a.multinode or a.gpu_speed:
        multinode_table(gpu=a.gpu_speed)
        return
    if a.gpu_digests:
        gpu_digests()
        return
    pols = a.policies.split(",") if a.policies else ["fifo", "easy", "conservative"]
    speed(pols, jobs=a.jobs, core=a.core)


if __name__ == "__main__":
    main()
