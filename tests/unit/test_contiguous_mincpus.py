"""--contiguous and --mincpus in the scheduling core (muster.core.placement), and the request
and output fields that carry them (with --wckey).

The window search ``_choose_contiguous`` is checked against a brute force over every window
of consecutive node indices: the fewest nodes first, then the least free resources summed
over the window (weight, GPUs, CPUs, memory), then the lowest first index.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from core_builders import CFG, busy_snapshot, job, node, partition, running, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from muster.cli.getopt import CliExit
from muster.cli.jobopts import parse_sbatch
from muster.core import NEVER_BAD_CONFIG, SchedConfig, fits_ever, place, schedule
from muster.core.placement import _capacity, _choose_contiguous, node_key, request_of

# ---- the window search against a brute force ---------------------------------------------


def _brute(rq, views, req_names):
    """Every window of consecutive indices whose nodes all fit: the best by the documented
    key, as the names of its nodes (None when there is none)."""
    fit = {}
    for n in views:
        cap = _capacity(rq, n)
        if cap is not None:
            fit[n.index] = (n, cap)
    pack_t, pack_g = rq.tasks_mode == "pack", rq.gpu_mode == "total"
    need_t = rq.ntasks if pack_t else 0
    need_g = rq.gpus if pack_g else 0
    best = None
    for a in sorted(fit):
        for size in range(1, len(fit) + 1):
            idx = list(range(a, a + size))
            if any(i not in fit for i in idx):
                break
            ns = [fit[i][0] for i in idx]
            if not req_names <= {n.name for n in ns}:
                continue
            if not (pack_t or pack_g):
                if size != max(rq.lo, len(req_names)):
                    continue
            elif size < max(rq.lo, len(req_names), 1) or (rq.hi is not None and size > rq.hi) \
                    or (pack_t and size > need_t) or (pack_g and size > need_g):
                continue
            if sum(fit[i][1][0] for i in idx) < need_t or sum(fit[i][1][1] for i in idx) < need_g:
                continue
            if rq.hi is not None and size > rq.hi:
                continue
            key = (size, sum(n.weight for n in ns), sum(len(n.gpus_free) for n in ns),
                   sum(n.cpus_free for n in ns), sum(n.mem_free for n in ns), a)
            if best is None or key < best[0]:
                best = (key, [n.name for n in ns])
    return None if best is None else best[1]


@st.composite
def _cases(draw):
    indices = sorted(draw(st.sets(st.integers(0, 13), min_size=1, max_size=10)))
    views = []
    for i in indices:
        cpus = draw(st.integers(2, 8))
        gpus = draw(st.integers(0, 2))
        used = draw(st.one_of(st.just(0), st.integers(0, cpus)))
        views.append(node(f"n{i}", i, cpus=cpus, cpus_used=used,
                          mem=1000, mem_used=draw(st.sampled_from([0, 0, 500, 990])),
                          gpus=gpus, gpus_used=tuple(range(draw(st.integers(0, gpus)))),
                          weight=draw(st.integers(1, 2))))
    kind = draw(st.sampled_from(["one", "fixed", "pack", "gpus"]))
    kw = dict(contiguous=True, cpus_per_task=draw(st.integers(1, 3)),
              min_cpus=draw(st.sampled_from([0, 0, 2, 4])),
              mem_per_cpu=draw(st.sampled_from([1, 1, 100])))
    if kind == "one":
        kw["nodes_min"] = draw(st.integers(1, 4))
    elif kind == "fixed":
        kw.update(nodes_min=draw(st.integers(1, 3)), ntasks_per_node=draw(st.integers(1, 3)))
    elif kind == "pack":
        kw.update(ntasks=draw(st.integers(1, 16)), nodes_min=draw(st.integers(1, 3)),
                  nodes_max=draw(st.one_of(st.none(), st.integers(1, 5))))
    else:
        kw.update(gpus_total=draw(st.integers(1, 4)), nodes_min=draw(st.integers(1, 2)))
    if draw(st.booleans()):
        kw["req_nodes"] = frozenset(draw(st.sets(st.sampled_from([v.name for v in views]),
                                                 max_size=2)))
    return views, job(1, **kw)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_choose_contiguous_is_the_best_window_of_a_brute_force_search(case):
    views, j = case
    rq = request_of(j, CFG)
    ents = [(node_key(n), n, *cap) for n in views if (cap := _capacity(rq, n)) is not None]
    required = [e for e in ents if e[1].name in j.req_nodes]
    others = [e for e in ents if e[1].name not in j.req_nodes]
    want = _brute(rq, views, set(j.req_nodes))
    if len(required) == len(j.req_nodes):  # else a -w node does not fit: no window holds it
        chosen = _choose_contiguous(rq, required, others)
        assert (None if chosen is None else [e[1].name for e in chosen]) == want
    else:
        assert want is None
    alloc = place(j, views, CFG)  # the whole pipeline takes that window
    assert (None if alloc is None else list(alloc.node_names)) == want
    if alloc is not None:
        idx = sorted(v.index for v in views if v.name in alloc.node_names)
        assert idx == list(range(idx[0], idx[0] + len(idx)))


# ---- window choice, by example -------------------------------------------------------------


def _row(*used, cpus=4):
    """Nodes n0.. at indices 0.. with these CPUs in use (None: the node is down)."""
    return [node(f"n{i}", i, cpus=cpus, cpus_used=u or 0, usable=u is not None)
            for i, u in enumerate(used)]


def test_contiguous_job_skips_a_gap_and_a_plain_job_does_not():
    ns = _row(0, 4, 0, 0)  # n1 full
    assert place(job(1, nodes_min=2), ns, CFG).node_names == ("n0", "n2")
    assert place(job(1, nodes_min=2, contiguous=True), ns, CFG).node_names == ("n2", "n3")
    assert place(job(1, nodes_min=3, contiguous=True), ns, CFG) is None


def test_fewest_nodes_first_then_best_fit_then_lowest_index():
    # n0,n1 have 4 free each; n3,n4 have 1 and 3 free: an 8-task job needs n0+n1 (2 nodes),
    # never three; a 4-task job fits one node: the fullest that holds it (n0, lowest index)
    ns = _row(0, 0, None, 3, 1)
    assert place(job(1, ntasks=8, contiguous=True), ns, CFG).node_names == ("n0", "n1")
    assert place(job(1, ntasks=4, contiguous=True), ns, CFG).node_names == ("n0",)
    # two-node windows n0-n1 (8 free) and n3-n4 (4 free): best fit takes the fuller one
    assert place(job(1, nodes_min=2, contiguous=True), ns, CFG).node_names == ("n3", "n4")
    assert place(job(1, ntasks=4, nodes_min=2, contiguous=True), ns, CFG).node_names == (
        "n3", "n4")
    # -w: the window must hold the named node
    j = job(1, nodes_min=2, contiguous=True, req_nodes={"n1"})
    assert place(j, ns, CFG).node_names == ("n0", "n1")


def test_one_node_contiguous_job_is_placed_as_any_other():
    ns = _row(0, 3, 2, 0)
    for kw in ({}, {"ntasks": 2}, {"cpus_per_task": 2}):
        assert place(job(1, contiguous=True, **kw), ns, CFG) == place(job(1, **kw), ns, CFG)


def test_contiguous_never_fits_when_the_partition_has_no_adjacent_nodes():
    ns = [node("a", 0), node("c", 2), node("e", 4)]
    assert fits_ever(job(1, nodes_min=2, contiguous=True), ns, CFG) == NEVER_BAD_CONFIG
    assert fits_ever(job(1, nodes_min=2), ns, CFG) is None


# ---- --mincpus ------------------------------------------------------------------------------


def test_mincpus_needs_that_many_free_cpus_and_gets_them():
    ns = [node("n0", 0, cpus=8, cpus_used=5), node("n1", 1, cpus=8, cpus_used=2)]
    a = place(job(1, min_cpus=4, mem_per_cpu=100), ns, CFG)
    assert a.node_names == ("n1",) and (a.nodes[0].cpus, a.nodes[0].mem) == (4, 400)
    assert place(job(1, mem_per_cpu=100), ns, CFG).node_names == ("n0",)  # best fit
    assert place(job(1, min_cpus=7, mem_per_cpu=1), ns, CFG) is None
    assert fits_ever(job(1, min_cpus=9), ns, CFG) == NEVER_BAD_CONFIG
    # tasks beyond the minimum still count: max(tasks × cpus_per_task, min_cpus)
    a = place(job(1, ntasks=3, cpus_per_task=2, min_cpus=4, mem_per_cpu=1), ns, CFG)
    assert [n.cpus for n in a.nodes] == [6]
    # memory per CPU must cover the minimum too
    low_mem = [node("m", 0, cpus=8, mem=300)]
    assert place(job(1, min_cpus=4, mem_per_cpu=100), low_mem, CFG) is None


def test_mincpus_on_every_node_of_a_multi_node_job():
    ns = [node(f"n{i}", i, cpus=8, cpus_used=u) for i, u in enumerate((0, 6, 0, 0))]
    a = place(job(1, nodes_min=2, min_cpus=3, mem_per_cpu=1), ns, CFG)
    assert set(a.node_names) == {"n0", "n2"} and [n.cpus for n in a.nodes] == [3, 3]


# ---- the scheduler (live controller and simulator) and backfill's expected start ------------


def _three_nodes_n2_busy(**cfg):
    ns = [node(f"node{i}", i - 1, cpus=4) for i in (1, 2, 3)]
    r = running(7, [("node2", 4, 1000, ())], start=0, end=5000)
    j = job(5, nodes_min=2, contiguous=True, time_limit=10, mem_per_cpu=1)
    return busy_snapshot(ns, [r], [j], now=1000), SchedConfig(**cfg)


@pytest.mark.parametrize("cfg", [{}, {"backfill": True}], ids=["main", "backfill"])
def test_two_node_contiguous_job_waits_while_nodes_1_and_3_are_free(cfg):
    snap, scfg = _three_nodes_n2_busy(**cfg)
    plan = schedule(snap, scfg)
    assert plan.starts == () and plan.reasons[5] == "Resources"
    if scfg.backfill:  # squeue --start: when node2 comes back, on two adjacent nodes
        assert plan.expected_start[5] == 5000
        assert plan.sched_nodes[5] == "node1,node2"  # equal windows: the lowest index
    plain = replace(snap, pending=(replace(snap.pending[0], contiguous=False),))
    assert [s.allocation.node_names for s in schedule(plain, scfg).starts] == [
        ("node1", "node3")]
    freed = replace(snap, running=(), nodes=tuple(replace(n, cpus_free=n.cpus)
                                                  for n in snap.nodes))
    starts = schedule(freed, scfg).starts
    assert [s.allocation.node_names for s in starts] == [("node1", "node2")]


def test_partition_without_adjacent_nodes_reports_the_job_never_fits():
    ns = [node("a", 0), node("b", 1, partitions=("other",)), node("c", 2)]
    j = job(5, nodes_min=2, contiguous=True)
    plan = schedule(snapshot(ns, [j], parts=(partition("p", [ns[0], ns[2]]),)), CFG)
    assert plan.starts == () and plan.reasons[5] != "Resources"


# ---- the options: parsed, sent, no warning --------------------------------------------------


def _sbatch(*argv):
    return parse_sbatch([*argv, "--wrap", "true"], {}, None, "/tmp", 1_700_000_000)


def test_sbatch_sends_mincpus_contiguous_and_wckey_without_warnings():
    inv = _sbatch("--mincpus=4", "--contiguous", "--wckey=proj")
    assert (inv.request["mincpus"], inv.request["contiguous"], inv.request["wckey"]) == (
        4, True, "proj")
    assert inv.warnings == []
    inv = _sbatch()
    assert (inv.request["mincpus"], inv.request["contiguous"], inv.request["wckey"]) == (
        None, False, None)


@pytest.mark.parametrize("value", ["0", "-2", "x"])
def test_sbatch_refuses_a_bad_mincpus(value):
    with pytest.raises(CliExit) as ei:
        _sbatch(f"--mincpus={value}")
    assert (ei.value.lines, ei.value.code) == (
        [f'sbatch: error: Invalid numeric value "{value}" for --mincpus.'], 255)


def test_json_output_carries_the_three_fields():
    from muster.common.fmt_json import job_json
    from records_fixture import job as rec
    got = job_json(rec(job_id=9, min_cpus_node=4, contiguous=True, wckey="proj"), now=0)
    assert (got["minimum_cpus_per_node"], got["contiguous"], got["wckey"]) == (
        {"set": True, "infinite": False, "number": 4}, True, "proj")
    plain = job_json(rec(job_id=9), now=0)
    assert (plain["contiguous"], plain["wckey"]) == (False, "")
