"""Request ids: what makes a client's retry after a controller restart safe (standard library
only; the CLI imports it on every call).

A command that loses its connection before the reply cannot know whether the controller
acted: the request may have been committed just before a crash. Every request that changes
state therefore carries ``rid``, 128 random bits the client draws once and sends again with
each retry; the controller commits the reply under (uid, rid) together with the change
(muster.controller.idempotency) and answers a repeat with that first reply. Reads carry no
id: repeating one is harmless, and remembering its (possibly large) reply would be waste.
"""

from __future__ import annotations

import os

# Operations that change nothing. Everything else is sent with a request id, so an operation
# added later is safe to retry by default.
READ_ONLY = frozenset({
    "ping", "nodes", "config", "dash", "diag", "sprio", "sshare", "jobs", "partitions", "acct",
    "steps", "step_status", "sstat", "job_output", "events", "usage", "metrics",
    "reservations", "wait_alloc", "token", "job_script", "topology",
    "lease",  # changes no stored state, and must act on every delivery: it binds the
              # allocation to the connection it arrives on (a remembered reply would not)
})
READ_ONLY_SACCTMGR = frozenset({"show", "list"})
RID_LEN = 32  # hex digits


def changes_state(msg: dict) -> bool:
    """True for a request whose retry must not act twice (it gets, and is remembered by, a
    request id)."""
    op = msg.get("op")
    if not isinstance(op, str) or op in READ_ONLY:
        return False
    if op == "sacctmgr":
        return str(msg.get("action") or "").lower() not in READ_ONLY_SACCTMGR
    return True


def new_rid() -> str:
    return os.urandom(RID_LEN // 2).hex()


def valid_rid(value: object) -> bool:
    """A well-formed request id: exactly RID_LEN lower-case hex digits."""
    return (isinstance(value, str) and len(value) == RID_LEN
            and all(c in "0123456789abcdef" for c in value))
