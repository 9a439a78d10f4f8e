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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .snapshot import SwitchView

__all__ = ["Topology"]


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
                pick, used = [], 0
                for nm in sorted(leaves, key=lambda nm: (-len(leaves[nm]), nm)):
                    pick += leaves[nm][: k - len(pick)]
                    used += 1
                    if len(pick) == k:
                        break
            if best is None or used < best[0]:
                best = (used, root, pick)
        if best is None or (max_leaves is not None and best[0] > max_leaves):
            return None
        return best[2]
