"""Topology (issue 17): topology.conf parsing (tree and block), placement on the fewest leaf
switches / blocks in every path of the core (timeline search, general shapes, preemption),
--switches waiting then giving up, and the minimality of the leaf count (property)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from core_builders import busy_snapshot, job, node, running
from hypothesis import given, settings
from hypothesis import strategies as st

from muster.common.errors import ConfigError
from muster.config import slurmconf
from muster.config.topologyconf import parse_topology, render_tree
from muster.core import SchedConfig, schedule
from muster.core.confview import topology_views
from muster.core.snapshot import SwitchView
from muster.core.topology import Blocks, Topology

BF = SchedConfig(backfill=True, bf_depth=None)
NOW = 10_000
NODES = {f"n{i}": None for i in range(64)}


def parse(text: str, plugin: str = "topology/tree"):
    return parse_topology(text, "/etc/muster/topology.conf", plugin, NODES)


# ---- parser ---------------------------------------------------------------------------------

def test_tree_parses_leaves_inner_switches_and_levels():
    t = parse("# fabric\nSwitchName=s0 Nodes=n[0-3] LinkSpeed=100\nSwitchName=s1 Nodes=n[4-7]\n"
              "SwitchName=top Switches=s[0-1]\n")
    by = {s.name: s for s in t.switches}
    assert by["s0"].nodes == ("n0", "n1", "n2", "n3") and by["s0"].link_speed == 100
    assert (by["s0"].level, by["top"].level) == (0, 1) and by["top"].switches == ("s0", "s1")


@pytest.mark.parametrize("text,line,what", [
    ("SwitchName=s0 Nodes=n[0-3]\nSwitchName=s1 Nodes=n[3-5]\n", 2,
     "node 'n3' is under switch 's0' already"),
    ("SwitchName=s0 Nodes=n[0-1],gpu7\n", 1, "node 'gpu7' is not in slurm.conf"),
    ("SwitchName=a Switches=b\nSwitchName=b Switches=c\nSwitchName=c Switches=a\n", 1,
     "switch cycle"),
    ("SwitchName=a Switches=zz\n", 1, "names unknown switch 'zz'"),
    ("SwitchName=s0 Nodes=n0\nSwitchName=s0 Nodes=n1\n", 2, "duplicate SwitchName"),
    ("SwitchName=s0 Nodes=n0 Colour=blue\n", 1, "unknown key 'colour'"),
    ("SwitchName=s0 Nodes=n[3-1]\n", 1, "invalid Nodes="),
    ("SwitchName=s0\n", 1, "has no Nodes= or Switches="),
])
def test_tree_errors_name_file_and_line(text, line, what):
    with pytest.raises(ConfigError) as e:
        parse(text)
    assert str(e.value).startswith(f"/etc/muster/topology.conf:{line}: ") and what in str(e.value)


def test_blocks_default_sizes_are_power_of_two_multiples_of_the_base():
    t = parse("BlockName=b0 Nodes=n[0-3]\nBlockName=b1 Nodes=n[4-7]\nBlockName=b2 Nodes=n[8-10]\n",
              "topology/block")
    assert [b.name for b in t.blocks] == ["b0", "b1", "b2"] and t.block_sizes == (4, 8, 16)
    t = parse("BlockName=b0 Nodes=n[0-1]\nBlockSizes=2,8\n", "topology/block")
    assert t.block_sizes == (2, 8)


@pytest.mark.parametrize("text,what", [
    ("BlockName=b0 Nodes=n[0-3]\nBlockSizes=2,4\n", "more than the base block size 2"),
    ("BlockSizes=4,12\nBlockName=b0 Nodes=n0\n", "invalid BlockSizes=4,12"),
    ("BlockName=b0 Nodes=n[0-1]\nBlockName=b1 Nodes=n[1-2]\n", "node 'n1' is in block 'b0'"),
    ("SwitchName=s0 Nodes=n0\n", "unknown key 'switchname'"),
])
def test_block_errors(text, what):
    with pytest.raises(ConfigError, match=what):
        parse(text, "topology/block")


def _write_conf(tmp_path, plugin: str, topo: str | None) -> str:
    (tmp_path / "slurm.conf").write_text(
        "ClusterName=c\nSlurmctldHost=h\n"
        f"TopologyPlugin={plugin}\nNodeName=n[0-7] CPUs=4 RealMemory=1000\n"
        "PartitionName=p Nodes=ALL Default=YES\n")
    if topo is not None:
        (tmp_path / "topology.conf").write_text(topo)
    return str(tmp_path / "slurm.conf")


def test_slurm_conf_reads_topology_conf_next_to_it(tmp_path):
    path = _write_conf(tmp_path, "topology/tree", render_tree([("s0", ["n0", "n1", "n2", "n3"]),
                                                                ("s1", ["n4", "n5", "n6", "n7"])]))
    cfg = slurmconf.load(path)
    assert cfg.topology is not None and [s.name for s in cfg.topology.switches] == [
        "s0", "s1", "top"]
    views = topology_views(cfg.topology)["switches"]
    assert views[0] == SwitchView("s0", nodes=("n0", "n1", "n2", "n3"))
    assert slurmconf.load(_write_conf(tmp_path, "topology/none", None)).topology is None


def test_slurm_conf_without_its_topology_conf_or_with_an_unknown_plugin_fails(tmp_path):
    with pytest.raises(ConfigError, match="topology.conf not found"):
        slurmconf.load(_write_conf(tmp_path / "", "topology/tree", None))
    (tmp_path / "topology.conf").unlink(missing_ok=True)
    with pytest.raises(ConfigError, match=r"slurm.conf:3: TopologyPlugin=topology/torus"):
        slurmconf.load(_write_conf(tmp_path, "topology/torus", None))


# ---- placement ------------------------------------------------------------------------------

def interleaved(leaves: int = 4, per: int = 16):
    """``leaves`` leaf switches of ``per`` nodes each under one top switch, the nodes dealt
    round-robin (leaf i holds n_i, n_{i+leaves}, ...): slurm.conf order alone would spread a
    job over every leaf."""
    ns = [node(f"n{i}", i, cpus=8, mem=8000, gpus=8) for i in range(leaves * per)]
    sw = tuple(SwitchView(f"s{k}", nodes=tuple(f"n{i}" for i in range(k, leaves * per, leaves)))
               for k in range(leaves))
    return ns, sw + (SwitchView("top", switches=tuple(s.name for s in sw)),)


def leaf_count(alloc, sw) -> int:
    leaf = {nm: s.name for s in sw for nm in s.nodes}
    return len({leaf[n] for n in alloc.node_names})


def test_sixteen_node_job_lands_on_one_leaf_when_one_fits():
    ns, sw = interleaved()
    j = job(1, nodes_min=16, gpus_per_node=8, mem_per_node=1000, time_limit=60)
    plan = schedule(busy_snapshot(ns, [], [j], now=NOW), BF)
    assert leaf_count(plan.starts[0].allocation, sw) == 4  # without a topology: every leaf
    plan = schedule(busy_snapshot(ns, [], [j], now=NOW, switches=sw), BF)
    assert leaf_count(plan.starts[0].allocation, sw) == 1
    # the same for a packing request (-N 16 -n 128: the general search) and the main scheduler
    jp = job(2, nodes_min=16, ntasks=128, mem_per_node=1000, time_limit=60)
    for cfg in (BF, SchedConfig()):
        plan = schedule(busy_snapshot(ns, [], [jp], now=NOW, switches=sw), cfg)
        assert leaf_count(plan.starts[0].allocation, sw) == 1


def _busy(ns, sw, free_per_leaf, end=NOW + 3600):
    """A running job holding all but ``free_per_leaf[k]`` nodes of leaf k until ``end``."""
    taken = []
    for s, free in zip(sw, free_per_leaf):
        taken += [(nm, 8, 8000, range(8)) for nm in s.nodes[free:]]
    return running(900, taken, end=end)


def test_spread_over_the_fewest_leaves_when_none_holds_the_job():
    ns, sw = interleaved()
    r = _busy(ns, sw, [10, 6, 12, 4])
    j = job(1, nodes_min=16, gpus_per_node=8, mem_per_node=1000, time_limit=60)
    plan = schedule(busy_snapshot(ns, [r], [j], now=NOW, switches=sw), BF)
    alloc = plan.starts[0].allocation
    assert leaf_count(alloc, sw) == 2
    # best fit: the fullest leaf (12 free) and the smallest one covering the other 4
    assert {n for n in alloc.node_names if n in sw[2].nodes} == set(sw[2].nodes[:12])
    assert all(n in sw[2].nodes or n in sw[3].nodes for n in alloc.node_names)


def test_switches_waits_for_one_leaf_then_gives_up_after_max_wait():
    ns, sw = interleaved()
    r = _busy(ns, sw, [10, 6, 12, 4])
    j = job(1, nodes_min=16, gpus_per_node=8, mem_per_node=1000, time_limit=60, switches=1,
            submit_time=NOW - 100)
    plan = schedule(busy_snapshot(ns, [r], [j], now=NOW, switches=sw), BF)
    # waits: max_switch_wait (300 s) from submit has not passed, and no leaf is free enough
    assert plan.starts == () and plan.reasons[1] == "Resources"
    assert plan.expected_start[1] == NOW + 200  # when it gives up on one leaf
    # its own wait (--switches=1@30) ran out: any leaves
    plan = schedule(busy_snapshot(ns, [r], [replace(j, switch_wait=30)], now=NOW, switches=sw),
                    BF)
    assert leaf_count(plan.starts[0].allocation, sw) == 2
    # max_switch_wait from the config, once passed
    late = replace(BF, max_switch_wait=60)
    plan = schedule(busy_snapshot(ns, [r], [j], now=NOW, switches=sw), late)
    assert leaf_count(plan.starts[0].allocation, sw) == 2
    # --switches=2 is met at once
    plan = schedule(busy_snapshot(ns, [r], [replace(j, switches=2)], now=NOW, switches=sw), BF)
    assert leaf_count(plan.starts[0].allocation, sw) == 2


def test_blocks_smallest_fitting_aggregate_then_fewest_blocks():
    ns = [node(f"n{i}", i, cpus=8, mem=8000) for i in range(16)]
    blocks = tuple(SwitchView(f"b{k}", nodes=tuple(f"n{i}" for i in range(4 * k, 4 * k + 4)))
                   for k in range(4))
    # b0 has 1 free node, b1 3, b2 4, b3 2: a 5-node job fits the aggregate b2+b3 (6 free)
    # better than b0+b1 (4 free: too few); in it, b2 whole and one node of b3
    taken = [(f"n{i}", 8, 8000, ()) for i in (0, 1, 2, 4, 14, 15)]
    r = running(900, taken, end=NOW + 3600)
    j = job(1, nodes_min=5, mem_per_node=1000, time_limit=60)
    snap = busy_snapshot(ns, [r], [j], now=NOW, blocks=blocks, block_sizes=(4, 8, 16))
    names = set(schedule(snap, BF).starts[0].allocation.node_names)
    assert names >= {"n8", "n9", "n10", "n11"} and len(names & {"n12", "n13"}) == 1
    # a 3-node job fits one block: the one with the fewest free nodes that holds it (b1)
    j3 = job(2, nodes_min=3, mem_per_node=1000, time_limit=60)
    snap = busy_snapshot(ns, [r], [j3], now=NOW, blocks=blocks, block_sizes=(4, 8, 16))
    assert set(schedule(snap, BF).starts[0].allocation.node_names) == {"n5", "n6", "n7"}


def test_preemption_with_switches_frees_one_leaf():
    ns, sw = interleaved(2, 4)  # s0 = n0,n2,n4,n6; s1 = n1,n3,n5,n7
    # one low-QOS job per node, younger with the node's index: the youngest alternate leaves
    lows = [running(900 + i, [(f"n{i}", 8, 8000, range(8))], end=NOW + 3600, qos="low",
                    start=NOW - 1000 + i) for i in range(8)]
    from muster.core.snapshot import QosView
    qos = (QosView("low"), QosView("high", preempt=frozenset({"low"})))
    cfg = replace(BF, preempt_type="preempt/qos", preempt_mode="CANCEL")
    leaf = {nm: s.name for s in sw for nm in s.nodes}

    def victims(j):
        plan = schedule(busy_snapshot(ns, lows, [j], now=NOW, switches=sw, qos=qos), cfg)
        return {leaf[f"n{p.victim - 900}"] for p in plan.preemptions}, len(plan.preemptions)

    j = job(1, nodes_min=2, gpus_per_node=8, mem_per_node=1000, time_limit=60, qos="high",
            submit_time=NOW)
    assert victims(j) == ({"s0", "s1"}, 2)  # the two youngest, on two leaves
    # --switches=1 (still within its wait): two victims on one leaf, so the job fits there
    leaves, count = victims(replace(j, switches=1))
    assert len(leaves) == 1 and count == 2


# ---- property: the leaf count is minimal ----------------------------------------------------

@st.composite
def trees(draw):
    fabrics = draw(st.integers(1, 2))
    sizes = [draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)) for _ in range(fabrics)]
    sw, i, free = [], 0, []
    for f, leaves in enumerate(sizes):
        names = []
        for k, size in enumerate(leaves):
            nodes = tuple(f"n{i + x}" for x in range(size))
            i += size
            sw.append(SwitchView(f"f{f}l{k}", nodes=nodes))
            names.append(f"f{f}l{k}")
            free += [n for n in nodes if draw(st.booleans())]
        sw.append(SwitchView(f"f{f}top", switches=tuple(names)))
    k = draw(st.integers(1, max(1, i)))
    return sw, i, free, k


@settings(max_examples=200, deadline=None)
@given(trees())
def test_select_uses_the_fewest_leaves_of_any_fabric(case):
    sw, count, free, k = case
    pos = {f"n{x}": x for x in range(count)}
    topo = Topology(sw, pos)
    fitting = [(1, 0, 0, 0, pos[n]) for n in sorted(free, key=pos.__getitem__)]
    got = topo.select(k, fitting)
    # brute force: the fewest leaves of one fabric whose free nodes add up to k
    leaves = [s for s in sw if s.nodes]
    fabric = {s.name: s.name[:2] for s in leaves}
    best = None
    for m in range(1, len(leaves) + 1):
        for combo in itertools.combinations(leaves, m):
            if len({fabric[s.name] for s in combo}) == 1 and sum(
                    1 for s in combo for n in s.nodes if n in free) >= k:
                best = m
                break
        if best is not None:
            break
    if best is None:
        assert got is None
        return
    assert got is not None and len(got) == k == len(set(got))
    assert set(got) <= {pos[n] for n in free}
    assert topo.leaves(got) == best
    assert len({fabric[topo.leaf_of[p]] for p in got}) == 1  # never across fabrics


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=8), st.integers(1, 20))
def test_blocks_never_use_more_blocks_than_needed_within_the_chosen_aggregate(free, k):
    blocks = tuple(SwitchView(f"b{b}", nodes=tuple(f"n{4 * b + x}" for x in range(4)))
                   for b in range(len(free)))
    pos = {f"n{x}": x for x in range(4 * len(free))}
    fitting = [(1, 0, 0, 0, 4 * b + x) for b, f in enumerate(free) for x in range(f)]
    got = Blocks(blocks, (4, 8, 16, 32), pos).select(k, fitting)
    if sum(free) < k:
        assert got is None
        return
    assert got is not None and len(set(got)) == k
    used = {p // 4 for p in got}
    lo, hi = min(used), max(used)
    span = 1
    while span < hi - lo + 1 or lo // span != hi // span:
        span *= 2
    # within the aligned aggregate it chose, no fewer blocks would hold k
    agg = sorted((free[b] for b in range(lo - lo % span, min(len(free), lo - lo % span + span))),
                 reverse=True)
    need = next(m for m in range(1, len(agg) + 1) if sum(agg[:m]) >= k)
    assert len(used) == need


# ---- simulator ------------------------------------------------------------------------------

def test_simulator_reports_the_fraction_on_the_fewest_leaves(tmp_path):
    import dataclasses

    from muster.sim.cluster import from_flags, with_topology
    from muster.sim.engine import Simulator
    from muster.sim.metrics import compute, format_table
    from muster.sim.traces import TraceJob
    topo = tmp_path / "topology.conf"
    topo.write_text("SwitchName=s0 Nodes=n0,n2,n4,n6\nSwitchName=s1 Nodes=n1,n3,n5,n7\n"
                    "SwitchName=top Switches=s[0-1]\n")
    flat = from_flags(8, 8, 8)
    tree = with_topology(flat, str(topo))
    # 2-node jobs (16 GPUs) one after another, then a 6-node one (needs both leaves: 2 is
    # its minimum) alongside a 2-node one
    jobs = [TraceJob(i, 100 * i, 50, 60, 16, 16, user="u") for i in range(1, 5)]
    jobs += [TraceJob(5, 1000, 50, 60, 48, 48, user="u"), TraceJob(6, 1000, 50, 60, 16, 16,
                                                                   user="u")]
    res = Simulator(tree, jobs, "easy").run()
    m = compute(res)
    assert m["topo_multinode_jobs"] == 6 and m["topo_min_leaves_fraction"] == 1.0
    assert m["topo_leaves_mean"] == pytest.approx((5 * 1 + 2) / 6)
    assert "on the fewest leaves possible" in format_table(m)
    # the same trace placed without the topology, judged against it: index order spreads
    # every 2-node job over both leaves
    plain = Simulator(flat, jobs, "easy").run()
    m2 = compute(dataclasses.replace(plain, cluster=tree))
    assert m2["topo_min_leaves_fraction"] < 0.5 and m2["topo_leaves_mean"] == 2.0
    # tree:N and block:N shorthands, and a bad spec
    assert len(with_topology(flat, "tree:4").topology["switches"]) == 3
    assert with_topology(flat, "block:2").topology["block_sizes"] == (2, 4, 8)
    with pytest.raises(ValueError, match="expected tree:N"):
        with_topology(flat, "ring:3")
