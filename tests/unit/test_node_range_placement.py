"""Node ranges (``-N min-max``): as many nodes as fit now, up to the maximum (Slurm: "the
job will be allocated as many nodes as possible within the range"), planned with the minimum
by backfill, never taking nodes a reservation plans on, within QOS limits."""

from __future__ import annotations

from dataclasses import replace

from core_builders import CFG, busy_snapshot, job, node, nodes, running, snapshot

from muster.core import SchedConfig, place, schedule
from muster.core.placement import first_fit, node_key, place_request, request_of
from muster.core.snapshot import QosView, SwitchView
from muster.core.steplayout import AllocNode, StepRequest, layout

BF = SchedConfig(backfill=True, bf_depth=None)
NOW = 1000


def names(alloc):
    return sorted(alloc.node_names)


def test_a_range_takes_as_many_nodes_as_fit_up_to_its_maximum():
    four = nodes(4)
    a = place(job(1, nodes_min=1, nodes_max=3, mem_per_cpu=1), four, CFG)
    assert a is not None and len(a.nodes) == 3 and [n.tasks for n in a.nodes] == [1, 1, 1]
    assert place(job(1, nodes_min=1, nodes_max=9, mem_per_cpu=1), four, CFG).nodes.__len__() == 4
    # no range (-N1, or no maximum): the minimum, as before
    assert len(place(job(1, nodes_min=1, nodes_max=1, mem_per_cpu=1), four, CFG).nodes) == 1
    assert len(place(job(1, nodes_min=2, mem_per_cpu=1), four, CFG).nodes) == 2


def test_a_range_takes_what_is_free_and_never_fewer_than_its_minimum():
    ns = [node("a", 0, cpus_used=16), node("b", 1), node("c", 2, cpus_used=16), node("d", 3)]
    assert names(place(job(1, nodes_min=1, nodes_max=3, mem_per_cpu=1), ns, CFG)) == ["b", "d"]
    assert place(job(1, nodes_min=3, nodes_max=4, mem_per_cpu=1), ns, CFG) is None


def test_a_range_with_ntasks_spreads_the_tasks_one_node_per_task_at_most():
    four = nodes(4)
    a = place(job(1, nodes_min=2, nodes_max=3, ntasks=4, mem_per_cpu=1), four, CFG)
    assert len(a.nodes) == 3 and sorted(n.tasks for n in a.nodes) == [1, 1, 2]
    a = place(job(1, nodes_min=1, nodes_max=3, ntasks=2, mem_per_cpu=1), four, CFG)
    assert len(a.nodes) == 2 and [n.tasks for n in a.nodes] == [1, 1]
    # tasks that need more than the minimum's nodes: the packing nodes, then grown
    small = nodes(4, cpus=2)
    a = place(job(1, nodes_min=1, nodes_max=3, ntasks=5, mem_per_cpu=1), small, CFG)
    assert len(a.nodes) == 3 and sum(n.tasks for n in a.nodes) == 5
    assert all(n.cpus == n.tasks <= 2 for n in a.nodes)


def test_a_range_with_ntasks_per_node_or_gpus():
    a = place(job(1, nodes_min=1, nodes_max=3, ntasks_per_node=2, mem_per_cpu=1), nodes(4), CFG)
    assert [n.tasks for n in a.nodes] == [2, 2, 2]
    gpu = nodes(4, gpus=4)
    a = place(job(1, nodes_min=1, nodes_max=3, gpus_total=2, mem_per_cpu=1), gpu, CFG)
    assert len(a.nodes) == 2 and [len(n.gpus) for n in a.nodes] == [1, 1]


def test_the_fast_path_gives_what_placement_gives():
    ns = [node(f"n{i}", i, cpus_used=(i * 5) % 16) for i in range(8)]
    for lo, hi, cpt in ((1, 3, 1), (2, 5, 4), (1, 8, 2), (3, 4, 12)):
        j = job(1, nodes_min=lo, nodes_max=hi, cpus_per_task=cpt, mem_per_cpu=1)
        rq = request_of(j, CFG)
        assert rq.grow
        by_index = {n.index: n for n in ns}
        fast = first_fit(j, rq, sorted(node_key(n) for n in ns), by_index.__getitem__, set())
        assert fast == place_request(j, rq, ns)


def test_main_scheduler_grows_only_onto_nodes_left_after_earlier_jobs():
    four = nodes(4)
    jobs = [job(1, priority=9, nodes_min=1, nodes_max=3, exclusive=True),
            job(2, priority=5, nodes_min=2, exclusive=True),
            job(3, priority=1, nodes_min=1, exclusive=True)]
    plan = schedule(snapshot(four, jobs), CFG)
    # the first job takes 3 of 4 nodes; the 2-node job waits and blocks the partition
    assert [(s.job_id, len(s.allocation.nodes)) for s in plan.starts] == [(1, 3)]
    assert plan.reasons == {2: "Resources", 3: "Priority"}
    # a range behind a waiting -w job grows onto nothing the main scheduler keeps for it
    ns = [node("n0", 0, cpus_used=16), node("n1", 1), node("n2", 2), node("n3", 3)]
    jobs = [job(4, priority=9, req_nodes={"n0", "n1"}, nodes_min=2, exclusive=True),
            job(5, priority=1, nodes_min=1, nodes_max=4, exclusive=True)]
    plan = schedule(snapshot(ns, jobs), CFG)
    assert [(s.job_id, names(s.allocation)) for s in plan.starts] == [(5, ["n2", "n3"])]


def test_backfill_plans_a_range_with_its_minimum():
    r = running(100, [(f"n{i:04d}", 16, 64000, ()) for i in range(4)], end=NOW + 600)
    snap = busy_snapshot(nodes(4), [r], [job(1, nodes_min=2, nodes_max=4, time_limit=60)], now=NOW)
    plan = schedule(snap, BF)
    assert plan.starts == () and plan.expected_start[1] == NOW + 600
    assert len(plan.sched_nodes[1].split(",")) == 2


def _reserved_scenario(limit: int, **shape):
    """n0 busy for 10 minutes, n4 half busy for 100: a 4-node job of whole nodes waits for
    n0 (reserved at now + 600 on n0-n3); a lower-priority range job of 1-4 half nodes
    running ``limit`` minutes."""
    ns = nodes(5)
    r0 = running(100, [("n0000", 16, 16, ())], end=NOW + 600)
    r4 = running(101, [("n0004", 8, 8, ())], end=NOW + 6000)
    big = job(1, priority=9, nodes_min=4, cpus_per_task=16, mem_per_cpu=1, time_limit=60)
    shape = shape or {"cpus_per_task": 8}
    rng = job(2, priority=5, nodes_min=1, nodes_max=4, mem_per_cpu=1, time_limit=limit, **shape)
    return busy_snapshot(ns, [r0, r4], [big, rng], now=NOW)


def test_backfill_grows_a_range_only_onto_nodes_no_reservation_plans_on():
    plan = schedule(_reserved_scenario(60), BF)
    reserved = set(plan.sched_nodes[1].split(","))
    assert reserved == {"n0000", "n0001", "n0002", "n0003"}
    (st,) = plan.starts
    assert st.job_id == 2 and names(st.allocation) == ["n0004"]
    assert plan.expected_start[1] == NOW + 600
    # ending before the reservation starts, it may take any free node, up to its maximum
    plan = schedule(_reserved_scenario(5), BF)
    (st,) = plan.starts
    assert names(st.allocation) == ["n0001", "n0002", "n0003", "n0004"]
    assert plan.expected_start[1] == NOW + 600


def test_backfill_grows_a_range_with_ntasks_only_onto_nodes_no_reservation_plans_on():
    # two tasks of 4 CPUs: n4 holds both (its minimum); a second node is a reserved one
    plan = schedule(_reserved_scenario(60, ntasks=2, cpus_per_task=4), BF)
    (st,) = plan.starts
    assert names(st.allocation) == ["n0004"] and st.allocation.nodes[0].tasks == 2
    assert plan.expected_start[1] == NOW + 600
    plan = schedule(_reserved_scenario(5, ntasks=2, cpus_per_task=4), BF)
    (st,) = plan.starts
    assert len(st.allocation.nodes) == 2 and [n.tasks for n in st.allocation.nodes] == [1, 1]


def test_under_a_topology_a_range_grows_on_the_fewest_leaves():
    """Leaves s1 = n1, n3 and s2 = n2, n4, n1 half busy: a 1-2 node range of half nodes
    takes two nodes of one leaf; with --switches it keeps its minimum (module doc)."""
    ns = [node(f"n{i}", i, cpus=16, mem=1000) for i in range(1, 5)]
    sw = (SwitchView("s1", nodes=("n1", "n3")), SwitchView("s2", nodes=("n2", "n4")),
          SwitchView("top", switches=("s1", "s2")))
    r = running(100, [("n1", 8, 8, ())], end=NOW + 3600)
    j = job(1, nodes_min=1, nodes_max=2, cpus_per_task=8, mem_per_cpu=1, time_limit=60)
    (st,) = schedule(busy_snapshot(ns, [r], [j], now=NOW, switches=sw), BF).starts
    assert names(st.allocation) in (["n1", "n3"], ["n2", "n4"])
    capped = replace(j, switches=1, switch_wait=600, submit_time=NOW)
    (st,) = schedule(busy_snapshot(ns, [r], [capped], now=NOW, switches=sw), BF).starts
    assert len(st.allocation.nodes) == 1


def test_a_range_grows_only_as_far_as_its_qos_allows():
    q = QosView(name="normal", max_tres_per_job={"node": 2})
    j = job(1, nodes_min=1, nodes_max=4, mem_per_cpu=1, qos="normal", time_limit=10)
    snap = replace(snapshot(nodes(4), [j]), qos=(q,))
    for cfg in (SchedConfig(enforce=frozenset({"limits"})),
                replace(BF, enforce=frozenset({"limits"}))):
        (st,) = schedule(snap, cfg).starts
        assert len(st.allocation.nodes) == 2


def test_a_step_with_a_range_uses_as_many_allocation_nodes_as_it_may():
    alloc = [AllocNode(f"n{i}", 4, ()) for i in range(3)]
    lay = layout(alloc, {}, {}, StepRequest(nodes_min=1, nodes_max=3))
    assert lay.tasks_per_node == [1, 1, 1]
    lay = layout(alloc, {}, {}, StepRequest(nodes_min=2, nodes_max=3, ntasks=4))
    assert lay.tasks_per_node == [2, 1, 1]
    lay = layout(alloc[:2], {}, {}, StepRequest(nodes_min=1, nodes_max=3))
    assert lay.tasks_per_node == [1, 1]
    assert layout(alloc, {}, {}, StepRequest(nodes_min=1, nodes_max=1)).tasks_per_node == [1]


def test_use_min_nodes_takes_as_few_nodes_as_fit():
    """--use-min-nodes (Slurm: "prefer the smaller count"): the range does not grow; more
    than the minimum only where the tasks need more nodes to fit."""
    four = nodes(4)
    a = place(job(1, nodes_min=1, nodes_max=3, mem_per_cpu=1, use_min_nodes=True), four, CFG)
    assert a is not None and len(a.nodes) == 1
    a = place(job(1, nodes_min=2, nodes_max=4, ntasks=4, mem_per_cpu=1, use_min_nodes=True),
              four, CFG)
    assert len(a.nodes) == 2 and sorted(n.tasks for n in a.nodes) == [2, 2]
    small = nodes(4, cpus=2)  # 5 one-CPU tasks need three 2-CPU nodes: three, not four
    a = place(job(1, nodes_min=1, nodes_max=4, ntasks=5, mem_per_cpu=1, use_min_nodes=True),
              small, CFG)
    assert len(a.nodes) == 3 and sum(n.tasks for n in a.nodes) == 5
