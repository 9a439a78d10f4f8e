"""Engine invariants: submit ≤ start, capacity never exceeded, kill at the limit,
determinism, FIFO equals an independent reference, too-large jobs reported."""

import heapq
import random

import pytest

from muster.sim.cluster import from_flags
from muster.sim.engine import Simulator
from muster.sim.metrics import compute
from muster.sim.traces import TraceJob


def _jobs(seed, n=300, max_cpus=16, gpus=False):
    rng = random.Random(seed)
    t, out = 0, []
    for i in range(1, n + 1):
        t += rng.choice([0, 0, 1, 5, 30, 120])
        run = rng.randint(0, 600)
        limit = max(1, int(run * rng.uniform(0.7, 3)))
        g = rng.choice([0, 1, 2, 4, 8, 16]) if gpus else 0
        out.append(TraceJob(i, t, run, limit, rng.randint(1, max_cpus), g, user=f"u{i % 7}"))
    return out


def _check(res, total_cpus, total_gpus=0):
    ev = []
    for tj, s, e, k in zip(res.jobs, res.start, res.end, res.killed):
        assert s >= tj.submit, "started before submit"
        limit_s = 60 * -(-tj.limit // 60)
        assert e - s == (limit_s if k else tj.run)
        assert k == (tj.run > limit_s)
        ev.append((s, 1, tj))
        ev.append((e, 0, tj))
    ev.sort(key=lambda x: (x[0], x[1]))
    c = g = 0
    for _, kind, tj in ev:
        sign = 1 if kind else -1
        c += sign * tj.cpus
        g += sign * tj.gpus
        assert c <= total_cpus and g <= total_gpus


POLICIES = ["fifo", "easy", "conservative"]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_invariants_pooled_cpus(policy, seed):
    cl = from_flags(1, 32)
    n = 300 if policy == "fifo" else 120  # backfill passes cost ~1 ms each in the core
    res = Simulator(cl, _jobs(seed, n=n, max_cpus=32), policy).run()
    assert len(res.jobs) == n and all(s >= 0 for s in res.start)
    _check(res, 32)


@pytest.mark.parametrize("policy", POLICIES)
def test_invariants_multi_node_gpus(policy):
    cl = from_flags(4, 16, 8)
    jobs = [j for j in _jobs(7, n=200 if policy == "fifo" else 80, max_cpus=4, gpus=True) if j.gpus]
    jobs = [TraceJob(j.job_id, j.submit, j.run, j.limit, 1, j.gpus, user=j.user) for j in jobs]
    res = Simulator(cl, jobs, policy).run()
    _check(res, 64, 32)
    m = compute(res)
    assert 0 < m["gpu_utilization"] <= 1


def test_jobs_killed_at_limit():
    cl = from_flags(1, 4)
    jobs = [TraceJob(1, 0, 500, 120, 4), TraceJob(2, 0, 10, 60, 4)]
    res = Simulator(cl, jobs, "fifo").run()
    assert res.killed == [True, False]
    assert (res.start, res.end) == ([0, 120], [120, 130])
    assert res.states == {"TIMEOUT": 1, "COMPLETED": 1}


def test_too_large_jobs_are_reported_and_skipped():
    cl = from_flags(2, 4)
    jobs = [TraceJob(1, 0, 10, 60, 8), TraceJob(2, 0, 10, 60, 9), TraceJob(3, 0, 10, 60, 1, 1)]
    res = Simulator(cl, jobs, "fifo").run()
    assert [tj.job_id for tj in res.jobs] == [1]
    assert [tj.job_id for tj, _ in res.skipped] == [2, 3]
    assert all("too large" in why for _, why in res.skipped)


def test_deterministic():
    cl = from_flags(1, 32)
    a = compute(Simulator(cl, _jobs(5, max_cpus=32), "fifo").run())
    b = compute(Simulator(cl, _jobs(5, max_cpus=32), "fifo").run())
    a.pop("sim"), b.pop("sim")
    assert a == b


def test_a_replay_leaves_the_collector_as_it_found_it():
    """The replay freezes what it set up (the collector's full passes would walk it again and
    again) and thaws it after, but never thaws what the caller had frozen itself."""
    import gc

    from muster.core import schedule
    seen = []

    def core(snap, cfg):  # the snapshot core, noting what is frozen while it decides
        seen.append(gc.get_freeze_count())
        return schedule(snap, cfg)
    cl = from_flags(4, 8)
    assert gc.isenabled() and gc.get_freeze_count() == 0
    try:
        Simulator(cl, _jobs(6, max_cpus=32), "easy", core=core).run()
        assert seen and min(seen) > 0  # the set-up was frozen for the whole replay
        assert gc.isenabled() and gc.get_freeze_count() == 0
        gc.freeze()
        frozen = gc.get_freeze_count()
        Simulator(cl, _jobs(7, max_cpus=32), "easy").run()
        assert gc.get_freeze_count() >= frozen  # the caller's freeze stands
    finally:
        gc.unfreeze()


def _reference_fcfs(jobs, cpus):
    """Textbook FCFS without backfill on a pool of processors (limits in whole minutes)."""
    free, t, heap, out = cpus, 0, [], {}
    queue = list(jobs)
    i = 0
    while queue:
        head = queue[0]
        t = max(t, head.submit)
        while heap and heap[0][0] <= t:
            free += heapq.heappop(heap)[1]
        if head.cpus <= free:
            queue.pop(0)
            free -= head.cpus
            out[head.job_id] = t
            run = min(head.run, 60 * -(-head.limit // 60))
            heapq.heappush(heap, (t + run, head.cpus))
        else:
            t = heap[0][0]
        i += 1
    return out


@pytest.mark.parametrize("seed", range(4))
def test_fifo_equals_reference_fcfs(seed):
    jobs = _jobs(seed, n=400, max_cpus=32)
    res = Simulator(from_flags(1, 32), jobs, "fifo").run()
    ref = _reference_fcfs(jobs, 32)
    assert res.start == [ref[j.job_id] for j in res.jobs]


def test_fifo_is_the_same_on_one_cpu_nodes():
    jobs = _jobs(11, n=150, max_cpus=16)
    a = Simulator(from_flags(1, 16), jobs, "fifo").run()
    b = Simulator(from_flags(16, 1), jobs, "fifo").run()
    assert a.start == b.start


def test_easy_backfills_a_short_job_past_a_waiting_wide_one():
    cl = from_flags(1, 4)
    jobs = [TraceJob(1, 0, 600, 600, 2), TraceJob(2, 1, 60, 600, 4), TraceJob(3, 2, 60, 60, 2)]
    fifo = Simulator(cl, jobs, "fifo").run()
    easy = Simulator(cl, jobs, "easy").run()
    assert fifo.start == [0, 600, 660]
    assert easy.start == [0, 600, 2]  # job 3 ends at 62, before job 2's reservation at 600
