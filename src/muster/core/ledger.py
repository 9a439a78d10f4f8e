"""The fair-share usage ledger: what each (account, user) has used, decayed on read. Pure.

Usage is charged once, when a job stops holding its allocation (billing × seconds, see
:func:`muster.core.fairshare.charge`), as an entry ``(charged_at, raw)``. Its value at any
later time is ``raw × 2^(-(now - charged_at) / PriorityDecayHalfLife)``: decay is a function
of ``now`` alone, so reading (sshare, sprio, a scheduling snapshot) never changes anything.

Invariant: each key holds ONE folded entry. Exponential decay is linear, so two entries
``(t1, a)`` and ``(t2, b)`` with ``t1 <= t2`` are worth exactly ``(t2, decay(a, t2 - t1) + b)``
at every ``now >= t2``; folding keeps the ledger (and its store table, one row per key)
bounded however many jobs ran. A charge older than the entry is decayed forward to the
entry's time, so the fold stays exact whatever order charges arrive in.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from muster.core.fairshare import decay

Key = tuple[str, str]  # (account, user)


@dataclass(frozen=True)
class Entry:
    charged_at: int
    raw: float


def value(entry: Entry | None, now: int, half_life: int) -> float:
    """The entry's usage at ``now`` (0 for no entry; never decayed backwards in time)."""
    if entry is None:
        return 0.0
    return decay(entry.raw, max(0, now - entry.charged_at), half_life)


def fold(entry: Entry | None, amount: float, at: int, half_life: int) -> Entry:
    """``entry`` with ``amount`` charged at ``at`` added (see the module's invariant)."""
    if entry is None:
        return Entry(at, amount)
    if at >= entry.charged_at:
        return Entry(at, decay(entry.raw, at - entry.charged_at, half_life) + amount)
    return Entry(entry.charged_at, entry.raw + decay(amount, entry.charged_at - at, half_life))


class UsageLedger:
    """Folded entries by (account, user). It holds no store: :meth:`charge` returns the new
    entry and the caller persists it in the transaction of the event that charged it."""

    def __init__(self, half_life: int, entries: dict[Key, Entry] | None = None):
        self.half_life = half_life
        self._entries: dict[Key, Entry] = dict(entries or {})

    def usage(self, key: Key, now: int) -> float:
        return value(self._entries.get(key), now, self.half_life)

    def charge(self, key: Key, amount: float, at: int) -> Entry:
        entry = self._entries[key] = fold(self._entries.get(key), amount, at, self.half_life)
        return entry

    def entry(self, key: Key) -> Entry | None:
        return self._entries.get(key)

    def __iter__(self) -> Iterator[Key]:
        return iter(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)
