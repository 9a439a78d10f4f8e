"""The state store interface, and the SQL both backends share.

``Store`` is what the controller, the simulator and ``muster backup``/``restore`` rely on;
``SqliteStore`` (the embedded default) and ``PostgresStore`` implement it with the same
tables, the same numbered migrations and the same transaction semantics:

  * ``with store.transaction():`` groups writes; nested uses join the outermost one, which
    commits on a normal exit and rolls back on any exception. A write outside a transaction
    is a transaction of its own.
  * A transaction is applied whole or not at all, and a commit has returned before the
    controller acts on it (acknowledges a submission, sends a launch).
  * The schema version is ``len(MIGRATIONS)`` of the backend (both lists have the same
    length and meaning); it is stored in ``meta`` under ``schema``. A store whose version is
    newer than this build knows is refused (``SchemaTooNew``): an older release must not
    write a schema it does not understand — that is the rollback guard.
  * ``claim()`` makes the caller the store's one writer (musterctld, ``muster restore``);
    a second claimant gets ``StoreInUse``. ``claim(who, shared=True)``: controllers of an
    active/standby pair share the store (the lease decides which one writes) and still
    keep an exclusive claimant (``muster restore``) out.
  * ``fence``: when set (muster.store.lease.Lease.check), called inside every write
    transaction right before its COMMIT; it raises to roll the transaction back (a deposed
    leader's commit fails whole).

The SQL of the record methods below is written once: ``?`` placeholders and ``"user"``
quoted (a reserved word in PostgreSQL); a backend translates it in ``_sql`` and supplies
``_rows``/``_one``/``_write``/``_upsert``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Protocol

import msgspec

from muster.common.errors import MusterError

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder()

# table -> (columns, primary key, columns holding bytes): the schema as backup/restore see
# it, in an order that restores parents before nothing (there are no foreign keys).
TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...], frozenset[str]]] = {
    "meta": (("key", "value"), ("key",), frozenset()),
    "jobs": (("job_id", "state", "uid", "end_time", "array_job_id", "record"), ("job_id",),
             frozenset({"record"})),
    "scripts": (("job_id", "script", "env"), ("job_id",), frozenset({"env"})),
    "steps": (("job_id", "step_id", "record"), ("job_id", "step_id"), frozenset({"record"})),
    "runs": (("job_id", "run", "record"), ("job_id", "run"), frozenset({"record"})),
    "nodes": (("name", "record"), ("name",), frozenset({"record"})),
    "events": (("id", "time", "job_id", "node", "event", "detail"), ("id",), frozenset()),
    "acct_accounts": (("name", "parent", "shares", "description", "record"), ("name",),
                      frozenset({"record"})),
    "acct_assocs": (("user", "account", "partition", "shares", "is_default", "record"),
                    ("user", "account", "partition"), frozenset({"record"})),
    "acct_qos": (("name", "priority", "record"), ("name",), frozenset({"record"})),
    "acct_usage": (("account", "user", "usage", "last_decay"), ("account", "user"), frozenset()),
    "reservations": (("name", "record"), ("name",), frozenset({"record"})),
    "job_extra": (("job_id", "record"), ("job_id",), frozenset({"record"})),
    "step_usage": (("job_id", "step_id", "max_rss", "total_cpu_ms", "record"),
                   ("job_id", "step_id"), frozenset({"record"})),
    "requests": (("uid", "rid", "time", "reply"), ("uid", "rid"), frozenset({"reply"})),
}
# the schema version each table appeared in (a backup of an older schema lacks the later ones)
TABLE_SINCE = {"acct_accounts": 3, "acct_assocs": 3, "acct_qos": 3, "acct_usage": 3,
               "reservations": 3, "job_extra": 3, "step_usage": 4, "requests": 5}
COLUMN_SINCE = {("jobs", "array_job_id"): 2}


def quoted(col: str) -> str:
    return '"user"' if col == "user" else col


def columns_at(table: str, version: int) -> tuple[str, ...]:
    """The columns ``table`` had at schema ``version``."""
    return tuple(c for c in TABLES[table][0] if COLUMN_SINCE.get((table, c), 1) <= version)


class SchemaTooNew(MusterError):
    """The store was written by a newer Muster: refusing it is the rollback guard."""


class StoreInUse(MusterError):
    """Another process (a running musterctld, a restore) has claimed the store."""


class StoreLost(SystemExit):
    """The database stayed unreachable past the retry window, or another process took the
    store over, in the middle of the controller's work. A SystemExit on purpose: the
    controller's memory may be ahead of its database, no ``except Exception`` in a handler
    may swallow this, and the one consistent recovery is a restart that reloads the state
    from the database (systemd's Restart=on-failure)."""


class Store(Protocol):
    """What every backend offers (see the module docstring for the semantics)."""

    on_commit: Any
    schema_version: int
    fence: Any

    def transaction(self) -> contextlib.AbstractContextManager[Any]: ...
    def snapshot(self) -> contextlib.AbstractContextManager[Any]: ...
    def claim(self, who: str, shared: bool = False) -> None: ...
    def close(self) -> None: ...
    def describe(self) -> str: ...
    def get_meta(self, key: str, default: str | None = None) -> str | None: ...
    def set_meta(self, key: str, value: str) -> None: ...
    def put_job(self, rec: dict) -> None: ...
    def delete_job(self, job_id: int) -> None: ...
    def load_jobs(self, active_since: int | None = None) -> list[dict]: ...
    def get_job(self, job_id: int) -> dict | None: ...
    def query_jobs(self, job_ids: list[int] | None = None, uid: int | None = None,
                   end_after: int | None = None,
                   start_before: int | None = None) -> list[dict]: ...
    def max_job_id(self) -> int: ...
    def put_script(self, job_id: int, script: str, env: dict) -> None: ...
    def get_script(self, job_id: int) -> tuple[str, dict] | None: ...
    def put_step(self, job_id: int, step_id: str, rec: dict) -> None: ...
    def steps_of(self, job_ids: list[int]) -> dict[int, list[dict]]: ...
    def put_step_usage(self, job_id: int, step_id: str, stats: dict) -> None: ...
    def usage_of(self, job_ids: list[int]) -> dict[int, dict[str, dict]]: ...
    def put_run(self, job_id: int, run: int, rec: dict) -> None: ...
    def runs_of(self, job_ids: list[int]) -> dict[int, list[dict]]: ...
    def put_node(self, name: str, rec: dict) -> None: ...
    def load_nodes(self) -> dict[str, dict]: ...
    def add_event(self, time: int, event: str, detail: str = "", job_id: int | None = None,
                  node: str | None = None) -> None: ...
    def events_of(self, job_id: int, limit: int = 200) -> list[dict]: ...
    def query_events(self, where: list[str], args: list, limit: int) -> list[tuple]: ...
    def event_counts(self, after_id: int, events: tuple[str, ...]) -> tuple[list[tuple], int]: ...
    def put_account(self, rec: dict) -> None: ...
    def delete_account(self, name: str) -> None: ...
    def load_accounts(self) -> list[dict]: ...
    def put_assoc(self, rec: dict) -> None: ...
    def delete_assoc(self, user: str, account: str, partition: str = "") -> None: ...
    def load_assocs(self) -> list[dict]: ...
    def put_qos(self, rec: dict) -> None: ...
    def delete_qos(self, name: str) -> None: ...
    def load_qos(self) -> list[dict]: ...
    def put_usage(self, account: str, user: str, usage: float, last_decay: int) -> None: ...
    def load_usage(self) -> dict[tuple[str, str], tuple[float, int]]: ...
    def put_reservation(self, rec: dict) -> None: ...
    def delete_reservation(self, name: str) -> None: ...
    def load_reservations(self) -> list[dict]: ...
    def put_job_extra(self, job_id: int, rec: dict) -> None: ...
    def load_job_extra(self) -> dict[int, dict]: ...
    def remember_request(self, uid: int, rid: str, time: int, reply: dict) -> None: ...
    def recall_request(self, uid: int, rid: str) -> dict | None: ...
    def forget_requests(self, before: int, keep_per_uid: int | None = None) -> None: ...
    def dump_table(self, table: str,
                   cols: tuple[str, ...] | None = None) -> Iterator[tuple]: ...
    def replace_all(self, version: int, tables: dict[str, list[tuple]]) -> None: ...


class SqlStore:
    """The record methods, over a backend's ``_rows``/``_one``/``_write``/``_upsert``."""

    schema_version = 0
    on_commit: Any = None  # callback(seconds) for the commit-latency metric
    fence: Any = None  # callback(store) inside each write transaction, before COMMIT

    # ---- backend primitives (overridden) -----------------------------------------------
    def transaction(self) -> contextlib.AbstractContextManager[Any]:
        raise NotImplementedError

    def _rows(self, sql: str, args: tuple | list = ()) -> list[tuple]:
        raise NotImplementedError

    def _one(self, sql: str, args: tuple | list = ()) -> tuple | None:
        rows = self._rows(sql, args)
        return rows[0] if rows else None

    def _write(self, sql: str, args: tuple | list) -> None:
        raise NotImplementedError

    def _upsert(self, table: str, values: tuple) -> None:
        """Insert or replace the row of ``table`` with all of its columns (TABLES order)."""
        raise NotImplementedError

    # ---- meta --------------------------------------------------------------------------
    def get_meta(self, key: str, default: str | None = None) -> str | None:
        row = self._one("SELECT value FROM meta WHERE key=?", (key,))
        return row[0] if row else default

    def set_meta(self, key: str, value: str) -> None:
        self._upsert("meta", (key, value))

    # ---- jobs --------------------------------------------------------------------------
    def put_job(self, rec: dict) -> None:
        self._upsert("jobs", (rec["job_id"], rec["state"], rec["uid"], rec.get("end_time"),
                              rec.get("array_job_id"), _enc.encode(rec)))

    def delete_job(self, job_id: int) -> None:
        self._write("DELETE FROM jobs WHERE job_id=?", (job_id,))

    def load_jobs(self, active_since: int | None = None) -> list[dict]:
        """Jobs the controller keeps in memory: unfinished ones, and finished ones that ended
        at or after ``active_since`` (MinJobAge)."""
        rows = self._rows(
            "SELECT record FROM jobs WHERE state IN ('PENDING','RUNNING') "
            "OR end_time IS NULL OR end_time >= ?", (active_since or 0,))
        return [_dec.decode(r[0]) for r in rows]

    def get_job(self, job_id: int) -> dict | None:
        row = self._one("SELECT record FROM jobs WHERE job_id=?", (job_id,))
        return _dec.decode(row[0]) if row else None

    def query_jobs(self, job_ids: list[int] | None = None, uid: int | None = None,
                   end_after: int | None = None, start_before: int | None = None) -> list[dict]:
        sql = "SELECT record FROM jobs"
        where: list[str] = []
        args: list = []
        if job_ids:
            marks = ",".join("?" * len(job_ids))
            where.append(f"(job_id IN ({marks}) OR array_job_id IN ({marks}))")
            args += job_ids + job_ids
        if uid is not None:
            where.append("uid=?")
            args.append(uid)
        if end_after is not None:
            where.append("(end_time IS NULL OR end_time >= ?)")
            args.append(end_after)
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY job_id"
        return [_dec.decode(r[0]) for r in self._rows(sql, args)]

    def max_job_id(self) -> int:
        row = self._one("SELECT MAX(job_id) FROM jobs")
        return (row[0] if row else 0) or 0

    # ---- scripts -----------------------------------------------------------------------
    def put_script(self, job_id: int, script: str, env: dict) -> None:
        self._upsert("scripts", (job_id, script, _enc.encode(env)))

    def get_script(self, job_id: int) -> tuple[str, dict] | None:
        row = self._one("SELECT script, env FROM scripts WHERE job_id=?", (job_id,))
        return (row[0], _dec.decode(row[1])) if row else None

    # ---- steps & runs ------------------------------------------------------------------
    def put_step(self, job_id: int, step_id: str, rec: dict) -> None:
        self._upsert("steps", (job_id, str(step_id), _enc.encode(rec)))

    def _by_job(self, sql: str, job_ids: list[int], tail: str = "") -> list[tuple]:
        """``sql`` + ``job_id IN (...)`` in chunks of 500 ids (SQLite's parameter limit)."""
        out: list[tuple] = []
        for i in range(0, len(job_ids), 500):
            chunk = job_ids[i:i + 500]
            out += self._rows(f"{sql} WHERE job_id IN ({','.join('?' * len(chunk))}){tail}",
                              chunk)
        return out

    def steps_of(self, job_ids: list[int]) -> dict[int, list[dict]]:
        out: dict[int, list[dict]] = {}
        for jid, rec in self._by_job("SELECT job_id, record FROM steps", job_ids,
                                     " ORDER BY job_id, step_id"):
            out.setdefault(jid, []).append(_dec.decode(rec))
        return out

    def put_step_usage(self, job_id: int, step_id: str, stats: dict) -> None:
        """A step's final usage statistics (muster.controller.usage.aggregate)."""
        self._upsert("step_usage", (job_id, str(step_id), int(stats["in"]["max"].get("mem", 0)),
                                    int(stats["user_ms"] + stats["sys_ms"]), _enc.encode(stats)))

    def usage_of(self, job_ids: list[int]) -> dict[int, dict[str, dict]]:
        """job id -> step id -> final usage statistics."""
        out: dict[int, dict[str, dict]] = {}
        for jid, sid, rec in self._by_job("SELECT job_id, step_id, record FROM step_usage",
                                          job_ids):
            out.setdefault(jid, {})[sid] = _dec.decode(rec)
        return out

    def put_run(self, job_id: int, run: int, rec: dict) -> None:
        self._upsert("runs", (job_id, run, _enc.encode(rec)))

    def runs_of(self, job_ids: list[int]) -> dict[int, list[dict]]:
        out: dict[int, list[dict]] = {}
        for jid, rec in self._by_job("SELECT job_id, record FROM runs", job_ids,
                                     " ORDER BY job_id, run"):
            out.setdefault(jid, []).append(_dec.decode(rec))
        return out

    # ---- nodes & events ----------------------------------------------------------------
    def put_node(self, name: str, rec: dict) -> None:
        self._upsert("nodes", (name, _enc.encode(rec)))

    def load_nodes(self) -> dict[str, dict]:
        return {n: _dec.decode(r) for n, r in self._rows("SELECT name, record FROM nodes")}

    def add_event(self, time: int, event: str, detail: str = "", job_id: int | None = None,
                  node: str | None = None) -> None:
        self._write("INSERT INTO events(time, job_id, node, event, detail) VALUES(?,?,?,?,?)",
                    (time, job_id, node, event, detail))

    def events_of(self, job_id: int, limit: int = 200) -> list[dict]:
        rows = self._rows(
            "SELECT time, event, detail FROM events WHERE job_id=? ORDER BY id DESC LIMIT ?",
            (job_id, limit))
        return [{"time": t, "event": e, "detail": d} for t, e, d in reversed(rows)]

    def query_events(self, where: list[str], args: list, limit: int) -> list[tuple]:
        """(id, time, job_id, node, event, detail) rows, newest first. ``where``: conditions
        written with ``?`` placeholders over the events columns (the caller validated the
        values; they travel as parameters)."""
        sql = "SELECT id, time, job_id, node, event, detail FROM events"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return self._rows(sql + " ORDER BY id DESC LIMIT ?", (*args, limit))

    def event_counts(self, after_id: int, events: tuple[str, ...]) -> tuple[list[tuple], int]:
        """((event, count) for ``events`` logged after ``after_id``, the highest event id)."""
        marks = ",".join("?" * len(events))
        rows = self._rows(f"SELECT event, COUNT(*) FROM events WHERE id>? AND event IN ({marks}) "
                          "GROUP BY event", (after_id, *events))
        top = self._one("SELECT MAX(id) FROM events")
        return rows, (top[0] if top and top[0] is not None else after_id)

    # ---- accounting (sacctmgr) ---------------------------------------------------------
    def put_account(self, rec: dict) -> None:
        self._upsert("acct_accounts", (rec["name"], rec.get("parent"), int(rec.get("shares", 1)),
                                       rec.get("description") or "", _enc.encode(rec)))

    def delete_account(self, name: str) -> None:
        self._write("DELETE FROM acct_accounts WHERE name=?", (name,))

    def load_accounts(self) -> list[dict]:
        return [_dec.decode(r[0]) for r in self._rows(
            "SELECT record FROM acct_accounts ORDER BY name")]

    def put_assoc(self, rec: dict) -> None:
        self._upsert("acct_assocs", (rec["user"], rec["account"], rec.get("partition") or "",
                                     int(rec.get("shares", 1)), 1 if rec.get("is_default") else 0,
                                     _enc.encode(rec)))

    def delete_assoc(self, user: str, account: str, partition: str = "") -> None:
        self._write('DELETE FROM acct_assocs WHERE "user"=? AND account=? AND partition=?',
                    (user, account, partition or ""))

    def load_assocs(self) -> list[dict]:
        return [_dec.decode(r[0]) for r in self._rows(
            'SELECT record FROM acct_assocs ORDER BY account, "user", partition')]

    def put_qos(self, rec: dict) -> None:
        self._upsert("acct_qos", (rec["name"], int(rec.get("priority", 0)), _enc.encode(rec)))

    def delete_qos(self, name: str) -> None:
        self._write("DELETE FROM acct_qos WHERE name=?", (name,))

    def load_qos(self) -> list[dict]:
        return [_dec.decode(r[0]) for r in self._rows("SELECT record FROM acct_qos ORDER BY name")]

    def put_usage(self, account: str, user: str, usage: float, last_decay: int) -> None:
        self._upsert("acct_usage", (account, user, float(usage), int(last_decay)))

    def load_usage(self) -> dict[tuple[str, str], tuple[float, int]]:
        return {(a, u): (x, t) for a, u, x, t in self._rows(
            'SELECT account, "user", usage, last_decay FROM acct_usage')}

    # ---- reservations and per-job extras -------------------------------------------------
    def put_reservation(self, rec: dict) -> None:
        self._upsert("reservations", (rec["name"], _enc.encode(rec)))

    def delete_reservation(self, name: str) -> None:
        self._write("DELETE FROM reservations WHERE name=?", (name,))

    def load_reservations(self) -> list[dict]:
        return [_dec.decode(r[0]) for r in self._rows(
            "SELECT record FROM reservations ORDER BY name")]

    def put_job_extra(self, job_id: int, rec: dict) -> None:
        self._upsert("job_extra", (job_id, _enc.encode(rec)))

    def load_job_extra(self) -> dict[int, dict]:
        return {j: _dec.decode(r) for j, r in self._rows("SELECT job_id, record FROM job_extra")}

    # ---- request ids (muster.controller.idempotency) ------------------------------------
    def remember_request(self, uid: int, rid: str, time: int, reply: dict) -> None:
        self._upsert("requests", (uid, rid, time, _enc.encode(reply)))

    def recall_request(self, uid: int, rid: str) -> dict | None:
        row = self._one("SELECT reply FROM requests WHERE uid=? AND rid=?", (uid, rid))
        return _dec.decode(row[0]) if row else None

    def forget_requests(self, before: int, keep_per_uid: int | None = None) -> None:
        """Drop the replies recorded before ``before``, and beyond each user's newest
        ``keep_per_uid`` (one user's flood of changing requests never grows the table
        without bound)."""
        self._write("DELETE FROM requests WHERE time<?", (before,))
        if keep_per_uid is not None:
            self._write("DELETE FROM requests WHERE (uid, rid) IN (SELECT uid, rid FROM "
                        "(SELECT uid, rid, ROW_NUMBER() OVER (PARTITION BY uid ORDER BY time "
                        "DESC, rid) AS n FROM requests) AS r WHERE r.n > ?)", (keep_per_uid,))

    # ---- backup and restore --------------------------------------------------------------
    def dump_table(self, table: str,
                   cols: tuple[str, ...] | None = None) -> Iterator[tuple]:
        """Every row of ``table`` (``cols``, default all TABLES columns), in key order; call
        inside ``snapshot()`` so that all tables come from one consistent moment."""
        key = TABLES[table][1]
        cols = cols or TABLES[table][0]
        sql = (f"SELECT {', '.join(map(quoted, cols))} FROM {table} "
               f"ORDER BY {', '.join(map(quoted, key))}")
        yield from self._rows(sql)

    def replace_all(self, version: int, tables: dict[str, list[tuple]]) -> None:
        """Replace the whole content with ``tables`` (rows at schema ``version``), then
        migrate to this build's schema — one transaction: a failed restore changes nothing."""
        with self.transaction():
            self._drop_all()
            self._migrate(upto=version)
            for table, rows in tables.items():
                cols = columns_at(table, version)
                if rows:
                    self._insert_many(table, cols, rows)
            self._migrate()
            self._after_restore()

    def _drop_all(self) -> None:
        raise NotImplementedError

    def _migrate(self, upto: int | None = None) -> None:
        raise NotImplementedError

    def _insert_many(self, table: str, cols: tuple[str, ...], rows: list[tuple]) -> None:
        raise NotImplementedError

    def _after_restore(self) -> None:
        """Backend fix-ups after rows were inserted with explicit keys (sequences)."""


def too_new(where: str, version: int, known: int) -> SchemaTooNew:
    return SchemaTooNew(
        f"the state store {where} has schema version {version}, newer than the {known} this "
        f"Muster knows; it was written by a newer release. Run that release (or restore a "
        f"backup taken with this one): refusing to start", "invalid_request")
