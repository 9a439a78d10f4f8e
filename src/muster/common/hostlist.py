"""Hostlist expressions: expansion, compression and natural ordering (spec: hostlist.md).

Standard library only and nothing compiled at import: the CLI imports this module.

Invariants:

* ``expand`` keeps the order written and keeps duplicates; it never builds more than
  ``MAX_HOSTS`` names from one expression (the size is computed *before* expanding, so a
  hostile ``n[0-999999999]`` is refused without allocating anything).
* ``compress`` preserves input order and duplicates (``scontrol show hostlist``), so
  ``expand(compress(hosts)) == list(hosts)`` for any sequence of valid host names.
* ``compress_sorted`` sorts ranges (natural prefix order, then number/width) and merges
  adjacent ones, but still keeps duplicates (``scontrol show hostlistsorted``).
* ``expand_counts(compress_counts(v)) == list(v)``.
"""

from __future__ import annotations

from muster.common.errors import InputError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing would pull in re
if TYPE_CHECKING:  # annotations only; keeps collections.abc off the CLI import path
    from collections.abc import Iterable, Sequence

__all__ = [
    "MAX_HOSTS",
    "compress",
    "compress_counts",
    "compress_sorted",
    "expand",
    "int_ranges",
    "expand_counts",
    "natural_key",
]

#: Most host names one expression may expand to (Slurm refuses > 64k hosts in a range).
MAX_HOSTS = 65536

_SEPARATORS = frozenset(", \t\n")
_DIGITS = frozenset("0123456789")


def _invalid(expr: str) -> InputError:
    return InputError(f"Invalid hostlist: {expr}")


# --------------------------------------------------------------------------- expansion


def _split_items(expr: str) -> list[str]:
    """Split at top-level separators (commas/whitespace outside brackets)."""
    items: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(expr):
        if ch == "[":
            if depth:  # nested brackets are not part of the grammar
                raise _invalid(expr)
            depth = 1
        elif ch == "]":
            if not depth:
                raise _invalid(expr)
            depth = 0
        elif depth == 0 and ch in _SEPARATORS:
            if i > start:
                items.append(expr[start:i])
            start = i + 1
    if depth:
        raise _invalid(expr)
    if start < len(expr):
        items.append(expr[start:])
    return items


def _parse_ranges(body: str, expr: str) -> list[tuple[int, int, int]]:
    """Parse the inside of one ``[...]`` into ``(lo, hi, width)`` triples."""
    out: list[tuple[int, int, int]] = []
    for part in body.split(","):
        lo_s, dash, hi_s = part.partition("-")
        if not lo_s or not set(lo_s) <= _DIGITS:
            raise _invalid(expr)
        if dash:
            if not hi_s or not set(hi_s) <= _DIGITS:
                raise _invalid(expr)
            lo, hi = int(lo_s), int(hi_s)
            if lo > hi:
                raise _invalid(expr)
        else:
            lo = hi = int(lo_s)
        out.append((lo, hi, len(lo_s)))
    return out


def _parse_item(item: str, expr: str) -> list[str | list[tuple[int, int, int]]]:
    """Split one item into literal text and bracket groups (already bracket-balanced)."""
    segments: list[str | list[tuple[int, int, int]]] = []
    pos = 0
    while True:
        open_at = item.find("[", pos)
        if open_at < 0:
            if pos < len(item):
                segments.append(item[pos:])
            return segments
        close_at = item.find("]", open_at)  # balance was checked by _split_items
        if open_at > pos:
            segments.append(item[pos:open_at])
        segments.append(_parse_ranges(item[open_at + 1 : close_at], expr))
        pos = close_at + 1


def _group_size(group: list[tuple[int, int, int]]) -> int:
    return sum(hi - lo + 1 for lo, hi, _ in group)


def _expand_segments(segments: list) -> list[str]:
    """Cartesian product of the segments, left-most group varying slowest."""
    names = [""]
    for seg in segments:
        if isinstance(seg, str):
            names = [n + seg for n in names]
            continue
        values: list[str] = []
        for lo, hi, width in seg:
            values.extend(str(v).zfill(width) for v in range(lo, hi + 1))
        names = [n + v for n in names for v in values]
    return names


def expand(expr: str) -> list[str]:
    """Expand a hostlist expression into host names, in order, duplicates kept.

    ``expand("rack[1-2]-n[01-02],x")`` → ``['rack1-n01', 'rack1-n02', 'rack2-n01',
    'rack2-n02', 'x']``. A suffix after ``]`` is accepted (23.11+ behaviour). Raises
    ``InputError("Invalid hostlist: <expr>")`` on bad syntax, ``lo > hi``, or when the
    expression would produce more than ``MAX_HOSTS`` names.
    """
    if not isinstance(expr, str):
        raise _invalid(str(expr))
    total = 0
    parsed = []
    for item in _split_items(expr):
        segments = _parse_item(item, expr)
        size = 1
        for seg in segments:
            if not isinstance(seg, str):
                size *= _group_size(seg)
                if size > MAX_HOSTS:
                    raise _invalid(expr)
        total += size
        if total > MAX_HOSTS:
            raise _invalid(expr)
        parsed.append(segments)
    hosts: list[str] = []
    for segments in parsed:
        hosts.extend(_expand_segments(segments))
    return hosts


# --------------------------------------------------------------------------- compression


def _split_host(name: str) -> tuple[str, int | None, int]:
    """``prefix, number, width``; number is None when the name has no trailing digits."""
    i = len(name)
    while i > 0 and name[i - 1] in _DIGITS:
        i -= 1
    if i == len(name):
        return name, None, 0
    digits = name[i:]
    return name[:i], int(digits), len(digits)


def _pad(num: int, width: int) -> int:
    """Number of leading zeros ``num`` gets when printed zero-padded to ``width``."""
    return max(0, width - len(str(num)))


def _width_merge(n: int, wn: int, m: int, wm: int) -> int | None:
    """Width under which ``n`` (width wn) and ``m`` (width wm) print as written, or None.

    Equal widths are compatible. Otherwise one side may adopt the other's width if that
    does not change how its own number is padded (``9``/``10`` → width 1 works for both;
    ``01``/``2`` has no common width).
    """
    if wn == wm:
        return wn
    if _pad(n, wm) == _pad(n, wn):
        return wm
    if _pad(m, wn) == _pad(m, wm):
        return wn
    return None


class _Range:
    """A run of hosts ``prefix + lo..hi`` printed with zero padding ``width``.

    A host without trailing digits is a range with ``lo is None`` (printed verbatim).
    """

    __slots__ = ("prefix", "lo", "hi", "width")

    def __init__(self, prefix: str, lo: int | None, hi: int | None, width: int):
        self.prefix = prefix
        self.lo = lo
        self.hi = hi
        self.width = width

    def text(self) -> str:
        if self.lo == self.hi:
            return str(self.lo).zfill(self.width)
        return f"{str(self.lo).zfill(self.width)}-{str(self.hi).zfill(self.width)}"


def _iter_hosts(hosts: Iterable[str]) -> Iterable[str]:
    """Host names; an element that is itself an expression is expanded first."""
    if isinstance(hosts, str):
        hosts = [hosts]
    for h in hosts:
        if not h:
            continue
        if "[" in h or "]" in h or any(c in _SEPARATORS for c in h):
            yield from expand(h)
        else:
            yield h


def _build_ranges(hosts: Iterable[str]) -> list[_Range]:
    ranges: list[_Range] = []
    for host in _iter_hosts(hosts):
        prefix, num, width = _split_host(host)
        last = ranges[-1] if ranges else None
        if (
            num is not None
            and last is not None
            and last.lo is not None
            and last.hi is not None  # lo and hi are None together
            and last.prefix == prefix
            and num == last.hi + 1
        ):
            merged = _width_merge(last.lo, last.width, num, width)
            if merged is not None:
                last.hi = num
                last.width = merged
                continue
        ranges.append(_Range(prefix, num, num, width))
    return ranges


def _render(ranges: list[_Range]) -> str:
    out: list[str] = []
    i = 0
    while i < len(ranges):
        r = ranges[i]
        if r.lo is None:
            out.append(r.prefix)
            i += 1
            continue
        j = i + 1
        while j < len(ranges) and ranges[j].lo is not None and ranges[j].prefix == r.prefix:
            j += 1
        run = ranges[i:j]
        if len(run) == 1 and r.lo == r.hi:
            out.append(r.prefix + r.text())
        else:
            out.append(r.prefix + "[" + ",".join(x.text() for x in run) + "]")
        i = j
    return ",".join(out)


def compress(hosts: Iterable[str]) -> str:
    """Order-preserving compression, as ``scontrol show hostlist`` prints it.

    ``['tux3', 'tux1', 'tux2']`` → ``tux[3,1-2]``; duplicates are kept (``n[1,1]``).
    Elements that are expressions (contain brackets/separators) are expanded first, and a
    plain ``str`` argument is treated as one expression.
    """
    return _render(_build_ranges(hosts))


def _cmp_ranges(a: _Range, b: _Range) -> int:
    ka, kb = natural_key(a.prefix), natural_key(b.prefix)
    if ka != kb:
        return -1 if ka < kb else 1
    if a.lo is None or b.lo is None:
        if a.lo is None and b.lo is None:
            return 0
        return -1 if a.lo is None else 1
    if _width_merge(a.lo, a.width, b.lo, b.width) is not None:
        if a.lo != b.lo:
            return -1 if a.lo < b.lo else 1
        ahi, bhi = a.hi or 0, b.hi or 0  # not None: lo and hi are None together
        return (ahi > bhi) - (ahi < bhi)
    return -1 if a.width < b.width else 1


def compress_sorted(hosts: Iterable[str]) -> str:
    """Like ``scontrol show hostlistsorted``: sort ranges, merge adjacent ones, keep dups.

    ``['n1', 'm1', 'n2']`` → ``m1,n[1-2]``; ``node01,node02,node3`` → ``node[3,01-02]``.
    """
    from functools import cmp_to_key  # lazy: only sorted output needs it

    ranges = sorted(_build_ranges(hosts), key=cmp_to_key(_cmp_ranges))
    merged: list[_Range] = []
    for r in ranges:
        last = merged[-1] if merged else None
        if (
            last is not None
            and r.lo is not None
            and last.lo is not None
            and last.hi is not None
            and last.prefix == r.prefix
            and r.lo == last.hi + 1
        ):
            width = _width_merge(last.lo, last.width, r.lo, r.width)
            if width is not None:
                last.hi = r.hi
                last.width = width
                continue
        merged.append(r)
    return _render(merged)


# --------------------------------------------------------------------------- ordering


def natural_key(name: str) -> tuple:
    """Sort key ordering digit runs numerically: ``n2 < n10``, ``rack2-n1 < rack10-n1``.

    The key is ``(parts, name)`` where ``parts`` alternates text and integers (always text
    at even positions), so keys of any two names are comparable; ``name`` breaks ties
    (``n01`` vs ``n1``) deterministically.
    """
    parts: list[str | int] = []
    text_start = 0
    i = 0
    n = len(name)
    while i < n:
        if name[i] in _DIGITS:
            j = i
            while j < n and name[j] in _DIGITS:
                j += 1
            parts.append(name[text_start:i])
            parts.append(int(name[i:j]))
            text_start = i = j
        else:
            i += 1
    parts.append(name[text_start:])
    return (tuple(parts), name)


# --------------------------------------------------------------------------- counts


def int_ranges(values: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``: distinct integers, sorted, consecutive runs as ``a-b``
    (the kernel's cpuset list format, and Slurm's for task and CPU ids)."""
    ids = sorted(set(values))
    out, i = [], 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(out)


def compress_counts(values: Sequence[int]) -> str:
    """``[2, 2, 2, 1]`` → ``2(x3),1`` (SLURM_TASKS_PER_NODE format); ``[]`` → ``''``."""
    out: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j < len(values) and values[j] == values[i]:
            j += 1
        run = j - i
        out.append(f"{values[i]}(x{run})" if run > 1 else str(values[i]))
        i = j
    return ",".join(out)


def expand_counts(s: str) -> list[int]:
    """Parse ``2(x3),1`` or ``2,2,2,1`` into ``[2, 2, 2, 1]``.

    Raises ``InputError`` on malformed input or a total beyond ``MAX_HOSTS`` entries.
    """
    s = s.strip()
    if not s:
        return []
    err = InputError(f"Invalid count specification: {s}")
    out: list[int] = []
    for item in s.split(","):
        item = item.strip()
        value_s, paren, rest = item.partition("(")
        if not value_s.isdigit() or not value_s.isascii():
            raise err
        repeat = 1
        if paren:
            if not (rest.startswith("x") and rest.endswith(")")):
                raise err
            rep_s = rest[1:-1]
            if not rep_s.isdigit() or not rep_s.isascii() or int(rep_s) < 1:
                raise err
            repeat = int(rep_s)
        if len(out) + repeat > MAX_HOSTS:
            raise err
        out.extend([int(value_s)] * repeat)
    return out
