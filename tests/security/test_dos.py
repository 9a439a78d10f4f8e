"""Bounded cost of hostile local users (muster.controller.server, netio): half-sent frames and
connection floods from the unprivileged user ``mustertest`` against a real musterctld.

* 40 half-sent 16 MiB frames — on TCP before authentication (capped at 64 KiB) and on the Unix
  socket (a per-uid budget of unfinished bytes) — grow the controller by less than 64 MiB,
  and what they did cost is given back when they close.
* thousands of connections from one user, held open, plus a stream of unauthenticated TCP
  connections, leave another user's squeue/sbatch working, the agents connected (one even
  re-registers mid-flood), the log short; everything recovers when the flood closes.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import time

import pytest

from cluster import TEST_USER, TEST_USER2, private_cluster, user_exists, wait_for
from linkpeer import restart_agent, tcp_port
from muster.common.netio import ByteBudget

MIB = 1 << 20


@pytest.fixture(scope="module")
def c():
    if os.getuid() != 0 or not (user_exists(TEST_USER) and user_exists(TEST_USER2)):
        pytest.fail(f"run as root with users {TEST_USER} and {TEST_USER2}")
    with private_cluster("muster-dos-", nodes=2, cpus=4) as cl:
        yield cl


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def as_user(user: str, code: str, *args: str) -> subprocess.Popen:
    """A Python attacker running ``code`` as ``user``; it reports on stdout, waits on stdin."""
    pw = pwd.getpwnam(user)
    return subprocess.Popen([sys.executable, "-c", code, *args], user=pw.pw_uid,
                            group=pw.pw_gid, extra_groups=[], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd="/")


def report(p: subprocess.Popen) -> dict:
    line = p.stdout.readline()
    assert line, f"attacker died (rc {p.poll()})"
    return json.loads(line)


def finish(p: subprocess.Popen) -> dict:
    """Tell the attacker to close everything; its last report (killed if it hangs)."""
    try:
        out, _ = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise
    assert p.returncode == 0, p.returncode
    return json.loads(out.splitlines()[-1])


def ctld_log(c) -> str:
    with open(os.path.join(c.state_dir, "log", "musterctld.log"), errors="replace") as fh:
        return fh.read()


def log_lines(c) -> int:
    return ctld_log(c).count("\n")


def test_byte_budget_bounds_each_uid_and_all_together():
    b = ByteBudget(per_uid=10, total=15)
    assert b.take(1, 6) and not b.take(1, 5) and b.take(2, 9) and not b.take(3, 1)
    b.give(1, 6)
    assert b.take(3, 6) and b.by_uid == {2: 9, 3: 6} and b.used == 15
    b.give(2, 9)
    b.give(3, 6)
    assert b.by_uid == {} and b.used == 0


def test_controller_runs_with_the_hard_fd_limit(c):
    with open(f"/proc/{c.pids()['controller']}/limits") as fh:
        soft, hard = next(line.split()[3:5] for line in fh if line.startswith("Max open files"))
    assert soft == hard


# ---- half-sent frames --------------------------------------------------------------------------

HALF_SENDER = r"""
import json, socket, struct, sys
kind, addr, n, size, part = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
held, refused = [], 0
for _ in range(n):
    if kind == "unix":
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(10)
        s.connect(addr)
    else:
        s = socket.create_connection(("127.0.0.1", int(addr)), timeout=10)
    try:
        s.sendall(struct.pack(">I", size) + b"x" * part)  # half a frame, then silence
        held.append(s)
    except OSError:  # refused: the controller closed the connection under us
        refused += 1
        s.close()
print(json.dumps({"held": len(held), "refused": refused}), flush=True)
sys.stdin.read()
for s in held:
    s.close()
print(json.dumps({"closed": len(held)}), flush=True)
"""


@pytest.mark.parametrize("kind", ["tcp", "unix"])
def test_half_sent_frames_cost_little_and_are_given_back(c, kind):
    pid = c.pids()["controller"]
    base = rss_mib(pid)
    addr = str(tcp_port(c)) if kind == "tcp" else os.path.join(c.state_dir, "musterctld.sock")
    p = as_user(TEST_USER, HALF_SENDER, kind, addr, "40", str(16 * MIB), str(8 * MIB))
    try:
        sent = report(p)
        # before authentication nothing over 64 KiB is read; on the Unix socket the user's
        # budget of unfinished bytes admits two such frames and refuses the rest as busy
        assert sent == ({"held": 0, "refused": 40} if kind == "tcp"
                        else {"held": 2, "refused": 38}), sent
        during = rss_mib(pid)
        assert during - base < 64, (base, during)
        # everyone else is served meanwhile, this user included (small requests fit)
        assert c.run(["squeue"], user=TEST_USER2).rc == 0
        assert c.run(["squeue"], user=TEST_USER).rc == 0
    finally:
        finish(p)
    wait_for(lambda: rss_mib(pid) - base < 16, timeout=10,
             what=f"controller memory given back (base {base:.0f} MiB, now {rss_mib(pid):.0f})")
    assert c.run(["scontrol", "ping"]).rc == 0


# ---- connection flood ------------------------------------------------------------------------

FLOODER = r"""
import collections, json, os, resource, socket, sys, time
unix_path, port, n_unix, n_tcp, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    int(sys.argv[4]), sys.argv[5]
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held = []
for _ in range(n_unix):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(unix_path)
    held.append(s)
time.sleep(1)  # let the controller answer the ones it refuses


def still_open(s):
    s.setblocking(False)
    try:
        return s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"x"
    except BlockingIOError:
        return True
    except OSError:
        return False


open_now = [s for s in held if still_open(s)]
tcp, opened = collections.deque(), 0


def connect_tcp():  # a TCP connection that never authenticates
    global opened
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", port))
    tcp.append(s)
    opened += 1
    if len(tcp) > n_tcp:
        tcp.popleft().close()


for _ in range(n_tcp):  # a burst, far over what the controller holds unauthenticated
    connect_tcp()
print(json.dumps({"unix_open": len(open_now), "unix_refused": len(held) - len(open_now)}),
      flush=True)
while not os.path.exists(stop):  # then a steady stream
    connect_tcp()
    time.sleep(0.002)
print(json.dumps({"tcp_opened": opened}), flush=True)
sys.stdin.read()
for s in held + list(tcp):
    s.close()
print(json.dumps({"closed": True}), flush=True)
"""


def registrations(c, node: str) -> int:
    with open(os.path.join(c.state_dir, "log", f"musterd-{node}.log"), errors="replace") as fh:
        return fh.read().count(f"registered with controller as {node}")


def nodes_healthy(c) -> bool:
    r = c.run(["sinfo", "-h", "-N", "-o", "%N %T"])
    states = dict(line.split() for line in r.out.splitlines())
    return r.rc == 0 and len(states) == c.nodes and not any(
        s.startswith(("down", "unk")) or s.endswith("*") for s in states.values())


def test_connection_flood_of_one_user_locks_out_no_one(c):
    pid = c.pids()["controller"]
    base_rss, base_log = rss_mib(pid), log_lines(c)
    stop = os.path.join(c.workdir, "flood.stop")  # where the attacker can see it
    p = as_user(TEST_USER, FLOODER, os.path.join(c.state_dir, "musterctld.sock"),
                str(tcp_port(c)), "3000", "1500", stop)
    try:
        held = report(p)
        # the user's own connections are capped; the rest were refused, not queued
        assert 0 < held["unix_open"] < 3000 and held["unix_refused"] > 0, held
        r = c.run(["squeue"], user=TEST_USER)
        assert r.rc != 0 and "busy" in r.err, r
        # another user is served: queries and submissions, and the job runs
        t0 = time.monotonic()
        r = c.run(["squeue"], user=TEST_USER2)
        assert r.rc == 0 and "JOBID" in r.out, r
        jid = c.sbatch("--wrap", "true", user=TEST_USER2, cwd=c.workdir)
        assert time.monotonic() - t0 < 10
        assert c.wait_done(jid) == "COMPLETED"
        # the agents stay connected, and one that restarts gets through the TCP flood
        assert nodes_healthy(c)
        r = c.run(["scontrol", "show", "node", "node1"])
        assert r.rc == 0 and "State=DOWN" not in r.out and "NOT_RESPONDING" not in r.out, r
        before = registrations(c, "node2")
        restart_agent(c, "node2")
        wait_for(lambda: registrations(c, "node2") > before, timeout=30,
                 what="node2 re-registered during the flood")
        wait_for(lambda: nodes_healthy(c), timeout=15, what="all nodes up during the flood")
        assert rss_mib(pid) - base_rss < 128
        open(stop, "w").close()
        assert report(p)["tcp_opened"] > 1500
    finally:
        open(stop, "w").close()
        finish(p)
    # a flood leaves a few rate-limited warnings, not a line per connection
    assert log_lines(c) - base_log < 60
    text = ctld_log(c)
    assert "TCP peers in their handshake: evicting the oldest" in text
    assert f"refusing Unix connections of uid {pwd.getpwnam(TEST_USER).pw_uid}" in text
    assert "Traceback" not in text
    wait_for(lambda: c.run(["squeue"], user=TEST_USER).rc == 0, timeout=15,
             what="the flooding user served again")
    jid = c.sbatch("--wrap", "true", user=TEST_USER, cwd=c.workdir)
    assert c.wait_done(jid) == "COMPLETED"
    assert nodes_healthy(c)
