"""Active/standby controllers with real daemons (issue 16, muster.controller.leader).

The must-show scenario on PostgreSQL: a primary and a standby controller, two agents, a batch
job running, a two-node srun step streaming output and a burst of submissions in flight;
SIGKILL the primary: the standby leads within 10 s, every acknowledged job exists exactly
once, the batch job and the srun step keep running with no output lost, new submissions
succeed; the old primary, restarted, stands by — and when it is made to lead on its stale
epoch (MUSTER_FAULT_LEAD_EPOCH), its commit is fenced and nothing of it is visible.
Then ``scontrol ping`` (both UP) and ``scontrol takeover`` back to the primary."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest

from cluster import BIN, private_cluster, wait_for
from muster.cli.ctldping import ask
from muster.store import open_store
from muster.store.lease import Lease

STANDBY_LINE = "SlurmctldHost=standby(127.0.0.2)"


def _lease(url: str):
    st = open_store(url, claim="musterctld", shared=True)
    try:
        return Lease(st, "test#9", 8).read()
    finally:
        st.close()


def _role(c, index: int) -> str | None:
    reply = ask(os.path.join(c.state_dir, f"musterctld.{index}.sock"), {"op": "ping"})
    if not reply or not reply.get("ok"):
        return None
    return reply.get("role", "leader")


def _start_ctld(c, index: int, env: dict | None = None) -> subprocess.Popen:
    log = os.path.join(c.state_dir, "log", f"musterctld.{index}.restarted.log")
    p = subprocess.Popen([os.path.join(BIN, "musterctld"), "-f", c.conf, "--index", str(index),
                          "-L", log], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True,
                         env={**os.environ, **(env or {})})
    rec = c.pids()
    if index == 0:
        rec["controller"] = p.pid
    else:
        rec.setdefault("standby", {})[str(index)] = p.pid
    import json
    with open(os.path.join(c.state_dir, "muster.pids"), "w") as fh:
        json.dump(rec, fh)
    return p


@pytest.fixture
def ha_cluster(pg_server):
    url = pg_server.new_db()
    with private_cluster("muster-ha-", nodes=2, cpus=4,
                         extra_conf=f"MusterStateStore={url}\n{STANDBY_LINE}") as c:
        c.url = url
        yield c


def test_sigkill_primary_standby_takes_over(ha_cluster):
    c = ha_cluster
    assert _role(c, 0) == "leader" and _role(c, 1) == "standby"
    r = c.run(["scontrol", "ping"])
    assert r.rc == 0 and r.out.splitlines()[:2] == [
        "Slurmctld(primary) at localhost is UP", "Slurmctld(backup) at standby is UP"], r
    epoch0 = _lease(c.url).epoch

    long_job = c.sbatch("-N1", "-n1", "-o", os.path.join(c.workdir, "long.out"), "--wrap",
                        "echo begin; sleep 40; echo end", cwd=c.workdir)
    c.wait_state(long_job, "RUNNING")
    # a two-node step streaming numbered lines through srun, across the fail-over
    lines = 120
    srun = subprocess.Popen(
        ["srun", "-N2", "-n2", "-c1", "--label", "bash", "-c",
         f"for i in $(seq 1 {lines}); do echo line-$i; sleep 0.1; done"],
        cwd=c.workdir, env=c.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: c.run(["squeue", "-h", "-s", "-o", "%i"]).out.count(".0") >= 1,
             what="the srun step running")

    acked: dict[str, int] = {}
    failed: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def submitter(k: int) -> None:
        n = 0
        while not stop.is_set():
            name = f"burst-{k}-{n}"
            n += 1
            r = c.run(["sbatch", "--parsable", "-H", "-J", name, "-o", "/dev/null", "--wrap",
                       "true"], cwd=c.workdir)
            with lock:
                if r.rc == 0:
                    acked[name] = int(r.out.strip())
                else:
                    failed.append(r.err)

    threads = [threading.Thread(target=submitter, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    wait_for(lambda: len(acked) >= 20, timeout=60, what="20 submissions before the kill")
    primary = c.pids()["controller"]
    os.kill(primary, signal.SIGKILL)
    killed_at = time.monotonic()
    before = len(acked)
    # the standby leads: a new submission is acknowledged (by it: the primary is dead)
    wait_for(lambda: len(acked) > before + 3, timeout=20, interval=0.05,
             what="submissions acknowledged by the new leader")
    took = time.monotonic() - killed_at
    stop.set()
    for t in threads:
        t.join()
    assert took < 10, f"fail-over took {took:.1f} s"
    assert _role(c, 1) == "leader" and _lease(c.url).epoch == epoch0 + 1
    assert not failed, failed[:3]  # no command failed: they retried until the new leader

    # every acknowledged job exists exactly once (no retry created a second one)
    r = c.run(["squeue", "-h", "-t", "all", "-o", "%i|%j"])
    assert r.rc == 0, r
    by_name: dict[str, list[int]] = {}
    for row in r.out.split():
        jid, name = row.split("|", 1)
        by_name.setdefault(name, []).append(int(jid))
    for name, jid in acked.items():
        assert by_name.get(name) == [jid], (name, jid, by_name.get(name))
    assert all(len(v) == 1 for k, v in by_name.items() if k.startswith("burst-"))

    # the batch job and the srun step kept running; the step's output is complete
    assert c.state_of(long_job) == "RUNNING"
    out, err = srun.communicate(timeout=60)
    assert srun.returncode == 0, (out, err)
    for task in (0, 1):
        got = [ln.split(": ", 1)[1] for ln in out.splitlines() if ln.startswith(f"{task}: ")]
        assert got == [f"line-{i}" for i in range(1, lines + 1)], (task, got[:5], len(got))
    jid = c.sbatch("-o", "/dev/null", "--wrap", "true", cwd=c.workdir)  # new work runs
    assert c.wait_done(jid) == "COMPLETED"

    # the old primary comes back as standby ...
    _start_ctld(c, 0)
    wait_for(lambda: _role(c, 0) == "standby", what="the old primary standing by")
    assert _role(c, 1) == "leader"
    # ... and, made to lead on its stale epoch, cannot commit
    os.kill(c.pids()["controller"], signal.SIGTERM)
    wait_for(lambda: _role(c, 0) is None, what="the old primary stopped")
    stale = _start_ctld(c, 0, env={"MUSTER_FAULT_LEAD_EPOCH": str(epoch0)})
    wait_for(lambda: _role(c, 0) in ("leader", "standby"), what="the stale leader listening")
    r = c.run(["sbatch", "--parsable", "-J", "from-the-stale-leader", "--wrap", "true"],
              cwd=c.workdir, env={"MUSTER_SOCKET": os.path.join(c.state_dir, "musterctld.0.sock"),
                                  "MUSTER_CLIENT_RETRY": "2"})
    assert r.rc != 0, r
    wait_for(lambda: _role(c, 0) == "standby", what="the fenced leader back to standby")
    log = open(os.path.join(c.state_dir, "log", "musterctld.0.restarted.log")).read()
    assert "fenced" in log
    assert "from-the-stale-leader" not in c.ok("squeue", "-h", "-t", "all", "-o", "%j")
    assert _lease(c.url).epoch == epoch0 + 1 and _role(c, 1) == "leader"
    assert stale.poll() is None

    # scontrol takeover 0: the primary asks for the lease back; the leader hands over at
    # its next renewal; jobs keep running
    r = c.run(["scontrol", "takeover", "2"])
    assert r.rc == 1 and "Invalid controller index" in r.err, r
    r = c.run(["scontrol", "takeover", "0"])
    assert r.rc == 0, r
    wait_for(lambda: _role(c, 0) == "leader" and _role(c, 1) == "standby", timeout=15,
             what="the primary leading again")
    assert _lease(c.url).epoch == epoch0 + 2
    assert c.state_of(long_job) == "RUNNING"
    jid = c.sbatch("-o", "/dev/null", "--wrap", "true", cwd=c.workdir)
    assert c.wait_done(jid) == "COMPLETED"


def test_muster_up_standby_on_sqlite_ping_and_takeover(test_user):
    """``muster up --standby`` on the default SQLite store (one host): scontrol ping's
    layout, takeover for root only, a hand-over that keeps a job running, DOWN with the
    restore banner, and `muster down` stopping both controllers."""
    import tempfile

    from cluster import Cluster, _alive, cleanup
    base = tempfile.mkdtemp(prefix="muster-standby-", dir="/tmp")
    os.chmod(base, 0o755)
    c = Cluster(os.path.join(base, "state"), nodes=1, cpus=2)
    c.args.append("--standby")
    c.up()
    try:
        c.workdir = base
        assert _role(c, 0) == "leader" and _role(c, 1) == "standby"
        r = c.run(["scontrol", "ping"])
        assert (r.rc, r.out) == (0, "Slurmctld(primary) at localhost is UP\n"
                                    "Slurmctld(backup) at standby is UP\n"), r
        job = c.sbatch("-o", "/dev/null", "--wrap", "sleep 30", cwd="/tmp")
        c.wait_state(job, "RUNNING")
        r = c.run(["scontrol", "takeover"], user=test_user)
        assert r.rc == 1 and "Access/permission denied" in r.err, r
        assert _role(c, 1) == "standby"
        r = c.run(["scontrol", "takeover"])
        assert r.rc == 0, r
        wait_for(lambda: _role(c, 1) == "leader" and _role(c, 0) == "standby", timeout=15,
                 what="the standby leading after takeover")
        assert c.state_of(job) == "RUNNING"
        done = c.sbatch("-o", "/dev/null", "--wrap", "true", cwd="/tmp")
        assert c.wait_done(done) == "COMPLETED"
        os.kill(c.pids()["controller"], signal.SIGKILL)  # the primary, now the standby
        wait_for(lambda: _role(c, 0) is None, what="primary gone")
        r = c.run(["scontrol", "ping"])
        assert r.rc == 0 and r.out.splitlines()[:2] == [
            "Slurmctld(primary) at localhost is DOWN", "Slurmctld(backup) at standby is UP"], r
        assert "RESTORE SLURMCTLD DAEMON TO SERVICE" in r.out  # root sees the banner
        standby_pid = int(c.pids()["standby"]["1"])
    finally:
        c.down()
        cleanup(base)
    assert not _alive(standby_pid)
