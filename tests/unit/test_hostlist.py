"""Hostlist expansion/compression: every hostlist.md §4 row plus the reference captures."""

from __future__ import annotations
import os as _os  # noqa: E402
import sys as _sys  # noqa: E402
_sys.path.insert(0, _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))))
from shared_path import SHARED  # noqa: E402


import pytest

from muster.common.errors import InputError
from muster.common.hostlist import (
    MAX_HOSTS,
    compress,
    compress_counts,
    compress_sorted,
    expand,
    expand_counts,
    natural_key,
)

REF = SHARED / "reference" / "slurm-22.05"

# (input, show hostlist, show hostlistsorted) — hostlist.md §4; None = not given by the spec.
SPEC_TABLE = [
    ("tux1,tux2,tux3", "tux[1-3]", "tux[1-3]"),
    ("tux3,tux1,tux2", "tux[3,1-2]", "tux[1-3]"),
    ("node[1-3],node[5]", "node[1-3,5]", "node[1-3,5]"),
    ("n1,n2,n3,n5,n6", "n[1-3,5-6]", "n[1-3,5-6]"),
    ("node01,node02,node3", "node[01-02,3]", "node[3,01-02]"),
    ("node009,node010,node011", "node[009-011]", "node[009-011]"),
    ("n9,n10,n11", "n[9-11]", "n[9-11]"),
    ("n99,n100,n0101", "n[99-100,0101]", None),
    ("a[1-2],b[1-2]", "a[1-2],b[1-2]", "a[1-2],b[1-2]"),
    ("n1,m1,n2", "n1,m1,n2", "m1,n[1-2]"),
    ("n[1-2,4],n3", "n[1-2,4,3]", "n[1-4]"),
    ("a1b2,a1b3", "a1b[2-3]", "a1b[2-3]"),
    ("rack1-n1,rack1-n2,rack2-n1", "rack1-n[1-2],rack2-n1", "rack1-n[1-2],rack2-n1"),
    (
        "rack[1-2]-node[01-02]",
        "rack1-node[01-02],rack2-node[01-02]",
        "rack1-node[01-02],rack2-node[01-02]",
    ),
    ("n[1-3]x[1-2]", "n1x[1-2],n2x[1-2],n3x[1-2]", "n1x[1-2],n2x[1-2],n3x[1-2]"),
    ("node1a,node1b", "node1a,node1b", "node1a,node1b"),
    ("x,y,z", "x,y,z", "x,y,z"),
    ("n1,n1", "n[1,1]", "n[1,1]"),
    ("n[1-3]-ib", "n1-ib,n2-ib,n3-ib", "n1-ib,n2-ib,n3-ib"),
]


@pytest.mark.parametrize(("expr", "plain", "sorted_"), SPEC_TABLE)
def test_spec_table(expr, plain, sorted_):
    hosts = expand(expr)
    assert compress(hosts) == plain
    # compress also accepts the expression tokens themselves (scontrol expands them first)
    if "[" not in expr:
        assert compress(expr.split(",")) == plain
    assert compress([expr]) == plain
    if sorted_ is not None:
        assert compress_sorted(hosts) == sorted_
    assert expand(plain) == hosts  # the compressed form denotes the same sequence


def test_sorted_keeps_duplicates():
    assert compress_sorted(["tux1", "tux2", "tux2", "tux3"]) == "tux[1-2,2-3]"
    assert compress(["tux1", "tux2", "tux2", "tux3"]) == "tux[1-2,2-3]"


@pytest.mark.parametrize(
    ("expr", "hosts"),
    [
        ("rack[1-2]-node[01-02]", ["rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]),
        ("n[1-2]x[1-2]", ["n1x1", "n1x2", "n2x1", "n2x2"]),
        ("n[01-10]", [f"n{i:02d}" for i in range(1, 11)]),
        ("n[1-10]", [f"n{i}" for i in range(1, 11)]),
        ("n[01-2]", ["n01", "n02"]),
        ("n[1-02]", ["n1", "n2"]),
        ("n[007]", ["n007"]),
        ("n1,n1", ["n1", "n1"]),
        ("n3 n1\tn2\nn4", ["n3", "n1", "n2", "n4"]),
        ("n1,, n2 ,", ["n1", "n2"]),
        ("n[1-3]-ib", ["n1-ib", "n2-ib", "n3-ib"]),
        ("a[1,3]b[2]c", ["a1b2c", "a3b2c"]),
        ("[1-2]", ["1", "2"]),
        ("login", ["login"]),
        ("", []),
        ("node[1-4],gpu[01-03]", ["node1", "node2", "node3", "node4", "gpu01", "gpu02", "gpu03"]),
    ],
)
def test_expand(expr, hosts):
    assert expand(expr) == hosts


@pytest.mark.parametrize(
    "expr",
    ["n[3-1]", "n[1-3", "n1-3]", "n[]", "n[a]", "n[-1]", "n[1-]", "n[1,]", "n[1-2-3]",
     "n[[1]]", "n[1-2]]", "n[0-999999999]", "a[0-300]b[0-300]", "n[ 1]"],
)
def test_expand_invalid(expr):
    with pytest.raises(InputError) as ei:
        expand(expr)
    assert str(ei.value) == f"Invalid hostlist: {expr}"


def test_expand_limit_exact_boundary():
    assert len(expand(f"n[1-{MAX_HOSTS}]")) == MAX_HOSTS
    with pytest.raises(InputError):
        expand(f"n[1-{MAX_HOSTS}],x")
    with pytest.raises(InputError):
        expand(f"n[0-{MAX_HOSTS}]")


def test_reference_show_hostnames():
    # scontrol show hostnames 'node[1-4],gpu[01-03]'
    lines = (REF / "scontrol_show_hostnames.txt").read_text().split()
    assert expand("node[1-4],gpu[01-03]") == lines


def test_reference_show_hostlist():
    # scontrol show hostlist node1,node2,node3,node7
    text = (REF / "scontrol_show_hostlist.txt").read_text().strip()
    assert compress("node1,node2,node3,node7".split(",")) == text == "node[1-3,7]"


def test_width_compatibility():
    assert compress(["n9", "n10"]) == "n[9-10]"
    assert compress(["n99", "n100"]) == "n[99-100]"
    assert compress(["n01", "n2"]) == "n[01,2]"
    assert compress(["n1", "n01"]) == "n[1,01]"
    assert compress(["n09", "n10"]) == "n[09-10]"
    assert compress(["n9", "n010"]) == "n[9,010]"


def test_compress_misc():
    assert compress([]) == ""
    assert compress(["node5"]) == "node5"
    assert compress(["node05"]) == "node05"
    assert compress(["1", "2"]) == "[1-2]"
    assert compress(["n1", "x", "n2"]) == "n1,x,n2"
    assert compress(iter(["a1", "a2"])) == "a[1-2]"


def test_natural_key():
    names = ["n10", "n2", "n1", "rack10-n1", "rack2-n1", "m5", "n1a"]
    assert sorted(names, key=natural_key) == ["m5", "n1", "n1a", "n2", "n10", "rack2-n1", "rack10-n1"]
    assert natural_key("n01") != natural_key("n1")
    assert sorted(["12ab", "3", "a"], key=natural_key) == ["3", "12ab", "a"]


@pytest.mark.parametrize(
    ("values", "text"),
    [([2, 2, 2, 1], "2(x3),1"), ([4, 4], "4(x2)"), ([1], "1"), ([], ""), ([1, 2, 1], "1,2,1")],
)
def test_counts(values, text):
    assert compress_counts(values) == text
    assert expand_counts(text) == values


def test_expand_counts_plain_and_invalid():
    assert expand_counts("2,2,2,1") == [2, 2, 2, 1]
    assert expand_counts("16(x2)") == [16, 16]
    for bad in ["a", "2(3)", "2(x)", "2(x0)", "-1", "2(x3", "1,,2"]:
        with pytest.raises(InputError):
            expand_counts(bad)
