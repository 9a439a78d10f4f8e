"""Answer a retried request with its first reply (issue 16: clients ride through a restart).

A client that lost its connection before the reply resends the request with the same
request id (muster.common.requestid). Invariants:

* **A submission and its request id commit together.** ``submit`` runs inside one store
  transaction that also records (uid, rid) -> reply, so after a crash either both the job
  and the id are in the store (the retry gets the first job id) or neither is (the retry
  submits). No window exists in which a retry could create a second job.
* **Other changing operations** (cancel, hold, update, sacctmgr...) keep their own commits
  and effects order (a commit before any message to an agent), and their reply is recorded
  in a transaction of its own right after: a crash between the two re-runs the operation on
  retry. Each of them converges (cancelling or holding twice leaves the same state), so the
  worst case is a different reply text, never a second effect.
* **Ids are per user.** A reply is found only under the uid that made it, so an id seen by
  someone else cannot fetch another user's reply or block their request.
* Refusals are not recorded: a refused request changed nothing, and its retry is judged
  afresh. Records expire after KEEP_S (far beyond any client's retry budget), and a user
  keeps at most KEEP_PER_UID of them (trimmed each minute, oldest first): a hostile user's
  flood costs the store a bounded number of rows, and only that user's oldest requests lose
  their exactly-once answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from muster.common import clock
from muster.common.requestid import changes_state, valid_rid
from muster.controller.state import now

log = logging.getLogger("musterctld")

KEEP_S = 3600
KEEP_PER_UID = 10_000  # replies kept per user (trimmed every PURGE_EVERY_S)
PURGE_EVERY_S = 60.0
ATOMIC = frozenset({"submit"})  # ops whose handler is safe to run inside the outer transaction
_last_purge: dict[int, float] = {}


def run(ctl, handler, msg: dict, uid: int, gid: int) -> dict | Coroutine[Any, Any, object]:
    """``handler(ctl, msg, uid, gid)``'s reply, or the remembered reply of an earlier delivery
    of the same request (same uid and request id); a coroutine for a request applied in
    slices (controller.bulk)."""
    rid = msg.get("rid")
    if not isinstance(rid, str) or not valid_rid(rid) or not changes_state(msg):
        return handler(ctl, msg, uid, gid)
    store = ctl.state.store
    first = store.recall_request(uid, rid)
    if first is not None:
        log.info("uid %d repeated request %s (%s): answered with its first reply", uid, rid,
                 msg.get("op"))
        return first
    if msg.get("op") in ATOMIC:
        with store.transaction():
            reply = handler(ctl, msg, uid, gid)
            _remember(store, uid, rid, reply)
        return reply
    reply = handler(ctl, msg, uid, gid)
    if asyncio.iscoroutine(reply):  # applied in slices (controller.bulk): remembered when done
        return _remembered(store, uid, rid, reply)
    with store.transaction():
        _remember(store, uid, rid, reply)
    return reply


async def _remembered(store, uid: int, rid: str, pending) -> object:
    reply = await pending
    with store.transaction():
        _remember(store, uid, rid, reply)
    return reply


def _remember(store, uid: int, rid: str, reply: object) -> None:
    if not isinstance(reply, dict):
        return  # the dispatcher answers it as an internal error; nothing to repeat
    t = now()
    store.remember_request(uid, rid, t, {**reply, "ok": True})
    mono = clock.monotonic()
    if mono - _last_purge.get(id(store), float("-inf")) >= PURGE_EVERY_S:
        _last_purge[id(store)] = mono
        store.forget_requests(t - KEEP_S, KEEP_PER_UID)
