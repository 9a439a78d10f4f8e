"""topology/tree: choose nodes under as few leaf switches as possible.

Contract: :class:`Topology` is built from ``SwitchView`` records (leaf switches list
``nodes``, inner switches list ``switches``) and the timeline's node positions.
:meth:`Topology.select` gets the nodes that fit at one time, best fit first, and returns
``k`` of them:

* never across disconnected fabrics (different root switches); nodes under no switch
  are each their own fabric;
* within one fabric, a single leaf that holds ``k`` (the one with the fewest fitting
  nodes, ties by switch name) beats several; otherwise leaves are taken by most fitting
  nodes first (ties by name), so the number of leaves is minimal for that fabric; the
  fabric needing the fewest leaves wins (ties by its first switch name);
* ``--switches=N``: more than ``N`` leaves is refused (None) until the job has waited
  ``wait`` seconds since it became eligible; then anything goes.

Deterministic: only names and positions order the choice.

topology/block (:class:`Blocks`, Slurm 23.11): base blocks in their configured order and
planning sizes ``block_sizes`` (nodes; the first is the base block size). An aggregate of
size ``s`` is ``s / base`` consecutive base blocks, aligned (blocks ``i*m .. i*m+m-1``).
:meth:`Blocks.select` takes the smallest size with an aggregate that holds ``k`` fitting
nodes, in it the aggregate with the fewest fitting nodes (best fit, ties by first block),
and in that aggregate the fewest blocks (one block if one holds ``k``, the one with the
fewest fitting nodes; else the fullest first, the last one swapped for the smallest that
covers the remainder). A job larger than every aggregate takes the fewest blocks of the
whole set. ``--switches=N`` caps the number of base blocks as it caps leaves for the tree.
Nodes in no block are each their own block, outside every aggregate.

Both classes answer two questions: :meth:`select` (``k`` of the nodes fitting at one time,
for the timeline's fixed-shape search) and, through :func:`place_on`, the general one: a
placement of any request shape (packing ``-n``, ``--gpus``, ``-w``, preemption's check) on
the fewest groups, trying one group at a time, then the fullest groups together.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from .snapshot import NodeView, SwitchView

__all__ = ["Blocks", "Topology", "build", "place_on"]


class Topology:
    __slots__ = ("leaf_of", "root_of")

    def __init__(self, switches: Sequence[SwitchView], pos: Mapping[str, int]) -> None:
        by_name = {s.name: s for s in switches}
        parent: dict[str, str] = {}
        for s in switches:
            for c in s.switches:
                parent.setdefault(c, s.name)
        self.leaf_of: dict[int, str] = {}
        self.root_of: dict[str, str] = {}
        for s in sorted(switches, key=lambda s: s.name):
            root, seen = s.name, set()
            while root in parent and root not in seen:
                seen.add(root)
                root = parent[root]
            self.root_of[s.name] = root
            for nm in s.nodes:
                p = pos.get(nm)
                if p is not None and p not in self.leaf_of:
                    self.leaf_of[p] = s.name
        del by_name

    def leaves(self, ps: Sequence[int]) -> int:
        """Number of distinct leaf switches under nodes ``ps``."""
        return len({self.leaf_of.get(p, f"\0{p}") for p in ps})

    def select(self, k: int, fitting: Sequence[tuple[Any, ...]], max_leaves: int | None = None
               ) -> list[int] | None:
        """``k`` positions from ``fitting`` (entries ending with the position, best first)."""
        fabrics: dict[str, dict[str, list[int]]] = {}
        for e in fitting:
            p = e[-1]
            leaf = self.leaf_of.get(p)
            if leaf is None:
                leaf = root = f"\0{p:012d}"
            else:
                root = self.root_of[leaf]
            fabrics.setdefault(root, {}).setdefault(leaf, []).append(p)
        best: tuple[int, str, list[int]] | None = None
        for root in sorted(fabrics):
            leaves = fabrics[root]
            if sum(len(v) for v in leaves.values()) < k:
                continue
            single = [(len(v), nm) for nm, v in leaves.items() if len(v) >= k]
            if single:
                _, nm = min(single)
                pick, used = leaves[nm][:k], 1
            else:
                pick, used = _fewest(leaves, k)
            if best is None or used < best[0]:
                best = (used, root, pick)
        if best is None or (max_leaves is not None and best[0] > max_leaves):
            return None
        return best[2]


def _fewest(groups: Mapping[str, list[int]], k: int) -> tuple[list[int], int]:
    """``k`` positions from the fewest ``groups`` (name → fitting positions, best first,
    together holding at least ``k``): the fullest groups first (ties by name), the last one
    swapped for the smallest unused group that covers the remainder (best fit). The count
    is minimal: no fewer groups can hold ``k`` when the fullest ``m - 1`` cannot."""
    order = sorted(groups, key=lambda nm: (-len(groups[nm]), nm))
    total, m = 0, 0
    while total < k:
        total += len(groups[order[m]])
        m += 1
    head = order[: m - 1]
    rest = k - sum(len(groups[nm]) for nm in head)
    last = min((len(groups[nm]), nm) for nm in order[m - 1:] if len(groups[nm]) >= rest)[1]
    pick: list[int] = []
    for nm in head:
        pick += groups[nm]
    return pick + groups[last][:rest], m


class Blocks:
    """topology/block (module doc): base blocks by position and the planning sizes."""

    __slots__ = ("leaf_of", "index", "sizes", "base", "count")

    def __init__(self, blocks: Sequence[SwitchView], sizes: Sequence[int],
                 pos: Mapping[str, int]) -> None:
        self.leaf_of: dict[int, str] = {}
        self.index: dict[str, int] = {}
        for i, b in enumerate(blocks):
            self.index[b.name] = i
            for nm in b.nodes:
                p = pos.get(nm)
                if p is not None and p not in self.leaf_of:
                    self.leaf_of[p] = b.name
        self.count = len(blocks)
        self.base = max(1, sizes[0]) if sizes else max((len(b.nodes) for b in blocks), default=1)
        self.sizes = tuple(sizes) or (self.base,)

    def leaves(self, ps: Sequence[int]) -> int:
        """Number of distinct blocks under nodes ``ps``."""
        return len({self.leaf_of.get(p, f"\0{p}") for p in ps})

    def select(self, k: int, fitting: Sequence[tuple[Any, ...]], max_leaves: int | None = None
               ) -> list[int] | None:
        """``k`` positions from ``fitting`` (entries ending with the position, best first)."""
        groups: dict[str, list[int]] = {}
        for e in fitting:
            p = e[-1]
            groups.setdefault(self.leaf_of.get(p, f"\0{p:012d}"), []).append(p)
        if sum(len(v) for v in groups.values()) < k:
            return None
        by_index: dict[int, list[int]] = {self.index[nm]: v for nm, v in groups.items()
                                          if nm in self.index}
        chosen: dict[str, list[int]] = groups
        for s in self.sizes:
            m = max(1, s // self.base)
            best: tuple[int, int] | None = None
            for a in sorted({i - i % m for i in by_index}):
                n = sum(len(by_index.get(i, ())) for i in range(a, a + m))
                if n >= k and (best is None or (n, a) < best):
                    best = (n, a)
            if best is not None:
                a = best[1]
                chosen = {nm: v for nm, v in groups.items()
                          if nm in self.index and a <= self.index[nm] < a + m}
                break
        pick, used = _fewest(chosen, k)
        if max_leaves is not None and used > max_leaves:
            return None
        return pick


Grouping = Topology | Blocks
_RANK = 1 << 40  # above any slurm.conf Weight: a leaf's rank outweighs node weights
_A = TypeVar("_A")


def build(switches: Sequence[SwitchView], blocks: Sequence[SwitchView],
          block_sizes: Sequence[int], pos: Mapping[str, int]) -> Grouping | None:
    """The snapshot's topology over timeline positions ``pos``: blocks win when both are
    given (a shell sets one of them); None without either."""
    if blocks:
        return Blocks(blocks, block_sizes, pos)
    if switches:
        return Topology(switches, pos)
    return None


def place_on(topo: Grouping, views: Sequence[NodeView], pos: Mapping[str, int],
             place: Callable[[Sequence[NodeView]], _A | None], max_leaves: int | None = None
             ) -> _A | None:
    """``place`` (one request's placement on some nodes, None when it does not fit) on the
    fewest groups of ``topo``: each group alone (fewest usable nodes first, ties by name:
    best fit), then the ``m`` fullest groups of one fabric together, for ``m = 2, 3, ...``;
    a job never spans fabrics (trees) and never more than ``max_leaves`` groups before its
    wait is over. With several groups their nodes are ranked (fullest group first) through
    ``NodeView.weight``, which leads placement's node choice: the fullest fill first.
    Cost: one placement per group, then one per ``m``: ``O(groups)`` placements of at most
    all ``views``."""
    fabrics: dict[str, dict[str, list[NodeView]]] = {}
    for v in views:
        p = pos.get(v.name)
        leaf = topo.leaf_of.get(p) if p is not None else None
        if leaf is None:
            leaf = root = f"\0{v.index:012d}"
        else:
            root = topo.root_of[leaf] if isinstance(topo, Topology) else ""
        fabrics.setdefault(root, {}).setdefault(leaf, []).append(v)
    singles = sorted((len(vs), nm, root) for root, lv in fabrics.items() for nm, vs in lv.items())
    for _, nm, root in singles:
        got = place(fabrics[root][nm])
        if got is not None:
            return got
    best: tuple[int, _A] | None = None
    for root in sorted(fabrics):
        lv = fabrics[root]
        order = sorted(lv, key=lambda nm: (-len(lv[nm]), nm))
        cap = len(order) if max_leaves is None else min(len(order), max_leaves)
        acc = list(lv[order[0]]) if order else []
        for m in range(2, cap + 1):
            # the m-th fullest leaf's nodes weigh more, so the placement fills the fullest
            # leaves first (weight leads node choice; the views are this search's copies)
            acc += [replace(v, weight=v.weight + (m - 1) * _RANK) for v in lv[order[m - 1]]]
            if best is not None and m >= best[0]:
                break
            got = place(acc)
            if got is not None:
                best = (m, got)
                break
    return best[1] if best is not None else None
