"""Main-scheduler cycle: queue order, reasons, blocking, consumption, limits."""

from __future__ import annotations

import time

from core_builders import CFG, job, node, nodes, partition, snapshot

from muster.core import MainBlocking, SchedConfig, schedule


def started(plan):
    return [s.job_id for s in plan.starts]


def test_queue_order_priority_submit_id():
    ns = [node("n1", cpus=2)]
    jobs = [
        job(5, priority=10, submit_time=3, mem_per_cpu=1),
        job(4, priority=10, submit_time=2, mem_per_cpu=1),
        job(3, priority=20, submit_time=9, mem_per_cpu=1),
        job(2, priority=10, submit_time=2, mem_per_cpu=1),
    ]
    plan = schedule(snapshot(ns, jobs), CFG)
    assert started(plan) == [3, 2]
    assert plan.reasons == {4: "Resources", 5: "Priority"}


def test_partition_tier_comes_before_job_priority():
    ns = [node("n1", cpus=1)]
    parts = [partition("lo", ns, priority_tier=1), partition("hi", ns, priority_tier=5)]
    jobs = [job(1, priority=100, partitions=("lo",), mem_per_cpu=1),
            job(2, priority=1, partitions=("hi",), mem_per_cpu=1)]
    plan = schedule(snapshot(ns, jobs, parts), CFG)
    assert started(plan) == [2]
    assert plan.reasons == {1: "Resources"}


def test_blocked_jobs_keep_their_reason():
    plan = schedule(snapshot(nodes(1), [job(1, blocked="Dependency"), job(2, blocked="JobHeldUser")]), CFG)
    assert plan.starts == () and plan.reasons == {1: "Dependency", 2: "JobHeldUser"}


def test_static_partition_reasons():
    ns = nodes(2)
    parts = [
        partition("down", ns, state="DOWN"),
        partition("inact", ns, state="INACTIVE"),
        partition("short", ns, max_time=60),
        partition("small", ns, max_nodes=1),
        partition("drain", ns, state="DRAIN"),
    ]
    jobs = [
        job(1, partitions=("down",)),
        job(2, partitions=("inact",)),
        job(3, partitions=("short",), time_limit=61),
        job(4, partitions=("small",), nodes_min=2),
        job(5, partitions=("nope",)),
        job(6, partitions=("drain",), mem_per_cpu=1),
    ]
    plan = schedule(snapshot(ns, jobs, parts), CFG)
    assert started(plan) == [6]
    assert plan.reasons == {
        1: "PartitionDown", 2: "PartitionInactive", 3: "PartitionTimeLimit",
        4: "PartitionNodeLimit", 5: "PartitionConfig",
    }


def test_resources_blocks_partition_then_priority():
    a, b = [node("a1", cpus=4)], [node("b1", cpus=4)]
    parts = [partition("pa", a), partition("pb", b)]
    jobs = [
        job(1, priority=9, partitions=("pa",), ntasks=4, mem_per_cpu=1),
        job(2, priority=8, partitions=("pa",), ntasks=4, mem_per_cpu=1),
        job(3, priority=7, partitions=("pa",), mem_per_cpu=1),
        job(4, priority=1, partitions=("pb",), mem_per_cpu=1),
    ]
    plan = schedule(snapshot(a + b, jobs, parts), CFG)
    # job 1 fills a1; job 2 waits with Resources; job 3 would fit nowhere anyway: Priority
    assert started(plan) == [1, 4]
    assert plan.reasons == {2: "Resources", 3: "Priority"}


def test_blocked_partition_hides_shared_nodes_from_other_partitions():
    ns = [node("n1", cpus=4), node("n2", cpus=4, cpus_used=4)]
    parts = [partition("big", ns, priority_tier=2), partition("small", ns[:1])]
    jobs = [job(1, partitions=("big",), nodes_min=2, mem_per_cpu=1),
            job(2, partitions=("small",), mem_per_cpu=1)]
    plan = schedule(snapshot(ns, jobs, parts), CFG)
    assert plan.starts == ()
    assert plan.reasons == {1: "Resources", 2: "Resources"}


def test_required_node_job_blocks_only_its_nodes():
    ns = [node("n1", cpus=4, cpus_used=4), node("n2", cpus=4)]
    jobs = [job(1, priority=9, req_nodes={"n1"}, mem_per_cpu=1), job(2, priority=1, mem_per_cpu=1)]
    plan = schedule(snapshot(ns, jobs), CFG)
    assert started(plan) == [2]
    assert plan.reasons == {1: "Resources"}


def test_required_node_unusable():
    ns = [node("n1", usable=False), node("n2")]
    plan = schedule(snapshot(ns, [job(1, req_nodes={"n1"}), job(2, mem_per_cpu=1)]), CFG)
    assert started(plan) == [2] and plan.reasons == {1: "ReqNodeNotAvail"}


def test_needs_down_nodes_is_reqnodenotavail_and_does_not_block():
    ns = [node("n1", usable=False), node("n2")]
    plan = schedule(snapshot(ns, [job(1, priority=9, nodes_min=2), job(2, mem_per_cpu=1)]), CFG)
    assert started(plan) == [2] and plan.reasons == {1: "ReqNodeNotAvail"}


def test_never_fitting_jobs_do_not_block():
    ns = nodes(2)
    jobs = [job(1, priority=9, nodes_min=3), job(2, priority=8, cpus_per_task=99),
            job(3, mem_per_cpu=1)]
    plan = schedule(snapshot(ns, jobs), CFG)
    assert started(plan) == [3]
    assert plan.reasons == {1: "PartitionNodeLimit", 2: "PartitionConfig"}


def test_starts_consume_resources_and_gpus_are_disjoint():
    ns = [node("n1", cpus=16, gpus=4)]
    jobs = [job(i, gpus_per_node=2, mem_per_cpu=1, submit_time=i) for i in (1, 2, 3)]
    plan = schedule(snapshot(ns, jobs), CFG)
    assert [s.allocation.nodes[0].gpus for s in plan.starts] == [(0, 1), (2, 3)]
    assert plan.reasons == {3: "Resources"}


def test_multi_partition_job_starts_where_it_fits():
    a, b = [node("a1", cpus_used=16)], [node("b1")]
    parts = [partition("pa", a), partition("pb", b)]
    plan = schedule(snapshot(a + b, [job(1, partitions=("pa", "pb"), mem_per_cpu=1)], parts), CFG)
    assert [(s.job_id, s.partition) for s in plan.starts] == [(1, "pb")]
    assert plan.reasons == {}


def test_multi_partition_reason_prefers_resources():
    a = [node("a1", cpus_used=16)]
    parts = [partition("pa", a, state="DOWN"), partition("pb", a)]
    plan = schedule(snapshot(a, [job(1, partitions=("pa", "pb"), mem_per_cpu=1)], parts), CFG)
    assert plan.reasons == {1: "Resources"}


def test_max_jobs_to_start():
    plan = schedule(snapshot(nodes(4), [job(i, mem_per_cpu=1) for i in range(1, 6)]),
                    SchedConfig(max_jobs_to_start=2))
    assert started(plan) == [1, 2]
    assert plan.reasons == {3: "Priority", 4: "Priority", 5: "Priority"}


def test_array_starts_several_tasks():
    ns = [node("n1", cpus=4)]
    plan = schedule(snapshot(ns, [job(7, max_starts=6, mem_per_cpu=1)]), CFG)
    assert started(plan) == [7, 7, 7, 7]
    assert plan.reasons == {7: "Resources"}


def test_partition_max_nodes_caps_packing():
    ns = nodes(3, cpus=4)
    parts = [partition("p", ns, max_nodes=2)]
    plan = schedule(snapshot(ns, [job(1, ntasks=12, mem_per_cpu=1)], parts), CFG)
    # 12 tasks need 3 nodes of 4 CPUs; the partition allows 2
    assert plan.starts == () and plan.reasons == {1: "PartitionNodeLimit"}
    plan = schedule(snapshot(ns, [job(1, ntasks=8, mem_per_cpu=1)], parts), CFG)
    assert len(plan.starts[0].allocation.nodes) == 2


def test_custom_block_policy_is_pluggable():
    class NeverBlock(MainBlocking):
        def on_busy(self, job, partition):
            pass

    ns = [node("n1", cpus=2, cpus_used=1)]
    jobs = [job(1, priority=9, ntasks=2, mem_per_cpu=1), job(2, priority=1, mem_per_cpu=1)]
    assert started(schedule(snapshot(ns, jobs), CFG)) == []
    assert started(schedule(snapshot(ns, jobs), CFG, blocking=NeverBlock)) == [2]


def bench_cycle(n_nodes=1000, n_jobs=10000, full=True):
    """Time one cycle (used for the numbers in muster.core.schedule's docstring)."""
    ns = nodes(n_nodes, cpus=64, mem=256000, cpus_used=64 if full else 0)
    jobs = [job(i + 1, priority=10000 - i % 97, submit_time=i, cpus_per_task=4, mem_per_cpu=1000)
            for i in range(n_jobs)]
    snap = snapshot(ns, jobs)
    t = time.perf_counter()
    plan = schedule(snap, CFG)
    return time.perf_counter() - t, plan


def test_full_cluster_cycle_is_fast():
    best = min(bench_cycle()[0] for _ in range(3))
    assert best < 0.25  # ~30 ms measured; generous for slow CI machines


def test_free_cluster_cycle_is_not_quadratic():
    took, plan = bench_cycle(full=False)
    assert len(plan.starts) == 10000
    assert took < 3.0  # ~0.3 s measured
