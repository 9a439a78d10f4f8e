"""One full scheduling cycle of the pure core: multifactor priority + main + backfill
(conservative: every job may reserve) on a synthetic GPU cluster.

    .venv/bin/python bench/sched_cycle.py                 # the goal case: 10k pending, 4,096 nodes
    .venv/bin/python bench/sched_cycle.py --table         # pending 1k/10k/50k × nodes 256/1,024/4,096
    .venv/bin/python bench/sched_cycle.py --profile       # cProfile of the goal case

Cluster: nodes of 64 CPUs, 512 GB, 8 GPUs; running jobs ≈ 2 per node (1/2/4/8 GPUs,
ending over the next 24 h at whole minutes); pending jobs: 1-GPU (40 %), 2-GPU (15 %),
4-GPU (10 %), one full node (20 %), 2-4 full nodes (10 %), 8-16 full nodes (5 %); time
limits 30 min-24 h from a short list (as users pick them). Input built with a fixed seed;
the cycle itself is what is timed (best of ``--repeat``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import random
import sys
import time
from dataclasses import replace

from muster.core import JobView, NodeView, PartitionView, SchedConfig, Snapshot, schedule
from muster.core.placement import NodeAlloc
from muster.core.snapshot import AssocView, QosView, RunningView, SwitchView

LIMITS = [30, 60, 120, 240, 480, 720, 1440]
NOW = 1_000_000


def build(n_nodes: int, n_pending: int, n_running: int, seed: int = 1) -> Snapshot:
    rnd = random.Random(seed)
    names = [f"gpu{i:05d}" for i in range(n_nodes)]
    free = {nm: [64, 512_000, list(range(8))] for nm in names}
    running = []
    jid = 10**7
    i = 0
    tries = 0
    while len(running) < n_running and tries < n_running * 4:
        tries += 1
        nm = names[i % n_nodes]
        i += 1
        f = free[nm]
        g = rnd.choice([1, 2, 4, 8, 8])
        g = min(g, len(f[2]))
        if g == 0:
            continue
        gids, f[2] = f[2][:g], f[2][g:]
        c, m = 8 * g, 64_000 * g
        f[0] -= c
        f[1] -= m
        jid += 1
        start = NOW - rnd.randrange(0, 3600 * 12)
        end = NOW + 60 * rnd.randrange(1, 24 * 60)
        running.append(RunningView(
            job_id=jid, partition="gpu", start_time=start, end_time=end,
            nodes=(NodeAlloc(node=nm, cpus=c, mem=m, gpus=tuple(gids), tasks=1),),
            user=f"u{jid % 50}", account=f"a{jid % 5}", qos="normal"))
    nodes = tuple(NodeView(
        name=nm, index=k, partitions=frozenset({"gpu"}), cpus=64, cpus_free=free[nm][0],
        mem=512_000, mem_free=free[nm][1], gpus=8, gpus_free=tuple(free[nm][2]), gpu_type="h100")
        for k, nm in enumerate(names))
    pending = []
    for j in range(1, n_pending + 1):
        r = rnd.random()
        kw: dict = {}
        if r < 0.40:
            kw = dict(gpus_total=1, cpus_per_task=8, mem_per_gpu=64_000)
        elif r < 0.55:
            kw = dict(gpus_total=2, ntasks=2, cpus_per_task=8, mem_per_gpu=64_000, nodes_max=1)
        elif r < 0.65:
            kw = dict(gpus_total=4, ntasks=4, cpus_per_task=8, mem_per_gpu=64_000, nodes_max=1)
        elif r < 0.85:
            kw = dict(nodes_min=1, gpus_per_node=8, ntasks_per_node=8, cpus_per_task=8,
                      mem_per_node=500_000)
        elif r < 0.95:
            kw = dict(nodes_min=rnd.choice([2, 3, 4]), gpus_per_node=8, ntasks_per_node=8,
                      cpus_per_task=8, mem_per_node=500_000)
        else:
            kw = dict(nodes_min=rnd.choice([8, 16]), gpus_per_node=8, ntasks_per_node=8,
                      cpus_per_task=8, mem_per_node=500_000)
        pending.append(JobView(
            job_id=j, priority=1, submit_time=NOW - rnd.randrange(0, 86400), partitions=("gpu",),
            time_limit=rnd.choice(LIMITS), user=f"u{j % 50}", account=f"a{j % 5}", qos="normal",
            **kw))
    assocs = [AssocView(account=f"a{a}", parent=None, shares=a + 1) for a in range(5)]
    assocs += [AssocView(account=f"a{u % 5}", user=f"u{u}", shares=1) for u in range(50)]
    fs = {(f"a{u % 5}", f"u{u}"): (u + 1) / 50 for u in range(50)}
    part = PartitionView(name="gpu", node_names=tuple(names), max_time=2880)
    return Snapshot(now=NOW, nodes=nodes, partitions=(part,), pending=tuple(pending),
                    running=tuple(running), qos=(QosView(name="normal"),), assocs=tuple(assocs),
                    fairshare=fs)


CFG = SchedConfig(
    backfill=True, bf_depth=None, bf_max_job_test=0, bf_window=2 * 1440,
    priority_type="multifactor", weight_age=1000, weight_fairshare=10000, weight_jobsize=100,
    weight_partition=1000, weight_qos=1000,
)


def with_tree(snap: Snapshot, per_leaf: int) -> Snapshot:
    """``snap`` with leaf switches of ``per_leaf`` consecutive nodes under one top switch."""
    names = [n.name for n in snap.nodes]
    leaves = tuple(SwitchView(f"leaf{i // per_leaf}", nodes=tuple(names[i:i + per_leaf]))
                   for i in range(0, len(names), per_leaf))
    return replace(snap, switches=leaves + (SwitchView("top", switches=tuple(
        s.name for s in leaves)),))


def cycle(snap: Snapshot, cfg: SchedConfig = CFG, repeat: int = 3) -> tuple[float, object]:
    best, plan = None, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        plan = schedule(snap, cfg)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return best, plan


def describe(plan) -> str:
    bf = sum(1 for s in plan.starts if s.scheduler == "Backfill")
    return (f"starts {len(plan.starts)} (backfill {bf}), reserved {len(plan.sched_nodes)}, "
            f"expected {len(plan.expected_start)}")


def run(ctx) -> dict:
    """Suite entry (bench/run.py): the goal case, conservative and EASY, each cycle timed
    ``repeat`` times (median, min–max). Goal: ≤ 1 s for 10k pending / 4,096 nodes / 8k running."""
    from bench import common

    pending, nodes, running = (1000, 1024, 2000) if ctx.quick else (10_000, 4096, 8000)
    snap = build(nodes, pending, running)
    rows, info = [], {"pending": pending, "nodes": nodes, "running": running}
    for label, cfg in (("conservative (bf_depth all)", CFG), ("EASY (bf_depth=1)", replace(CFG, bf_depth=1))):
        times = []
        for _ in range(3 if ctx.quick else 5):
            t0 = time.perf_counter()
            plan = schedule(snap, cfg)
            times.append(time.perf_counter() - t0)
        info[label] = describe(plan)
        st = common.stats(times)
        rows.append(common.row(f"one cycle, {pending:,} pending / {nodes:,} nodes / {running:,} "
                               f"running, {label}", st, None, "-", "<= 1 s", st["median"] <= 1.0))
    return {"rows": rows, "info": info}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pending", type=int, default=10_000)
    ap.add_argument("--nodes", type=int, default=4096)
    ap.add_argument("--running", type=int, default=8000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--easy", action="store_true", help="bf_depth=1 instead of conservative")
    ap.add_argument("--topology", type=int, metavar="N",
                    help="a two-level switch tree, N nodes per leaf (issue 17's cycle cost)")
    a = ap.parse_args(argv)
    cfg = replace(CFG, bf_depth=1) if a.easy else CFG
    if a.table:
        print("| pending \\ nodes | 256 | 1,024 | 4,096 |")
        print("|---|---|---|---|")
        for p in (1000, 10_000, 50_000):
            row = []
            for n in (256, 1024, 4096):
                snap = build(n, p, min(a.running, 2 * n))
                dt, plan = cycle(snap, cfg, 1 if p > 10_000 else a.repeat)
                row.append(f"{dt * 1000:.0f} ms")
                print(f"  pending={p} nodes={n}: {dt * 1000:.0f} ms; {describe(plan)}",
                      file=sys.stderr)
            print(f"| {p:,} | " + " | ".join(row) + " |")
        return 0
    snap = build(a.nodes, a.pending, a.running)
    if a.topology:
        snap = with_tree(snap, a.topology)
    if a.profile:
        pr = cProfile.Profile()
        pr.enable()
        plan = schedule(snap, cfg)
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(15)
        print(s.getvalue())
        print(describe(plan))
        return 0
    dt, plan = cycle(snap, cfg, a.repeat)
    print(f"pending={a.pending} nodes={a.nodes} running={len(snap.running)}: "
          f"{dt * 1000:.0f} ms per cycle; {describe(plan)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
