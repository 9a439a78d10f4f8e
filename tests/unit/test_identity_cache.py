"""The controller's account lookups (muster.controller.state.identity) are reused for a minute
per (uid, gid), forgotten by reconfigure, and never shared with callers by reference."""

from __future__ import annotations

import os

from muster.common import clock as clocks
from muster.controller import state


def test_identity_is_looked_up_once_a_minute_and_forgotten_on_request(monkeypatch):
    calls = []
    real = state._lookup_identity
    monkeypatch.setattr(state, "_lookup_identity",
                        lambda uid, gid: calls.append((uid, gid)) or real(uid, gid))
    prev = clocks.current()
    clock = clocks.VirtualClock(1_800_000_000)
    clocks.install(clock)
    try:
        state.forget_identities()
        uid = os.getuid()
        first = state.identity(uid)
        assert state.identity(uid) == first and len(calls) == 1
        state.identity(uid, 12345)  # another (uid, gid): its own entry
        assert calls == [(uid, None), (uid, 12345)]
        first["groups"].append(-1)  # the caller's copy: the cached entry is untouched
        assert -1 not in state.identity(uid)["groups"] and len(calls) == 2
        clock.advance(state.IDENTITY_TTL_S - 1)
        state.identity(uid)
        assert len(calls) == 2
        clock.advance(2)  # past the minute: looked up again
        assert state.identity(uid)["user"] == first["user"] and len(calls) == 3
        state.forget_identities()
        state.identity(uid)
        assert len(calls) == 4
    finally:
        clocks.install(prev)
        state.forget_identities()
