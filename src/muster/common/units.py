"""Memory sizes, counts and TRES strings (cli.md §0; scontrol/sacct TRES display).

Standard library only: the CLI imports this module. Memory is always an ``int`` number of
**megabytes** (MiB, as Slurm's "MB").
"""

from __future__ import annotations

from muster.common.errors import InputError

__all__ = ["fmt_mem", "parse_count", "parse_mem", "tres_string"]

# Multiplier to MB for each suffix; K is handled separately (rounds up).
_MEM_FACTORS = {"M": 1, "G": 1024, "T": 1024 * 1024}
_COUNT_FACTORS = {"K": 1024, "M": 1024 * 1024}
_UNIT_LETTERS = "MGTPE"


def _split_number(s: str) -> tuple[str, str]:
    i = 0
    while i < len(s) and s[i].isascii() and s[i].isdigit():
        i += 1
    return s[:i], s[i:]


def parse_mem(s: str) -> int:
    """``--mem``-style size → MB. ``100``=100 MB, ``4G``, ``2gb``, ``1T``, ``512K`` (K rounds
    up to whole MB: ``1K`` → 1). Non-negative integers only (no fractions, no sign).

    Invalid → ``InputError("Invalid memory specification")``.
    """
    if not isinstance(s, str):
        raise InputError("Invalid memory specification")
    num_s, suffix = _split_number(s.strip())
    if not num_s:
        raise InputError("Invalid memory specification")
    value = int(num_s)
    suffix = suffix.upper()
    if suffix.endswith("B") and len(suffix) == 2:
        suffix = suffix[0]
    if suffix == "":
        return value
    if suffix == "K":
        return -(-value // 1024)
    if suffix in _MEM_FACTORS:
        return value * _MEM_FACTORS[suffix]
    raise InputError("Invalid memory specification")


def parse_count(s: str) -> int:
    """Integer count with optional ``k`` (×1024) or ``m`` (×1048576) suffix, any case.

    Garbage, fractions or negative values → ``InputError``.
    """
    if not isinstance(s, str):
        raise InputError(f"Invalid count specification: {s}")
    text = s.strip()
    num_s, suffix = _split_number(text)
    if not num_s or len(suffix) > 1:
        raise InputError(f"Invalid count specification: {s}")
    value = int(num_s)
    if suffix:
        factor = _COUNT_FACTORS.get(suffix.upper())
        if factor is None:
            raise InputError(f"Invalid count specification: {s}")
        value *= factor
    return value


def fmt_mem(mb: int) -> str:
    """Memory in TRES style: ``500M``, ``1G``, ``8G``, ``62.50G`` (64000 MB), ``250G``, ``2T``.

    Like Slurm's exact unit conversion: move to the next unit while the value is at least
    1024 and its integer part is a multiple of 512 (so at most ``.50`` is left over); whole
    results print without decimals, others with two. 0 → ``0``.
    """
    mb = int(mb)
    if mb == 0:
        return "0"
    num: float = mb
    unit = 0
    while abs(num) >= 1024 and unit < len(_UNIT_LETTERS) - 1 and int(num) % 512 == 0:
        num /= 1024
        unit += 1
    if num == int(num):
        return f"{int(num)}{_UNIT_LETTERS[unit]}"
    return f"{num:.2f}{_UNIT_LETTERS[unit]}"


def tres_string(
    cpu: int,
    mem_mb: int,
    nodes: int | None,
    billing: int | None,
    gres: dict[str, int],
    sort_by_name: bool = False,
) -> str:
    """TRES list: scontrol order ``cpu=1,mem=1G,node=1,billing=1,gres/gpu=2``.

    ``nodes``/``billing`` of None are omitted, and so is every zero count (an idle node's
    ``AllocTRES=`` is empty). Gres keys may be ``gpu`` or ``gres/gpu`` (typed: ``gpu:a100``)
    and keep the dict's order. ``sort_by_name=True`` gives sacct's alphabetical order
    ``billing=1,cpu=1,gres/gpu=2,mem=1G,node=1``.
    """
    items: list[tuple[str, str]] = []
    if cpu:
        items.append(("cpu", str(cpu)))
    if mem_mb:
        items.append(("mem", fmt_mem(mem_mb)))
    if nodes:
        items.append(("node", str(nodes)))
    if billing:
        items.append(("billing", str(billing)))
    for name, count in (gres or {}).items():
        if count:
            key = name if name.startswith("gres/") else f"gres/{name}"
            items.append((key, str(count)))
    if sort_by_name:
        items.sort(key=lambda kv: kv[0])
    return ",".join(f"{k}={v}" for k, v in items)
