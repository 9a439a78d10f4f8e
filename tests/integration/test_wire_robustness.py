"""The controller's sockets against hostile or broken peers, and TCP authentication.

Raw sockets talk to a real musterctld (the session ``cluster``): garbage, huge or truncated
frames, frames that are not JSON objects, wrong field types, oversized requests and idle
connections. After each, the controller must still answer, with the jobs submitted before
intact. On TCP nothing is answered but the link handshake (muster.common.linkauth) until the
peer has proved it holds the cluster key: requests without it, a wrong key, tampered claims
or a replayed handshake are refused; an authenticated link runs requests as the claimed uid.
(tests/security/test_link_auth.py attacks authenticated links and the agents.)
"""

from __future__ import annotations

import errno
import glob
import json
import os
import pwd
import socket
import stat
import struct
import subprocess
import time

import pytest

import linkpeer
from cluster import TEST_USER, TEST_USER2
from muster.common import auth, linkauth

HDR = struct.Struct(">I")
SCRIPT = "#!/bin/sh\ntrue\n"


# ---- helpers ------------------------------------------------------------------------------

def conf_value(cluster, key: str) -> str:
    with open(cluster.conf) as fh:
        for line in fh:
            k, sep, v = line.strip().partition("=")
            if sep and k.lower() == key.lower():
                return v.split()[0]
    raise KeyError(key)


def unix_path(cluster) -> str:
    return os.path.join(cluster.state_dir, "musterctld.sock")


def tcp_addr(cluster) -> tuple[str, int]:
    return "127.0.0.1", int(conf_value(cluster, "SlurmctldPort"))


def key_path(cluster) -> str:
    return os.path.join(cluster.state_dir, "muster.key")


def cluster_key(cluster) -> bytes:
    return auth.load_key(key_path(cluster))


def connect_unix(cluster, timeout: float = 10.0) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(unix_path(cluster))
    return s


def connect_tcp(cluster, timeout: float = 10.0) -> socket.socket:
    s = socket.create_connection(tcp_addr(cluster), timeout=timeout)
    return s


def pack(obj) -> bytes:
    body = json.dumps(obj).encode() if not isinstance(obj, bytes) else obj
    return HDR.pack(len(body)) + body


def recv_exact(s: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        try:
            chunk = s.recv(n - len(buf))
        except ConnectionResetError:
            return None
        except OSError as exc:  # reset before our shutdown: the connection is gone
            if exc.errno != errno.ENOTCONN:
                raise
            return None
        if not chunk:
            return None
        buf += chunk
    return buf


def recv_reply(s: socket.socket) -> dict | None:
    """The next reply frame, or None when the controller closed the connection."""
    head = recv_exact(s, 4)
    if head is None:
        return None
    (n,) = HDR.unpack(head)
    assert n < 64 * 1024 * 1024, n
    body = recv_exact(s, n)
    assert body is not None, "reply truncated"
    obj = json.loads(body)
    assert isinstance(obj, dict)
    return obj


def closed_by_peer(s: socket.socket, timeout: float = 10.0) -> bool:
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def request(s: socket.socket, obj) -> dict | None:
    s.sendall(pack(obj))
    return recv_reply(s)


def unix_call(cluster, msg: dict) -> dict:
    with connect_unix(cluster) as s:
        reply = request(s, msg)
    assert reply is not None
    return reply


def tcp_call(cluster, msg: dict) -> dict | None:
    with connect_tcp(cluster) as s:
        return request(s, msg)


def ids_of(user: str | int) -> dict:
    if isinstance(user, int):
        return {"uid": user, "gid": user}
    pw = pwd.getpwnam(user)
    return {"uid": pw.pw_uid, "gid": pw.pw_gid}


def tcp_link(cluster, user: str | int = 0, role: str = "client",
             key: bytes | None = None, **claims) -> linkpeer.SyncLink:
    """An authenticated link (with the cluster key unless ``key``) claiming ``user``."""
    return linkpeer.connect(tcp_addr(cluster), [key or cluster_key(cluster)], role,
                            {**ids_of(user), "host": "testhost", **claims})


def tcp_call(cluster, msg: dict, user: str | int = 0) -> dict | None:
    """One request on a fresh authenticated link as ``user``; the reply."""
    link = tcp_link(cluster, user)
    try:
        link.send(msg)
        return link.recv()
    finally:
        link.close()


def job_record(cluster, job_id: int) -> dict:
    reply = unix_call(cluster, {"op": "jobs", "job_ids": [job_id]})
    assert reply["ok"], reply
    (rec,) = [r for r in reply["jobs"] if r["job_id"] == job_id]
    return rec


# ---- fixtures -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def baseline(cluster):
    """Jobs submitted before any abuse: a held one (stable) and a finished one."""
    held = cluster.sbatch("-H", "-J", "wire-held", "-t", "7", "--comment", "keep me",
                          "--wrap", "true", cwd=cluster.workdir)
    done = cluster.sbatch("-J", "wire-done", "--wrap", "true", cwd=cluster.workdir)
    assert cluster.wait_done(done) == "COMPLETED"
    pid = cluster.pids()["controller"]
    return {"held": held, "done": done, "pid": pid, "log_offset": os.path.getsize(ctld_log(cluster)),
            "held_rec": job_record(cluster, held), "done_rec": job_record(cluster, done)}


def ctld_log(cluster) -> str:
    return os.path.join(cluster.state_dir, "log", "musterctld.log")


def stable(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k not in ("events",)}


def assert_healthy(cluster, baseline) -> None:
    """The controller is the same process, answers, and the earlier jobs are unchanged."""
    os.kill(baseline["pid"], 0)
    assert cluster.pids()["controller"] == baseline["pid"]
    reply = unix_call(cluster, {"op": "ping"})
    assert reply["ok"] and reply["uid"] == 0
    assert stable(job_record(cluster, baseline["held"])) == stable(baseline["held_rec"])
    assert stable(job_record(cluster, baseline["done"])) == stable(baseline["done_rec"])
    r = cluster.run(["scontrol", "ping"])
    assert r.rc == 0 and "UP" in r.out, r


# ---- malformed traffic on both sockets ----------------------------------------------------

CONNECT = {"unix": connect_unix, "tcp": connect_tcp}


@pytest.mark.parametrize("where", ["unix", "tcp"])
@pytest.mark.parametrize("payload", [
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    bytes(range(256)) * 4,
    HDR.pack(2**31) + b"{}",
    HDR.pack(2**32 - 1),
    HDR.pack(100) + b'{"op":"ping"',            # truncated body, then close
    b"\x00\x00",                                # truncated header, then close
    pack(b"this is not json"),
    pack(b"\xff\xfe\xfd"),                      # not UTF-8
    pack(b'{"op": "ping", "x": NaN}'),
    pack(b'{"op": "ping", "x": 1e999}'),
    pack(b'"a string"'),
    pack(b"[1, 2, 3]"),
    pack(b"null"),
    pack(b"12"),
    pack(b"[" * 100_000 + b"]" * 100_000),      # deep enough to exhaust a recursive decoder
    pack(b'{"a":' * 50_000 + b"1" + b"}" * 50_000),
    pack(b'{"op": "ping", "s": "\\ud800"}'),    # lone surrogate
    pack(b""),                                  # empty body
], ids=["http", "binary", "len-2^31", "len-max", "truncated-body", "truncated-header",
        "not-json", "not-utf8", "nan", "huge-float", "json-string", "json-list", "json-null",
        "json-number", "deep-list", "deep-object", "lone-surrogate", "empty-body"])
def test_garbage_is_refused_and_harmless(cluster, baseline, where, payload):
    with CONNECT[where](cluster) as s:
        try:
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass
        except OSError as exc:  # the controller may drop an oversized frame before we are done
            if exc.errno != errno.ENOTCONN:
                raise
        reply = recv_reply(s)
        # every one gets an error reply; on TCP a peer that closes with unread data may
        # reset the connection before the reply arrives, and a JSON object that is not a
        # handshake gets the authentication refusal
        if where == "unix" or reply is not None:
            assert reply is not None
            codes = ("invalid_request", "too_large") + (("auth",) if where == "tcp" else ())
            assert reply["ok"] is False and reply["code"] in codes, reply
            assert "Traceback" not in reply["error"]
        assert closed_by_peer(s)
    assert_healthy(cluster, baseline)


@pytest.mark.parametrize("where", ["unix", "tcp"])
def test_huge_length_header_gets_too_large_before_any_body(cluster, baseline, where):
    with CONNECT[where](cluster) as s:
        s.sendall(HDR.pack(2**31))
        reply = recv_reply(s)
        assert reply == {"ok": False, "code": "too_large", "error": reply["error"]}
        assert "Request too large" in reply["error"]
        assert closed_by_peer(s)
    assert_healthy(cluster, baseline)


def test_oversized_submit_frame(cluster, baseline):
    """A 20 MB submit: refused from its header; the controller neither reads nor keeps it."""
    body = json.dumps({"op": "submit", "job": {}, "script": "#!/bin/sh\n" + "#" * (20 << 20),
                       "env": {}}).encode()
    assert len(body) > 20 << 20
    with connect_unix(cluster) as s:
        s.sendall(HDR.pack(len(body)))
        reply = recv_reply(s)
        assert reply["ok"] is False and reply["code"] == "too_large", reply
        try:  # the rest of the frame goes nowhere
            s.sendall(body[:1 << 20])
        except (BrokenPipeError, ConnectionResetError):
            pass
    # the whole frame at once, not waiting for the answer: the connection just ends
    with connect_unix(cluster) as s:
        try:
            s.sendall(HDR.pack(len(body)) + body)
        except (BrokenPipeError, ConnectionResetError):
            pass
    assert_healthy(cluster, baseline)
    assert not any(j["name"] == "" for j in unix_call(cluster, {"op": "jobs"})["jobs"])


def test_submit_just_over_script_limit_is_refused_cleanly(cluster, baseline):
    """A frame under the wire limit but a script over the 4 MiB limit: a clear refusal."""
    script = "#!/bin/sh\n" + ("# padding\n" * (500 * 1024))
    reply = unix_call(cluster, {"op": "submit", "job": {"work_dir": "/tmp"}, "script": script,
                                "env": {}})
    assert reply["ok"] is False and reply["code"] == "too_large"
    assert "too large" in reply["error"]
    assert_healthy(cluster, baseline)


def test_truncated_frame_then_close_and_connection_reused(cluster, baseline):
    # half a frame, then close
    with connect_unix(cluster) as s:
        s.sendall(HDR.pack(50) + b'{"op":')
    # a good request, then garbage on the same connection: first answered, then refused
    with connect_unix(cluster) as s:
        assert request(s, {"op": "ping"})["ok"]
        s.sendall(b"garbage!")
        reply = recv_reply(s)
        assert reply is None or reply["ok"] is False
        assert closed_by_peer(s)
    assert_healthy(cluster, baseline)


def test_several_requests_on_one_connection(cluster, baseline):
    with connect_unix(cluster) as s:
        for _ in range(20):
            assert request(s, {"op": "ping"})["ok"]


@pytest.mark.parametrize("msg", [
    {},
    {"op": None},
    {"op": 5},
    {"op": ["submit"]},
    {"op": {"x": 1}},
    {"op": "nosuchop"},
    {"op": "x" * 100_000},
    {"op": "_private"},
    {"op": "__init__"},
], ids=["no-op", "null-op", "int-op", "list-op", "dict-op", "unknown-op", "long-op",
        "private-op", "dunder-op"])
def test_unknown_operations(cluster, baseline, msg):
    reply = unix_call(cluster, msg)
    assert reply["ok"] is False and reply["code"] == "invalid_request"
    assert "unknown operation" in reply["error"]
    assert len(reply["error"]) < 200
    assert_healthy(cluster, baseline)


BAD_SUBMITS = [
    {"job": [], "script": SCRIPT, "env": {}},
    {"job": "x", "script": SCRIPT, "env": {}},
    {"job": 5, "script": SCRIPT, "env": {}},
    {"job": {"time_limit": "10"}, "script": SCRIPT, "env": {}},
    {"job": {"time_limit": 1.5}, "script": SCRIPT, "env": {}},
    {"job": {"time_limit": True}, "script": SCRIPT, "env": {}},
    {"job": {"time_limit": 10**30}, "script": SCRIPT, "env": {}},
    {"job": {"time_limit": -5}, "script": SCRIPT, "env": {}},
    {"job": {"nodes_min": "2"}, "script": SCRIPT, "env": {}},
    {"job": {"nodes_min": 0}, "script": SCRIPT, "env": {}},
    {"job": {"nodes_min": -3}, "script": SCRIPT, "env": {}},
    {"job": {"nodes_min": 10**40}, "script": SCRIPT, "env": {}},
    {"job": {"cpus_per_task": [1]}, "script": SCRIPT, "env": {}},
    {"job": {"mem_per_node": {"a": 1}}, "script": SCRIPT, "env": {}},
    {"job": {"mem_per_node": -1}, "script": SCRIPT, "env": {}},
    {"job": {"name": 5}, "script": SCRIPT, "env": {}},
    {"job": {"name": "a\x00b"}, "script": SCRIPT, "env": {}},
    {"job": {"name": "n" * 100_000}, "script": SCRIPT, "env": {}},
    {"job": {"partition": ["gpu"]}, "script": SCRIPT, "env": {}},
    {"job": {"partition": "nosuch"}, "script": SCRIPT, "env": {}},
    # an unknown account is accepted without AccountingStoreEnforce=associations (as Slurm
    # does; tests/e2e/test_alloc_parity.py covers both); a wrong type never is
    {"job": {"account": ["x"]}, "script": SCRIPT, "env": {}},
    {"job": {"qos": "nosuch"}, "script": SCRIPT, "env": {}},
    {"job": {"hold": "yes"}, "script": SCRIPT, "env": {}},
    {"job": {"argv": "a b"}, "script": SCRIPT, "env": {}},
    {"job": {"argv": [1, 2]}, "script": SCRIPT, "env": {}},
    {"job": {"gres": {"name": "gpu"}}, "script": SCRIPT, "env": {}},
    {"job": {"gres": [{"name": "gpu", "count": "2"}]}, "script": SCRIPT, "env": {}},
    {"job": {"gres": [{"name": "gpu", "count": 10**30}]}, "script": SCRIPT, "env": {}},
    {"job": {"gres": [{"name": "gpu", "count": 9}]}, "script": SCRIPT, "env": {}},
    {"job": {"gres": [["gpu", 1]]}, "script": SCRIPT, "env": {}},
    {"job": {"gres": [{"name": "gpu"}] * 100}, "script": SCRIPT, "env": {}},
    {"job": {"gpus": 2}, "script": SCRIPT, "env": {}},
    {"job": {"gpus": {"count": 33}}, "script": SCRIPT, "env": {}},
    {"job": {"signal": "USR1"}, "script": SCRIPT, "env": {}},
    {"job": {"signal": {"signal": 999}}, "script": SCRIPT, "env": {}},
    {"job": {"nodelist": "node[3-1]"}, "script": SCRIPT, "env": {}},
    {"job": {"nodelist": "node[1-"}, "script": SCRIPT, "env": {}},
    {"job": {"nodelist": "node[1-999999999]"}, "script": SCRIPT, "env": {}},
    {"job": {"exclude": "]]["}, "script": SCRIPT, "env": {}},
    {"job": {"dependency": "afterok:"}, "script": SCRIPT, "env": {}},
    {"job": {"dependency": "afterok:99999999999999999999999"}, "script": SCRIPT, "env": {}},
    {"job": {"dependency": "afterok:\u00b2"}, "script": SCRIPT, "env": {}},
    {"job": {"dependency": "afterok:1_\u00b2"}, "script": SCRIPT, "env": {}},
    {"job": {"dependency": "after:1+" + "9" * 50}, "script": SCRIPT, "env": {}},
    {"job": {"dependency": ",".join(["afterok:1"] * 5000)}, "script": SCRIPT, "env": {}},
    {"job": {"array": "\u00b2"}, "script": SCRIPT, "env": {}},
    {"job": {"array": "0-" + "9" * 40}, "script": SCRIPT, "env": {}},
    {"job": {"array": "1-3%" + "9" * 40}, "script": SCRIPT, "env": {}},
    {"job": {"work_dir": "relative/dir"}, "script": SCRIPT, "env": {}},
    {"job": {"open_mode": "sideways"}, "script": SCRIPT, "env": {}},
    {"job": {"priority": 10**6}, "script": SCRIPT, "env": {}},  # root may; see below
    {"job": {}, "script": None, "env": {}},
    {"job": {}, "script": 5, "env": {}},
    {"job": {}, "script": ["#!/bin/sh"], "env": {}},
    {"job": {}, "script": "", "env": {}},
    {"job": {}, "script": "   \n", "env": {}},
    {"job": {}, "script": "echo no shebang\n", "env": {}},
    {"job": {}, "script": "#!/bin/sh\necho a\x00b\n", "env": {}},
    {"job": {}, "script": "#!/bin/sh\r\necho dos\r\n", "env": {}},
    {"job": {}, "script": SCRIPT, "env": ["A=B"]},
    {"job": {}, "script": SCRIPT, "env": {"A": 1}},
    {"job": {}, "script": SCRIPT, "env": {"A=B": "c"}},
    {"job": {}, "script": SCRIPT, "env": {"": "c"}},
    {"job": {}, "script": SCRIPT, "env": {"A": "x" * (2 << 20)}},
    {"job": {}, "script": SCRIPT, "env": {"A": {"nested": ["garbage", {"x": None}]}}},
    {"job": {}, "env": {}},
]


@pytest.mark.parametrize("body", BAD_SUBMITS, ids=[f"{i}:{json.dumps(b)[:50]}"
                                                   for i, b in enumerate(BAD_SUBMITS)])
def test_malformed_submit_is_refused(cluster, baseline, body):
    before = {j["job_id"] for j in unix_call(cluster, {"op": "jobs"})["jobs"]}
    msg = {"op": "submit", **body}
    if body.get("job") == {"priority": 10**6}:
        # priority is for admins: a plain user through TCP is refused
        reply = tcp_call(cluster, msg, TEST_USER)
        assert reply["ok"] is False and reply["code"] == "access_denied"
    else:
        reply = unix_call(cluster, msg)
    assert reply["ok"] is False, reply
    assert reply["code"] != "internal", reply
    assert reply["error"] and "Traceback" not in reply["error"] and len(reply["error"]) < 300
    after = {j["job_id"] for j in unix_call(cluster, {"op": "jobs"})["jobs"]}
    # nothing half-created (finished jobs of earlier tests may age out meanwhile: MinJobAge)
    assert not after - before, after - before
    assert_healthy(cluster, baseline)


@pytest.mark.parametrize("msg", [
    {"op": "jobs", "job_ids": "1"},
    {"op": "jobs", "job_ids": [["x"]]},
    {"op": "jobs", "job_ids": [-1]},
    {"op": "jobs", "job_ids": [10**40]},
    {"op": "acct", "job_ids": ["1"]},
    {"op": "cancel", "jobs": "all"},
    {"op": "cancel", "jobs": [{"job_id": "1"}]},
    {"op": "cancel", "jobs": [5]},
    {"op": "cancel", "signal": "KILL", "jobs": []},
    {"op": "cancel", "scope": "everything", "jobs": []},
    {"op": "cancel", "filters": "all"},
    {"op": "hold", "jobs": [{"job_id": 10**40}]},
    {"op": "release", "jobs": {"job_id": 1}},
    {"op": "update_job", "jobs": [], "changes": "TimeLimit=5"},
    {"op": "update_job", "jobs": [], "changes": {}},
    {"op": "update_node", "nodes": "node1", "state": "drain"},
    {"op": "update_node", "nodes": ["nosuch"], "state": "DRAIN", "reason": "x"},
    {"op": "update_node", "nodes": ["node1"], "state": "EXPLODE"},
], ids=lambda m: json.dumps(m)[:60])
def test_malformed_requests_of_other_ops(cluster, baseline, msg):
    reply = unix_call(cluster, msg)
    assert reply["ok"] is False, reply
    assert reply["code"] != "internal", reply
    assert_healthy(cluster, baseline)


def test_many_idle_connections(cluster, baseline):
    """Idle peers hold no one up: the controller answers others while they hang around."""
    socks = []
    try:
        for _ in range(300):
            socks.append(connect_unix(cluster))
        for _ in range(100):
            socks.append(connect_tcp(cluster))
        # some of them stall mid-frame
        for s in socks[::7]:
            s.sendall(HDR.pack(1000) + b'{"op":')
        t0 = time.monotonic()
        assert unix_call(cluster, {"op": "ping"})["ok"]
        assert tcp_call(cluster, {"op": "ping"})["ok"]
        assert time.monotonic() - t0 < 5
        assert_healthy(cluster, baseline)
    finally:
        for s in socks:
            s.close()
    assert_healthy(cluster, baseline)


def test_slow_reader_does_not_block_others(cluster, baseline):
    """A client that asks for a reply and never reads it does not stall the controller."""
    socks = []
    try:
        for _ in range(20):
            s = connect_unix(cluster)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            for _ in range(50):
                s.sendall(pack({"op": "config"}))
            socks.append(s)
        assert unix_call(cluster, {"op": "ping"})["ok"]
    finally:
        for s in socks:
            s.close()
    assert_healthy(cluster, baseline)


# ---- TCP authentication ---------------------------------------------------------------

def test_key_file_is_0600_and_owned_by_cluster_owner(cluster):
    st = os.stat(key_path(cluster))
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == os.getuid()
    assert stat.S_ISREG(st.st_mode)


def test_tcp_without_handshake_is_refused(cluster, baseline):
    """Plain requests, and the old credential-in-the-first-frame form, are refused unread."""
    key = cluster_key(cluster)
    for msg in ({"op": "ping"}, {"op": "ping", "cred": None}, {"op": "ping", "cred": "root"},
                {"op": "ping", "cred": {"uid": 0, "gid": 0}},
                {"op": "hello", "v": 1, "nonce": "zz", "role": "client", "keys": []},
                {"op": "hello", "v": 1, "nonce": linkauth.new_nonce(), "role": "root",
                 "keys": [linkauth.key_id(key)]},
                {"op": "auth", "claims": {"uid": 0, "gid": 0}, "proof": "0" * 64}):
        with connect_tcp(cluster) as s:
            reply = request(s, msg)
            assert reply["ok"] is False and reply["code"] == "auth", reply
            assert reply["error"].startswith("Authentication failure")
            assert closed_by_peer(s)
    assert_healthy(cluster, baseline)


def test_tcp_wrong_key_is_refused(cluster, baseline):
    # a key the controller does not have: no key in common, refused after the hello
    with pytest.raises(linkauth.LinkAuthError, match="refused.*no cluster key in common"):
        tcp_link(cluster, 0, key=b"0123456789abcdef" * 4)
    # the right key's id (public) but a proof made with another key
    key = cluster_key(cluster)
    with connect_tcp(cluster) as s:
        link = linkpeer.SyncLink(s)
        hs = linkauth.Initiator([key], "client", {"uid": 0, "gid": 0})
        link.send_plain(hs.hello())
        challenge = link.recv_plain()
        assert challenge["ok"] and challenge["key"] == linkauth.key_id(key)
        forged = linkauth.initiator_proof(b"x" * 64, "client", hs.nonce, challenge["nonce"],
                                          hs.claims)
        link.send_plain({"op": "auth", "claims": hs.claims, "proof": forged})
        link.sock.sendall(linkpeer.pack(b'{"op":"ping"}' + b"\0" * linkauth.TAG_BYTES))
        reply = link.recv_plain()
        assert reply["code"] == "auth" and "bad proof" in reply["error"], reply
        assert closed_by_peer(s)
    assert_healthy(cluster, baseline)


def test_tcp_tampered_claims_are_refused(cluster, baseline):
    """A genuine proof for a plain user, with the claims edited to root, is refused."""
    key = cluster_key(cluster)
    with connect_tcp(cluster) as s:
        link = linkpeer.SyncLink(s)
        hs = linkauth.Initiator([key], "client", {**ids_of(TEST_USER), "host": "h"})
        link.send_plain(hs.hello())
        auth_msg = hs.answer(link.recv_plain())
        auth_msg["claims"] = {"uid": 0, "gid": 0, "host": "h"}
        link.send_plain(auth_msg)
        reply = link.recv_plain()
        assert reply["code"] == "auth" and "bad proof" in reply["error"], reply
        assert closed_by_peer(s)
    assert_healthy(cluster, baseline)


def test_tcp_replayed_handshake_is_refused(cluster, baseline):
    """A recorded handshake (hello + proof) replayed on a new connection fails: the
    controller's nonce is new, so the old proof does not cover it."""
    key = cluster_key(cluster)
    with connect_tcp(cluster) as s:
        link = linkpeer.SyncLink(s)
        hs = linkauth.Initiator([key], "client", {"uid": 0, "gid": 0, "host": "h"})
        hello = hs.hello()
        link.send_plain(hello)
        recorded = hs.answer(link.recv_plain())
        link.send_plain(recorded)
        link.sealer, link.opener = hs.pair()
        link.send({"op": "ping"})
        assert link.recv()["ok"]
    with connect_tcp(cluster) as s:
        link = linkpeer.SyncLink(s)
        link.send_plain(hello)
        assert link.recv_plain()["ok"]  # a fresh challenge
        link.send_plain(recorded)
        reply = link.recv_plain()
        assert reply["code"] == "auth" and "bad proof" in reply["error"], reply
        assert closed_by_peer(s)
    assert_healthy(cluster, baseline)


def test_tcp_link_runs_as_its_claimed_uid(cluster, baseline, test_user):
    pw = pwd.getpwnam(test_user)
    reply = tcp_call(cluster, {"op": "ping"}, test_user)
    assert reply["ok"] and reply["uid"] == pw.pw_uid and reply["admin"] is False
    reply = tcp_call(cluster, {
        "op": "submit", "job": {"name": "via-tcp", "hold": True, "work_dir": cluster.workdir},
        "script": SCRIPT, "env": {"PATH": "/usr/bin:/bin"}}, test_user)
    assert reply["ok"], reply
    jid = reply["job_id"]
    rec = job_record(cluster, jid)
    assert (rec["uid"], rec["user"], rec["name"]) == (pw.pw_uid, test_user, "via-tcp")
    r = cluster.run(["squeue", "-h", "-j", str(jid), "-o", "%u %j %T"])
    assert r.out.split() == [test_user, "via-tcp", "PENDING"]
    # the link's user may act on its own job, another user may not
    reply = tcp_call(cluster, {"op": "cancel", "jobs": [{"job_id": jid}]}, TEST_USER2)
    assert reply["ok"] and reply["errors"] and reply["errors"][0]["code"] == "access_denied"
    assert job_record(cluster, jid)["state"] == "PENDING"
    # several requests on one link
    link = tcp_link(cluster, test_user)
    try:
        link.send({"op": "ping"})
        assert link.recv()["uid"] == pw.pw_uid
        link.send({"op": "cancel", "jobs": [{"job_id": jid}]})
        reply = link.recv()
    finally:
        link.close()
    assert reply["ok"] and not reply["errors"]
    assert job_record(cluster, jid)["state"] == "CANCELLED"
    assert_healthy(cluster, baseline)


def test_non_admin_cannot_register_as_agent(cluster, baseline, test_user):
    before = unix_call(cluster, {"op": "nodes"})["nodes"]
    reg = {"op": "agent_register", "node": "node1", "running": [], "finished": [],
           "version": "evil"}
    link = tcp_link(cluster, test_user, role="agent", node="node1")
    try:
        link.send(reg)
        reply = link.recv()
        assert reply["ok"] is False and reply["code"] == "access_denied", reply
        assert closed_by_peer(link.sock)
    finally:
        link.close()
    # the real agent's link was not replaced: all nodes still up and answering
    after = unix_call(cluster, {"op": "nodes"})["nodes"]
    assert [(n["name"], n["state"]) for n in after] == [(n["name"], n["state"]) for n in before]
    assert unix_call(cluster, {"op": "ping"})["nodes_up"] == cluster.nodes
    # an agent registration without the key is refused before anything else
    with pytest.raises(linkauth.LinkAuthError, match="no cluster key in common"):
        tcp_link(cluster, 0, role="agent", key=b"x" * 64, node="node1")
    assert unix_call(cluster, {"op": "ping"})["nodes_up"] == cluster.nodes
    assert_healthy(cluster, baseline)


def test_non_admin_cannot_drain_a_node(cluster, baseline, test_user):
    def node1():
        return [n for n in unix_call(cluster, {"op": "nodes"})["nodes"] if n["name"] == "node1"][0]
    before = node1()
    drain = {"op": "update_node", "nodes": ["node1"], "state": "DRAIN", "reason": "pwned"}
    reply = tcp_call(cluster, drain, test_user)
    assert reply["ok"] is False and reply["code"] == "invalid_user", reply
    r = cluster.run(["scontrol", "update", "nodename=node1", "state=drain", "reason=x"],
                    user=test_user)
    assert (r.rc, r.err) == (1, "slurm_update error: Invalid user id\n"), r
    after = node1()
    assert after["state"] == before["state"] and "DRAIN" not in after["flags"]
    assert after.get("reason") == before.get("reason")
    assert_healthy(cluster, baseline)


def test_garbage_before_authentication_on_tcp(cluster, baseline):
    """Unauthenticated peers get only refusals, and nothing they send runs."""
    for msg in ({"op": "update_node", "nodes": ["node1"], "state": "DOWN", "reason": "x"},
                {"op": "submit", "job": {}, "script": SCRIPT, "env": {}},
                {"op": "agent_register", "node": "node1", "running": [], "finished": []}):
        with connect_tcp(cluster) as s:
            assert request(s, msg)["code"] == "auth"
    assert unix_call(cluster, {"op": "ping"})["nodes_up"] == cluster.nodes
    assert_healthy(cluster, baseline)


# ---- the key never leaks ------------------------------------------------------------------

def test_key_never_in_logs_or_output(cluster, baseline):
    with open(key_path(cluster)) as fh:
        secret = fh.read().strip()
    assert len(secret) >= 32
    # provoke some logging first: refused peers, bad frames
    with pytest.raises(linkauth.LinkAuthError):
        tcp_link(cluster, 0, key=b"y" * 64)
    tcp_call(cluster, {"op": "ping"}, TEST_USER)
    with connect_tcp(cluster) as s:
        s.sendall(b"garbage garbage garbage")
    logs = glob.glob(os.path.join(cluster.state_dir, "log", "*"))
    assert logs
    for path in logs:
        with open(path, "rb") as fh:
            assert secret.encode() not in fh.read(), path
    outputs = [
        cluster.run(["scontrol", "show", "config"]),
        cluster.run(["muster", "status", "--json"]),
        cluster.run(["muster", "status"]),
        cluster.run(["scontrol", "show", "job", str(baseline["held"])]),
        cluster.run(["sinfo"]),
    ]
    for r in outputs:
        assert r.rc == 0, r
        assert secret not in r.out and secret not in r.err
    config = unix_call(cluster, {"op": "config"})
    assert secret not in json.dumps(config)
    # the key never travels in a reply to any user either
    r = subprocess.run(["grep", "-rl", secret, cluster.state_dir, "--exclude=muster.key",
                        "--exclude=*.sock"], capture_output=True, text=True)
    assert r.stdout == "", r.stdout


def test_no_internal_errors_logged(cluster, baseline):
    """Everything above was refused on purpose: no handler crashed, no task died unnoticed."""
    with open(ctld_log(cluster), errors="replace") as fh:
        fh.seek(baseline["log_offset"])
        text = fh.read()
    for bad in ("Traceback", "Unhandled exception", "exception was never retrieved",
                "handler ", "Unexpected controller error"):
        assert bad not in text, text[text.index(bad) - 2000:text.index(bad) + 2000]
