"""Fair-share: association tree, usage, decay, Fair Tree and classic factors, sshare.

Contract (scheduling.md §5):

* The tree is root → accounts → users, from ``AssocView`` records (an account's
  ``parent`` None = under root; a user association's parent is its account). ``shares``
  -1 means ``Fairshare=parent``: the user competes with its account's siblings as if it
  were the account (approximated as the parent's shares here).
* Usage: :func:`billing` (Σ TRESBillingWeights × alloc, default = CPUs; ``MAX_TRES``:
  max of the weighted TRES), :func:`charge` = billing × seconds × QOS UsageFactor;
  usage of a node = own raw usage + its descendants' (:func:`tree`).
* Decay: :func:`decay` ``usage · 2^(−elapsed/half_life)``; half-life 0 = no decay.
* Fair Tree (:func:`fair_tree`): among siblings ``LevelFS = S/U`` with
  ``S = shares/Σ shares``, ``U = usage/Σ usage`` (∞ when U = 0); depth-first visit with
  siblings by LevelFS descending; users ranked in visit order from ``n_users`` down;
  ``factor = rank / n_users``. Ties: users with equal LevelFS share a rank; accounts with
  equal LevelFS have their children merged before descending; in a tie, users are
  visited before the merged children of accounts. Sibling order among equals: name.
* Classic (:func:`classic`, ``NO_FAIR_TREE``): ``F = 2^(−UE/S/damping)`` with normalized
  shares S (product down the path) and effective usage UE.
* :func:`sshare` returns the ``sshare -l`` rows (RawShares NormShares RawUsage
  EffectvUsage FairShare LevelFS) in tree order.

Pure functions of their arguments (floats computed in a fixed order).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .snapshot import AssocView

__all__ = ["Node", "ShareRow", "billing", "charge", "classic", "decay", "fair_tree",
           "level_fs", "sshare", "tree"]

INF = math.inf


def decay(usage: float, elapsed: int, half_life: int) -> float:
    """``usage`` after ``elapsed`` seconds with PriorityDecayHalfLife ``half_life``."""
    if half_life <= 0 or elapsed <= 0:
        return usage
    factor: float = 2.0 ** (-elapsed / half_life)
    return usage * factor


def billing(tres: Mapping[str, float], weights: Mapping[str, float] | None = None,
            max_tres: bool = False) -> float:
    """TRESBillingWeights applied to an allocation; no weights → its CPUs."""
    if not weights:
        return float(tres.get("cpu", 0))
    vals = [w * tres.get(t, 0) for t, w in sorted(weights.items())]
    if not vals:
        return 0.0
    return max(vals) if max_tres else sum(vals)


def charge(tres: Mapping[str, float], seconds: int, weights: Mapping[str, float] | None = None,
           usage_factor: float = 1.0, max_tres: bool = False) -> float:
    """Raw usage one job adds over ``seconds`` (TRES-seconds weighted by billing)."""
    return billing(tres, weights, max_tres) * seconds * usage_factor


@dataclass(slots=True)
class Node:
    key: tuple[str, str | None]  # (account, None) or (account, user); root = ("root", None)
    shares: int
    raw: float  # own raw usage
    usage: float = 0.0  # subtree usage
    children: list[Node] = field(default_factory=list)
    parent: Node | None = None

    @property
    def is_user(self) -> bool:
        return self.key[1] is not None

    @property
    def name(self) -> str:
        return self.key[1] if self.key[1] is not None else self.key[0]


def tree(assocs: Iterable[AssocView]) -> Node:
    """Build the tree (children sorted by (is_user, name)) and sum subtree usage."""
    assocs = list(assocs)
    root_rec = next((a for a in assocs if a.key == ("root", None)), None)
    root = Node(("root", None), 1, root_rec.raw_usage if root_rec else 0.0, children=[])
    nodes: dict[tuple[str, str | None], Node] = {("root", None): root}
    for a in assocs:
        if a.key != ("root", None):
            nodes[a.key] = Node(a.key, a.shares, a.raw_usage, children=[])
    for a in assocs:
        if a.key == ("root", None):
            continue
        node = nodes[a.key]
        pkey = (a.account, None) if a.user is not None else (a.parent or "root", None)
        parent = nodes.get(pkey, root)
        if parent is node:
            parent = root
        node.parent = parent
        parent.children.append(node)

    def finish(n: Node) -> float:
        n.children.sort(key=lambda c: (c.is_user, c.name))
        for c in n.children:
            if c.shares < 0:  # Fairshare=parent
                c.shares = n.shares if n.shares > 0 else 1
        n.usage = n.raw + sum(finish(c) for c in n.children)
        return n.usage

    finish(root)
    return root


def level_fs(node: Node) -> float:
    """LevelFS of ``node`` among its siblings (∞ when the siblings have no usage)."""
    sibs = node.parent.children if node.parent is not None else [node]
    tot_s = sum(s.shares for s in sibs)
    tot_u = sum(s.usage for s in sibs)
    S = node.shares / tot_s if tot_s > 0 else 0.0
    U = node.usage / tot_u if tot_u > 0 else 0.0
    if U == 0.0:
        return INF
    return S / U


def fair_tree(assocs: Iterable[AssocView] | Node) -> dict[tuple[str, str], float]:
    """Fair Tree factor per user association ``(account, user)``."""
    root = assocs if isinstance(assocs, Node) else tree(assocs)
    users: list[Node] = []

    def count(n: Node) -> None:
        for c in n.children:
            if c.is_user:
                users.append(c)
            else:
                count(c)

    count(root)
    n_users = len(users)
    out: dict[tuple[str, str], float] = {}
    if not n_users:
        return out
    rank = [n_users]

    def visit(siblings: list[Node]) -> None:
        lfs = {id(s): level_fs(s) for s in siblings}
        groups: dict[float, list[Node]] = {}
        for s in siblings:
            groups.setdefault(lfs[id(s)], []).append(s)
        for v in sorted(groups, reverse=True):
            grp = groups[v]
            tied_users = [s for s in grp if s.is_user]
            for u in tied_users:
                out[(u.key[0], u.name)] = rank[0] / n_users  # (a user: name is key[1])
            rank[0] -= len(tied_users)
            merged = [c for s in grp if not s.is_user for c in s.children]
            if merged:
                visit(merged)

    visit(root.children)
    return out


def classic(assocs: Iterable[AssocView] | Node, damping: float = 1.0) -> dict[tuple[str, str], float]:
    """Classic (pre-Fair-Tree) factor per user association: ``2^(−UE/S/damping)``."""
    root = assocs if isinstance(assocs, Node) else tree(assocs)
    total = root.usage
    out: dict[tuple[str, str], float] = {}

    def walk(n: Node, s_par: float, ue_par: float | None) -> None:
        tot_s = sum(c.shares for c in n.children)
        for c in n.children:
            frac = c.shares / tot_s if tot_s > 0 else 0.0
            S = s_par * frac
            UA = c.usage / total if total > 0 else 0.0
            UE = UA if ue_par is None else UA + (ue_par - UA) * frac
            if c.is_user:
                out[(c.key[0], c.name)] = 2.0 ** (-UE / S / damping) if S > 0 else 0.0
            walk(c, S, UE)

    walk(root, 1.0, None)
    return out


@dataclass(frozen=True, slots=True)
class ShareRow:
    account: str
    user: str
    raw_shares: int
    norm_shares: float
    raw_usage: float
    effectv_usage: float
    fairshare: float | None
    level_fs: float


def sshare(assocs: Iterable[AssocView], algorithm: str = "fair_tree",
           damping: float = 1.0) -> list[ShareRow]:
    """``sshare -l`` rows in tree order (root first)."""
    root = tree(assocs)
    factors = fair_tree(root) if algorithm == "fair_tree" else classic(root, damping)
    rows: list[ShareRow] = []
    total = root.usage

    def walk(n: Node) -> None:
        sibs = n.parent.children if n.parent is not None else [n]
        tot_s = sum(s.shares for s in sibs)
        rows.append(ShareRow(
            account=n.key[0], user=n.key[1] or "", raw_shares=n.shares,
            norm_shares=n.shares / tot_s if tot_s > 0 else 0.0,
            raw_usage=n.usage, effectv_usage=n.usage / total if total > 0 else 0.0,
            fairshare=factors.get((n.key[0], n.name)) if n.is_user else None,
            level_fs=level_fs(n) if n.parent is not None else INF,
        ))
        for c in n.children:
            walk(c)

    walk(root)
    return rows
