"""Invariants of the scheduling core under random snapshots (hypothesis)."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from muster.core import (
    JobView,
    NodeView,
    PartitionView,
    SchedConfig,
    Snapshot,
    first_fit,
    node_key,
    place_request,
    request_of,
    schedule,
)


@st.composite
def node_views(draw, i):
    cpus = draw(st.integers(1, 8))
    mem = draw(st.sampled_from([1000, 4000]))
    gpus = draw(st.integers(0, 4))
    used = draw(st.sets(st.integers(0, gpus - 1))) if gpus else set()
    return NodeView(
        name=f"n{i}", index=i, partitions=frozenset({"p"}), cpus=cpus,
        cpus_free=draw(st.integers(0, cpus)), mem=mem, mem_free=draw(st.integers(0, mem)),
        gpus=gpus, gpus_free=tuple(g for g in range(gpus) if g not in used),
        gpu_type=draw(st.sampled_from([None, "a", "b"])) if gpus else None,
        usable=draw(st.booleans() | st.just(True)), weight=draw(st.integers(1, 2)),
    )


NAMES = [f"n{i}" for i in range(6)]


@st.composite
def job_views(draw, job_id):
    opt = lambda s: st.none() | s  # noqa: E731
    return JobView(
        job_id=job_id,
        priority=draw(st.integers(1, 3)),
        submit_time=draw(st.integers(0, 3)),
        partitions=tuple(draw(st.lists(st.sampled_from(["p", "q"]), min_size=1, max_size=2, unique=True))),
        nodes_min=draw(st.integers(1, 3)),
        nodes_max=draw(opt(st.integers(1, 4))),
        ntasks=draw(st.integers(0, 10)),
        ntasks_per_node=draw(opt(st.integers(1, 4))),
        cpus_per_task=draw(st.integers(1, 3)),
        mem_per_node=draw(opt(st.sampled_from([0, 100, 2000]))),
        mem_per_cpu=draw(opt(st.sampled_from([50, 500]))),
        mem_per_gpu=draw(opt(st.sampled_from([100]))),
        gpus_per_node=draw(st.integers(0, 2)),
        gpus_total=draw(opt(st.integers(1, 6))),
        gpus_per_task=draw(opt(st.integers(1, 2))),
        gpu_type=draw(st.sampled_from([None, None, "a"])),
        req_nodes=frozenset(draw(st.sets(st.sampled_from(NAMES), max_size=2))),
        exc_nodes=frozenset(draw(st.sets(st.sampled_from(NAMES), max_size=2))),
        exclusive=draw(st.booleans()),
        time_limit=draw(opt(st.integers(1, 100))),
        blocked=draw(st.sampled_from([None, None, None, "Dependency"])),
        max_starts=draw(st.integers(1, 3)),
    )


@st.composite
def snapshots(draw):
    n = draw(st.integers(1, 6))
    ns = tuple(draw(node_views(i)) for i in range(n))
    q_nodes = tuple(nm.name for nm in ns if draw(st.booleans()))
    parts = (
        PartitionView(name="p", node_names=tuple(x.name for x in ns),
                      max_nodes=draw(st.none() | st.integers(1, 3))),
        PartitionView(name="q", node_names=q_nodes, priority_tier=draw(st.integers(1, 2)),
                      state=draw(st.sampled_from(["UP", "UP", "DOWN", "DRAIN"])),
                      max_time=draw(st.none() | st.just(50))),
    )
    jobs = tuple(draw(job_views(j)) for j in range(1, draw(st.integers(0, 8)) + 1))
    return Snapshot(now=0, nodes=ns, partitions=parts, pending=jobs)


configs = st.builds(
    SchedConfig,
    def_mem_per_cpu=st.none() | st.just(100),
    def_mem_per_gpu=st.none() | st.just(300),
    max_jobs_to_start=st.integers(0, 3),
)

SETTINGS = settings(max_examples=200, deadline=None)


@SETTINGS
@given(snapshots(), configs)
def test_no_oversubscription(snap, cfg):
    plan = schedule(snap, cfg)
    by_name = {n.name: n for n in snap.nodes}
    cpus, mem, gpus = defaultdict(int), defaultdict(int), defaultdict(list)
    for s in plan.starts:
        for a in s.allocation.nodes:
            cpus[a.node] += a.cpus
            mem[a.node] += a.mem
            gpus[a.node] += a.gpus
            assert a.cpus >= 1 and a.tasks >= 1
    for name in cpus:
        n = by_name[name]
        assert cpus[name] <= n.cpus_free
        assert mem[name] <= n.mem_free
        assert len(set(gpus[name])) == len(gpus[name])
        assert set(gpus[name]) <= set(n.gpus_free)


@SETTINGS
@given(snapshots(), configs, st.randoms(use_true_random=False))
def test_deterministic_and_order_independent(snap, cfg, rnd: random.Random):
    plan = schedule(snap, cfg)
    assert schedule(snap, cfg) == plan
    pending = list(snap.pending)
    rnd.shuffle(pending)
    nodes = list(snap.nodes)
    rnd.shuffle(nodes)
    assert schedule(replace(snap, pending=tuple(pending), nodes=tuple(nodes)), cfg) == plan


@SETTINGS
@given(snapshots(), configs)
def test_every_job_gets_a_start_or_a_reason(snap, cfg):
    plan = schedule(snap, cfg)
    started = defaultdict(int)
    for s in plan.starts:
        started[s.job_id] += 1
    ids = {j.job_id for j in snap.pending}
    assert set(plan.reasons) <= ids and set(started) <= ids
    for j in snap.pending:
        assert started[j.job_id] <= max(1, j.max_starts)
        if j.blocked:
            assert plan.reasons[j.job_id] == j.blocked and not started[j.job_id]
        elif started[j.job_id] == max(1, j.max_starts):
            assert j.job_id not in plan.reasons
        else:
            assert j.job_id in plan.reasons
    if cfg.max_jobs_to_start:
        assert len(plan.starts) <= cfg.max_jobs_to_start


@SETTINGS
@given(snapshots(), configs)
def test_starts_respect_nodes_partitions_and_requests(snap, cfg):
    plan = schedule(snap, cfg)
    by_name = {n.name: n for n in snap.nodes}
    parts = snap.partition_map()
    jobs = {j.job_id: j for j in snap.pending}
    for s in plan.starts:
        j, p = jobs[s.job_id], parts[s.partition]
        names = set(s.allocation.node_names)
        assert s.partition in j.partitions and p.state in ("UP", "DRAIN")
        assert names <= set(p.node_names)
        assert all(by_name[x].usable for x in names)
        assert not names & j.exc_nodes and j.req_nodes <= names
        assert len(names) >= j.nodes_min
        if j.nodes_max is not None:
            assert len(names) <= max(j.nodes_max, len(j.req_nodes))
        if p.max_nodes is not None:
            assert len(names) <= p.max_nodes
        if j.ntasks > 0:
            assert sum(a.tasks for a in s.allocation.nodes) == max(j.ntasks, j.nodes_min)
        if j.exclusive:
            assert all(by_name[a.node].idle and a.cpus == by_name[a.node].cpus
                       for a in s.allocation.nodes)


@SETTINGS
@given(snapshots(), configs, st.data())
def test_first_fit_index_agrees_with_place(snap, cfg, data):
    job = data.draw(job_views(1))
    job = replace(job, req_nodes=frozenset())
    rq = request_of(job, cfg)
    fixed = rq.tasks_mode != "pack" and rq.gpu_mode != "total"
    if not fixed:
        job = replace(job, nodes_min=1)
        rq = request_of(job, cfg)
    cands = [n for n in snap.nodes if n.usable and n.cpus_free]
    keys = sorted(node_key(n) for n in cands)
    by_index = {n.index: n for n in snap.nodes}
    got = first_fit(job, rq, keys, by_index.__getitem__, frozenset())
    want = place_request(job, rq, cands)
    if got is not None:
        assert got == want
    elif fixed:
        assert want is None
    else:  # "no single node holds it" — or a packing node range, always place_request's
        assert want is None or len(want.nodes) > 1 or rq.grow
