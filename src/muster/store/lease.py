"""The controllers' lease and fencing epoch (issue 16: active/standby controllers).

Several ``SlurmctldHost`` lines name several controllers on one state store; one leads. Who
leads is a row of the store itself, ``leader(id=1, holder, epoch, expires, handover)``:

  * the leader renews ``expires`` (now + SlurmctldTimeout, read from the *database's* clock,
    so the controllers' clocks never matter) every RENEW_S; a standby polls the row and takes
    over once ``expires`` has passed, incrementing ``epoch`` in the same write;
  * ``epoch`` only grows, and a leader is the holder of one epoch. With ``store.fence`` set
    to ``Lease.check``, EVERY write transaction of the leader verifies, inside itself and
    right before its COMMIT, that the row still carries its epoch, and otherwise rolls back
    and raises ``Fenced``. PostgreSQL: ``SELECT … FOR UPDATE`` locks the row until the
    COMMIT, so a takeover either committed first (the check fails) or waits for our COMMIT
    (and the new leader, which loads the state after its takeover, sees what we committed).
    SQLite (one host): the transaction holds the file's write lock since ``BEGIN
    IMMEDIATE``, so the check and the commit cannot be separated either. Hence two
    controllers can never both commit in the same epoch: a deposed leader's commit fails
    whole, before any effect of it leaves (the applier drops the effects of a failed
    transaction);
  * ``handover`` names a standby that asked to lead (``scontrol takeover``): the leader sees
    it at its next renewal, expires its own lease and steps down; the standby then takes
    over at once instead of after a timeout;
  * once fenced, a Lease stays fenced (no further round trip can change that): its
    controller is torn down and the process goes back to standby with a fresh store.

``controller_seen(holder, seen)``: each controller's last sign of life (standbys mark it every
second, the leader with every renewal), so the leader can tell ``scontrol ping`` on any host
whether a controller it cannot reach itself is UP.

The rows are outside the numbered migrations on purpose: it is created on first use by any
release that has controllers in standby, belongs to no backup (a restored store starts a
new lease history: epochs keep growing from whatever the row holds), and an older release
simply ignores it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from muster.common.errors import MusterError

log = logging.getLogger("muster.store")

_SQL = {
    "postgres": {
        "create": "CREATE TABLE IF NOT EXISTS leader(id INTEGER PRIMARY KEY, holder TEXT NOT "
                  "NULL, epoch BIGINT NOT NULL, expires DOUBLE PRECISION NOT NULL, "
                  "handover TEXT NOT NULL)",
        "seed": "INSERT INTO leader VALUES(1, '', 0, 0, '') ON CONFLICT(id) DO NOTHING",
        "now": "EXTRACT(EPOCH FROM clock_timestamp())::float8",
        "lock": " FOR UPDATE",
        "create_seen": "CREATE TABLE IF NOT EXISTS controller_seen(holder TEXT PRIMARY KEY, "
                       "seen DOUBLE PRECISION NOT NULL)",
    },
    "sqlite": {
        "create": "CREATE TABLE IF NOT EXISTS leader(id INTEGER PRIMARY KEY, holder TEXT NOT "
                  "NULL, epoch INTEGER NOT NULL, expires REAL NOT NULL, handover TEXT NOT NULL)",
        "seed": "INSERT OR IGNORE INTO leader VALUES(1, '', 0, 0, '')",
        "now": "((julianday('now') - 2440587.5) * 86400.0)",
        "lock": "",
        "create_seen": "CREATE TABLE IF NOT EXISTS controller_seen(holder TEXT PRIMARY KEY, "
                       "seen REAL NOT NULL)",
    },
}
MIN_TIMEOUT_S = 2.0  # below this a busy scheduling pass could cost the leader its lease


class Fenced(MusterError):
    """This controller's epoch is no longer the lease's: another controller leads. Raised by
    the commit that found out (rolled back, nothing of it visible) and by every later one.
    A MusterError with the standby's code, so the request that hit it is answered with
    "in standby mode" and its client tries the next controller (its request id makes the
    retry safe); the controller is torn down by ``on_fenced`` before anything else runs."""

    code = "in_standby_mode"


@dataclass(frozen=True, slots=True)
class LeaseState:
    holder: str
    epoch: int
    remaining_s: float  # until it expires (negative: expired)
    handover: str


class Lease:
    """One controller's view of the lease on ``store`` (a muster.store SqlStore backend),
    as ``holder`` (its SlurmctldHost name and index: unique among the controllers)."""

    def __init__(self, store: Any, holder: str, timeout_s: float):
        self.store = store
        self.holder = holder
        self.timeout_s = max(MIN_TIMEOUT_S, float(timeout_s))
        self.epoch: int | None = None  # the epoch this controller leads in, if it does
        self.fenced = False
        self.on_fenced: Any = None  # callback(), once, when a commit finds us deposed
        self._sql = _SQL["postgres" if type(store).__name__ == "PostgresStore" else "sqlite"]
        self._ensure()

    @property
    def renew_s(self) -> float:
        """How often the leader renews: often enough that a handover request is seen within
        a second, and a third of the lease at most (two renewals may be lost in a row)."""
        return min(1.0, self.timeout_s / 3)

    def _ensure(self) -> None:
        for attempt in range(3):  # two controllers starting at once may race on CREATE
            try:
                with self.store.transaction():
                    self.store._write(self._sql["create"], ())
                    self.store._write(self._sql["seed"], ())
                    self.store._write(self._sql["create_seen"], ())
                return
            except Exception:
                if attempt == 2:
                    raise

    def read(self) -> LeaseState:
        row = self.store._one(f"SELECT holder, epoch, expires - {self._sql['now']}, handover "
                              "FROM leader WHERE id=1")
        assert row is not None  # seeded by _ensure
        return LeaseState(row[0], int(row[1]), float(row[2]), row[3])

    # ---- who is alive (scontrol ping from a host that cannot reach every controller) ----
    def mark_seen(self) -> None:
        """Record that this controller is alive now (the database's clock): standbys every
        second or so, the leader with each renewal. A controller elsewhere is then known UP
        or DOWN without reaching it (``seen_ages``)."""
        with self.store.transaction():
            self._mark_seen()

    def _mark_seen(self) -> None:
        self.store._write(f"INSERT INTO controller_seen VALUES(?, {self._sql['now']}) ON "
                          f"CONFLICT(holder) DO UPDATE SET seen={self._sql['now']}",
                          (self.holder,))

    def seen_ages(self) -> dict[str, float]:
        """Seconds since each controller last marked itself alive."""
        rows = self.store._rows(f"SELECT holder, {self._sql['now']} - seen FROM controller_seen")
        return {r[0]: float(r[1]) for r in rows}

    # ---- a standby's side --------------------------------------------------------------
    def try_acquire(self) -> int | None:
        """Take the lease if it has expired, or is already ours (this controller restarted
        before anyone took over), or its holder handed it to us; the new epoch, or None.
        The read and the write are one transaction with the row locked, so two standbys
        can never both win the same epoch."""
        with self.store.transaction():
            row = self.store._one("SELECT holder, epoch, expires - " + self._sql["now"] +
                                  ", handover FROM leader WHERE id=1" + self._sql["lock"])
            assert row is not None
            holder, epoch, remaining, handover = row[0], int(row[1]), float(row[2]), row[3]
            if remaining > 0 and holder != self.holder:
                return None
            if handover and handover != self.holder and remaining > -self.timeout_s:
                return None  # released for the controller that asked (unless it is gone)
            self.store._write(f"UPDATE leader SET holder=?, epoch=?, handover='', expires="
                              f"{self._sql['now']} + ? WHERE id=1 AND epoch=?",
                              (self.holder, epoch + 1, self.timeout_s, epoch))
        state = self.read()  # the conditional write may have matched nothing after a replay
        if state.holder != self.holder or state.epoch != epoch + 1:
            return None
        self.epoch, self.fenced = epoch + 1, False
        log.info("lease taken by %s: epoch %d (was %s's)", self.holder, self.epoch,
                 holder or "nobody")
        return self.epoch

    def request_handover(self) -> None:
        """``scontrol takeover``: ask the leader to step down in our favour."""
        with self.store.transaction():
            self.store._write("UPDATE leader SET handover=? WHERE id=1", (self.holder,))

    # ---- the leader's side -------------------------------------------------------------
    def renew(self) -> str:
        """Extend our lease (a fenced write: raises Fenced if we were deposed); the holder
        a handover was requested for ('' for none)."""
        with self.store.transaction():
            self.store._write(f"UPDATE leader SET expires={self._sql['now']} + ? "
                              "WHERE id=1 AND epoch=?", (self.timeout_s, self.epoch))
            self._mark_seen()
        row = self.store._one("SELECT handover FROM leader WHERE id=1")
        want = row[0] if row else ""
        return want if want and want != self.holder else ""

    def release(self) -> None:
        """Step down: expire our lease now (fenced, so only while it is still ours)."""
        with self.store.transaction():
            self.store._write(f"UPDATE leader SET expires={self._sql['now']} - 1 "
                              "WHERE id=1 AND epoch=?", (self.epoch,))
        self.epoch = None

    def check(self, store: Any) -> None:
        """The fencing check, called by ``store`` inside its transaction right before the
        COMMIT (``SqlStore.fence``): raise Fenced unless the lease row still carries our
        epoch (and keep it locked to the COMMIT). The caller rolls back."""
        if not self.fenced:
            row = store._one("SELECT 1 FROM leader WHERE id=1 AND epoch=?" + self._sql["lock"],
                             (self.epoch,))
            if row is not None:
                return
            self.fenced = True
            log.critical("fenced: the lease is no longer epoch %s of %s; stepping down",
                         self.epoch, self.holder)
            if self.on_fenced is not None:
                self.on_fenced()
        raise Fenced()
