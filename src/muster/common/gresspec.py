"""GRES/TRES request specs: the one parser of ``--gres``, ``--gpus``-style counts and the REST
API's ``tres_per_*`` strings, and the one shape check of a parsed request the controller
receives. Standard library only (the CLI imports it on every sbatch/srun).

Vocabulary:

* a *gres list* is ``[{"name": str, "type": str | None, "count": int}, ...]`` — what
  ``--gres=gpu:a100:2,shard:1`` means, per node;
* a *typed count* is ``{"type": str | None, "count": int}`` — what ``--gpus=a100:4`` (or
  ``--gpus-per-task``, or one item of ``--gpus-per-node``) means.

Reading rules (as Slurm's): a ``gres/`` or ``gres:`` prefix is dropped; ``none`` is the empty
list; a single non-numeric qualifier is a type with count 1 (``gpu:abc``: the controller then
refuses the unknown type); a count takes ``k``/``m`` suffixes; an empty element, more than
three fields, or a non-numeric count after a type is malformed. Callers turn
:class:`GresSpecError` into their own message (the CLI's exit code, HTTP 400, ``invalid_gres``).
"""

from __future__ import annotations

from muster.common.errors import InputError
from muster.common.units import parse_count

__all__ = ["GresSpecError", "count_of", "parse_gres", "parse_typed_count", "valid_gres_list",
           "valid_typed_count"]

MAX_GRES_ITEMS = 16  # entries of one request's gres list the controller accepts


class GresSpecError(ValueError):
    """A malformed GRES/TRES spec (the text is the spec)."""


def count_of(s: str) -> int | None:
    """A count with an optional k/m suffix, or None when ``s`` is not a count."""
    if not s or not s[0].isdigit():
        return None
    try:
        return parse_count(s)
    except (InputError, ValueError):
        return None


def parse_gres(value: str) -> list[dict[str, object]]:
    """``name[:type][:count][,...]`` → a gres list; ``none`` → ``[]``."""
    s = value.strip()
    if s.lower() == "none":
        return []
    out: list[dict[str, object]] = []
    for item in s.split(","):
        item = item.strip()
        if item.startswith("gres/"):
            item = item[5:]
        if item.startswith("gres:"):
            item = item[5:]
        parts = item.split(":")
        if not parts[0] or len(parts) > 3 or any(p == "" for p in parts):
            raise GresSpecError(value)
        gtype: str | None = None
        count: int | None = 1
        if len(parts) == 2:
            count = count_of(parts[1])
            if count is None:
                gtype, count = parts[1], 1
        elif len(parts) == 3:
            gtype, count = parts[1], count_of(parts[2])
            if count is None:
                raise GresSpecError(value)
        out.append({"name": parts[0], "type": gtype, "count": count})
    return out


def parse_typed_count(value: str) -> dict[str, object]:
    """``[gpu:][type:]N`` (or a bare type, count 1) → a typed count."""
    s = value.strip()
    parts = s.split(":")
    if parts and parts[0] == "gpu" and len(parts) > 1:
        parts = parts[1:]
    if not s or len(parts) > 2 or any(p == "" for p in parts):
        raise GresSpecError(value)
    if len(parts) == 1:
        c = count_of(parts[0])
        return {"type": parts[0], "count": 1} if c is None else {"type": None, "count": c}
    c = count_of(parts[1])
    if c is None:
        raise GresSpecError(value)
    return {"type": parts[0], "count": c}


def _int_ok(v: object, max_count: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) <= max_count


def _type_ok(v: object) -> bool:
    return v is None or isinstance(v, str)


def valid_gres_list(gres: object, max_count: int) -> bool | None:
    """The shape check of a gres list as received on the wire (any client may send it): None
    when it is not a list of at most MAX_GRES_ITEMS, False when an item is malformed, else
    True. ``count`` may be absent (1)."""
    if not isinstance(gres, list) or len(gres) > MAX_GRES_ITEMS:
        return None
    return all(isinstance(g, dict) and isinstance(g.get("name"), str)
               and _int_ok(g.get("count", 1), max_count) and _type_ok(g.get("type"))
               for g in gres)


def valid_typed_count(g: object, max_count: int) -> bool:
    """The shape check of a typed count as received on the wire."""
    return isinstance(g, dict) and _int_ok(g.get("count"), max_count) and _type_ok(g.get("type"))
