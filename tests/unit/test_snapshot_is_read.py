"""Issue 15: a scheduling snapshot, sprio and sshare are reads.

* Against a real ClusterState on a real SQLite store: ``build_snapshot`` and the sprio and
  sshare requests change no row (``total_changes`` of the connection) and no job or
  reservation, even with a finished run to charge, a met dependency and expired reservations
  waiting; :func:`advance` (the clock's event step) is what stores those.
* Usage is charged when a job ends (``ClusterState.save``) into the pure ledger, and the
  fair-share numbers equal those of the former per-pass charging for the same history.
"""

from __future__ import annotations

import copy
import random
from dataclasses import replace
from types import SimpleNamespace

import pytest

from muster.common import clock as clocks
from muster.config import load
from muster.controller import acct_ops
from muster.controller.accounts import Accounts
from muster.controller.scheduling import advance, build_snapshot, sched_config
from muster.controller.state import ClusterState
from muster.core import fairshare as fsmod
from muster.core.ledger import Entry, UsageLedger, fold, value
from muster.lifecycle import job as lifecycle
from muster.model.alloc import NodeAlloc
from muster.model.job import Job
from muster.store.sqlite import SqliteStore

T0 = 1_700_000_000
HALF_LIFE = 3600


@pytest.fixture
def cluster(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=readcheck", "SlurmctldHost=localhost", f"StateSaveLocation={tmp_path}",
        "FirstJobId=1", "PriorityType=priority/multifactor", "PriorityWeightFairshare=1000",
        "PriorityWeightAge=100", f"PriorityDecayHalfLife={HALF_LIFE // 60}",
        "NodeName=n[0-1] CPUs=4 RealMemory=4000",
        "PartitionName=p Nodes=ALL Default=YES MaxTime=UNLIMITED State=UP", ""]))
    vclock = clocks.VirtualClock(T0)
    prev = clocks.install(vclock)
    cfg = load(str(conf))
    store = SqliteStore(cfg.db_path)
    st = ClusterState(cfg, store)
    yield st, vclock
    store.close()
    clocks.install(prev)


def _job(jid: int, user: str, **kw) -> Job:
    return Job(job_id=jid, name=f"j{jid}", user=user, uid=1000 + jid, account="default",
               partition="p", submit_time=T0, cpus_per_task=1, **kw)


def _start(st: ClusterState, job: Job, node: str, t: int) -> None:
    alloc = [NodeAlloc(node, 2, 100)]
    with st.store.transaction():
        lifecycle.start(job, partition="p", alloc=alloc, node_list=node,
                        tres_alloc="cpu=2", now=t)
        st.allocate(job)
        st.save(job)


def _world(st: ClusterState, vclock) -> dict[str, Job]:
    """A finished run (usage charged at its end), a running one, jobs depending on both, and
    one-shot and DAILY reservations that end before the clock is read."""
    a, b = _job(1, "alice"), _job(2, "bob")
    c = _job(3, "carol", dep_terms=[["afterok", 1, None, 0]], dependency="afterok:1")
    d = _job(4, "dave", dep_terms=[["after", 2, None, 1]], dependency="after:2+1")
    for j in (a, b, c, d):
        st.jobs[j.job_id] = j
        st.save(j)
    _start(st, a, "n0", T0 + 10)
    _start(st, b, "n1", T0 + 10)
    st.reservations.create({"name": "once", "users": ["alice"], "nodes": ["n0"],
                            "start": T0 + 20, "duration": 1, "flags": ["IGNORE_JOBS"]}, T0)
    st.reservations.create({"name": "daily", "users": ["alice"], "nodes": ["n1"],
                            "start": T0 + 20, "duration": 1, "flags": ["DAILY", "IGNORE_JOBS"]}, T0)
    vclock.set(T0 + 110)
    with st.store.transaction():
        lifecycle.finish(a, exit_code=0, signal=0, timed_out=False, now=T0 + 110)
        st.release(a)
        st.save(a)
    vclock.set(T0 + 200)  # reservations ended; dave's after:2+1 met
    return {"a": a, "b": b, "c": c, "d": d}


def _fields(st: ClusterState):
    return ([(j.job_id, j.state, j.dependency, copy.deepcopy(j.dep_terms), j.priority,
              j.reason) for j in st.jobs.values()], copy.deepcopy(st.reservations.resv),
            {k: st.accounts.ledger.entry(k) for k in st.accounts.ledger},
            dict(st.accounts.tracked))


def test_usage_is_charged_when_the_job_ends(cluster):
    st, vclock = cluster
    _world(st, vclock)
    # charged at the end event: 100 s × 2 CPUs, decayed from T0+110 to the reading
    assert st.accounts.ledger.entry(("default", "alice")) == Entry(T0 + 110, 200.0)
    assert st.store.load_usage()[("default", "alice")] == (200.0, T0 + 110)
    assert st.accounts.usage_at(("default", "alice"), T0 + 110 + HALF_LIFE) == pytest.approx(100.0)
    assert ("default", "bob") not in st.accounts.ledger  # still running: charged at its end


def test_snapshot_sprio_and_sshare_write_nothing(cluster):
    st, vclock = cluster
    jobs = _world(st, vclock)
    t = vclock.time()
    db = st.store._db
    before, fields = db.total_changes, _fields(st)
    snap, reasons = build_snapshot(st, int(t))
    ctl = SimpleNamespace(state=st, cfg=st.cfg, sched_cfg=sched_config(st.cfg))
    prio = acct_ops.sprio(ctl, {}, 0, 0)
    share = acct_ops.sshare(ctl, {}, 0, 0)
    assert db.total_changes == before
    assert _fields(st) == fields
    # the reads saw the pending world as it is: carol's and dave's dependencies are met
    assert {jv.job_id for jv in snap.pending} == {3, 4} and reasons == {}
    assert {r["job_id"] for r in prio["rows"]} == {3, 4}
    alice = next(r for r in share["rows"] if r["user"] == "alice")
    assert alice["raw_usage"] == pytest.approx(200.0 * 2 ** (-90 / HALF_LIFE))
    assert {v.name for v in snap.reservations} == set()  # both ended; none rolled yet
    # the clock's event step stores what the reads left alone
    advance(st, int(t))
    assert db.total_changes > before
    assert jobs["c"].dep_terms is None and jobs["c"].dependency is None
    assert jobs["d"].dep_terms is None
    assert "once" not in st.reservations.resv
    daily = st.reservations.resv["daily"]
    assert daily["start"] == T0 + 20 + 86400 and st.store.load_reservations()
    stored = {r["job_id"]: r for r in st.store.query_jobs()}
    assert stored[3]["dependency"] is None
    after = db.total_changes
    build_snapshot(st, int(t))
    advance(st, int(t))  # nothing left to resolve: nothing written
    assert db.total_changes == after


def test_a_waiting_dependency_shows_its_state_after_the_event(cluster):
    st, vclock = cluster
    a = _job(1, "alice")
    c = _job(3, "carol", dep_terms=[["afterok", 1, None, 0]], dependency="afterok:1")
    for j in (a, c):
        st.jobs[j.job_id] = j
        st.save(j)
    t = int(vclock.time())
    _snap, reasons = build_snapshot(st, t)
    assert reasons == {3: "Dependency"} and c.dependency == "afterok:1"  # read: unchanged
    advance(st, t)
    assert c.dependency == "afterok:1(unfulfilled)"
    assert c.dep_terms == [["afterok", 1, None, 0]]


# ---- the ledger equals the former per-pass charging --------------------------------------

def _former(history, passes, half_life, weights):
    """Fair-share usage as charged before issue 15: at each scheduling pass, runs that ended
    by then were charged at the pass time onto a value decayed to that time."""
    usage: dict = {}
    done = set()
    for t in passes:
        for i, (key, start, end, cpus) in enumerate(history):
            if i in done or end > t:
                continue
            done.add(i)
            amount = fsmod.charge({"cpu": cpus}, min(t, end) - start, weights, 1.0, False)
            u, last = usage.get(key, (0.0, t))
            usage[key] = (fsmod.decay(u, max(0, t - last), half_life) + amount, t)
    return usage


def _history(seed: int):
    rnd = random.Random(seed)
    keys = [("default", u) for u in ("alice", "bob", "carol")]
    out = []
    for _ in range(40):
        start = T0 + rnd.randrange(0, 20_000)
        out.append((rnd.choice(keys), start, start + rnd.randrange(1, 5_000), rnd.choice((1, 2, 4))))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_ledger_matches_the_former_charging(seed):
    history = _history(seed)
    # the controller passes after every event instant: each end is a pass time
    passes = sorted({end for _k, _s, end, _c in history})
    former = _former(history, passes, HALF_LIFE, None)
    cfg = SimpleNamespace(priority_decay_half_life=HALF_LIFE, partitions={}, priority_flags=(),
                          accounting_storage_enforce=())
    acc = Accounts(SqliteStore(":memory:"), cfg)
    for jid, (key, start, end, cpus) in sorted(enumerate(history, 1), key=lambda x: x[1][2]):
        j = SimpleNamespace(job_id=jid, restarts=0, state="RUNNING", completing=False,
                            end_time=end, start_time=start, account=key[0], user=key[1],
                            partition="p", qos="normal", holds_resources=True,
                            alloc=(NodeAlloc("n0", cpus, 0),))
        acc.job_saved(j, start)
        j.state = "COMPLETED"
        acc.job_saved(j, end)  # the end event
    for t in (passes[-1], passes[-1] + 1, passes[-1] + 10 * HALF_LIFE):
        for key, (u, last) in former.items():
            assert acc.usage_at(key, t) == pytest.approx(
                fsmod.decay(u, max(0, t - last), HALF_LIFE), rel=1e-12)
        views = acc.assoc_views(t)
        old = {k: fsmod.decay(u, t - last, HALF_LIFE) for k, (u, last) in former.items()}
        ref = [v if v.user is None else replace(v, raw_usage=old.get((v.account, v.user), 0.0))
               for v in views]
        assert {v.user for v in views} >= {"alice", "bob", "carol"}
        got = {(r.account, r.user): r.fairshare for r in fsmod.sshare(views, "fair_tree", 1.0)}
        want = {(r.account, r.user): r.fairshare for r in fsmod.sshare(ref, "fair_tree", 1.0)}
        assert got.keys() == want.keys()
        for k, f in want.items():
            assert got[k] == (f if not isinstance(f, float) else pytest.approx(f, rel=1e-9))


def test_fold_is_the_sum_of_decayed_charges_in_any_order():
    charges = [(T0 + 5, 10.0), (T0 + 100, 3.0), (T0 + 40, 7.5), (T0 + 100, 1.0)]
    now = T0 + 5000
    want = sum(value(Entry(at, amt), now, HALF_LIFE) for at, amt in charges)
    for order in (charges, list(reversed(charges)), sorted(charges)):
        e = None
        for at, amt in order:
            e = fold(e, amt, at, HALF_LIFE)
        assert value(e, now, HALF_LIFE) == pytest.approx(want, rel=1e-12)
    led = UsageLedger(0)  # PriorityDecayHalfLife=0: no decay
    led.charge(("a", "u"), 2.0, T0)
    assert led.usage(("a", "u"), T0 + 10**9) == 2.0 and value(None, T0, HALF_LIFE) == 0.0
