"""musterd's relay: a command on any host reaches the controller wherever it runs (issue 16).

The controller's Unix socket exists on the controller's host only. A command elsewhere —
``srun`` inside a batch script on a compute node, ``squeue`` on a login node, a tool polling
``sacct`` — connects instead to its host's musterd, on the relay socket
``<SlurmdSpoolDir>/musterd.sock`` (``%n``: the node; muster.cli.client finds it). The relay
vouches for the caller the way munged does for Slurm's commands: it reads the caller's uid and
gid from the kernel (SO_PEERCRED), opens a link to the leading controller *as that user*
(linkauth role ``client``, the claims covered by the proof made with the cluster key, which
only the root-held daemons have), and passes frames through unchanged, both ways.

Invariants:
  * The uid is the kernel's, never the caller's word. Frames are passed as they are; the only
    one the relay reads is its own ``relay_info`` (srun's question: which address the
    controller sees it at, for its I/O listener).
  * One upstream link per client connection, opened on its first frame and closed with it, so
    the controller sees what a local client gives it — one connection per command, a lease
    bound to it (srun/salloc: closing it gives the allocation back), its idle timeout.
  * Fail-over: each SlurmctldHost address in order (a standby listens on no TCP port). An
    upstream that ends, or that answers "in standby mode", ends the client connection: the
    command's own retry (muster.cli.client, muster.cli.lease) connects again and the relay
    finds the leader anew. Nothing reachable: the connection is closed unanswered, which the
    command treats as a controller restarting (retried for its budget, then Slurm's "Unable
    to contact slurm controller").
  * Bounded for hostile users: MAX_CONNS_PER_UID connections per plain user and MAX_CONNS in
    all (then "Controller busy"), requests up to MAX_FRAME, UID_BYTES of requests held per
    user (half received, or whole and not yet sent on: ALL_BYTES for everyone), a first
    frame within IDLE_TIMEOUT, small socket reads from callers. The controller applies the
    user's own limits to a relayed link too (its claims carry ``via``), as on its Unix
    socket.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct

from muster.common import wire
from muster.common.netio import (SMALL_READS, STREAM_LIMIT, UNCHARGED_FRAME, BadFrame,
                                 ByteBudget, Link, cap_reads, decode, frame, initiate, read_body)

log = logging.getLogger("musterd")

SOCKET_NAME = "musterd.sock"
MAX_CONNS_PER_UID = 256  # connections of one plain user (each srun holds one for its run)
MAX_CONNS = 4096  # connections of everyone together
UID_BYTES = 32 << 20  # request bytes a plain user's connections may hold here (as the
ALL_BYTES = 256 << 20  # controller's Unix socket allows), and all users' together
IDLE_TIMEOUT = 30.0  # seconds a caller has to send its first request (the controller's idle)
CONNECT_TIMEOUT = 5.0  # per controller address
BUSY = {"ok": False, "code": "busy", "error": "Controller busy, try again"}
_STANDBY_MARK = b"in_standby_mode"


def socket_path(spool: str) -> str:
    """The relay socket of the node whose spool directory is ``spool``."""
    return os.path.join(spool, SOCKET_NAME)


class Relay:
    """The relay of one node: its socket, its callers, their upstream links."""

    def __init__(self, cfg, keys: list[bytes], node: str, path: str,
                 local_addr: str | None = None):
        """``local_addr``: the address upstream links leave from (an emulated node's own
        loopback address), so the controller sees the node where the command runs."""
        self.cfg, self.keys, self.node, self.path = cfg, keys, node, path
        self.local_addr = local_addr
        self.hostname = socket.gethostname().split(".")[0]
        self.by_uid: dict[int, int] = {}
        self.total = 0
        self.budget = ByteBudget(UID_BYTES, ALL_BYTES)
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.server = await asyncio.start_unix_server(self._on_client, path=self.path,
                                                      limit=STREAM_LIMIT, backlog=1024)
        os.chmod(self.path, 0o666)  # anyone may ask; the kernel says who asks

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
            try:
                os.unlink(self.path)
            except OSError:
                pass

    # ---- callers ----------------------------------------------------------------------------
    def _admit(self, uid: int) -> bool:
        mine = self.by_uid.get(uid, 0)
        if uid != 0 and (mine >= MAX_CONNS_PER_UID or self.total >= MAX_CONNS):
            return False
        self.by_uid[uid] = mine + 1
        self.total += 1
        return True

    def _release(self, uid: int) -> None:
        left = self.by_uid[uid] - 1
        if left:
            self.by_uid[uid] = left
        else:
            del self.by_uid[uid]
        self.total -= 1

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        try:
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _pid, uid, gid = struct.unpack("3i", creds)
        except OSError:
            writer.close()
            return
        if not self._admit(uid):
            writer.write(frame(BUSY))
            writer.close()
            return
        cap_reads(writer, SMALL_READS)
        try:
            await _Session(self, reader, writer, uid, gid).run()
        except Exception:  # noqa: BLE001 - one caller's failure never stops the relay
            log.exception("%s: relay session of uid %d failed", self.node, uid)
        finally:
            self._release(uid)
            writer.close()

    # ---- upstream ---------------------------------------------------------------------------
    async def open_upstream(self, uid: int, gid: int, first: bytes | None) -> Link | None:
        """An authenticated link to the leading controller as (uid, gid), with ``first`` (a
        request's body) sent behind the handshake; None when no controller accepts."""
        addrs = self.cfg.slurmctld_addrs or (self.cfg.slurmctld_addr or "127.0.0.1",)
        local = (self.local_addr, 0) if self.local_addr else None
        for host in addrs:
            try:
                r, w = await asyncio.wait_for(asyncio.open_connection(
                    host, self.cfg.slurmctld_port, local_addr=local, limit=STREAM_LIMIT),
                    CONNECT_TIMEOUT)
            except (OSError, TimeoutError):
                continue
            link = Link(r, w)
            claims = {"uid": uid, "gid": gid, "host": self.hostname, "via": self.node}
            try:
                await initiate(link, self.keys, "client", claims)
                if first is not None:
                    w.write(link.encode_body(first))
                return link
            except (BadFrame, OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
                log.warning("%s: relay link to controller %s failed: %s", self.node, host,
                            exc or type(exc).__name__)
                link.close()
        return None


class _Session:
    """One caller's connection and its upstream link."""

    def __init__(self, relay: Relay, reader, writer, uid: int, gid: int):
        self.relay, self.reader, self.writer = relay, reader, writer
        self.uid, self.gid = uid, gid
        self.up: Link | None = None
        self.pump: asyncio.Task | None = None

    async def run(self) -> None:
        try:
            while True:
                timeout = IDLE_TIMEOUT if self.up is None else None
                budget = None if self.uid == 0 else self.relay.budget
                try:
                    body = await asyncio.wait_for(read_body(
                        self.reader, wire.MAX_FRAME, budget, self.uid), timeout)
                except BadFrame as exc:
                    self.writer.write(frame({"ok": False, "code": getattr(exc, "code", "invalid"),
                                             "error": str(exc)}))
                    return
                if body is None:
                    return
                # a whole request stays charged until it has left for the controller
                charged = len(body) if budget is not None and len(body) > UNCHARGED_FRAME else 0
                if charged and budget is not None and not budget.take(self.uid, charged):
                    self.writer.write(frame(BUSY))
                    return
                try:
                    if not await self._forward(body):
                        return
                finally:
                    if charged and budget is not None:
                        budget.give(self.uid, charged)
        except (TimeoutError, ConnectionError, OSError, asyncio.IncompleteReadError):
            return
        finally:
            if self.pump is not None:
                self.pump.cancel()
            if self.up is not None:
                self.up.close()

    async def _forward(self, body: bytes) -> bool:
        """Send one request on; False when the session is over."""
        info = _is_relay_info(body)
        if self.up is None:
            self.up = await self.relay.open_upstream(self.uid, self.gid, None if info else body)
            if self.up is None:
                return False  # no controller: closed unanswered, the command retries
            self.pump = asyncio.create_task(self._replies())
        elif not info:
            if self.up.writer.is_closing():
                return False
            self.up.writer.write(self.up.encode_body(body))
        if info:
            addr = self.up.writer.get_extra_info("sockname")
            self.writer.write(frame({"ok": True, "relay": self.relay.node,
                                     "addr": addr[0] if addr else "127.0.0.1"}))
            await self.writer.drain()
            return True
        await self.up.writer.drain()
        return True

    async def _replies(self) -> None:
        """The controller's replies, passed back as they come; the end of the upstream (or a
        standby's answer) ends the caller's connection."""
        assert self.up is not None
        try:
            while True:
                body = await self.up.recv_body(wire.MAX_CLIENT_REPLY)
                if body is None:
                    break
                self.writer.write(len(body).to_bytes(wire.HEADER_SIZE, "big") + body)
                await self.writer.drain()
                if len(body) < 256 and _STANDBY_MARK in body:
                    break
        except (BadFrame, ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        self.writer.close()  # the caller's read ends: it reconnects (its retry)


def _is_relay_info(body: bytes) -> bool:
    if len(body) > 64 or b"relay_info" not in body:
        return False
    try:
        return decode(body).get("op") == "relay_info"
    except BadFrame:
        return False
