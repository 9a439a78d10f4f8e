"""squeue --json's job records, each encoded once per change of its job.

Building a job's v0.0.40 record (muster.common.fmt_json.job_json: ~100 nested fields) and
encoding it costs ~50 µs; for 5,000 pending jobs that was most of a 440 ms ``squeue --json``.
Here the controller keeps each listed job's record as the JSON bytes the command prints, and
answers a ``jobs`` request with ``encoded`` by laying the cached bytes out as fmt_json.write
lays out a list (fmt_json.LIST_OPEN/SEP/CLOSE). The reply carries them as its last member,
``records`` (a msgspec.Raw, so they are copied, not encoded again), and squeue writes that
text through without decoding it (muster.common.litejson.loads_head).

Invariants:

* **A cached record is the record of the job as it is in memory.** It is built from
  ``Job.to_record`` (and nothing else: not the clock, not the configuration), so it can only
  go stale when a field of the job changes, and every change of a job goes through
  ``ClusterState.save``, which drops the job's entry (the rule the scheduling views of
  ``ClusterState.view_cache`` rely on too). A job object that replaced another of the same
  id (reloaded from the store) misses: entries are checked by identity. Jobs forgotten by
  ``purge_old`` drop their entries.
* **Byte for byte what the command printed when it built the records itself**: the same
  ``job_json`` of the same record (state COMPLETING for a job with the completing flag, as
  the ``jobs`` query shows it; ``cluster`` the ClusterName), encoded by msgspec,
  whose output for these values equals the standard library's compact encoder the command
  used (strings escaped alike, non-ASCII kept; the one float, ``billable_tres``, is a CPU
  count: ``N.0`` in both below 10**16, where the command's encoder takes over).
  tests/unit/test_jobjson.py holds the two to each other.
* Cost: the bytes of each record listed (~4.4 KiB for a pending batch job), built on the
  first ``--json`` listing after a change, dropped with the job. Nothing is built for jobs
  no one lists this way.
* **The last listing is kept too**, for the same job objects in the same order while no
  record was dropped or built since (a generation count): a dashboard or a tool polling a
  queue that did not change gets the laid-out list without laying out 20 MB again (the
  join was a fifth of a 5,000-job ``squeue --json``'s controller time). One listing, not
  one per selection: a different selection replaces it.
* **squeue's columns too** (:meth:`RecordCache.rows`): a job's row for a set of columns,
  built by the caller's function of the job alone, kept until the job's entry is dropped by
  the same rule. Up to ``ROW_SETS`` sets of columns (squeue's formats); one more set
  forgets them all. A 10,000-job ``squeue`` built every row on every call: ~60 ms of the
  loop, its largest cost while a large queue is watched.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import is_

import msgspec

from muster.common import fmt_json, litejson
from muster.model.job import Job

_enc = msgspec.json.Encoder()
_FLOAT_EXP = 10 ** 16  # from here on msgspec and Python spell a float's exponent differently
_OPEN = fmt_json.LIST_OPEN.encode()
_SEP = fmt_json.LIST_SEP.encode()
_CLOSE = fmt_json.LIST_CLOSE.encode()
ROW_SETS = 8  # sets of columns whose rows are kept


def encode_record(job: Job, cluster: str = "") -> bytes:
    """``job``'s v0.0.40 record as squeue --json prints it (compact JSON, UTF-8)."""
    rec = job.to_record()
    if rec["completing"]:
        rec["state"] = "COMPLETING"
    doc = fmt_json.job_json(rec, cluster=cluster)
    if (rec["num_cpus"] or 0) >= _FLOAT_EXP:  # billable_tres would read 1e16, not 1e+16
        return litejson.dumps(doc).encode("utf-8")
    return _enc.encode(doc)


class RecordCache:
    """job id → (the job object, its encoded record). See the module's invariants."""

    __slots__ = ("_by_id", "cluster", "_gen", "_last", "_rows")

    def __init__(self, cluster: str = "") -> None:
        """``cluster``: ClusterName, in every record as Slurm's (a restart-only key)."""
        self._by_id: dict[int, tuple[Job, bytes]] = {}
        self.cluster = cluster
        self._gen = 0  # bumped whenever a record is dropped or built
        self._last: tuple[int, list[Job], msgspec.Raw] | None = None  # (gen, jobs, listing)
        # columns → job id → (the job object, its row)
        self._rows: dict[tuple[str, ...], dict[int, tuple[Job, list]]] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def drop(self, job_id: int) -> None:
        """The job changed or left memory: its record is built again when next listed."""
        if self._by_id.pop(job_id, None) is not None:
            self._gen += 1
        for rows in self._rows.values():
            rows.pop(job_id, None)

    def rows(self, jobs: list[Job], columns: tuple[str, ...],
             build: Callable[[Job], list]) -> list[list]:
        """The rows of ``jobs`` for ``columns``, in order: ``build(job)``'s, kept per job
        until it changes (the module's invariants; ``build`` reads nothing but the job)."""
        cache = self._rows.get(columns)
        if cache is None:
            if len(self._rows) >= ROW_SETS:
                self._rows.clear()
            cache = self._rows[columns] = {}
        get = cache.get
        out = []
        for job in jobs:
            hit = get(job.job_id)
            if hit is None or hit[0] is not job:
                hit = cache[job.job_id] = (job, build(job))
            out.append(hit[1])
        return out

    def record(self, job: Job) -> bytes:
        hit = self._by_id.get(job.job_id)
        if hit is not None and hit[0] is job:
            return hit[1]
        data = encode_record(job, self.cluster)
        self._by_id[job.job_id] = (job, data)
        self._gen += 1
        return data

    def listing(self, jobs: list[Job]) -> msgspec.Raw:
        """The records of ``jobs``, in order, as the JSON list squeue --json prints."""
        if not jobs:
            return msgspec.Raw(b"[]")
        last = self._last
        if last is not None and last[0] == self._gen and len(last[1]) == len(jobs) and \
                all(map(is_, last[1], jobs)):
            return last[2]
        # per job, when nothing changed: one dict lookup and an identity check
        get = self._by_id.get
        out = []
        for job in jobs:
            hit = get(job.job_id)
            out.append(hit[1] if hit is not None and hit[0] is job else self.record(job))
        out[0] = _OPEN + out[0]
        out[-1] += _CLOSE
        listing = msgspec.Raw(_SEP.join(out))
        self._last = (self._gen, list(jobs), listing)
        return listing
