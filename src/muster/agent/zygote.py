"""A small process that forks the per-job supervisors and step daemons for the agent.

Forking costs in proportion to the parent's memory: the agent (asyncio, msgspec, its state) is
~25 MB and a fork of it costs ~1 ms of CPU in the child plus the page-table copy in the parent.
The zygote is forked from the agent *before* those imports (~10 MB) and does nothing but
fork on request, so a job's supervisor starts several times cheaper.

Protocol (a SOCK_SEQPACKET socketpair, one datagram per message):
  agent → zygote  {"kind": "batch"|"step", "spool": dir, "node": name}
  zygote → agent  {"pid": pid} with a descriptor attached (SCM_RIGHTS), or {"error": text}
  agent → zygote  {"free": pid}   (no answer) the agent has handled the end of that batch
                                  supervisor's job: it may take another
The descriptor becomes readable when the job is over: for a step daemon it is a pidfd
(opened before the zygote can reap the child, so even a daemon that has already finished is
followed correctly); for a batch supervisor the read end of a pipe whose only write end the
supervisor holds and closes after writing the job's status.json (or loses by dying).
The launch description is read from ``<spool>/launch.json``, which the agent wrote first.

Batch supervisors are reused (muster.agent.supervisor.run_pooled): one that finished a job
waits on its own channel to the zygote, which hands it the next batch launch instead of
forking, once the agent has said ``free`` (so no signal the agent sends for the old job can
reach the new one). The zygote alone ends a supervisor's service, by closing its channel:
after MAX_JOBS jobs, beyond MAX_IDLE idle ones, after IDLE_S without work, or when the
agent's end closes and the zygote exits (running supervisors finish their job first; after a
restart the agent follows them by pidfd, and they exit at their job's end).
Supervisors are the zygote's children (it reaps them). When the agent's end closes, the
zygote exits.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import time


def start() -> tuple[socket.socket, int]:
    """Fork the zygote; return the agent's end of the channel and the zygote's pid."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        a.close()
        try:
            _serve(b)
        finally:
            os._exit(0)
    b.close()
    return a, pid


def _warm_up() -> None:
    """Load what supervisors import lazily (subprocess, locale, the codecs behind text-mode
    open()) once here, instead of in every forked supervisor: ~4 ms of CPU per job otherwise."""
    import subprocess
    import tempfile
    subprocess.Popen(["/bin/true"], start_new_session=True, close_fds=True).wait()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "warm.json")
        with open(path, "w") as fh:
            json.dump({"warm": True}, fh)
        with open(path) as fh:
            json.load(fh)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.close()
    import selectors
    selectors.DefaultSelector().close()


MAX_JOBS = 200   # jobs one pooled supervisor runs before it is retired
MAX_IDLE = 32    # idle supervisors kept; more are retired at once
IDLE_S = 60.0    # an idle supervisor retires after this long without a job


class _Pool:
    """The batch supervisors this zygote forked: our end of each one's channel, how many jobs
    each was given, and which are idle (LIFO: the most recently used is the warmest)."""

    def __init__(self) -> None:
        self.chans: dict[int, socket.socket] = {}
        self.jobs: dict[int, int] = {}
        self.idle: list[tuple[int, float]] = []  # (pid, idle since)
        self.gone: set[int] = set()  # reaped: never handed a job again

    def retire(self, pid: int) -> None:
        chan = self.chans.pop(pid, None)
        self.jobs.pop(pid, None)
        self.gone.discard(pid)
        if chan is not None:
            chan.close()  # it reads the end of its channel and exits

    def free(self, pid: int, now: float) -> None:
        """The agent handled the end of ``pid``'s job."""
        if pid not in self.chans:
            return  # not ours (adopted after a restart), or retired
        if pid in self.gone or self.jobs[pid] >= MAX_JOBS or len(self.idle) >= MAX_IDLE:
            self.retire(pid)
        else:
            self.idle.append((pid, now))

    def expire(self, now: float) -> None:
        while self.idle and now - self.idle[0][1] > IDLE_S:
            self.retire(self.idle.pop(0)[0])

    def hand_over(self, req: dict, done_w: int) -> int | None:
        """Give the job to an idle supervisor; its pid, or None when none could take it (a
        dead one's channel refuses the send: EPIPE)."""
        body = json.dumps({"spool": req["spool"], "node": req["node"]}).encode()
        while self.idle:
            pid, _since = self.idle.pop()
            if pid in self.gone:
                self.retire(pid)
                continue
            try:
                socket.send_fds(self.chans[pid], [body], [done_w])
            except OSError:
                self.retire(pid)
                continue
            self.jobs[pid] += 1
            return pid
        return None


def _serve(chan: socket.socket) -> None:
    # imported here, in the zygote only, so that every supervisor starts with them loaded
    from muster.agent import confine, stepd, supervisor
    confine.protect_daemon()  # -1000: the OOM killer never takes the zygote (supervisors inherit it)
    _warm_up()
    pool = _Pool()

    def reap(signum, frame):
        try:
            while True:
                pid = os.waitpid(-1, os.WNOHANG)[0]
                if pid <= 0:
                    break
                if pid in pool.chans:
                    pool.gone.add(pid)
        except ChildProcessError:
            pass
    signal.signal(signal.SIGCHLD, reap)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)  # the agent's stop must not stop the zygote mid-fork
    import gc
    gc.collect()
    gc.freeze()
    while True:
        ready, _, _ = select.select([chan], [], [], IDLE_S / 4 if pool.idle else None)
        pool.expire(time.monotonic())
        if not ready:
            continue
        try:
            data = chan.recv(65536)
        except InterruptedError:
            continue
        if not data:
            return
        _handle(chan, data, pool, supervisor, stepd)


def _handle(chan: socket.socket, data: bytes, pool: _Pool, supervisor, stepd) -> None:
    """One message of the agent: a ``free``, or a start (answered: pid and descriptor)."""
    fd = -1
    try:
        req = json.loads(data)
        if "free" in req:
            pool.free(int(req["free"]), time.monotonic())
            return
        if req["kind"] == "batch":
            pid, fd = _start_batch(chan, req, pool, supervisor)
        else:
            pid, fd = _start_step(chan, req, stepd)
        try:
            socket.send_fds(chan, [json.dumps({"pid": pid}).encode()], [fd])
        finally:
            os.close(fd)
        return
    except Exception as exc:  # noqa: BLE001 - answer, never die
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        reply = {"error": f"{type(exc).__name__}: {exc}"}
    chan.send(json.dumps(reply).encode())


def _start_batch(chan: socket.socket, req: dict, pool: _Pool, supervisor) -> tuple[int, int]:
    """A batch supervisor for ``req``: an idle one, else a new fork. Returns its pid and the
    read end of the job's end pipe (the supervisor holds the only write end)."""
    r, w = os.pipe2(os.O_CLOEXEC)
    try:
        pid = pool.hand_over(req, w)
        if pid is None:
            mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            pid = os.fork()
            if pid == 0:
                chan.close()
                mine.close()
                os.close(r)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                supervisor.run_pooled(req["spool"], req["node"], w, theirs)
                os._exit(1)  # not reached
            theirs.close()
            pool.chans[pid], pool.jobs[pid] = mine, 1
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    return pid, r


def _start_step(chan: socket.socket, req: dict, stepd) -> tuple[int, int]:
    """A step daemon for ``req`` (a fork per step); its pid and a pidfd of it."""
    with open(os.path.join(req["spool"], "launch.json")) as fh:
        launch = json.load(fh)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    pid = os.fork()
    if pid == 0:
        chan.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        stepd.run_stepd(req["spool"], launch, req["node"])
        os._exit(1)  # not reached
    pidfd = os.pidfd_open(pid)  # SIGCHLD is blocked: the child cannot be reaped yet
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
    return pid, pidfd
