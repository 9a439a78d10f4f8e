"""The queue key: ``(…, -tier, (-priority, nice), submit_time, job_id, …)`` under every
PriorityType, and the pooled scheduler orders by the very same function.

Slurm 23.11's default (priority/multifactor, every weight 0) gives every job priority 1 —
``0 − nice`` floored at 1 — so without the tie-break ``--nice`` would order nothing.
"""

from __future__ import annotations

import pytest
from core_builders import busy_snapshot, job, node, partition, running

from muster.core import SchedConfig
from muster.core import pooled as pooled_mod
from muster.core import priority as prio
from muster.core.pooled import PooledScheduler
from muster.core.schedule import order_key, schedule

TYPES = ("multifactor", "basic", "none")


def _jobs():
    """A (submitted first), B (nice 100), C — one CPU each, same priority inputs."""
    a = job(1, submit_time=10, ntasks=1, time_limit=10, mem_per_cpu=1)
    b = job(2, submit_time=11, ntasks=1, time_limit=10, mem_per_cpu=1, nice=100)
    c = job(3, submit_time=12, ntasks=1, time_limit=10, mem_per_cpu=1)
    return a, b, c


def _start_order(cfg: SchedConfig, jobs) -> list[int]:
    """Start the jobs one at a time on a one-CPU node (a job ends before the next pass)."""
    n = node("n0", 0, cpus=1, mem=1)
    left, order = list(jobs), []
    while left:
        snap = busy_snapshot([n], [], left, parts=(partition("p", [n]),))
        plan = schedule(snap, cfg)
        assert len(plan.starts) == 1, plan
        jid = plan.starts[0].job_id
        order.append(jid)
        left = [j for j in left if j.job_id != jid]
    return order


def test_key_is_priority_then_nice_then_submit_then_id():
    a, b, c = _jobs()
    assert order_key(1, a) == ((-1, 0), 10, 1)
    assert order_key(1, b) == ((-1, 100), 11, 2)
    assert sorted([a, b, c], key=lambda j: order_key(1, j)) == [a, c, b]
    # a higher priority still beats a lower nice
    assert order_key(2, b) < order_key(1, a)


@pytest.mark.parametrize("ptype", TYPES)
def test_nice_orders_jobs_under_every_priority_type(ptype):
    a, b, c = _jobs()  # "none": as given by the shell, all 1 here
    assert _start_order(SchedConfig(priority_type=ptype), [a, b, c]) == [1, 3, 2]


def test_default_weights_give_every_job_priority_one():
    """Why the tie-break matters: the displayed priority (Slurm's) cannot tell them apart."""
    a, b, c = _jobs()
    f = prio.static_fn(SchedConfig(priority_type="multifactor"))
    assert [f(j) for j in (a, b, c)] == [1, 1, 1]
    # priority/basic: decreasing by submission, nice applied (displayed as Slurm does)
    g = prio.static_fn(SchedConfig(priority_type="basic"))
    assert g(a) == prio.BASIC_TOP - 1 and g(b) == prio.BASIC_TOP - 2 - 100


def test_negative_nice_from_an_operator_goes_first():
    a, b, c = _jobs()
    boosted = job(4, submit_time=13, ntasks=1, time_limit=10, mem_per_cpu=1, nice=-50)
    cfg = SchedConfig(priority_type="multifactor", site_factor=0)
    assert _start_order(cfg, [a, b, c, boosted]) == [4, 1, 3, 2]
    # with a site factor the priority itself differs (site − nice): same order
    cfg = SchedConfig(priority_type="multifactor", site_factor=1000)
    assert _start_order(cfg, [a, b, c, boosted]) == [4, 1, 3, 2]


def test_pooled_uses_the_same_key_function():
    a, b, c = _jobs()
    cfg = SchedConfig(priority_type="multifactor")
    n = node("n0", 0, cpus=1, mem=1)
    ps = PooledScheduler(n, partition("p", [n]), cfg)
    for j in (a, b, c):
        assert ps.admit(j) is None
        ps.submit(j)
    assert ps.queue == sorted(order_key(prio.static_priority(j, cfg), j) for j in (a, b, c))
    assert pooled_mod.order_key is order_key  # one function, not a copy


def test_pooled_and_schedule_agree_on_nice_order():
    """One CPU, a running job; A, B (nice 100), C, D (nice −1): the same starts, pass by
    pass. Under priority/basic D (``TOP − 4 + 1``) ties with C (``TOP − 3``): nice decides."""
    n = node("n0", 0, cpus=1, mem=1)
    part = partition("p", [n])
    d = job(4, submit_time=13, ntasks=1, time_limit=10, mem_per_cpu=1, nice=-1)
    jobs = [*_jobs(), d]
    expect = {"multifactor": [4, 1, 3, 2], "none": [4, 1, 3, 2], "basic": [1, 4, 3, 2]}
    for ptype in TYPES:
        cfg = SchedConfig(priority_type=ptype)
        ps = PooledScheduler(n, part, cfg)
        for j in jobs:
            ps.submit(j)
        left, now, order = list(jobs), 100, []
        run = None
        while left:
            snap = busy_snapshot([n], [run] if run else [], left, parts=(part,), now=now)
            want = [s.job_id for s in schedule(snap, cfg).starts]
            got = [s.job_id for s in ps.schedule(now)]
            assert got == want, (ptype, order)
            if run is not None and not got:  # let the running job end, then pass again
                ps.ended(run.job_id)
                run, now = None, now + 60
                continue
            (jid,) = got
            order.append(jid)
            left = [j for j in left if j.job_id != jid]
            run = running(jid, [("n0", 1, 1, ())], start=now, end=now + 600)
            now += 1
        assert order == expect[ptype], ptype
