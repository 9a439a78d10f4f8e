"""Binary framing of a job step's I/O stream between srun and the step daemons (stdlib only).

Each node's step daemon opens one TCP connection to srun. A frame is::

    type (1 byte) | task id (4 bytes, big-endian) | length (4 bytes) | payload [| tag (32 bytes)]

Authentication (muster.common.linkauth, role ``step-io``, K = the step's key): the step daemon
is the initiator, srun the responder. The three handshake messages travel as plain HELLO frames
(json, at most ``linkauth.PRE_AUTH_MAX_FRAME`` bytes); K itself never crosses the connection.
srun proves itself first, so a process squatting the port receives nothing but the daemon's
hello (the daemon holds its tasks' output until then); the daemon's proof covers its claims
(job, step, node, tasks), which tell srun who it is — one connection per node of the step.
srun gives an unproven connection HANDSHAKE_TIMEOUT and acts on nothing it sends but the
handshake.
Every later frame, both ways, is *sealed*: followed by ``MAC(session, direction | seq | frame)``
over its head and payload, with implicit per-direction sequence numbers — a forged, replayed,
reordered or injected frame fails its check and the receiver closes the connection.

Types after the handshake: STDOUT, STDERR (raw bytes), EXIT (json: exit_code, signal), DONE
(json: node finished, every task reported) from the daemon; STDIN (to one task, or to
``ALL_TASKS``), STDIN_EOF, SIGNAL (json: signal), WINSIZE (``srun --pty``: the terminal's
rows and columns, two big-endian 16-bit numbers, for task 0's pseudo-terminal) from srun. Raw
bytes travel as they are, so output needs no re-encoding; srun reassembles lines per task so
interleaving happens only at line boundaries (a pty's output is passed on as it comes).
"""

from __future__ import annotations

import json
import struct

from muster.common import linkauth

HEAD = struct.Struct(">BII")
HELLO, STDOUT, STDERR, EXIT, STDIN, STDIN_EOF, SIGNAL, DONE, WINSIZE = range(1, 10)
LAST_KIND = WINSIZE
WINSIZE_BODY = struct.Struct(">HH")
MAX_PAYLOAD = 1 << 20
ALL_TASKS = 0xFFFFFFFF
ROLE = "step-io"
TAG = linkauth.TAG_BYTES


class FrameError(ValueError):
    """Bytes that are not a frame of this stream (bad type, oversized, bad json)."""


def pack(kind: int, task: int, payload: bytes = b"") -> bytes:
    """One plain frame; sealed frames are ``frame + sealer.tag(frame)`` (see :func:`seal`)."""
    return HEAD.pack(kind, task, len(payload)) + payload


def seal(sealer: linkauth.Sealer, kind: int, task: int, payload: bytes = b"") -> bytes:
    frame = pack(kind, task, payload)
    return frame + sealer.tag(frame)


def step_key(text: object) -> bytes:
    """The step's key K as the controller hands it out (hex); ValueError if malformed."""
    if not isinstance(text, str) or len(text) < 32:
        raise ValueError("malformed step key")
    return bytes.fromhex(text)


def winsize(rows: int, cols: int) -> bytes:
    """A WINSIZE frame's payload (sizes clamped to what a terminal can hold)."""
    return WINSIZE_BODY.pack(min(max(rows, 0), 0xFFFF), min(max(cols, 0), 0xFFFF))


def winsize_of(payload: bytes) -> tuple[int, int]:
    """(rows, cols) of a WINSIZE frame; FrameError if it is not one."""
    if len(payload) != WINSIZE_BODY.size:
        raise FrameError("malformed window size frame")
    return WINSIZE_BODY.unpack(payload)


def hello(msg: dict) -> bytes:
    """A handshake message as a plain HELLO frame."""
    return pack(HELLO, 0, json.dumps(msg, separators=(",", ":")).encode())


def message(payload: bytes) -> dict:
    """The handshake message a HELLO frame carries; FrameError if it is not a json object."""
    try:
        msg = json.loads(payload)
    except ValueError:
        raise FrameError("malformed handshake message") from None
    if not isinstance(msg, dict):
        raise FrameError("malformed handshake message")
    return msg


class Decoder:
    """Incremental decoder: :meth:`feed` bytes (or :meth:`recv_into` it straight from a socket),
    iterate complete frames with :meth:`frames`.

    Plain frames (the handshake) of at most ``limit`` bytes until ``opener`` is set; from then
    on each frame must be followed by its tag, which is checked *before* the frame is yielded
    (LinkAuthError otherwise). The caller may set ``opener``/``limit`` between two frames of one
    iteration: the frame after the handshake's last message is already read as sealed.

    Cost: bytes land in one reused buffer (``[start:end)`` unread) and are MAC'd in place; the
    only copy is each payload's. The buffer is resized only in :meth:`_reserve`, never while
    :meth:`frames` holds a view of it.
    """

    __slots__ = ("_buf", "_start", "_end", "opener", "limit")

    def __init__(self, limit: int = linkauth.PRE_AUTH_MAX_FRAME) -> None:
        self._buf = bytearray()
        self._start = self._end = 0
        self.opener: linkauth.Opener | None = None
        self.limit = limit

    def _reserve(self, n: int) -> None:
        """Room for ``n`` more bytes after the unread ones (moved to the front first)."""
        if self._end + n <= len(self._buf):
            return
        buf, start, end = self._buf, self._start, self._end
        if start:
            buf[:end - start] = buf[start:end]
            self._start, self._end = 0, end - start
        if self._end + n > len(buf):
            buf.extend(bytes(self._end + n - len(buf)))

    def feed(self, data: bytes) -> None:
        self._reserve(len(data))
        self._buf[self._end:self._end + len(data)] = data
        self._end += len(data)

    def recv_into(self, sock, size: int) -> int:
        """Read up to ``size`` bytes from ``sock`` into the buffer; 0 at end of stream."""
        self._reserve(size)
        with memoryview(self._buf) as view:
            n = sock.recv_into(view[self._end:self._end + size])
        self._end += n
        return n

    def frames(self):
        """Yield ``(kind, task, payload)``; FrameError/LinkAuthError end the stream for good."""
        buf = self._buf
        while self._end - self._start >= HEAD.size:
            pos = self._start
            kind, task, length = HEAD.unpack_from(buf, pos)
            if length > self.limit or not HELLO <= kind <= LAST_KIND:
                raise FrameError("malformed I/O frame")
            start = pos + HEAD.size
            end = start + length
            opener = self.opener
            if end + (TAG if opener else 0) > self._end:
                return
            with memoryview(buf) as view:
                # no slice outlives this block (a failed check is a bool, not a traceback
                # holding one): the buffer can be resized once the caller is done with us
                intact = opener is None or _intact(opener, view[pos:end + TAG])
                payload = bytes(view[start:end]) if intact else b""
            if not intact:
                raise linkauth.LinkAuthError("I/O frame failed its integrity check")
            self._start = end + (TAG if opener else 0)
            yield kind, task, payload

    def next_frame(self):
        """The first complete frame, or None; the rest stays buffered."""
        return next(self.frames(), None)


def _intact(opener: linkauth.Opener, frame) -> bool:
    """Check (and count) one sealed frame. The failure is turned into a bool here, so that no
    traceback keeps a view of the decoder's buffer alive."""
    try:
        opener.open(frame)
    except linkauth.LinkAuthError:
        return False
    return True
