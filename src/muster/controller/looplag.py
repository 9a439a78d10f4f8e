"""How late the controller's event loop runs what is due: its stalls, as a request sees them.

Every request is handled on the one event loop, so a request that arrives while the loop is
busy (a slice of a pass applied, a collection, a large ``squeue`` reply built) waits until it
is free. :class:`LoopLag` measures that wait directly: a task asks to be woken every
``PERIOD_S`` and records how late it is woken (the loop's lag). Its recent samples give the
lag's median, p99 and maximum — what ``diag`` reports and ``bench/scale.py`` prints next to
the commands' own latencies, so a slow command can be told apart from a stalled loop (a
request that is slow while the loop never stalled waited for the CPU, not for the loop).

Cost: one wake-up every 5 ms, a few microseconds each (<0.2 % of a core).
"""

from __future__ import annotations

import asyncio
import collections
import time

PERIOD_S = 0.005  # the probe's interval
KEEP = 12_000  # samples kept (a minute at PERIOD_S, less while the loop stalls)


class LoopLag:
    """``samples``: (when, lag) of the last KEEP wake-ups (monotonic seconds, seconds)."""

    def __init__(self, clock=time.monotonic) -> None:
        self.clock = clock
        self.samples: collections.deque[tuple[float, float]] = collections.deque(maxlen=KEEP)
        self.worst = 0.0  # since start (or the last diag_reset)

    async def run(self) -> None:
        """Sample until cancelled (``Controller.serve``)."""
        while True:
            due = self.clock() + PERIOD_S
            await asyncio.sleep(PERIOD_S)
            self.note(due, self.clock())

    def note(self, due: float, woke: float) -> None:
        lag = max(0.0, woke - due)
        self.samples.append((woke, lag))
        if lag > self.worst:
            self.worst = lag

    def report(self, window_s: float = 20.0) -> dict:
        """The lag over the last ``window_s`` seconds (ms): samples, median, p99, max; and the
        largest since start."""
        since = self.clock() - window_s
        lags = sorted(lag for when, lag in self.samples if when >= since)
        out: dict = {"window_s": window_s, "samples": len(lags),
                     "worst_ms": round(self.worst * 1000, 3)}
        if lags:
            def at(q: float) -> float:
                return round(lags[min(len(lags) - 1, int(q * len(lags)))] * 1000, 3)
            out.update(p50_ms=at(0.5), p99_ms=at(0.99), max_ms=round(lags[-1] * 1000, 3))
        return out

    def reset(self) -> None:
        self.worst = 0.0
