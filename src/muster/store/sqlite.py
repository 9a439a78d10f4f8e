"""SQLite store: the controller's durable state.

Invariant: a change is committed before the controller acknowledges it. WAL mode with
``synchronous=NORMAL`` makes every commit survive a crash of the process (SIGKILL) — the
only thing it gives up is the last commits on a power loss of the host, which is the usual
trade-off (Slurm's own state save is periodic and loses more). ``MUSTER_SYNC=FULL`` in the
environment or ``SchedulerParameters=...`` could make it fsync every commit.

The controller calls the store from its event-loop thread only; statements are short (well
under a millisecond), and several changes of one scheduling pass go into one transaction
(``with store.transaction():``).

Schema (numbered migrations in ``MIGRATIONS``):
  meta(key, value)                     next job id, schema version
  jobs(job_id, state, uid, end_time, record)  one row per job (record = JSON of Job.to_store)
  scripts(job_id, script, env)         batch script and environment, by the submitting job id
  steps(job_id, step_id, record)       accounting rows of steps (batch, 0, 1, ...)
  runs(job_id, run, record)            earlier runs of requeued jobs (sacct --duplicates)
  nodes(name, record)                  admin state of nodes (drain reason, ...)
  events(id, time, job_id, node, event, detail)  audit log
  acct_accounts(name, parent, shares, description, record)   sacctmgr accounts (record: limits...)
  acct_assocs(user, account, partition, shares, is_default, record)  user associations
  acct_qos(name, priority, record)     QOS (record: limits, flags, preempt list/mode)
  acct_usage(account, user, usage, last_decay)  decayed billing-seconds (fair-share)
  reservations(name, record)           advance reservations (scontrol create reservation)
  job_extra(job_id, record)            per-job facts the Job record has no field for
                                       (reservation name, last computed priority)
  step_usage(job_id, step_id, max_rss, total_cpu_ms, record)  final usage statistics of a
                                       step (muster.controller.usage); a table of its own so
                                       that databases from before it stay readable unchanged
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time

import msgspec

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder()

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE jobs(job_id INTEGER PRIMARY KEY, state TEXT NOT NULL, uid INTEGER NOT NULL,
                      end_time INTEGER, record BLOB NOT NULL);
    CREATE INDEX jobs_state ON jobs(state);
    CREATE TABLE scripts(job_id INTEGER PRIMARY KEY, script TEXT NOT NULL, env BLOB NOT NULL);
    CREATE TABLE steps(job_id INTEGER NOT NULL, step_id TEXT NOT NULL, record BLOB NOT NULL,
                       PRIMARY KEY(job_id, step_id));
    CREATE TABLE runs(job_id INTEGER NOT NULL, run INTEGER NOT NULL, record BLOB NOT NULL,
                      PRIMARY KEY(job_id, run));
    CREATE TABLE nodes(name TEXT PRIMARY KEY, record BLOB NOT NULL);
    CREATE TABLE events(id INTEGER PRIMARY KEY AUTOINCREMENT, time INTEGER NOT NULL,
                        job_id INTEGER, node TEXT, event TEXT NOT NULL, detail TEXT);
    CREATE INDEX events_job ON events(job_id);
    """,
    """
    ALTER TABLE jobs ADD COLUMN array_job_id INTEGER;
    CREATE INDEX jobs_array ON jobs(array_job_id);
    """,
    # 3: accounting (sacctmgr), usage for fair-share, advance reservations, per-job extras
    """
    CREATE TABLE acct_accounts(name TEXT PRIMARY KEY, parent TEXT, shares INTEGER NOT NULL,
                               description TEXT, record BLOB NOT NULL);
    CREATE TABLE acct_assocs(user TEXT NOT NULL, account TEXT NOT NULL, partition TEXT NOT NULL,
                             shares INTEGER NOT NULL, is_default INTEGER NOT NULL,
                             record BLOB NOT NULL, PRIMARY KEY(user, account, partition));
    CREATE TABLE acct_qos(name TEXT PRIMARY KEY, priority INTEGER NOT NULL, record BLOB NOT NULL);
    CREATE TABLE acct_usage(account TEXT NOT NULL, user TEXT NOT NULL, usage REAL NOT NULL,
                            last_decay INTEGER NOT NULL, PRIMARY KEY(account, user));
    CREATE TABLE reservations(name TEXT PRIMARY KEY, record BLOB NOT NULL);
    CREATE TABLE job_extra(job_id INTEGER PRIMARY KEY, record BLOB NOT NULL);
    """,
    # 4: usage accounting (sacct MaxRSS/TotalCPU/TRESUsage*, seff); the two columns serve
    # queries over many steps without decoding records
    """
    CREATE TABLE step_usage(job_id INTEGER NOT NULL, step_id TEXT NOT NULL,
                            max_rss INTEGER NOT NULL, total_cpu_ms INTEGER NOT NULL,
                            record BLOB NOT NULL, PRIMARY KEY(job_id, step_id));
    """,
)


class SqliteStore:
    def __init__(self, path: str):
        self.path = path
        new = path != ":memory:" and not os.path.exists(path)  # ":memory:": the simulator
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        if new:
            os.chmod(path, 0o600)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=" + os.environ.get("MUSTER_SYNC", "NORMAL"))
        self._db.execute("PRAGMA foreign_keys=OFF")
        self._depth = 0
        self.on_commit = None  # callback(seconds) for the commit-latency metric
        self._migrate()

    # ---- schema ------------------------------------------------------------------------
    def _migrate(self) -> None:
        cur = self._db.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name='meta'")
        version = 0
        if cur.fetchone():
            row = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            version = int(row[0]) if row else 0
        for i, sql in enumerate(MIGRATIONS[version:], start=version + 1):
            with self.transaction():
                for stmt in filter(None, (s.strip() for s in sql.split(";"))):
                    self._db.execute(stmt)
                self._db.execute("INSERT OR REPLACE INTO meta VALUES('schema', ?)", (str(i),))

    # ---- transactions ------------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self):
        """Group changes; nested uses join the outer transaction. Commits on exit."""
        if self._depth == 0:
            self._db.execute("BEGIN IMMEDIATE")
        self._depth += 1
        try:
            yield self
        except BaseException:
            self._depth -= 1
            if self._depth == 0:
                self._db.execute("ROLLBACK")
            raise
        self._depth -= 1
        if self._depth == 0:
            t0 = time.perf_counter()
            self._db.execute("COMMIT")
            if self.on_commit is not None:
                self.on_commit(time.perf_counter() - t0)

    def _write(self, sql: str, args: tuple) -> None:
        if self._depth:
            self._db.execute(sql, args)
        else:
            with self.transaction():
                self._db.execute(sql, args)

    # ---- meta --------------------------------------------------------------------------
    def get_meta(self, key: str, default: str | None = None) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else default

    def set_meta(self, key: str, value: str) -> None:
        self._write("INSERT OR REPLACE INTO meta VALUES(?, ?)", (key, value))

    # ---- jobs --------------------------------------------------------------------------
    def put_job(self, rec: dict) -> None:
        self._write(
            "INSERT OR REPLACE INTO jobs(job_id, state, uid, end_time, array_job_id, record) "
            "VALUES(?,?,?,?,?,?)",
            (rec["job_id"], rec["state"], rec["uid"], rec.get("end_time"), rec.get("array_job_id"),
             _enc.encode(rec)),
        )

    def delete_job(self, job_id: int) -> None:
        self._write("DELETE FROM jobs WHERE job_id=?", (job_id,))

    def load_jobs(self, active_since: int | None = None) -> list[dict]:
        """Jobs the controller keeps in memory: unfinished ones, and finished ones that ended
        at or after ``active_since`` (MinJobAge)."""
        rows = self._db.execute(
            "SELECT record FROM jobs WHERE state IN ('PENDING','RUNNING') "
            "OR end_time IS NULL OR end_time >= ?", (active_since or 0,))
        return [_dec.decode(r[0]) for r in rows]

    def get_job(self, job_id: int) -> dict | None:
        row = self._db.execute("SELECT record FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        return _dec.decode(row[0]) if row else None

    def query_jobs(self, job_ids: list[int] | None = None, uid: int | None = None,
                   end_after: int | None = None, start_before: int | None = None) -> list[dict]:
        sql = "SELECT record FROM jobs"
        where, args = [], []
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
        return [_dec.decode(r[0]) for r in self._db.execute(sql, args)]

    def max_job_id(self) -> int:
        row = self._db.execute("SELECT MAX(job_id) FROM jobs").fetchone()
        return row[0] or 0

    # ---- scripts -----------------------------------------------------------------------
    def put_script(self, job_id: int, script: str, env: dict) -> None:
        self._write("INSERT OR REPLACE INTO scripts VALUES(?,?,?)", (job_id, script, _enc.encode(env)))

    def get_script(self, job_id: int) -> tuple[str, dict] | None:
        row = self._db.execute("SELECT script, env FROM scripts WHERE job_id=?", (job_id,)).fetchone()
        return (row[0], _dec.decode(row[1])) if row else None

    # ---- steps & runs ------------------------------------------------------------------
    def put_step(self, job_id: int, step_id: str, rec: dict) -> None:
        self._write("INSERT OR REPLACE INTO steps VALUES(?,?,?)", (job_id, str(step_id), _enc.encode(rec)))

    def steps_of(self, job_ids: list[int]) -> dict[int, list[dict]]:
        out: dict[int, list[dict]] = {}
        for i in range(0, len(job_ids), 500):
            chunk = job_ids[i:i + 500]
            rows = self._db.execute(
                f"SELECT job_id, record FROM steps WHERE job_id IN ({','.join('?' * len(chunk))})",
                chunk)
            for jid, rec in rows:
                out.setdefault(jid, []).append(_dec.decode(rec))
        return out

    def put_step_usage(self, job_id: int, step_id: str, stats: dict) -> None:
        """A step's final usage statistics (muster.controller.usage.aggregate)."""
        self._write("INSERT OR REPLACE INTO step_usage VALUES(?,?,?,?,?)",
                    (job_id, str(step_id), int(stats["in"]["max"].get("mem", 0)),
                     int(stats["user_ms"] + stats["sys_ms"]), _enc.encode(stats)))

    def usage_of(self, job_ids: list[int]) -> dict[int, dict[str, dict]]:
        """job id -> step id -> final usage statistics."""
        out: dict[int, dict[str, dict]] = {}
        for i in range(0, len(job_ids), 500):
            chunk = job_ids[i:i + 500]
            rows = self._db.execute(
                f"SELECT job_id, step_id, record FROM step_usage WHERE job_id IN "
                f"({','.join('?' * len(chunk))})", chunk)
            for jid, sid, rec in rows:
                out.setdefault(jid, {})[sid] = _dec.decode(rec)
        return out

    def put_run(self, job_id: int, run: int, rec: dict) -> None:
        self._write("INSERT OR REPLACE INTO runs VALUES(?,?,?)", (job_id, run, _enc.encode(rec)))

    def runs_of(self, job_ids: list[int]) -> dict[int, list[dict]]:
        out: dict[int, list[dict]] = {}
        for i in range(0, len(job_ids), 500):
            chunk = job_ids[i:i + 500]
            rows = self._db.execute(
                f"SELECT job_id, record FROM runs WHERE job_id IN ({','.join('?' * len(chunk))}) "
                "ORDER BY job_id, run", chunk)
            for jid, rec in rows:
                out.setdefault(jid, []).append(_dec.decode(rec))
        return out

    # ---- nodes & events ----------------------------------------------------------------
    def put_node(self, name: str, rec: dict) -> None:
        self._write("INSERT OR REPLACE INTO nodes VALUES(?,?)", (name, _enc.encode(rec)))

    def load_nodes(self) -> dict[str, dict]:
        return {n: _dec.decode(r) for n, r in self._db.execute("SELECT name, record FROM nodes")}

    def add_event(self, time: int, event: str, detail: str = "", job_id: int | None = None,
                  node: str | None = None) -> None:
        self._write("INSERT INTO events(time, job_id, node, event, detail) VALUES(?,?,?,?,?)",
                    (time, job_id, node, event, detail))

    def events_of(self, job_id: int, limit: int = 200) -> list[dict]:
        rows = self._db.execute(
            "SELECT time, event, detail FROM events WHERE job_id=? ORDER BY id DESC LIMIT ?",
            (job_id, limit))
        return [{"time": t, "event": e, "detail": d} for t, e, d in reversed(rows.fetchall())]

    # ---- accounting (sacctmgr) ---------------------------------------------------------
    def put_account(self, rec: dict) -> None:
        self._write("INSERT OR REPLACE INTO acct_accounts VALUES(?,?,?,?,?)",
                    (rec["name"], rec.get("parent"), int(rec.get("shares", 1)),
                     rec.get("description") or "", _enc.encode(rec)))

    def delete_account(self, name: str) -> None:
        self._write("DELETE FROM acct_accounts WHERE name=?", (name,))

    def load_accounts(self) -> list[dict]:
        return [_dec.decode(r[0]) for r in self._db.execute(
            "SELECT record FROM acct_accounts ORDER BY name")]

    def put_assoc(self, rec: dict) -> None:
        self._write("INSERT OR REPLACE INTO acct_assocs VALUES(?,?,?,?,?,?)",
                    (rec["user"], rec["account"], rec.get("partition") or "",
                     int(rec.get("shares", 1)), 1 if rec.get("is_default") else 0,
                     _enc.encode(rec)))

    def delete_assoc(self, user: str, account: str, partition: str = "") -> None:
        self._write("DELETE FROM acct_assocs WHERE user=? AND account=? AND partition=?",
                    (user, account, partition or ""))

    def load_assocs(self) -> list[dict]:
        return [_dec.decode(r[0]) for r in self._db.execute(
            "SELECT record FROM acct_assocs ORDER BY account, user, partition")]

    def put_qos(self, rec: dict) -> None:
        self._write("INSERT OR REPLACE INTO acct_qos VALUES(?,?,?)",
                    (rec["name"], int(rec.get("priority", 0)), _enc.encode(rec)))

    def delete_qos(self, name: str) -> None:
        self._write("DELETE FROM acct_qos WHERE name=?", (name,))

    def load_qos(self) -> list[dict]:
        return [_dec.decode(r[0]) for r in self._db.execute(
            "SELECT record FROM acct_qos ORDER BY name")]

    def put_usage(self, account: str, user: str, usage: float, last_decay: int) -> None:
        self._write("INSERT OR REPLACE INTO acct_usage VALUES(?,?,?,?)",
                    (account, user, float(usage), int(last_decay)))

    def load_usage(self) -> dict[tuple[str, str], tuple[float, int]]:
        return {(a, u): (x, t) for a, u, x, t in self._db.execute(
            "SELECT account, user, usage, last_decay FROM acct_usage")}

    # ---- reservations and per-job extras -------------------------------------------------
    def put_reservation(self, rec: dict) -> None:
        self._write("INSERT OR REPLACE INTO reservations VALUES(?,?)",
                    (rec["name"], _enc.encode(rec)))

    def delete_reservation(self, name: str) -> None:
        self._write("DELETE FROM reservations WHERE name=?", (name,))

    def load_reservations(self) -> list[dict]:
        return [_dec.decode(r[0]) for r in self._db.execute(
            "SELECT record FROM reservations ORDER BY name")]

    def put_job_extra(self, job_id: int, rec: dict) -> None:
        self._write("INSERT OR REPLACE INTO job_extra VALUES(?,?)", (job_id, _enc.encode(rec)))

    def load_job_extra(self) -> dict[int, dict]:
        return {j: _dec.decode(r) for j, r in self._db.execute(
            "SELECT job_id, record FROM job_extra")}

    def close(self) -> None:
        self._db.close()
