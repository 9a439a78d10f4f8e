"""Invariants of backfill and fair-share under random inputs (hypothesis).

* no CPU/GPU/memory oversubscription at any time of the plan's timeline;
* a reserved job starts no later than promised when every job ends exactly at its limit
  (the plan is run forward cycle by cycle), node ranges (``-N a-b``) that grow included;
* same snapshot → same plan, whatever the input order;
* Fair Tree ranks agree with a slow reference (lexicographic LevelFS paths).
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from muster.core import JobView, NodeView, PartitionView, SchedConfig, Snapshot, schedule
from muster.core import backfill as bfmod
from muster.core.fairshare import fair_tree, level_fs, tree
from muster.core.placement import NodeAlloc
from muster.core.snapshot import AssocView, RunningView

NOW = 10_000
SETTINGS = settings(max_examples=150, deadline=None)


@st.composite
def clusters(draw, max_jobs=6):
    n = draw(st.integers(1, 4))
    nodes, running = [], []
    jid = 1000
    for i in range(n):
        cpus, gpus, mem = draw(st.integers(2, 8)), draw(st.integers(0, 4)), 1000
        fc, fm, fg = cpus, mem, list(range(gpus))
        for _ in range(draw(st.integers(0, 2))):
            if fc < 1:
                break
            c = draw(st.integers(1, fc))
            m = draw(st.integers(0, fm))
            g = draw(st.integers(0, len(fg)))
            gids, fg = tuple(fg[:g]), fg[g:]
            fc, fm = fc - c, fm - m
            jid += 1
            end = draw(st.sampled_from([None, NOW - 10]) | st.integers(1, 40).map(lambda k: NOW + 60 * k))
            running.append(RunningView(job_id=jid, partition="p", start_time=NOW - 100, end_time=end,
                                       nodes=(NodeAlloc(f"n{i}", c, m, gids, 1),)))
        nodes.append(NodeView(name=f"n{i}", index=i, partitions=frozenset({"p"}), cpus=cpus,
                              cpus_free=fc, mem=mem, mem_free=fm, gpus=gpus, gpus_free=tuple(fg),
                              usable=draw(st.booleans() | st.just(True))))
    jobs = []
    for j in range(1, draw(st.integers(1, max_jobs)) + 1):
        kw = {}
        shape = draw(st.sampled_from(["node", "gpn", "gtot", "pack"]))
        if shape == "gpn":
            kw["gpus_per_node"] = draw(st.integers(1, 2))
        elif shape == "gtot":
            kw["gpus_total"] = draw(st.integers(1, 3))
        elif shape == "pack":
            kw["ntasks"] = draw(st.integers(1, 6))
        jobs.append(JobView(
            job_id=j, priority=100 - j, submit_time=0, partitions=("p",),
            nodes_min=draw(st.integers(1, 2)) if shape != "pack" else 1,
            # a node range grows at a start now: it must still delay no reservation
            nodes_max=draw(st.sampled_from([None, None, 2, 4])),
            cpus_per_task=draw(st.integers(1, 3)),
            mem_per_node=draw(st.sampled_from([None, 100, 400])),
            exclusive=draw(st.booleans()) if shape == "node" else False,
            time_limit=draw(st.integers(1, 60)), **kw))
    part = PartitionView(name="p", node_names=tuple(x.name for x in nodes),
                         max_time=draw(st.sampled_from([None, 90])))
    return Snapshot(now=NOW, nodes=tuple(nodes), partitions=(part,), pending=tuple(jobs),
                    running=tuple(running))


CONS = SchedConfig(backfill=True, bf_depth=None)
configs = st.sampled_from([CONS, replace(CONS, bf_depth=1), replace(CONS, bf_depth=2),
                           replace(CONS, bf_resolution=300)])


@contextmanager
def capture_timeline():
    got = []
    orig = bfmod.run

    def run(*a, **kw):
        res = orig(*a, **kw)
        got.append(res.timeline)
        return res

    bfmod.run = run
    try:
        yield got
    finally:
        bfmod.run = orig


@SETTINGS
@given(clusters(), configs)
def test_no_oversubscription_at_any_time(snap, cfg):
    with capture_timeline() as got:
        plan = schedule(snap, cfg)
    (tl,) = got
    for p, n in enumerate(tl.nodes):
        if not n.usable:
            continue
        allg = (1 << n.gpus) - 1
        for c, m, g in zip(tl.cs[p], tl.ms[p], tl.gs[p]):
            assert 0 <= c <= n.cpus and 0 <= m <= n.mem and g & ~allg == 0
    # starts now fit on what is free now, GPU indices distinct
    by = {n.name: n for n in snap.nodes}
    used: dict[str, list] = {}
    for s in plan.starts:
        for a in s.allocation.nodes:
            u = used.setdefault(a.node, [0, 0, []])
            u[0] += a.cpus
            u[1] += a.mem
            u[2] += list(a.gpus)
    for nm, (c, m, g) in used.items():
        n = by[nm]
        assert n.usable and c <= n.cpus_free and m <= n.mem_free
        assert len(set(g)) == len(g) and set(g) <= set(n.gpus_free)


def _step(snap: Snapshot, plan, t: int, limits: dict[int, int]) -> Snapshot:
    """Apply the plan's starts at snap.now, then move to time t: jobs ending ≤ t leave."""
    jobs = {j.job_id: j for j in snap.pending}
    running = list(snap.running)
    for s in plan.starts:
        j = jobs.pop(s.job_id)
        lim = s.time_limit or j.time_limit
        running.append(RunningView(job_id=j.job_id, partition=s.partition, nodes=s.allocation.nodes,
                                   start_time=snap.now, end_time=snap.now + lim * 60))
    free = {n.name: [n.cpus_free, n.mem_free, set(n.gpus_free)] for n in snap.nodes}
    for s in plan.starts:
        for a in s.allocation.nodes:
            f = free[a.node]
            f[0] -= a.cpus
            f[1] -= a.mem
            f[2] -= set(a.gpus)
    keep = []
    for r in running:
        end = limits.get(r.job_id, r.end_time)
        if end is not None and end <= t:
            for a in r.nodes:
                f = free[a.node]
                f[0] += a.cpus
                f[1] += a.mem
                f[2] |= set(a.gpus)
        else:
            keep.append(r)
    nodes = tuple(replace(n, cpus_free=free[n.name][0], mem_free=free[n.name][1],
                          gpus_free=tuple(sorted(free[n.name][2]))) for n in snap.nodes)
    return replace(snap, now=t, nodes=nodes, running=tuple(keep),
                   pending=tuple(jobs[k] for k in sorted(jobs)))


@SETTINGS
@given(clusters(max_jobs=5))
def test_backfill_never_delays_a_reserved_job(snap):
    # running jobs end exactly at their (estimated) limits: past-limit ones after KillWait
    parts = snap.partition_map()
    from muster.core.backfill import running_end

    limits = {r.job_id: running_end(r, parts.get(r.partition), NOW, CONS) for r in snap.running}
    plan = schedule(snap, CONS)
    if not plan.sched_nodes:
        return
    top = min(plan.sched_nodes, key=lambda j: -next(x.priority for x in snap.pending if x.job_id == j))
    promised = plan.expected_start[top]
    cur, started_at = snap, None
    for _ in range(50):
        lim = {j.job_id: j.time_limit for j in cur.pending}
        ends = sorted({e for e in limits.values() if e > cur.now}
                      | {r.end_time for r in cur.running if r.end_time and r.end_time > cur.now}
                      | {cur.now + 60 * (s.time_limit or lim[s.job_id]) for s in plan.starts}
                      | {promised})
        if any(s.job_id == top for s in plan.starts):
            started_at = cur.now
            break
        nxt = [e for e in ends if cur.now < e <= promised]
        if not nxt:
            break
        cur = _step(cur, plan, nxt[0], limits)
        plan = schedule(cur, CONS)
    assert started_at is not None and started_at <= promised


@SETTINGS
@given(clusters(), configs, st.randoms(use_true_random=False))
def test_backfill_deterministic_and_order_independent(snap, cfg, rnd: random.Random):
    plan = schedule(snap, cfg)
    assert schedule(snap, cfg) == plan
    lists = {k: list(getattr(snap, k)) for k in ("pending", "nodes", "running")}
    for v in lists.values():
        rnd.shuffle(v)
    assert schedule(replace(snap, **{k: tuple(v) for k, v in lists.items()}), cfg) == plan


# ---- Fair Tree against a slow reference ----------------------------------------------

@st.composite
def assoc_trees(draw):
    out = [AssocView("root")]
    accounts = ["root"]
    for i in range(draw(st.integers(1, 5))):
        name = f"acc{i}"
        out.append(AssocView(name, parent=draw(st.sampled_from(accounts)) if accounts[1:] else None,
                             shares=draw(st.integers(1, 4)),
                             raw_usage=draw(st.sampled_from([0.0, 1.0, 5.0]))))
        accounts.append(name)
    for u in range(draw(st.integers(1, 8))):
        acct = draw(st.sampled_from(accounts[1:]))
        out.append(AssocView(acct, user=f"u{u}", shares=draw(st.integers(1, 4)),
                             raw_usage=draw(st.sampled_from([0.0, 1.0, 2.0, 7.0, 10.0]))))
    return [replace(a, parent=None if a.parent == "root" else a.parent) for a in out]


def reference_fair_tree(assocs):
    """Users sorted by their path of −LevelFS from the top (shorter prefix first);
    equal paths share a rank; rank starts at n_users and drops by the users before."""
    root = tree(assocs)
    paths = {}

    def walk(n, path):
        for c in n.children:
            p = path + (-level_fs(c),)
            if c.is_user:
                paths[c.key] = p
            else:
                walk(c, p)

    walk(root, ())
    users = sorted(paths, key=lambda k: paths[k])
    n = len(users)
    out = {}
    for k in users:
        before = sum(1 for o in users if paths[o] < paths[k])
        out[k] = (n - before) / n
    return out


@SETTINGS
@given(assoc_trees())
def test_fair_tree_matches_reference(assocs):
    assert fair_tree(assocs) == reference_fair_tree(assocs)
