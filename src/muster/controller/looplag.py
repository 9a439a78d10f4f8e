"""How late the controller's event loop runs what is due: its stalls, as a request sees them;
and how long each kind of request takes once the loop has it.

Every request is handled on the one event loop, so a request that arrives while the loop is
busy (a slice of a pass applied, a collection, a large ``squeue`` reply built) waits until it
is free. :class:`LoopLag` measures that wait directly: a task asks to be woken every
``PERIOD_S`` and records how late it is woken (the loop's lag). :class:`RequestTimes` keeps,
per operation, the time from the start of its handling to its reply handed to the socket
(not the client's reading of it). Their recent samples give medians, p99s and maxima — what
``diag`` reports and ``bench/scale.py`` prints next to the commands' own latencies, so a slow
command can be told apart from a stalled loop or a slow handler (a command that is slow
while neither is waited for the CPU, in its own process: starting Python, say).

Cost: one wake-up every 5 ms, a few microseconds each (<0.2 % of a core); two clock reads and
a deque append per request.
"""

from __future__ import annotations

import asyncio
import collections
import time

PERIOD_S = 0.005  # the probe's interval
KEEP = 12_000  # samples kept (a minute at PERIOD_S, less while the loop stalls)


class Window:
    """``samples``: (when, value) of the last ``keep`` values noted (monotonic seconds,
    seconds), and the largest since start (or the last reset)."""

    def __init__(self, clock=time.monotonic, keep: int = KEEP) -> None:
        self.clock = clock
        self.samples: collections.deque[tuple[float, float]] = collections.deque(maxlen=keep)
        self.worst = 0.0

    def add(self, when: float, value: float) -> None:
        self.samples.append((when, value))
        if value > self.worst:
            self.worst = value

    def report(self, window_s: float = 20.0) -> dict:
        """The values of the last ``window_s`` seconds (ms): samples, median, p99, max; and
        the largest since start."""
        since = self.clock() - window_s
        vals = sorted(v for when, v in self.samples if when >= since)
        out: dict = {"window_s": window_s, "samples": len(vals),
                     "worst_ms": round(self.worst * 1000, 3)}
        if vals:
            def at(q: float) -> float:
                return round(vals[min(len(vals) - 1, int(q * len(vals)))] * 1000, 3)
            out.update(p50_ms=at(0.5), p99_ms=at(0.99), max_ms=round(vals[-1] * 1000, 3))
        return out

    def reset(self) -> None:
        self.worst = 0.0


class LoopLag(Window):
    """The loop's lag: how late the probe's wake-ups came."""

    async def run(self) -> None:
        """Sample until cancelled (``Controller.serve``)."""
        while True:
            due = self.clock() + PERIOD_S
            await asyncio.sleep(PERIOD_S)
            self.note(due, self.clock())

    def note(self, due: float, woke: float) -> None:
        self.add(woke, max(0.0, woke - due))


class RequestTimes:
    """Per operation, a :class:`Window` of its requests' handling times (from the handler's
    start to the reply handed to the socket; an operation that waits, such as an allocation,
    counts its wait). Operations are the wire's names; unknown ones are not kept (a client could
    otherwise make a window per name it invents)."""

    KEEP = 2000  # per operation

    def __init__(self, known, clock=time.monotonic) -> None:
        self.known = known  # container of the operation names kept
        self.clock = clock
        self.ops: dict[str, Window] = {}

    def note(self, op, seconds: float) -> None:
        if type(op) is not str or op not in self.known:  # any JSON value may come as "op"
            return
        w = self.ops.get(op)
        if w is None:
            w = self.ops[op] = Window(self.clock, self.KEEP)
        w.add(self.clock(), seconds)

    def report(self, window_s: float = 20.0) -> dict:
        """{op: :meth:`Window.report`} for the operations seen in the last ``window_s``."""
        out = {}
        for op, w in sorted(self.ops.items()):
            rep = w.report(window_s)
            if rep["samples"]:
                out[op] = rep
        return out

    def reset(self) -> None:
        for w in self.ops.values():
            w.reset()
