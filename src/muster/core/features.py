"""``--constraint`` expressions: parsed once at submit, matched against node features. Pure.

Syntax (Slurm's, sbatch(1) ``--constraint``)::

    expr  := item (op item)*              op: '&' (AND) or '|' (OR)
    item  := atom ['*' COUNT]             COUNT: a positive integer
    atom  := NAME | '(' expr ')' | '[' expr ']'

Meaning, and how it compiles (:func:`parse` → :class:`Constraint`):

* ``a``, ``a&b``, ``a|b``, ``(a|b)&c``: a *per-node predicate*: every allocated node must
  satisfy it; with ``a|b`` each node may satisfy either. Operators are applied left to
  right without precedence, as Slurm evaluates its feature list: ``a|b&c`` = ``(a|b)&c``.
* ``a*2`` (also ``(a&b)*2``): a *count*: at least 2 allocated nodes satisfy ``a``; the other
  nodes need not. Several counts (``[a*2&b*4]``, ``a*2&b*4``) take disjoint nodes, so the
  job gets at least their sum. Counts combine with the rest only by ``&``.
* ``[a|b|c]`` (*matching OR*): all allocated nodes satisfy the same one of the alternatives;
  the alternatives are tried in their written order. At most one such bracket, combined with
  the rest only by ``&``; inside it, only ``|`` between plain items.
* ``[x&y]`` is grouping (used for ``[a*2&b*4]``).

Anything else (nesting brackets, a count inside ``|`` or parentheses, an empty name, a
character outside names and operators, a count of 0) is invalid: :class:`ConstraintError`,
which the controller reports as Slurm's ``Invalid feature specification``.

A compiled constraint is a tuple of :class:`Alternative` (one without a matching OR), each a
predicate every node must satisfy plus counts; predicates are nested tuples
(``("f", name)``, ``("&", l, r)``, ``("|", l, r)``), hashable so that equal requests share
caches. Matching is over a node's *active* features (slurm.conf ``ActiveFeatures``, default
``Features``); a name is valid when some node lists it among its ``Features``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["Alternative", "Constraint", "ConstraintError", "MAX_LENGTH", "parse", "satisfies",
           "unknown_names"]

MAX_LENGTH = 1024  # characters of one expression (Slurm keeps features in a short string)
_OPS = "&|*()[]"
_NAME_BAD = set(_OPS) | set(",!<>=\"'`$\\;") | {" ", "\t", "\n", "\r"}

Pred = tuple[Any, ...]  # ("f", name) | ("&", Pred, Pred) | ("|", Pred, Pred)
# parse tree: ("seq", [item...], [op...]) | ("item", node, count | None) | ("name", str)
# | ("paren", seq) | ("bracket", seq)
Node = tuple[Any, ...]


class ConstraintError(ValueError):
    """The expression is not a valid ``--constraint``."""


@dataclass(frozen=True, slots=True)
class Alternative:
    """Every node satisfies ``pred`` (None: no condition); for each ``(pred, k)`` of
    ``counts``, at least ``k`` further, distinct nodes satisfy that pred."""

    pred: Pred | None
    counts: tuple[tuple[Pred, int], ...] = ()

    @property
    def min_nodes(self) -> int:
        return sum(k for _, k in self.counts)


@dataclass(frozen=True, slots=True)
class Constraint:
    """A parsed ``--constraint``: the alternatives in the order they are tried."""

    text: str
    alternatives: tuple[Alternative, ...]

    @property
    def simple(self) -> bool:
        """Only a per-node condition (no counts, no matching OR): a plain node filter,
        ``alternatives[0].pred``."""
        return len(self.alternatives) == 1 and not self.alternatives[0].counts

    def node_may_serve(self, features: frozenset[str]) -> bool:
        """True if a node with ``features`` could be part of some allocation: it satisfies
        an alternative's predicate (counted nodes must satisfy it too)."""
        return any(satisfies(a.pred, features) for a in self.alternatives)

    def names(self) -> frozenset[str]:
        out: set[str] = set()
        for a in self.alternatives:
            _collect(a.pred, out)
            for p, _ in a.counts:
                _collect(p, out)
        return frozenset(out)


def satisfies(pred: Pred | None, features: frozenset[str]) -> bool:
    """Does a node with ``features`` satisfy ``pred`` (None: always)?"""
    if pred is None:
        return True
    kind = pred[0]
    if kind == "f":
        return pred[1] in features
    if kind == "&":
        return satisfies(pred[1], features) and satisfies(pred[2], features)
    return satisfies(pred[1], features) or satisfies(pred[2], features)


def _collect(pred: Pred | None, out: set[str]) -> None:
    if pred is None:
        return
    if pred[0] == "f":
        out.add(pred[1])
    else:
        _collect(pred[1], out)
        _collect(pred[2], out)


def _and(a: Pred | None, b: Pred | None) -> Pred | None:
    if a is None:
        return b
    if b is None:
        return a
    return ("&", a, b)


# ---- parsing ---------------------------------------------------------------------------------
# The parser produces a small tree: ("item", node, count|None) joined in ("seq", [items], [ops]);
# nodes are ("name", s), ("paren", seq), ("bracket", seq).

def _tokens(text: str) -> list[str]:
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in _OPS:
            out.append(c)
            i += 1
            continue
        j = i
        while j < n and text[j] not in _OPS:
            j += 1
        word = text[i:j]
        if any(ch in _NAME_BAD or not ch.isprintable() for ch in word):
            raise ConstraintError(f"invalid character in feature name {word!r}")
        out.append(word)
        i = j
    return out


class _Parser:
    def __init__(self, toks: list[str]) -> None:
        self.toks, self.i, self.brackets = toks, 0, 0

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> str:
        tok = self.peek()
        if tok is None:
            raise ConstraintError("unexpected end of expression")
        self.i += 1
        return tok

    def seq(self, depth: int) -> Node:
        items, ops = [self.item(depth)], []
        while self.peek() in ("&", "|"):
            ops.append(self.take())
            items.append(self.item(depth))
        return ("seq", items, ops)

    def item(self, depth: int) -> Node:
        tok = self.take()
        node: Node
        if tok == "(":
            node = ("paren", self.seq(depth + 1))
            if self.take() != ")":
                raise ConstraintError("unbalanced parentheses")
        elif tok == "[":
            if depth or self.brackets:
                raise ConstraintError("brackets may appear once, at the top level")
            self.brackets += 1
            node = ("bracket", self.seq(depth + 1))
            if self.take() != "]":
                raise ConstraintError("unbalanced brackets")
        elif tok in _OPS:
            raise ConstraintError(f"unexpected {tok!r}")
        else:
            node = ("name", tok)
        count = None
        if self.peek() == "*":
            self.take()
            num = self.take()
            if not (num.isascii() and num.isdigit()) or int(num) < 1 or int(num) > 1 << 20:
                raise ConstraintError(f"invalid node count {num!r}")
            count = int(num)
        return ("item", node, count)


def _pred_of_seq(seq: Node) -> Pred:
    """A sequence without counts or brackets as one predicate, left to right."""
    _, items, ops = seq
    acc = _pred_of_item(items[0])
    for op, it in zip(ops, items[1:]):
        acc = (op, acc, _pred_of_item(it))
    return acc


def _pred_of_item(item: Node) -> Pred:
    _, node, count = item
    if count is not None:
        raise ConstraintError("a node count may only be combined with '&'")
    if node[0] == "name":
        return ("f", node[1])
    if node[0] == "bracket":
        raise ConstraintError("brackets may appear once, at the top level")
    return _pred_of_seq(node[1])


def _flat_pred(node: Node) -> Pred:
    """The predicate of a counted atom (``a*2``, ``(a&b)*2``): no counts inside."""
    if node[0] == "name":
        return ("f", node[1])
    if node[0] == "bracket":
        raise ConstraintError("a matching OR cannot take a count")
    return _pred_of_seq(node[1])


def _has_structure(seq: Node) -> bool:
    """Counts or brackets at this level (they need '&' around them)."""
    return any(it[2] is not None or it[1][0] == "bracket" for it in seq[1])


def _compile(seq: Node) -> tuple[Alternative, ...]:
    if not _has_structure(seq):
        return (Alternative(_pred_of_seq(seq)),)
    if any(op != "&" for op in seq[2]):
        raise ConstraintError("node counts and [...] combine with the rest only by '&'")
    pred: Pred | None = None
    counts: list[tuple[Pred, int]] = []
    options: list[Pred] | None = None
    for _, node, count in seq[1]:
        if count is not None:
            counts.append((_flat_pred(node), count))
        elif node[0] == "bracket":
            inner = node[1]
            if _has_structure(inner) or all(op == "&" for op in inner[2]):
                if any(op != "&" for op in inner[2]):
                    raise ConstraintError("[...] holds either '|' or '&', not both")
                sub = _compile(inner)
                pred = _and(pred, sub[0].pred)
                counts.extend(sub[0].counts)
            elif any(op != "|" for op in inner[2]):
                raise ConstraintError("[...] holds either '|' or '&', not both")
            else:
                options = [_pred_of_item(it) for it in inner[1]]
        else:
            pred = _and(pred, _flat_pred(node))
    if options is None:
        return (Alternative(pred, tuple(counts)),)
    return tuple(Alternative(_and(pred, o), tuple(counts)) for o in options)


def parse(text: str) -> Constraint:
    """Parse a ``--constraint`` expression (see module doc); raises :class:`ConstraintError`."""
    if not isinstance(text, str):
        raise ConstraintError("not a string")
    text = text.strip()
    if not text or len(text) > MAX_LENGTH:
        raise ConstraintError("empty or too long")
    p = _Parser(_tokens(text))
    seq = p.seq(0)
    if p.peek() is not None:
        raise ConstraintError(f"unexpected {p.peek()!r}")
    return Constraint(text=text, alternatives=_compile(seq))


def unknown_names(c: Constraint, known: Iterable[str]) -> list[str]:
    """Names of ``c`` no node defines (sorted)."""
    return sorted(c.names() - set(known))
