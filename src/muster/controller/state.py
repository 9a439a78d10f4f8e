"""The controller's in-memory view of the cluster, and the one place that changes it.

``ClusterState`` owns the jobs in memory (unfinished ones and those finished within
MinJobAge), the node runtimes and the store. Every mutation goes through a method here that
persists the job in the same call, so "changed in memory" and "committed" never drift apart;
callers that change several jobs at once wrap them in ``store.transaction()``.
"""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Sequence

from muster.common import clock as clocks
from muster.common.clock import now  # noqa: F401 - re-exported: controller modules import it here
from muster.common.hostlist import compress
from muster.common.units import tres_string
from muster.controller.jobjson import RecordCache
from muster.controller.nodes import NodeRuntime
from muster.lifecycle import deps as depmod
from muster.model.alloc import NodeAlloc
from muster.model.job import PENDING, RUNNING, Job


IDENTITY_TTL_S = 60.0  # how long a user's name, groups, home and shell are reused
_identities: dict[tuple[int, int | None], tuple[float, dict]] = {}


def identity(uid: int, gid: int | None = None) -> dict:
    """The account of ``uid`` (name, primary group or ``gid``, group list, home, shell), as
    the system's user and group databases give it. Looked up at most once a minute per
    (uid, gid): every request's authorisation and every submission and launch ask for it,
    and a lookup reads /etc/passwd and the whole of /etc/group (getgrouplist). A change of
    a user's groups is seen within the minute (slurmctld caches group membership for 600 s
    by default); ``scontrol reconfigure`` forgets them all (:func:`forget_identities`)."""
    t = clocks.monotonic()
    hit = _identities.get((uid, gid))
    if hit is not None and 0 <= t - hit[0] < IDENTITY_TTL_S:
        got = hit[1]
    else:
        got = _lookup_identity(uid, gid)
        if len(_identities) > 10_000:
            _identities.clear()
        _identities[(uid, gid)] = (t, got)
    return {**got, "groups": list(got["groups"])}  # the caller's own copy


def forget_identities() -> None:
    _identities.clear()


def _lookup_identity(uid: int, gid: int | None) -> dict:
    try:
        pw = pwd.getpwuid(uid)
        user, pgid, home, shell = pw.pw_name, pw.pw_gid, pw.pw_dir, pw.pw_shell
    except KeyError:
        user, pgid, home, shell = str(uid), gid if gid is not None else uid, "/", "/bin/sh"
    if gid is None:
        gid = pgid
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = str(gid)
    try:
        groups = os.getgrouplist(user, gid) if user != str(uid) else [gid]
    except OSError:
        groups = [gid]
    return {"uid": uid, "gid": gid, "user": user, "group": group, "groups": groups,
            "home": home, "shell": shell}


class ClusterState:
    def __init__(self, cfg, store):
        self.cfg = cfg
        self.store = store
        self.jobs: dict[int, Job] = {}
        order = cfg.node_order()
        node_parts: dict[str, list[str]] = {n: [] for n in cfg.nodes}
        for p in cfg.partitions.values():
            for n in p.nodes:
                node_parts[n].append(p.name)
        self.nodes: dict[str, NodeRuntime] = {
            name: NodeRuntime(nc, order[name], node_parts[name]) for name, nc in cfg.nodes.items()}
        from muster.controller.accounts import Accounts
        from muster.controller.reservations import Reservations
        # accounts/associations/QOS (sacctmgr); ``in`` works as the old {"root", "default"} set
        self.accounts = Accounts(store, cfg, self)
        self.qos_names = self.accounts.qos  # name -> record; ``in`` checks a QOS name
        self.reservations = Reservations(store, cfg, self)
        from muster.controller.mail import Mailer
        self.mailer = Mailer(cfg, self)  # --mail-type notifications (save() feeds it)
        self.ctl = None  # the Controller sets itself here (preemption kills/requeues through it)
        self.next_id = cfg.first_job_id
        self.view_cache: dict = {}  # job id -> scheduling view (muster.controller.scheduling)
        # jobs whose view was dropped since a pass last warmed the cache (PassRunner.prepare:
        # a forked pass builds its snapshot in the child, from the views made here)
        self.unviewed: set[int] = set()
        # job id -> squeue --json record (muster.controller.jobjson)
        self.records = RecordCache(cfg.cluster_name)
        # jobs changed while a scheduling pass is in flight (muster.controller.passes): its
        # plan's decisions about them are stale; None when no pass is in flight
        self.pass_changes: set[int] | None = None
        self.boot_time = now()
        self._load()

    # ---- start-up ------------------------------------------------------------------------
    def _load(self) -> None:
        self.next_id = max(self.next_id, int(self.store.get_meta("next_job_id", "0") or 0),
                           self.store.max_job_id() + 1)
        for name, rec in self.store.load_nodes().items():
            if name in self.nodes:
                self.nodes[name].restore_admin(rec)
        for rec in self.store.load_jobs(active_since=now() - self.cfg.min_job_age):
            job = Job.from_store(rec)
            self.jobs[job.job_id] = job
            if job.holds_resources:
                self._allocate(job)
        acc = self.store.get_meta("accounts")
        if acc:
            self.accounts.update(acc.split(","))
        self.accounts.track_loaded(self.jobs.values())
        self.mailer.track_loaded(self.jobs.values())

    # ---- ids & persistence ---------------------------------------------------------------
    def take_job_id(self) -> int:
        jid = self.next_id
        self.next_id += 1
        self.store.set_meta("next_job_id", str(self.next_id))
        return jid

    def drop_views(self) -> None:
        """Forget every job's scheduling view (what they read changed: the configuration,
        accounts, QOS, associations); the next passes make them again."""
        self.view_cache.clear()
        self.unviewed.update(self.jobs)

    def save(self, job: Job, *, keep_view: bool = False) -> None:
        """Persist a changed job. Every change of a job goes through here, so this is also
        where derived caches of it are dropped, and where --mail-type events are noticed
        (before the store, so that what was mailed is stored with the change). It is also
        the usage event: a run that stopped is charged to fair-share here, in the change's
        transaction (Accounts.job_saved), so reading usage never has to write.

        ``keep_view``: only the priority the core computed changed
        (muster.controller.scheduling._store_priorities). The job's scheduling view reads
        it only when given or set by an operator, which a pass never writes, so the view is
        kept, and with it the core's per-view memo of the request: on a queue of 10,000
        whose priorities move every pass, dropping them rebuilt every view."""
        if not keep_view:
            self.view_cache.pop(job.job_id, None)
            self.unviewed.add(job.job_id)
        self.records.drop(job.job_id)
        if self.pass_changes is not None:
            self.pass_changes.add(job.job_id)
        if job.mail_type:
            self.mailer.on_save(job)
        self.store.put_job(job.to_store())
        if self.accounts.pending_extra:
            self.accounts.on_save(job)  # e.g. --reservation, stored with the new job
        self.accounts.job_saved(job, now())

    def shown(self, job: Job) -> None:
        """Only what a pass writes back for people to read changed: the reason and its text,
        the expected start and planned nodes, the time of the evaluation
        (muster.controller.scheduling.apply_reasons). Listings are refreshed; the view is
        kept (it reads none of these) and nothing is written: these fields are derived, the
        next pass derives them again (a restarted or new leader's first pass too, right
        after loading), and they reach the store with the job's next change, whose record is
        the whole job as it is in memory. Writing them on every pass cost ~22 us a job: a
        fifth of a second per pass on a queue of 10,000, on the loop."""
        self.records.drop(job.job_id)
        if self.pass_changes is not None:
            self.pass_changes.add(job.job_id)

    def event(self, job: Job | None, event: str, detail: str = "", node: str | None = None) -> None:
        self.store.add_event(now(), event, detail, job.job_id if job else None, node)

    # ---- resources -----------------------------------------------------------------------
    def _allocate(self, job: Job) -> None:
        for a in job.alloc:
            n = self.nodes.get(a.node)
            if n is not None:
                n.allocate(job.job_id, a.cpus, a.mem, a.gpus)
                if job.completing:
                    n.completing_jobs.add(job.job_id)

    def allocate(self, job: Job) -> None:
        self._allocate(job)

    def release(self, job: Job) -> None:
        freed = []
        for a in job.alloc:
            n = self.nodes.get(a.node)
            if n is not None:
                if job.job_id in n.jobs:
                    freed.append(a)
                n.release(job.job_id, a.cpus, a.mem, a.gpus)
        prologs = getattr(self.ctl, "prologs", None)
        if freed and prologs is not None:
            prologs.job_released(job, freed)  # node Epilogs, EpilogSlurmctld

    def mark_completing(self, job: Job) -> None:
        for a in job.alloc:
            n = self.nodes.get(a.node)
            if n is not None and job.job_id in n.jobs:
                n.completing_jobs.add(job.job_id)

    # ---- lookups -------------------------------------------------------------------------
    def find(self, job_id: int) -> Job | None:
        job = self.jobs.get(job_id)
        if job is None:
            rec = self.store.get_job(job_id)
            if rec is not None:
                job = Job.from_store(rec)
        return job

    def array_members(self, array_id: int) -> list[Job]:
        return [j for j in self.jobs.values() if j.array_job_id == array_id]

    def dep_lookup(self, job_id: int, task: int | None) -> list:
        """The job(s) a dependency term refers to: an array id means all its tasks."""
        if task is not None:
            for j in self.jobs.values():
                if j.array_job_id == job_id and j.array_task_id == task:
                    return [j]
            master = self.jobs.get(job_id)
            if master is not None and master.pending_tasks and task in master.pending_tasks:
                return [master]
            return [Job.from_store(r) for r in self.store.query_jobs()
                    if r.get("array_job_id") == job_id and r.get("array_task_id") == task]
        members = self.array_members(job_id)
        if members:
            return members
        job = self.find(job_id)
        return [job] if job is not None else []

    def dependency_state(self, job: Job, t: int) -> tuple[str, str | None]:
        """(SATISFIED, WAITING or FAILED; the display of the unmet terms) of a job's
        dependency at ``t``. A pure read: the job's fields are changed only by
        :meth:`resolve_dependencies`."""
        if not job.dep_terms:
            return depmod.SATISFIED, job.dependency

        def singleton_clear() -> bool:
            for other in self.jobs.values():
                if other is job or other.user != job.user or other.name != job.name:
                    continue
                if other.state == RUNNING or other.completing:
                    return False
                if other.state == PENDING and other.job_id < job.job_id and not other.hold:
                    return False
            return True

        return depmod.evaluate(job.dep_terms, job.dep_any, self.dep_lookup, singleton_clear, t)

    def evaluate_dependency(self, job: Job, t: int) -> str:
        """SATISFIED, WAITING or FAILED (a pure read, see :meth:`dependency_state`)."""
        return self.dependency_state(job, t)[0]

    def dependency_changes(self, t: int) -> list[tuple[Job, str, str | None]]:
        """(job, state, display) of the pending jobs whose stored dependency no longer shows
        what the referenced jobs (or the clock, for ``after:+N`` and ``singleton``) say. A
        pure read; :meth:`resolve_dependencies` applies it."""
        out = []
        for job in self.jobs.values():
            if job.state != PENDING or not job.dep_terms or job.hold or (
                    job.begin_time is not None and job.begin_time > t):
                continue  # as blocked_reason: a held or not yet begun job waits for that
            st, shown = self.dependency_state(job, t)
            if shown != job.dependency or st == depmod.SATISFIED:
                out.append((job, st, shown))
        return out

    def resolve_dependencies(self, changes: list[tuple[Job, str, str | None]]) -> None:
        """The dependency event, run by the controller's tick before each scheduling pass
        (never by a snapshot), in the caller's transaction: each job of ``changes``
        (:meth:`dependency_changes`) stores its new display; a met dependency is dropped
        (``dep_terms`` None, Slurm shows ``(null)``)."""
        for job, st, shown in changes:
            job.dependency = shown
            if st == depmod.SATISFIED:
                job.dep_terms = None
            self.save(job)

    def node_list_of(self, names) -> str:
        order = self.cfg.node_order()
        return compress(sorted(set(names), key=order.__getitem__))

    def alloc_tres(self, alloc: Sequence[NodeAlloc]) -> str:
        cpus = sum(a.cpus for a in alloc)
        mem = sum(a.mem for a in alloc)
        gpus = sum(len(a.gpus) for a in alloc)
        return tres_string(cpus, mem, len(alloc), cpus, {"gres/gpu": gpus} if gpus else {})

    def purge_old(self, t: int) -> int:
        """Forget (in memory only) jobs that finished more than MinJobAge ago."""
        cutoff = t - self.cfg.min_job_age
        old = [jid for jid, j in self.jobs.items()
               if j.terminal and not j.completing and (j.end_time or 0) < cutoff]
        for jid in old:
            del self.jobs[jid]
            self.view_cache.pop(jid, None)
            self.records.drop(jid)
        return len(old)
