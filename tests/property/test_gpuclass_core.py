"""The GPU node-class scheduler makes the same decisions as the core's ``schedule()``.

A random history on several identical GPU nodes (1–8 GPUs, CPUs fewer than, equal to or
many times the GPUs; FIFO or EASY) — submissions (``--gpus=g -n 1``, ``--gpus=g`` on one
node or spread over several, and ``-N k --gpus-per-node=g`` jobs, random limits and
priorities), ends (early, on time, or after the
estimated end, so stale estimates are exercised), passes — is fed to
:class:`muster.core.gpuclass.GpuClassScheduler` as deltas and, at every pass, to
``schedule()`` as a full snapshot the test builds itself. The starts (job, allocation with
its nodes, CPUs and GPU indices, Main/Backfill label, in order) and the EASY reservation
(job, expected start, nodes) must be identical. Some passes offer only part of the queue (as
the simulator's pruning does).
"""

from __future__ import annotations

import random

from hypothesis import event, given, settings
from hypothesis import strategies as st

from muster.core import JobView, NodeView, PartitionView, RunningView, SchedConfig, Snapshot
from muster.core.gpuclass import GpuClassScheduler
from muster.core.placement import NodeAlloc, fits_ever
from muster.core.schedule import schedule

from incremental import assert_same_pass, ending, history_config, started


@st.composite
def histories(draw):
    cfg = history_config(draw)
    gpn = draw(st.sampled_from([1, 2, 4, 8]))
    cpn = draw(st.sampled_from([max(1, gpn // 2), gpn, 8 * gpn]))
    return (draw(st.integers(1, 10)), cpn, gpn, draw(st.sampled_from([1, 2])),
            draw(st.sampled_from([None, 30, 120])), cfg,
            draw(st.integers(0, 2**32 - 1)), draw(st.integers(5, 60)))


def _job(rng: random.Random, jid: int, now: int, k: int, gpn: int, ratio: int,
         max_time) -> JobView:
    limit = rng.choice([None, 1, 2, 5, 10, 30, 60, 200])
    if max_time is not None and limit is not None and limit > max_time:
        limit = max_time
    common = dict(job_id=jid, priority=rng.choice([1, 1, 1, 5]), submit_time=now,
                  partitions=("p",), time_limit=limit, mem_per_cpu=ratio,
                  nice=rng.choice([0, 0, 0, 100]))
    r = rng.random()
    if r < 0.5:  # one node: --gpus=g -n 1
        return JobView(ntasks=1, gpus_total=rng.randint(1, gpn), **common)
    if r < 0.65 and k > 1:  # --gpus=g, more than a node has: spread, a task on each node
        return JobView(gpus_total=rng.choice([gpn + 1, max(gpn + 1, 2 * gpn - 1), k * gpn]),
                       **common)
    nodes = rng.choice([1, 2, max(1, k // 2), k])
    return JobView(nodes_min=nodes, gpus_per_node=rng.choice([1, gpn // 2 or 1, gpn]),
                   **common)


def _nodes(k: int, cpn: int, gpn: int, ratio: int, free: list[tuple[int, set[int]]]
           ) -> tuple[NodeView, ...]:
    return tuple(NodeView(name=f"n{i}", index=i, partitions=frozenset({"p"}), cpus=cpn,
                          cpus_free=free[i][0], mem=cpn * ratio, mem_free=free[i][0] * ratio,
                          gpus=gpn, gpus_free=tuple(sorted(free[i][1])))
                 for i in range(k))


@settings(max_examples=1500, deadline=None)
@given(histories())
def test_gpuclass_equals_schedule(h):
    check_history(*h)


def check_history(k, cpn, gpn, ratio, max_time, cfg, seed, steps):
    rng = random.Random(seed)
    free = [(cpn, set(range(gpn))) for _ in range(k)]
    empty = _nodes(k, cpn, gpn, ratio, list(free))
    part = PartitionView(name="p", node_names=tuple(f"n{i}" for i in range(k)),
                         max_time=max_time)
    core = GpuClassScheduler(_nodes(k, cpn, gpn, ratio, free), part, cfg)
    pending: dict[int, JobView] = {}
    running: dict[int, tuple[RunningView, int]] = {}  # job → (view, when it really ends)
    now, jid = 0, 0
    reserved_seen = multi = backfilled = spread = 0
    for _ in range(steps):
        now += rng.choice([1, 30, 60, 60, 120, 600, 3600])
        for j, view in ending(rng, running, now):
            for a in view.nodes:
                i = int(a.node[1:])
                free[i] = (free[i][0] + a.cpus, free[i][1] | set(a.gpus))
            core.ended(j)
        for _ in range(rng.choice([0, 1, 1, 2, 4])):
            jid += 1
            job = _job(rng, jid, now, k, gpn, ratio, max_time)
            why = core.admit(job)
            assert why is None or "more nodes" in why or "more GPUs" in why, why
            # the simulator screens an admitted job without placement: it fits empty nodes
            assert (fits_ever(job, empty, cfg, already_empty=True) is None) == (why is None)
            if why is None:
                pending[jid] = job
        offered = tuple(pending.values())
        if offered and rng.random() < 0.2:  # a pruned queue, as the simulator may offer
            offered = tuple(j for j in offered if rng.random() < 0.7)
        snap = Snapshot(now=now, nodes=_nodes(k, cpn, gpn, ratio, free), partitions=(part,),
                        pending=offered, running=tuple(v for v, _ in running.values()))
        want = schedule(snap, cfg)
        got = core.schedule(now, offered)
        reserved_seen += assert_same_pass(got, want, core.reservation, now, snap)
        for s in got:
            running[s.job_id] = started(rng, s, pending.pop(s.job_id), now)
            for a in s.allocation.nodes:
                i = int(a.node[1:])
                assert a.cpus == 1 and set(a.gpus) <= free[i][1]
                free[i] = (free[i][0] - a.cpus, free[i][1] - set(a.gpus))
            multi += len(s.allocation.nodes) > 1
            spread += job.gpus_total is not None and job.ntasks == 0
            backfilled += s.scheduler == "Backfill"
        assert [(c, m.bit_count()) for c, m in zip(core.fc, core.mask)] == \
            [(c, len(g)) for c, g in free]
    event(f"reservations: {'some' if reserved_seen else 'none'}")
    event(f"starts over several nodes: {'some' if multi else 'none'}")
    event(f"backfill starts: {'some' if backfilled else 'none'}")
    event(f"--gpus spread over nodes started: {'some' if spread else 'none'}")


def test_a_job_backfilled_past_the_reservation_keeps_the_cpu_it_takes_there():
    """A worked case where CPUs bind (4 GPUs, 2 CPUs a node). Job 9 holds n1's 4 GPUs until
    600; job 1 (-N 2, 1 GPU a node) waits and reserves n0 (free now) and n1 at 600. Job 2
    (1 GPU, 30 min: past 600) is backfilled on n0's GPU 1: a GPU the reservation leaves and
    the CPU it leaves. Job 3, the same, finds no CPU on n0 for after 600 (job 2's and the
    reservation's) and waits, although n0 has a CPU and two GPUs free now. The same as
    ``schedule()``."""
    part = PartitionView(name="p", node_names=("n0", "n1"))
    cfg = SchedConfig(backfill=True, bf_depth=1, bf_max_job_test=0, bf_window=20 * 365 * 1440)
    free = [(2, {0, 1, 2, 3}), (1, set())]
    core = GpuClassScheduler(_nodes(2, 2, 4, 1, [(2, {0, 1, 2, 3})] * 2), part, cfg)
    core.add_running(9, 600, [(1, 0b1111)])

    def job(jid, **kw):
        return JobView(job_id=jid, submit_time=jid, partitions=("p",), time_limit=30,
                       mem_per_cpu=1, **kw)

    queue = [job(1, nodes_min=2, gpus_per_node=1), job(2, ntasks=1, gpus_total=1),
             job(3, ntasks=1, gpus_total=1)]
    got = core.schedule(0, queue)
    assert [(s.job_id, s.scheduler, s.allocation.nodes[0].node, s.allocation.nodes[0].gpus)
            for s in got] == [(2, "Backfill", "n0", (1,))]
    assert core.reservation == (1, 600, ("n0", "n1"))
    want = schedule(Snapshot(now=0, nodes=_nodes(2, 2, 4, 1, free), partitions=(part,),
                             pending=tuple(queue), running=(RunningView(
                                 job_id=9, partition="p", nodes=(NodeAlloc(
                                     node="n1", cpus=1, mem=1, gpus=(0, 1, 2, 3), tasks=1),),
                                 start_time=0, end_time=600),)), cfg)
    assert [(s.job_id, s.allocation, s.scheduler) for s in want.starts] == \
        [(s.job_id, s.allocation, s.scheduler) for s in got]
    assert want.sched_nodes == {1: "n0,n1"} and want.expected_start[1] == 600


def test_scope_is_explained():
    nodes = _nodes(2, 8, 4, 1, [(8, {0, 1, 2, 3})] * 2)
    part = PartitionView(name="p", node_names=("n0", "n1"))
    easy = SchedConfig(backfill=True, bf_depth=1, bf_max_job_test=0)
    assert GpuClassScheduler.unsupported(nodes, [part], easy) is None
    assert "GPUs" in GpuClassScheduler.unsupported(_nodes(2, 8, 0, 1, [(8, set())] * 2),
                                                   [part], easy)
    assert "EASY" in GpuClassScheduler.unsupported(
        nodes, [part], SchedConfig(backfill=True, bf_depth=None, bf_max_job_test=0))
    core = GpuClassScheduler(nodes, part, easy)
    assert core.admit(JobView(job_id=1, partitions=("p",), ntasks=1, gpus_total=4,
                              mem_per_cpu=1)) is None
    assert core.admit(JobView(job_id=2, partitions=("p",), nodes_min=2, gpus_per_node=4,
                              mem_per_cpu=1)) is None
    assert "shape" in core.admit(JobView(job_id=3, partitions=("p",), ntasks=1, gpus_total=5,
                                         mem_per_cpu=1))
    assert core.admit(JobView(job_id=8, partitions=("p",), gpus_total=5, mem_per_cpu=1)) is None
    assert "shape" in core.admit(JobView(job_id=10, partitions=("p",), gpus_total=3,
                                         mem_per_cpu=1))  # spread only where no node fits
    assert "more GPUs" in core.admit(JobView(job_id=9, partitions=("p",), gpus_total=9,
                                             mem_per_cpu=1))
    assert "shape" in core.admit(JobView(job_id=4, partitions=("p",), ntasks=4, gpus_total=4,
                                         mem_per_cpu=1))
    assert "shape" in core.admit(JobView(job_id=5, partitions=("p",), ntasks=1, mem_per_cpu=1))
    assert "more nodes" in core.admit(JobView(job_id=6, partitions=("p",), nodes_min=3,
                                              gpus_per_node=1, mem_per_cpu=1))
    assert "limit" in core.admit(JobView(job_id=7, partitions=("p",), ntasks=1, gpus_total=1,
                                         time_limit=0, mem_per_cpu=1))


def test_a_spread_fills_the_node_with_fewer_free_cpus_first_among_equals():
    """``--gpus=7`` on two 6-GPU nodes with 4 GPUs free each: n0 runs one job (1 CPU taken),
    n1 two (2 CPUs taken). Both are needed; each gets a GPU, then the rest goes, among
    nodes of equal free GPUs, to the best fit first: n1 gets all 4 of its free GPUs, n0 the
    remaining 3 (its lowest free ones). The same as ``schedule()``."""
    part = PartitionView(name="p", node_names=("n0", "n1"))
    for cfg in (SchedConfig(), SchedConfig(backfill=True, bf_depth=1, bf_max_job_test=0)):
        free = [(7, {2, 3, 4, 5}), (6, {2, 3, 4, 5})]
        core = GpuClassScheduler(_nodes(2, 8, 6, 1, [(8, set(range(6)))] * 2), part, cfg)
        running = [(90, 0, (0, 1)), (91, 1, (0,)), (92, 1, (1,))]
        for jid, p, gpus in running:
            core.add_running(jid, 3600, [(p, sum(1 << i for i in gpus))])
        queue = [JobView(job_id=1, submit_time=1, partitions=("p",), time_limit=30,
                         mem_per_cpu=1, gpus_total=7)]
        got = core.schedule(0, queue)
        assert [(a.node, a.gpus) for s in got for a in s.allocation.nodes] == \
            [("n0", (2, 3, 4)), ("n1", (2, 3, 4, 5))]
        want = schedule(Snapshot(now=0, nodes=_nodes(2, 8, 6, 1, free), partitions=(part,),
                                 pending=tuple(queue), running=tuple(RunningView(
                                     job_id=jid, partition="p", nodes=(NodeAlloc(
                                         node=f"n{p}", cpus=1, mem=1, gpus=gpus, tasks=1),),
                                     start_time=0, end_time=3600)
                                     for jid, p, gpus in running)), cfg)
        assert [(s.job_id, s.allocation, s.scheduler) for s in want.starts] == \
            [(s.job_id, s.allocation, s.scheduler) for s in got]
