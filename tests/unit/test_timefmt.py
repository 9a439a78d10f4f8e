"""Time-limit parsing, duration display and date parsing (cli.md §0)."""

from __future__ import annotations

import os
import time

import pytest

from muster.common.errors import InputError
from muster.common.timefmt import (
    fmt_ctime,
    fmt_duration,
    fmt_duration_long,
    fmt_iso,
    fmt_limit,
    fmt_limit_long,
    parse_datetime,
    parse_time_limit,
)


@pytest.fixture
def tz():
    """Run with a fixed local zone (Europe/Berlin has DST; falls back to UTC-less CET rule)."""
    old = os.environ.get("TZ")

    def use(zone: str) -> None:
        os.environ["TZ"] = zone
        time.tzset()

    use("CET-1CEST,M3.5.0,M10.5.0/3")
    yield use
    if old is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = old
    time.tzset()


def local(y, mo, d, h=0, mi=0, s=0):
    return int(time.mktime((y, mo, d, h, mi, s, 0, 0, -1)))


# ------------------------------------------------------------------ parse_time_limit


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("10", 10),
        ("90", 90),
        ("10:00", 10),
        ("10:01", 11),  # seconds round up
        ("0:1", 1),
        ("0:59", 1),
        ("1:00:00", 60),
        ("2:00:00", 120),
        ("1:30:30", 91),
        ("1-0", 1440),
        ("2-12", 3600),
        ("1-2:03", 1440 + 120 + 3),
        ("1-2:03:04", 1440 + 120 + 4),
        ("1-0:0:1", 1441),
        (" 30 ", 30),
        ("100000", 100000),
    ],
)
def test_parse_time_limit(text, minutes):
    assert parse_time_limit(text) == minutes


@pytest.mark.parametrize("text", ["UNLIMITED", "unlimited", "INFINITE", "Infinite", "-1", "0", "0:0",
                                  "0-0:0:0"])
def test_parse_time_limit_unlimited(text):
    assert parse_time_limit(text) is None


@pytest.mark.parametrize(
    "text",
    ["abc", "", "-5", "-0", "1:2:3:4", "1-2-3", "1-2:3:4:5", "1:", ":1", "1-", "-", "1.5", "1h",
     "1 0", "+5", "1-:00", "１０"],
)
def test_parse_time_limit_invalid(text):
    with pytest.raises(InputError) as ei:
        parse_time_limit(text)
    assert str(ei.value) == "Invalid --time specification"


# ------------------------------------------------------------------ durations


@pytest.mark.parametrize(
    ("secs", "short", "long"),
    [
        (0, "0:00", "00:00:00"),
        (3, "0:03", "00:00:03"),
        (4, "0:04", "00:00:04"),
        (59, "0:59", "00:00:59"),
        (600, "10:00", "00:10:00"),
        (1800, "30:00", "00:30:00"),
        (3599, "59:59", "00:59:59"),
        (3600, "1:00:00", "01:00:00"),
        (7200, "2:00:00", "02:00:00"),
        (86399, "23:59:59", "23:59:59"),
        (86400, "1-00:00:00", "1-00:00:00"),
        (90061, "1-01:01:01", "1-01:01:01"),
        (12 * 86400, "12-00:00:00", "12-00:00:00"),
        (None, "UNLIMITED", "UNLIMITED"),
        (-1, "INVALID", "INVALID"),
    ],
)
def test_durations(secs, short, long):
    assert fmt_duration(secs) == short
    assert fmt_duration_long(secs) == long


def test_limits_match_reference():
    # squeue -l TIME_LIMIT column / sinfo TIMELIMIT / scontrol TimeLimit= of the captures
    assert fmt_limit(10) == "10:00"
    assert fmt_limit(60) == "1:00:00"
    assert fmt_limit(120) == "2:00:00"
    assert fmt_limit(None) == "UNLIMITED"
    assert fmt_limit(None, unlimited="infinite") == "infinite"
    assert fmt_limit(60, unlimited="infinite") == "1:00:00"
    assert fmt_limit_long(10) == "00:10:00"
    assert fmt_limit_long(60) == "01:00:00"
    assert fmt_limit_long(120) == "02:00:00"
    assert fmt_limit_long(None) == "UNLIMITED"
    assert fmt_limit_long(1440) == "1-00:00:00"


def test_limit_roundtrip():
    for text in ["10", "1:00:00", "2-03:04:00", "59"]:
        m = parse_time_limit(text)
        assert parse_time_limit(fmt_limit(m)) == m
        assert parse_time_limit(fmt_limit_long(m)) == m


# ------------------------------------------------------------------ dates


def test_iso_and_ctime(tz):
    ts = local(2026, 11, 29, 17, 15, 39)
    assert fmt_iso(ts) == "2026-11-29T17:15:39"
    assert fmt_ctime(ts) == "Sun Nov 29 17:15:39 2026"
    # Slurm 22.05's squeue -l / sinfo -l zero-pad the day ("Sun Dec 06 17:53:55 2026")
    assert fmt_ctime(local(2026, 11, 1, 9, 5, 7)) == "Sun Nov 01 09:05:07 2026"
    assert fmt_iso(0) == "Unknown"
    assert fmt_iso(None) == "Unknown"
    assert fmt_iso(None, unset="None") == "None"
    tz("UTC0")
    assert fmt_iso(ts) == "2026-11-29T16:15:39"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", (2026, 11, 29, 17, 15, 39)),
        ("NOW", (2026, 11, 29, 17, 15, 39)),
        ("now+60", (2026, 11, 29, 17, 16, 39)),
        ("now+1hour", (2026, 11, 29, 18, 15, 39)),
        ("now+2hours", (2026, 11, 29, 19, 15, 39)),
        ("now+10minutes", (2026, 11, 29, 17, 25, 39)),
        ("now+10min", (2026, 11, 29, 17, 25, 39)),
        ("now+30seconds", (2026, 11, 29, 17, 16, 9)),
        ("now+1days", (2026, 11, 30, 17, 15, 39)),
        ("now+1weeks", (2026, 12, 6, 17, 15, 39)),
        ("now-1day", (2026, 11, 28, 17, 15, 39)),
        ("today", (2026, 11, 29, 0, 0, 0)),
        ("tomorrow", (2026, 11, 30, 0, 0, 0)),
        ("midnight", (2026, 11, 30, 0, 0, 0)),
        ("noon", (2026, 11, 30, 12, 0, 0)),  # 12:00 already passed → tomorrow
        ("elevenses", (2026, 11, 30, 11, 0, 0)),
        ("fika", (2026, 11, 30, 15, 0, 0)),
        ("teatime", (2026, 11, 30, 16, 0, 0)),
        ("18:00", (2026, 11, 29, 18, 0, 0)),
        ("18:00:30", (2026, 11, 29, 18, 0, 30)),
        ("10:00", (2026, 11, 30, 10, 0, 0)),  # passed → next day
        ("6:00PM", (2026, 11, 29, 18, 0, 0)),
        ("6:00pm", (2026, 11, 29, 18, 0, 0)),
        ("12:00AM", (2026, 11, 30, 0, 0, 0)),
        ("12:30PM", (2026, 11, 30, 12, 30, 0)),
        ("1225", (2026, 12, 25, 0, 0, 0)),
        ("122527", (2027, 12, 25, 0, 0, 0)),
        ("0101", (2026, 1, 1, 0, 0, 0)),  # no year → this year, no roll-over
        ("12/25", (2026, 12, 25, 0, 0, 0)),
        ("12/25/27", (2027, 12, 25, 0, 0, 0)),
        ("1/5/27", (2027, 1, 5, 0, 0, 0)),
        ("12.25", (2026, 12, 25, 0, 0, 0)),
        ("12.25.27", (2027, 12, 25, 0, 0, 0)),
        ("12/25-10:30", (2026, 12, 25, 10, 30, 0)),
        ("2026-12-25", (2026, 12, 25, 0, 0, 0)),
        ("2026-12-25T10:30", (2026, 12, 25, 10, 30, 0)),
        ("2026-12-25T10:30:15", (2026, 12, 25, 10, 30, 15)),
        ("2024-02-29", (2024, 2, 29, 0, 0, 0)),
        ("2026-07-01T12:00:00", (2026, 7, 1, 12, 0, 0)),  # summer time resolves via mktime
    ],
)
def test_parse_datetime(tz, text, expected):
    now = local(2026, 11, 29, 17, 15, 39)
    assert parse_datetime(text, now) == local(*expected)


def test_parse_datetime_exactly_now_is_today(tz):
    now = local(2026, 11, 29, 12, 0, 0)
    assert parse_datetime("noon", now) == now
    assert parse_datetime("12:00", now) == now


def test_parse_datetime_iso_roundtrip(tz):
    now = local(2026, 11, 29, 17, 15, 39)
    for ts in [now, now + 86400 * 200, local(2026, 3, 29, 3, 30)]:
        assert parse_datetime(fmt_iso(ts), now) == ts


@pytest.mark.parametrize(
    "text",
    ["", "bogus", "now+", "now+x", "now+5fortnights", "now5", "25:00", "10:60", "10:00:60",
     "13:00PM", "0:00AM", "1340", "0230", "1332", "13/01", "2/30", "2026-13-01", "2026-02-29",
     "2026-12-25T25:00", "2026-12-25X", "12/25/2", "12-25", "123", "2026/12/25/1", "10"],
)
def test_parse_datetime_invalid(tz, text):
    with pytest.raises(InputError) as ei:
        parse_datetime(text, local(2026, 11, 29, 17, 15, 39))
    assert str(ei.value) == "Invalid time specification"
