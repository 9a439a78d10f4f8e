"""Backfill over the timeline: the seed scenario, EASY vs conservative, --time-min,
windows, advance reservations, topology and limits in the same pass."""

from __future__ import annotations

from dataclasses import replace

from core_builders import busy_snapshot, job, node, running

from muster.core import SchedConfig, schedule
from muster.core.snapshot import QosView, ReservationView, SwitchView

BF = SchedConfig(backfill=True, bf_depth=None)
NOW = 1000


def gpu_nodes(n=2):
    return [node(f"n{i}", i, cpus=64, mem=512000, gpus=8) for i in range(1, n + 1)]


def seed():
    """n1 busy until now+1h; training needs both nodes for 10 h."""
    r = running(100, [("n1", 8, 1000, range(8))], start=0, end=NOW + 3600)
    train = job(1, priority=100, nodes_min=2, gpus_per_node=8, mem_per_node=1000, time_limit=600)
    short = job(2, priority=50, gpus_total=1, mem_per_node=1000, time_limit=30)
    long = job(3, priority=40, gpus_total=1, mem_per_node=1000, time_limit=120)
    return busy_snapshot(gpu_nodes(), [r], [train, short, long], now=NOW)


def test_seed_scenario_short_eval_backfills_long_one_waits():
    plan = schedule(seed(), BF)
    assert [(s.job_id, s.scheduler) for s in plan.starts] == [(2, "Backfill")]
    assert plan.starts[0].allocation.nodes[0].node == "n2"
    assert plan.reasons == {1: "Resources", 3: "Priority"}
    assert plan.expected_start[1] == NOW + 3600
    assert plan.sched_nodes[1] == "n1,n2"
    # the long eval job is planned after the training job
    assert plan.expected_start[3] >= NOW + 3600 + 600 * 60


def test_seed_scenario_training_starts_when_running_job_ends_at_limit():
    snap = seed()
    plan = schedule(snap, BF)
    short = plan.starts[0]
    # run forward: the running job and the short eval end exactly at their limits
    later = NOW + 3600
    snap2 = replace(
        busy_snapshot(gpu_nodes(), [], [j for j in snap.pending if j.job_id in (1, 3)], now=later))
    plan2 = schedule(snap2, BF)
    assert short.job_id == 2 and later >= NOW + 30 * 60
    assert [s.job_id for s in plan2.starts] == [1]
    assert plan2.starts[0].scheduler == "Main"


def test_easy_reserves_only_the_first_waiting_job():
    r = running(100, [("n1", 64, 512000, range(8)), ("n2", 64, 512000, range(8))], end=NOW + 600)
    jobs = [job(1, priority=9, nodes_min=2, gpus_per_node=8, time_limit=60),
            job(2, priority=8, nodes_min=1, gpus_per_node=8, time_limit=60),
            job(3, priority=7, nodes_min=1, gpus_per_node=8, time_limit=60)]
    snap = busy_snapshot(gpu_nodes(), [r], jobs, now=NOW)
    easy = schedule(snap, replace(BF, bf_depth=1))
    cons = schedule(snap, BF)
    assert set(easy.sched_nodes) == {1}
    assert set(cons.sched_nodes) == {1, 2, 3}
    assert cons.expected_start == {1: NOW + 600, 2: NOW + 600 + 3600, 3: NOW + 600 + 3600}


def test_partial_node_reservation_leaves_the_rest_backfillable():
    # the blocked job needs 4 GPUs on n1 (busy now); the other 4 can be backfilled
    r = running(100, [("n1", 32, 1000, range(4, 8))], end=NOW + 3600)
    big = job(1, priority=9, gpus_per_node=8, mem_per_node=1000, time_limit=60,
              req_nodes={"n1"}, partitions=("p",))
    other = job(2, priority=1, gpus_per_node=2, mem_per_node=1000, time_limit=600,
                req_nodes={"n1"})
    snap = busy_snapshot(gpu_nodes(1), [r], [big, other], now=NOW)
    plan = schedule(snap, BF)
    # the 2-GPU job for 10 h would take GPUs 0-1, which the big job needs at now+1h
    assert plan.starts == ()
    small = job(3, priority=1, gpus_per_node=2, mem_per_node=1000, time_limit=30)
    plan = schedule(replace(snap, pending=(big, small)), BF)
    assert [s.job_id for s in plan.starts] == [3]


def test_time_min_plans_with_the_minimum_and_raises_the_limit():
    r = running(100, [("n1", 8, 1000, range(8))], end=NOW + 3600)
    train = job(1, priority=100, nodes_min=2, gpus_per_node=8, mem_per_node=1000, time_limit=600)
    flex = job(2, priority=5, gpus_total=1, mem_per_node=1000, time_limit=600, time_min=30)
    plan = schedule(busy_snapshot(gpu_nodes(), [r], [train, flex], now=NOW), BF)
    (s,) = plan.starts
    assert s.job_id == 2 and s.time_limit == 60  # the free gap before the reservation


def test_beyond_window_no_reservation():
    r = running(100, [("n1", 8, 1000, range(8))], end=NOW + 3 * 86400)
    j = job(1, gpus_per_node=8, mem_per_node=1000, time_limit=60, req_nodes={"n1"})
    plan = schedule(busy_snapshot(gpu_nodes(1), [r], [j], now=NOW), BF)
    assert plan.expected_start == {} and plan.reasons == {1: "Resources"}


def test_past_limit_running_job_ends_after_kill_wait():
    r = running(100, [("n1", 8, 1000, range(8))], end=NOW - 5)
    j = job(1, gpus_per_node=8, mem_per_node=1000, time_limit=60)
    plan = schedule(busy_snapshot(gpu_nodes(1), [r], [j], now=NOW), BF)
    assert plan.expected_start == {1: NOW + 30}


def test_no_reserve_qos_gets_no_reservation():
    r = running(100, [("n1", 8, 1000, range(8))], end=NOW + 600)
    j = job(1, gpus_per_node=8, mem_per_node=1000, time_limit=60, qos="scav")
    snap = busy_snapshot(gpu_nodes(1), [r], [j], now=NOW,
                         qos=(QosView(name="scav", flags=frozenset({"NoReserve"})),))
    plan = schedule(snap, replace(BF, enforce=frozenset({"limits"})))
    assert plan.sched_nodes == {} and plan.expected_start == {1: NOW + 600}


def test_advance_reservation_is_a_barrier_and_admits_members():
    ns = gpu_nodes(1)
    resv = ReservationView(name="maint", nodes=frozenset({"n1"}), start=NOW + 3600,
                           end=NOW + 7200, users=frozenset({"alice"}))
    long = job(1, gpus_total=1, mem_per_node=1000, time_limit=120)
    short = job(2, gpus_total=1, mem_per_node=1000, time_limit=30)
    member = job(3, gpus_total=1, mem_per_node=1000, time_limit=30, reservation="maint",
                 user="alice")
    snap = busy_snapshot(ns, [], [long, short, member], now=NOW, reservations=(resv,))
    plan = schedule(snap, BF)
    assert [s.job_id for s in plan.starts] == [2]
    assert plan.expected_start[1] == NOW + 7200
    assert plan.reasons[3] == "Resources" and plan.expected_start[3] == NOW + 3600
    # without backfill the barrier still holds, with main semantics: the first job
    # that cannot start blocks the partition
    plan = schedule(snap, SchedConfig())
    assert plan.starts == () and plan.reasons[1] == "Resources" and plan.reasons[2] == "Priority"


def test_topology_prefers_one_leaf_and_switches_wait():
    ns = gpu_nodes(4)
    sw = (SwitchView("s1", nodes=("n1", "n3")), SwitchView("s2", nodes=("n2", "n4")),
          SwitchView("top", switches=("s1", "s2")))
    j = job(1, nodes_min=2, gpus_per_node=8, mem_per_node=1000, time_limit=60)
    plan = schedule(busy_snapshot(ns, [], [j], now=NOW, switches=sw), BF)
    assert set(plan.starts[0].allocation.node_names) in ({"n1", "n3"}, {"n2", "n4"})
    # n3 and n4 busy for 1 h: two leaves now, one leaf only later
    r = running(100, [("n3", 8, 1000, range(8)), ("n4", 8, 1000, range(8))], end=NOW + 3600)
    j2 = replace(j, switches=1, switch_wait=7200, submit_time=NOW)
    plan = schedule(busy_snapshot(ns, [r], [j2], now=NOW, switches=sw), BF)
    assert plan.starts == () and plan.expected_start[1] == NOW + 3600
    j3 = replace(j2, switch_wait=60, submit_time=0)
    plan = schedule(busy_snapshot(ns, [r], [j3], now=NOW, switches=sw), BF)
    assert set(plan.starts[0].allocation.node_names) == {"n1", "n2"}


def test_limits_hold_without_blocking_the_partition():
    q = QosView(name="normal", max_tres_per_user={"gres/gpu": 2})
    r = running(100, [("n1", 1, 1000, (0, 1))], end=NOW + 600, user="bob", qos="normal")
    over = job(1, priority=9, gpus_total=1, mem_per_node=1000, time_limit=60, user="bob",
               qos="normal")
    other = job(2, priority=1, gpus_total=1, mem_per_node=1000, time_limit=60, user="eve",
                qos="normal")
    snap = busy_snapshot(gpu_nodes(1), [r], [over, other], now=NOW, qos=(q,))
    for cfg in (SchedConfig(enforce=frozenset({"limits"})), replace(BF, enforce=frozenset({"limits"}))):
        plan = schedule(snap, cfg)
        assert [s.job_id for s in plan.starts] == [2]
        assert plan.reasons == {1: "QOSMaxGRESPerUser"}
        assert plan.starts[0].scheduler == "Main"


def test_a_rounded_reservation_never_overlaps_an_earlier_one():
    """Found by the oversubscription property test: with bf_resolution 300 a one-minute job
    fit [10060, 10120) before a reservation at 10120, but its reservation is held for the
    rounded window [10060, 10360) and took n0's whole memory twice. A reservation must fit
    for the window it holds."""
    now = 10000
    ns = [node("n0", 0, cpus=2, mem=1000), node("n1", 1, cpus=2, mem=1000)]
    r = running(1001, [("n1", 1, 1, ())], start=9900, end=now + 120)
    jobs = [job(1, priority=99, nodes_min=2, time_limit=1),  # whole memory of both nodes
            job(2, priority=98, time_limit=1),
            job(3, priority=97, time_limit=1),
            job(4, priority=96, time_limit=1)]
    cfg = SchedConfig(backfill=True, bf_depth=None, bf_resolution=300)
    plan = schedule(busy_snapshot(ns, [r], jobs, now=now), cfg)
    assert [s.job_id for s in plan.starts] == [2]          # n0 for [now, now+60)
    assert plan.expected_start[1] == now + 120            # both nodes, held until now+420
    # job 3 fits n0 in [now+60, now+120) but not for the 300 s it would hold: after job 1
    assert plan.expected_start[3] == now + 420
    assert plan.sched_nodes == {1: "n0,n1", 3: "n0", 4: "n1"}


def test_backfill_starts_pick_the_best_fit_node_as_the_main_scheduler_does():
    """Found by the node-class property test: backfill's one-node search kept heap entries
    whose best-fit tie-break (free CPUs) was computed before a node filled up, and such an
    entry could lose to an up-to-date one with more free CPUs. Two 4-CPU nodes, n0 with 3
    free: job 1 (1 CPU) takes n0 (3 < 4 free), job 2 (3 CPUs) takes n1 (n0 has 2 left),
    job 3 (1 CPU) must take n1 (1 free) over n0 (2 free): placement's documented best fit,
    which the main scheduler (placement on the free CPUs now) follows."""
    ns = [node("n0", 0, cpus=4, mem=4000), node("n1", 1, cpus=4, mem=4000)]
    r = running(100, [("n0", 1, 1000, ())], end=NOW + 3600)
    jobs = [job(1, priority=9, ntasks=1, mem_per_cpu=1000, time_limit=60),
            job(2, priority=8, ntasks=3, mem_per_cpu=1000, time_limit=60),
            job(3, priority=7, ntasks=1, mem_per_cpu=1000, time_limit=60)]
    snap = busy_snapshot(ns, [r], jobs, now=NOW)
    want = [(1, ("n0",)), (2, ("n1",)), (3, ("n1",))]
    for cfg in (SchedConfig(), SchedConfig(backfill=True, bf_depth=1)):
        plan = schedule(snap, cfg)
        assert [(s.job_id, s.allocation.node_names) for s in plan.starts] == want, cfg.backfill
