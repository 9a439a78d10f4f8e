"""JSON for the CLI's hot path without importing ``json`` (which pulls in ``re``: ~3 ms of every
command's start-up). Uses the same C accelerator (``_json``) that ``json`` itself uses, so
speed and output are the same; only the pure-Python wrapper is skipped.

``dumps`` writes compact JSON (no spaces), keeping non-ASCII characters as they are;
``loads`` reads one JSON value from a str; ``loads_head`` an object whose last member is left
undecoded. Errors raise ``ValueError``.
"""

from __future__ import annotations

import _json

# the stubs type these C entry points by json's own classes; the arguments are theirs
_encoder = _json.make_encoder(None, None, _json.encode_basestring, None,  # type: ignore[arg-type]
                              ":", ",", False, False, True)


def _constant(name: str):
    raise ValueError(f"JSON constant {name} is not allowed")


class _Context:
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_constant)
    memo: dict = {}


_scan = _json.make_scanner(_Context())  # type: ignore[arg-type]  # a JSONDecoder's attributes


def dumps(obj) -> str:
    return "".join(_encoder(obj, 0))


# The accelerator reports most syntax errors through json.decoder.JSONDecodeError (a
# ValueError), which it looks up in sys.modules only: with ``json`` not imported (the point
# of this module) it returns NULL without an exception, which Python raises as SystemError.
# All three mean malformed (or, in a prefix, possibly cut short).
_MALFORMED = (StopIteration, SystemError, ValueError)


def loads(text: str):
    try:
        value, end = _scan(text, 0)
    except StopIteration as exc:
        raise ValueError(f"malformed JSON at offset {exc.value}") from None
    except SystemError:
        raise ValueError("malformed JSON") from None
    if text[end:].strip():
        raise ValueError(f"extra data after JSON value at offset {end}")
    return value


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\n\r":
        i += 1
    return i


class _Short(Exception):
    """The text ended inside the part being parsed: more of it is needed."""


def _head(text: str, tail: str, whole: bool) -> tuple[dict, int | None]:
    """The members of the object ``text`` opens, up to ``tail``, and where ``tail``'s value
    starts (None: the object has no such member). ``whole``: ``text`` is all there is;
    else running into its end (where a value might continue) raises _Short."""
    out: dict = {}
    i = _skip_ws(text, 0)
    if text[i:i + 1] != "{":
        raise ValueError("not a JSON object")
    i = _skip_ws(text, i + 1)
    while True:
        if text[i:i + 1] != '"':
            if i >= len(text) and not whole:
                raise _Short()
            return out, None  # not a member: loads_head decodes (and checks) the whole text
        try:
            key, i = _scan(text, i)
            i = _skip_ws(text, i)
            if text[i:i + 1] != ":":
                raise StopIteration(i)
            i = _skip_ws(text, i + 1)
            if key == tail:
                return out, i
            out[key], i = _scan(text, i)
            i = _skip_ws(text, i)
        except _MALFORMED as exc:
            if not whole:
                raise _Short() from None
            at = f" at offset {exc.value}" if isinstance(exc, StopIteration) else ""
            raise ValueError(f"malformed JSON{at}") from None
        if i >= len(text) and not whole:
            raise _Short()
        if text[i:i + 1] != ",":
            return out, None
        i = _skip_ws(text, i + 1)


def loads_head(data: bytes | bytearray, tail: str) -> tuple[dict, memoryview | None]:
    """A UTF-8 JSON object whose member ``tail``, when present, is its last: the members
    before it decoded, and ``tail``'s value as a view of its bytes in ``data``, neither
    decoded nor copied (None when there is no such member: the whole object is decoded
    then). For a reply whose bulk the caller passes on as it is (squeue --json's records,
    megabytes): decoding and re-encoding it would cost more than everything else the
    command does. Only the head is decoded (a prefix, grown until the head fits in it);
    ``tail``'s value is not checked beyond its end, so only a trusted peer's reply is read
    this way."""
    n = 4096
    while True:
        whole = n >= len(data)
        text = data.decode("utf-8") if whole else data[:n].decode("utf-8", "ignore")
        try:
            out, at = _head(text, tail, whole)
        except _Short:
            n *= 4
            continue
        if at is None:
            return loads(text if whole else data.decode("utf-8")), None
        start = len(text[:at].encode("utf-8"))
        end = data.rfind(b"}")
        while end > start and data[end - 1] in b" \t\n\r":
            end -= 1
        if end <= start:
            raise ValueError(f"no value for {tail!r}")
        return out, memoryview(data)[start:end]
