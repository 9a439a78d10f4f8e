"""The controllers' lease and fencing epoch on both stores (issue 16, muster.store.lease):
one holder at a time, takeover only after expiry (or a handover), and a deposed leader's
commit fails whole — on PostgreSQL also when its takeover races a transaction already open,
and when the connection is lost and the transaction replayed."""

from __future__ import annotations

import threading
import time

import pytest

from muster.store import open_store
from muster.store.lease import Fenced, Lease

BACKENDS = ["sqlite", "postgres"]


@pytest.fixture(params=BACKENDS)
def url(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "state.db")
    return request.getfixturevalue("pg_server").new_db()


def _pair(url: str, timeout: float = 2.0):
    a = open_store(url, claim="musterctld", shared=True)
    b = open_store(url, claim="musterctld", shared=True)
    return a, b, Lease(a, "ctl-a#0", timeout), Lease(b, "ctl-b#1", timeout)


def _lead(store, lease: Lease) -> int:
    epoch = lease.try_acquire()
    assert epoch is not None
    store.fence = lease.check
    return epoch


def test_one_holder_takeover_after_expiry_and_fenced_commit(url):
    a, b, la, lb = _pair(url)
    try:
        e1 = _lead(a, la)
        assert lb.try_acquire() is None  # unexpired: the standby waits
        assert lb.read().holder == "ctl-a#0" and lb.read().remaining_s > 1
        a.put_job({"job_id": 1, "state": "PENDING", "uid": 1})  # the leader commits
        time.sleep(2.1)  # the lease (2 s) runs out: the outage under test, not a wait
        e2 = lb.try_acquire()
        assert e2 == e1 + 1
        b.fence = lb.check
        fenced: list[bool] = []
        la.on_fenced = lambda: fenced.append(True)
        with pytest.raises(Fenced):
            with a.transaction():
                a.put_job({"job_id": 2, "state": "PENDING", "uid": 1})
                a.set_meta("deposed", "wrote")
        assert fenced == [True] and la.fenced
        with pytest.raises(Fenced):  # every later commit too, without asking the database
            a.put_job({"job_id": 3, "state": "PENDING", "uid": 1})
        with pytest.raises(Fenced):
            la.renew()
        assert b.get_job(2) is None and b.get_job(3) is None and b.get_meta("deposed") is None
        assert b.get_job(1) is not None  # what the old leader committed in its epoch stays
        b.put_job({"job_id": 4, "state": "PENDING", "uid": 1})  # the new leader commits
        assert b.get_job(4) is not None
        a.fence = None  # the old leader, back as standby (unfenced), cannot take it back
        assert Lease(a, "ctl-a#0", 2).try_acquire() is None
    finally:
        a.close()
        b.close()


def test_handover_and_reclaim_by_the_same_holder(url):
    a, b, la, lb = _pair(url, timeout=30)
    try:
        e1 = _lead(a, la)
        lb.request_handover()
        assert la.renew() == "ctl-b#1"  # the leader sees the request at its renewal
        la.release()
        e2 = lb.try_acquire()  # released: no need to wait out 30 s
        assert e2 == e1 + 1 and lb.read().handover == ""
        # a controller restarted under its own name takes its unexpired lease back
        c = open_store(url, claim="musterctld", shared=True)
        try:
            assert Lease(c, "ctl-b#1", 30).try_acquire() == e2 + 1
        finally:
            c.close()
    finally:
        a.close()
        b.close()


def test_exclusive_claim_is_refused_while_controllers_share_the_store(url):
    from muster.store.base import StoreInUse
    a, b, _la, _lb = _pair(url)
    try:
        with pytest.raises(StoreInUse):
            open_store(url, claim="muster restore")
    finally:
        a.close()
        b.close()


def test_postgres_takeover_waits_for_a_commit_in_progress(pg_server):
    """The check locks the lease row to the COMMIT: a takeover that comes in between waits,
    then wins; the leader's transaction committed before it is kept, the next is fenced."""
    url = pg_server.new_db()
    a, b, la, lb = _pair(url, timeout=2)
    try:
        _lead(a, la)
        time.sleep(2.1)  # expired, but the old leader does not know yet
        held = threading.Event()
        took: list[int | None] = []

        def standby():
            held.wait(10)
            took.append(lb.try_acquire())

        t = threading.Thread(target=standby)
        t.start()
        with a.transaction():
            a.put_job({"job_id": 7, "state": "PENDING", "uid": 1})
            a.fence(a)  # lock the row now, as the commit does
            held.set()
            time.sleep(0.5)  # the standby's takeover is blocked on our row lock meanwhile
            assert not took
        t.join(10)
        assert took and took[0] is not None
        assert b.get_job(7) is not None  # committed in its epoch: the new leader sees it
        with pytest.raises(Fenced):
            a.put_job({"job_id": 8, "state": "PENDING", "uid": 1})
        assert b.get_job(8) is None
    finally:
        a.close()
        b.close()


def test_postgres_replayed_transaction_is_fenced_again(pg_server):
    """A leader loses its connection mid-transaction while a standby takes over: the store
    replays the transaction on a new connection, and the fencing check runs again on it."""
    url = pg_server.new_db()
    a, b, la, lb = _pair(url, timeout=2)
    try:
        _lead(a, la)
        time.sleep(2.1)
        with pytest.raises(Fenced):
            with a.transaction():
                a.put_job({"job_id": 9, "state": "PENDING", "uid": 1})
                assert lb.try_acquire() is not None  # the takeover, while we are open
                assert pg_server.terminate(url) >= 2  # both controllers' sessions
        assert b.get_job(9) is None
    finally:
        a.close()
        b.close()
