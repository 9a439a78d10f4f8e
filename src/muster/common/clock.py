"""The one clock of a process: wall and monotonic time, real or virtual.

Invariant: no module of the controller, the lifecycle, the core, the store or the simulator
reads the time on its own (tests/unit/test_clock_reads.py scans their source for it). They
read it here, from the clock the process installed at start-up:

  * ``musterctld`` builds a :class:`RealClock` in ``main`` and hands it to the
    :class:`~muster.controller.server.Controller`, which installs it (``install``) and keeps it
    as ``ctl.clock``. Code that holds the controller may use ``ctl.clock``; the many small
    functions that only need "now" call :func:`now`, which reads the installed clock (one
    process runs one controller, so one installed clock is the same thing as the controller's
    clock, without threading a parameter through every call site).
  * Tests and the simulator install a :class:`VirtualClock` and move it with ``advance`` or
    ``set``: time-outs, SlurmdTimeout, reservation roll-overs and time limits then happen at
    the virtual instant, deterministically and without waiting.

``time.perf_counter`` is not a clock in this sense: it measures the cost of our own work
(scheduling pass, commit) for statistics and is never compared with a job's times.

The pure layers (model, lifecycle, core) take ``now`` as an argument and never call this.
"""

from __future__ import annotations

import time as _time
from typing import Protocol


class Clock(Protocol):
    """Wall seconds since the epoch (``time``) and a monotonic reading (``monotonic``) that
    only ever moves forward; durations and rate limits use the latter."""

    def time(self) -> float: ...

    def monotonic(self) -> float: ...


class RealClock:
    """The operating system's clocks."""

    def time(self) -> float:
        return _time.time()

    def monotonic(self) -> float:
        return _time.monotonic()


class VirtualClock:
    """Time that moves only when told. ``monotonic`` advances with ``time`` but never goes
    back, even when ``set`` moves the wall time backwards (as a real clock step would)."""

    def __init__(self, start: float = 1_700_000_000.0):
        self._t = float(start)
        self._mono = 1000.0

    def time(self) -> float:
        return self._t

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> float:
        """Move forward ``seconds`` (>= 0); the new wall time."""
        if seconds < 0:
            raise ValueError("a clock only advances forwards")
        self._t += seconds
        self._mono += seconds
        return self._t

    def set(self, t: float) -> float:
        """Jump the wall time to ``t``; monotonic time moves forward by the jump, if any."""
        self._mono += max(0.0, t - self._t)
        self._t = float(t)
        return self._t


_installed: list[Clock] = [RealClock()]


def install(clock: Clock) -> Clock:
    """Make ``clock`` the process's clock; returns the one it replaces (tests restore it)."""
    prev = _installed[0]
    _installed[0] = clock
    return prev


def current() -> Clock:
    return _installed[0]


def time() -> float:
    """Wall seconds (float) of the installed clock."""
    return _installed[0].time()


def now() -> int:
    """Wall seconds as an integer: every timestamp Muster stores or compares."""
    return int(_installed[0].time())


def monotonic() -> float:
    return _installed[0].monotonic()
