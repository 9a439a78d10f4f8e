"""srun and salloc allocations survive a controller restart (issue 16, muster.controller.leases
and muster.cli.lease). Real daemons, real processes: a standalone multi-node srun streaming
output and a salloc session running srun steps ride through a controller SIGKILL and restart —
their clients re-attach the leases to the new controller, which would otherwise end them
after MusterLeaseGrace — and end COMPLETED when they exit, not at their time limit. An srun
that exits while the controller is down still gives its allocation back, with its status; one
SIGKILLed while the controller is down leaves its allocation to be ended after the grace."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from cluster import _alive, private_cluster, read, restart_controller, wait_for

GRACE = 5


@pytest.fixture
def own_cluster():
    with private_cluster("muster-lease-", nodes=2, cpus=4,
                         extra_conf=f"MusterLeaseGrace={GRACE}") as c:
        yield c


def ctld_log(c) -> str:
    return read(os.path.join(c.state_dir, "log", "musterctld.log"))


def start(c, argv: list[str], out: str) -> subprocess.Popen:
    """A client command in the background (a session of its own), its stdout in ``out``,
    its stderr beside it."""
    with open(out, "wb") as fo, open(out + ".err", "wb") as fe:
        return subprocess.Popen(argv, cwd=c.workdir, env=c.env, stdin=subprocess.DEVNULL,
                                stdout=fo, stderr=fe, start_new_session=True)


def stop(p: subprocess.Popen) -> None:
    """Whatever of the command's session is left."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait(timeout=10)


def job_id_in(path: str) -> int:
    """The allocation's id, printed by the tasks as ``N: job <id>`` (srun -l)."""
    line = next(ln for ln in read(path).splitlines() if " job " in ln)
    return int(line.rsplit(" ", 1)[1])


def sacct_rows(c, jid: int) -> dict[str, tuple[str, str]]:
    r = c.run(["sacct", "-j", str(jid), "-n", "-P", "-o", "JobID,State,ExitCode"])
    assert r.rc == 0, r
    rows = [ln.split("|") for ln in r.out.splitlines() if ln]
    return {j: (s.split()[0], e) for j, s, e in rows}


def ticks(path: str, task: int) -> list[str]:
    return [ln.split(": ", 1)[1] for ln in read(path).splitlines()
            if ln.startswith(f"{task}: tick")]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_srun_step_streams_across_a_controller_restart(own_cluster, sig):
    """``srun -N2`` streaming output; the controller SIGKILLed (or stopped cleanly: closing
    its connections must not end the allocations) and restarted 1.5 s later in the middle.
    srun re-attaches its lease at once, the step runs on well past the grace with every line
    delivered, and the allocation ends COMPLETED when srun exits."""
    c = own_cluster
    out = os.path.join(c.workdir, "srun.out")
    flag = os.path.join(c.workdir, "go")
    body = ("echo job $SLURM_JOB_ID; for i in $(seq 1 20); do echo tick $i; sleep 0.1; done; "
            f"while [ ! -e {flag} ]; do sleep 0.1; done; "
            "for i in $(seq 21 40); do echo tick $i; sleep 0.1; done")
    p = start(c, ["srun", "-N2", "-n2", "-l", "-t", "30", "bash", "-c", body], out)
    try:
        wait_for(lambda: "tick 5" in read(out), timeout=30, what="step streaming")
        jid = job_id_in(out)
        restart_controller(c, kill_signal=sig, down_s=1.5)
        wait_for(lambda: f"allocation {jid}: lease re-attached" in ctld_log(c), timeout=20,
                 what="srun to re-attach its lease")
        assert f"MusterLeaseGrace={GRACE}" in ctld_log(c)  # it was an orphan at start
        time.sleep(GRACE)  # the new controller's grace runs out: the condition under test
        assert c.state_of(jid) == "RUNNING", "the re-attached allocation was ended"
        open(flag, "w").close()
        assert p.wait(timeout=60) == 0, read(out + ".err")
    finally:
        stop(p)
    for task in (0, 1):
        assert ticks(out, task) == [f"tick {i}" for i in range(1, 41)], read(out)
    assert c.wait_done(jid, timeout=15) == "COMPLETED"
    wait_for(lambda: sacct_rows(c, jid).get(f"{jid}.0", ("",))[0] == "COMPLETED",
             what="step 0 recorded COMPLETED")
    assert sacct_rows(c, jid)[str(jid)] == ("COMPLETED", "0:0")
    assert "lease_lost" not in c.run(["scontrol", "show", "job", str(jid)]).out


def test_salloc_session_runs_steps_across_a_controller_sigkill(own_cluster):
    """A salloc session: an srun step streaming while the controller is SIGKILLed and
    restarted, then a second srun step after the restart; salloc's exit ends the allocation
    COMPLETED with both steps recorded."""
    c = own_cluster
    out = os.path.join(c.workdir, "salloc.out")
    flag = os.path.join(c.workdir, "go")
    script = (f"srun -N2 -l bash -c 'echo job $SLURM_JOB_ID; for i in $(seq 1 10); do "
              f"echo tick $i; sleep 0.1; done; while [ ! -e {flag} ]; do sleep 0.1; done; "
              "echo tick 11'; "
              "srun -N2 -l echo second step")
    p = start(c, ["salloc", "-N2", "-t", "30", "bash", "-c", script], out)
    try:
        wait_for(lambda: "tick 10" in read(out), timeout=30, what="first step streaming")
        jid = job_id_in(out)
        restart_controller(c, down_s=1.5)
        wait_for(lambda: f"allocation {jid}: lease re-attached" in ctld_log(c), timeout=20,
                 what="salloc to re-attach its lease")
        open(flag, "w").close()
        assert p.wait(timeout=60) == 0, read(out + ".err")
    finally:
        stop(p)
    for task in (0, 1):
        assert ticks(out, task) == [f"tick {i}" for i in range(1, 12)], read(out)
    assert sorted(ln for ln in read(out).splitlines() if "second step" in ln) == \
        ["0: second step", "1: second step"]
    assert c.wait_done(jid, timeout=15) == "COMPLETED"
    wait_for(lambda: all(sacct_rows(c, jid).get(f"{jid}.{s}", ("",))[0] == "COMPLETED"
                         for s in (0, 1)), what="both steps recorded COMPLETED")
    assert sacct_rows(c, jid)[str(jid)] == ("COMPLETED", "0:0")


def test_srun_exiting_while_the_controller_is_down_releases_with_its_status(own_cluster):
    """The step ends (exit 3) while no controller runs: srun retries its release until the
    controller is back, and the allocation ends with srun's status (FAILED 3:0) — not the
    0:9 of a lease that ran out."""
    c = own_cluster
    out = os.path.join(c.workdir, "exit.out")
    flag = os.path.join(c.workdir, "go")
    body = f"echo job $SLURM_JOB_ID; while [ ! -e {flag} ]; do sleep 0.1; done; exit 3"
    p = start(c, ["srun", "-N2", "-n2", "-l", "-t", "30", "bash", "-c", body], out)
    try:
        wait_for(lambda: read(out).count(" job ") == 2, timeout=30, what="step running")
        jid = job_id_in(out)
        pid = c.pids()["controller"]
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not _alive(pid), what="controller exit")
        open(flag, "w").close()
        wait_for(lambda: read(out + ".err").count("Exited with exit code 3") == 2,
                 what="srun to see its tasks' end while the controller is down")
        assert p.poll() is None, "srun gave up its release instead of retrying it"
        restart_controller(c, kill_signal=0)
        assert p.wait(timeout=60) == 3, read(out + ".err")
    finally:
        stop(p)
    assert c.wait_done(jid, timeout=15) == "FAILED"
    assert sacct_rows(c, jid)[str(jid)] == ("FAILED", "3:0")


def _sigkill_client_while_the_controller_is_down(c, p: subprocess.Popen, jid: int) -> float:
    """SIGKILL the controller, then the client ``p`` alone (not its children), then start a
    controller again; returns when the outage began."""
    pid = c.pids()["controller"]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not _alive(pid), what="controller exit")
    t0 = time.monotonic()
    p.kill()
    p.wait(timeout=10)
    restart_controller(c, kill_signal=0)
    assert c.state_of(jid) == "RUNNING", "ended before its grace"
    return t0


def test_srun_sigkilled_while_the_controller_is_down_ends_after_the_grace(own_cluster):
    """srun SIGKILLed while no controller runs: nobody re-attaches its lease. The restarted
    controller keeps the allocation for MusterLeaseGrace seconds, then ends it (FAILED 0:9),
    as a lost lease ends one — not at its time limit (30 minutes)."""
    c = own_cluster
    out = os.path.join(c.workdir, "killed.out")
    p = start(c, ["srun", "-N2", "-n2", "-l", "-t", "30", "bash", "-c",
                  "echo job $SLURM_JOB_ID; exec sleep 300"], out)
    try:
        wait_for(lambda: read(out).count(" job ") == 2, timeout=30, what="step running")
        jid = job_id_in(out)
        t0 = _sigkill_client_while_the_controller_is_down(c, p, jid)
        wait_for(lambda: c.state_of(jid) == "FAILED", timeout=GRACE + 20,
                 what="the orphaned allocation to end")
        assert time.monotonic() - t0 >= GRACE
    finally:
        stop(p)
    assert sacct_rows(c, jid)[str(jid)] == ("FAILED", "0:9")
    assert f"allocation {jid} ended: lease not re-attached within MusterLeaseGrace={GRACE}" \
        in ctld_log(c)


def test_srun_sigkilled_while_the_controller_runs_ends_its_allocation_at_once(own_cluster):
    """The lease's ordinary end: srun dies, its connection closes, the allocation ends then
    and there (FAILED 0:9) — no grace, no timer."""
    c = own_cluster
    out = os.path.join(c.workdir, "gone.out")
    p = start(c, ["srun", "-N2", "-n2", "-l", "-t", "30", "bash", "-c",
                  "echo job $SLURM_JOB_ID; exec sleep 300"], out)
    try:
        wait_for(lambda: read(out).count(" job ") == 2, timeout=30, what="step running")
        jid = job_id_in(out)
        t0 = time.monotonic()
        p.kill()
        wait_for(lambda: c.state_of(jid) == "FAILED", timeout=GRACE + 20,
                 what="the allocation to end")
        assert time.monotonic() - t0 < GRACE, "ended by a timer, not by the lease's close"
    finally:
        stop(p)
    assert sacct_rows(c, jid)[str(jid)] == ("FAILED", "0:9")
    assert f"allocation {jid} ended: srun/salloc connection closed" in ctld_log(c)


def test_salloc_sigkilled_while_the_controller_is_down_its_steps_are_ended(own_cluster):
    """salloc SIGKILLed while no controller runs, its session's srun step going on (the shell
    and srun outlive salloc): after the grace the restarted controller ends the allocation
    and terminates that step on both nodes, although it never saw it start."""
    c = own_cluster
    out = os.path.join(c.workdir, "orphan.out")
    pids = os.path.join(c.workdir, "task")
    inner = f"echo job $SLURM_JOB_ID; echo $$ > {pids}.$SLURM_PROCID; exec sleep 300"
    p = start(c, ["salloc", "-N2", "-t", "30", "srun", "-N2", "-l", "bash", "-c", inner], out)
    try:
        # the pid files are written by the tasks themselves, the "job" lines reach the output
        # file through srun's relay: wait for both (the relay may be the later one)
        wait_for(lambda: all(read(f"{pids}.{t}").strip() for t in (0, 1))
                 and read(out).count(" job ") == 2, timeout=30, what="step running")
        jid = job_id_in(out)
        tasks = [int(read(f"{pids}.{t}")) for t in (0, 1)]
        _sigkill_client_while_the_controller_is_down(c, p, jid)
        assert all(_alive(t) for t in tasks), "the step died with salloc"
        wait_for(lambda: c.state_of(jid) == "FAILED", timeout=GRACE + 20,
                 what="the orphaned allocation to end")
        wait_for(lambda: not any(_alive(t) for t in tasks), timeout=30,
                 what="the step's tasks terminated")
    finally:
        stop(p)
    assert sacct_rows(c, jid)[str(jid)] == ("FAILED", "0:9")


def ctld_logs(c) -> str:
    """Every controller's log (the standby that took over writes its own)."""
    d = os.path.join(c.state_dir, "log")
    return "".join(read(os.path.join(d, f)) for f in sorted(os.listdir(d))
                   if f.startswith("musterctld") and f.endswith(".log"))


def test_srun_rides_a_fail_over_to_the_standby(pg_server):
    """Primary and standby controllers on PostgreSQL; the primary SIGKILLed while a
    two-node srun step streams: srun re-attaches its lease to the new leader, the step runs
    on past that leader's grace, and the allocation ends COMPLETED when srun exits."""
    url = pg_server.new_db()
    conf = f"MusterStateStore={url}\nSlurmctldHost=standby(127.0.0.2)\nMusterLeaseGrace={GRACE}"
    with private_cluster("muster-lease-ha-", nodes=2, cpus=4, extra_conf=conf) as c:
        out = os.path.join(c.workdir, "ha.out")
        flag = os.path.join(c.workdir, "go")
        body = ("echo job $SLURM_JOB_ID; for i in $(seq 1 10); do echo tick $i; sleep 0.1; "
                f"done; while [ ! -e {flag} ]; do sleep 0.1; done; echo tick 11")
        p = start(c, ["srun", "-N2", "-n2", "-l", "-t", "30", "bash", "-c", body], out)
        try:
            wait_for(lambda: "tick 10" in read(out), timeout=30, what="step streaming")
            jid = job_id_in(out)
            os.kill(c.pids()["controller"], signal.SIGKILL)
            wait_for(lambda: f"allocation {jid}: lease re-attached" in ctld_logs(c),
                     timeout=30, what="srun to re-attach its lease to the new leader")
            time.sleep(GRACE)  # the new leader's grace runs out: the condition under test
            assert c.state_of(jid) == "RUNNING", "the re-attached allocation was ended"
            open(flag, "w").close()
            assert p.wait(timeout=60) == 0, read(out + ".err")
        finally:
            stop(p)
        for task in (0, 1):
            assert ticks(out, task) == [f"tick {i}" for i in range(1, 12)], read(out)
        assert c.wait_done(jid, timeout=15) == "COMPLETED"
        assert sacct_rows(c, jid)[str(jid)] == ("COMPLETED", "0:0")
