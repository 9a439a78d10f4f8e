"""musterrestd's connection to the controller: authenticated TCP links, one uid per link.

musterrestd authenticates a request (JWT), then asks the controller *as that user*: each
connection starts with the link handshake (muster.common.linkauth, role ``client``) whose
proof covers the claimed uid/gid, so the controller's own authorization rules apply unchanged
(owners act on their jobs, operators on all). Nothing is sent before the controller has proved
it holds the cluster key; the first request travels, sealed, right behind our proof (one round
trip for the handshake, none extra for the request). Connections are pooled per uid and
dropped before the controller's idle timeout.
"""

from __future__ import annotations

import asyncio
import socket
import time

from muster.common import wire
from muster.common.errors import TransportError
from muster.common.netio import BadFrame, Link, initiate

POOL_IDLE_S = 20.0  # the controller closes idle clients after 30 s
POOL_MAX = 8  # idle connections kept per uid


class ControllerClient:
    def __init__(self, host: str, port: int, keys: list[bytes], timeout: float = 60.0,
                 hosts: tuple[str, ...] = ()):
        """``hosts``: every SlurmctldHost address, in order (active/standby controllers);
        a new connection tries each until one accepts (a standby listens on no TCP port)."""
        self.host = host
        self.hosts = tuple(hosts) or (host,)
        self.port = port
        self.keys = list(keys)
        self.timeout = timeout
        self.hostname = socket.gethostname().split(".")[0]
        self._pool: dict[int, list[tuple[float, Link]]] = {}

    def _take(self, uid: int) -> Link | None:
        conns = self._pool.get(uid)
        now = time.monotonic()
        while conns:
            t, link = conns.pop()
            if now - t < POOL_IDLE_S and not link.writer.is_closing():
                return link
            link.close()
        return None

    def _give(self, uid: int, link: Link) -> None:
        conns = self._pool.setdefault(uid, [])
        if len(conns) < POOL_MAX:
            conns.append((time.monotonic(), link))
        else:
            link.close()

    async def _open(self, msg: dict, uid: int, gid: int) -> Link:
        """A new link as (uid, gid), with ``msg`` already sent behind the handshake."""
        r = w = None
        err: Exception | None = None
        for host in self.hosts:
            try:
                r, w = await asyncio.wait_for(asyncio.open_connection(host, self.port), 10)
                break
            except (TimeoutError, OSError) as exc:
                err = exc
        if r is None or w is None:
            raise TransportError(f"Unable to contact slurm controller ({err})") from None
        link = Link(r, w)
        claims = {"uid": uid, "gid": gid, "host": self.hostname}
        try:
            await initiate(link, self.keys, "client", claims, first=msg)
        except (TimeoutError, BadFrame, OSError, asyncio.IncompleteReadError) as exc:
            link.close()
            raise TransportError(f"Unable to contact slurm controller (link authentication "
                                 f"failed: {exc or type(exc).__name__})") from None
        return link

    async def call(self, msg: dict, uid: int, gid: int) -> dict:
        """Send one request as (uid, gid); the controller's reply (``ok`` false on refusal)."""
        for _attempt in range(2):
            pooled = self._take(uid)
            fresh = pooled is None
            link = await self._open(msg, uid, gid) if pooled is None else pooled
            try:
                if not fresh:
                    link.send(msg)
                    await link.writer.drain()
                reply = await asyncio.wait_for(link.recv(wire.MAX_CLIENT_REPLY), self.timeout)
                if reply is None:
                    raise ConnectionResetError("connection closed")
            except (TimeoutError, OSError, BadFrame, asyncio.IncompleteReadError) as exc:
                link.close()
                if fresh:
                    raise TransportError(f"Unable to contact slurm controller ({exc!r})") from None
                continue  # a pooled connection the controller had closed: retry on a new one
            self._give(uid, link)
            return reply
        raise TransportError()

    def close(self) -> None:
        for conns in self._pool.values():
            for _t, link in conns:
                link.close()
        self._pool.clear()
