"""Trace readers: SWF (``.swf``, ``.swf.gz``) and the GPU CSV formats → :class:`Trace`.

Every reader yields :class:`TraceJob` records sorted by ``(submit, order in file)`` and
renumbered ``1..n`` in that order (the original id is kept in ``orig_id``). Records that
cannot be replayed (no run time, no processors, never scheduled) are counted in
``Trace.dropped`` with the reason, never silently lost.

Conventions (README of /work/shared/traces):

* SWF: submit = field 2, run = field 4, processors = requested (field 8), falling back to
  allocated (field 5); limit = requested time (field 9), or the run time when the trace has
  none (-1), as RLScheduler does; user = field 12. Header ``; MaxProcs:`` / ``; MaxNodes:``
  size the default machine.
* Microsoft ITP (``job_id,submission_time,duration,num_gpu``): GPUs only, no user, no limit
  (limit = duration).
* Alibaba openb pods (``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,...,
  creation_time,deletion_time,scheduled_time``): submit = creation, run = deletion -
  scheduled; CPUs = ceil(cpu_milli / 1000); a fractional GPU (``gpu_milli < 1000``) takes a
  whole device (the core allocates whole GPUs); ``gpu_spec`` with one model is a type
  constraint, with alternatives (``A|B``) no constraint. The node list
  (``openb_node_list_all_node.csv.gz`` next to the pod list unless given) is the machine.
* Philly-derived (Chronus): ``job_id,user,num_gpu,submit_time,...,duration,...``; parser
  tests only.
"""

from __future__ import annotations

import csv
import gc
import gzip
import io
import math
import os
from collections import Counter
from dataclasses import dataclass, field

__all__ = ["NodeSpec", "Trace", "TraceJob", "detect_format", "read_trace"]


class TraceError(ValueError):
    """A trace file that cannot be read (unknown format, bad header, bad numbers)."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace. Times in seconds; ``limit`` None = no limit."""

    job_id: int
    submit: int
    run: int
    limit: int | None
    cpus: int
    gpus: int = 0
    mem: int | None = None  # MB per node, None = not recorded
    user: str = ""
    gpu_type: str | None = None
    orig_id: str = ""


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A node recorded by a trace (Alibaba's node list)."""

    name: str
    cpus: int
    mem: int
    gpus: int
    gpu_type: str | None


@dataclass
class Trace:
    path: str
    fmt: str  # "swf" | "itp" | "openb" | "philly"
    jobs: list[TraceJob]
    max_procs: int | None = None
    max_nodes: int | None = None
    nodes: list[NodeSpec] | None = None
    dropped: Counter = field(default_factory=Counter)
    # the reader stopped after this many jobs (read_swf's ``limit``): ``jobs`` is the head of
    # the trace, ``dropped`` counts the lines read; None: the whole file was read
    read_limit: int | None = None

    @property
    def gpu(self) -> bool:
        return self.fmt != "swf"


def _open_text(path: str) -> io.TextIOBase:
    if path.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def _first_line(path: str) -> str:
    with _open_text(path) as fh:
        for line in fh:
            if line.strip():
                return line.strip()
    return ""


def detect_format(path: str) -> str:
    """``swf`` by extension; CSVs by their header line."""
    base = path[:-3] if path.endswith(".gz") else path
    if base.endswith(".swf") or base.endswith("_new2"):
        return "swf"
    head = _first_line(path).lower()
    if head.startswith(";"):
        return "swf"
    cols = [c.strip() for c in head.split(",")]
    if cols[:4] == ["job_id", "submission_time", "duration", "num_gpu"]:
        return "itp"
    if "cpu_milli" in cols and "num_gpu" in cols and "name" in cols:
        return "openb"
    if {"job_id", "user", "num_gpu", "submit_time", "duration"} <= set(cols):
        return "philly"
    if head and head[0].isdigit() and len(head.split()) >= 18:
        return "swf"
    raise TraceError(f"{path}: unknown trace format (header {head[:60]!r})")


def read_trace(path: str, *, fmt: str | None = None, nodes_file: str | None = None,
               limit: int | None = None) -> Trace:
    """The trace at ``path``. ``limit``: only its first ``limit`` jobs are needed; an SWF
    reader may then stop early (:func:`read_swf`), the other formats read everything."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise TraceError(f"{path}: no such trace file")
    fmt = fmt or detect_format(path)
    reader = {"swf": read_swf, "itp": read_itp, "openb": read_openb, "philly": read_philly}.get(fmt)
    if reader is None:
        raise TraceError(f"unknown trace format {fmt!r}")
    # a trace is a long list of flat records (no cycles): the collector's passes over the
    # growing heap would only add a third to the reading (202,871 HPC2N jobs: 0.70 -> 0.52 s)
    collecting = gc.isenabled()
    gc.disable()
    try:
        if fmt == "openb":
            return read_openb(path, nodes_file=nodes_file)
        if fmt == "swf":
            return read_swf(path, limit=limit)
        return reader(path)
    finally:
        if collecting:
            gc.enable()


def _finish(trace: Trace, raw: list[tuple]) -> Trace:
    """Sort by (submit, file order), renumber 1..n, shift time so the first submit is 0."""
    raw.sort(key=lambda r: (r[0], r[1]))
    t0 = raw[0][0] if raw else 0
    jobs = []
    for i, (submit, _order, run, limit, cpus, gpus, mem, user, gtype, orig) in enumerate(raw, 1):
        jobs.append(TraceJob(i, submit - t0, run, limit, cpus, gpus, mem, user, gtype, orig))
    trace.jobs = jobs
    return trace


def read_swf(path: str, limit: int | None = None) -> Trace:
    """An SWF file's jobs, sorted by (submit time, line). ``limit``: stop once that many jobs
    are read, if their submit times never went down: the SWF standard lists jobs by submit
    time, so the first ``limit`` lines are the first ``limit`` jobs (a replay of the first
    20,000 jobs of HPC2N's 203,000 no longer parses the rest: 0.65 s). A file whose first
    lines are out of order is read whole, and sorted, as without a limit."""
    trace = Trace(path=path, fmt="swf", jobs=[])
    raw: list[tuple] = []
    dropped = trace.dropped
    last_submit, in_order = -1, True
    with _open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if limit is not None and in_order and len(raw) >= limit:
                trace.read_limit = limit
                break
            if line.startswith(";"):
                key, _, val = line[1:].partition(":")
                key = key.strip().lower()
                if key in ("maxprocs", "maxnodes"):
                    try:
                        num = int(val.split()[0])
                    except (ValueError, IndexError):
                        continue
                    if key == "maxprocs":
                        trace.max_procs = num
                    else:
                        trace.max_nodes = num
                continue
            f = line.split()
            if not f:
                continue
            if len(f) < 18:
                raise TraceError(f"{path}:{lineno}: SWF needs 18 fields, found {len(f)}")
            try:
                submit = int(f[1])
                run = int(float(f[3]))
                alloc = int(f[4])
                req = int(f[7])
                req_time = int(float(f[8]))
                user = f[11]
            except ValueError as e:
                raise TraceError(f"{path}:{lineno}: bad number ({e})") from None
            procs = req if req > 0 else alloc
            if run < 0:
                dropped["no run time"] += 1
                continue
            if procs <= 0:
                dropped["no processors"] += 1
                continue
            if submit < 0:
                dropped["no submit time"] += 1
                continue
            if submit < last_submit:
                in_order = False
            last_submit = submit
            raw.append((submit, lineno, run, req_time if req_time > 0 else run, procs, 0, None,
                        user, None, f[0]))
    return _finish(trace, raw)


def _csv_rows(path: str):
    with _open_text(path) as fh:
        yield from csv.DictReader(fh)


def read_itp(path: str) -> Trace:
    trace = Trace(path=path, fmt="itp", jobs=[])
    raw = []
    for i, r in enumerate(_csv_rows(path)):
        try:
            submit = int(float(r["submission_time"]))
            run = int(float(r["duration"]))
            gpus = int(r["num_gpu"])
        except (ValueError, TypeError, KeyError) as e:
            raise TraceError(f"{path}: row {i + 2}: {e}") from None
        if run < 0:
            trace.dropped["no run time"] += 1
            continue
        if gpus <= 0:
            trace.dropped["no GPUs"] += 1
            continue
        raw.append((submit, i, run, run, 1, gpus, None, "", None, r["job_id"]))
    return _finish(trace, raw)


def read_philly(path: str) -> Trace:
    trace = Trace(path=path, fmt="philly", jobs=[])
    raw = []
    for i, r in enumerate(_csv_rows(path)):
        try:
            submit = int(float(r["submit_time"]))
            run = int(float(r["duration"]))
            gpus = int(r["num_gpu"])
        except (ValueError, TypeError, KeyError) as e:
            raise TraceError(f"{path}: row {i + 2}: {e}") from None
        if run < 0 or gpus <= 0:
            trace.dropped["no run time" if run < 0 else "no GPUs"] += 1
            continue
        raw.append((submit, i, run, run, 1, gpus, None, r.get("user", ""), None, r["job_id"]))
    return _finish(trace, raw)


def _openb_nodes(path: str) -> list[NodeSpec]:
    out = []
    for r in _csv_rows(path):
        out.append(NodeSpec(name=r["sn"], cpus=max(1, int(r["cpu_milli"]) // 1000),
                            mem=int(r["memory_mib"]), gpus=int(r["gpu"] or 0),
                            gpu_type=(r.get("model") or None) if int(r["gpu"] or 0) else None))
    return out


def read_openb(path: str, *, nodes_file: str | None = None) -> Trace:
    trace = Trace(path=path, fmt="openb", jobs=[])
    if nodes_file is None:
        cand = os.path.join(os.path.dirname(path), "openb_node_list_all_node.csv.gz")
        nodes_file = cand if os.path.isfile(cand) else None
    if nodes_file is not None:
        trace.nodes = _openb_nodes(nodes_file)
    raw = []
    for i, r in enumerate(_csv_rows(path)):
        sched, dele = r.get("scheduled_time") or "", r.get("deletion_time") or ""
        if not sched or not dele or not (r.get("creation_time") or ""):
            trace.dropped["never scheduled in the trace"] += 1
            continue
        try:
            submit = int(float(r["creation_time"]))
            run = int(float(dele)) - int(float(sched))
            cpus = max(1, math.ceil(int(r["cpu_milli"]) / 1000))
            mem = int(r["memory_mib"])
            gpus = int(r["num_gpu"] or 0)
        except (ValueError, TypeError, KeyError) as e:
            raise TraceError(f"{path}: row {i + 2}: {e}") from None
        if run < 0:
            trace.dropped["no run time"] += 1
            continue
        spec = (r.get("gpu_spec") or "").strip()
        gtype = spec if spec and "|" not in spec and gpus else None
        raw.append((submit, i, run, run, cpus, gpus, mem, r.get("qos", ""), gtype, r["name"]))
    return _finish(trace, raw)
