"""Mutual authentication of the TCP links, sealed frames and job credentials, against real
daemons (muster.common.linkauth, muster.common.netio, muster.agent.daemon).

* A plain user squatting the controller's port while it is down (the old attack: answer
  ``{"ok": true}`` then launch a root job) gets nothing but the agents' hellos — no
  credential, no job list — and nothing runs.
* On authenticated links, a forged, a replayed, a reordered and an injected frame each close
  the link and change nothing: against the controller (the test plays a REST client with the
  key) and against an agent (the test plays the controller with the key).
* An agent refuses a launch whose job credential is missing, expired, for another node or for
  another user, and reports it as a launch failure so the job does not hang.
* A daemon refuses to start with a key file another user owns or its group may read.
"""

from __future__ import annotations

import errno
import json
import os
import pwd
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

import linkpeer
from cluster import (BIN, TEST_USER, _alive, private_cluster, restart_controller, user_exists,
                     wait_for)
from linkpeer import restart_agent, tcp_port
from muster.common import auth, linkauth


@pytest.fixture(scope="module")
def c():
    if os.getuid() != 0 or not user_exists(TEST_USER):
        pytest.fail(f"run as root with the user {TEST_USER}")
    with private_cluster("muster-link-", nodes=2, cpus=4) as cl:
        yield cl


def cluster_keys(c) -> list[bytes]:
    return auth.load_keys(os.path.join(c.state_dir, "muster.key"))


def read_log(c, name: str) -> str:
    with open(os.path.join(c.state_dir, "log", name), errors="replace") as fh:
        return fh.read()


def nodes_up(c) -> int:
    """How many nodes are registered and responding (idle, mixed or allocated)."""
    r = c.run(["sinfo", "-h", "-N", "-o", "%N %T"])
    return r.rc == 0 and len({line.split()[0] for line in r.out.splitlines()
                              if line.split()[1] in ("idle", "mixed", "allocated")})


def stop_controller(c) -> None:
    """SIGKILL the controller only: the agents keep trying to reconnect."""
    pid = c.pids()["controller"]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not _alive(pid), what="controller exit")


def bring_back(c) -> None:
    restart_controller(c)
    wait_for(lambda: nodes_up(c) == c.nodes, timeout=30, what="agents registered again")


def user_ids(user: str = TEST_USER) -> tuple[int, int]:
    pw = pwd.getpwnam(user)
    return pw.pw_uid, pw.pw_gid


def launch_msg(job_id: int, uid: int, gid: int, script: str, work_dir: str) -> dict:
    """A batch launch as the controller sends it (muster.controller.server.launch_message)."""
    user = pwd.getpwuid(uid).pw_name
    return {"op": "launch", "job_id": job_id, "run": 0, "uid": uid, "gid": gid, "groups": [gid],
            "user": user, "name": f"t{job_id}", "work_dir": work_dir, "script": script,
            "argv": [], "env": {"PATH": "/usr/bin:/bin", "HOME": work_dir, "USER": user},
            "stdout": "/dev/null", "stderr": "/dev/null", "stdin": "/dev/null",
            "open_mode": "append", "time_limit_s": 60, "start_time": int(time.time()),
            "kill_wait": 1, "umask": 0o022, "signal": None, "array_job_id": None,
            "array_task_id": None}


# ---- a plain user squatting the controller's port -----------------------------------------

FAKE_CONTROLLER = r"""
import json, os, socket, struct, sys, time
port, marker, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
srv = socket.create_server(("127.0.0.1", port))
srv.settimeout(0.5)


def frame(obj):
    body = json.dumps(obj).encode()
    return struct.pack(">I", len(body)) + body


def recv_all(s):
    data = b""
    try:
        while len(data) < 1 << 20:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            if len(data) >= 4 and b"ok" not in sent:
                n = struct.unpack(">I", data[:4])[0]
                if len(data) >= 4 + n:  # the peer's first frame: answer as the old controller
                    s.sendall(frame({"ok": True, "op": "registered", "kill": [],
                                     "time": int(time.time()), "slurmd_timeout": 12})
                              + frame(launch))
                    sent.add(b"ok")
    except OSError:
        pass
    return data


launch = {"op": "launch", "job_id": 990999, "run": 0, "uid": 0, "gid": 0, "groups": [0],
          "user": "root", "name": "pwn", "work_dir": "/", "argv": [],
          "script": "#!/bin/sh\ntouch " + marker + "\n", "env": {"PATH": "/usr/bin:/bin"},
          "stdout": "/dev/null", "stderr": "/dev/null", "stdin": "/dev/null",
          "open_mode": "truncate", "time_limit_s": None, "start_time": int(time.time()),
          "kill_wait": 1, "umask": 18, "signal": None, "array_job_id": None,
          "array_task_id": None}
conns = []
print("listening", flush=True)
while not os.path.exists(out + ".stop"):
    try:
        s, peer = srv.accept()
    except socket.timeout:
        continue
    s.settimeout(3)
    sent = set()
    conns.append({"peer": peer[0], "received": recv_all(s).hex()})
    s.close()
    with open(out + ".tmp", "w") as fh:
        json.dump(conns, fh)
    os.replace(out + ".tmp", out)
"""


def fake_connections(path: str) -> list[dict]:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return []


def frames_of(data: bytes) -> list[dict]:
    out = []
    while data:
        n = int.from_bytes(data[:4], "big")
        assert len(data) >= 4 + n, "a truncated frame"
        out.append(json.loads(data[4:4 + n]))
        data = data[4 + n:]
    return out


def test_squatter_on_the_controller_port_gets_nothing_and_runs_nothing(c):
    marker = os.path.join(c.workdir, "pwned-by-squatter")
    out = os.path.join(c.workdir, "fake-controller.json")
    addrs = {f"127.0.1.{i}" for i in range(1, c.nodes + 1)}
    uid, gid = user_ids()
    stop_controller(c)
    fake = subprocess.Popen([sys.executable, "-c", FAKE_CONTROLLER, str(tcp_port(c)), marker,
                             out], user=uid, group=gid, extra_groups=[], cwd="/",
                            stdout=subprocess.PIPE, text=True)
    try:
        assert fake.stdout.readline() == "listening\n"
        # every agent came, was answered like the old controller did, and came back again
        wait_for(lambda: all(sum(cn["peer"] == a for cn in fake_connections(out)) >= 2
                             for a in addrs), timeout=30, what="agents tried the squatter twice")
    finally:
        open(out + ".stop", "w").close()
        fake.wait(10)
    conns = fake_connections(out)
    for cn in conns:
        received = bytes.fromhex(cn["received"])
        assert b"cred" not in received and b"running" not in received
        (hello,) = frames_of(received)  # one frame, then the agent hung up
        assert set(hello) == {"op", "v", "nonce", "role", "keys"}, hello
        assert hello["op"] == "hello" and hello["role"] == "agent"
        assert hello["keys"] == [linkauth.key_id(k) for k in cluster_keys(c)]
    try:
        for node in (f"node{i}" for i in range(1, c.nodes + 1)):
            log = read_log(c, f"musterd-{node}.log")
            assert "no authenticated controller at 127.0.0.1" in log and "Traceback" not in log
            assert not os.path.exists(os.path.join(c.state_dir, "spool", node, "job990999.0"))
        assert not os.path.exists(marker)
    finally:
        bring_back(c)
    assert not os.path.exists(marker)


# ---- the test as the controller (with the key), against real agents --------------------------

class KeyedController:
    """Plays musterctld on its port with the cluster key: completes each agent's handshake,
    answers its registration, and hands the sealed link to the test."""

    def __init__(self, port: int, keys: list[bytes]):
        self.keys = keys
        self.srv = wait_for(lambda: _bind(port), timeout=30, what=f"port {port} free")
        self.srv.settimeout(0.2)
        self.links: dict[str, queue.Queue] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                s, _ = self.srv.accept()
            except TimeoutError:
                continue
            s.settimeout(10)
            try:
                link, role, claims = linkpeer.accept(s, self.keys)
                reg = link.recv()
                assert role == "agent" and reg["op"] == "agent_register"
                assert reg["node"] == claims["node"]
                link.send({"op": "registered", "ok": True, "time": int(time.time()),
                           "slurmd_timeout": 12})
            except (OSError, AssertionError, linkauth.LinkAuthError, ValueError):
                s.close()
                continue
            self.links.setdefault(claims["node"], queue.Queue()).put(link)

    def link(self, node: str) -> linkpeer.SyncLink:
        """The next (newest) link the node's agent opened."""
        wait_for(lambda: node in self.links, timeout=30, what=f"{node} connected")
        return self.links[node].get(timeout=30)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.srv.close()
        for q in self.links.values():
            while not q.empty():
                q.get().close()


def _bind(port: int) -> socket.socket | None:
    """The killed controller's port: the kernel may still be tearing down the connections
    its agents had (they reconnect at once) for a moment after the process is gone."""
    try:
        return socket.create_server(("127.0.0.1", port))
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        return None


def next_msg(link: linkpeer.SyncLink, op: str, job_id: int, timeout: float = 20) -> dict:
    """The agent's next ``op`` message about ``job_id`` (heartbeats and others skipped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        link.sock.settimeout(max(0.1, deadline - time.monotonic()))
        msg = link.recv()
        assert msg is not None, "the agent closed the link"
        if msg.get("op") == op and msg.get("job_id") == job_id:
            return msg
    raise AssertionError(f"no {op} for job {job_id} within {timeout}s")


@pytest.fixture
def keyed(c):
    stop_controller(c)
    ctl = KeyedController(tcp_port(c), cluster_keys(c))
    try:
        yield ctl
    finally:
        ctl.close()
        bring_back(c)


def signed(c, msg: dict, node: str = "node1", ids: tuple | None = None, now=None) -> dict:
    uid, gid = ids or (msg["uid"], msg["gid"])
    ckey = auth.cred_key(cluster_keys(c)[0])
    return dict(msg, cred=auth.mint_job_cred(ckey, msg, node, uid, gid, now))


def marker_job(c, job_id: int, ids=None) -> tuple[dict, str]:
    """A launch for ``job_id`` that appends a line to its own marker file; (msg, marker)."""
    marker = os.path.join(c.workdir, f"ran-{job_id}")
    uid, gid = ids or user_ids()
    return launch_msg(job_id, uid, gid, f"#!/bin/sh\necho ran >> {marker}\n", c.workdir), marker


def test_agent_runs_only_launches_with_a_valid_job_credential(c, keyed):
    link = keyed.link("node1")
    # the positive control: a well-formed, signed launch runs
    msg, marker = marker_job(c, 990001)
    link.send(signed(c, msg))
    assert next_msg(link, "job_started", 990001)
    wait_for(lambda: os.path.exists(marker), what="the signed job ran")
    uid, gid = user_ids()
    bad = {
        990002: lambda m: m,  # no credential at all
        990003: lambda m: signed(c, m, now=time.time() - auth.CRED_TTL - 60),  # expired
        990004: lambda m: signed(c, m, node="node2"),  # for another node
        990005: lambda m: signed(c, dict(m, uid=0, gid=0), ids=(uid, gid)),  # root, user's cred
    }
    for job_id, make in bad.items():
        msg, marker = marker_job(c, job_id)
        link.send(make(msg))
        ended = next_msg(link, "job_ended", job_id)
        assert ended["launch_failed"] is True and ended["exit_code"] == 1
        assert not os.path.exists(os.path.join(c.state_dir, "spool", "node1",
                                               f"job{job_id}.0"))
        assert not os.path.exists(marker)
    log = read_log(c, "musterd-node1.log")
    for why in ("job credential missing", "job credential expired",
                "job credential is for node 'node2', not 'node1'",
                f"job credential is for uid/gid {uid}/{gid}, the job runs as 0/0"):
        assert why in log
    # the link is still up: refusing a credential is not a link failure
    link.send({"op": "ack", "job_id": 990001, "run": 0})
    msg, marker = marker_job(c, 990006)
    link.send(signed(c, msg))
    assert next_msg(link, "job_started", 990006)


def test_agent_closes_the_link_on_forged_replayed_reordered_or_injected_frames(c, keyed):
    # forged: a signed launch with one byte of its body changed
    link = keyed.link("node1")
    msg, marker_a = marker_job(c, 990011)
    frame = bytearray(link.seal(signed(c, msg)))
    frame[frame.index(b'"run":0') + 6] = ord("1")
    link.sock.sendall(bytes(frame))
    assert linkpeer.closed_by_peer(link.sock)
    # reordered: the second of two signed launches sent first
    link = keyed.link("node1")
    msg_b, marker_b = marker_job(c, 990012)
    msg_c, marker_c = marker_job(c, 990013)
    frame_b, frame_c = link.seal(signed(c, msg_b)), link.seal(signed(c, msg_c))
    link.sock.sendall(frame_c)
    assert linkpeer.closed_by_peer(link.sock)
    # injected: a frame whose tag was not made for it (a well-formed, signed launch)
    link = keyed.link("node1")
    msg_e, marker_e = marker_job(c, 990014)
    body = linkpeer.encode(signed(c, msg_e))
    link.sock.sendall(linkpeer.pack(body + frame_b[-linkauth.TAG_BYTES:]))
    assert linkpeer.closed_by_peer(link.sock)
    # replayed: a launch that ran, sent again
    link = keyed.link("node1")
    msg_d, marker_d = marker_job(c, 990015)
    frame_d = link.seal(signed(c, msg_d))
    link.sock.sendall(frame_d)
    assert next_msg(link, "job_started", 990015)
    wait_for(lambda: os.path.exists(marker_d), what="the signed job ran")
    link.sock.sendall(frame_d)
    assert linkpeer.closed_by_peer(link.sock)
    keyed.link("node1")  # the agent reconnects: it is not wedged
    with open(marker_d) as fh:
        assert fh.read() == "ran\n"
    for marker in (marker_a, marker_b, marker_c, marker_e):
        assert not os.path.exists(marker)
    for job_id in (990011, 990012, 990013, 990014):
        assert not os.path.exists(os.path.join(c.state_dir, "spool", "node1", f"job{job_id}.0"))
    log = read_log(c, "musterd-node1.log")
    assert log.count("a frame failed its integrity check") >= 4 and "Traceback" not in log


# ---- the test as a client (with the key), against the real controller ------------------------

def reason(c, job_id: int) -> str:
    return c.run(["squeue", "-h", "-j", str(job_id), "-o", "%r"]).out.strip()


def test_controller_closes_the_link_on_forged_replayed_reordered_or_injected_frames(c):
    jid = c.sbatch("-H", "--begin=now+1hour", "--wrap", "true", user=TEST_USER, cwd=c.workdir)
    assert reason(c, jid) == "JobHeldUser"
    uid, gid = user_ids()
    addr = ("127.0.0.1", tcp_port(c))
    release = {"op": "release", "jobs": [{"job_id": jid}]}

    def client() -> linkpeer.SyncLink:
        return linkpeer.connect(addr, cluster_keys(c), "client",
                                {"uid": uid, "gid": gid, "host": "t"})

    # forged: the sealed release with a byte of its body changed
    link = client()
    frame = bytearray(link.seal(release))
    frame[frame.index(b'"release"') + 1] ^= 0x20
    link.sock.sendall(bytes(frame))
    assert linkpeer.closed_by_peer(link.sock)
    # reordered: the second frame (release) before the first (ping)
    link = client()
    _ping, second = link.seal({"op": "ping"}), link.seal(release)
    link.sock.sendall(second)
    assert linkpeer.closed_by_peer(link.sock)
    # injected: the release with the tag of another frame
    link = client()
    link.sock.sendall(linkpeer.pack(linkpeer.encode(release) + second[-linkauth.TAG_BYTES:]))
    assert linkpeer.closed_by_peer(link.sock)
    assert reason(c, jid) == "JobHeldUser"
    # replayed: a release that was honoured, sent again after the owner held the job again
    link = client()
    frame = link.seal(release)
    link.sock.sendall(frame)
    assert link.recv()["ok"]
    # released: "None" until the next scheduling pass gives the begin time's reason
    wait_for(lambda: reason(c, jid) == "BeginTime", timeout=30, what="BeginTime after release")
    assert c.run(["scontrol", "hold", str(jid)], user=TEST_USER).rc == 0
    link.sock.sendall(frame)
    assert linkpeer.closed_by_peer(link.sock)
    assert reason(c, jid) == "JobHeldUser"
    log = read_log(c, "musterctld.log")
    assert log.count(f"closing link of uid {uid}") >= 4 and "Traceback" not in log
    assert c.run(["scancel", str(jid)]).rc == 0


# ---- key files ---------------------------------------------------------------------------------

@pytest.mark.parametrize("problem", ["other-owner", "group-readable"])
def test_daemons_refuse_a_key_others_could_read_or_replace(c, tmp_path, problem):
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    key = conf_dir / "muster.key"
    shutil.copy(os.path.join(c.state_dir, "muster.key"), key)
    if problem == "other-owner":
        os.chown(key, user_ids()[0], -1)
        expected = f"must be owned by uid 0 or root (it is owned by uid {user_ids()[0]})"
    else:
        os.chmod(key, 0o640)
        expected = "must be mode 0600, not accessible by group or others (it is 0o640)"
    with open(c.conf) as fh:
        text = fh.read().replace(c.state_dir, str(tmp_path / "state"))
    (conf_dir / "slurm.conf").write_text(text.replace(
        next(line for line in text.splitlines() if line.startswith("AuthInfo=")),
        f"AuthInfo=key={key}"))
    shutil.copy(os.path.join(c.state_dir, "gres.conf"), conf_dir / "gres.conf")
    conf = str(conf_dir / "slurm.conf")
    log = str(tmp_path / "daemon.log")
    for argv in (["musterctld", "-f", conf], ["musterd", "-f", conf, "-N", "node1"],
                 ["musterrestd", "-f", conf, "--listen", "127.0.0.1:1"]):
        r = subprocess.run([os.path.join(BIN, argv[0]), *argv[1:], "-L", log],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1, (argv, r)
        assert r.stderr.startswith(f"{argv[0]}: error: {key}: key file ") and expected in r.stderr
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr


# ---- key rotation ------------------------------------------------------------------------------

def test_key_rotation_keeps_jobs_running(c):
    """The documented procedure (docs/design.md, "Rotating the cluster key"): new key as
    muster.key, old as muster.key.old, restart daemons one by one, then drop the old key. A job
    running from the start keeps running; new jobs run at every stage (launch credentials are
    signed with whichever key each link shares)."""
    key = os.path.join(c.state_dir, "muster.key")
    long_job = c.sbatch("--wrap", "sleep 300", user=TEST_USER, cwd=c.workdir)
    c.wait_state(long_job, "RUNNING")

    def works(stage: str) -> None:
        wait_for(lambda: nodes_up(c) == c.nodes, timeout=30, what=f"nodes back after {stage}")
        for node in ("node1", "node2"):
            jid = c.sbatch("-w", node, "--wrap", "true", user=TEST_USER, cwd=c.workdir)
            assert c.wait_done(jid) == "COMPLETED", (stage, node)
        assert c.state_of(long_job) == "RUNNING", stage

    old_id = linkauth.key_id(auth.load_key(key))
    os.rename(key, key + ".old")
    auth.generate_key(key)
    new_id = linkauth.key_id(auth.load_key(key))
    bring_back(c)  # the controller has both keys; the agents still only the old one
    works("controller restarted")
    for node in ("node1", "node2"):  # now each agent has both, and uses the new one
        restart_agent(c, node)
        works(f"{node} restarted")
    os.unlink(key + ".old")
    bring_back(c)  # only the new key anywhere that matters now
    works("old key removed")
    for node in ("node1", "node2"):
        assert "Traceback" not in read_log(c, f"musterd-{node}.log")
    assert linkauth.key_id(cluster_keys(c)[0]) == new_id != old_id
    assert c.run(["scancel", str(long_job)]).rc == 0
