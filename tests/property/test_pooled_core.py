"""The incremental pooled scheduler makes the same decisions as the core's ``schedule()``.

A random history on one node of fungible CPUs — submissions (random sizes, limits,
priorities), ends (early, on time, or after the estimated end, so stale estimates are
exercised), passes — is fed to :class:`muster.core.pooled.PooledScheduler` as deltas and,
at every pass, to ``schedule()`` as a full snapshot built independently by the test. The
starts (job, allocation, Main/Backfill label, in order) and the EASY reservation (job and
expected start) must be identical; with several reservations (conservative, ``bf_depth``
None, 0, 2, 3), the reservations of every job the pass looked at.
"""

from __future__ import annotations

import dataclasses
import random
from unittest import mock

from hypothesis import event, given, settings
from hypothesis import strategies as st

from muster.core import JobView, NodeView, PartitionView, RunningView, SchedConfig, Snapshot
from muster.core import pooled as pooled_mod
from muster.core import priority as prio
from muster.core.pooled import PooledScheduler
from muster.core.schedule import order_key, schedule

from incremental import assert_same_pass, ending, history_config, started


@st.composite
def histories(draw):
    cpus = draw(st.integers(1, 48))
    max_time = draw(st.sampled_from([None, 0, 30, 120]))
    cfg = history_config(draw, windows=(20 * 365 * 1440, 1440, 30, 5))
    # tiny blocks make the backfill index split, skip and merge blocks on short queues
    block = draw(st.sampled_from([1, 2, 3, 32]))
    return cpus, max_time, cfg, draw(st.integers(0, 2**32 - 1)), draw(st.integers(5, 60)), block


def _job(rng: random.Random, jid: int, now: int, cpus: int, max_time) -> JobView:
    limit = rng.choice([None, 0, 1, 2, 5, 10, 30, 60, 200])
    if max_time is not None and limit is not None and limit > max_time:
        limit = max_time
    size = rng.choice([1, 1, 2, 3, max(1, cpus // 4), max(1, cpus // 2), cpus])
    shape = rng.choice(["n", "c", "nc"])
    kw = {"n": dict(ntasks=size), "c": dict(cpus_per_task=size),
          "nc": dict(ntasks=max(1, size // 2), cpus_per_task=2 if size >= 2 else 1)}[shape]
    return JobView(job_id=jid, priority=rng.choice([1, 1, 1, 5]), submit_time=now,
                   partitions=("p",), time_limit=limit, mem_per_cpu=1,
                   nice=rng.choice([0, 0, 0, 100, -100]), **kw)


@settings(max_examples=1000, deadline=None)
@given(histories())
def test_pooled_equals_schedule(h):
    with mock.patch.object(pooled_mod, "_BLOCK", h[-1]):
        check_history(*h[:-1])


@settings(max_examples=600, deadline=None)
@given(histories(), st.sampled_from([None, None, 0, 1, 2, 3]), st.sampled_from([0, 0, 1, 2, 5]))
def test_pooled_with_several_reservations_equals_schedule(h, depth, budget):
    """Conservative backfill (a reservation for every waiting job), other depths and test
    budgets: the carved profile, its early stop and its resumed passes make ``schedule()``'s
    starts (depth 1 without a budget: EASY's own test above)."""
    cpus, max_time, cfg, seed, steps, block = h
    cfg = dataclasses.replace(cfg, backfill=True, bf_depth=depth, bf_max_job_test=budget)
    with mock.patch.object(pooled_mod, "_BLOCK", block):
        check_history(cpus, max_time, cfg, seed, steps)


def check_history(cpus, max_time, cfg, seed, steps):
    rng = random.Random(seed)
    node = NodeView(name="n0", index=0, partitions=frozenset({"p"}), cpus=cpus, cpus_free=cpus,
                    mem=cpus, mem_free=cpus)
    part = PartitionView(name="p", node_names=("n0",), max_time=max_time)
    pooled = PooledScheduler(node, part, cfg)
    pending: dict[int, JobView] = {}
    running: dict[int, tuple[RunningView, int]] = {}  # job → (view, when it really ends)
    free = cpus
    now, jid = 0, 0
    passes = starts_seen = reserved_seen = backfilled = 0
    for _ in range(steps):
        now += rng.choice([1, 30, 60, 60, 120, 600, 3600])
        for j, view in ending(rng, running, now):
            free += view.nodes[0].cpus
            pooled.ended(j)
        for _ in range(rng.choice([0, 0, 1, 1, 2, 4])):
            jid += 1
            job = _job(rng, jid, now, cpus, max_time)
            if pooled.admit(job) is None:
                pending[jid] = job
                pooled.submit(job)
        snap = Snapshot(
            now=now,
            nodes=(NodeView(name="n0", index=0, partitions=frozenset({"p"}), cpus=cpus,
                            cpus_free=free, mem=cpus, mem_free=free),),
            partitions=(part,), pending=tuple(pending.values()),
            running=tuple(v for v, _ in running.values()))
        want = schedule(snap, cfg)
        got = pooled.schedule(now)
        passes += 1
        if cfg.backfill and (cfg.bf_depth != 1 or cfg.bf_max_job_test):
            reserved_seen += assert_same_reservations(pooled, got, want, pending, cfg, now)
        else:
            reserved_seen += assert_same_pass(got, want, pooled.reservation, now, snap,
                                              named=False)
        for s in got:
            running[s.job_id] = started(rng, s, pending.pop(s.job_id), now)
            free -= s.allocation.nodes[0].cpus
            starts_seen += 1
            backfilled += s.scheduler == "Backfill"
        assert pooled.free == free
    assert passes == steps
    event(f"reservations: {'some' if reserved_seen else 'none'}")
    event(f"starts: {'some' if starts_seen else 'none'}")
    event(f"backfill starts: {'some' if backfilled else 'none'}")


def assert_same_reservations(pooled, got, want, pending, cfg, now) -> bool:
    """Several reservations: the same starts, and the reservations of the jobs up to the
    last one the pooled pass looked at (it stops where no later job could start now) are
    ``want``'s. True when there is one."""
    assert [(s.job_id, s.allocation, s.scheduler) for s in got] == \
        [(s.job_id, s.allocation, s.scheduler) for s in want.starts], now
    looked = pooled.looked

    def key(j):
        return order_key(prio.static_priority(pending[j], cfg), pending[j])
    want_res = {j: want.expected_start[j] for j in want.sched_nodes
                if looked is not None and key(j) <= looked}
    assert pooled.expected == want_res, now
    return bool(want_res)


def test_histories_exercise_reservations_and_backfill():
    """The random histories above reach the interesting cases: a reservation, a backfill
    start, a start after a resumed pass (guards against a vacuous property)."""
    cpus = 8
    node = NodeView(name="n0", index=0, partitions=frozenset({"p"}), cpus=cpus, cpus_free=cpus,
                    mem=cpus, mem_free=cpus)
    part = PartitionView(name="p", node_names=("n0",))
    cfg = SchedConfig(backfill=True, bf_depth=1, bf_max_job_test=0, bf_window=20 * 365 * 1440)
    pooled = PooledScheduler(node, part, cfg)

    def submit(jid, n, limit, t):
        pooled.submit(JobView(job_id=jid, submit_time=t, partitions=("p",), ntasks=n,
                              time_limit=limit, mem_per_cpu=1))

    submit(1, 6, 10, 0)
    assert [s.job_id for s in pooled.schedule(0)] == [1]
    submit(2, 4, 10, 5)   # waits for job 1: reserved at 600
    submit(3, 2, 5, 5)    # fits and ends (305) before 600: backfilled
    submit(4, 2, 20, 5)   # fits now but would run past 600 and there are no extra CPUs
    got = pooled.schedule(5)
    assert [(s.job_id, s.scheduler) for s in got] == [(3, "Backfill")]
    assert pooled.reservation == (2, 600)
    submit(5, 1, 100, 10)  # resumed pass: nothing ended, no free CPU left → nothing
    assert pooled.schedule(10) == []
    pooled.ended(3)
    # job 3 gave 2 CPUs back; F(600) = 2 + 6 = 8, job 2 takes 4: 4 extra, so job 4 (2 CPUs,
    # past 600) is backfilled, and job 5 (1 CPU) too
    got = pooled.schedule(300)
    assert [s.job_id for s in got] == [4]
    assert pooled.free == 0


def test_scope_is_explained():
    node = NodeView(name="n0", index=0, partitions=frozenset({"p"}), cpus=4, cpus_free=4,
                    mem=4, mem_free=4)
    part = PartitionView(name="p", node_names=("n0",))
    easy = SchedConfig(backfill=True, bf_depth=1, bf_max_job_test=0)
    assert PooledScheduler.unsupported([node], [part], easy) is None
    # conservative, any other depth and a test budget plan on a profile: in scope
    assert PooledScheduler.unsupported(
        [node], [part], SchedConfig(backfill=True, bf_depth=None, bf_max_job_test=0)) is None
    assert PooledScheduler.unsupported(
        [node], [part], SchedConfig(backfill=True, bf_depth=None, bf_max_job_test=100)) is None
    assert "multifactor" in PooledScheduler.unsupported(
        [node], [part], SchedConfig(priority_type="multifactor", weight_age=10))
    # multifactor without weights (Slurm 23.11's default) and priority/basic depend on the job
    # alone: in scope
    assert PooledScheduler.unsupported([node], [part],
                                       SchedConfig(priority_type="multifactor")) is None
    assert PooledScheduler.unsupported([node], [part],
                                       SchedConfig(priority_type="basic")) is None
    assert "more than one" in PooledScheduler.unsupported([node, node], [part], easy)
    p = PooledScheduler(node, part, easy)
    assert p.admit(JobView(job_id=1, partitions=("p",), ntasks=2, mem_per_cpu=1)) is None
    assert "shape" in p.admit(JobView(job_id=2, partitions=("p",), gpus_per_node=1,
                                      mem_per_cpu=1))
    assert "shape" in p.admit(JobView(job_id=3, partitions=("p",), ntasks=2, exclusive=True,
                                      mem_per_cpu=1))
    assert "options" in p.admit(JobView(job_id=5, partitions=("q",), mem_per_cpu=1))
