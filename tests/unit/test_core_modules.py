"""Timeline, priority, fair-share, limits, preemption and topology in isolation."""

from __future__ import annotations

import math

from core_builders import busy_snapshot, job, node, running

from muster.core import SchedConfig, schedule
from muster.core.fairshare import billing, classic, decay, fair_tree, sshare
from muster.core.limits import MSG_POLICY, MSG_TIME, LimitChecker, submit_check
from muster.core.priority import context, multifactor
from muster.core.snapshot import AssocView, PartitionView, QosView, SwitchView
from muster.core.timeline import Shape, Timeline
from muster.core.topology import Topology

NOW = 1000


# ---- timeline -----------------------------------------------------------------------

def test_timeline_reserve_window_and_next_fit():
    tl = Timeline.build(NOW, [node("a", 0, cpus=8, mem=100, gpus=4, cpus_used=8, gpus_used=(0, 1, 2, 3))],
                        [("a", NOW + 100, 8, 0, (0, 1, 2, 3))])
    assert tl.window(0, NOW, 50) == (0, 100, 0)
    assert tl.next_fit(0, NOW, 10, 2, 10, 2)[0] == NOW + 100
    tl.reserve(0, NOW + 100, NOW + 200, 4, 50, 0b0011)
    assert tl.window(0, NOW + 150, 10) == (4, 50, 0b1100)
    assert tl.next_fit(0, NOW, 10, 2, 10, 3)[0] == NOW + 200
    # two nodes for 100 s: the sweep finds the time both fit
    assert tl.earliest(("x",), [0], Shape(2, 10, 2), 100, 1, NOW + 10**6) == (NOW + 100, [0])


def test_timeline_gpu_sets_must_be_free_throughout():
    tl = Timeline(NOW, [node("a", 0, cpus=8, gpus=2)])
    tl.reserve(0, NOW, NOW + 10, 1, 0, 0b01)
    tl.reserve(0, NOW + 10, NOW + 20, 1, 0, 0b10)
    assert tl.next_fit(0, NOW, 20, 1, 0, 1)[0] == NOW + 10
    assert tl.next_fit(0, NOW, 5, 1, 0, 1)[0] == NOW


# ---- priority -----------------------------------------------------------------------

def test_multifactor_observed_example_11000():
    cfg = SchedConfig(priority_type="multifactor", weight_fairshare=10000, weight_partition=1000,
                      weight_qos=1000, weight_age=1000)
    j = job(1, submit_time=NOW, user="u", account="a", qos="normal")
    snap = busy_snapshot([node("n1", 1)], [], [j], now=NOW, fairshare={("a", "u"): 1.0},
                         qos=(QosView(name="normal"),))
    p = multifactor(j, "p", NOW, cfg, context(snap))
    assert p.priority == 11000
    assert p.weighted["fairshare"] == 10000 and p.normalized["partition"] == 1.0
    assert schedule(snap, cfg).priorities == {1: 11000}



def test_pass_priorities_equal_multifactor_to_the_bit():
    """priorities() (a pass: valuer, no breakdown) gives exactly multifactor's priority for
    random jobs, partitions, flags, weights (TRES too, a name given twice) and fair-share."""
    import random

    from muster.core.priority import priorities

    rnd = random.Random(17)
    flag_sets = [(), ("NO_NORMAL_ALL",), ("SMALL_RELATIVE_TO_TIME",), ("ACCRUE_ALWAYS",),
                 ("NO_NORMAL_PART", "NO_NORMAL_QOS", "NO_NORMAL_ASSOC", "NO_NORMAL_TRES")]
    ns = [node(f"n{i}", i, cpus=rnd.choice((4, 8, 64)), gpus=rnd.choice((0, 8))) for i in range(6)]
    parts = (PartitionView(name="p", node_names=tuple(n.name for n in ns[:4]),
                           priority_job_factor=3),
             PartitionView(name="q", node_names=tuple(n.name for n in ns[2:]),
                           priority_job_factor=7))
    compared = 0
    for trial in range(60):
        cfg = SchedConfig(
            priority_type="multifactor", priority_flags=frozenset(rnd.choice(flag_sets)),
            priority_favor_small=rnd.random() < 0.3, priority_max_age=rnd.choice((0, 600, 86400)),
            weight_age=rnd.randint(0, 5000), weight_fairshare=rnd.randint(0, 10**5),
            weight_jobsize=rnd.randint(0, 3000), weight_partition=rnd.randint(0, 2000),
            weight_qos=rnd.randint(0, 2000), weight_assoc=rnd.randint(0, 500),
            site_factor=rnd.randint(0, 100),
            weight_tres=tuple(rnd.sample([("cpu", 7), ("node", 11), ("gres/gpu", 13),
                                          ("cpu", 5)], rnd.randint(0, 3))))
        jobs = [job(trial * 100 + i, partitions=tuple(rnd.sample(("p", "q"), rnd.randint(1, 2))),
                    user=rnd.choice(("u", "v")), account=rnd.choice(("a", "b")),
                    qos=rnd.choice(("normal", "high")), nice=rnd.choice((0, 0, 50, -20)),
                    submit_time=NOW - rnd.randint(0, 10**5), nodes_min=rnd.randint(1, 3),
                    ntasks=rnd.randint(0, 9), gpus_per_node=rnd.choice((0, 1, 8)),
                    time_limit=rnd.choice((None, 1, 90)),
                    blocked=rnd.choice((None, None, "JobArrayTaskLimit")),
                    fixed_priority=rnd.random() < 0.1, priority=rnd.randint(1, 10**6),
                    eligible_time=rnd.choice((None, NOW - 5)))
                for i in range(12)]
        snap = busy_snapshot(ns, [], jobs, parts=parts, now=NOW,
                             fairshare={(a, u): rnd.random() for a in "ab" for u in "uv"},
                             qos=(QosView(name="normal", priority=10),
                                  QosView(name="high", priority=rnd.randint(0, 900))),
                             assocs=(AssocView(user="u", account="a", priority=40),
                                     AssocView(user=None, account="b", priority=9)))
        ctx = context(snap)
        want = {(j.job_id, p): multifactor(j, p, NOW, cfg, ctx).priority
                for j in jobs for p in j.partitions}
        assert priorities(snap, cfg) == want, cfg
        compared += len(want)
    assert compared > 800

def test_multifactor_age_size_nice_and_clamp():
    cfg = SchedConfig(priority_type="multifactor", weight_age=1000, weight_jobsize=1000,
                      priority_max_age=1000)
    snap = busy_snapshot([node("n1", 1, cpus=4), node("n2", 2, cpus=4)], [], [], now=NOW)
    ctx = context(snap)
    old = job(1, submit_time=NOW - 500, nodes_min=2)
    assert multifactor(old, "p", NOW, cfg, ctx).normalized["age"] == 0.5
    assert multifactor(old, "p", NOW, cfg, ctx).normalized["jobsize"] == (2 / 2 + 2 / 8) / 2
    small = SchedConfig(priority_type="multifactor", weight_jobsize=1000, priority_favor_small=True)
    assert multifactor(job(2), "p", NOW, small, ctx).priority == int(1000 * ((1 / 2 + 7 / 8) / 2))
    assert multifactor(job(3, nice=10**6), "p", NOW, cfg, ctx).priority == 1
    held = job(4, submit_time=0, blocked="JobHeldUser")
    assert multifactor(held, "p", NOW, cfg, ctx).normalized["age"] == 0.0


# ---- fair-share ---------------------------------------------------------------------

def assoc_tree():
    return [
        AssocView("root"),
        AssocView("a", parent=None, shares=1, raw_usage=0),
        AssocView("b", parent=None, shares=1, raw_usage=0),
        AssocView("a", user="u1", shares=1, raw_usage=100),
        AssocView("a", user="u2", shares=1, raw_usage=300),
        AssocView("b", user="u3", shares=1, raw_usage=100),
    ]


def test_fair_tree_orders_by_levelfs_depth_first():
    f = fair_tree(assoc_tree())
    # b (usage 100) beats a (usage 400); inside a, u1 beats u2
    assert f == {("b", "u3"): 1.0, ("a", "u1"): 2 / 3, ("a", "u2"): 1 / 3}
    rows = {(r.account, r.user): r for r in sshare(assoc_tree())}
    assert rows[("a", "")].level_fs == (1 / 2) / (400 / 500)
    assert rows[("a", "u2")].fairshare == 1 / 3 and rows[("root", "")].raw_usage == 500


def test_classic_factor_half_at_exact_share():
    tree = [AssocView("root"), AssocView("a", shares=1), AssocView("a", user="u", shares=1, raw_usage=50),
            AssocView("b", shares=1), AssocView("b", user="v", shares=1, raw_usage=50)]
    f = classic(tree)
    assert math.isclose(f[("a", "u")], 0.5) and math.isclose(f[("b", "v")], 0.5)


def test_decay_and_billing():
    assert decay(100.0, 3600, 3600) == 50.0 and decay(100.0, 10, 0) == 100.0
    assert billing({"cpu": 4, "gres/gpu": 2}) == 4
    assert billing({"cpu": 4, "gres/gpu": 2}, {"cpu": 1.0, "gres/gpu": 10.0}) == 24
    assert billing({"cpu": 4, "gres/gpu": 2}, {"cpu": 1.0, "gres/gpu": 10.0}, max_tres=True) == 20


# ---- limits -------------------------------------------------------------------------

def test_limit_reasons_qos_and_assoc():
    q = QosView(name="q", max_jobs_per_user=1, grp_tres={"gres/gpu": 4})
    a = [AssocView("acct", grp_tres={"cpu": 3}), AssocView("acct", user="u")]
    r = running(9, [("n1", 2, 10, (0,))], user="u", account="acct", qos="q")
    snap = busy_snapshot([node("n1", 1, gpus=8)], [r], [], now=NOW, qos=(q,), assocs=tuple(a))
    lc = LimitChecker(snap, SchedConfig(enforce=frozenset({"limits"})))
    j = job(1, user="u", account="acct", qos="q")
    assert lc.check(j, "p", {"cpu": 1}) == "QOSMaxJobsPerUserLimit"
    j2 = job(2, user="v", account="acct", qos="q")
    assert lc.check(j2, "p", {"cpu": 1, "gres/gpu": 4}) == "QOSGrpGRES"
    assert lc.check(j2, "p", {"cpu": 2}) == "AssocGrpCpuLimit"
    assert lc.check(j2, "p", {"cpu": 1}) is None
    off = LimitChecker(snap, SchedConfig())
    assert off.check(j, "p", {"cpu": 1}) is None


def test_submit_check_messages():
    part = PartitionView(name="p", max_time=60)
    assert submit_check(job(1, time_limit=61), part, enforce_part_limits="ALL") == MSG_TIME
    assert submit_check(job(1, time_limit=61), part) is None
    q = QosView(name="q", max_submit_jobs_per_user=2)
    assert submit_check(job(1), part, qos=q, user_jobs_in_qos=2, enforce={"limits"}) == MSG_POLICY


# ---- preemption ---------------------------------------------------------------------

def test_qos_preemption_picks_fewest_youngest():
    ns = [node("n1", 1, cpus=8, mem=100, gpus=8)]
    old = running(10, [("n1", 4, 10, (0, 1, 2, 3))], start=0, qos="low")
    young = running(11, [("n1", 4, 10, (4, 5, 6, 7))], start=500, qos="low")
    hi = job(1, gpus_per_node=4, cpus_per_task=4, mem_per_node=10, qos="high")
    qos = (QosView(name="high", preempt=frozenset({"low"})), QosView(name="low"))
    snap = busy_snapshot(ns, [old, young], [hi], now=NOW, qos=qos)
    cfg = SchedConfig(preempt_type="preempt/qos", preempt_mode="REQUEUE")
    plan = schedule(snap, cfg)
    assert [(p.victim, p.preemptor, p.mode) for p in plan.preemptions] == [(11, 1, "REQUEUE")]
    assert plan.starts == ()
    off = schedule(snap, SchedConfig())
    assert off.preemptions == ()


def test_partition_prio_preemption_cancel_when_not_requeueable():
    ns = [node("n1", 1, cpus=4)]
    parts = (PartitionView(name="lo", node_names=("n1",), priority_tier=1),
             PartitionView(name="hi", node_names=("n1",), priority_tier=2, grace_time=30))
    r = running(10, [("n1", 4, 100, ())], partition="lo", requeue=False)
    j = job(1, partitions=("hi",), cpus_per_task=4, mem_per_node=10)
    snap = busy_snapshot(ns, [r], [j], parts=parts, now=NOW)
    plan = schedule(snap, SchedConfig(preempt_type="preempt/partition_prio", preempt_mode="REQUEUE"))
    assert [(p.victim, p.mode, p.grace) for p in plan.preemptions] == [(10, "CANCEL", 0)]


# ---- topology -----------------------------------------------------------------------

def test_topology_select_fewest_leaves_never_across_fabrics():
    pos = {f"n{i}": i for i in range(6)}
    topo = Topology([SwitchView("s1", nodes=("n0", "n1", "n2")), SwitchView("s2", nodes=("n3", "n4")),
                     SwitchView("top", switches=("s1", "s2")), SwitchView("iso", nodes=("n5",))], pos)
    fit = [(0, p) for p in range(6)]
    assert topo.select(2, fit) == [3, 4]  # smallest single leaf that holds 2
    assert sorted(topo.select(4, fit)) == [0, 1, 2, 3]
    assert topo.select(4, fit, max_leaves=1) is None
    assert topo.select(6, fit) is None
