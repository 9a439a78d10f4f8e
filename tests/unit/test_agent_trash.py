"""The agent's trash of retired spool directories is emptied once the node is quiet (no
launch for TRASH_QUIET_S), or at once when TRASH_MAX directories wait: deleting during a burst
of launches competes with them (muster.agent.daemon.Agent._purge_trash)."""

from __future__ import annotations

import asyncio
import os
import time

from muster.agent import daemon


def bare_agent(tmp_path, monkeypatch, **limits) -> tuple[daemon.Agent, str]:
    """An Agent with only what the trash needs (no config, no links), its trash directory
    under ``tmp_path``, and the trash's limits (TRASH_QUIET_S 0.1 s, and ``limits``) set."""
    monkeypatch.setattr(daemon, "TRASH_QUIET_S", 0.1)
    for name, value in limits.items():
        monkeypatch.setattr(daemon, name, value)
    trash = tmp_path / "trash"
    trash.mkdir()
    a = object.__new__(daemon.Agent)
    a.trash = str(trash)
    a._purging = False
    a._trashed = 0
    a._last_launch = 0.0
    return a, str(trash)


def retire(a: daemon.Agent, spool: str, n: int) -> None:
    for i in range(n):
        d = os.path.join(spool, f"job{i}.0")
        os.makedirs(os.path.join(d, "sub"))
        with open(os.path.join(d, "status.json"), "w") as fh:
            fh.write("{}")
        a._discard(d)


async def until_empty(path: str, timeout: float = 5.0) -> float:
    """Seconds until ``path`` is empty (the loop keeps running meanwhile)."""
    t0 = time.monotonic()
    while os.listdir(path):
        assert time.monotonic() - t0 < timeout, f"{path} still holds {os.listdir(path)}"
        await asyncio.sleep(0.01)
    return time.monotonic() - t0


def test_trash_waits_while_jobs_are_launched(tmp_path, monkeypatch):
    a, trash = bare_agent(tmp_path, monkeypatch)

    async def scenario():
        retire(a, str(tmp_path), 3)
        assert sorted(os.listdir(trash)) == ["job0.0", "job1.0", "job2.0"]
        busy_until = time.monotonic() + 0.5
        while time.monotonic() < busy_until:  # a launch every 20 ms: never quiet
            a._last_launch = time.monotonic()
            await asyncio.sleep(0.02)
        assert len(os.listdir(trash)) == 3
        await until_empty(trash)  # quiet now: emptied
    asyncio.run(scenario())


def test_a_full_trash_is_emptied_even_while_busy(tmp_path, monkeypatch):
    a, trash = bare_agent(tmp_path, monkeypatch, TRASH_MAX=3)

    async def scenario():
        retire(a, str(tmp_path), 3)

        async def keep_launching():
            while True:
                a._last_launch = time.monotonic()
                await asyncio.sleep(0.02)
        launching = asyncio.create_task(keep_launching())
        try:
            await until_empty(trash)
        finally:
            launching.cancel()
    asyncio.run(scenario())
