"""Metrics on hand-computed cases."""

import pytest

from muster.sim.cluster import from_flags
from muster.sim.engine import SimResult
from muster.sim.metrics import bounded_slowdown, compute, format_table, jain, percentile
from muster.sim.traces import TraceJob


def test_bounded_slowdown():
    assert bounded_slowdown(0, 100) == 1.0
    assert bounded_slowdown(100, 100) == 2.0
    assert bounded_slowdown(20, 2) == pytest.approx(2.2)  # (20 + 2) / max(2, 10)
    assert bounded_slowdown(0, 0) == 1.0  # never below 1


def test_jain():
    assert jain([3, 3, 3]) == pytest.approx(1.0)
    assert jain([1, 0, 0, 0]) == pytest.approx(0.25)  # one user takes everything: 1/n
    assert jain([1, 2]) == pytest.approx(9 / 10)
    assert jain([]) is None


def test_percentile_matches_linear_interpolation():
    xs = [0, 10, 20, 30, 40]
    assert percentile(xs, 50) == 20
    assert percentile(xs, 95) == pytest.approx(38)
    assert percentile([5], 99) == 5


def test_compute_small_case():
    cl = from_flags(1, 4)
    jobs = [TraceJob(1, 0, 100, 100, 4, user="a"), TraceJob(2, 0, 5, 10, 2, user="b"),
            TraceJob(3, 50, 50, 60, 2, user="b")]
    # job 1 runs 0-100 on all 4 CPUs; job 2 waits 100 s then runs 5 s; job 3 runs 100-150
    res = SimResult(jobs=jobs, start=[0, 100, 100], end=[100, 105, 150],
                    killed=[False, False, False], skipped=[], cluster=cl, policy="fifo")
    m = compute(res)
    assert m["jobs"] == 3 and m["makespan_s"] == 150
    assert m["utilization"] == pytest.approx((400 + 10 + 100) / (4 * 150))
    assert m["wait_mean_s"] == pytest.approx(50)
    assert m["wait_median_s"] == 50
    b = [1.0, (100 + 5) / 10, (50 + 50) / 50]
    assert m["bounded_slowdown_mean"] == pytest.approx(sum(b) / 3)
    assert m["jct_mean_s"] == pytest.approx((100 + 105 + 100) / 3)
    ua, ub = 1.0, (b[1] + b[2]) / 2
    assert m["fairness_jain"] == pytest.approx((ua + ub) ** 2 / (2 * (ua * ua + ub * ub)))
    assert "bounded slowdown" in format_table(m)


def test_gpu_metrics_present_only_for_gpu_clusters():
    cl = from_flags(2, 8, 4)
    jobs = [TraceJob(1, 0, 10, 10, 1, gpus=4)]
    res = SimResult(jobs=jobs, start=[0], end=[10], killed=[False], skipped=[], cluster=cl,
                    policy="fifo")
    m = compute(res)
    assert m["gpu_utilization"] == pytest.approx(0.5)
    assert "gpu_idle_while_waiting" in m
    res2 = SimResult(jobs=[TraceJob(1, 0, 10, 10, 1)], start=[0], end=[10], killed=[False],
                     skipped=[], cluster=from_flags(1, 2), policy="fifo")
    assert "gpu_utilization" not in compute(res2)
