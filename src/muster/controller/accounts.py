"""Accounts, associations, QOS and fair-share usage: the controller's accounting database.

``Accounts`` owns them in memory (loaded from the store at start) and commits every change
before the caller replies (sacctmgr through :mod:`muster.controller.acct_ops`). It is what
``ClusterState.accounts`` holds; ``build_job`` (submit.py) asks it to resolve and check a
job's account, QOS, partition access and reservation, and the scheduling shell asks it for
the core's views (QosView, AssocView, fair-share factors).

Backwards compatibility: until an administrator adds an account, the known accounts are
``root`` (root's default) and ``default`` (everyone else's) and any user may submit, as
before sacctmgr existed; ``-A`` may then name any account (recorded as given), as Slurm
accepts one when ``AccountingStorageEnforce`` lacks ``associations`` — with it, only those
two. Once accounts exist and ``AccountingStorageEnforce`` contains
``associations`` (or ``limits``/``qos``/``safe``, which imply it), a user needs an
association to submit; ``-A`` defaults to the user's default account.

Usage is an event, never a side effect of a read: ``ClusterState.save`` tells
:meth:`job_saved` of every change of a job, and a job that stops holding its allocation is
charged then, in the transaction of that change, ``billing × seconds`` (TRESBillingWeights of
its partition, QOS UsageFactor) to its (account, user) in the pure
:class:`~muster.core.ledger.UsageLedger`. Reading usage (snapshots, sprio, sshare) decays the
ledger's entries to ``now`` without writing. The simulator, which has no ClusterState, calls
:meth:`job_saved` at each arrival, start and end of its jobs, so both charge alike.
"""

from __future__ import annotations

import grp

from muster.common.errors import RequestError
from muster.core import fairshare as fsmod
from muster.core.ledger import Entry, UsageLedger
from muster.core.snapshot import AssocView, QosView

LIMIT_TRES = ("grp_tres", "max_tres_per_job", "max_tres_per_user")
LIMIT_INT = ("grp_jobs", "max_jobs", "max_submit_jobs", "max_jobs_per_user",
             "max_submit_jobs_per_user", "max_wall", "priority", "grace_time",
             "preempt_exempt_time")

MSG_RESV_INVALID = "Requested reservation is invalid"
MSG_RESV_ACCESS = "Access denied to requested reservation"


def parse_tres(text: str) -> dict[str, int]:
    """``cpu=64,mem=256G,node=4,gres/gpu=8`` → counts (mem in MB). ``-1`` removes a key
    (kept as -1 here; the caller drops it)."""
    out: dict[str, int] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        k, sep, v = item.partition("=")
        if not sep:
            raise ValueError(item)
        k = k.strip().lower()
        if k == "gpu":
            k = "gres/gpu"
        v = v.strip()
        if k == "mem":
            mult = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
            unit = v[-1:].upper()
            if unit in mult:
                n = int(float(v[:-1]) * mult[unit])
            else:
                n = int(v)
        else:
            n = int(v)
        if n < -1:
            raise ValueError(item)
        out[k] = n
    return out


def tres_str(d: dict | None) -> str:
    if not d:
        return ""
    order = {"cpu": 0, "mem": 1, "energy": 2, "node": 3, "billing": 4}

    def val(k, v):
        if k == "mem":
            return f"{v // 1024}G" if v and v % 1024 == 0 else f"{v}M"
        return str(v)
    items = sorted(d.items(), key=lambda kv: (order.get(kv[0], 9), kv[0]))
    return ",".join(f"{k}={val(k, v)}" for k, v in items)


class Accounts:
    """See module doc. ``state`` is the ClusterState (for job counts at submit)."""

    def __init__(self, store, cfg, state=None):
        self.store = store
        self.cfg = cfg
        self.state = state
        self.accounts: dict[str, dict] = {}
        self.assocs: dict[tuple[str, str, str], dict] = {}  # (user, account, partition)
        self.qos: dict[str, dict] = {}
        self.ledger = UsageLedger(self.half_life)  # (account, user) -> folded usage entry
        self.extra: dict[int, dict] = {}  # job id -> {"resv": name, "calc": priority}
        self.pending_extra: dict[int, tuple] = {}  # id(Job) -> (job, extra) until it has an id
        self.legacy = {"root", "default"}
        self.tracked: dict[int, tuple] = {}  # job id -> (run, start, tres, part, acct, user, qos)
        # (account, user) of every job seen by job_saved: without sacctmgr associations these
        # are the implicit tree's users, whether or not they have usage yet
        self.known: set[tuple[str, str]] = set()
        self.generation = 0
        self.configure(cfg)
        self._load()

    def configure(self, cfg) -> None:
        """What is derived from slurm.conf (AccountingStorageEnforce, the decay half-life):
        at start and on ``scontrol reconfigure`` (muster.controller.reconfig)."""
        self.cfg = cfg
        enf = {e.lower() for e in getattr(cfg, "accounting_storage_enforce", ()) or ()}
        if enf & {"limits", "qos", "safe"}:
            enf.add("associations")
        if "safe" in enf:
            enf.add("limits")
        self.enforce = frozenset(enf)
        self.ledger.half_life = self.half_life

    # ---- loading -----------------------------------------------------------------------
    def _load(self) -> None:
        st = self.store
        for rec in st.load_accounts():
            self.accounts[rec["name"]] = rec
        for rec in st.load_assocs():
            self.assocs[(rec["user"], rec["account"], rec.get("partition") or "")] = rec
        for rec in st.load_qos():
            self.qos[rec["name"]] = rec
        self.ledger = UsageLedger(self.half_life, {
            k: Entry(int(t), float(u)) for k, (u, t) in st.load_usage().items()})
        self.extra = st.load_job_extra()
        with st.transaction():
            if "root" not in self.accounts:
                self.put_account({"name": "root", "parent": None, "shares": 1,
                                  "description": "default root account", "organization": "root",
                                  "qos": ["normal"]})
            if not any(a[1] == "root" and a[0] == "root" for a in self.assocs):
                self.put_assoc({"user": "root", "account": "root", "partition": "", "shares": 1,
                                "is_default": True})
            if "normal" not in self.qos:
                self.put_qos({"name": "normal", "description": "Normal QOS default",
                              "priority": 0, "flags": [], "preempt": [], "preempt_mode": None,
                              "grace_time": 0, "usage_factor": 1.0})

    def track_loaded(self, jobs) -> None:
        """Jobs running when the controller starts are charged when they end; unfinished
        jobs' (account, user) are known to the implicit tree from the start."""
        for j in jobs:
            self._track(j)
            if j.state in ("PENDING", "RUNNING"):
                self.known.add((j.account, j.user))

    # ---- persistence helpers -------------------------------------------------------------
    def put_account(self, rec: dict) -> None:
        self.accounts[rec["name"]] = rec
        self.store.put_account(rec)
        self.generation += 1

    def del_account(self, name: str) -> None:
        self.accounts.pop(name, None)
        self.store.delete_account(name)
        self.generation += 1

    def put_assoc(self, rec: dict) -> None:
        rec["partition"] = rec.get("partition") or ""
        self.assocs[(rec["user"], rec["account"], rec["partition"])] = rec
        self.store.put_assoc(rec)
        self.generation += 1

    def del_assoc(self, key: tuple[str, str, str]) -> None:
        self.assocs.pop(key, None)
        self.store.delete_assoc(*key)
        self.generation += 1

    def put_qos(self, rec: dict) -> None:
        self.qos[rec["name"]] = rec
        self.store.put_qos(rec)
        self.generation += 1

    def del_qos(self, name: str) -> None:
        self.qos.pop(name, None)
        self.store.delete_qos(name)
        self.generation += 1

    # ---- set-like compatibility (ClusterState.accounts used to be a set) ------------------
    @property
    def configured(self) -> bool:
        """True once an administrator added an account besides root."""
        return any(n != "root" for n in self.accounts)

    def __contains__(self, name) -> bool:
        if name in self.accounts:
            return True
        return not self.configured and name in self.legacy

    def update(self, names) -> None:  # legacy meta "accounts"
        self.legacy.update(n for n in names if n)

    def __iter__(self):
        return iter(sorted(set(self.accounts) | (self.legacy if not self.configured else set())))

    # ---- associations ------------------------------------------------------------------
    def user_assocs(self, user: str) -> list[dict]:
        return [a for (u, _, _), a in sorted(self.assocs.items()) if u == user]

    def default_account(self, user: str) -> str | None:
        mine = self.user_assocs(user)
        for a in mine:
            if a.get("is_default"):
                return a["account"]
        return mine[0]["account"] if mine else None

    def assoc_for(self, user: str, account: str, partition: str) -> dict | None:
        return self.assocs.get((user, account, partition)) or self.assocs.get((user, account, ""))

    def account_chain(self, account: str) -> list[dict]:
        out: list[dict] = []
        seen: set[str] = set()
        acct: str | None = account
        while acct and acct not in seen and acct in self.accounts:
            seen.add(acct)
            rec = self.accounts[acct]
            out.append(rec)
            acct = rec.get("parent") or ("root" if acct != "root" else None)
        return out

    def allowed_qos(self, user: str, account: str, partition: str) -> list[str]:
        a = self.assoc_for(user, account, partition)
        if a is not None and a.get("qos"):
            return list(a["qos"])
        for rec in self.account_chain(account):
            if rec.get("qos"):
                return list(rec["qos"])
        return ["normal"]

    def default_qos(self, user: str, account: str, partition: str) -> str:
        a = self.assoc_for(user, account, partition)
        if a is not None and a.get("default_qos"):
            return a["default_qos"]
        for rec in self.account_chain(account):
            if rec.get("default_qos"):
                return rec["default_qos"]
        allowed = self.allowed_qos(user, account, partition)
        return "normal" if "normal" in allowed or not allowed else allowed[0]

    # ---- submit ------------------------------------------------------------------------
    def resolve(self, ident: dict, account: str | None, qos: str | None,
                parts: list[str]) -> tuple[str, str]:
        """The job's (account, qos), or RequestError with Slurm's message."""
        user, uid = ident["user"], ident["uid"]
        enforce_assoc = "associations" in self.enforce and self.configured
        if not self.configured:
            account = account or ("root" if uid == 0 else "default")
            # without associations to enforce, Slurm takes any account name as given
            if account not in self and "associations" in self.enforce:
                raise RequestError(None, "invalid_account")
        else:
            if not account:
                account = self.default_account(user) or ("root" if uid == 0 else "default")
            if enforce_assoc:
                for p in parts:
                    if self.assoc_for(user, account, p) is None:
                        raise RequestError(None, "invalid_account")
        if qos:
            if qos not in self.qos:
                raise RequestError(None, "invalid_qos")
            if self.configured and "qos" in self.enforce:
                for p in parts:
                    if qos not in self.allowed_qos(user, account, p):
                        raise RequestError(None, "invalid_qos")
        else:
            qos = self.default_qos(user, account, parts[0]) if self.configured else "normal"
            if qos not in self.qos:
                qos = "normal"
        return account, qos

    def submit_check(self, job, ident: dict, parts: list[str], cluster) -> None:
        """Partition access (AllowAccounts/AllowGroups/AllowQos, Deny*) and the submit-time
        limits of core.limits.submit_check (EnforcePartLimits, MaxSubmitJobs*, DenyOnLimit)."""
        from muster.core.limits import MSG_GROUP, job_tres, submit_check
        from muster.core.placement import request_of
        from muster.controller.scheduling import job_view
        from muster.core.confview import partition_views, sched_config
        errors: list[RequestError | None] = []  # one per partition: why refused, or None
        group_names: set[str] | None = None
        for p in parts:
            pc = cluster.partitions[p]
            if pc.allow_groups and "ALL" not in pc.allow_groups and ident.get("uid") != 0:
                if group_names is None:
                    group_names = set()
                    for g in ident.get("groups") or [ident.get("gid")]:
                        try:
                            group_names.add(grp.getgrgid(g).gr_name)
                        except (KeyError, TypeError):
                            pass
                    if ident.get("group") is not None:
                        group_names.add(ident["group"])
                if not group_names & set(pc.allow_groups):
                    errors.append(RequestError(MSG_GROUP, "invalid_account"))
                    continue
            if pc.allow_accounts and "ALL" not in pc.allow_accounts and job.account not in pc.allow_accounts \
                    or (pc.deny_accounts and job.account in pc.deny_accounts):
                errors.append(RequestError(None, "invalid_account"))
                continue
            if pc.allow_qos and "ALL" not in pc.allow_qos and job.qos not in pc.allow_qos \
                    or (pc.deny_qos and job.qos in pc.deny_qos):
                errors.append(RequestError(None, "invalid_qos"))
                continue
            errors.append(None)
        if errors and errors[0] is not None and all(e is not None for e in errors):
            raise errors[0]
        epl = (getattr(cluster, "enforce_part_limits", "NO") or "NO").upper()
        if epl == "NO" and "limits" not in self.enforce:
            return
        scfg = sched_config(cluster)
        view = job_view(job)
        rq = request_of(view, scfg)
        tres = job_tres(view, rq)
        pviews = partition_views(cluster)
        qv = self.qos_views().get(job.qos)
        chain = self.assoc_chain_views(job.account, job.user, parts[0])
        counts_q = 0
        counts_a: dict = {}
        needs_count = "limits" in self.enforce and (
            (qv is not None and qv.max_submit_jobs_per_user) or any(
                a.max_submit_jobs is not None for a in chain))
        if needs_count and self.state is not None:
            keys = [a.key for a in chain]
            for j in self.state.jobs.values():
                if j.state not in ("PENDING", "RUNNING") or (job.job_id and j.job_id == job.job_id):
                    continue  # an updated job (re-validated with its id) is not counted twice
                n = len(j.pending_tasks) if j.pending_tasks else 1
                if j.user == job.user and j.qos == job.qos:
                    counts_q += n
                for k in keys:
                    if (k[1] is None and self._under(j.account, k[0])) or (
                            k[1] is not None and j.user == k[1] and j.account == k[0]):
                        counts_a[k] = counts_a.get(k, 0) + n
        msgs = []
        for p in parts:
            msg = submit_check(
                view, pviews[p], tres=tres, qos=qv, assocs=chain, user_jobs_in_qos=counts_q,
                assoc_jobs=counts_a, enforce_part_limits=epl,
                enforce=self.enforce if self.configured else self.enforce - {"associations"},
                new_jobs=len(job.pending_tasks) if job.pending_tasks else 1)
            msgs.append(msg)
            if msg is None and epl != "ALL":
                break
        bad = [m for m in msgs if m is not None]
        if bad and (epl == "ALL" or len(bad) == len(msgs)):
            raise RequestError(bad[0], _code_of(bad[0]))

    def _under(self, account: str, ancestor: str) -> bool:
        return any(r["name"] == ancestor for r in self.account_chain(account))

    def check_reservation(self, name: str | None, ident: dict, account: str, resv) -> None:
        if not name:
            return
        r = resv.get(name) if resv is not None else None
        if r is None:
            raise RequestError(MSG_RESV_INVALID, "invalid_request")
        if not resv.admits(r, ident["user"], account) and ident["uid"] != 0:
            raise RequestError(MSG_RESV_ACCESS, "access_denied")

    def remember(self, job, **extra) -> None:
        """Facts for a job that has no id yet: saved with the job (ClusterState.save)."""
        self.pending_extra[id(job)] = (job, extra)

    def on_save(self, job) -> None:
        got = self.pending_extra.pop(id(job), None)
        if got is not None and got[0] is job and job.job_id:
            rec = {**self.extra.get(job.job_id, {}), **got[1]}
            self.extra[job.job_id] = rec
            self.store.put_job_extra(job.job_id, rec)

    def set_extra(self, job_id: int, **kw) -> None:
        rec = {**self.extra.get(job_id, {}), **kw}
        self.extra[job_id] = rec
        self.store.put_job_extra(job_id, rec)

    def reservation_of(self, job) -> str | None:
        rec = self.extra.get(job.job_id)
        if rec is None and job.array_job_id is not None:
            rec = self.extra.get(job.array_job_id)
        return rec.get("resv") if rec else None

    # ---- views for the core ------------------------------------------------------------
    def qos_views(self) -> dict[str, QosView]:
        out = {}
        for name, q in self.qos.items():
            out[name] = QosView(
                name=name, priority=int(q.get("priority") or 0), max_wall=q.get("max_wall"),
                max_tres_per_user=dict(q.get("max_tres_per_user") or {}),
                max_tres_per_job=dict(q.get("max_tres_per_job") or {}),
                max_jobs_per_user=q.get("max_jobs_per_user"),
                max_submit_jobs_per_user=q.get("max_submit_jobs_per_user"),
                grp_tres=dict(q.get("grp_tres") or {}), grp_jobs=q.get("grp_jobs"),
                flags=frozenset(q.get("flags") or ()), preempt=frozenset(q.get("preempt") or ()),
                preempt_mode=q.get("preempt_mode"), grace_time=int(q.get("grace_time") or 0),
                preempt_exempt_time=q.get("preempt_exempt_time"),
                usage_factor=float(q["usage_factor"] if q.get("usage_factor") is not None else 1.0))
        return out

    def usage_at(self, key: tuple[str, str], t: int) -> float:
        """Decayed usage at ``t``; a pure read of the ledger."""
        return self.ledger.usage(key, t)

    @property
    def half_life(self) -> int:
        return int(getattr(self.cfg, "priority_decay_half_life", 7 * 86400) or 0)

    def assoc_views(self, t: int) -> list[AssocView]:
        out: list[AssocView] = []
        for name, a in self.accounts.items():
            out.append(AssocView(
                account=name, user=None, parent=a.get("parent") if name != "root" else None,
                shares=int(a.get("shares", 1)), raw_usage=0.0, priority=int(a.get("priority") or 0),
                grp_tres=dict(a.get("grp_tres") or {}), grp_jobs=a.get("grp_jobs"),
                max_jobs=a.get("max_jobs"), max_submit_jobs=a.get("max_submit_jobs"),
                max_tres_per_job=dict(a.get("max_tres_per_job") or {})))
        seen: set[tuple[str, str]] = set()
        for (user, account, _part), a in sorted(self.assocs.items()):
            if (account, user) in seen or account not in self.accounts:
                continue
            seen.add((account, user))
            out.append(AssocView(
                account=account, user=user, parent=account, shares=int(a.get("shares", 1)),
                raw_usage=self.usage_at((account, user), t), priority=int(a.get("priority") or 0),
                grp_tres=dict(a.get("grp_tres") or {}), grp_jobs=a.get("grp_jobs"),
                max_jobs=a.get("max_jobs"), max_submit_jobs=a.get("max_submit_jobs"),
                max_tres_per_job=dict(a.get("max_tres_per_job") or {})))
        if not self.configured:  # the implicit "default" account and its users
            out.append(AssocView(account="default", user=None, parent=None, shares=1))
            for (account, user) in sorted(set(self.ledger) | self.known):
                if account == "default" and (account, user) not in seen:
                    seen.add((account, user))
                    out.append(AssocView(account="default", user=user, parent="default",
                                         shares=1, raw_usage=self.usage_at((account, user), t)))
        return out

    def assoc_chain_views(self, account: str, user: str, partition: str) -> list[AssocView]:
        if not self.configured:
            return []
        a = self.assoc_for(user, account, partition)
        out = []
        if a is not None:
            out.append(AssocView(account=account, user=user, parent=account,
                                 shares=int(a.get("shares", 1)),
                                 max_jobs=a.get("max_jobs"), max_submit_jobs=a.get("max_submit_jobs"),
                                 max_tres_per_job=dict(a.get("max_tres_per_job") or {}),
                                 grp_tres=dict(a.get("grp_tres") or {}), grp_jobs=a.get("grp_jobs")))
        for rec in self.account_chain(account):
            out.append(AssocView(account=rec["name"], parent=rec.get("parent"),
                                 max_jobs=rec.get("max_jobs"), max_submit_jobs=rec.get("max_submit_jobs"),
                                 max_tres_per_job=dict(rec.get("max_tres_per_job") or {}),
                                 grp_tres=dict(rec.get("grp_tres") or {}), grp_jobs=rec.get("grp_jobs")))
        return out

    def fairshare(self, t: int, assocs: list[AssocView] | None = None) -> dict[tuple[str, str], float]:
        assocs = assocs if assocs is not None else self.assoc_views(t)
        flags = {f.upper() for f in getattr(self.cfg, "priority_flags", ()) or ()}
        if "NO_FAIR_TREE" in flags:
            return fsmod.classic(assocs, float(getattr(self.cfg, "fair_share_dampening_factor", 1) or 1))
        return fsmod.fair_tree(assocs)

    # ---- usage -------------------------------------------------------------------------
    def _billing_weights(self, partition: str) -> dict[str, float]:
        pc = self.cfg.partitions.get(partition)
        text = getattr(pc, "tres_billing_weights", None) if pc is not None else None
        out: dict[str, float] = {}
        for item in (text or "").split(","):
            k, sep, v = item.partition("=")
            if not sep:
                continue
            k = k.strip().lower()
            if k == "gres/gpu" or k.startswith("gres/gpu:"):
                k = "gres/gpu"
            try:
                unit = v.strip()[-1:].upper()
                num = float(v.strip()[:-1]) if unit in "KMGT" and unit else float(v)
                if k == "mem" and unit in ("K", "M", "G", "T") and unit:
                    num = num / {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[unit]
                out[k] = num
            except ValueError:
                continue
        return out

    def _track(self, j) -> None:
        if j.holds_resources and j.alloc and not j.completing and j.start_time is not None:
            if j.job_id not in self.tracked:
                cpus = sum(a.cpus for a in j.alloc)
                mem = sum(a.mem for a in j.alloc)
                gpus = sum(len(a.gpus) for a in j.alloc)
                tres = {"cpu": cpus, "mem": mem, "node": len(j.alloc), "gres/gpu": gpus}
                self.tracked[j.job_id] = (j.restarts, j.start_time, tres, j.partition,
                                          j.account, j.user, j.qos)

    @staticmethod
    def _run_end(j, rec: tuple, t: int) -> int | None:
        """When the tracked run ``rec`` of ``j`` stopped (None: still running): a requeued
        job's run by ``t``; otherwise at its end time, if set."""
        if j.restarts == rec[0] and not j.completing and j.state == "RUNNING":
            return None
        if j.restarts == rec[0] and j.end_time:
            return min(t, j.end_time)
        return t

    def job_saved(self, j, t: int) -> None:
        """The usage event: called with every change of a job (``ClusterState.save``, in
        the change's transaction). A tracked run that stopped is charged now; a job that
        started running is tracked; its (account, user) joins the implicit tree."""
        rec = self.tracked.get(j.job_id)
        if rec is not None:
            end = self._run_end(j, rec, t)
            if end is not None:
                del self.tracked[j.job_id]
                self.charge(rec, max(0, end - rec[1]), t)
        if j.state == "RUNNING" and j.job_id not in self.tracked:
            self._track(j)
        if j.state in ("PENDING", "RUNNING"):
            self.known.add((j.account, j.user))

    def charge(self, rec: tuple, seconds: int, t: int) -> None:
        """Charge a finished run at ``t`` (ledger entry, persisted in the caller's
        transaction)."""
        _run, _start, tres, part, account, user, qos = rec
        q = self.qos.get(qos) or {}
        uf = q.get("usage_factor")
        flags = {f.upper() for f in getattr(self.cfg, "priority_flags", ()) or ()}
        amount = fsmod.charge(tres, seconds, self._billing_weights(part) or None,
                              float(uf) if uf is not None else 1.0, "MAX_TRES" in flags)
        entry = self.ledger.charge((account, user), amount, t)
        self.store.put_usage(account, user, entry.raw, entry.charged_at)

def _code_of(msg: str) -> str:
    from muster.common.errors import CODES
    for code, (text, _) in CODES.items():
        if text == msg:
            return code
    return "invalid_request"
