"""Time limits, durations and dates as Slurm's commands read and print them (cli.md §0).

Standard library only and nothing compiled at import: the CLI imports this module.

Conventions:

* A time limit is an ``int`` number of **minutes**; ``None`` means UNLIMITED.
* A duration/timestamp is an ``int`` number of **seconds** (timestamps: Unix epoch).
* Dates are read and printed in the **local** time zone, like Slurm.
"""

from __future__ import annotations

import time

from muster.common.errors import InputError

__all__ = [
    "fmt_ctime",
    "fmt_duration",
    "fmt_duration_long",
    "fmt_iso",
    "fmt_limit",
    "fmt_limit_long",
    "parse_datetime",
    "parse_time_limit",
]

_UNLIMITED_WORDS = frozenset({"UNLIMITED", "INFINITE", "-1"})


# --------------------------------------------------------------------------- time limits


def _digits(s: str) -> int:
    if not s or not s.isascii() or not s.isdigit():
        raise InputError("Invalid --time specification")
    return int(s)


def parse_time_limit(s: str) -> int | None:
    """Parse a ``-t/--time`` value into minutes; ``None`` means no limit.

    Accepted: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S`` (fields are plain
    decimal numbers of any size, e.g. ``90`` or ``90:00``), and ``UNLIMITED``/``INFINITE``
    (any case) or ``-1`` for no limit. Seconds round **up** to the next minute. A total of 0
    (``0``, ``0:0``) also means no limit, as in Slurm.

    Deviation: Slurm 22.05 silently accepted ``-t -5``; we reject every negative value
    except ``-1`` with ``Invalid --time specification`` because a negative limit has no
    meaning and accepting it only produces a job with a surprising limit.
    """
    if not isinstance(s, str):
        raise InputError("Invalid --time specification")
    text = s.strip()
    if text.upper() in _UNLIMITED_WORDS:
        return None
    if text.count("-") > 1 or text.count(":") > 2:
        raise InputError("Invalid --time specification")
    days_s, dash, rest = text.partition("-")
    if dash:
        days = _digits(days_s)
        fields = [_digits(f) for f in rest.split(":")]
        hours = fields[0]
        minutes = fields[1] if len(fields) > 1 else 0
        seconds = fields[2] if len(fields) > 2 else 0
    else:
        days = 0
        fields = [_digits(f) for f in text.split(":")]
        if len(fields) == 1:
            hours, minutes, seconds = 0, fields[0], 0
        elif len(fields) == 2:
            hours, (minutes, seconds) = 0, fields
        else:
            hours, minutes, seconds = fields
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    mins = -(-total // 60)
    return mins if mins > 0 else None


# --------------------------------------------------------------------------- durations


def fmt_duration(seconds: int | None) -> str:
    """squeue/sinfo style: ``0:00``, ``30:00``, ``1:00:00``, ``1-00:00:00``.

    ``None`` → ``UNLIMITED``; a negative value → ``INVALID``.
    """
    parts = _split_duration(seconds)
    if isinstance(parts, str):
        return parts
    days, hours, minutes, secs = parts
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def _split_duration(seconds: int | None) -> tuple[int, int, int, int] | str:
    """(days, hours, minutes, seconds), or the word shown instead (UNLIMITED, INVALID)."""
    if seconds is None:
        return "UNLIMITED"
    seconds = int(seconds)
    if seconds < 0:
        return "INVALID"
    days, rem = divmod(seconds, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    return days, hours, minutes, secs


def fmt_limit(minutes: int | None, unlimited: str = "UNLIMITED") -> str:
    """A time limit in minutes, squeue/sinfo style (sinfo passes ``unlimited="infinite"``)."""
    if minutes is None:
        return unlimited
    return fmt_duration(int(minutes) * 60)


def fmt_duration_long(seconds: int | None) -> str:
    """sacct/scontrol style: ``00:00:03``, ``01:00:00``, ``1-00:00:00``.

    ``None`` → ``UNLIMITED``; a negative value → ``INVALID``.
    """
    parts = _split_duration(seconds)
    if isinstance(parts, str):
        return parts
    days, hours, minutes, secs = parts
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{hours:02d}:{minutes:02d}:{secs:02d}"


def fmt_limit_long(minutes: int | None) -> str:
    """``TimeLimit=`` of scontrol: ``UNLIMITED`` or ``HH:MM:SS`` / ``D-HH:MM:SS``."""
    if minutes is None:
        return "UNLIMITED"
    return fmt_duration_long(int(minutes) * 60)


# --------------------------------------------------------------------------- dates

_KEYWORD_HOURS = {"midnight": 0, "noon": 12, "elevenses": 11, "fika": 15, "teatime": 16}
_UNIT_SECONDS = (
    ("seconds", 1),
    ("minutes", 60),
    ("hours", 3600),
    ("days", 86400),
    ("weeks", 604800),
)


def _bad_date() -> InputError:
    return InputError("Invalid time specification")


def _mk(year: int, month: int, day: int, hour: int = 0, minute: int = 0, sec: int = 0) -> int:
    """Local time → epoch; ``day`` may overflow (mktime normalises it)."""
    return int(time.mktime((year, month, day, hour, minute, sec, 0, 0, -1)))


def _valid_date(year: int, month: int, day: int) -> bool:
    if not 1 <= month <= 12 or day < 1:
        return False
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return day <= (29 if leap else 28)
    return day <= (30 if month in (4, 6, 9, 11) else 31)


def _num(s: str, min_len: int = 1, max_len: int = 2) -> int:
    if not (min_len <= len(s) <= max_len) or not s.isascii() or not s.isdigit():
        raise _bad_date()
    return int(s)


def _parse_clock(s: str) -> tuple[int, int, int]:
    """``HH:MM[:SS][AM|PM]`` → (hour, minute, second)."""
    low = s.lower()
    meridian = None
    if low.endswith(("am", "pm")):
        meridian = low[-2:]
        low = low[:-2].rstrip()
    parts = low.split(":")
    if len(parts) not in (2, 3):
        raise _bad_date()
    hour = _num(parts[0])
    minute = _num(parts[1], 2)
    sec = _num(parts[2], 2) if len(parts) == 3 else 0
    if meridian is not None:
        if not 1 <= hour <= 12:
            raise _bad_date()
        hour = hour % 12 + (12 if meridian == "pm" else 0)
    if hour > 23 or minute > 59 or sec > 59:
        raise _bad_date()
    return hour, minute, sec


def _year(s: str) -> int:
    if len(s) == 2:
        return 2000 + _num(s)
    return _num(s, 4, 4)


def _parse_delta(rest: str, text: str) -> int:
    """``+N[unit]`` / ``-N[unit]`` after ``now`` → signed seconds."""
    sign = 1 if rest[0] == "+" else -1
    body = rest[1:].strip()
    i = 0
    while i < len(body) and body[i].isdigit() and body[i].isascii():
        i += 1
    if i == 0:
        raise _bad_date()
    count = int(body[:i])
    unit = body[i:].strip().lower()
    factor = 1
    if unit:
        for name, secs in _UNIT_SECONDS:
            if name.startswith(unit) or (unit.endswith("s") and name.startswith(unit[:-1])):
                factor = secs
                break
        else:
            raise _bad_date()
    return sign * count * factor


def parse_datetime(s: str, now: int) -> int:
    """Parse a ``--begin``/``--deadline``/``sacct -S`` time into an epoch (local zone).

    Forms (cli.md §0): ``HH:MM[:SS][AM|PM]`` (tomorrow if already passed today);
    ``MMDD[YY]``, ``MM/DD[/YY]``, ``MM.DD[.YY]`` (midnight; without a year the current
    year, no roll-over, so ``sacct -S 0101`` means this January), each optionally followed
    by ``-HH:MM[:SS]``; ``YYYY-MM-DD[THH:MM[:SS]]``; ``now[{+|-}N[unit]]`` with unit a prefix
    of seconds (default)/minutes/hours/days/weeks; ``today`` and ``tomorrow`` (midnight at the
    start of that day); ``midnight``, ``noon``, ``elevenses`` (11:00), ``fika`` (15:00),
    ``teatime`` (16:00): the next such time at or after ``now``. Two-digit years are 20YY.
    Invalid → ``InputError("Invalid time specification")``.
    """
    if not isinstance(s, str):
        raise _bad_date()
    text = s.strip()
    low = text.lower()
    if not text:
        raise _bad_date()
    lt = time.localtime(now)
    y, mo, d = lt.tm_year, lt.tm_mon, lt.tm_mday

    if low.startswith("now"):
        rest = low[3:].strip()
        if not rest:
            return int(now)
        if rest[0] not in "+-":
            raise _bad_date()
        return int(now) + _parse_delta(rest, text)
    if low == "today":
        return _mk(y, mo, d)
    if low == "tomorrow":
        return _mk(y, mo, d + 1)
    if low in _KEYWORD_HOURS:
        ts = _mk(y, mo, d, _KEYWORD_HOURS[low])
        return ts if ts >= now else _mk(y, mo, d + 1, _KEYWORD_HOURS[low])

    # YYYY-MM-DD[THH:MM[:SS]]
    if len(text) >= 10 and text[4] == "-" and text[7] == "-":
        date_part, sep, clock = text.partition("T")
        parts = date_part.split("-")
        if len(parts) != 3:
            raise _bad_date()
        year, month, day = _num(parts[0], 4, 4), _num(parts[1]), _num(parts[2])
        hour = minute = sec = 0
        if sep:
            if clock.lower().endswith(("am", "pm")):
                raise _bad_date()
            hour, minute, sec = _parse_clock(clock)
        if not _valid_date(year, month, day):
            raise _bad_date()
        return _mk(year, month, day, hour, minute, sec)

    # Time of day only.
    if ":" in text and "/" not in text and "." not in text and "-" not in text:
        hour, minute, sec = _parse_clock(text)
        ts = _mk(y, mo, d, hour, minute, sec)
        return ts if ts >= now else _mk(y, mo, d + 1, hour, minute, sec)

    # Dates: MMDD[YY], MM/DD[/YY], MM.DD[.YY], optional -HH:MM[:SS].
    date_part, dash, clock = text.partition("-")
    hour = minute = sec = 0
    if dash:
        hour, minute, sec = _parse_clock(clock)
    year = y
    if "/" in date_part or "." in date_part:
        sep_char = "/" if "/" in date_part else "."
        parts = date_part.split(sep_char)
        if len(parts) not in (2, 3):
            raise _bad_date()
        month, day = _num(parts[0]), _num(parts[1])
        if len(parts) == 3:
            year = _year(parts[2])
    elif date_part.isascii() and date_part.isdigit() and len(date_part) in (4, 6):
        month, day = int(date_part[:2]), int(date_part[2:4])
        if len(date_part) == 6:
            year = 2000 + int(date_part[4:])
    else:
        raise _bad_date()
    if not _valid_date(year, month, day):
        raise _bad_date()
    return _mk(year, month, day, hour, minute, sec)


def fmt_iso(ts: int | None, unset: str = "Unknown") -> str:
    """``YYYY-MM-DDTHH:MM:SS`` in local time; ``None`` or 0 → ``unset``."""
    if not ts:
        return unset
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts))


def fmt_ctime(ts: int) -> str:
    """ctime-style line printed by ``squeue -l``/``sinfo -l``: ``Sun Nov 29 17:15:39 2026``,
    the day of the month zero-padded (``Sun Dec 06``), as Slurm's strftime pattern prints
    it (asctime would space-pad it)."""
    return time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(ts))
