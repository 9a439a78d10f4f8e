"""Controller operations for the REST API, the dashboard and the metrics endpoint.

Registered through muster.controller.ops (the table of operation modules). Everything here
runs on the controller's loop, so it stays cheap: compact views built straight from the
in-memory jobs and nodes, bounded reads, no third-party imports.

Operations:

``token``       mint an HS256 JWT (``scontrol token``); key ``<StateSaveLocation>/jwt.key``
``job_output``  tail of a job's StdOut/StdErr file, read as the job's user, owner/operators only
``events``      the audit trail (store table ``events``) filtered by job, node, time; other
                users' jobs and tokens only for operators
``dash``        compact column-wise view of nodes (with per-GPU owners) and jobs, for the dashboard
``usage``       GPU-/CPU-hours by account over time buckets, from accounting
``metrics``     aggregate counts for Prometheus (jobs, reasons, nodes, resources, RPCs, ...);
                per-user job counts only for operators
(``diag``, sdiag's statistics, is muster.controller.diag's)

Counters (RPC counts/latency, store commit latency) are module-level: one controller per
process. ``observe_rpc`` is called by ``Controller.dispatch`` and ``observe_commit`` by the
store (see docs/api.md for the two hook lines).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import pwd
import secrets
import stat
import sys

from muster.common.errors import AccessDenied, InvalidJobId, RequestError
from muster.controller.opspec import _int, op
from muster.controller.state import identity, now
from muster.model.job import PENDING, RUNNING

JWT_KEY_NAME = "jwt.key"
DEFAULT_LIFESPAN = 1800  # scontrol token's default, as Slurm
MAX_LIFESPAN = 365 * 86400
OUTPUT_DEFAULT = 64 * 1024
OUTPUT_MAX = 1024 * 1024

# Prometheus-style histogram buckets (seconds) for RPC and commit latency
BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
           0.5, 1.0, 2.5)


class _Hist:
    __slots__ = ("count", "total", "buckets")

    def __init__(self):
        self.count = 0
        self.total = 0.0
        self.buckets = [0] * len(BUCKETS)  # non-cumulative; cumulated when exported

    def observe(self, v: float) -> None:
        self.count += 1
        self.total += v
        for i, b in enumerate(BUCKETS):
            if v <= b:
                self.buckets[i] += 1
                break

    def export(self) -> dict:
        cum, acc = [], 0
        for n in self.buckets:
            acc += n
            cum.append(acc)
        return {"count": self.count, "sum": self.total, "buckets": cum}


RPC: dict[str, _Hist] = {}
COMMIT = _Hist()
_COUNTED_EVENTS = {"requeued": "requeues", "node_not_responding": "node_failures",
                   "node_down": "node_failures", "node_fail": "node_failures"}
_EVENT_TOTALS: dict[str, int] = {"requeues": 0, "node_failures": 0}
_EVENT_STATE = {"last_id": 0}
_HOOKED = {"store": False}


def observe_rpc(ctl, op_name, seconds: float) -> None:
    """Count one RPC and its handling time (called by Controller.dispatch)."""
    name = op_name if isinstance(op_name, str) and op_name in _known_ops() else "unknown"
    h = RPC.get(name)
    if h is None:
        h = RPC[name] = _Hist()
    h.observe(seconds)
    if not _HOOKED["store"]:
        _hook_store(ctl)


def observe_commit(seconds: float) -> None:
    COMMIT.observe(seconds)


def _hook_store(ctl) -> None:
    """Attach observe_commit to the store if it offers an ``on_commit`` hook."""
    _HOOKED["store"] = True
    store = getattr(getattr(ctl, "state", None), "store", None)
    if store is not None and hasattr(store, "on_commit"):
        store.on_commit = observe_commit


def _known_ops():
    from muster.controller.opspec import OPS
    return OPS


# ---- JWT (HS256, standard library) ---------------------------------------------------------

def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt_key_path(cfg) -> str:
    return os.path.join(cfg.state_save_location, JWT_KEY_NAME)


def load_or_create_jwt_key(path: str) -> bytes:
    """The JWT signing key: 32 random bytes, mode 0600, created on first use."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(32))
    return read_jwt_key(path)


def read_jwt_key(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077:
            raise RequestError(f"{path}: JWT key must be a regular file of mode 0600",
                               "internal")
        key = os.read(fd, 4096)
    finally:
        os.close(fd)
    if len(key) < 16:
        raise RequestError(f"{path}: JWT key too short", "internal")
    return key


def sign_hs256(claims: dict, key: bytes) -> str:
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    body = _b64(json.dumps(claims, separators=(",", ":")).encode())
    mac = hmac.new(key, f"{header}.{body}".encode(), hashlib.sha256).digest()
    return f"{header}.{body}.{_b64(mac)}"


@op("token")
def token(ctl, msg, uid, gid):
    """``scontrol token [lifespan=S] [username=U]``: a JWT for the caller (or, for root and
    operators, for any user). Claims as Slurm's: ``sun`` (user name), ``iat``, ``exp``."""
    lifespan = msg.get("lifespan")
    if lifespan is None:
        lifespan = DEFAULT_LIFESPAN
    if isinstance(lifespan, bool) or not isinstance(lifespan, int) or not 0 < lifespan <= MAX_LIFESPAN:
        raise RequestError("Invalid lifespan: must be 1 to 31536000 seconds", "invalid_request")
    me = identity(uid)["user"]
    user = msg.get("username") or me
    if not isinstance(user, str) or len(user) > 256:
        raise RequestError(None, "invalid_user")
    if user != me:
        if not ctl.is_admin(uid):
            raise AccessDenied("Access/permission denied: only root or an operator may "
                               "request a token for another user")
        try:
            pwd.getpwnam(user)
        except (KeyError, ValueError):  # ValueError: a NUL in the name
            raise RequestError(f"Invalid user: {user[:64]!r}", "invalid_user") from None
    key = load_or_create_jwt_key(jwt_key_path(ctl.cfg))
    t = now()
    tok = sign_hs256({"iat": t, "exp": t + lifespan, "sun": user}, key)
    ctl.state.event(None, "token_issued", f"for {user} by uid {uid}, lifespan {lifespan}s")
    return {"token": tok, "user": user, "expires": t + lifespan}


# ---- job output ------------------------------------------------------------------------------

def _expand_node(path: str, job) -> str:
    host = job.batch_host or ""
    return path.replace("%N", host).replace("%n", "0").replace("%t", "0")


@op("job_output")
async def job_output(ctl, msg, uid, gid):
    """The last ``bytes`` bytes of a job's StdOut (``stream: "stderr"`` for StdErr).

    Only for the job's owner or operators, and read by a short-lived process running as the
    job's user (``_read_tail``): the controller runs as root and never opens, follows or stats
    the path itself, so an output path that leads (by a symlink anywhere on it) into places
    the job's user cannot read yields nothing from there (docs/design.md, "Root and user
    paths"). Everything the reply needs from the job is taken before the one await."""
    jid = _int(msg.get("job_id"))
    job = ctl.state.find(jid)
    if job is None:
        raise InvalidJobId()
    if job.uid != uid and not ctl.is_admin(uid):
        raise AccessDenied()
    want = msg.get("bytes", OUTPUT_DEFAULT)
    if isinstance(want, bool) or not isinstance(want, int) or not 0 < want <= OUTPUT_MAX:
        raise RequestError(f"bytes must be 1 to {OUTPUT_MAX}", "invalid_request")
    stream = msg.get("stream") or "stdout"
    if stream not in ("stdout", "stderr"):
        raise RequestError("stream must be stdout or stderr", "invalid_request")
    pattern = job.std_out if stream == "stdout" else job.std_err
    out = {"job_id": job.job_id, "stream": stream, "path": None, "size": 0, "offset": 0,
           "data": "", "truncated": False, "available": False, "reason": None}
    if not pattern or not job.batch:
        out["reason"] = "job has no output file (not a batch job)"
        return out
    if job.state == PENDING:
        out["reason"] = "job has not started"
        return out
    path = _expand_node(pattern, job)
    out["path"] = path
    ident = _tail_identity(job)
    if ident is None:
        out["reason"] = "the controller cannot read files as the job's user"
        return out
    slots = getattr(ctl, "_tail_slots", None)
    if slots is None:
        slots = ctl._tail_slots = asyncio.Semaphore(TAIL_READERS)
    async with slots:
        reason, size, data = await _read_tail(path, want, ident)
    if reason is not None:
        out["reason"] = reason
        return out
    start = max(0, size - want)
    if start:
        nl = data.find(b"\n")
        if 0 <= nl < len(data) - 1:
            data = data[nl + 1:]  # start on a line boundary
    out.update(size=size, offset=size - len(data), data=data.decode("utf-8", "replace"),
               truncated=start > 0, available=True)
    return out


# The reader of job_output, run as the job's user (``python -I -S``: stdlib only, nothing from
# the user's environment, site or working directory). Opened without blocking (a FIFO) and
# without becoming a controlling tty; only a regular file is read. It prints "E <reason>", or
# "D <size>\n" and the bytes from max(0, size - want).
_TAIL_CODE = """\
import os, stat, sys
path, want = sys.argv[1], int(sys.argv[2])
try:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    st = os.fstat(fd)
except OSError as exc:
    sys.stdout.write("E cannot open output file: " + (exc.strerror or "error"))
    raise SystemExit
if not stat.S_ISREG(st.st_mode):
    sys.stdout.write("E output is not a regular file")
    raise SystemExit
start = max(0, st.st_size - want)
data = b""
while start + len(data) < st.st_size:
    chunk = os.pread(fd, st.st_size - start - len(data), start + len(data))
    if not chunk:
        break
    data += chunk
sys.stdout.buffer.write(b"D %d\\n" % st.st_size + data)
"""
TAIL_READERS = 4      # readers at a time: each is a process (~15 ms of CPU)
TAIL_TIMEOUT = 5.0    # seconds before a reader stuck on the user's file (FUSE, NFS) is killed


def _tail_identity(job) -> dict | None:
    """Popen keywords that run the reader as the job's user ({} when we already are that
    user); None when this controller cannot switch to it (not root)."""
    me = os.geteuid()
    if me == job.uid:
        return {}
    if me != 0:
        return None
    return {"user": job.uid, "group": job.gid, "extra_groups": list(job.groups or (job.gid,))}


async def _read_tail(path: str, want: int, ident: dict) -> tuple[str | None, int, bytes]:
    """(reason, 0, b"") or (None, size, the bytes from max(0, size - want)) of ``path``, read
    by ``_TAIL_CODE`` as the job's user; the loop keeps serving meanwhile."""
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-S", "-c", _TAIL_CODE, path, str(want),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, cwd="/", env={"LC_ALL": "C"}, **ident)
    except OSError as exc:
        return f"cannot read output file: {exc.strerror or exc}", 0, b""
    try:
        raw, _ = await asyncio.wait_for(proc.communicate(), TAIL_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return "output file could not be read in time", 0, b""
    if raw.startswith(b"E "):
        return raw[2:].decode("utf-8", "replace"), 0, b""
    head, _, data = raw.partition(b"\n")
    if proc.returncode != 0 or not head.startswith(b"D ") or not head[2:].isdigit():
        return "output file could not be read", 0, b""
    return None, int(head[2:]), data


# ---- events ----------------------------------------------------------------------------------

@op("events")
def events(ctl, msg, uid, gid):
    """Audit trail: ``job_id``, ``node``, ``event``, ``since`` (epoch), ``before_id``
    (paging), ``limit`` (≤ 5000, newest first).

    Least exposure: operators see every event. Anyone else sees the events of their own jobs
    and of nodes (what ``sinfo -R`` shows everyone) but not other users' jobs, token grants or
    accounting changes; naming another user's job is "Access/permission denied"."""
    where: list[str] = []
    args: list[object] = []
    admin = ctl.is_admin(uid)
    if msg.get("job_id") is not None:
        jid = _int(msg["job_id"])
        if not admin:
            job = ctl.state.find(jid)
            if job is not None and job.uid != uid:
                raise AccessDenied()
        where.append("job_id=?")
        args.append(jid)
    if not admin:
        where.append("(job_id IN (SELECT job_id FROM jobs WHERE uid=?) OR "
                     "(job_id IS NULL AND node IS NOT NULL))")
        args.append(uid)
    for key in ("node", "event"):
        v = msg.get(key)
        if v is not None:
            if not isinstance(v, str) or len(v) > 256:
                raise RequestError(f"invalid {key}", "invalid_request")
            where.append(f"{key}=?")
            args.append(v)
    if msg.get("since") is not None:
        where.append("time>=?")
        args.append(_int(msg["since"], "time"))
    if msg.get("before_id") is not None:
        where.append("id<?")
        args.append(_int(msg["before_id"], "event id"))
    limit = msg.get("limit")
    if limit is None:
        limit = 500
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= 5000:
        raise RequestError("limit must be 1 to 5000", "invalid_request")
    rows = ctl.state.store.query_events(where, args, limit)
    return {"events": [{"id": i, "time": t, "job_id": j, "node": n, "event": e, "detail": d or ""}
                       for i, t, j, n, e, d in rows], "now": now()}


def _update_event_totals(ctl) -> None:
    """Fold new rows of the events table into the requeue / node-failure counters."""
    last = _EVENT_STATE["last_id"]
    rows, top = ctl.state.store.event_counts(last, tuple(_COUNTED_EVENTS))
    for ev, n in rows:
        _EVENT_TOTALS[_COUNTED_EVENTS[ev]] += n
    _EVENT_STATE["last_id"] = top


# ---- compact views ---------------------------------------------------------------------------

def _job_state(j) -> str:
    return "COMPLETING" if j.completing else j.state


def _job_gpus(j) -> int:
    if j.alloc:
        return sum(len(a.gpus) for a in j.alloc)
    if j.gpus:
        return j.gpus
    return (j.gpus_per_node or 0) * (j.num_nodes or 1)


@op("dash")
def dash(ctl, msg, uid, gid):
    """Everything the dashboard draws, column-wise (10,000 jobs ≈ 1.5 MB of JSON)."""
    st = ctl.state
    t = now()
    names, states, flags, cpus, cpus_alloc, mem, mem_alloc, gpu_owner, hb, reasons = (
        [], [], [], [], [], [], [], [], [], [])
    for n in st.nodes.values():
        names.append(n.name)
        states.append(n.base_state)
        flags.append(",".join(n.flags))
        cpus.append(n.cpus)
        cpus_alloc.append(n.cpus_alloc)
        mem.append(n.mem)
        mem_alloc.append(n.mem_alloc)
        hb.append(n.last_heartbeat)
        reasons.append(n.reason)
        owners = {}
        for jid in n.jobs:
            job = st.jobs.get(jid)
            if job is None:
                continue
            for a in job.alloc:
                if a.node == n.name:
                    for g in a.gpus:
                        owners[g] = jid
        gpu_owner.append([owners.get(g, 0) for g in n.gpu_indices])
    cols = ("id", "display_id", "name", "user", "account", "partition", "state", "reason",
            "submit", "start", "end", "limit", "nodes", "gpus", "cpus", "priority", "exit",
            "array_job_id", "num_nodes", "use", "mem")
    rows = []
    use = ctl.usage.by_job()  # running jobs' [cpu %, resident bytes, GPU %|None] now
    for j in st.jobs.values():
        rows.append([j.job_id, j.display_id, j.name, j.user, j.account, j.partition,
                     _job_state(j), j.reason_desc or j.reason, j.submit_time,
                     j.expected_start if j.state == "PENDING" else j.start_time,
                     j.end_time, j.time_limit, j.node_list, _job_gpus(j), j.num_cpus,
                     j.priority, f"{j.exit_code}:{j.exit_signal}", j.array_job_id, j.num_nodes,
                     use.get(j.job_id) if j.state == "RUNNING" else None,
                     sum(a.mem for a in j.alloc)])
    return {"now": t, "cluster": ctl.cfg.cluster_name,
            "nodes": {"name": names, "state": states, "flags": flags, "cpus": cpus,
                      "cpus_alloc": cpus_alloc, "mem": mem, "mem_alloc": mem_alloc,
                      "gpu_owner": gpu_owner, "last_heartbeat": hb, "reason": reasons},
            "job_columns": list(cols), "jobs": rows, "stats": dict(ctl.stats),
            "fairshare": None}


@op("usage")
def usage(ctl, msg, uid, gid):
    """GPU-hours and CPU-hours by account in time buckets, from accounting (all jobs the
    store knows that ran in the window)."""
    t = now()
    hours = msg.get("hours")
    if hours is None:
        hours = 24
    bucket = msg.get("bucket")
    if isinstance(hours, bool) or not isinstance(hours, int) or not 0 < hours <= 24 * 366:
        raise RequestError("hours must be 1 to 8784", "invalid_request")
    if bucket is None:
        bucket = 3600 if hours <= 72 else 86400
    if isinstance(bucket, bool) or not isinstance(bucket, int) or not 60 <= bucket <= 86400 * 31:
        raise RequestError("bucket must be 60 to 2678400 seconds", "invalid_request")
    start = t - hours * 3600
    start -= start % bucket
    nb = (t - start) // bucket + 1
    gpu: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    for r in ctl.state.store.query_jobs(end_after=start):
        s = r.get("start_time")
        if not s or not r.get("alloc"):
            continue
        e = r.get("end_time") if r.get("state") not in (RUNNING,) else t
        e = min(e or t, t)
        if e <= start or e <= s:
            continue
        ng = sum(len(a.get("gpus") or ()) for a in r["alloc"])
        nc = sum(a.get("cpus", 0) for a in r["alloc"])
        acct = r.get("account") or "default"
        g = gpu.setdefault(acct, [0.0] * nb)
        c = cpu.setdefault(acct, [0.0] * nb)
        a0 = max(s, start)
        i = (a0 - start) // bucket
        while a0 < e and i < nb:
            b_end = start + (i + 1) * bucket
            seg = min(e, b_end) - a0
            g[i] += ng * seg / 3600
            c[i] += nc * seg / 3600
            a0 = b_end
            i += 1
    return {"now": t, "start": start, "bucket": bucket,
            "times": [start + i * bucket for i in range(nb)],
            "gpu_hours": {k: [round(x, 4) for x in v] for k, v in sorted(gpu.items())},
            "cpu_hours": {k: [round(x, 4) for x in v] for k, v in sorted(cpu.items())}}


@op("metrics")
def metrics(ctl, msg, uid, gid):
    """Aggregate counts for Prometheus. ``jobs`` is by (state, partition); ``jobs_by_user``
    (who runs what) only for operators, and only when ``detail`` is not false (musterrestd
    asks without detail for unauthenticated scrapes, which it makes as root)."""
    st = ctl.state
    t = now()
    detail = msg.get("detail") is not False and ctl.is_admin(uid)
    jobs: dict[tuple, int] = {}
    by_user: dict[tuple, int] = {}
    reasons: dict[tuple, int] = {}
    pending = 0
    for j in st.jobs.values():
        s = _job_state(j)
        k = (s, j.partition)
        jobs[k] = jobs.get(k, 0) + 1
        if detail:
            ku = (s, j.partition, j.user)
            by_user[ku] = by_user.get(ku, 0) + 1
        if j.state == PENDING:
            pending += 1
            rk = (j.reason or "None", j.partition)
            reasons[rk] = reasons.get(rk, 0) + 1
    node_states: dict[str, int] = {}
    res = {"cpus_total": 0, "cpus_alloc": 0, "cpus_idle": 0, "gpus_total": 0, "gpus_alloc": 0,
           "gpus_idle": 0, "mem_total": 0, "mem_alloc": 0, "mem_idle": 0}
    hb = []
    for n in st.nodes.values():
        s = n.base_state
        if n.drain:
            s = "DRAINED" if not n.jobs else "DRAINING"
        if not n.connected and s != "DOWN":
            s = "NOT_RESPONDING"
        node_states[s] = node_states.get(s, 0) + 1
        usable = not (n.down or n.drain or not n.connected)
        res["cpus_total"] += n.cpus
        res["cpus_alloc"] += n.cpus_alloc
        res["gpus_total"] += len(n.gpu_indices)
        res["gpus_alloc"] += len(n.gpus_alloc)
        res["mem_total"] += n.mem
        res["mem_alloc"] += n.mem_alloc
        if usable:
            res["cpus_idle"] += max(0, n.cpus - n.cpus_alloc)
            res["gpus_idle"] += max(0, len(n.gpu_indices) - len(n.gpus_alloc))
            res["mem_idle"] += max(0, n.mem - n.mem_alloc)
        hb.append([n.name, None if n.last_heartbeat is None else max(0, t - n.last_heartbeat)])
    _update_event_totals(ctl)
    return {
        "now": t, "cluster": ctl.cfg.cluster_name,
        "jobs": [[s, p, c] for (s, p), c in sorted(jobs.items())],
        "jobs_by_user": [[s, p, u, c] for (s, p, u), c in sorted(by_user.items())] if detail
        else None,
        "pending_reasons": [[r, p, c] for (r, p), c in sorted(reasons.items())],
        "nodes": node_states, "resources": res, "heartbeat_age": hb,
        "scheduler": {"cycles": ctl.stats.get("cycles", 0),
                      "last_cycle_seconds": ctl.stats.get("last_cycle_ms", 0.0) / 1000,
                      "depth": pending, "starts": ctl.stats.get("starts", 0),
                      "backfill_starts": ctl.stats.get("backfill_starts", 0)},
        "rpcs_total": ctl.stats.get("rpcs", 0),
        "rpc": {k: h.export() for k, h in sorted(RPC.items())},
        "commit": COMMIT.export(), "commit_hooked": bool(getattr(st.store, "on_commit", None)),
        "buckets": list(BUCKETS),
        "events": dict(_EVENT_TOTALS),
        "uptime_seconds": t - st.boot_time,
    }
