"""The Python collector in the controller: what its full collections may walk, and how long
each generation's collections held the event loop.

Why: the controller's heap is large and long-lived (jobs, their cached rows and records,
nodes), and a collection of the oldest generation walks every tracked object in it while
nothing else runs on the loop. Measured on 1,024 nodes with 10,000 jobs queued (bench/scale):
15 full collections of ~78 ms each in 400 idle ``squeue``/``sbatch`` calls (a ``squeue`` of
10,000 rows promotes its temporaries, so CPython's own rule, a full collection once the old
generation grew by a quarter, fires again and again), and up to 221 ms while a forked pass
was alive (every page the collector writes is copied then). That is what those commands'
p99 showed.

The policy (:meth:`GcWatch.tick`, once a second on the loop):

* after an automatic full collection, whatever survived it is frozen (``gc.freeze``: moved
  to a generation no collection walks; O(1)). The next full collection walks only what grew
  old since: its pause follows the churn, not the size of the state;
* every ``REFRESH_S`` the frozen objects are thawed and one full collection is made, then
  everything is frozen again: reference cycles that became garbage among frozen objects
  (acyclic garbage is freed by reference counting at once, frozen or not) live at most that
  long. One pause of the old kind every ten minutes instead of several a minute.

The collector stays on, with CPython's thresholds: nothing is left uncollected for long.

The watch is installed for the daemon's life (``Controller.serve``) and removed at its end:
the in-process tests build many controllers in one interpreter. ``diag`` reports the figures
(``gc``); ``bench/scale.py`` prints them.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger("musterctld")

REFRESH_S = 600.0  # a full collection of everything, frozen objects included, this often


class GcWatch:
    """Per generation: collections, their total and longest pause (seconds); and the
    freezing policy of the module docstring."""

    def __init__(self, refresh_s: float = REFRESH_S, clock=time.monotonic) -> None:
        self.stats = [[0, 0.0, 0.0] for _ in range(3)]
        self.refresh_s = refresh_s
        self.clock = clock
        self.freeze_due = False  # an automatic full collection ended since the last tick
        self.refreshes = [0, 0.0, 0.0]  # count, total, longest (seconds)
        self._last_refresh = clock()
        self._t0 = 0.0

    def install(self) -> None:
        """Watch from now on; the first tick makes the first refresh (the state recovered at
        start-up, frozen at once)."""
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)
        self._last_refresh = self.clock() - self.refresh_s

    def uninstall(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        gen = min(2, int(info.get("generation", 2)))
        s = self.stats[gen]
        pause = time.perf_counter() - self._t0
        s[0] += 1
        s[1] += pause
        if pause > s[2]:
            s[2] = pause
        if gen == 2:
            self.freeze_due = True  # not from here: the collector is still running

    def tick(self) -> None:
        """Once a second, on the loop: freeze what the last full collection kept; thaw,
        collect and freeze everything every ``refresh_s``."""
        t = self.clock()
        if t - self._last_refresh >= self.refresh_s:
            self._last_refresh = t
            t0 = time.perf_counter()
            gc.unfreeze()
            gc.collect()
            gc.freeze()
            took = time.perf_counter() - t0
            r = self.refreshes
            r[0] += 1
            r[1] += took
            r[2] = max(r[2], took)
            log.debug("collector: full refresh in %.1f ms, %d objects frozen", took * 1000,
                      gc.get_freeze_count())
            self.freeze_due = False
        elif self.freeze_due:
            self.freeze_due = False
            gc.freeze()

    def report(self) -> dict:
        """``{"gen0": {"collections", "total_ms", "max_ms"}, "gen1": ..., "gen2": ...,
        "refresh": {...}, "frozen": n}`` (``frozen``: objects no collection walks now)."""
        def fmt(s: list) -> dict:  # [count, total s, longest s]
            return {"collections": int(s[0]), "total_ms": round(s[1] * 1000, 3),
                    "max_ms": round(s[2] * 1000, 3)}
        out: dict = {f"gen{g}": fmt(s) for g, s in enumerate(self.stats)}
        out["refresh"] = fmt(self.refreshes)
        out["frozen"] = gc.get_freeze_count()
        return out
