"""Framing shared by the controller, the agents and the CLI (standard library only).

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON (one object).
Frames larger than ``MAX_FRAME`` are refused before anything is allocated for them, so a
garbage or hostile length cannot make a daemon allocate gigabytes.

The CLI uses the blocking helpers here (one request, one reply, close) with plain ``_socket``
objects and ``litejson`` (both avoid modules that cost milliseconds at start-up). The daemons
use their own asyncio reader built on the same constants.
"""

from __future__ import annotations

from muster.common import litejson

# the length prefix: 4 bytes, big-endian (int.to_bytes/from_bytes here: importing ``struct``
# costs a command ~0.2 ms of start-up; the daemons' netio.HEADER is the same as a Struct)
HEADER_SIZE = 4
MAX_FRAME = 16 * 1024 * 1024  # a 4 MiB script JSON-escaped, plus its environment, fits
MAX_CLIENT_REPLY = 512 * 1024 * 1024


class FrameError(Exception):
    """The peer sent something that is not a valid frame."""


def encode(obj: dict) -> bytes:
    # ensure_ascii=False + "replace": a string holding undecodable bytes (os.environ and
    # argv carry them as lone surrogates) becomes valid UTF-8 ("?" in their place) instead
    # of a "\udcff" escape that every strict JSON decoder (msgspec) refuses.
    body = litejson.dumps(obj).encode("utf-8", "replace")
    if len(body) > MAX_FRAME:
        raise FrameError(f"frame of {len(body)} bytes exceeds the {MAX_FRAME}-byte limit")
    return len(body).to_bytes(HEADER_SIZE, "big") + body


def _recv_exact(sock, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise FrameError("connection closed mid-frame" if got else "connection closed")
        got += k
    return buf


def recv_frame(sock, limit: int = MAX_CLIENT_REPLY, raw: str | None = None) -> dict:
    """The next frame's object. ``raw``: the name of a member the reply carries last (the
    controller's pre-encoded squeue --json records); its value is returned as a memoryview
    of its UTF-8 JSON text, neither decoded nor copied (litejson.loads_head)."""
    length = int.from_bytes(_recv_exact(sock, HEADER_SIZE), "big")
    if length > limit:
        raise FrameError(f"frame of {length} bytes exceeds the limit")
    try:
        body = _recv_exact(sock, length)
        if raw is None:
            obj = litejson.loads(body.decode("utf-8"))
        else:
            obj, tail = litejson.loads_head(body, raw)
            if tail is not None:
                obj[raw] = tail
    except (ValueError, RecursionError) as exc:
        raise FrameError(f"malformed frame: {exc}") from None
    if not isinstance(obj, dict):
        raise FrameError("frame is not a JSON object")
    return obj


def send_frame(sock, obj: dict) -> None:
    sock.sendall(encode(obj))
