"""Fault injection for the crash-safety tests (tests/integration/test_controller_crash.py).

With ``MUSTER_CRASH_AT=<point>:<n>`` in the controller's environment, the n-th time execution
reaches ``crash_point(<point>)`` the process dies at once (``os._exit``, as a SIGKILL would
leave it). Points: ``after_start_commit`` (starts committed, launches not yet sent: the
applier, before it dispatches a committed start), ``before_end_commit`` (an agent reported an
end, nothing committed yet)."""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger("musterctld")
_CRASH: dict[str, Any] = {}


def crash_point(name: str) -> None:
    """Die here if MUSTER_CRASH_AT names this point (see the module). Costs one dict lookup
    otherwise."""
    spec = _CRASH.get("spec")
    if spec is None:
        raw = os.environ.get("MUSTER_CRASH_AT", "")
        point, _, n = raw.partition(":")
        spec = _CRASH["spec"] = (point, int(n) if n.isdigit() else 1) if raw else ("", 0)
    if spec[0] != name:
        return
    _CRASH[name] = _CRASH.get(name, 0) + 1
    if _CRASH[name] >= spec[1]:
        log.warning("MUSTER_CRASH_AT=%s reached: exiting now", name)
        os._exit(137)
