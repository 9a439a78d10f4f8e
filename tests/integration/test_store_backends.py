"""The state store on both backends (issue 16): the same records, transactions, schema
versions, claim and backup/restore on SQLite and on a real PostgreSQL server (tests/pg.py);
PostgreSQL's connection loss; a real musterctld refusing a newer schema."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

import pytest

from muster.store import backup, open_store, postgres, sqlite
from muster.store.base import SchemaTooNew, StoreInUse, StoreLost

BACKENDS = ["sqlite", "postgres"]


@pytest.fixture
def make_url(request, tmp_path):
    """A function returning the URL/path of a new, empty store of ``kind``."""
    made = iter(range(1000))

    def make(kind: str) -> str:
        if kind == "sqlite":
            return str(tmp_path / f"s{next(made)}.db")
        return request.getfixturevalue("pg_server").new_db()
    return make


@pytest.fixture(params=BACKENDS)
def kind(request):
    return request.param


def _job(jid: int, state: str = "PENDING", uid: int = 1000, end: int | None = None,
         array: int | None = None) -> dict:
    return {"job_id": jid, "state": state, "uid": uid, "end_time": end, "array_job_id": array,
            "name": f"job{jid}", "ünïcode": "✓"}


def _fill(st) -> None:
    """One of every kind of record, partly inside a transaction."""
    with st.transaction():
        for j in range(1, 6):
            st.put_job(_job(j, "COMPLETED" if j < 3 else "PENDING", uid=1000 + j % 2,
                            end=100 * j if j < 3 else None, array=1 if j == 4 else None))
            st.put_script(j, f"#!/bin/sh\necho {j}\n", {"HOME": "/h", "N": str(j)})
        st.put_step(1, "batch", {"step": "batch", "rc": 0})
        st.put_step(1, "0", {"step": 0, "rc": 3})
        st.put_run(2, 1, {"run": 1})
        st.put_step_usage(1, "0", {"in": {"max": {"mem": 4096}}, "user_ms": 5, "sys_ms": 7})
        st.add_event(10, "submit", "first", job_id=1)
        st.add_event(11, "node_down", "gone", node="node1")
    st.put_node("node1", {"drain": "why"})
    st.put_account({"name": "physics", "parent": "root", "shares": 3, "description": "d"})
    st.put_assoc({"user": "alice", "account": "physics", "shares": 2, "is_default": True})
    st.put_qos({"name": "high", "priority": 10})
    st.put_usage("physics", "alice", 12.5, 99)
    st.put_reservation({"name": "maint", "nodes": "node1"})
    st.put_job_extra(3, {"reservation": "maint"})
    st.set_meta("next_job_id", "6")


def _content(st) -> dict:
    ids = list(range(1, 6))
    return {"jobs": st.query_jobs(), "scripts": [st.get_script(j) for j in ids],
            "steps": st.steps_of(ids), "runs": st.runs_of(ids), "usage": st.usage_of(ids),
            "nodes": st.load_nodes(), "events": st.query_events([], [], 100),
            "accounts": st.load_accounts(), "assocs": st.load_assocs(), "qos": st.load_qos(),
            "acct_usage": st.load_usage(), "resv": st.load_reservations(),
            "extra": st.load_job_extra(), "next": st.get_meta("next_job_id")}


def test_both_backends_have_the_same_migrations():
    assert len(postgres.MIGRATIONS) == len(sqlite.MIGRATIONS)


def test_records_round_trip(kind, make_url):
    st = open_store(make_url(kind))
    assert st.schema_version == len(sqlite.MIGRATIONS)
    _fill(st)
    assert [j["job_id"] for j in st.load_jobs(active_since=150)] == [2, 3, 4, 5]
    assert [j["job_id"] for j in st.query_jobs([1])] == [1, 4]  # 4 is a task of array 1
    assert [j["job_id"] for j in st.query_jobs(uid=1001)] == [1, 3, 5]
    assert [j["job_id"] for j in st.query_jobs(end_after=150)] == [2, 3, 4, 5]
    assert st.get_job(4)["ünïcode"] == "✓" and st.get_job(99) is None
    assert st.max_job_id() == 5
    assert st.get_script(2) == ("#!/bin/sh\necho 2\n", {"HOME": "/h", "N": "2"})
    assert sorted(s["rc"] for s in st.steps_of([1])[1]) == [0, 3]
    assert st.usage_of([1]) == {1: {"0": {"in": {"max": {"mem": 4096}}, "user_ms": 5,
                                          "sys_ms": 7}}}
    assert st.events_of(1) == [{"time": 10, "event": "submit", "detail": "first"}]
    assert [r[4] for r in st.query_events(["node=?"], ["node1"], 10)] == ["node_down"]
    rows, top = st.event_counts(0, ("node_down", "requeued"))
    assert rows == [("node_down", 1)] and top == 2
    assert st.load_usage() == {("physics", "alice"): (12.5, 99)}
    assert st.load_assocs()[0]["is_default"] is True
    st.delete_assoc("alice", "physics")
    st.delete_account("physics")
    st.delete_qos("high")
    st.delete_reservation("maint")
    st.delete_job(5)
    assert (st.load_assocs(), st.load_accounts(), st.load_qos(), st.load_reservations()) == \
        ([], [], [], [])
    assert st.get_job(5) is None and st.max_job_id() == 4
    st.close()


def test_transaction_is_all_or_nothing(kind, make_url):
    st = open_store(make_url(kind))
    with pytest.raises(RuntimeError):
        with st.transaction():
            st.put_job(_job(1))
            with st.transaction():  # nested: joins the outer one
                st.put_script(1, "x", {})
            raise RuntimeError("handler failed")
    assert st.get_job(1) is None and st.get_script(1) is None
    with st.transaction():
        st.put_job(_job(2))
    assert st.get_job(2) is not None
    st.close()


def test_old_schema_migrates_forward(kind, make_url):
    url = make_url(kind)
    st = open_store(url, migrate=False)
    st._migrate(upto=2)  # a store written by a release of schema 2
    st.put_job(_job(1, array=None))
    st.close()
    st = open_store(url)
    assert st.schema_version == len(sqlite.MIGRATIONS)
    assert st.get_job(1)["name"] == "job1"
    st.put_account({"name": "a", "shares": 1})  # a table of schema 3 exists now
    assert st.load_accounts()[0]["name"] == "a"
    st.close()


def test_newer_schema_is_refused(kind, make_url):
    url = make_url(kind)
    st = open_store(url)
    st.set_meta("schema", str(len(sqlite.MIGRATIONS) + 1))
    st.close()
    with pytest.raises(SchemaTooNew, match="newer than the"):
        open_store(url)


def test_claim_is_exclusive(kind, make_url):
    url = make_url(kind)
    first = open_store(url, claim="musterctld")
    with pytest.raises(StoreInUse, match="in use by another process"):
        open_store(url, claim="muster restore")
    reader = open_store(url, migrate=False)  # a backup needs no claim
    assert reader.schema_version == len(sqlite.MIGRATIONS)
    reader.close()
    first.close()
    open_store(url, claim="muster restore").close()  # released with its holder


@pytest.mark.parametrize("src,dst", [("sqlite", "sqlite"), ("postgres", "postgres"),
                                     ("sqlite", "postgres"), ("postgres", "sqlite")])
def test_backup_restore_round_trip(src, dst, make_url):
    st = open_store(make_url(src))
    _fill(st)
    before = _content(st)
    buf = io.BytesIO()
    counts = backup.dump(st, buf)
    assert counts["jobs"] == 5 and counts["events"] == 2
    st.close()
    buf.seek(0)
    header, tables = backup.read(buf, len(sqlite.MIGRATIONS))
    assert header["schema"] == len(sqlite.MIGRATIONS)
    fresh = open_store(make_url(dst))
    fresh.put_job(_job(77))  # replaced: a restore leaves nothing of what was there
    fresh.replace_all(header["schema"], tables)
    assert _content(fresh) == before
    assert fresh.get_job(77) is None
    fresh.add_event(20, "after", "restore")  # ids continue after the restored ones
    assert fresh.query_events([], [], 1)[0][0] == 3
    fresh.close()


def test_restore_of_an_older_schema_migrates(kind, make_url):
    old = open_store(make_url("sqlite"), migrate=False)
    old._migrate(upto=2)
    old.put_job(_job(1))
    buf = io.BytesIO()
    backup.dump(old, buf)
    buf.seek(0)
    header, tables = backup.read(buf, len(sqlite.MIGRATIONS))
    assert header["schema"] == 2 and "acct_accounts" not in tables
    st = open_store(make_url(kind))
    st.replace_all(2, tables)
    assert st.schema_version == len(sqlite.MIGRATIONS) and st.get_job(1)["name"] == "job1"
    st.close()


def test_truncated_or_newer_backup_is_refused(make_url):
    st = open_store(make_url("sqlite"))
    _fill(st)
    buf = io.BytesIO()
    backup.dump(st, buf)
    lines = buf.getvalue().splitlines(keepends=True)
    with pytest.raises(backup.BadBackup, match="incomplete"):
        backup.read(io.BytesIO(b"".join(lines[:-1])), len(sqlite.MIGRATIONS))
    with pytest.raises(backup.BadBackup, match="newer than"):
        backup.read(io.BytesIO(buf.getvalue()), len(sqlite.MIGRATIONS) - 1)
    with pytest.raises(backup.BadBackup, match="not a Muster backup"):
        backup.read(io.BytesIO(b"hello\n"), len(sqlite.MIGRATIONS))


# ---- PostgreSQL: connection loss ------------------------------------------------------------

def test_connection_lost_mid_transaction_replays_it(pg_server):
    url = pg_server.new_db()
    st = open_store(url, claim="musterctld")
    with st.transaction():
        st.put_job(_job(1))
        st.add_event(1, "submit", job_id=1)
        assert pg_server.terminate(url) == 1  # the server drops our session mid-transaction
        st.put_script(1, "s", {})  # reconnects, replays the two writes, then this one
        st.add_event(2, "queued", job_id=1)
    assert st.get_job(1)["name"] == "job1" and st.get_script(1) == ("s", {})
    assert [e["event"] for e in st.events_of(1)] == ["submit", "queued"]  # each once
    pg_server.terminate(url)  # between transactions: the next read reconnects
    assert st.max_job_id() == 1
    with pytest.raises(StoreInUse):  # the claim was taken again with the new session
        open_store(url, claim="other")
    st.close()


def test_outage_past_the_retry_window_stops_and_applies_nothing(pg_server):
    url = pg_server.new_db()
    st = postgres.PostgresStore(url, claim="musterctld", retry_s=1.0)
    st.put_job(_job(1))
    with pytest.raises(StoreLost, match="unreachable"):
        with st.transaction():
            st.put_job(_job(2))
            pg_server.allow_connections(url, False)
            pg_server.terminate(url)
            st.put_job(_job(3))
    assert not isinstance(StoreLost("x"), Exception)  # no handler's except Exception eats it
    pg_server.allow_connections(url, True)
    again = open_store(url)
    assert [j["job_id"] for j in again.query_jobs()] == [1]  # no half-applied transaction
    again.close()


def test_multi_host_connection_string_reaches_the_writable_server(pg_server):
    url = pg_server.new_db()
    db = url.split("/")[3].split("?")[0]
    dead = pg_server.port + 1 if pg_server.port < 60000 else pg_server.port - 1
    multi = (f"postgresql://postgres@/{db}?host={pg_server.base},{pg_server.base}"
             f"&port={dead},{pg_server.port}&target_session_attrs=read-write")
    st = open_store(multi)
    st.put_job(_job(1))
    assert st.conninfo == multi and st.get_job(1)["job_id"] == 1
    st.close()


# ---- a real musterctld refuses a newer schema -------------------------------------------------

def _conf(state: str, extra: str = "") -> str:
    conf = os.path.join(state, "slurm.conf")
    key = os.path.join(state, "muster.key")
    from muster.common import auth
    auth.generate_key(key)
    with open(conf, "w") as fh:
        fh.write(f"ClusterName=t\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=1\n"
                 f"StateSaveLocation={state}\nAuthInfo=key={key}\n{extra}\n"
                 "NodeName=node1 CPUs=1 RealMemory=100\nPartitionName=p Nodes=node1 Default=YES\n")
    return conf


def test_musterctld_refuses_a_newer_schema(kind, make_url):
    state = tempfile.mkdtemp(prefix="muster-schema-", dir="/tmp")
    os.chmod(state, 0o700)
    url = os.path.join(state, "muster.db") if kind == "sqlite" else make_url(kind)
    conf = _conf(state, "" if kind == "sqlite" else f"MusterStateStore={url}")
    st = open_store(url)
    st.set_meta("schema", "99")
    st.close()
    ctld = os.path.join(os.path.dirname(sys.executable), "musterctld")
    r = subprocess.run([ctld, "-D", "-f", conf], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r
    assert "schema version 99" in r.stderr and "refusing to start" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


class _CuttingProxy:
    """A Unix-socket proxy in front of the test server that cuts the connection at a COMMIT:
    ``mode`` "before" drops the COMMIT unsent; "after" sends it and drops the server's answer
    (the transaction has committed; the client never hears it). One cut, then it forwards.

    Each direction of a connection has its own thread, and only the server-to-client one
    reads the server: the client waits for each answer before it sends again, so the first
    data after the COMMIT is its answer."""

    def __init__(self, pg_server, mode: str):
        import socket
        import threading
        self.mode, self.cut, self.drop_answer = mode, False, False
        self.dir = tempfile.mkdtemp(prefix="muster-pgproxy-")
        self.target = os.path.join(pg_server.base, f".s.PGSQL.{pg_server.port}")
        self.path = os.path.join(self.dir, f".s.PGSQL.{pg_server.port}")
        self.lsock = socket.socket(socket.AF_UNIX)
        self.lsock.bind(self.path)
        self.lsock.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, url: str) -> str:
        return url.replace(url.split("host=")[1].split("&")[0], self.dir)

    def _accept(self) -> None:
        import socket
        import threading
        while True:
            try:
                client, _ = self.lsock.accept()
            except OSError:
                return
            server = socket.socket(socket.AF_UNIX)
            server.connect(self.target)
            threading.Thread(target=self._pipe, args=(server, client, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(client, server, True), daemon=True).start()

    def _pipe(self, src, dst, upstream: bool) -> None:
        """Copy ``src`` to ``dst`` (client to server when ``upstream``) until one ends or
        this connection is cut."""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if upstream and not self.cut and b"COMMIT" in data:
                    self.cut = True
                    if self.mode == "before":
                        break
                    self.drop_answer = True
                elif not upstream and self.drop_answer:
                    self.drop_answer = False
                    break  # the COMMIT's answer: never delivered
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(2)  # SHUT_RDWR: the other direction's thread ends too
            s.close()

    def close(self) -> None:
        self.lsock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.mark.parametrize("mode", ["before", "after"])
def test_connection_lost_at_commit_applies_the_transaction_exactly_once(pg_server, mode,
                                                                         caplog):
    """The COMMIT is lost on its way (replayed on a new session and committed) or its answer
    is (the commit stamp shows it was applied: nothing replayed). Either way every write of the
    transaction is there once, and the store goes on."""
    url = pg_server.new_db()
    open_store(url).close()  # the schema, created without the proxy
    proxy = _CuttingProxy(pg_server, mode)
    try:
        st = open_store(proxy.url(url), claim="musterctld")
        st.put_job(_job(1))
        with st.transaction():
            st.put_job(_job(2))
            st.add_event(10, "submit", job_id=2)
        assert proxy.cut
        # which way the store found out: the answer lost → the stamp says it committed;
        # the COMMIT lost → the transaction replayed on the new session
        said = caplog.text
        assert ("the last commit had been applied" in said) == (mode == "after"), said
        assert ("replayed" in said) == (mode == "before"), said
        check = open_store(url)
        assert [j["job_id"] for j in check.query_jobs()] == [1, 2]
        assert [e["event"] for e in check.events_of(2)] == ["submit"]  # once
        check.close()
        st.put_job(_job(3))  # the new session serves on
        assert st.max_job_id() == 3
        st.close()
    finally:
        proxy.close()


def test_a_claim_taken_while_disconnected_is_never_taken_back(pg_server):
    """Only our own lingering session is ended to retake the claim: a store another process
    claimed while our connection was down stays theirs, and we stop (StoreLost)."""
    url = pg_server.new_db()
    st = open_store(url, claim="musterctld")
    st.put_job(_job(1))
    assert pg_server.terminate(url) == 1
    other = open_store(url, claim="other")  # got in first
    with pytest.raises(StoreLost, match="claimed by another process"):
        st.put_job(_job(2))
    assert [j["job_id"] for j in other.query_jobs()] == [1]
    other.put_job(_job(3))  # still theirs: their session was not touched
    other.close()


def test_request_replies_are_capped_per_user(kind, make_url):
    """Remembered replies (muster.controller.idempotency) expire by age and are trimmed to
    each user's newest ``keep_per_uid``; other users' are untouched."""
    st = open_store(make_url(kind))
    for i in range(8):
        st.remember_request(1000, f"r{i}", 100 + i, {"ok": True, "n": i})
    st.remember_request(2000, "other", 50, {"ok": True})
    st.remember_request(2000, "old", 10, {"ok": True})
    st.forget_requests(20, keep_per_uid=3)
    assert [i for i in range(8) if st.recall_request(1000, f"r{i}")] == [5, 6, 7]
    assert st.recall_request(2000, "other") == {"ok": True}
    assert st.recall_request(2000, "old") is None  # expired
    st.close()


def test_sqlite_commits_never_checkpoint_a_thread_does(tmp_path):
    """SQLite's automatic checkpoint (an fsync of the database file inside a COMMIT, on the
    controller's loop) is off; a thread of the store's own copies the WAL into the database
    file after commits, and the WAL then restarts at its beginning instead of growing."""
    path = str(tmp_path / "ck.db")

    def in_file() -> int:  # jobs in the database file alone (immutable=1 reads no WAL)
        with contextlib.closing(sqlite3.connect(f"file:{path}?immutable=1", uri=True)) as db:
            return db.execute("SELECT count(*) FROM jobs").fetchone()[0]
    st = sqlite.SqliteStore(path)
    try:
        assert st._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        for j in range(1, 3001):  # thousands of WAL pages: three automatic checkpoints' worth
            st.put_job(_job(j, uid=1000 + j))
        ckp = st._checkpointer
        assert ckp is not None

        def settled() -> bool:  # a checkpoint begun after the last commit has ended
            return not ckp.dirty.is_set() and not ckp.running
        deadline = time.monotonic() + 30
        while not settled():
            assert time.monotonic() < deadline, "the checkpointer never caught up"
            time.sleep(0.05)
        assert ckp.copied_all and in_file() == 3000  # nothing writes the file now
        wal = os.path.getsize(path + "-wal")
        st.put_job(_job(3001))  # everything was copied: this commit restarts the WAL
        assert os.path.getsize(path + "-wal") <= wal
    finally:
        st.close()
    assert st._checkpointer is None and in_file() == 3001  # the last close checkpoints
