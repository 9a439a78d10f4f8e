"""Requests that change many jobs, applied in slices (issue 17: the controller never stalls).

A request naming 10,000 jobs (``scontrol hold`` / ``release`` of a list, ``scancel -u``) was
one commit of ~1 s on the event loop — ~100 µs a job: the job machine, the record, the
store's write — and every other request (a ``squeue``, an agent's report) waited behind it.
:func:`each_job` applies the first :data:`SLICE` jobs at once, in the commit that holds the
request's own checks, so a request of up to SLICE jobs is exactly what it was (one commit,
answered at once); the rest go in commits of SLICE with the loop free between them, and the
reply is then a coroutine the dispatcher awaits (``muster.controller.server``): the client
still hears once every job is done.

Invariants:

* Every job is resolved and checked before any changes (the caller's ``start``, inside the
  first commit): a refusal still refuses the whole request, and changes nothing.
* Each job's change commits together with its effects' dispatch (the applier flushes after
  each commit). A crash between slices leaves the earlier slices done and the later ones
  not, as if the request had been cut short; its retry (same request id) runs it again, and
  hold, release and cancel converge (doing one twice leaves the same state).
* Between slices anything may happen to the jobs still to do (a pass starts one, a user
  cancels another, an admin holds a third). Each is judged again just before its change
  (``recheck``, and the job machine's own refusal): one that no longer qualifies is
  skipped, as if this request had come after that change.
* Without a running event loop (the in-process harness, tools) the slices commit back to
  back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from muster.common.errors import MusterError
from muster.lifecycle import jobfsm

__all__ = ["SLICE", "each_job"]

SLICE = 256  # jobs per commit: ~25 ms of the loop at ~100 µs a job

T = TypeVar("T")
Reply = dict[str, Any]


def each_job(ctl, start: Callable[[], list[T]], apply: Callable[[T], None],
             finish: Callable[[], Reply],
             recheck: Callable[[T], bool] | None = None) -> Reply | Coroutine[Any, Any, Reply]:
    """``apply(item)`` for every item ``start()`` names, then ``finish()``'s reply — or, when
    more than one slice is left for a running loop, a coroutine that returns it. ``start``
    runs inside the first commit (it resolves, checks and may split array tasks); its first
    SLICE items are applied in that commit too. ``recheck(item)``: whether an item of a later
    slice still qualifies (False: skipped)."""
    with ctl.applier.transaction():
        items = start()
        for item in items[:SLICE]:
            apply(item)
    rest = items[SLICE:]
    if not rest:
        return finish()
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop to give back to: commit the slices back to back
        for i in range(0, len(rest), SLICE):
            _slice(ctl, rest[i:i + SLICE], apply, recheck)
        return finish()
    return _sliced(ctl, rest, apply, finish, recheck)


async def _sliced(ctl, rest: list[T], apply: Callable[[T], None], finish: Callable[[], Reply],
                  recheck: Callable[[T], bool] | None) -> Reply:
    for i in range(0, len(rest), SLICE):
        await asyncio.sleep(0)  # requests and reports queued meanwhile go first
        _slice(ctl, rest[i:i + SLICE], apply, recheck)
    return finish()


def _slice(ctl, items: list[T], apply: Callable[[T], None],
           recheck: Callable[[T], bool] | None) -> None:
    with ctl.applier.transaction():
        for item in items:
            if recheck is not None and not recheck(item):
                continue
            try:
                apply(item)
            except (MusterError, jobfsm.Refused):
                continue  # changed meanwhile so that this request no longer applies to it
