"""srun's and salloc's persistent controller connection when it breaks (issue 16): reconnect,
re-attach the allocation's lease, re-send the request. Standard library only, and imported
only once a connection has broken, so the commands' start-up cost is unchanged.

The controller a broken connection led to is gone (SIGKILL, restart, a fail-over to the
standby). The step and its I/O go on — they run between srun and the step daemons — but the
new controller holds no connection for the allocation and ends it unless the client attaches
again within ``MusterLeaseGrace`` (muster.controller.leases). So:

* :func:`resume` (a request whose connection broke): connect to the first controller that
  answers, trying each socket with client.py's back-off for the client retry budget; send
  ``lease`` for the allocation the connection holds (``srun.Controller.job_id``), then the
  request again with its request id (a retry the controller already acted on gets its first reply).
  A re-sent ``allocate`` was answered from memory without binding the new connection, so it
  is followed by a ``lease`` too.
* :func:`try_attach` (srun's step loop, while the step runs): one quick round over the
  sockets, never sleeping, so the step's output keeps flowing; the loop calls it again a
  moment later until it succeeds. A live srun thus keeps trying for as long as it lives.
* A ``lease`` the controller refuses (the allocation has ended meanwhile: cancelled, timed
  out) leaves nothing to hold: ``job_id`` is cleared and the re-sent request, or the step's
  end, tells the command what happened.
"""

from __future__ import annotations

import time

from muster.cli import client
from muster.common.errors import TransportError

ATTACH_TIMEOUT = 10.0  # a controller that accepted the connection answers a lease at once


def _connect_any(deadline: float):
    """A connected socket to the first controller that accepts, trying each in turn with
    client.py's back-off (50 ms doubling to 1 s) until ``deadline``; TransportError then."""
    delay = 0.05
    while True:
        for path in client.socket_paths():
            try:
                return client._connect(path, deadline)
            except client._Retry:
                continue
        if time.monotonic() + delay > deadline:
            raise TransportError()
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


def connect(budget: float | None = None):
    """A first connection, for a command that found no controller at once (a restart)."""
    return _connect_any(time.monotonic() + (client.retry_budget() if budget is None else budget))


def _attach(ctl) -> None:
    """Move the allocation's lease to ``ctl``'s (new) connection."""
    if ctl.job_id is None:
        return
    reply = ctl.exchange({"op": "lease", "job_id": ctl.job_id}, ATTACH_TIMEOUT)
    if not reply.get("ok"):
        ctl.job_id = None  # the allocation is over: nothing left to hold


def _switch(ctl, sock) -> None:
    try:
        ctl.sock.close()
    except OSError:
        pass
    ctl.sock = sock


def resume(ctl, msg: dict, timeout: float | None, retry: float | None = None) -> dict:
    """``msg``'s reply, after the connection broke while it was sent or awaited. ``retry``:
    seconds to keep trying (default: the client retry budget); TransportError after."""
    budget = client.retry_budget() if retry is None else retry
    deadline = time.monotonic() + budget
    delay = 0.05
    while True:
        _switch(ctl, _connect_any(deadline))
        try:
            _attach(ctl)
            reply = ctl.exchange(msg, timeout)
            if msg.get("op") == "allocate" and reply.get("ok") and msg.get("lease") is not False:
                ctl.job_id = reply.get("job_id")
                _attach(ctl)
            return reply
        except client._Retry:  # broke again (the controller died again, or was deposed)
            if time.monotonic() + delay > deadline:
                raise TransportError() from None
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


def try_attach(ctl) -> bool:
    """One quick attempt to reconnect and re-attach (srun's step loop); True when the lease
    is held again, or there is none left to hold."""
    try:
        _switch(ctl, _connect_any(time.monotonic()))
    except TransportError:
        return False
    try:
        _attach(ctl)
    except (client._Retry, TransportError):
        ctl.sock.close()  # a late reply must never be read as the answer to another request
        return False
    return True
