"""Memory/count parsing and TRES display, checked against the 22.05 captures."""

from __future__ import annotations

import pytest

from muster.common.errors import InputError
from muster.common.units import fmt_mem, parse_count, parse_mem, tres_string


@pytest.mark.parametrize(
    ("text", "mb"),
    [
        ("100", 100), ("0", 0), ("8G", 8192), ("8g", 8192), ("8GB", 8192), ("8gb", 8192),
        ("500M", 500), ("500mb", 500), ("1T", 1048576), ("2tb", 2097152), ("1K", 1), ("1024K", 1),
        ("1025k", 2), ("2048KB", 2), ("0K", 0), (" 16G ", 16384),
    ],
)
def test_parse_mem(text, mb):
    assert parse_mem(text) == mb


@pytest.mark.parametrize("text", ["", "abc", "G", "1.5G", "-1", "-1G", "10X", "10B", "10GBB", "10 G", "1P"])
def test_parse_mem_invalid(text):
    with pytest.raises(InputError) as ei:
        parse_mem(text)
    assert str(ei.value) == "Invalid memory specification"


@pytest.mark.parametrize(
    ("text", "n"), [("4", 4), ("0", 0), ("2k", 2048), ("2K", 2048), ("1m", 1048576), ("3M", 3145728)]
)
def test_parse_count(text, n):
    assert parse_count(text) == n


@pytest.mark.parametrize("text", ["", "x", "-1", "1.5", "2g", "2kk", "k"])
def test_parse_count_invalid(text):
    with pytest.raises(InputError):
        parse_count(text)


@pytest.mark.parametrize(
    ("mb", "text"),
    [
        (1024, "1G"), (8192, "8G"), (64000, "62.50G"), (500, "500M"), (256000, "250G"),
        (2097152, "2T"), (4096, "4G"), (9216, "9G"), (1536, "1.50G"), (1000, "1000M"),
        (1600, "1600M"), (0, "0"), (1, "1M"), (1023, "1023M"), (1048576 + 524288, "1.50T"),
    ],
)
def test_fmt_mem(mb, text):
    assert fmt_mem(mb) == text


def test_tres_scontrol_order_matches_reference():
    # scontrol show job TRES= lines
    assert tres_string(1, 1024, 1, 1, {}) == "cpu=1,mem=1G,node=1,billing=1"
    assert tres_string(1, 1024, 1, 1, {"gpu": 2}) == "cpu=1,mem=1G,node=1,billing=1,gres/gpu=2"
    assert tres_string(16, 16384, 2, 16, {"gpu": 16}) == "cpu=16,mem=16G,node=2,billing=16,gres/gpu=16"
    assert tres_string(4, 8192, 1, 4, {"gpu": 4}) == "cpu=4,mem=8G,node=1,billing=4,gres/gpu=4"
    # partition TRES and node CfgTRES/AllocTRES
    assert tres_string(64, 256000, 4, 64, {"gpu": 32}) == "cpu=64,mem=250G,node=4,billing=64,gres/gpu=32"
    assert tres_string(16, 64000, None, 16, {"gpu": 8}) == "cpu=16,mem=62.50G,billing=16,gres/gpu=8"
    assert tres_string(5, 9216, None, None, {"gpu": 5}) == "cpu=5,mem=9G,gres/gpu=5"
    assert tres_string(0, 0, None, None, {"gpu": 0}) == ""  # idle node: AllocTRES=


def test_tres_sacct_order_matches_reference():
    assert (
        tres_string(1, 1024, 1, 1, {"gpu": 2}, sort_by_name=True)
        == "billing=1,cpu=1,gres/gpu=2,mem=1G,node=1"
    )
    assert (tres_string(4, 4096, 2, None, {"gres/gpu": 4}, sort_by_name=True)
            == "cpu=4,gres/gpu=4,mem=4G,node=2")
    assert tres_string(1, 1024, 1, 1, {}, sort_by_name=True) == "billing=1,cpu=1,mem=1G,node=1"
