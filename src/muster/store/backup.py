"""The portable backup format of ``muster backup`` / ``muster restore`` (either backend).

One JSON value per line:

    {"format": "muster-backup", "version": 1, "schema": N, "source": "...", "created": T}
    {"table": "jobs", "columns": ["job_id", ...]}      then one JSON array per row
    ...
    {"end": true, "rows": R}

A record column (bytes in the store: msgspec's JSON of a record) is written as the JSON value
it holds, byte for byte (``msgspec.Raw``), and read back the same way, so a restore gives the
controller exactly the records it saved. Every table is read inside ``store.snapshot()``: one
consistent moment while the controller keeps committing. The end line proves the file is
complete; a restore checks every line before it changes anything.
"""

from __future__ import annotations

import time
from typing import IO, Any

import msgspec

from muster.common.errors import MusterError
from muster.store.base import TABLE_SINCE, TABLES, Store, columns_at

FORMAT = "muster-backup"
VERSION = 1

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder()
_raw_list = msgspec.json.Decoder(list[msgspec.Raw])


class BadBackup(MusterError):
    """A file that is not a complete Muster backup this build can restore."""


def tables_at(version: int) -> list[str]:
    return [t for t in TABLES if TABLE_SINCE.get(t, 1) <= version]


def dump(store: Store, out: IO[bytes]) -> dict[str, int]:
    """Write every table of ``store`` to ``out``; return rows per table."""
    counts: dict[str, int] = {}
    with store.snapshot():
        version = int(store.get_meta("schema") or 0)
        out.write(_enc.encode({"format": FORMAT, "version": VERSION, "schema": version,
                               "source": store.describe(), "created": int(time.time())}) + b"\n")
        for table in tables_at(version):
            cols = columns_at(table, version)
            blobs = [i for i, c in enumerate(cols) if c in TABLES[table][2]]
            out.write(_enc.encode({"table": table, "columns": list(cols)}) + b"\n")
            n = 0
            for row in store.dump_table(table, cols):
                vals: list[Any] = list(row)
                for i in blobs:
                    vals[i] = msgspec.Raw(bytes(vals[i]))
                out.write(_enc.encode(vals) + b"\n")
                n += 1
            counts[table] = n
    out.write(_enc.encode({"end": True, "rows": sum(counts.values())}) + b"\n")
    return counts


def read(fh: IO[bytes], known: int) -> tuple[dict, dict[str, list[tuple]]]:
    """(header, table -> rows) of a backup, every line checked; ``known``: the newest schema
    version this build can restore."""
    try:
        header = _dec.decode(fh.readline())
    except msgspec.DecodeError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise BadBackup("not a Muster backup (no muster-backup header line)")
    if header.get("version") != VERSION:
        raise BadBackup(f"backup format version {header.get('version')!r} is not supported")
    schema = header.get("schema")
    if not isinstance(schema, int) or schema < 1:
        raise BadBackup("backup header has no valid schema version")
    if schema > known:
        raise BadBackup(f"the backup has schema version {schema}, newer than the {known} this "
                        "Muster knows: restore it with the release that wrote it")
    tables: dict[str, list[tuple]] = {}
    rows: list[tuple] | None = None
    cols: tuple[str, ...] = ()
    blobs: set[int] = set()
    for lineno, line in enumerate(fh, start=2):
        if line.startswith(b"["):
            if rows is None:
                raise BadBackup(f"line {lineno}: a row before any table line")
            rows.append(_row(line, lineno, cols, blobs))
            continue
        obj = _line(line, lineno)
        if isinstance(obj, dict) and obj.get("end") is True:
            total = sum(len(r) for r in tables.values())
            if obj.get("rows") != total:
                raise BadBackup(f"the end line counts {obj.get('rows')} rows, the file has {total}")
            return header, tables
        table = obj.get("table") if isinstance(obj, dict) else None
        if table not in TABLES or TABLE_SINCE.get(table, 1) > schema or table in tables:
            raise BadBackup(f"line {lineno}: unexpected table line {line[:80]!r}")
        cols = columns_at(table, schema)
        if tuple(obj.get("columns") or ()) != cols:
            raise BadBackup(f"line {lineno}: columns of {table} are not those of schema {schema}")
        blobs = {i for i, c in enumerate(cols) if c in TABLES[table][2]}
        rows = tables[table] = []
    raise BadBackup("the backup is incomplete (no end line): it was cut short")


def _line(line: bytes, lineno: int) -> Any:
    try:
        return _dec.decode(line)
    except msgspec.DecodeError:
        raise BadBackup(f"line {lineno}: not JSON") from None


def _row(line: bytes, lineno: int, cols: tuple[str, ...], blobs: set[int]) -> tuple:
    try:
        raw = _raw_list.decode(line)
        if len(raw) != len(cols):
            raise BadBackup(f"line {lineno}: {len(raw)} values for {len(cols)} columns")
        return tuple(bytes(v) if i in blobs else _dec.decode(v) for i, v in enumerate(raw))
    except msgspec.DecodeError:
        raise BadBackup(f"line {lineno}: not a JSON row") from None
