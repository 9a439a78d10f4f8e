"""Raw requests to a test cluster's controller over its Unix socket, as root or as any user.

The controller learns the caller from SO_PEERCRED, which the kernel fills with the effective
uid/gid of the process at connect() time; ``as_user`` switches the test process's effective
ids around the connect only, so requests run with exactly a plain user's identity (no
credential is forged: this is what any local process of that user can do).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import socket
import struct

HDR = struct.Struct(">I")


def socket_path(cluster) -> str:
    return os.path.join(cluster.state_dir, "musterctld.sock")


@contextlib.contextmanager
def as_user(user: str | None):
    """Effective uid/gid of ``user`` (None: stay root) inside the block."""
    if user is None:
        yield
        return
    pw = pwd.getpwnam(user)
    os.setegid(pw.pw_gid)
    os.seteuid(pw.pw_uid)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


def connect(cluster, user: str | None = None, timeout: float = 30.0) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    with as_user(user):
        s.connect(socket_path(cluster))
    return s


def pack(obj) -> bytes:
    body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return HDR.pack(len(body)) + body


def _recv_exact(s: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def recv_reply(s: socket.socket) -> dict | None:
    head = _recv_exact(s, HDR.size)
    if head is None:
        return None
    (n,) = HDR.unpack(head)
    body = _recv_exact(s, n)
    assert body is not None, "reply truncated"
    reply = json.loads(body)
    assert isinstance(reply, dict), reply
    return reply


def call(cluster, msg: dict, user: str | None = None, timeout: float = 30.0) -> dict:
    """One request on its own connection; the reply (``ok`` false on refusal)."""
    with connect(cluster, user, timeout) as s:
        s.sendall(pack(msg))
        reply = recv_reply(s)
    assert reply is not None, f"no reply to {msg!r:.200}"
    return reply


def jobs(cluster) -> dict[int, dict]:
    """Every job record in the controller's memory, by id (as root)."""
    reply = call(cluster, {"op": "jobs"})
    assert reply["ok"], reply
    return {j["job_id"]: j for j in reply["jobs"]}
