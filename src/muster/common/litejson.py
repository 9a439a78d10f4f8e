"""JSON for the CLI's hot path without importing ``json`` (which pulls in ``re``: ~3 ms of every
command's start-up). Uses the same C accelerator (``_json``) that ``json`` itself uses, so
speed and output are the same; only the pure-Python wrapper is skipped.

``dumps`` writes compact JSON (no spaces), keeping non-ASCII characters as they are;
``loads`` reads one JSON value from a str. Errors raise ``ValueError``.
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


def loads(text: str):
    try:
        value, end = _scan(text, 0)
    except StopIteration as exc:
        raise ValueError(f"malformed JSON at offset {exc.value}") from None
    if text[end:].strip():
        raise ValueError(f"extra data after JSON value at offset {end}")
    return value
