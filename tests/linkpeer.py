"""Test helper: a blocking peer of Muster's authenticated TCP links (muster.common.linkauth).

Tests use it to play an agent or client against the real controller, or a controller against
real agents, and to send exactly the bytes they want: sealed frames, forged tags, replayed
or reordered frames. Plain sockets and the linkauth state machines only (no daemon code).
Also: where a test cluster's controller listens, and restarting one of its agents.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct

from cluster import _alive, start_agent, wait_for
from muster.common import linkauth

HDR = struct.Struct(">I")


def pack(body: bytes) -> bytes:
    return HDR.pack(len(body)) + body


def encode(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def recv_exact(s: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        try:
            chunk = s.recv(n - len(buf))
        except (TimeoutError, ConnectionResetError):
            return None
        if not chunk:
            return None
        buf += chunk
    return buf


def recv_raw(s: socket.socket) -> bytes | None:
    """The next frame's body (with its tag, on a sealed link), None at EOF/reset."""
    head = recv_exact(s, HDR.size)
    if head is None:
        return None
    (n,) = HDR.unpack(head)
    assert n < 64 << 20, n
    return recv_exact(s, n)


def closed_by_peer(s: socket.socket, timeout: float = 10.0) -> bool:
    """True once the peer has closed the connection (anything it still sends is drained)."""
    s.settimeout(timeout)
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


class SyncLink:
    """One side of a link over a blocking socket; sealed once a handshake has run."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.sealer: linkauth.Sealer | None = None
        self.opener: linkauth.Opener | None = None

    # plain frames (the handshake, refusals)
    def send_plain(self, obj: dict) -> None:
        self.sock.sendall(pack(encode(obj)))

    def recv_plain(self) -> dict | None:
        body = recv_raw(self.sock)
        return None if body is None else json.loads(body)

    # sealed frames
    def seal(self, obj: dict) -> bytes:
        """The bytes of the next sealed frame (consumes a sequence number; not sent)."""
        body = encode(obj)
        return pack(body + self.sealer.tag(body))

    def send(self, obj: dict) -> None:
        self.sock.sendall(self.seal(obj))

    def recv(self) -> dict | None:
        data = recv_raw(self.sock)
        if data is None:
            return None
        try:
            return json.loads(self.opener.open(data))
        except linkauth.LinkAuthError:
            return json.loads(data)  # the responder's plain refusal

    def close(self) -> None:
        self.sock.close()


def connect(addr: tuple[str, int], keys: list[bytes], role: str, claims: dict,
            timeout: float = 10.0) -> SyncLink:
    """Run the initiator's handshake against ``addr``; the sealed link (the responder's
    verdict on our proof comes with the answer to the first sealed frame)."""
    s = socket.create_connection(addr, timeout=timeout)
    link = SyncLink(s)
    hs = linkauth.Initiator(keys, role, claims)
    link.send_plain(hs.hello())
    link.send_plain(hs.answer(link.recv_plain()))
    link.sealer, link.opener = hs.pair()
    return link


def accept(sock: socket.socket, keys: list[bytes], roles=("agent", "client")):
    """Run the responder's handshake on an accepted socket; (link, role, claims)."""
    link = SyncLink(sock)
    hs = linkauth.Responder(keys, roles)
    link.send_plain(hs.challenge(link.recv_plain()))
    claims = hs.verify(link.recv_plain())
    link.sealer, link.opener = hs.pair()
    return link, hs.role, claims


# ---- the test cluster's daemons -------------------------------------------------------------

def tcp_port(c) -> int:
    """The controller's TCP port (SlurmctldPort of the cluster's slurm.conf)."""
    with open(c.conf) as fh:
        return int(next(line.split("=", 1)[1] for line in fh if line.startswith("SlurmctldPort=")))


def restart_agent(c, node: str) -> None:
    """SIGKILL the node's agent and start a new one (its jobs keep running)."""
    old = c.pids()["agents"][node]
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: not _alive(old), what="agent exit")
    start_agent(c, node)
