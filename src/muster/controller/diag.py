"""Operations data of musterctld: sdiag's statistics and the run-time log controls.

:class:`Diag` (``ctl.diag``) observes four places and nothing else:

* ``rpc`` — every client request, from ``Controller.dispatch`` (count and handling time by
  operation and by uid); agent messages from the agent loop (``agent_message``). It is on the
  request path: two dict lookups and four additions (tests/unit/test_diag.py measures it),
  and the Protocol/Steps/Reservation debug records cost one attribute test while off;
* ``cycle`` — every scheduling pass (time, depth, starts; backfill's share when the pass ran
  backfill);
* ``job_transition`` — a job's state as the applier commits it (started, completed, ...);
* ``submitted`` — jobs admitted by submit/allocate.

Counters restart at ``sdiag --reset`` (the ``diag_reset`` op; root and SlurmUser, as Slurm),
except "backfilled jobs since last slurm start".

Operations: ``diag`` (anyone, as Slurm's sdiag; also the REST API's /diag), ``diag_reset``,
``setdebug`` and ``setdebugflags`` (root and SlurmUser only, as Slurm: not operators).
The level and flags live in a :class:`muster.common.logsetup.LogControl`; ``scontrol show
config`` reports them through :func:`live_config`.
"""

from __future__ import annotations

import logging
import time

from muster.common import logsetup
from muster.common.errors import AccessDenied, RequestError
from muster.controller.opspec import op
from muster.controller.state import now
from muster.model.job import CANCELLED, COMPLETED, PENDING, RUNNING

log = logging.getLogger("musterctld")

# Muster operations that are the same request as a Slurm message type: shown under Slurm's
# name and number, so tools that read sdiag find them. Others show as MUSTER_<OP> with id 0.
SLURM_TYPES = {
    "ping": ("REQUEST_PING", 1008), "setdebug": ("REQUEST_SET_DEBUG_LEVEL", 1010),
    "setdebugflags": ("REQUEST_SET_DEBUG_FLAGS", 1014), "config": ("REQUEST_BUILD_INFO", 2001),
    "jobs": ("REQUEST_JOB_INFO", 2003), "steps": ("REQUEST_JOB_STEP_INFO", 2005),
    "nodes": ("REQUEST_NODE_INFO", 2007), "partitions": ("REQUEST_PARTITION_INFO", 2009),
    "reservations": ("REQUEST_RESERVATION_INFO", 2024), "diag": ("REQUEST_STATS_INFO", 2035),
    "update_job": ("REQUEST_UPDATE_JOB", 3001), "update_node": ("REQUEST_UPDATE_NODE", 3002),
    "resv_create": ("REQUEST_CREATE_RESERVATION", 3006),
    "resv_delete": ("REQUEST_DELETE_RESERVATION", 3008),
    "resv_update": ("REQUEST_UPDATE_RESERVATION", 3009),
    "allocate": ("REQUEST_RESOURCE_ALLOCATION", 4001),
    "submit": ("REQUEST_SUBMIT_BATCH_JOB", 4003), "step_create": ("REQUEST_JOB_STEP_CREATE", 5001),
    "release_alloc": ("REQUEST_COMPLETE_JOB_ALLOCATION", 5017), "cancel": ("REQUEST_KILL_JOB", 5032),
    "diag_reset": ("REQUEST_STATS_INFO", 2035),  # Slurm: the same type, a reset command
    # agents' messages
    "agent_register": ("MESSAGE_NODE_REGISTRATION_STATUS", 1002),
    "step_ended": ("REQUEST_STEP_COMPLETE", 5016),
    "job_ended": ("REQUEST_COMPLETE_BATCH_SCRIPT", 5018),
    "epilog_done": ("MESSAGE_EPILOG_COMPLETE", 6012),
}
# the client operations of a subsystem: their RPCs are that subsystem's debug records
FLAG_OPS = {"Steps": frozenset(("step_create", "step_signal", "step_status", "steps",
                                "release_alloc")),
            "Reservation": frozenset(("resv_create", "resv_update", "resv_delete",
                                      "reservations"))}
AGENT_OPS = frozenset(("heartbeat", "job_started", "job_ended", "step_ended", "step_usage",
                       "health", "prolog_done", "epilog_done", "agent_register"))
_JOB_COUNTERS = ("submitted", "started", "completed", "canceled", "failed")


def _slurm_level(text) -> int | None:
    return logsetup.parse_level(str(text)) if text is not None else None


class Diag:
    """Counters since ``since`` (start or the last reset). Per-op and per-uid entries are
    two-item lists [count, seconds], updated in place: no allocation per request."""

    def __init__(self, ctl):
        self.ctl = ctl
        self.logs = logsetup.LogControl("musterctld")
        self.configure(ctl.cfg)
        self.bf_since_start = 0
        self.reset(now())

    def configure(self, cfg) -> None:
        """SlurmctldDebug and DebugFlags of ``cfg`` (at start, and on reconfigure: as in
        Slurm, a reconfigure puts back the file's values over setdebug's). ``musterctld -v``
        (the root logger at DEBUG) keeps at least ``debug``."""
        raw = getattr(cfg, "raw", None) or {}
        level = _slurm_level(raw.get("SlurmctldDebug"))
        if level is None:
            level = 3  # info
        if logging.getLogger().level <= logging.DEBUG:
            level = max(level, 5)
        self.logs.set_level(level)
        self.logs.set_flags(logsetup.parse_flags(raw.get("DebugFlags")))
        self.refresh()

    def reset(self, t: int) -> None:
        self.since = t
        self.by_op: dict[str, list] = {}
        self.by_uid: dict[int, list] = {}
        self.jobs = dict.fromkeys(_JOB_COUNTERS, 0)
        # main: last, max, count, sum (microseconds), depth sum, last queue length
        self.main = [0, 0, 0, 0, 0, 0]
        # backfill: jobs, cycles, when, last, max, sum (us), last depth, depth sum
        self.bf = [0, 0, 0, 0, 0, 0, 0, 0]

    def refresh(self) -> None:
        """Cache what the request path asks of the loggers (changes only by setdebug*)."""
        self.trace_rpc = self.logs.enabled("Protocol", logsetup.DEBUG2)
        self.trace_agent = self.logs.enabled("Agent", logsetup.DEBUG2)
        self.trace_ops = {name: self.logs.logger(flag) for flag, names in FLAG_OPS.items()
                          if self.logs.enabled(flag) for name in names}

    # ---- observers (hot) -------------------------------------------------------------------
    def rpc(self, op, uid: int, seconds: float, reply=None) -> None:
        """One client request. ``op`` is whatever the client sent: only a known operation's
        name becomes a key (the table stays bounded whatever clients send)."""
        s = self.by_op.get(op) if type(op) is str else None
        if s is None:
            s = self._op_entry(op)
        s[0] += 1
        s[1] += seconds
        u = self.by_uid.get(uid)
        if u is None:
            u = self.by_uid[uid] = [0, 0.0]
        u[0] += 1
        u[1] += seconds
        if self.trace_rpc or self.trace_ops:
            self._trace(op, uid, seconds, reply)

    def _op_entry(self, op) -> list:
        from muster.controller.opspec import OPS
        key = op if isinstance(op, str) and (op in OPS or op in AGENT_OPS) else "unknown"
        return self.by_op.setdefault(key, [0, 0.0])

    def _trace(self, op, uid: int, seconds: float, reply) -> None:
        ok = reply.get("ok") if isinstance(reply, dict) else None
        what = "ok" if ok else (reply.get("code") if isinstance(reply, dict) else "pending")
        name = op if isinstance(op, str) and len(op) <= 64 else type(op).__name__
        if self.trace_rpc:
            self.logs.logger("Protocol").log(logsetup.DEBUG2, "RPC %s from uid %d: %s in %.0f us",
                                             name, uid, what, seconds * 1e6)
        sub = self.trace_ops.get(name)
        if sub is not None:  # Steps, Reservation
            sub.debug("%s from uid %d: %s", name, uid, what)

    def agent_message(self, node: str, uid: int, msg, seconds: float) -> None:
        """One message of an agent (counted as an RPC of the agent's uid)."""
        op = msg.get("op") if isinstance(msg, dict) else None
        self.rpc(op, uid, seconds)
        if self.trace_agent:
            self.logs.logger("Agent").log(logsetup.DEBUG2, "agent %s: %s in %.0f us", node,
                                          op if isinstance(op, str) else "?", seconds * 1e6)

    def submitted(self, n: int = 1) -> None:
        self.jobs["submitted"] += n

    def job_transition(self, job, before: str) -> None:
        """The applier committed ``job`` from state ``before`` to ``job.state``."""
        after = job.state
        if after == before:
            return
        if after == RUNNING and before == PENDING:
            self.jobs["started"] += 1
        elif after == COMPLETED:
            self.jobs["completed"] += 1
        elif after == CANCELLED:
            self.jobs["canceled"] += 1
        elif after not in (PENDING, RUNNING):
            self.jobs["failed"] += 1
        tj = self.logs.logger("TraceJobs")
        if tj.isEnabledFor(logging.DEBUG):
            tj.debug("TraceJobs: job %d %s -> %s", job.job_id, before, after)

    def cycle(self, seconds: float, depth: int, plan, backfill: bool, t: int) -> None:
        """One scheduling pass: ``depth`` pending jobs looked at, ``plan`` what it decided."""
        us = int(seconds * 1e6)
        m = self.main
        m[0] = us
        m[1] = max(m[1], us)
        m[2] += 1
        m[3] += us
        m[4] += depth
        m[5] = depth
        if backfill:
            self._backfill_cycle(us, depth, plan, t)
        pr = self.logs.logger("Priority")
        if plan.priorities and pr.isEnabledFor(logging.DEBUG):
            top = sorted(plan.priorities.items(), key=lambda kv: -kv[1])[:20]
            pr.debug("Priority: %d jobs reprioritized; highest: %s", len(plan.priorities),
                     ", ".join(f"{j}={p}" for j, p in top))

    def _backfill_cycle(self, us: int, depth: int, plan, t: int) -> None:
        n = sum(1 for s in plan.starts if s.scheduler == "Backfill")
        b = self.bf
        b[0] += n
        b[1] += 1
        b[2] = t
        b[3] = us
        b[4] = max(b[4], us)
        b[5] += us
        b[6] = depth
        b[7] += depth
        self.bf_since_start += n
        bl = self.logs.logger("Backfill")
        if bl.isEnabledFor(logging.DEBUG):
            bl.debug("Backfill: cycle of %d jobs in %d us: %d started, %d planned ahead", depth,
                     us, n, len(plan.expected_start))

    # ---- report ----------------------------------------------------------------------------
    def report(self) -> dict:
        """The statistics as plain data; times in microseconds, as sdiag prints them."""
        def rows(table):
            return [[k, v[0], int(v[1] * 1e6)] for k, v in table.items()]
        types: dict[tuple, list] = {}  # diag and diag_reset are one Slurm type: summed
        for name, count, total in rows(self.by_op):
            slurm = SLURM_TYPES.get(name) or (f"MUSTER_{name.upper()}", 0)
            row = types.setdefault(slurm, [slurm[0], slurm[1], 0, 0])
            row[2] += count
            row[3] += total
        t0 = time.perf_counter()
        for _ in range(1000):  # sdiag's "Latency for 1000 calls to gettimeofday()": the
            now()              # controller's clock (the injected one) read 1,000 times
        clock_us = int((time.perf_counter() - t0) * 1e6)
        return {"since": self.since, "clock_latency_us": clock_us, "jobs": dict(self.jobs),
                "main": list(self.main),
                "backfill": list(self.bf), "backfilled_since_start": self.bf_since_start,
                "rpc_types": list(types.values()), "rpc_users": rows(self.by_uid),
                "debug_level": self.logs.level_text(), "debug_flags": self.logs.flags_text()}


def live_config(ctl, items: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``show config`` lines with SlurmctldDebug and DebugFlags as they are now (setdebug
    changes them at run time; the file's values are only where they started)."""
    d = getattr(ctl, "diag", None)
    if d is None:
        return items
    live = {"SlurmctldDebug": d.logs.level_text(), "DebugFlags": d.logs.flags_text()}
    return [(k, live.get(k, v)) for k, v in items]


def on_sighup(ctl) -> None:
    """SIGHUP, on the event loop (never inside a request): reopen the log files, then
    reconfigure from the files as ``scontrol reconfigure`` would (slurmctld does both)."""
    from muster.controller import reconfig
    logsetup.reopen_logs()
    log.info("SIGHUP: log file reopened; reconfiguring")
    try:
        reconfig.reconfigure(ctl, {}, 0, 0)
    except RequestError as exc:
        log.warning("SIGHUP: reconfigure refused: %s", exc.message)


def _superuser(ctl, uid: int) -> bool:
    """Root or SlurmUser (the daemon's own uid): Slurm's validate_super_user."""
    return uid in (0, ctl.owner_uid)


# ---- operations ----------------------------------------------------------------------------

@op("diag")
def diag(ctl, msg, uid, gid):
    from muster.controller import api_ops
    st = ctl.state
    counts: dict[str, int] = {}
    for j in st.jobs.values():
        counts[j.state] = counts.get(j.state, 0) + 1
    api_ops._update_event_totals(ctl)
    outbox = sum(len(v) for v in ctl.outbox.values())
    return {"now": now(), "cluster": ctl.cfg.cluster_name, "boot_time": st.boot_time,
            "stats": dict(ctl.stats), "jobs_in_memory": len(st.jobs), "job_states": counts,
            "agents_connected": sum(1 for n in st.nodes.values() if n.connected),
            "nodes": len(st.nodes), "connections": len(getattr(ctl, "_handlers", ())),
            "agent_queue": outbox,
            "rpc": {k: {"count": h.count, "total_time_s": round(h.total, 6)}
                    for k, h in sorted(api_ops.RPC.items())},
            "events": dict(api_ops._EVENT_TOTALS), "sdiag": ctl.diag.report(),
            "gc": ctl.gc_watch.report(),  # the collector's pauses (controller.gcwatch)
            # the loop's stalls over the last 20 s (controller.looplag)
            "loop_lag": ctl.loop_lag.report(),
            # per operation, from its handling's start to its reply handed to the socket
            "request_times": ctl.request_times.report(),
            "passes": list(ctl.passes.log)}  # recent scheduling passes (controller.passes)


@op("diag_reset")
def diag_reset(ctl, msg, uid, gid):
    if not _superuser(ctl, uid):
        raise AccessDenied()
    ctl.diag.reset(now())
    ctl.loop_lag.reset()
    ctl.request_times.reset()
    log.info("sdiag statistics reset by uid %d", uid)
    return {}


@op("setdebug")
def setdebug(ctl, msg, uid, gid):
    if not _superuser(ctl, uid):
        raise AccessDenied("Permission denied")
    level = msg.get("level")
    if not isinstance(level, int) or isinstance(level, bool) or \
            not 0 <= level < len(logsetup.LEVEL_NAMES):
        raise RequestError(f"invalid debug level: {level!r}"[:80], "invalid_request")
    ctl.diag.logs.set_level(level)
    ctl.diag.refresh()
    log.info("set debug level to '%s' (uid %d)", logsetup.LEVEL_NAMES[level], uid)
    return {"level": logsetup.LEVEL_NAMES[level]}


@op("setdebugflags")
def setdebugflags(ctl, msg, uid, gid):
    if not _superuser(ctl, uid):
        raise AccessDenied("Permission denied")
    add: list[str] = []
    remove: list[str] = []
    for key, out in (("add", add), ("remove", remove)):
        for name in msg.get(key) or ():
            flag = logsetup.flag_name(name)
            if flag is None:
                raise RequestError(f"Invalid DebugFlag: {name}"[:80], "invalid_request")
            out.append(flag)
    d = ctl.diag
    d.logs.change_flags(add, remove)
    d.refresh()
    log.info("set DebugFlags to '%s' (uid %d)", d.logs.flags_text(), uid)
    return {"flags": d.logs.flags_text()}
