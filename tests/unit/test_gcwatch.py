"""The controller's collector (controller.gcwatch): collections counted and timed per
generation while installed; what a full collection kept is frozen at the next tick; a
refresh thaws, collects (cyclic garbage among frozen objects included) and freezes again."""

import gc
import weakref

from muster.controller.gcwatch import GcWatch


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Node:  # a reference cycle: only the collector frees it
    def __init__(self) -> None:
        self.me = self


def test_collections_are_counted_and_timed_per_generation_while_installed():
    w = GcWatch()
    w.install()
    w.install()  # once only
    try:
        assert gc.callbacks.count(w._callback) == 1
        junk = [[i] for i in range(50_000)]  # something for a full collection to walk
        gc.collect(2)
        gc.collect(0)
        r = w.report()
        assert r["gen2"]["collections"] >= 1 and r["gen0"]["collections"] >= 1
        assert r["gen2"]["max_ms"] > 0 and r["gen2"]["total_ms"] >= r["gen2"]["max_ms"]
        del junk
    finally:
        w.uninstall()
    assert w._callback not in gc.callbacks
    before = w.report()["gen2"]["collections"]
    gc.collect(2)
    assert w.report()["gen2"]["collections"] == before  # no longer watching


def test_survivors_of_a_full_collection_are_frozen_and_a_refresh_frees_frozen_cycles():
    clock = Clock()
    w = GcWatch(refresh_s=600, clock=clock)
    w.install()
    try:
        w.tick()  # the first tick refreshes: the state recovered at start-up, frozen
        assert w.report()["refresh"]["collections"] == 1 and gc.get_freeze_count() > 0
        kept = [[i] for i in range(1000)]
        gc.collect(2)
        assert w.freeze_due
        frozen = gc.get_freeze_count()
        clock.t += 1
        w.tick()
        assert not w.freeze_due and gc.get_freeze_count() >= frozen + len(kept)
        # a cycle frozen while alive, then dropped: no collection reaches it ...
        cycle = Node()
        gone = weakref.ref(cycle)
        gc.collect(2)
        clock.t += 1
        w.tick()
        del cycle
        gc.collect(2)
        assert gone() is not None
        # ... until the refresh, which thaws everything, collects and freezes again
        clock.t += 600
        w.tick()
        assert gone() is None and w.report()["refresh"]["collections"] == 2
        assert gc.get_freeze_count() > 0
    finally:
        w.uninstall()
        gc.unfreeze()
