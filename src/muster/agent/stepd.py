"""Step daemon: a forked copy of the agent that runs one job step's tasks on one node.

Like the batch supervisor it outlives an agent restart. It starts the node's tasks (each as the
job's user, in its own session, with its rank environment), connects to srun's I/O port and
authenticates it with the step's key before sending anything (muster.common.iostream: mutual
proof, then every frame sealed), forwards each task's stdout/stderr, feeds stdin to the
chosen task(s), relays signals srun sends, and reports every task's exit status — to srun over
the stream, and to the agent through ``status.json`` in its spool directory.

``srun --pty``: task 0 runs on a pseudo-terminal (:meth:`_StepD._start_on_pty`): the slave is its
stdin/stdout/stderr and its controlling terminal, the master is read like an output pipe
(STDOUT frames), STDIN frames are written to it and WINSIZE frames resize it. The other tasks
get /dev/null for stdin, stdout and stderr (Slurm's ``--pty`` semantics).

If srun's connection cannot be opened or is lost, the tasks are killed: nobody could see their
output or collect their status (Slurm kills such steps too).
"""

from __future__ import annotations

import fcntl
import grp
import json
import os
import selectors
import signal
import subprocess
import socket
import struct
import termios
import time

from muster.agent import acctgather, confine, oci, taskprolog
from muster.agent.cgroup import CgroupError
from muster.agent.supervisor import _AsUser, forked_main, user_open, write_json_atomic
from muster.agent.workdir import WORKDIR, workdir_args
from muster.common import cpubind, rlimits
from muster.common import iostream as io
from muster.common.linkauth import (HANDSHAKE_TIMEOUT, PRE_AUTH_MAX_FRAME, Initiator,
                                     LinkAuthError, Sealer)
from muster.common.patterns import expand_pattern
from muster.common.torchenv import TORCH_MARKER, torch_marker

HOLD_MAX = 1 << 20  # output bytes held for srun while it has not proved itself yet
PTY_FEED_MAX = 1 << 20  # typed bytes queued for a pty whose task does not read; more are dropped
WHY_TEXT = {"cancel": "", "timeout": " DUE TO TIME LIMIT", "node_fail": " DUE TO NODE FAILURE",
            "requeue": " DUE TO JOB REQUEUE", "preempt": " DUE TO PREEMPTION"}


def run_stepd(spool: str, L: dict, node: str) -> None:
    """Entry point in the forked child. Never returns."""
    forked_main(spool, lambda: _StepD(spool, L, node).run())


class _Task:
    """One task. ``tty``: it runs on a pty whose master is ``out`` (while open); ``feed``: stdin
    bytes the master has not taken yet."""

    __slots__ = ("tid", "local", "pid", "pidfd", "out", "err", "inp", "status", "sig", "tty",
                 "feed", "oom", "report", "launch_error")
    pid: int | None     # set when started (with pidfd)
    pidfd: int | None
    out: int | None     # pipe/pty fds, None once closed
    err: int | None
    inp: int | None
    status: int | None  # exit status, once reaped

    def __init__(self, tid: int, local: int):
        self.tid, self.local = tid, local
        self.pid = self.pidfd = self.out = self.err = self.inp = None
        self.status = None
        self.sig = 0
        self.tty = False
        self.feed = bytearray()
        self.oom = False  # the OOM killer took a process of this task (its cgroup says so)
        self.report: oci.LaunchReport | None = None  # a container task's launch report channel
        self.launch_error: str | None = None  # its container could not start: why


class _StepD:
    def __init__(self, spool: str, L: dict, node: str):
        self.spool, self.L, self.node = spool, L, node
        self.sel = selectors.DefaultSelector()
        self.tasks: list[_Task] = []
        self.sock: socket.socket | None = None
        self.outbuf = bytearray()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        self.term_requested = False
        self.signals_requested = False  # SIGUSR2: the agent queued signals in ``signals``
        self.sig_offset = 0  # how much of ``signals`` has been delivered
        self.kill_at: float | None = None
        self.why: str | None = None
        self.drain_until: float | None = None  # set once every task has exited
        self.acct = acctgather.sampler_for(L)  # the step's usage on this node (None: off)
        self.cg: confine.StepCgroup | None = None  # the step's cgroup here (None: unconfined)
        self.cg_error: str | None = None  # why it could not be made: every task fails
        self.cg_final: dict = {}  # what StepCgroup.finish found (OOM kills, usage)

    def _wake(self) -> None:
        try:
            os.write(self.wake_w, b"x")
        except OSError:
            pass

    def _on_term(self, signum, frame):
        self.term_requested = True
        self._wake()

    def _on_signals(self, signum, frame):
        """SIGUSR2 from the agent (Agent.signal_step): signals for the tasks are queued."""
        self.signals_requested = True
        self._wake()

    def _deliver_signals(self) -> None:
        """Send the signals queued in ``signals`` since the last call, in order, to the process
        group of every task still running (scancel --signal, --signal warnings: each task's
        whole group, as Slurm signals a step's processes). A line still being written waits
        for the next call."""
        self.signals_requested = False
        try:
            with open(os.path.join(self.spool, "signals"), "rb") as fh:
                fh.seek(self.sig_offset)
                data = fh.read()
        except OSError:
            return  # nothing queued yet
        data = data[:data.rfind(b"\n") + 1]
        self.sig_offset += len(data)
        for word in data.split():
            sig = int(word) if word.isdigit() and len(word) < 3 else 0
            if 0 < sig < 65:
                for t in self.tasks:
                    if t.status is None:
                        _killpg(t.pid, sig)

    # ---- set-up ---------------------------------------------------------------------------
    def run(self) -> None:
        signal.signal(signal.SIGTERM, self._on_term)
        # before super.pid: the agent pokes us with SIGUSR2 only once that file exists
        signal.signal(signal.SIGUSR2, self._on_signals)
        with open(os.path.join(self.spool, "super.pid"), "w") as fh:
            fh.write(str(os.getpid()))
        self.start = time.time()
        self._connect()
        try:
            self.cg = confine.StepCgroup.for_launch(self.L, self.L["step_id"])
        except (CgroupError, OSError) as exc:
            self.cg_error = f"cannot create the step's cgroup: {exc}"
        if self.cg is not None and self.acct is not None:
            self.acct.follow_cgroup(self.cg)  # task K's processes: those of its cgroup
        for local, tid in enumerate(self.L["tasks"]):
            self._spawn(_Task(tid, local))
        with open(os.path.join(self.spool, "job.pid"), "w") as fh:
            fh.write(" ".join(str(t.pid) for t in self.tasks if t.pid))
        self.sel.register(self.wake_r, selectors.EVENT_READ, ("wake", None))
        self._deliver_signals()  # any queued before super.pid existed (no SIGUSR2 for them)
        self._loop()
        # srun's --task-epilog first, then slurm.conf's TaskEpilog, as slurmstepd orders them
        epilog_errors = [why for t in self.tasks for key in ("user_task_epilog", "task_epilog")
                         if (why := taskprolog.run_task_epilog(
                             self.L, task_env(self.L["env"], self.L, t.local, t.tid), t.pid,
                             self.L["cwd"], key))]
        status = {"job_id": self.L["job_id"], "step_id": self.L["step_id"], "run": self.L.get("run", 0),
                  "node": self.node, "tasks": [{"task": t.tid, "exit_code": t.status or 0,
                                                "signal": t.sig} for t in self.tasks],
                  "start_time": int(self.start), "end_time": int(time.time()),
                  "terminated": self.why}
        if self.cg_final.get("oom_kills"):
            status["oom_kills"] = self.cg_final["oom_kills"]
        if self.acct is not None:
            status["usage"] = self.acct.report()
        if epilog_errors:
            status["task_epilog_error"] = epilog_errors[0]  # a TaskEpilog failure is only reported
        failed = [t for t in self.tasks if t.launch_error]
        if failed:  # a container that could not start: the step's record says why
            status["launch_failed"] = True
            status["launch_error"] = f"task {failed[0].tid}: {failed[0].launch_error}"
        write_json_atomic(os.path.join(self.spool, "status.json"), status)

    def _connect(self) -> None:
        """Connect to srun and start iostream's handshake: send our hello (a nonce, nothing
        secret). The tasks start meanwhile, but until srun has proved it holds the step's key
        (:meth:`_srun_proved`) nothing else is sent — frames wait, unsealed, in ``held`` — and
        nothing it sends is acted on; a peer that cannot prove it is a lost srun."""
        self.sealer: Sealer | None = None
        self.held: list[bytes] = []
        self.held_bytes = 0
        io_ = self.L.get("io")
        if not io_:
            return
        claims = {"job": self.L["job_id"], "step": self.L["step_id"], "node": self.node,
                  "tasks": self.L["tasks"]}
        self.decoder = io.Decoder()
        s = None
        try:
            self.hs = Initiator([io.step_key(io_.get("key"))], io.ROLE, claims)
            s = _connect(io_["host"], io_["port"])
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall(io.hello(self.hs.hello()))
        except (OSError, ValueError):
            if s is not None:
                s.close()
            self.sock = None
            self.lost = True
            return
        s.setblocking(False)
        self.hs_deadline = time.monotonic() + HANDSHAKE_TIMEOUT
        self.sock = s
        self.sel.register(s, selectors.EVENT_READ, ("srun", None))

    def _srun_proved(self) -> bool:
        """Complete the handshake if srun's proof has arrived: check it (LinkAuthError if it
        fails), send ours, then everything held, sealed. False: not arrived yet."""
        frame = self.decoder.next_frame()
        if frame is None:
            return False
        kind, _, payload = frame
        if kind != io.HELLO:
            raise LinkAuthError("expected srun's proof")
        self.outbuf += io.hello(self.hs.answer(io.message(payload)))
        self.sealer, self.decoder.opener = self.hs.pair()
        self.decoder.limit = io.MAX_PAYLOAD
        assert self.sock is not None  # the handshake runs on the connection to srun
        self.sock.setblocking(False)
        for data in self.held:
            self.outbuf += data
            self.outbuf += self.sealer.tag(data)
        self.held.clear()
        self._flush()
        return True

    def _await_srun(self) -> None:
        """Block until srun has proved itself, at most until the handshake's deadline."""
        assert self.sock is not None  # the handshake runs on the connection to srun
        try:
            while not self._srun_proved():
                left = self.hs_deadline - time.monotonic()
                if left <= 0:
                    raise LinkAuthError("srun did not prove itself in time")
                self.sock.settimeout(left)
                data = self.sock.recv(PRE_AUTH_MAX_FRAME)
                if not data:
                    raise LinkAuthError("srun closed the connection during the handshake")
                self.decoder.feed(data)
        except (OSError, ValueError, LinkAuthError):
            self._lost_srun()

    def _spawn(self, t: _Task) -> None:
        L = self.L
        env = task_env(L["env"], L, t.local, t.tid)
        if self.cg_error is not None:
            self._send(io.pack(io.STDERR, t.tid, f"slurmstepd-{self.node}: error: "
                                                 f"{self.cg_error}\n".encode()))
            pid, out_r, err_r, in_w = None, None, None, None
        else:
            pid, out_r, err_r, in_w = self._start(t, env)
        if self.acct is not None:
            self.acct.add(t.tid, pid)
        if pid is None:  # could not even start the wrapper: report the task as failed
            pid = os.fork()
            if pid == 0:
                os._exit(2)
        t.pid = pid
        t.pidfd = pidfd = os.pidfd_open(pid)
        self.sel.register(pidfd, selectors.EVENT_READ, ("exit", t))
        if out_r is not None:
            os.set_blocking(out_r, False)
            t.out = out_r
            self.sel.register(out_r, selectors.EVENT_READ, ("out", t))
        if err_r is not None:
            os.set_blocking(err_r, False)
            t.err = err_r
            self.sel.register(err_r, selectors.EVENT_READ, ("err", t))
        t.inp = in_w
        self.tasks.append(t)

    def _start(self, t: _Task, env: dict):
        """Start the task on a pty (task 0 of ``--pty``) or on pipes: what those return. A
        container task gets its launch report channel (oci.LaunchReport), read once reaped."""
        if oci.wanted(env):
            t.report = oci.LaunchReport.make()
        try:
            if self.L.get("pty") and t.tid == 0:
                return self._start_on_pty(t, env)
            return self._start_on_pipes(t, env)
        finally:
            if t.report is not None:
                t.report.started()  # the task has its copy of the write end, or never started

    def _task_files(self, t: _Task) -> dict:
        """The task's -o/-e/-i files, expanded. In a --pty step every task but task 0 (which has
        the pty) gets /dev/null for all three, as with Slurm."""
        L = self.L
        if L.get("pty"):
            return dict.fromkeys(("output", "error", "input"), "/dev/null")
        files = {}
        for key in ("output", "error", "input"):
            pat = L.get(key)
            only = L.get(f"{key}_task")
            if key == "error" and only is None and not pat:
                only = L.get("output_task")  # stderr follows -o N unless -e says otherwise
            if only is not None and only != t.tid:
                pat = "/dev/null"  # -o/-e N: only task N's stream goes to srun
            if pat:
                files[key] = expand_pattern(pat, job_id=L["job_id"], array_job_id=L.get("array_job_id"),
                                            array_task_id=L.get("array_task_id"), user=L["user"],
                                            name=L.get("job_name", ""), node=self.node,
                                            step=str(L["step_id"]), task=t.tid,
                                            node_index=L.get("node_index", 0))
        return files

    def _start_on_pipes(self, t: _Task, env: dict):
        """Start a task whose stdio are its files or pipes to us: (pid or None, read end of
        its stdout, of its stderr, write end of its stdin), each None when not ours."""
        L = self.L
        out_r = out_w = err_r = err_w = in_r = in_w = None
        files = self._task_files(t)
        if "output" not in files:
            out_r, out_w = os.pipe()
        if "error" not in files and not L.get("error_to_output"):
            err_r, err_w = os.pipe()
        target = L.get("stdin_target", 0)
        wants_stdin = "input" not in files and (target == "all" or target == t.tid)
        if wants_stdin:
            in_r, in_w = os.pipe()
        pid = _start_task(L, env, files, out_w, err_w, in_r, self.node, step=self.cg,
                          report=t.report)
        for fd in (out_w, err_w, in_r):
            if fd is not None:
                os.close(fd)
        return pid, out_r, err_r, in_w

    def _start_on_pty(self, t: _Task, env: dict):
        """Start task 0 of a --pty step on a new pseudo-terminal: (pid or None, master, None,
        None); the master is its output and takes its input (:meth:`_feed_pty`).

        Security: openpty() hands out both ends as descriptors (no path the user controls is
        followed) and opens the slave O_NOCTTY, so it never becomes the step daemon's
        controlling terminal. The slave is given to the job's user as login does (owner, group
        tty, 0620): the task's wrapper reopens it through /proc/self/fd/0 — as the user, a
        session leader, without O_NOCTTY — which makes it the task's controlling terminal
        (job control, ^C/^Z through the line discipline). Our copy is closed once the task
        holds it, so the master reads EOF (EIO) when the task's session is gone. The initial
        size comes from srun's SLURM_PTY_WIN_ROW/COL, as with Slurm."""
        try:
            master, slave = os.openpty()
        except OSError as exc:  # out of ptys or descriptors: the task fails, saying why
            self._send(io.pack(io.STDERR, t.tid, f"slurmstepd-{self.node}: error: openpty: "
                                                 f"{exc.strerror}\n".encode()))
            return None, None, None, None
        try:
            self._own_tty(slave)
            _set_winsize(master, _env_size(env, "SLURM_PTY_WIN_ROW"),
                         _env_size(env, "SLURM_PTY_WIN_COL"))
            pid = _start_task(self.L, env, {}, slave, slave, slave, self.node, ctty=True,
                              step=self.cg, report=t.report)
        except OSError as exc:
            os.write(slave, f"slurmstepd-{self.node}: error: {exc}\r\n".encode())
            pid = None
        finally:
            os.close(slave)
        t.tty = True
        return pid, master, None, None

    def _own_tty(self, fd: int) -> None:
        """Give the slave to the job's user (fchown/fchmod: through the descriptor)."""
        if os.getuid() != 0:
            return
        try:
            gid, mode = grp.getgrnam("tty").gr_gid, 0o620
        except KeyError:
            gid, mode = self.L["gid"], 0o600
        os.fchown(fd, self.L["uid"], gid)
        os.fchmod(fd, mode)

    # ---- main loop -----------------------------------------------------------------------------
    def _send(self, data: bytes, payload: bytes = b"") -> None:
        """Queue one frame — ``io.pack``'s output, or a head (``io.HEAD``) and its ``payload``
        apart, which spares bulk output a copy — sealed: followed by its tag, one HMAC over the
        bytes as queued. Then write what the socket takes now. Before srun has proved itself
        the frame is held; we wait for that proof when this is the last frame (DONE), when too
        much is held, or once the handshake's time is up."""
        if self.sock is None:
            return
        if self.sealer is None:
            self.held.append(data + payload)
            self.held_bytes += len(data) + len(payload)
            if data[0] == io.DONE or self.held_bytes > HOLD_MAX or \
                    time.monotonic() > self.hs_deadline:
                self._await_srun()
            return
        out = self.outbuf
        frame_at = len(out)
        out += data
        out += payload
        with memoryview(out) as view:
            tag = self.sealer.tag(view[frame_at:])
        out += tag
        self._flush()

    def _flush(self) -> None:
        while self.outbuf and self.sock is not None:
            try:
                n = self.sock.send(self.outbuf)
            except BlockingIOError:
                try:
                    self.sel.modify(self.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, ("srun", None))
                except (KeyError, ValueError):
                    pass
                return
            except OSError:
                self._lost_srun()
                return
            del self.outbuf[:n]
        if self.sock is not None:
            try:
                self.sel.modify(self.sock, selectors.EVENT_READ, ("srun", None))
            except (KeyError, ValueError):
                pass

    def _lost_srun(self) -> None:
        if self.sock is not None:
            try:
                self.sel.unregister(self.sock)
            except (KeyError, ValueError):
                pass
            self.sock.close()
            self.sock = None
            self.outbuf.clear()
        if any(t.status is None for t in self.tasks) and self.why is None:
            self._begin_kill("cancel", quiet=True)

    def _begin_kill(self, why: str, quiet: bool = False) -> None:
        self.why = why
        if not quiet and why != "srun":
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
            msg = (f"slurmstepd: error: *** STEP {self.L['job_id']}.{self.L['step_id']} ON {self.node} "
                   f"CANCELLED AT {stamp}{WHY_TEXT.get(why, '')} ***\n").encode()
            self._send(io.pack(io.STDERR, self.L["tasks"][0], msg))
        live = {t.pid for t in self.tasks if t.status is None and t.pid is not None}
        for pgid in live:
            _killpg(pgid, signal.SIGCONT)
            _killpg(pgid, signal.SIGTERM)
        # what left the tasks' sessions (setsid) gets it too: the rest of the step's cgroup
        confine.signal_step(self.cg, signal.SIGCONT, signal.SIGTERM, spared_pgids=live)
        self.kill_at = time.time() + self.L.get("kill_wait", 30)

    def _done(self) -> bool:
        return all(t.status is not None and t.out is None and t.err is None for t in self.tasks)

    def _loop(self) -> None:
        lost_at_start = self.L.get("io") and self.sock is None
        if lost_at_start:
            self._begin_kill("srun", quiet=True)
        while not self._done():
            deadlines = [d for d in (self.kill_at, self.drain_until,
                                     self.acct.next_due if self.acct else None) if d is not None]
            timeout = max(0.0, min(deadlines) - time.time()) if deadlines else None
            for key, mask in self.sel.select(timeout):
                kind, t = key.data
                if kind == "out" or kind == "err":
                    if mask & selectors.EVENT_WRITE:
                        self._feed_pty(t)  # a pty's master: typed input it can take now
                    if mask & selectors.EVENT_READ:
                        self._pump(t, kind)
                elif kind == "exit":
                    self._reap(t)
                elif kind == "srun":
                    if mask & selectors.EVENT_WRITE:
                        self._flush()
                    if mask & selectors.EVENT_READ:
                        self._from_srun()
                elif kind == "wake":
                    os.read(self.wake_r, 64)
            if self.signals_requested:
                self._deliver_signals()
            if self.acct is not None and self.acct.due():
                self.acct.sample()
                self.acct.write(self.spool)
            if self.term_requested and self.why is None:
                self.term_requested = False
                self._begin_kill(self._read_reason())
            if self.kill_at is not None and time.time() >= self.kill_at:
                for t in self.tasks:
                    if t.status is None:
                        _killpg(t.pid, signal.SIGKILL)
                confine.signal_step(self.cg, signal.SIGKILL)
                self.kill_at = None
            if self.drain_until is None and all(t.status is not None for t in self.tasks):
                # every task has exited: what is left in their sessions (a background child
                # holding stdout open) dies with the step, as in Slurm's step container; then
                # the pipes reach EOF once their buffered output has been read
                for t in self.tasks:
                    _kill_leftovers(t)
                if self.cg is not None:
                    self.cg.kill()  # and what left them (setsid): its pipes close too
                self.drain_until = time.time() + 5
            elif self.drain_until is not None and time.time() >= self.drain_until:
                # a process that left the task's session still holds a pipe: stop waiting
                for t in self.tasks:
                    if t.out is None and t.err is None:
                        continue  # its EXIT frame is already out
                    for kind in ("out", "err"):
                        fd = t.out if kind == "out" else t.err
                        if fd is not None:
                            self.sel.unregister(fd)
                            os.close(fd)
                            setattr(t, kind, None)
                    self._maybe_exit_frame(t)
        for t in self.tasks:
            _kill_leftovers(t)  # leftovers in the tasks' sessions
        self._finish_cgroup()
        self._send(io.pack(io.DONE, 0, json.dumps({"node": self.node}).encode()))
        if self.sock is not None:
            self.sock.setblocking(True)
            try:
                self.sock.sendall(bytes(self.outbuf))
                self.sock.shutdown(socket.SHUT_WR)
                self.sock.settimeout(5)
                while self.sock.recv(65536):
                    pass
            except OSError:
                pass
            self.sock.close()

    def _read_reason(self) -> str:
        try:
            with open(os.path.join(self.spool, "terminate")) as fh:
                return fh.read().strip() or "cancel"
        except OSError:
            return "cancel"

    def _finish_cgroup(self) -> None:
        """The step is over on this node: nothing of it survives (double-forked daemons
        included), and OOM kills in its cgroup are reported as Slurm does: a line on srun's
        stderr, and ``oom_kills`` in the status (the step ends OUT_OF_MEMORY)."""
        if self.cg is None:
            return
        self.cg_final = self.cg.finish()
        n = self.cg_final.get("oom_kills", 0)
        if n:
            line = confine.oom_line(self.L["job_id"], str(self.L["step_id"]), n)
            self._send(io.pack(io.STDERR, self.L["tasks"][0], line.encode()))

    def _pump(self, t: _Task, kind: str) -> None:
        fd = t.out if kind == "out" else t.err
        assert fd is not None  # registered only while open
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self._send(io.HEAD.pack(io.STDOUT if kind == "out" else io.STDERR, t.tid, len(data)),
                       data)
            return
        self.sel.unregister(fd)
        os.close(fd)
        if kind == "out":
            t.out = None
        else:
            t.err = None
        self._maybe_exit_frame(t)

    def _reap(self, t: _Task) -> None:
        assert t.pid is not None and t.pidfd is not None  # reaped only once started
        self.sel.unregister(t.pidfd)
        os.close(t.pidfd)
        _, ws, rusage = os.wait4(t.pid, 0)
        if self.acct is not None:
            self.acct.exited(t.local, rusage)
        if os.WIFSIGNALED(ws):
            t.status, t.sig = 0, os.WTERMSIG(ws)
        else:
            t.status = os.WEXITSTATUS(ws)
        t.oom = self.cg is not None and self.cg.oom_kills(t.local) > 0
        if t.report is not None:
            t.launch_error = t.report.reason(t.status, t.sig)
            t.report = None
        if t.inp is not None:
            os.close(t.inp)
            t.inp = None
        self._maybe_exit_frame(t)

    def _maybe_exit_frame(self, t: _Task) -> None:
        if t.status is not None and t.out is None and t.err is None:
            exit_: dict[str, int | bool | str] = {"exit_code": t.status, "signal": t.sig}
            if t.oom:
                exit_["oom"] = True  # srun says "Out Of Memory"
            if t.launch_error:
                exit_["launch_error"] = t.launch_error  # srun says "task N launch failed: ..."
            self._send(io.pack(io.EXIT, t.tid, json.dumps(exit_).encode()))

    def _from_srun(self) -> None:
        assert self.sock is not None  # registered only while connected
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._lost_srun()
            return
        self.decoder.feed(data)
        try:
            if self.sealer is None and not self._srun_proved():
                return
            # each frame's tag is checked before it is acted on; one that fails (forged,
            # replayed, reordered, injected) ends the connection like a lost srun
            for kind, task, payload in self.decoder.frames():
                if kind == io.STDIN or kind == io.STDIN_EOF:
                    self._stdin(kind, task, payload)
                elif kind == io.SIGNAL:
                    self._signal_from_srun(payload)
                elif kind == io.WINSIZE:
                    self._resize(*io.winsize_of(payload))
        except (ValueError, LinkAuthError):
            self._lost_srun()

    def _stdin(self, kind: int, task: int, payload: bytes) -> None:
        for t in self.tasks:
            if t.tty and kind == io.STDIN and (task == io.ALL_TASKS or task == t.tid):
                # a terminal has no end of input: ^D typed by the user is one more byte
                self._feed_pty(t, payload)
            elif t.inp is not None and (task == io.ALL_TASKS or task == t.tid):
                if kind == io.STDIN_EOF:
                    os.close(t.inp)
                    t.inp = None
                else:
                    try:
                        os.write(t.inp, payload)
                    except OSError:
                        pass

    def _feed_pty(self, t: _Task, data: bytes = b"") -> None:
        """Write typed input to a pty's master without ever blocking the step daemon: what it
        does not take now waits in ``t.feed`` (at most PTY_FEED_MAX bytes: a task that never
        reads its terminal loses the excess, as keystrokes into a full tty queue would) and
        the master is watched for writability until that is written."""
        fd = t.out
        if not t.tty or fd is None:
            return  # the terminal is gone
        if data:
            t.feed += data[:max(0, PTY_FEED_MAX - len(t.feed))]
        while t.feed:
            try:
                n = os.write(fd, t.feed)
            except BlockingIOError:
                break
            except OSError:
                t.feed.clear()
                break
            del t.feed[:n]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if t.feed else 0)
        if self.sel.get_key(fd).events != events:
            self.sel.modify(fd, events, ("out", t))

    def _resize(self, rows: int, cols: int) -> None:
        """srun's terminal changed size: resize the pty (the kernel sends SIGWINCH to the
        task's foreground process group)."""
        for t in self.tasks:
            if t.tty and t.out is not None:
                _set_winsize(t.out, rows, cols)

    def _signal_from_srun(self, payload: bytes) -> None:
        msg = json.loads(payload)
        sig = msg.get("signal") if isinstance(msg, dict) else None
        if isinstance(sig, bool) or not isinstance(sig, int) or not 0 < sig < 65:
            raise ValueError("bad signal frame")
        if sig == signal.SIGKILL and self.why is None:
            if msg.get("abort") is True:  # srun -W gives up on the step: SIGKILL, no SIGTERM
                for t in self.tasks:
                    if t.status is None:
                        _killpg(t.pid, signal.SIGKILL)
            self._begin_kill("cancel")
        for t in self.tasks:
            if t.status is None:
                _killpg(t.pid, sig)


def _connect(host: str, port: int) -> socket.socket:
    """Connect to srun. A numeric address skips getaddrinfo: socket.create_connection costs
    ~4 ms of CPU in a freshly forked process (resolver set-up), most of a step daemon's work."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(10)
        try:
            s.connect((host, port))
        except OSError:
            s.close()
            raise
        return s
    return socket.create_connection((host, port), timeout=10)


def task_env(common: dict, L: dict, local: int, tid: int) -> dict:
    """Rank variables of one task (env.md §1 per-task table + the PyTorch names).

    ``RANK``/``LOCAL_RANK`` only when Muster adds them for this step (``torch_vars``, the
    names absent from srun's environment: a value the user set wins), and the marker of what
    Muster added, with the values (common.torchenv: a nested srun tells them from the
    user's). A launch without ``torch_vars`` (an older controller) gets both, unmarked."""
    env = dict(common)
    added = L.get("torch_vars")
    env["SLURM_PROCID"] = str(tid)
    env["SLURM_LOCALID"] = str(local)
    for name, value in (("RANK", tid), ("LOCAL_RANK", local)):
        if added is None or name in added:
            env[name] = str(value)
    if added:
        env[TORCH_MARKER] = torch_marker(env, added)
    tg = L.get("task_gpus")
    if tg:
        gpus = ",".join(str(g) for g in tg[local])
        for var in ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES",
                    "ZE_AFFINITY_MASK"):
            env[var] = gpus
    bind, per_task = _bind_plan(L)
    if bind is not None:
        env.update(cpubind.env(bind, per_task))
    return env


def _bind_plan(L: dict) -> tuple[cpubind.CpuBind | None, list[list[int]] | None]:
    """The step's CPU binding on this node (``L["cpu_bind"]``, resolved by the controller:
    muster.common.cpubind) and each local task's CPUs, computed once per step daemon. The
    CPUs bound to are the job's on this node when cores are confined (``L["confine"]
    ["cpus"]``), else those the step daemon may run on. Concurrent steps of one job are not
    told apart (the controller does not place steps on CPU ids): their task k share CPUs."""
    if "_bind_plan" not in L:
        bind = cpubind.parse(L["cpu_bind"]) if L.get("cpu_bind") else None
        per_task = None
        if bind is not None:
            avail = (L.get("confine") or {}).get("cpus") or sorted(os.sched_getaffinity(0))
            per_task = cpubind.task_cpus(bind, avail, len(L["tasks"]), L.get("cpus_per_task") or 1)
        L["_bind_plan"] = (bind, per_task)
    return L["_bind_plan"]


class _Bound:
    """Context: the calling process runs on ``cpus`` (a task forked inside inherits them),
    then gets its own affinity back. CPUs the kernel refuses (map_cpu/mask_cpu outside the
    step's cpuset) leave the task unbound, ``error`` saying why, as task/affinity does."""

    def __init__(self, cpus: list[int] | None, error):
        self.cpus, self.error = cpus, error
        self.old: set[int] | None = None

    def __enter__(self):
        if self.cpus:
            old = os.sched_getaffinity(0)
            try:
                os.sched_setaffinity(0, self.cpus)
                self.old = old
            except OSError as exc:
                self.error(f"task/affinity: cannot bind to CPUs {self.cpus}: {exc.strerror}")
        return self

    def __exit__(self, *exc):
        if self.old is not None:
            try:
                os.sched_setaffinity(0, self.old)
            except OSError:
                pass  # the cpuset changed under us: the kernel already narrowed it
        return False


def _env_size(env: dict, name: str) -> int:
    """A terminal dimension from the task's environment; 0 when absent or not one."""
    v = env.get(name, "")
    return int(v) if v.isdigit() and len(v) < 6 and int(v) <= 0xFFFF else 0


def _set_winsize(fd: int, rows: int, cols: int) -> None:
    """TIOCSWINSZ on a pty's master (the slave's size); nothing for an unknown size."""
    if rows and cols:
        try:
            fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        except OSError:
            pass


def _kill_leftovers(t: _Task) -> None:
    """SIGKILL what is left of a task: its process group and, for a pty task, every process of
    its session (a shell with job control puts each job in a group of its own; a session id
    is not reused while any process holds it, so nothing else can be hit)."""
    _killpg(t.pid, signal.SIGKILL)
    if t.tty and t.pid:
        for pid in _session_members(t.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _session_members(sid: int) -> list[int]:
    """Pids whose session id is ``sid`` (/proc/<pid>/stat, the kernel's: no user path)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 3 and fields[3] == str(sid).encode():  # state ppid pgrp session
            found.append(int(name))
    return found


def _killpg(pid: int | None, sig: int) -> None:
    if not pid:
        return
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# The task's process runs no Python: subprocess's C fork/exec does setsid, the uid/gid switch,
# umask and the fds; this wrapper enters the working directory as the user (supervisor's
# WORKDIR: never chdir as root), sets SLURM_TASK_PID to its own pid and execs the command
# (which keeps that pid), reporting a missing command as Slurm's stepd does.
_TASK_WRAPPER = (
    'SLURM_TASK_PID=$$; export SLURM_TASK_PID; ' + WORKDIR +
    'command -v "$0" >/dev/null 2>&1 || { printf "slurmstepd-%s: error: execve(): %s: No such '
    'file or directory\\n" "$SLURMD_NODENAME" "$0" >&2; exit 2; }; exec "$0" "$@"')
# A --pty task's wrapper first makes its terminal (fd 0, a pty slave the user owns) its
# controlling terminal: a session leader without one acquires the tty it opens without
# O_NOCTTY, and reopening /proc/self/fd/0 as the user (the shell's own redirection, for the
# duration of ``:``) is such an open — no Python in the child, no preexec_fn.
_PTY_TASK_WRAPPER = 'command : 2>/dev/null </proc/self/fd/0; ' + _TASK_WRAPPER


def _start_task(L: dict, env: dict, files: dict, out_w, err_w, in_r, node: str,
                ctty: bool = False, step: confine.StepCgroup | None = None,
                report: oci.LaunchReport | None = None) -> int | None:
    """Start one task as the job's user. Its -o/-e/-i files are opened with the user's ids
    (supervisor.user_open: no controlling tty, no blocking on a FIFO); the working directory
    is entered by the task's wrapper after the identity switch. ``ctty``: its stdin is a
    pty slave, to become its controlling terminal (_PTY_TASK_WRAPPER). ``step``: the step's
    cgroup, which the task is born in (confine.born_confined). ``report``: a container
    task's launch report channel, whose write end its runner inherits."""
    uid, gid = L["uid"], L["gid"]
    groups = L.get("groups") or [gid]
    # relative -o/-e/-i names are relative to the step's working directory (the task's cwd)
    files = {k: v if os.path.isabs(v) else os.path.join(L["cwd"], v) for k, v in files.items()}
    opened = []
    try:
        with _AsUser(uid, gid, groups):
            old = os.umask(L.get("umask", 0o022))
            try:
                mode = os.O_APPEND if L.get("open_mode") == "append" else os.O_TRUNC
                if "output" in files:
                    out_w = user_open(files["output"], os.O_WRONLY | os.O_CREAT | mode)
                    opened.append(out_w)
                if "error" in files:
                    err_w = user_open(files["error"], os.O_WRONLY | os.O_CREAT | mode)
                    opened.append(err_w)
                elif err_w is None:
                    err_w = out_w
                if "input" in files:
                    in_r = user_open(files["input"], os.O_RDONLY)
                    opened.append(in_r)
                elif in_r is None:
                    in_r = user_open("/dev/null", os.O_RDONLY)
                    opened.append(in_r)
            finally:
                os.umask(old)
        kw = {}
        if os.getuid() == 0 and uid != 0:
            kw = {"user": uid, "group": gid, "extra_groups": groups}
        elif os.getuid() not in (0, uid):
            raise PermissionError("agent cannot switch to the job's user")
        local = int(env.get("SLURM_LOCALID", 0))
        argv = L["task_argv"][local] if L.get("task_argv") else L["argv"]  # --multi-prog
        keep: tuple[int, ...] = ()
        if oci.wanted(env):  # the user's runner starts the container (muster.agent.oci)
            argv = oci.task_argv(argv, L.get("conf_dir"))
            if report is not None:
                env, keep = report.env(env), report.fds
        wrapper = _wrapper(L, node, ctty)
        bind, per_task = _bind_plan(L)
        cpus = per_task[local % len(per_task)] if per_task else None
        with confine.born_confined(step, local), \
                _Bound(cpus, lambda m: _say(err_w if err_w is not None else out_w, node, m)) as b:
            proc = subprocess.Popen(["/bin/sh", "-c", wrapper, argv[0],
                                     *workdir_args(L["cwd"], env), *argv[1:]], stdin=in_r,
                                    stdout=out_w, stderr=err_w, cwd="/", env=env,
                                    start_new_session=True, umask=L.get("umask", 0o022),
                                    close_fds=True, pass_fds=keep, **kw)
        if bind is not None and bind.verbose:
            shown = bind if b.old is not None or bind.kind == "none" else cpubind.CpuBind("none")
            _say(err_w if err_w is not None else out_w, None, cpubind.verbose_line(
                shown, node, int(env.get("SLURM_PROCID", 0)), local, proc.pid,
                cpus if b.old is not None else os.sched_getaffinity(0)))
    except (OSError, CgroupError) as exc:
        target = err_w if err_w is not None else out_w
        if target is not None:
            try:
                os.write(target, f"slurmstepd-{node}: error: {exc}\n".encode())
            except OSError:
                pass
        return None
    finally:
        for fd in opened:
            os.close(fd)
    proc.returncode = 0  # reaped through the pidfd by the step daemon
    return proc.pid


def _wrapper(L: dict, node: str, ctty: bool) -> str:
    """The task's wrapper shell: srun's soft limits first (set by the user's own shell, so
    never above the node's hard limits: common.rlimits), then the working directory,
    slurm.conf's TaskProlog and srun's --task-prolog, and the exec of the command."""
    wrapper = taskprolog.with_task_prolog(_PTY_TASK_WRAPPER if ctty else _TASK_WRAPPER,
                                          L.get("task_prolog"))
    wrapper = taskprolog.with_user_task_prolog(wrapper, L.get("user_task_prolog"), node)
    limits = rlimits.clean(L.get("rlimits"))
    if not limits:
        return wrapper
    if "_node_hard" not in L:
        L["_node_hard"] = rlimits.node_hard()  # once per step daemon
    explicit = frozenset(n for n in L.get("rlimits_explicit") or () if isinstance(n, str))
    return rlimits.shell_lines(limits, L["_node_hard"], explicit, node) + wrapper


def _say(fd: int | None, node: str | None, text: str) -> None:
    """A step daemon's line on a task's stderr: ``slurmstepd-<node>: error: text`` (node
    given) or the text as it is; nothing when the task has no such descriptor."""
    if fd is None:
        return
    line = f"slurmstepd-{node}: error: {text}\n" if node else text
    try:
        os.write(fd, line.encode())
    except OSError:
        pass
