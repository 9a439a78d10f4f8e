"""Partition, QOS and association limits → Slurm's pending reasons and submit errors.

Contract:

* :func:`job_tres` / :func:`alloc_tres`: the TRES a pending job asks for (its minimum)
  and a running job holds: ``cpu``, ``mem`` (MB), ``node``, ``gres/gpu``.
* :class:`LimitChecker` is built once per cycle from the snapshot (running usage per
  QOS, per (QOS, user) and per association up the account tree). :meth:`check` returns
  the first violated *run-time* limit as the reason Slurm shows (``QOSMaxGRESPerUser``,
  ``AssocGrpGRES``, ``QOSMaxJobsPerUserLimit``, ...) or None; :meth:`charge` adds a job
  started in this cycle. Only with ``"limits"`` in ``SchedConfig.enforce``
  (AccountingStorageEnforce). Order of checks: per-job limits (MaxWall, MaxTRESPerJob),
  then the QOS (partition QOS first, then the job's), then associations from the user
  upwards. For one limit the partition QOS wins over the job QOS (``OverPartQOS`` on the
  job QOS swaps them). A job held by such a limit never blocks its partition and gets no
  backfill reservation.
* :func:`partition_reason`: partition access (AllowAccounts/Groups/Qos, Deny*) → reason.
* :func:`submit_check` returns Slurm's error message when a job must be rejected at
  submit (EnforcePartLimits, MaxSubmitJobs*, Max*PerJob with ``DenyOnLimit``), else None.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from .placement import Allocation, Request
from .snapshot import (AssocView, JobView, NodeAlloc, PartitionView, QosView, SchedConfig,
                       Snapshot)

AssocKey = tuple[str, str | None]  # (account, user), (account, None) for the account itself

__all__ = [
    "LimitChecker", "MSG_ACCOUNT", "MSG_GROUP", "MSG_NODES", "MSG_POLICY", "MSG_QOS",
    "MSG_TIME", "alloc_tres", "job_tres", "partition_reason", "submit_check",
]

MSG_TIME = "Requested time limit is invalid (missing or exceeds some limit)"
MSG_NODES = "Node count specification invalid"
MSG_ACCOUNT = "Invalid account or account/partition combination specified"
MSG_GROUP = "User's group not permitted to use this partition"
MSG_QOS = "Invalid qos specification"
MSG_POLICY = "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)"
MSG_PART_UNAVAIL = "Required partition not available (inactive or drain)"

_TRES_WORD = {"cpu": "Cpu", "mem": "Mem", "node": "Node"}


def _word(tres: str) -> str:
    return _TRES_WORD.get(tres, "GRES" if tres.startswith("gres/") else "Billing")


def _qos_user_reason(t: str) -> str:
    if t == "mem":
        return "QOSMaxMemoryPerUser"
    w = _word(t)
    return "QOSMaxGRESPerUser" if w == "GRES" else f"QOSMax{w}PerUserLimit"


def _per_job_reason(prefix: str, t: str) -> str:
    w = _word(t)
    return f"{prefix}MaxGRESPerJob" if w == "GRES" else f"{prefix}Max{w}PerJobLimit"


def _grp_reason(prefix: str, t: str) -> str:
    w = _word(t)
    return f"{prefix}GrpGRES" if w == "GRES" else f"{prefix}Grp{w}Limit"


def job_tres(job: JobView, rq: Request) -> dict[str, int]:
    """Minimum TRES of a pending job (what limits are checked against)."""
    if rq.tasks_mode == "pack":
        tasks = rq.ntasks
    elif rq.tasks_mode == "fixed":
        tasks = rq.lo * (rq.tpn or 1)
    else:
        tasks = rq.lo
    cpus = max(1, tasks * rq.cpt)
    if rq.gpu_mode == "node":
        gpus = rq.gpus * rq.lo
    elif rq.gpu_mode == "task":
        gpus = rq.gpus * tasks
    else:
        gpus = rq.gpus
    mm = rq.mem_mode
    mem = (rq.mem * rq.lo if mm == "node" else rq.mem * cpus if mm == "cpu"
           else rq.mem * gpus if mm == "gpu" else 0)
    out = {"cpu": cpus, "node": rq.lo, "mem": mem}
    if gpus:
        out["gres/gpu"] = gpus
    return out


def alloc_tres(nodes: Iterable[NodeAlloc]) -> dict[str, int]:
    """TRES held by an allocation."""
    c = m = g = n = 0
    for a in nodes:
        c += a.cpus
        m += a.mem
        g += len(a.gpus)
        n += 1
    out = {"cpu": c, "node": n, "mem": m}
    if g:
        out["gres/gpu"] = g
    return out


def _add(into: dict[str, int], tres: Mapping[str, int]) -> None:
    for k, v in tres.items():
        into[k] = into.get(k, 0) + v


def partition_reason(job: JobView, part: PartitionView) -> str | None:
    if part.allow_accounts is not None and job.account not in part.allow_accounts:
        return "AccountNotAllowed"
    if job.account and job.account in part.deny_accounts:
        return "AccountNotAllowed"
    if part.allow_qos is not None and job.qos not in part.allow_qos:
        return "QOSNotAllowed"
    if job.qos and job.qos in part.deny_qos:
        return "QOSNotAllowed"
    if part.allow_groups is not None and job.group not in part.allow_groups:
        return "PartitionConfig"
    return None


class LimitChecker:
    """Run-time QOS/association limits against running usage (see module doc)."""

    __slots__ = ("on", "qos", "assoc", "q_jobs", "q_tres", "qu_jobs", "qu_tres",
                 "a_jobs", "a_tres", "parts", "_chain")

    def __init__(self, snap: Snapshot, cfg: SchedConfig) -> None:
        self.on = "limits" in cfg.enforce and bool(snap.qos or snap.assocs)
        self.qos: dict[str, QosView] = snap.qos_map()
        self.assoc: dict[tuple[str, str | None], AssocView] = snap.assoc_map()
        self.parts = snap.partition_map()
        self.q_jobs: dict[str, int] = {}
        self.q_tres: dict[str, dict[str, int]] = {}
        self.qu_jobs: dict[tuple[str, str], int] = {}
        self.qu_tres: dict[tuple[str, str], dict[str, int]] = {}
        self.a_jobs: dict[AssocKey, int] = {}
        self.a_tres: dict[AssocKey, dict[str, int]] = {}
        self._chain: dict[tuple[str, str], tuple[AssocKey, ...]] = {}
        if self.on:
            for r in snap.running:
                part = self.parts.get(r.partition)
                self._charge(r.user, r.account, r.qos, part.qos if part else None,
                             alloc_tres(r.nodes))

    def chain(self, account: str, user: str) -> tuple[AssocKey, ...]:
        """Association keys from the user's association up to the root account."""
        key = (account, user)
        got = self._chain.get(key)
        if got is None:
            out: list[AssocKey] = []
            if (account, user) in self.assoc:
                out.append((account, user))
            acct: str | None = account
            seen: set[str] = set()
            while acct is not None and acct not in seen and (acct, None) in self.assoc:
                seen.add(acct)
                out.append((acct, None))
                acct = self.assoc[(acct, None)].parent
            got = self._chain[key] = tuple(out)
        return got

    def _qos_list(self, qos: str, part_qos: str | None) -> list[QosView]:
        out = []
        jq = self.qos.get(qos)
        pq = self.qos.get(part_qos) if part_qos else None
        if pq is not None:
            out.append(pq)
        if jq is not None and jq is not pq:
            if "OverPartQOS" in jq.flags:
                out.insert(0, jq)
            else:
                out.append(jq)
        return out

    def _charge(self, user: str, account: str, qos: str, part_qos: str | None,
                tres: Mapping[str, int]) -> None:
        for q in self._qos_list(qos, part_qos):
            self.q_jobs[q.name] = self.q_jobs.get(q.name, 0) + 1
            _add(self.q_tres.setdefault(q.name, {}), tres)
            k = (q.name, user)
            self.qu_jobs[k] = self.qu_jobs.get(k, 0) + 1
            _add(self.qu_tres.setdefault(k, {}), tres)
        for a in self.chain(account, user):
            self.a_jobs[a] = self.a_jobs.get(a, 0) + 1
            _add(self.a_tres.setdefault(a, {}), tres)

    def charge(self, job: JobView, partition: str, alloc: Allocation) -> None:
        if self.on:
            part = self.parts.get(partition)
            self._charge(job.user, job.account, job.qos, part.qos if part else None,
                         alloc_tres(alloc.nodes))

    def widest(self, job: JobView, partition: str, alloc: Allocation, floor: int,
               place: Callable[[int], Allocation | None]) -> Allocation | None:
        """A job with a node range, placed grown (``alloc``), within the limits: ``alloc``
        itself if it is, else the first of ``place(k)`` (at most ``k`` nodes) for ``k`` from
        one node fewer down to ``floor + 1`` that is; None when none is (the caller then
        starts the job's minimum, which :meth:`check` passed). Slurm caps a range's
        maximum by the job's node and TRES limits the same way: as many nodes as allowed."""
        if not self.on or self.check(job, partition, alloc_tres(alloc.nodes)) is None:
            return alloc
        for k in range(len(alloc.nodes) - 1, floor, -1):
            got = place(k)
            if got is not None and self.check(job, partition, alloc_tres(got.nodes)) is None:
                return got
        return None

    def check(self, job: JobView, partition: str, tres: Mapping[str, int]) -> str | None:
        """The reason the job may not start now because of a limit, or None."""
        if not self.on:
            return None
        part = self.parts.get(partition)
        qlist = self._qos_list(job.qos, part.qos if part else None)
        # per-job limits: first QOS that sets a limit wins
        seen_job: set[str] = set()
        wall_done = False
        for q in qlist:
            if not wall_done and q.max_wall is not None:
                wall_done = True
                if job.time_limit is None or job.time_limit > q.max_wall:
                    return "QOSMaxWallDurationPerJobLimit"
            for t, lim in q.max_tres_per_job.items():
                if t not in seen_job:
                    seen_job.add(t)
                    if tres.get(t, 0) > lim:
                        return _per_job_reason("QOS", t)
        seen_u: set[str] = set()
        seen_g: set[str] = set()
        jobs_u = jobs_g = False
        for q in qlist:
            k = (q.name, job.user)
            if q.max_jobs_per_user is not None and not jobs_u:
                jobs_u = True
                if self.qu_jobs.get(k, 0) + 1 > q.max_jobs_per_user:
                    return "QOSMaxJobsPerUserLimit"
            used = self.qu_tres.get(k, {})
            for t, lim in q.max_tres_per_user.items():
                if t not in seen_u:
                    seen_u.add(t)
                    if used.get(t, 0) + tres.get(t, 0) > lim:
                        return _qos_user_reason(t)
            if q.grp_jobs is not None and not jobs_g:
                jobs_g = True
                if self.q_jobs.get(q.name, 0) + 1 > q.grp_jobs:
                    return "QOSGrpJobsLimit"
            used = self.q_tres.get(q.name, {})
            for t, lim in q.grp_tres.items():
                if t not in seen_g:
                    seen_g.add(t)
                    if used.get(t, 0) + tres.get(t, 0) > lim:
                        return _grp_reason("QOS", t)
        first = True
        for a in self.chain(job.account, job.user):
            av = self.assoc[a]
            if first:
                for t, lim in av.max_tres_per_job.items():
                    if tres.get(t, 0) > lim:
                        return _per_job_reason("Assoc", t)
                if av.max_jobs is not None and self.a_jobs.get(a, 0) + 1 > av.max_jobs:
                    return "AssocMaxJobsLimit"
                first = False
            if av.grp_jobs is not None and self.a_jobs.get(a, 0) + 1 > av.grp_jobs:
                return "AssocGrpJobsLimit"
            used = self.a_tres.get(a, {})
            for t, lim in av.grp_tres.items():
                if used.get(t, 0) + tres.get(t, 0) > lim:
                    return _grp_reason("Assoc", t)
        return None

    def no_reserve(self, job: JobView) -> bool:
        q = self.qos.get(job.qos)
        return q is not None and "NoReserve" in q.flags


def submit_check(
    job: JobView,
    part: PartitionView,
    *,
    tres: Mapping[str, int] | None = None,
    qos: QosView | None = None,
    assocs: Iterable[AssocView] = (),
    user_jobs_in_qos: int = 0,
    assoc_jobs: Mapping[AssocKey, int] | None = None,
    enforce_part_limits: str = "NO",
    enforce: Iterable[str] = (),
    new_jobs: int = 1,
) -> str | None:
    """Slurm's rejection message for a new job, or None when it may be queued.

    ``assocs`` is the user's association chain (user first); ``user_jobs_in_qos`` and
    ``assoc_jobs`` count the user's jobs already submitted (pending + running);
    ``new_jobs`` is how many the new one is (an array: one per task, as Slurm counts it).
    """
    enforce = frozenset(enforce)
    if part.state in ("DOWN", "INACTIVE", "DRAIN") and enforce_part_limits != "NO":
        return MSG_PART_UNAVAIL
    if enforce_part_limits in ("ALL", "ANY"):
        if job.time_limit is not None and part.max_time is not None and job.time_limit > part.max_time:
            return MSG_TIME
        if part.max_nodes is not None and max(1, job.nodes_min) > part.max_nodes:
            return MSG_NODES
        if job.nodes_max is not None and job.nodes_max < part.min_nodes:
            return MSG_NODES
        why = partition_reason(job, part)
        if why == "AccountNotAllowed":
            return MSG_ACCOUNT
        if why == "QOSNotAllowed":
            return MSG_QOS
        if why is not None:
            return MSG_GROUP
    if "limits" not in enforce and "qos" not in enforce and "associations" not in enforce:
        return None
    assocs = list(assocs)
    if "associations" in enforce and not assocs:
        return MSG_ACCOUNT
    if "limits" not in enforce:
        return None
    tres = tres or {}
    if qos is not None:
        if q_sub := qos.max_submit_jobs_per_user:
            if user_jobs_in_qos + new_jobs > q_sub:
                return MSG_POLICY
        if "DenyOnLimit" in qos.flags:
            if qos.max_wall is not None and (job.time_limit is None or job.time_limit > qos.max_wall):
                return MSG_POLICY
            if any(tres.get(t, 0) > v for t, v in qos.max_tres_per_job.items()):
                return MSG_POLICY
            if any(tres.get(t, 0) > v for t, v in qos.max_tres_per_user.items()):
                return MSG_POLICY
    counts = assoc_jobs or {}
    for a in assocs:
        if a.max_submit_jobs is not None and counts.get(a.key, 0) + new_jobs > a.max_submit_jobs:
            return MSG_POLICY
    if enforce_part_limits in ("ALL", "ANY") and assocs:
        if any(tres.get(t, 0) > v for t, v in assocs[0].max_tres_per_job.items()):
            return MSG_POLICY
    return None
