"""Asyncio framing for the daemons (same frames as muster.common.wire, msgspec-decoded), the
daemons' side of the link handshake, and the limits that bound what an unauthenticated or
hostile peer can cost.

Nothing a peer sends can raise anything but :class:`BadFrame` (or return None at a clean end
of stream): a length over the limit is refused before a byte of the body is read or
allocated, and any decoding problem (malformed JSON, invalid UTF-8, numbers out of range,
nesting deep enough to exhaust the decoder's recursion limit) becomes a BadFrame.

Two kinds of stream (:class:`Link`):

* **plain** frames on the Unix socket, where the kernel vouches for the peer (SO_PEERCRED):
  one request, one reply, no handshake;
* **sealed** frames on TCP, after the :mod:`muster.common.linkauth` handshake
  (:func:`initiate`, :func:`respond`): ``4-byte length of body+tag | JSON body | 32-byte
  tag``. A frame that fails its MAC raises :class:`LinkForged`; the link is then closed.

Lives in ``common`` because all three daemons speak it (controller, agent, musterrestd); it
needs msgspec and asyncio, so the stdlib-only CLI never imports it (it frames with
:mod:`muster.common.wire`).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import struct
import time

import msgspec

from muster.common import linkauth
from muster.common.wire import HEADER_SIZE, MAX_FRAME

HEADER = struct.Struct(">I")  # wire's length prefix, as a Struct (pack_into)
assert HEADER.size == HEADER_SIZE

log = logging.getLogger("muster.netio")

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder()
_SPLIT_RAW = 1 << 16  # a reply's raw last member from this size is written apart (Link.frames)


class BadFrame(Exception):
    """The peer sent something that is not a valid frame (``code``: wire error code)."""

    code = "invalid_request"


class FrameTooLarge(BadFrame):
    code = "too_large"


class Busy(BadFrame):
    """The peer's uid already has too many bytes of unfinished frames in the controller."""

    code = "busy"


class LinkForged(BadFrame):
    """A sealed frame failed its MAC, or the peer failed the handshake: close, never answer."""

    code = "auth"


def decode(body: bytes) -> dict:
    try:
        obj = _dec.decode(body)
    except msgspec.DecodeError as exc:
        raise BadFrame(f"malformed frame: {exc}") from None
    except (RecursionError, MemoryError, ValueError, TypeError) as exc:
        raise BadFrame(f"malformed frame: {type(exc).__name__}") from None
    if not isinstance(obj, dict):
        raise BadFrame("frame is not a JSON object")
    return obj


UNCHARGED_FRAME = linkauth.PRE_AUTH_MAX_FRAME  # frames up to this size need no budget


class ByteBudget:
    """Bytes of frames announced but not yet fully received, per uid and in total.

    A large frame's announced length is reserved when its header arrives and given back when
    the frame is complete or the connection ends, so the memory that peers of limited uids can
    pin in half-sent frames is bounded by ``per_uid`` each and ``total`` together (plus one
    small frame per connection, bounded by the connection caps)."""

    __slots__ = ("per_uid", "total", "used", "by_uid")

    def __init__(self, per_uid: int, total: int):
        self.per_uid, self.total = per_uid, total
        self.used = 0
        self.by_uid: dict[int, int] = {}

    def take(self, uid: int, n: int) -> bool:
        mine = self.by_uid.get(uid, 0)
        if mine + n > self.per_uid or self.used + n > self.total:
            return False
        self.by_uid[uid] = mine + n
        self.used += n
        return True

    def give(self, uid: int, n: int) -> None:
        left = self.by_uid[uid] - n
        if left:
            self.by_uid[uid] = left
        else:
            del self.by_uid[uid]
        self.used -= n


async def read_body(reader: asyncio.StreamReader, limit: int = MAX_FRAME,
                    budget: ByteBudget | None = None, uid: int = -1) -> bytes | None:
    """The next frame's raw body, or None at a clean end of stream."""
    try:
        head = await reader.readexactly(HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise BadFrame("truncated frame header") from None
        return None
    (length,) = HEADER.unpack(head)
    if length > limit:
        raise FrameTooLarge(f"Request too large: frame of {length} bytes exceeds the "
                            f"{limit}-byte limit")
    # small frames are not charged: one per connection, they are bounded by the connection cap
    charged = length if budget is not None and length > UNCHARGED_FRAME else 0
    if charged and budget is not None and not budget.take(uid, charged):  # (charged: a budget)
        raise Busy("Controller busy, try again (too many unfinished requests from this user)")
    body = None
    try:
        body = await reader.readexactly(length)
    except asyncio.IncompleteReadError as exc:
        # drop the half-received bytes now: the exception would keep them alive through
        # reference cycles (traceback ↔ frames) until a full GC pass, which an idle daemon
        # may not run for a long time
        exc.partial = b""
    finally:
        if charged and budget is not None:
            budget.give(uid, charged)
        if length >= LARGE_FRAME:
            memory_trimmer.soon()
    if body is None:
        raise BadFrame("truncated frame")
    return body


async def read_frame(reader: asyncio.StreamReader, limit: int = MAX_FRAME) -> dict | None:
    """Next plain frame, or None at a clean end of stream. Raises BadFrame on garbage."""
    body = await read_body(reader, limit)
    return None if body is None else decode(body)


def frame(obj: dict) -> bytes:
    body = _enc.encode(obj)
    return HEADER.pack(len(body)) + body


class Link:
    """One peer's framed stream: plain, or sealed once :meth:`seal` has been called."""

    __slots__ = ("reader", "writer", "sealer", "opener", "_refusal_ok")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.sealer: linkauth.Sealer | None = None
        self.opener: linkauth.Opener | None = None
        self._refusal_ok = False

    def seal(self, pair: tuple[linkauth.Sealer, linkauth.Opener], initiator: bool) -> None:
        self.sealer, self.opener = pair
        # the initiator sends its first sealed frame before the responder has checked its
        # proof: the answer to it may be the responder's plain refusal
        self._refusal_ok = initiator

    def encode(self, obj: dict) -> bytes | memoryview:
        """The frame for ``obj``; on a sealed link this consumes a sequence number, so the
        bytes must be written (in order) or the link abandoned. A plain frame is encoded in
        place after its header and handed out as a view: a reply of megabytes (squeue
        --json's records) is copied neither here nor by the transport's first write, which
        slices off what the socket took."""
        if self.sealer is None:
            buf = bytearray(HEADER.size)
            _enc.encode_into(obj, buf, HEADER.size)
            HEADER.pack_into(buf, 0, len(buf) - HEADER.size)
            return memoryview(buf)
        return self.encode_body(_enc.encode(obj))

    def frames(self, obj: dict) -> list[bytes | memoryview]:
        """The frame for ``obj`` as pieces to write in order (joined, they are
        :meth:`encode`'s bytes). On a plain link a reply whose last member is a large
        msgspec.Raw (squeue --json's records, megabytes) is laid out around it: the header
        and the members before it, the raw bytes themselves (a view, never copied here) and
        the closing brace, so the transport's buffer is the only copy of the megabytes
        (:meth:`encode` copies them once more, into the frame)."""
        if self.sealer is None and obj:
            key, last = next(reversed(obj.items()))
            if isinstance(last, msgspec.Raw) and len(last) >= _SPLIT_RAW:
                head = _enc.encode({k: v for k, v in obj.items() if k != key})
                prefix = head[:-1] + (b"," if len(head) > 2 else b"") + _enc.encode(key) + b":"
                size = len(prefix) + len(last) + 1
                return [HEADER.pack(size) + prefix, memoryview(last), b"}"]
        return [self.encode(obj)]

    def encode_body(self, body: bytes) -> bytes:
        """The frame for an already encoded body (a relay passes bodies through)."""
        if self.sealer is None:
            return HEADER.pack(len(body)) + body
        return HEADER.pack(len(body) + linkauth.TAG_BYTES) + body + self.sealer.tag(body)

    def send(self, obj: dict) -> bool:
        if self.writer.is_closing():
            return False
        self.writer.write(self.encode(obj))
        return True

    async def recv(self, limit: int = MAX_FRAME, budget: ByteBudget | None = None,
                   uid: int = -1) -> dict | None:
        """Next frame (None at a clean end). BadFrame on garbage, LinkForged when a sealed
        frame fails its MAC."""
        body = await self.recv_body(limit, budget, uid)
        return None if body is None else decode(body)

    async def recv_body(self, limit: int = MAX_FRAME, budget: ByteBudget | None = None,
                        uid: int = -1) -> bytes | None:
        """Next frame's body, checked and unsealed but not decoded (None at a clean end)."""
        if self.opener is None:
            return await read_body(self.reader, limit, budget, uid)
        body = await read_body(self.reader, limit + linkauth.TAG_BYTES, budget, uid)
        if body is None:
            return None
        try:
            body = self.opener.open(body)
        except linkauth.LinkAuthError as exc:
            if self._refusal_ok:
                _raise_refusal(body)
            raise LinkForged(str(exc)) from None
        self._refusal_ok = False
        return body

    def close(self) -> None:
        self.writer.close()


def _raise_refusal(body: bytes) -> None:
    try:
        msg = decode(body)
    except BadFrame:
        return
    if msg.get("ok") is False and msg.get("code") == "auth":
        raise LinkForged(str(msg.get("error"))[:300])


async def _recv_plain(link: Link) -> dict:
    msg = await link.recv(linkauth.PRE_AUTH_MAX_FRAME)
    if msg is None:
        raise LinkForged("the peer closed the connection during the handshake")
    return msg


async def initiate(link: Link, keys: list[bytes], role: str, claims: dict,
                   first: dict | None = None) -> None:
    """Authenticate to the responder at the other end of ``link`` and seal it.

    Only the hello (a nonce, the role, key ids) is sent before the responder has proved it
    holds a shared key; then our proof and — pipelined, no extra round trip — ``first``
    (sealed). LinkForged (or BadFrame, OSError) on failure; the caller closes. The whole
    exchange must finish within HANDSHAKE_TIMEOUT (asyncio.TimeoutError)."""
    async def run() -> None:
        hs = linkauth.Initiator(keys, role, claims)
        link.send(hs.hello())
        await link.writer.drain()
        try:
            proof = hs.answer(await _recv_plain(link))
        except linkauth.LinkAuthError as exc:
            raise LinkForged(str(exc)) from None
        link.send(proof)
        link.seal(hs.pair(), initiator=True)
        if first is not None:
            link.send(first)
        await link.writer.drain()
    await asyncio.wait_for(run(), linkauth.HANDSHAKE_TIMEOUT)


async def respond(link: Link, keys: list[bytes], roles) -> tuple[str, dict, bytes]:
    """Authenticate the initiator at the other end of ``link`` and seal it; its role, its
    claims and the key the two sides shared.

    Every frame before the initiator's proof is capped at PRE_AUTH_MAX_FRAME and the whole
    exchange at HANDSHAKE_TIMEOUT (asyncio.TimeoutError). A peer that fails gets the plain
    refusal frame and LinkForged is raised (the caller closes)."""
    hs = linkauth.Responder(keys, roles)
    try:
        link.send(hs.challenge(await _recv_plain(link)))
        await link.writer.drain()
        claims = hs.verify(await _recv_plain(link))
    except linkauth.LinkAuthError as exc:
        link.send(linkauth.refusal(str(exc)))
        raise LinkForged(str(exc)) from None
    link.seal(hs.pair(), initiator=False)
    assert hs.role is not None and hs.key is not None  # set by the challenge just verified
    return hs.role, claims, hs.key


# ---- how much a connection may hold -------------------------------------------------------------

STREAM_LIMIT = 16 << 10  # a StreamReader stops reading from the socket past 2× this, unread
SMALL_READS = 64 << 10  # socket reads of peers that are not trusted (default: 256 KiB)


def cap_reads(writer: asyncio.StreamWriter, size: int | None) -> None:
    """Read at most ``size`` bytes per socket read on this connection (None: the default).

    A StreamReader pauses the socket only once it holds 2 × STREAM_LIMIT unread bytes, and
    one read can bring up to the transport's ``max_size``: with both small, a peer that
    pipelines requests and never reads the replies pins ~100 KiB, not ~2 MiB, per
    connection. (Only asyncio's selector transports have the knob; others keep theirs.)"""
    tr = writer.transport
    if hasattr(tr, "max_size"):
        if size is None:
            tr.__dict__.pop("max_size", None)
        else:
            tr.max_size = size


# ---- memory ------------------------------------------------------------------------------------

LARGE_FRAME = 1 << 20  # frames this big are followed by a malloc_trim (debounced)


class _Trimmer:
    """glibc keeps freed heap memory for reuse; after large frames (megabytes of bodies,
    decoded strings) it is handed back to the OS with ``malloc_trim(0)``, at most once per
    second, off the request path (a loop callback)."""

    def __init__(self):
        self._libc = None
        self._pending = False
        self._last = 0.0
        name = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(name) if name else None
            if libc is not None and hasattr(libc, "malloc_trim"):
                self._libc = libc
        except OSError:
            pass

    def soon(self) -> None:
        if self._libc is None or self._pending:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._pending = True
        loop.call_later(max(0.2, self._last + 1.0 - time.monotonic()), self._trim)

    def _trim(self) -> None:
        self._pending = False
        self._last = time.monotonic()
        if self._libc is not None:  # (scheduled only when there is one)
            self._libc.malloc_trim(0)


memory_trimmer = _Trimmer()
