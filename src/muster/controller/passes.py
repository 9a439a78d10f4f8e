"""Scheduling passes off the request path: the pure part of a pass runs in a forked worker.

A pass has three parts. ``prepare`` (the clock's events) and ``finish`` (the plan applied in
one commit, preemptions) change the controller's state and run on the event loop; the
snapshot (a pure read of the state) and ``schedule(snapshot, cfg)`` (pure) run in a child
forked for the pass, so the loop answers requests meanwhile, on its own core. One pass at a
time: the next is prepared only after the last one's plan was applied. The rare synchronous pass
(``srun --immediate`` calls ``Controller.schedule_once`` from a handler) runs on the loop.

Why a forked child per pass (docs/design.md, "Scheduling in the live controller"): the child
starts with the snapshot already in its memory (copy-on-write: no serialisation on the loop;
fork takes ~3 ms at 110 MiB), computes without sharing the GIL with the loop (a thread's pass
took 3-5x its pure time while requests were served, and made every request slower while it
ran), and sends back only the plan, pickled (~100 KB for 10,000 pending jobs: ~3 ms to load).
The plan is the one ``schedule()`` makes in this process: the same function on the same
snapshot (a test compares them). The child makes the snapshot from the state as it was at
the fork — the instant ``prepare`` ended: nothing runs on the loop in between — so the loop
no longer holds requests while 10,000 pending jobs are listed (~25 ms a pass, ~140 ms for the
first after a release of 10,000, on 1,024 nodes). What the snapshot reuses across passes (each
job's view, ``scheduling.cached_view``, and the core's normalised request,
``placement.request_of``) is made on the loop for the jobs that changed since the last pass,
at most ``WARM_S`` of it a pass (the rest by the next ones; the child makes what is missing),
so each child inherits it. The child resets the signal handlers and the loop's wake-up fd, so
a signal sent to it never reaches the controller's handlers; it has ``CHILD_LIMIT_S`` to
answer (then it is killed). A child that fails, or a fork that fails, falls back to the
thread for that pass (logged). A pass whose predecessor's core took under ``SMALL_PASS_S`` of
CPU time (a small queue) is computed on the loop at once: handing it off would cost more than
it. CPU time, not wall time: a preempted small pass must not send the next ones to children,
whose own fork overhead would then keep them there. ``MUSTER_SCHED_WORKER
=thread`` always uses the thread, ``0`` runs passes inline on the loop (both for A/B
measurements).

The plan is computed against the snapshot, and applied against the state as it is *then*
(``apply_plan`` re-checks each start's nodes and resources). What it cannot re-check cheaply
is handled here:

* a job changed while the pass ran (held, updated, cancelled, another pass's reason written):
  ``ClusterState.save`` records it in ``state.pass_changes``; its start, reason, expected start
  and priority are dropped from the plan (the next pass, already requested, decides it);
* something that is not a job changed (accounts and limits, reservations, node features or
  weights, the configuration): any request whose operation is not in ``SAFE_DURING_PASS`` marks
  the pass stale, as does a new configuration object or SchedConfig; a stale plan is dropped
  whole and a new pass requested. Unknown operations are unsafe by default.

The thread (``MUSTER_SCHED_WORKER=thread``, and the fallback): the core is pure Python, so
it shares the GIL with the loop; CPython hands the GIL over every switch interval, so a
request never waits for a whole pass, but its handling time about doubles while one runs.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import logging
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from muster.controller.scheduling import (advance, apply_plan, apply_reasons, build_snapshot,
                                          cached_view, merged_reasons)
from muster.controller.state import now
from muster.core import schedule
from muster.core.placement import request_of
from muster.model.job import PENDING

log = logging.getLogger("musterctld")

# Requests that may run while a pass is in flight without making its plan stale: reads, and
# changes of single jobs (tracked per job by ClusterState.save) or of steps and allocations
# whose resources apply_plan re-checks. Anything else (sacctmgr, reservations, node updates,
# reconfigure, operations added later) drops the plan in flight.
SAFE_DURING_PASS = frozenset((
    "ping", "jobs", "nodes", "partitions", "config", "steps", "reservations", "diag", "acct",
    "sstat", "job_script", "job_output", "sprio", "sshare", "token", "events", "dash", "usage",
    "metrics", "setdebug", "setdebugflags", "diag_reset",
    "submit", "allocate", "wait_alloc", "release_alloc", "cancel", "hold", "release", "requeue",
    "update_job", "step_create", "step_signal", "step_status", "lease"))
SWITCH_INTERVAL_S = 0.001  # GIL hand-over while a pass runs: a request waits at most ~this
REASON_SLICE = 500  # reasons applied per slice between requests (a few ms each)
START_SLICE = 16  # starts applied per commit between requests (~0.6 ms each on 1,024 nodes)
PASS_LOG = 1024  # recent passes kept for the diag op (bench/scale.py reads them)
CHILD_LIMIT_S = 120  # a forked pass that has not answered by then is killed (SIGALRM)
SMALL_PASS_S = 0.004  # a pass whose predecessor's core took less CPU time runs on the loop
WARM_S = 0.003  # the loop's time per pass for views of changed jobs (PassRunner._warm)


@dataclass(slots=True)
class Prepared:
    """What one pass looked at: the snapshot, the shell's reasons, and the configuration it
    was built from (a different one at apply time makes the plan stale). ``snap`` and
    ``shell_reasons`` are None until made: a forked pass makes them in the child (from the
    state as it was at the fork, which is this instant: nothing runs on the loop between
    preparing and forking) and sends back the reasons and the depth with its plan."""

    t: int
    snap: object | None
    shell_reasons: dict | None
    cfg: object
    sched_cfg: object
    loop_s: float  # time spent preparing, on the loop
    depth: int = 0  # pending jobs in the snapshot
    snap_s: float = 0.0  # time spent making the snapshot (on the loop, or in the child)

    def fill(self, state) -> None:
        """Make the snapshot here (the thread's fallback after a failed child, tests)."""
        t0 = time.perf_counter()
        snap, self.shell_reasons = build_snapshot(state, self.t)
        self.snap, self.depth = snap, len(snap.pending)
        self.snap_s = time.perf_counter() - t0


class PassRunner:
    """The controller's scheduling passes (``ctl.passes``)."""

    def __init__(self, ctl):
        self.ctl = ctl
        mode = os.environ.get("MUSTER_SCHED_WORKER", "fork")
        self.mode = {"0": "inline", "1": "fork"}.get(mode, mode)
        if self.mode not in ("fork", "thread", "inline") or \
                self.mode == "fork" and not hasattr(os, "fork"):
            self.mode = "thread"
        self.worker = self.mode != "inline"
        self._pool: ThreadPoolExecutor | None = None
        self._children: set[int] = set()  # forked passes not reaped yet
        self.pure_s: float | None = None  # the last forked pass's compute time, in the child
        # the last pass's pure compute in CPU seconds (its thread's, or the child's): a pass
        # after a small one stays on the loop. CPU, not wall time: on a busy machine a 0.3 ms
        # pass preempted for 5 ms would otherwise send the next ones to children, whose fork
        # and copy-on-write faults (~25 ms of wall time there) kept every later pass forked
        self.last_core_s = float("inf")
        self._cpu_s = 0.0  # CPU seconds of the last compute() (its thread's)
        self.used = self.mode  # where the last pass was computed (the pass log's "worker")
        self.core_lock = threading.Lock()
        self.in_flight = False
        self.stale = False
        self.seq = 0
        self.log: collections.deque = collections.deque(maxlen=PASS_LOG)

    # ---- requests while a pass runs -----------------------------------------------------
    def note_request(self, op) -> None:
        """Called for every client request (one frozenset lookup while a pass is in flight)."""
        if self.in_flight and op not in SAFE_DURING_PASS:
            self.stale = True

    # ---- a pass -----------------------------------------------------------------------------
    def prepare(self, *, snapshot: bool = True) -> Prepared:
        """The clock's events, then the snapshot (``snapshot``) or, for a pass the child
        will snapshot, only the warming of the views it will read (:meth:`_warm`)."""
        t0 = time.perf_counter()
        ctl = self.ctl
        t = now()
        advance(ctl.state, t)  # the clock's events (dependencies, reservations), committed
        prep = Prepared(t, None, None, ctl.state.cfg, ctl.sched_cfg, 0.0)
        if snapshot:
            prep.fill(ctl.state)  # a pure read
            ctl.state.unviewed.clear()  # every job it lists has its view now
        else:
            self._warm()
        prep.loop_s = time.perf_counter() - t0
        return prep

    def _warm(self) -> None:
        """Make the views (and the core's normalised requests) of jobs that changed since
        the last pass, for at most WARM_S of the loop: a forked pass inherits them, so the
        child builds only the rest, and each view once in the parent serves every later
        child. The rest wait for the next passes (the child makes its own meanwhile)."""
        state = self.ctl.state
        todo = state.unviewed
        if not todo:
            return
        cfg = self.ctl.sched_cfg
        jobs = state.jobs
        end = time.perf_counter() + WARM_S
        n = 0
        while todo:
            j = jobs.get(todo.pop())
            if j is not None and j.state == PENDING and not j.hold:
                request_of(cached_view(state, j), cfg)
            n += 1
            if not n % 64 and time.perf_counter() > end:
                break

    async def _warm_meanwhile(self) -> None:
        """While a child computes, the views it lacked are made here, a WARM_S slice at a
        time between requests: the next child inherits them (the loop is otherwise idle)."""
        while self.ctl.state.unviewed:
            await asyncio.sleep(0)
            self._warm()

    def compute(self, prep: Prepared):
        """The pure part: any thread. Returns (plan, seconds); its thread's CPU seconds are
        left in ``_cpu_s``."""
        with self.core_lock:
            t0, c0 = time.perf_counter(), time.thread_time()
            plan = schedule(prep.snap, prep.sched_cfg)  # type: ignore[arg-type]
            self._cpu_s = time.thread_time() - c0
            return plan, time.perf_counter() - t0

    def run_sync(self) -> None:
        """One pass on the calling (loop) thread: the in-process tests and ``--immediate``.
        A pass in flight meanwhile is made stale (this one's reasons are newer)."""
        self.stale = self.stale or self.in_flight
        prep = self.prepare()
        plan, core_s = self.compute(prep)
        self.finish(prep, plan, core_s, set(), stale=False)

    async def run_async(self) -> None:
        """One pass with its pure part off the loop (a forked child; the scheduling thread
        when so set or when the child fails; inline when the worker is off): the loop serves
        requests while it runs, and between the slices of reasons."""
        if not self.worker:
            self.run_sync()
            return
        # a pass handed to a child is snapshotted there: the loop only warms the views
        local = self.last_core_s < SMALL_PASS_S
        prep = self.prepare(snapshot=local or self.mode != "fork")
        state = self.ctl.state
        changed: set[int] = set()
        state.pass_changes = changed
        self.in_flight, self.stale = True, False
        try:
            self.pure_s = None
            self.used = self.mode
            t0 = time.perf_counter()
            if local:
                # the last pass cost less than handing one off: this one is computed here,
                # at once (a small queue's pass is ~1 ms; a fork and its plan's transfer,
                # ~3-5 ms of the loop and a process). It decides what the worker would.
                got, self.used = self.compute(prep), "loop"
            elif self.mode == "fork":
                warming = asyncio.ensure_future(self._warm_meanwhile())
                try:
                    got = await self._forked(prep)
                finally:
                    warming.cancel()
                if got is not None:  # the core's time: from the fork to the plan loaded here
                    self.pure_s, self._cpu_s = got[1], got[2]
                    got = (got[0], time.perf_counter() - t0)
            else:
                got = None
            if got is None:
                if prep.snap is None:  # the child failed before its snapshot came back
                    prep.fill(state)
                got, self.used = await self._threaded(prep), "thread"
            plan, core_s = got
            self.last_core_s = self._cpu_s
            self.in_flight = False
            stale = self.stale or state.cfg is not prep.cfg \
                or self.ctl.sched_cfg is not prep.sched_cfg
            await self._apply_sliced(prep, plan, core_s, changed, stale)
        finally:
            self.in_flight = False
            state.pass_changes = None

    async def _threaded(self, prep: Prepared):
        """The pure part in the scheduling thread: (plan, seconds)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="sched")
            sys.setswitchinterval(SWITCH_INTERVAL_S)
        return await asyncio.get_running_loop().run_in_executor(self._pool, self.compute, prep)

    async def _forked(self, prep: Prepared):
        """The pure part in a child forked now: (plan, seconds, CPU seconds), or None when the
        child or the fork failed (logged; the caller computes in the thread instead)."""
        self._reap()
        r, w = os.pipe()
        # the loop's signals are blocked across the fork, so none reaches the child before it
        # has dropped the loop's handlers (the parent gets its own when it unblocks them)
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _CHILD_RESETS)
        try:
            pid = os.fork()
        except OSError as e:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
            os.close(r)
            os.close(w)
            log.warning("scheduling pass: fork failed (%s); computing in a thread", e)
            return None
        if pid == 0:  # the child: never returns
            _child_pass(prep, self.ctl.state, r, w, old_mask)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        os.close(w)
        self._children.add(pid)
        try:
            data = await _read_to_end(r, CHILD_LIMIT_S + 5)
        finally:
            os.close(r)
            self._reap()
        status: str
        payload: Any
        try:
            status, payload = pickle.loads(data) if data else ("error", "no answer")
        except Exception as e:  # noqa: BLE001 - a truncated or garbled answer
            status, payload = "error", f"unreadable answer ({e})"
        if status == "ok":
            plan, core_s, cpu_s, made = payload
            if made is not None:  # the child made the snapshot: its reasons, depth, time
                prep.shell_reasons, prep.depth, prep.snap_s = made
            return plan, core_s, cpu_s
        log.error("scheduling pass: the forked worker failed, computing in a thread: %s",
                  payload)
        return None

    def _reap(self) -> None:
        """Collect forked passes that have exited (a zombie is waited for at the next pass)."""
        for pid in list(self._children):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self._children.discard(pid)

    async def _apply_sliced(self, prep: Prepared, plan, core_s: float, changed: set,
                            stale: bool) -> None:
        """The starts, START_SLICE per commit, then the priorities and preemptions, as
        ``finish`` does in one; then the reasons and expected starts, REASON_SLICE jobs per
        slice (one commit each: a missed deadline ends its job). The loop is free between
        slices: the first pass after a release or a restart starts hundreds of jobs (one
        commit of them held requests for ~300 ms on 1,024 nodes), and 10,000 reasons in one
        go would hold them for tens of milliseconds. Each start is re-checked against the
        state when its slice is applied (``apply_plan``); a job changed meanwhile is left out
        of the slices after the change and keeps what its change made it (``changed`` is
        still recorded, and the next pass is requested)."""
        if stale or not plan.starts and not plan.reasons and not prep.shell_reasons:
            self.finish(prep, plan, core_s, set(changed), stale=stale)
            return
        ctl, state = self.ctl, self.ctl.state
        started: list = []
        loop_s = starts_s = 0.0
        seen = 0  # changes already taken out of the plan
        everything = plan.starts  # sliced as planned; a changed job is skipped in its slice
        for i in range(0, max(1, len(everything)), START_SLICE):
            if i:
                state.pass_changes = changed
                await asyncio.sleep(0)  # requests that arrived meanwhile are answered first
            state.pass_changes = None  # the pass's own changes are not "changed meanwhile"
            t1 = time.perf_counter()
            if len(changed) > seen:
                seen = len(changed)
                plan = without_jobs(plan, set(changed))
                ctl.request_schedule()
            chunk = [st for st in everything[i:i + START_SLICE] if st.job_id not in changed]
            last = i + START_SLICE >= len(everything)
            part = replace(plan, starts=tuple(chunk), priorities=plan.priorities if last else {})
            started += apply_plan(state, ctl.applier, part, prep.t, prep.shell_reasons,
                                  reasons=False, mail=last)
            took = time.perf_counter() - t1
            loop_s += took
            starts_s = max(starts_s, took)
        t0 = time.perf_counter()
        ctl.preempt(getattr(plan, "preemptions", ()) or (), prep.t)
        started_ids = {j.job_id for j in started}
        items = list(merged_reasons(plan, prep.shell_reasons).items())
        loop_s += time.perf_counter() - t0
        slice_s = 0.0
        for i in range(0, len(items), REASON_SLICE):
            state.pass_changes = changed
            await asyncio.sleep(0)  # requests that arrived meanwhile are answered first
            state.pass_changes = None
            t1 = time.perf_counter()
            with ctl.applier.transaction():
                apply_reasons(state, ctl.applier, plan, prep.t, dict(items[i:i + REASON_SLICE]),
                              started_ids, skip=changed)
            took = time.perf_counter() - t1
            loop_s += took
            slice_s = max(slice_s, took)
        self._record(prep, plan, core_s, loop_s, started, len(changed), False,
                     holds=(starts_s, slice_s))

    def finish(self, prep: Prepared, plan, core_s: float, changed: set, *, stale: bool) -> None:
        """Apply the plan (on the loop), minus what changed while it was computed."""
        ctl = self.ctl
        t0 = time.perf_counter()
        started: list = []
        if stale:
            ctl.request_schedule()  # the plan is dropped whole: decide again at once
        else:
            if changed:
                plan = without_jobs(plan, changed)
                ctl.request_schedule()
            started = apply_plan(ctl.state, ctl.applier, plan, prep.t, prep.shell_reasons)
            ctl.preempt(getattr(plan, "preemptions", ()) or (), prep.t)
        self._record(prep, plan, core_s, time.perf_counter() - t0, started, len(changed), stale)

    def _record(self, prep: Prepared, plan, core_s: float, apply_s: float, started: list,
                changed: int, stale: bool, holds: tuple[float, float] | None = None) -> None:
        """Statistics of one pass: the controller's, sdiag's, and the pass log. ``holds``:
        the loop's longest uninterrupted stretches while applying, (the longest slice of
        starts, the longest slice of reasons); None when the plan was applied in one go."""
        ctl = self.ctl
        loop_s = prep.loop_s + apply_s
        total_s = loop_s + core_s
        ctl.stats["cycles"] += 1
        ctl.stats["starts"] += len(started)
        ctl.stats["last_cycle_ms"] = total_s * 1000
        ctl.diag.cycle(total_s, prep.depth, plan, prep.sched_cfg.backfill, prep.t)  # type: ignore[attr-defined]
        self.seq += 1
        self.log.append({"seq": self.seq, "t": prep.t, "depth": prep.depth,
                         "planned": len(plan.starts), "starts": len(started),
                         "total_ms": round(total_s * 1000, 3),
                         "core_ms": round(core_s * 1000, 3), "loop_ms": round(loop_s * 1000, 3),
                         "prepare_ms": round(prep.loop_s * 1000, 3),
                         # making the snapshot: on the loop (part of prepare_ms) or, for a
                         # forked pass, in the child (part of pure_ms)
                         "snap_ms": round(prep.snap_s * 1000, 3),
                         # the loop held at once: preparing, one slice of starts, one slice
                         # of reasons (what a request arriving then waits for at most)
                         "starts_ms": round((apply_s if holds is None else holds[0]) * 1000, 3),
                         "slice_ms": round((0.0 if holds is None else holds[1]) * 1000, 3),
                         "changed": changed, "discarded": stale, "worker": self.used,
                         # the forked child's own compute time (core_ms adds the fork and
                         # the plan's transfer); None when the pass ran in this process
                         "pure_ms": None if self.pure_s is None else round(self.pure_s * 1000, 3),
                         # the CPU time of the core (its thread's, or the child's process):
                         # what decides where the next pass is computed (SMALL_PASS_S)
                         "cpu_ms": round(self._cpu_s * 1000, 3)})
        self.pure_s = None


_CHILD_RESETS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD)
_MAX_FD = os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 65536


def _child_pass(prep: Prepared, state, r: int, w: int, mask) -> None:
    """The forked pass: make the snapshot of the inherited ``state`` unless ``prep`` has one,
    compute the plan, write it pickled to ``w`` as ("ok", (plan, seconds, CPU seconds, made))
    — ``made``:
    (the shell's reasons, depth, seconds making the snapshot) when made here, else None — or
    ("error", traceback), exit. Nothing of the controller's runs here: no handler, no store
    (the snapshot is a pure read of the state in memory), no logging; ``os._exit`` skips
    every finaliser. Every inherited descriptor but ``w`` and the standard ones is closed
    first: the listening sockets (a controller restarted meanwhile binds its ports at once),
    the agents' and clients' connections (a peer sees the controller's end when it ends), the
    store's connection."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)  # a signal to the child must not wake the parent's loop
        for sig in _CHILD_RESETS:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.alarm(CHILD_LIMIT_S)  # the default action ends the child
        gc.disable()  # nothing lives long enough here to need collecting
        os.closerange(3, w)  # r among them
        os.closerange(w + 1, _MAX_FD)
        try:
            t0, c0 = time.perf_counter(), time.process_time()
            made = None
            if prep.snap is None:
                prep.fill(state)
                made = (prep.shell_reasons, prep.depth, prep.snap_s)
            plan = schedule(prep.snap, prep.sched_cfg)  # type: ignore[arg-type]
            out: tuple = ("ok", (plan, time.perf_counter() - t0, time.process_time() - c0,
                                 made))
        except BaseException:  # noqa: BLE001 - reported to the parent, which logs it
            out = ("error", traceback.format_exc(limit=30))
        view = memoryview(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))
        while view:
            view = view[os.write(w, view):]
        code = 0
    finally:
        os._exit(code)


async def _read_to_end(fd: int, limit_s: float) -> bytes:
    """Everything written to the pipe ``fd`` until its writer closed it; what came within
    ``limit_s`` seconds if the writer never closes it."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    chunks: list[bytes] = []
    done = loop.create_future()

    def readable() -> None:
        try:
            while True:
                b = os.read(fd, 1 << 20)
                if not b:
                    break
                chunks.append(b)
        except BlockingIOError:
            return
        except OSError:
            pass
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await asyncio.wait_for(done, limit_s)
    except TimeoutError:
        log.error("scheduling pass: the forked worker did not answer in %.0f s", limit_s)
        chunks.clear()
    finally:
        loop.remove_reader(fd)
    return b"".join(chunks)


def without_jobs(plan, jobs: set):
    """The plan less every decision about ``jobs`` (changed while it was computed)."""
    keep = [s for s in plan.starts if s.job_id not in jobs]
    return replace(
        plan, starts=tuple(keep),
        reasons={j: r for j, r in plan.reasons.items() if j not in jobs},
        expected_start={j: v for j, v in plan.expected_start.items() if j not in jobs},
        sched_nodes={j: v for j, v in plan.sched_nodes.items() if j not in jobs},
        priorities={j: v for j, v in plan.priorities.items() if j not in jobs},
        preemptions=tuple(p for p in plan.preemptions if p.preemptor not in jobs))
