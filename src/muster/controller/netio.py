"""Asyncio framing for the daemons (same frames as muster.common.wire, msgspec-decoded)."""

from __future__ import annotations

import asyncio

import msgspec

from muster.common.wire import HEADER, MAX_FRAME

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder()


class BadFrame(Exception):
    pass


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
        raise BadFrame(f"frame of {length} bytes exceeds the {limit}-byte limit")
    try:
        body = await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise BadFrame("truncated frame") from None
    try:
        obj = _dec.decode(body)
    except msgspec.DecodeError as exc:
        raise BadFrame(f"malformed frame: {exc}") from None
    if not isinstance(obj, dict):
        raise BadFrame("frame is not a JSON object")
    return obj


def frame(obj: dict) -> bytes:
    body = _enc.encode(obj)
    return HEADER.pack(len(body)) + body
