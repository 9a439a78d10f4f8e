"""Filename pattern expansion (cli.md §2)."""

from __future__ import annotations

import pytest

from muster.common.patterns import expand_pattern, has_node_pattern

BASE = dict(job_id=42, user="alice", name="train", node="node3")


@pytest.mark.parametrize(
    ("pattern", "out"),
    [
        ("slurm-%j.out", "slurm-42.out"),
        ("%%", "%"),
        ("100%%-%j", "100%-42"),
        ("%J", "42"),  # batch step: no .step
        ("%A_%a", "42_4294967294"),  # not an array (matches slurm-48_4294967294.out capture)
        ("%s", "batch"),
        ("%t-%n", "0-0"),
        ("%N", "node3"),
        ("%u/%x", "alice/train"),
        ("%5j", "00042"),
        ("%05j", "00042"),
        ("%1j", "42"),
        ("%20j", "0000000042"),  # width capped at 10
        ("%3N", "node3"),  # width ignored for strings
        ("%q%z", "%q%z"),  # unknown codes verbatim
        ("%5q", "%5q"),
        ("end%", "end%"),
        ("%", "%"),
        ("a\\%j", "a%j"),  # a backslash disables substitution
        ("\\slurm-%j\\.out", "slurm-%j.out"),
        ("", ""),
        ("plain.txt", "plain.txt"),
    ],
)
def test_batch_codes(pattern, out):
    assert expand_pattern(pattern, **BASE) == out


def test_array_codes():
    kw = dict(job_id=51, array_job_id=48, array_task_id=3, user="u", name="sweep")
    assert expand_pattern("arr_%A_%a.out", **kw) == "arr_48_3.out"
    assert expand_pattern("%j", **kw) == "51"
    assert expand_pattern("%4a", **kw) == "0003"
    assert expand_pattern("slurm-%A_%a.out", job_id=7, array_job_id=7, array_task_id=0) == "slurm-7_0.out"


def test_step_codes():
    kw = dict(job_id=42, step="0", task=3, node_index=1, node="node2")
    assert expand_pattern("%J", **kw) == "42.0"
    assert expand_pattern("%s", **kw) == "0"
    assert expand_pattern("%3s", **kw) == "000"
    assert expand_pattern("out-%j-%t-%n-%N", **kw) == "out-42-3-1-node2"
    assert expand_pattern("%2t", **kw) == "03"
    assert expand_pattern("%J", job_id=42, step="interactive") == "42.interactive"


def test_node_left_for_agent():
    kw = dict(job_id=42, user="alice", name="train")
    assert expand_pattern("%N-%j.out", **kw) == "%N-42.out"
    assert expand_pattern("%j.out", **kw) == "42.out"
    assert expand_pattern("%j%%.out", **kw) == "42%.out"  # no %N → result is final
    # with %N the partial result is a pattern again: literal % are doubled
    partial = expand_pattern("%N-100%%-%q", **kw)
    assert partial == "%N-100%%-%%q"
    assert expand_pattern(partial, job_id=0, node="n1") == expand_pattern("%N-100%%-%q", **kw, node="n1")
    assert expand_pattern(partial, job_id=0, node="n1") == "n1-100%-%q"
    pct = dict(job_id=42, user="al%jce", name="x")
    assert expand_pattern(expand_pattern("%u@%N", **pct), job_id=9, node="n2") == "al%jce@n2"


@pytest.mark.parametrize(
    ("pattern", "yes"),
    [("%N", True), ("a-%N.out", True), ("%4N", True), ("%%N", False), ("%%%N", True),
     ("\\%N", False), ("%n", False), ("%j", False), ("", False)],
)
def test_has_node_pattern(pattern, yes):
    assert has_node_pattern(pattern) is yes
