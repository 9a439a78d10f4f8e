"""Asyncio framing for the daemons (same frames as muster.common.wire, msgspec-decoded).

Nothing a peer sends can raise anything but :class:`BadFrame` (or return None at a clean end
of stream): a length over the limit is refused before a byte of the body is read or
allocated, and any decoding problem (malformed JSON, invalid UTF-8, numbers out of range,
nesting deep enough to exhaust the decoder's recursion limit) becomes a BadFrame.
"""

from __future__ import annotations

import asyncio

import msgspec

from muster.common.wire import HEADER, MAX_FRAME

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder()


class BadFrame(Exception):
    """The peer sent something that is not a valid frame (``code``: wire error code)."""

    code = "invalid_request"


class FrameTooLarge(BadFrame):
    code = "too_large"


async def read_frame(reader: asyncio.StreamReader, limit: int = MAX_FRAME) -> dict | None:
    """Next frame, or None at a clean end of stream. Raises BadFrame on garbage."""
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
    try:
        body = await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise BadFrame("truncated frame") from None
    try:
        obj = _dec.decode(body)
    except msgspec.DecodeError as exc:
        raise BadFrame(f"malformed frame: {exc}") from None
    except (RecursionError, MemoryError, ValueError, TypeError) as exc:
        raise BadFrame(f"malformed frame: {type(exc).__name__}") from None
    if not isinstance(obj, dict):
        raise BadFrame("frame is not a JSON object")
    return obj


def frame(obj: dict) -> bytes:
    body = _enc.encode(obj)
    return HEADER.pack(len(body)) + body
