"""musterrestd's connection to the controller: TCP with an HMAC credential per user.

musterrestd authenticates a request (JWT), then asks the controller *as that user*: the first
frame of each connection carries ``muster.common.auth.mint(key, uid, gid)``, so the
controller's own authorization rules apply unchanged (owners act on their jobs, operators on
all). Connections are pooled per uid and dropped before the controller's idle timeout.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time

from muster.common import auth, wire
from muster.common.errors import TransportError

POOL_IDLE_S = 20.0  # the controller closes idle clients after 30 s
POOL_MAX = 8  # idle connections kept per uid


class ControllerClient:
    def __init__(self, host: str, port: int, key: bytes, timeout: float = 60.0):
        self.host = host
        self.port = port
        self.key = key
        self.timeout = timeout
        self.hostname = socket.gethostname().split(".")[0]
        self._pool: dict[int, list[tuple[float, asyncio.StreamReader, asyncio.StreamWriter]]] = {}

    def _take(self, uid: int):
        conns = self._pool.get(uid)
        now = time.monotonic()
        while conns:
            t, r, w = conns.pop()
            if now - t < POOL_IDLE_S and not w.is_closing():
                return r, w
            w.close()
        return None

    def _give(self, uid: int, r, w) -> None:
        conns = self._pool.setdefault(uid, [])
        if len(conns) < POOL_MAX:
            conns.append((time.monotonic(), r, w))
        else:
            w.close()

    async def call(self, msg: dict, uid: int, gid: int) -> dict:
        """Send one request as (uid, gid); the controller's reply (``ok`` false on refusal)."""
        for _attempt in range(2):
            conn = self._take(uid)
            fresh = conn is None
            try:
                if fresh:
                    r, w = await asyncio.wait_for(
                        asyncio.open_connection(self.host, self.port), 10)
                    data = wire.encode(dict(msg, cred=auth.mint(self.key, uid, gid, self.hostname)))
                else:
                    r, w = conn
                    data = wire.encode(msg)
            except (OSError, asyncio.TimeoutError) as exc:
                raise TransportError(f"Unable to contact slurm controller ({exc})") from None
            try:
                w.write(data)
                await w.drain()
                hdr = await asyncio.wait_for(r.readexactly(wire.HEADER.size), self.timeout)
                (n,) = wire.HEADER.unpack(hdr)
                if n > wire.MAX_CLIENT_REPLY:
                    raise TransportError("controller reply too large")
                body = await asyncio.wait_for(r.readexactly(n), self.timeout)
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
                w.close()
                if fresh:
                    raise TransportError(f"Unable to contact slurm controller ({exc!r})") from None
                continue  # a pooled connection the controller had closed: retry on a new one
            reply = json.loads(body)
            if reply.get("code") == "auth":
                w.close()
            else:
                self._give(uid, r, w)
            return reply
        raise TransportError()

    def close(self) -> None:
        for conns in self._pool.values():
            for _t, _r, w in conns:
                w.close()
        self._pool.clear()
