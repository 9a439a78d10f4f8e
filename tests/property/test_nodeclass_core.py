"""The node-class scheduler makes the same decisions as the core's ``schedule()``.

A random history on several identical CPU nodes (1–8 CPUs each; FIFO or EASY) —
submissions (``-n`` jobs from one CPU to wider than a node, random limits and
priorities), ends (early, on time, or after the estimated end, so stale estimates are
exercised), passes — is fed to
:class:`muster.core.nodeclass.NodeClassScheduler` as deltas and, at every pass, to
``schedule()`` as a full snapshot the test builds itself. The starts (job, allocation with
its nodes and CPUs, Main/Backfill label, in order) and the EASY reservation (job, expected
start, nodes) must be identical. Some passes offer only part of the queue (as the
simulator's pruning does): the property holds for whatever queue a pass is given.
"""

from __future__ import annotations

import random

from hypothesis import event, given, settings
from hypothesis import strategies as st

from muster.core import JobView, NodeView, PartitionView, RunningView, SchedConfig, Snapshot
from muster.core.nodeclass import NodeClassScheduler
from muster.core.placement import NodeAlloc, fits_ever
from muster.core.schedule import schedule

from incremental import assert_same_pass, ending, history_config, started


@st.composite
def histories(draw):
    cfg = history_config(draw)
    return (draw(st.integers(1, 12)), draw(st.integers(1, 8)),
            draw(st.sampled_from([1, 2])), draw(st.sampled_from([None, 30, 120])), cfg,
            draw(st.integers(0, 2**32 - 1)), draw(st.integers(5, 50)))


def _job(rng: random.Random, jid: int, now: int, total: int, cpn: int, ratio: int,
         max_time) -> JobView:
    limit = rng.choice([None, 0, 1, 2, 5, 10, 30, 60, 200])
    if max_time is not None and limit is not None and limit > max_time:
        limit = max_time
    size = rng.choice([1, 1, 2, 3, cpn, cpn + 1, max(1, total // 3), max(1, total // 2), total])
    return JobView(job_id=jid, priority=rng.choice([1, 1, 1, 5]), submit_time=now,
                   partitions=("p",), time_limit=limit, mem_per_cpu=ratio, ntasks=size,
                   nice=rng.choice([0, 0, 0, 100]))


def _nodes(k: int, cpn: int, ratio: int, free: list[int]) -> tuple[NodeView, ...]:
    return tuple(NodeView(name=f"n{i}", index=i, partitions=frozenset({"p"}), cpus=cpn,
                          cpus_free=free[i], mem=cpn * ratio, mem_free=free[i] * ratio)
                 for i in range(k))


@settings(max_examples=1500, deadline=None)
@given(histories())
def test_nodeclass_equals_schedule(h):
    check_history(*h)


@settings(max_examples=500, deadline=None)
@given(histories(), st.integers(2, 40))
def test_nodeclass_equals_schedule_on_one_cpu_nodes(h, k):
    """One CPU a node (KTH's and CTC's real machines) takes shortcuts of its own in the
    node-class core (the n lowest free nodes, a reservation of whole nodes): up to 40 nodes,
    so wide jobs and long walks to the reservation occur."""
    check_history(k, 1, *h[2:])


def check_history(k, cpn, ratio, max_time, cfg, seed, steps):
    rng = random.Random(seed)
    free = [cpn] * k
    empty = _nodes(k, cpn, ratio, list(free))
    part = PartitionView(name="p", node_names=tuple(f"n{i}" for i in range(k)),
                         max_time=max_time)
    core = NodeClassScheduler(_nodes(k, cpn, ratio, free), part, cfg)
    pending: dict[int, JobView] = {}
    running: dict[int, tuple[RunningView, int]] = {}  # job → (view, when it really ends)
    now, jid = 0, 0
    starts_seen = reserved_seen = spread = backfilled = kept = 0
    for _ in range(steps):
        now += rng.choice([1, 30, 60, 60, 120, 600, 3600])
        for j, view in ending(rng, running, now):
            for a in view.nodes:
                free[int(a.node[1:])] += a.cpus
            core.ended(j)
        for _ in range(rng.choice([0, 1, 1, 2, 4])):
            jid += 1
            job = _job(rng, jid, now, k * cpn, cpn, ratio, max_time)
            if core.admit(job) is None:
                # the simulator screens an admitted job without placement: it fits empty nodes
                assert fits_ever(job, empty, cfg, already_empty=True) is None
                pending[jid] = job
        offered = tuple(pending.values())
        if offered and rng.random() < 0.2:  # a pruned queue, as the simulator may offer
            offered = tuple(j for j in offered if rng.random() < 0.7)
        snap = Snapshot(now=now, nodes=_nodes(k, cpn, ratio, free), partitions=(part,),
                        pending=offered, running=tuple(v for v, _ in running.values()))
        want = schedule(snap, cfg)
        before = core._kept
        got = core.schedule(now, offered)
        kept += before is not None and core._res is before[3]  # reused: nothing changed
        reserved_seen += assert_same_pass(got, want, core.reservation, now, snap)
        for s in got:
            running[s.job_id] = started(rng, s, pending.pop(s.job_id), now)
            for a in s.allocation.nodes:
                free[int(a.node[1:])] -= a.cpus
            starts_seen += 1
            spread += len(s.allocation.nodes) > 1
            backfilled += s.scheduler == "Backfill"
        assert core.free == free
    event(f"reservations: {'some' if reserved_seen else 'none'}")
    event(f"starts over several nodes: {'some' if spread else 'none'}")
    event(f"backfill starts: {'some' if backfilled else 'none'}")
    event(f"a reservation kept from the last pass: {'some' if kept else 'none'}")


def test_reservation_and_backfill_on_nodes():
    """A worked case: 4 one-CPU nodes. Job 1 (3 CPUs, 10 min) takes n0-n2; job 2 (2 CPUs)
    waits and reserves n0 and n1 at 600 (all four are free then: most free first, lowest
    index); job 3 (1 CPU, 20 min, past 600) is backfilled on n3, which the reservation does
    not need; job 4 (1 CPU, ends before 600) finds no CPU left. The same as ``schedule()``."""
    nodes = _nodes(4, 1, 1, [1, 1, 1, 1])
    part = PartitionView(name="p", node_names=("n0", "n1", "n2", "n3"))
    cfg = SchedConfig(backfill=True, bf_depth=1, bf_max_job_test=0, bf_window=20 * 365 * 1440)
    core = NodeClassScheduler(nodes, part, cfg)

    def job(jid, n, limit):
        return JobView(job_id=jid, submit_time=jid, partitions=("p",), ntasks=n,
                       time_limit=limit, mem_per_cpu=1)

    first = core.schedule(0, [job(1, 3, 10)])
    assert first[0].allocation.node_names == ("n0", "n1", "n2")
    queue = [job(2, 2, 10), job(3, 1, 20), job(4, 1, 5)]
    got = core.schedule(5, queue)
    assert [(s.job_id, s.scheduler, s.allocation.node_names) for s in got] == \
        [(3, "Backfill", ("n3",))]
    assert core.reservation == (2, 600, ("n0", "n1"))
    assert core.free == [0, 0, 0, 0]
    want = schedule(Snapshot(now=5, nodes=_nodes(4, 1, 1, [0, 0, 0, 1]), partitions=(part,),
                             pending=tuple(queue), running=(RunningView(
                                 job_id=1, partition="p", nodes=first[0].allocation.nodes,
                                 start_time=0, end_time=600),)), cfg)
    assert [s.allocation for s in want.starts] == [s.allocation for s in got]
    assert want.sched_nodes == {2: "n0,n1"}


def test_easy_on_multi_cpu_nodes_takes_the_best_fit_node():
    """The case that kept EASY to one-CPU nodes (tests/unit/test_core_backfill.py has it for
    ``schedule()``): two 4-CPU nodes, n0 with 3 free; jobs of 1, 3 and 1 CPUs go to n0, n1
    and then n1 (1 free beats n0's 2), while job 0 (8 CPUs) waits and holds the reservation.
    The node-class scheduler and ``schedule()`` agree, node by node."""
    part = PartitionView(name="p", node_names=("n0", "n1"))
    cfg = SchedConfig(backfill=True, bf_depth=1, bf_max_job_test=0, bf_window=20 * 365 * 1440)
    core = NodeClassScheduler(_nodes(2, 4, 1, [4, 4]), part, cfg)
    core.add_running(99, 3600, [(0, 1)])  # n0: 3 free

    def job(jid, n):
        return JobView(job_id=jid, submit_time=jid, partitions=("p",), ntasks=n,
                       time_limit=10, mem_per_cpu=1)

    queue = [job(0, 8), job(1, 1), job(2, 3), job(3, 1)]
    got = core.schedule(0, queue)
    assert [(s.job_id, s.allocation.node_names) for s in got] == \
        [(1, ("n0",)), (2, ("n1",)), (3, ("n1",))]
    want = schedule(Snapshot(now=0, nodes=_nodes(2, 4, 1, [3, 4]), partitions=(part,),
                             pending=tuple(queue),
                             running=(RunningView(job_id=99, partition="p", nodes=(NodeAlloc(
                                 node="n0", cpus=1, mem=1, gpus=(), tasks=1),), start_time=0,
                                 end_time=3600),)), cfg)
    assert [(s.job_id, s.allocation, s.scheduler) for s in want.starts] == \
        [(s.job_id, s.allocation, s.scheduler) for s in got]
    assert core.reservation == (0, 3600, ("n0", "n1"))
    assert want.sched_nodes == {0: "n0,n1"}


def test_scope_is_explained():
    nodes = _nodes(2, 4, 1, [4, 4])
    part = PartitionView(name="p", node_names=("n0", "n1"))
    easy = SchedConfig(backfill=True, bf_depth=1, bf_max_job_test=0)
    assert NodeClassScheduler.unsupported(nodes, [part], easy) is None  # EASY on 4-CPU nodes
    assert NodeClassScheduler.unsupported(_nodes(2, 1, 1, [1, 1]), [part], easy) is None
    easy = SchedConfig()  # the main scheduler: any CPU count
    assert "EASY" in NodeClassScheduler.unsupported(
        nodes, [part], SchedConfig(backfill=True, bf_depth=None, bf_max_job_test=0))
    gpu = (NodeView(name="n0", index=0, partitions=frozenset({"p"}), cpus=4, cpus_free=4,
                    mem=4, mem_free=4, gpus=2, gpus_free=(0, 1)),)
    assert "GPUs" in NodeClassScheduler.unsupported(gpu, [PartitionView(
        name="p", node_names=("n0",))], easy)
    core = NodeClassScheduler(nodes, part, easy)
    assert core.admit(JobView(job_id=1, partitions=("p",), ntasks=6, mem_per_cpu=1)) is None
    assert "shape" in core.admit(JobView(job_id=2, partitions=("p",), nodes_min=2,
                                         mem_per_cpu=1))
    assert "more CPUs" in core.admit(JobView(job_id=3, partitions=("p",), ntasks=9,
                                             mem_per_cpu=1))
    assert "limit" in core.admit(JobView(job_id=4, partitions=("p",), ntasks=1, time_limit=0,
                                         mem_per_cpu=1))
