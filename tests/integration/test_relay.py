"""Commands on hosts other than the controller's, through musterd's relay (issue 16).

"Another host" is made real with namespaces: the command runs with its own hostname (a UTS
namespace: the node it runs on) and with every controller socket of StateSaveLocation covered
(a mount namespace: /dev/null bound over each), so what it can reach is what a login or compute
node has — its own musterd's relay socket, which forwards to the leading controller over the
authenticated TCP link (muster.agent.relay). Then the user switches to the unprivileged test
user, so identity comes from the kernel as it would there."""

from __future__ import annotations

import glob
import os
import pwd
import signal
import socket
import struct
import subprocess
import threading

import pytest

from cluster import BIN, TEST_USER, private_cluster, user_exists, wait_for

pytestmark = pytest.mark.skipif(not user_exists(TEST_USER),
                                reason="needs the unprivileged test user")

STANDBY_LINE = "SlurmctldHost=standby(127.0.0.2)"
# covers the controller's sockets, names the host, then becomes the user (or stays root)
ELSEWHERE = ('mount --make-rprivate / && for s in "$STATE"/musterctld*.sock; do '
             'mount --bind /dev/null "$s"; done && hostname "$HOST" && exec "$@"')


def elsewhere(c, node: str, argv: list[str], user: str | None = TEST_USER,
              extra_env: dict | None = None, **kw):
    """``argv`` as ``user`` on host ``node``, which has no controller socket: a Popen."""
    become = []
    if user is not None:
        pw = pwd.getpwnam(user)
        become = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups",
                  "--reset-env"]
    env = {**c.env, "STATE": c.state_dir, "HOST": node}
    if user is not None:
        env.update(HOME=pwd.getpwnam(user).pw_dir, USER=user, LOGNAME=user)
    # --reset-env would drop PATH and MUSTER_CONF: set them again inside
    inner = ["env", f"PATH={env['PATH']}", f"MUSTER_CONF={c.conf}",
             f"HOME={env.get('HOME', '/root')}"] if become else ["env"]
    inner += [f"{k}={v}" for k, v in (extra_env or {}).items()]
    cmd = ["unshare", "-m", "-u", "sh", "-c", ELSEWHERE, "sh", *become, *inner, *argv]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)


def run_elsewhere(c, node: str, argv: list[str], user: str | None = TEST_USER,
                  timeout: float = 60, extra_env: dict | None = None) -> tuple[int, str, str]:
    p = elsewhere(c, node, argv, user, extra_env, cwd=c.workdir)
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


@pytest.fixture(scope="module")
def c():
    with private_cluster("muster-relay-", nodes=3, cpus=4) as cl:
        yield cl


def _nodes(c) -> list[str]:
    return c.ok("sinfo", "-h", "-N", "-o", "%N").split()


def test_the_controller_socket_is_really_out_of_reach(c):
    """The premise: in that namespace the controller's socket answers nothing."""
    code = ("import socket,sys; s=socket.socket(socket.AF_UNIX)\n"
            "try: s.connect(sys.argv[1])\nexcept OSError as e: print(e.errno)")
    rc, out, err = run_elsewhere(c, _nodes(c)[0], [
        "python3", "-c", code, os.path.join(c.state_dir, "musterctld.sock")])
    assert rc == 0 and out.strip() == "111", (out, err)  # ECONNREFUSED


def test_commands_elsewhere_act_as_the_kernel_says(c):
    node = _nodes(c)[1]
    rc, out, err = run_elsewhere(c, node, ["sbatch", "--parsable", "-o", "/dev/null", "--wrap",
                                           "sleep 30"])
    assert rc == 0, err
    mine = int(out.strip())
    # the job is the test user's: the relay passed the caller's uid from SO_PEERCRED
    assert c.ok("squeue", "-h", "-j", str(mine), "-o", "%u").strip() == TEST_USER
    rc, out, err = run_elsewhere(c, node, ["squeue", "-h", "-o", "%i %u", "-j", str(mine)])
    assert (rc, out.split()) == (0, [str(mine), TEST_USER]), err
    # nobody's word but the kernel's: the user cannot act on root's job from there either
    roots = c.sbatch("-o", "/dev/null", "--wrap", "sleep 30")
    rc, out, err = run_elsewhere(c, node, ["scancel", str(roots)])
    assert rc != 0 and "Access/permission denied" in err, (rc, out, err)
    assert c.state_of(roots) in ("PENDING", "RUNNING")
    rc, out, err = run_elsewhere(c, node, ["scancel", str(mine)])
    assert rc == 0, err
    assert c.wait_done(mine) == "CANCELLED"
    c.ok("scancel", str(roots))
    # root on that host is root (a node's admin), as with Slurm's munge
    rc, out, err = run_elsewhere(c, node, ["scontrol", "show", "config"], user=None)
    assert rc == 0 and "SlurmctldPort" in out, err


def test_srun_elsewhere_streams_a_multi_node_step(c):
    """srun's I/O listener binds the address the relay's link leaves from, where the
    controller sends the step daemons."""
    rc, out, err = run_elsewhere(c, _nodes(c)[2], [
        "srun", "-N2", "-n2", "-c1", "--label", "bash", "-c", "echo hi-$SLURM_PROCID; "
        "echo $SLURM_SUBMIT_HOST"], timeout=90)
    assert rc == 0, err
    lines = out.splitlines()
    assert sorted(ln for ln in lines if "hi-" in ln) == ["0: hi-0", "1: hi-1"], out
    assert sorted(ln for ln in lines if "hi-" not in ln) == [f"{r}: {_nodes(c)[2]}"
                                                             for r in (0, 1)], out


def test_salloc_elsewhere_keeps_its_lease_on_the_relay(c):
    rc, out, err = run_elsewhere(c, _nodes(c)[0], [
        "salloc", "-N1", "-c1", "bash", "-c", "srun hostname; squeue -h -j $SLURM_JOB_ID -o %T"],
        timeout=90)
    assert rc == 0, err
    assert out.split()[-1] == "RUNNING", out
    assert "Granted job allocation" in err, err


def test_a_login_host_relays_with_musterd_relay_only(c):
    """A host that is no node (a login host) runs ``musterd --relay-only``: its commands work
    and nothing registers as a node."""
    log = os.path.join(c.state_dir, "log", "login1.log")
    p = subprocess.Popen([os.path.join(BIN, "musterd"), "-f", c.conf, "-N", "login1",
                          "--relay-only", "-L", log], env=c.env, stdin=subprocess.DEVNULL)
    try:
        path = os.path.join(c.state_dir, "spool", "login1", "musterd.sock")
        wait_for(lambda: os.path.exists(path), what="the login host's relay socket")
        rc, out, err = run_elsewhere(c, "login1", ["sbatch", "--parsable", "-o", "/dev/null",
                                                   "--wrap", "true"])
        assert rc == 0, err
        assert c.wait_done(int(out.strip())) == "COMPLETED"
        assert "login1" not in c.ok("sinfo", "-h", "-N", "-o", "%N")
        # a host without a relay: the command tries for its retry budget, then Slurm's error
        rc, out, err = run_elsewhere(c, "login2", ["squeue"],
                                     extra_env={"MUSTER_CLIENT_RETRY": "1"})
        assert rc != 0 and "Unable to contact slurm controller" in err, (out, err)
    finally:
        p.terminate()
        assert p.wait(timeout=20) == 0
    assert not os.path.exists(path)


def test_relay_bounds_connections_per_user(c):
    """A user cannot hold more than MAX_CONNS_PER_UID relay connections (then "busy")."""
    from muster.agent.relay import MAX_CONNS_PER_UID
    path = glob.glob(os.path.join(c.state_dir, "spool", _nodes(c)[0], "musterd.sock"))[0]
    code = f"""
import socket, struct, sys
held = []
for _ in range({MAX_CONNS_PER_UID}):
    s = socket.socket(socket.AF_UNIX); s.connect({path!r}); held.append(s)
extra = socket.socket(socket.AF_UNIX); extra.connect({path!r}); extra.settimeout(10)
head = extra.recv(4); body = extra.recv(struct.unpack(">I", head)[0])
print(body.decode())
"""
    r = c.run(["python3", "-c", code], user=TEST_USER, timeout=60)
    assert r.rc == 0 and '"code":"busy"' in r.out.replace(" ", ""), r
    # and the next command of that user works once they are gone
    wait_for(lambda: run_elsewhere(c, _nodes(c)[0], ["squeue", "-h"])[0] == 0,
             what="the relay serving the user again")


def test_relay_refuses_garbage_and_stays_up(c):
    path = os.path.join(c.state_dir, "spool", _nodes(c)[0], "musterd.sock")
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.settimeout(10)
    s.sendall(struct.pack(">I", 1 << 30))  # a frame far over the limit
    head = s.recv(4)
    body = s.recv(struct.unpack(">I", head)[0]).decode()
    assert "too large" in body, body
    s.close()
    rc, out, err = run_elsewhere(c, _nodes(c)[0], ["squeue", "-h", "-o", "%i"])
    assert rc == 0, err


# ---- fail-over -----------------------------------------------------------------------------------

@pytest.fixture
def ha_cluster(pg_server):
    url = pg_server.new_db()
    with private_cluster("muster-relay-ha-", nodes=2, cpus=4,
                         extra_conf=f"MusterStateStore={url}\n{STANDBY_LINE}") as cl:
        yield cl


def test_commands_elsewhere_ride_a_failover(ha_cluster):
    """SIGKILL the primary while a step launched elsewhere streams and submissions from
    elsewhere keep coming: the relay finds the new leader, nothing fails, nothing is lost."""
    c = ha_cluster
    nodes = _nodes(c)
    lines = 80
    srun = elsewhere(c, nodes[0], ["srun", "-N2", "-n2", "-c1", "--label", "bash", "-c",
                                   f"for i in $(seq 1 {lines}); do echo line-$i; sleep 0.1; "
                                   "done"], cwd=c.workdir)
    wait_for(lambda: c.run(["squeue", "-h", "-s", "-o", "%i"]).out.count(".0") >= 1,
             what="the srun step running")
    # scontrol ping from a host with no controller: the leader says who is alive
    want = ["Slurmctld(primary) at localhost is UP", "Slurmctld(backup) at standby is UP"]
    wait_for(lambda: run_elsewhere(c, nodes[1], ["scontrol", "ping"])[1].splitlines() == want,
             what="both controllers UP from elsewhere")
    acked: list[int] = []
    failed: list[str] = []
    stop = threading.Event()

    def submitter() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            rc, out, err = run_elsewhere(c, nodes[1], ["sbatch", "--parsable", "-H", "-J",
                                                       f"far-{n}", "--wrap", "true"])
            (acked.append(int(out.strip())) if rc == 0 else failed.append(err))

    t = threading.Thread(target=submitter)
    t.start()
    try:
        wait_for(lambda: len(acked) >= 3, timeout=60, what="submissions before the kill")
        os.kill(c.pids()["controller"], signal.SIGKILL)
        before = len(acked)
        wait_for(lambda: len(acked) > before + 2, timeout=30, interval=0.05,
                 what="submissions from elsewhere acknowledged by the new leader")
    finally:
        stop.set()
        t.join(timeout=120)
    assert failed == []
    want = ["Slurmctld(primary) at localhost is DOWN", "Slurmctld(backup) at standby is UP"]
    wait_for(lambda: run_elsewhere(c, nodes[1], ["scontrol", "ping"])[1].splitlines()[:2] == want,
             what="the dead primary DOWN from elsewhere")
    out, err = srun.communicate(timeout=120)
    assert srun.returncode == 0, err
    got = sorted(out.splitlines())
    assert got == sorted(f"{r}: line-{i}" for r in (0, 1) for i in range(1, lines + 1)), err
    # each acknowledged job exists once, the user's (held, so pending; the srun's own job may
    # still be completing)
    listed = c.ok("squeue", "-h", "-u", TEST_USER, "-t", "PD", "-o", "%i").split()
    assert sorted(map(int, listed)) == sorted(acked)
    rc, out, err = run_elsewhere(c, nodes[1], ["scancel", "-u", TEST_USER])
    assert rc == 0, err
    wait_for(lambda: not c.ok("squeue", "-h", "-u", TEST_USER, "-o", "%i").strip(),
             what="the user's jobs cancelled from elsewhere")
