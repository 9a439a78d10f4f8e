"""Leases of srun/salloc allocations (muster.controller.leases): who holds each, what a
closed connection does, and the grace a restarted controller gives orphaned allocations.
The controller is a recorder around the real job machine and applier; the real thing, with
daemons and a SIGKILLed controller, is tests/integration/test_lease_reattach.py."""

import asyncio
import contextlib
from types import SimpleNamespace

import pytest

from muster.common import clock
from muster.common.errors import AccessDenied, RequestError
from muster.controller.applier import Applier
from muster.model.alloc import NodeAlloc
from muster.controller.leases import Leases
from muster.model.job import CANCELLED, COMPLETED, PENDING, RUNNING, Job


class Conn:
    def __init__(self):
        self.on_close: list = []

    def close(self):
        for cb in self.on_close:
            cb()


class Ctl:
    def __init__(self, *jobs, grace=5):
        self.cfg = SimpleNamespace(raw={}, requeue_exit=(), requeue_exit_hold=(),
                                   lease_grace=grace)
        self.requeue_delay = 2
        self.sent: list[tuple[str, dict]] = []
        self.events: list[tuple[int, str, str]] = []
        self.state = SimpleNamespace(
            jobs={j.job_id: j for j in jobs}, save=lambda j: None,
            mark_completing=lambda j: None, release=lambda j: None,
            event=lambda j, what, detail="", node=None: self.events.append((j.job_id, what, detail)),
            store=SimpleNamespace(transaction=contextlib.nullcontext))
        self.steps = SimpleNamespace(steps={}, notify=lambda j: None)
        self.applier = Applier(self)
        self._stopping = asyncio.Event()

    def is_admin(self, uid):
        return uid == 0

    def send_to_node(self, node, msg):
        self.sent.append((node, msg))

    def request_schedule(self):
        pass


def alloc(jid, *, state=RUNNING, leased=True, uid=1000, batch=False):
    return Job(job_id=jid, state=state, batch=batch, leased=leased, uid=uid, batch_host="n1",
               alloc=(NodeAlloc("n1", 1, 0), NodeAlloc("n2", 1, 0)) if state == RUNNING else ())


@pytest.fixture
def vclock():
    vc = clock.VirtualClock()
    prev = clock.install(vc)
    yield vc
    clock.install(prev)


def test_a_restarted_controller_orphans_only_unfinished_leased_allocations(vclock):
    ctl = Ctl(alloc(1), alloc(2, state=PENDING), alloc(3, leased=False),
              alloc(4, state=COMPLETED), alloc(5, batch=True, leased=False))
    assert set(Leases(ctl).orphans) == {1, 2}


def test_orphans_end_when_the_grace_runs_out_not_before(vclock):
    run, pend = alloc(1), alloc(2, state=PENDING)
    ctl = Ctl(run, pend, grace=5)
    leases = Leases(ctl)
    vclock.advance(4.9)
    leases.tick()
    assert run.state == RUNNING and not run.completing and pend.state == PENDING
    vclock.advance(0.1)
    leases.tick()
    # running: torn down on every node (it may run steps this controller never saw)
    assert run.completing and sorted(n for n, m in ctl.sent if m["op"] == "terminate") == \
        ["n1", "n2"]
    assert pend.state == CANCELLED
    lost = [e for e in ctl.events if e[1] == "lease_lost"]
    assert [e[0] for e in lost] == [1, 2] and "MusterLeaseGrace=5" in lost[0][2]
    assert not leases.orphans


def test_a_re_attached_allocation_outlives_the_grace(vclock):
    job = alloc(1)
    ctl = Ctl(job)
    leases = Leases(ctl)
    conn = Conn()
    leases.attach(job, 1000, conn)
    vclock.advance(60)
    leases.tick()
    assert job.state == RUNNING and not job.completing and ctl.sent == []
    conn.close()  # its srun dies later: the allocation ends at once
    assert job.completing
    assert ctl.events[-1][1:] == ("lease_lost", "srun/salloc connection closed")


def test_only_the_owner_or_an_operator_attaches_and_only_a_live_leased_allocation(vclock):
    mine, done = alloc(1), alloc(2, state=COMPLETED)
    ctl = Ctl(mine, done, alloc(3, leased=False), alloc(4, batch=True, leased=False))
    leases = Leases(ctl)
    with pytest.raises(AccessDenied):
        leases.attach(mine, 1001, Conn())
    with pytest.raises(RequestError) as err:
        leases.attach(done, 1000, Conn())
    assert err.value.code == "already_done"
    for jid in (3, 4):
        with pytest.raises(RequestError, match="not an interactive allocation"):
            leases.attach(ctl.state.jobs[jid], 1000, Conn())
    with pytest.raises(RequestError):
        leases.attach(mine, 1000, None)
    assert 1 in leases.orphans  # nothing was attached by the refusals
    leases.attach(mine, 0, Conn())  # an operator may
    assert 1 not in leases.orphans


def test_a_superseded_connection_closes_without_effect(vclock):
    job = alloc(1)
    ctl = Ctl(job)
    leases = Leases(ctl)
    first, second = Conn(), Conn()
    leases.hold(1, first)
    leases.attach(job, 1000, second)
    first.close()
    assert not job.completing and ctl.sent == []
    second.close()
    assert job.completing


def test_closes_caused_by_the_controller_stopping_end_nothing(vclock):
    job = alloc(1)
    ctl = Ctl(job)
    leases = Leases(ctl)
    conn = Conn()
    leases.hold(1, conn)
    ctl._stopping.set()  # SIGTERM, muster restart, a deposed leader tearing down
    conn.close()
    assert job.state == RUNNING and not job.completing and ctl.events == []


def test_leases_sent_back_and_forth_register_one_close_callback_per_connection(vclock):
    job = alloc(1)
    ctl = Ctl(job)
    leases = Leases(ctl)
    a, b = Conn(), Conn()
    for _ in range(100):
        leases.attach(job, 1000, a)
        leases.attach(job, 1000, b)
    assert len(a.on_close) == len(b.on_close) == 1
    a.close()  # superseded: nothing
    assert not job.completing
    b.close()
    assert job.completing
