"""Golden tests: muster.cli.fmt_sinfo against real Slurm 22.05 sinfo output."""
import shlex

import pytest

from muster.cli import fmt_sinfo as fs
from records_fixture import (NOW_FMT, busy_nodes, node, partitions, ref_lines,  # noqa: F401
                             ref_sections, ts, utc_tz)


def _render(nodes=None, **kw):
    opts = dict(fmt=None, fmt_long=None, node_oriented=False, long=False, summarize=False,
                reasons=False, noheader=False, now=NOW_FMT, partition_filter=None,
                node_filter=None, state_filter=None)
    opts.update(kw)
    return fs.render(partitions(), busy_nodes() if nodes is None else nodes,
                     **opts).splitlines()


@pytest.mark.parametrize("name,kw", [
    ("sinfo_default.txt", {}),
    ("sinfo_N.txt", {"node_oriented": True}),
    ("sinfo_long.txt", {"long": True}),
    ("sinfo_N_long.txt", {"node_oriented": True, "long": True}),
    ("sinfo_summarize.txt", {"summarize": True}),
])
def test_builtin_layouts(utc_tz, name, kw):
    assert _render(**kw) == ref_lines(name)


@pytest.mark.parametrize("cmd", list(ref_sections("sinfo_format_examples.txt")))
def test_format_examples(utc_tz, cmd):
    argv = shlex.split(cmd)[1:]
    kw = {}
    if "-N" in argv:
        kw["node_oriented"] = True
    if "-o" in argv:
        kw["fmt"] = argv[argv.index("-o") + 1]
    if "-O" in argv:
        kw["fmt_long"] = argv[argv.index("-O") + 1]
    assert _render(**kw) == ref_sections("sinfo_format_examples.txt")[cmd]


def test_partition_filter_nosuch(utc_tz):
    assert _render(partition_filter=["nosuch"]) == [
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST"]


def test_node_filter_nosuch(utc_tz):
    assert _render(node_filter=["nosuch"]) == [
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST",
        "gpu*         up   infinite      0    n/a ",
        "debug        up    1:00:00      0    n/a ",
    ]


def _down_node4():
    ns = [node(f"node{i}", 17100 + i) for i in (1, 2, 3)]
    ns.append(node("node4", 17104, state="DOWN", flags=["NOT_RESPONDING"],
                   reason="Not responding", reason_user="slurm",
                   reason_time=ts("17:54:32")))
    return ns


def test_down_not_responding_and_reasons(utc_tz):
    got = _render(_down_node4())
    assert got == [
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST",
        "gpu*         up   infinite      3   idle node[1-3]",
        "gpu*         up   infinite      1  down* node4",
        "debug        up    1:00:00      3   idle node[1-3]",
        "debug        up    1:00:00      1  down* node4",
    ]
    assert _render(_down_node4(), reasons=True) == [
        "REASON               USER      TIMESTAMP           NODELIST",
        "Not responding       slurm     2026-11-29T17:54:32 node4",
    ]
    assert _render(reasons=True) == [
        "REASON               USER      TIMESTAMP           NODELIST"]


def test_node_states():
    n = node("n", 1, flags=["DRAIN"])
    assert (fs.node_state_short(n), fs.node_state_long(n)) == ("drain", "drained")
    n = node("n", 1, state="MIXED", cpus_alloc=2, flags=["DRAIN"])
    assert (fs.node_state_short(n), fs.node_state_long(n)) == ("drng", "draining")
    n = node("n", 1, state="ALLOCATED", cpus_alloc=16)
    assert (fs.node_state_short(n), fs.node_state_long(n)) == ("alloc", "allocated")
    n = node("n", 1, state="MIXED", flags=["NOT_RESPONDING"], cpus_alloc=1)
    assert fs.node_state_short(n) == "mix*"
    n = node("n", 1, flags=["COMPLETING"])
    assert fs.node_state_short(n) == "comp"
    assert fs.node_state_complete(node("n", 1, flags=["DRAIN"])) == "idle+drain"


def test_state_filter(utc_tz):
    got = _render(state_filter=["idle"])
    assert got[1:] == ["gpu*         up   infinite      1   idle node4",
                       "debug        up    1:00:00      1   idle node4"]
