"""Leases of interactive allocations: srun and salloc outside a batch job hold their
allocation through a connection to the controller (issue 16: a controller restart or
fail-over never ends a live srun's or salloc's allocation).

An allocation made by ``allocate`` is *leased* (``Job.leased``, persisted) to the connection
the request came on; after that, a ``lease`` request from the job's owner (the uid the socket
proves, SO_PEERCRED) or an operator moves it to the connection that request came on.

Invariants:

* One holder per allocation: the connection that attached last. Only the holder's close
  counts; a connection superseded by a re-attach closes without effect.
* The holder's close while this controller serves ends the allocation at once: its srun or
  salloc is gone (killed, crashed), and a lease needs no timer to notice.
* A close this controller causes by stopping (SIGTERM, ``muster restart``, a deposed leader
  tearing itself down) ends nothing: the client lives on and the next controller decides.
* A controller that starts (restart, take-over) holds no connection, so every unfinished
  leased allocation starts *orphaned*: its client has ``MusterLeaseGrace`` seconds (default
  30) from this controller's start to re-attach. One still orphaned after that is ended as a
  lost lease is — a running one torn down (its steps terminated on every node: they may be
  steps this process never saw), a pending one cancelled.
* A client that is alive re-attaches as soon as it notices its connection broke and a
  controller answers again (it retries every second at most), so the grace only has to
  cover the time between the controller's first accepted connection and the client's next
  try; it is not the length of the outage, which the client rides out by retrying.
"""

from __future__ import annotations

import logging

from muster.common import clock
from muster.common.errors import AccessDenied, RequestError
from muster.lifecycle import events, jobfsm

log = logging.getLogger("musterctld")

GRACE_DEFAULT = 30


class Leases:
    """Who holds each leased allocation now, and which ones wait to be re-attached."""

    def __init__(self, ctl):
        self.ctl = ctl
        self.holders: dict[int, object] = {}  # job id -> the ClientConn holding its lease
        # (id(conn), job id) whose close callback is registered: one per pair, so leases sent
        # back and forth between two connections cannot grow their callback lists
        self._watched: set[tuple[int, int]] = set()
        started = clock.monotonic()
        # job id -> when it became orphaned: every unfinished leased allocation at start
        self.orphans: dict[int, float] = {
            j.job_id: started for j in ctl.state.jobs.values()
            if j.leased and not j.terminal and not j.completing}
        # allocations begun under an earlier controller process: they may run steps that
        # this process's step table does not know, so their end terminates on the nodes
        self.inherited: set[int] = set(self.orphans)
        if self.orphans:
            log.info("%d srun/salloc allocation(s) wait for their client to re-attach "
                     "(MusterLeaseGrace=%d)", len(self.orphans), self.grace())

    def grace(self) -> int:
        """MusterLeaseGrace, read at each use (``scontrol reconfigure`` may change it)."""
        return max(0, int(getattr(self.ctl.cfg, "lease_grace", GRACE_DEFAULT)))

    # ---- holding -------------------------------------------------------------------------
    def hold(self, job_id: int, conn) -> None:
        """``conn`` now holds the allocation's lease (``allocate``, ``lease``)."""
        if self.holders.get(job_id) is conn:
            return
        self.holders[job_id] = conn
        self.orphans.pop(job_id, None)
        if (id(conn), job_id) not in self._watched:
            self._watched.add((id(conn), job_id))
            conn.on_close.append(lambda: self._closed(job_id, conn))

    def attach(self, job, uid: int, conn) -> None:
        """The ``lease`` request: re-attach an allocation to the connection it came on. Only
        its owner (or an operator) may, and only while it is an unfinished interactive
        allocation that has a lease."""
        if job.uid != uid and not self.ctl.is_admin(uid):
            raise AccessDenied()
        if job.batch or not job.leased:
            raise RequestError("not an interactive allocation with a lease", "invalid_request")
        if job.terminal or job.completing:
            raise RequestError(None, "already_done")
        if conn is None:
            raise RequestError("a lease needs a connection of its own", "invalid_request")
        orphan = job.job_id in self.orphans
        self.hold(job.job_id, conn)
        if orphan:  # (once per allocation and start: a client cannot flood the log)
            log.info("allocation %d: lease re-attached by uid %d", job.job_id, uid)

    def _closed(self, job_id: int, conn) -> None:
        self._watched.discard((id(conn), job_id))
        if self.holders.get(job_id) is not conn:
            return  # superseded by a re-attach on another connection
        del self.holders[job_id]
        stopping = getattr(self.ctl, "_stopping", None)
        if stopping is not None and stopping.is_set():
            return  # our own shutdown closed it: the client re-attaches to the next controller
        self.end(job_id, "srun/salloc connection closed")

    # ---- ending ----------------------------------------------------------------------------
    def tick(self) -> None:
        """Once a second (StepManager.tick): end the orphans whose grace has run out."""
        if not self.orphans:
            return
        grace = self.grace()
        t = clock.monotonic()
        for job_id, since in list(self.orphans.items()):
            if t - since >= grace:
                self.end(job_id, f"lease not re-attached within MusterLeaseGrace={grace} s "
                                 "of the controller's start")

    def end(self, job_id: int, why: str) -> None:
        """The lease is lost: the allocation ends as its client's death ends it (exit 0,
        signal 9: FAILED 0:9 when running, CANCELLED when still pending)."""
        self.orphans.pop(job_id, None)
        job = self.ctl.state.jobs.get(job_id)
        if job is None or job.terminal or job.completing:
            return
        live = job_id in self.inherited or any(
            s.job_id == job_id for s in self.ctl.steps.steps.values())
        try:
            with self.ctl.applier.transaction():
                self.ctl.applier.job(job, events.ReleaseAllocation(job.uid, 0, 9, live),
                                     clock.now())
                self.ctl.state.event(job, "lease_lost", why)
        except jobfsm.Refused:
            return
        log.info("allocation %d ended: %s", job_id, why)
