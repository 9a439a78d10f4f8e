"""Per-job supervisor: a forked copy of the agent that runs one batch script to its end.

Why a separate process (Slurm's slurmstepd, made with fork instead of exec so it costs no
interpreter start-up): the supervisor, not the agent, is the parent of the job. If the agent
crashes or restarts, the job keeps running under its supervisor, which still enforces the time
limit and writes the exit status to the job's spool directory, where the restarted agent finds
it. The agent follows the supervisor with a pidfd.

Spool directory of a job (``<SlurmdSpoolDir>/job<ID>.<RUN>``):
  launch.json   what to run (written by the agent before the fork)
  script        the batch script (mode 0700, owned by the job's user)
  super.pid     the supervisor's pid
  job.pid       the batch shell's pid (= its process group id)
  terminate     present when a termination was requested; contains the reason
  status.json   written atomically when everything is over: exit_code, signal, timed_out,
                usage (the batch step's final figures, muster.agent.acctgather)
  usage.json    the latest usage sample, rewritten every JobAcctGatherFrequency seconds

Control: the agent writes ``terminate`` and sends SIGTERM to the supervisor, which writes
Slurm's ``*** JOB N ON node CANCELLED ***`` line to the job's stderr, sends SIGCONT+SIGTERM to
the job's process group, and SIGKILLs the group after KillWait. The same sequence runs at the
time limit (``DUE TO TIME LIMIT``).

Root and user paths (docs/design.md): every path the job's user controls (output, error,
input, working directory) is opened or entered with the user's identity, never by root, and
root never opens such a path again later: the CANCELLED line goes through the stderr
descriptor opened at start and kept by the supervisor.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import time

from muster.agent import acctgather, confine, oci, taskprolog
from muster.agent.cgroup import CgroupError
from muster.agent.workdir import WORKDIR, workdir_args
from muster.common import clock
from muster.common.patterns import expand_pattern
from muster.common.timefmt import fmt_iso

WHY_TEXT = {"cancel": "", "timeout": " DUE TO TIME LIMIT", "requeue": " DUE TO JOB REQUEUE",
            "node_fail": " DUE TO NODE FAILURE", "preempt": " DUE TO PREEMPTION"}


def write_json_atomic(path: str, obj: dict) -> None:
    """Write-then-rename: readers see the old file or the whole new one. No fsync: the file
    must survive a crash of a process, not of the host (a host crash kills the job too)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(json.dumps(obj))  # the C encoder (json.dump to a file is pure Python)
    os.replace(tmp, path)


def forked_main(spool: str, body, keep: tuple[int, ...] = ()) -> None:
    """Run ``body()`` as a forked supervisor or step daemon, then exit; never returns.

    Drops what the agent's process set up that a supervisor must not share: the event loop's
    signal wake-up fd (a signal delivered to us would otherwise be written into the agent's loop,
    which would believe *it* got the signal), the agent's signal handlers and session, every
    descriptor but ``keep``, and the garbage collector (a collection would touch — and copy —
    every inherited page). Any exception is written to ``<spool>/supervisor.err``."""
    code = 0
    try:
        import gc
        gc.disable()
        signal.set_wakeup_fd(-1)
        os.setsid()
        _undumpable()
        _drop_inherited_fds(keep)
        for s in (signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD):
            signal.signal(s, signal.SIG_DFL)
        body()
    except BaseException:  # noqa: BLE001 - report whatever happened, then leave
        code = 1
        _report_crash(spool)
    os._exit(code)


def _report_crash(spool: str) -> None:
    """The exception being handled, appended to ``<spool>/supervisor.err`` (the agent puts it
    in its log when the supervisor ends without a status)."""
    try:
        import traceback
        with open(os.path.join(spool, "supervisor.err"), "a") as fh:
            traceback.print_exc(file=fh)
    except OSError:
        pass


def run_supervisor(spool: str, launch: dict, node: str) -> None:
    """Entry point in the forked child. Never returns."""
    forked_main(spool, lambda: _Supervisor(spool, launch, node).run())


def run_pooled(spool: str, node: str, done_fd: int, chan: socket.socket) -> None:
    """Entry point of a batch supervisor forked by the zygote (muster.agent.zygote): the job of
    ``spool``, then each job the zygote hands over on ``chan`` after it, until the zygote
    closes ``chan``. Never returns.

    A job's end is announced by closing its ``done_fd`` (the write end of a pipe whose read
    end the agent follows), after its status.json is in place: the same order as a
    supervisor's exit, and a crash closes it too. Between jobs (:func:`_between_jobs`)
    nothing of the last one stays: its signal handlers, objects and descriptors are gone.
    Reuse saves the fork, the copy-on-write faults of a fresh child and its exit: about a
    third of a short job's cost on the node. The zygote alone decides when a supervisor
    takes another job (after the agent has handled the last one's end, so no signal meant
    for that job can reach its successor) and when it stops."""
    forked_main(spool, lambda: _serve_jobs(spool, node, done_fd, chan),
                keep=(done_fd, chan.fileno()))


def _serve_jobs(spool: str, node: str, done_fd: int, chan: socket.socket) -> None:
    got: tuple | None = (spool, node, done_fd)
    while got is not None:
        spool, node, done_fd = got
        try:
            with open(os.path.join(spool, "launch.json")) as fh:
                launch = json.load(fh)
            _Supervisor(spool, launch, node).run()
        except BaseException:  # noqa: BLE001 - this job's supervisor.err; never reused
            _report_crash(spool)
            os._exit(1)
        os.close(done_fd)  # the job is over: the agent reads its status.json now
        _between_jobs(chan.fileno())
        got = _next_job(chan)


def _between_jobs(keep: int) -> None:
    """Back to the state of a fresh supervisor: SIGTERM and SIGUSR2 ignored until the next
    job's supervisor handles them (a fresh one inherits the zygote's ignored SIGTERM), the
    last job's objects collected and every descriptor it left (its wake-up pipe, the stderr
    kept for the CANCELLED line) closed."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    import gc
    gc.collect()
    _close_above(2, (keep,))


def _next_job(chan: socket.socket) -> tuple[str, str, int] | None:
    """(spool, node, done_fd) of the next job the zygote hands over; None when it closed the
    channel (stop) or sent something else."""
    try:
        data, fds, _flags, _addr = socket.recv_fds(chan, 65536, 1)
    except OSError:
        return None
    try:
        req = json.loads(data) if data and len(fds) == 1 else None
        if isinstance(req, dict) and isinstance(req.get("spool"), str):
            os.set_inheritable(fds[0], False)  # (SCM_RIGHTS gives it without O_CLOEXEC)
            return req["spool"], str(req.get("node")), fds[0]
    except ValueError:
        pass
    _close_all(fds)
    return None


class _Supervisor:
    def __init__(self, spool: str, launch: dict, node: str):
        self.spool = spool
        self.launch = launch
        self.node = node
        self.job_id = launch["job_id"]
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        self.term_requested = False
        self.acct = acctgather.sampler_for(launch)  # usage of the batch step (None: off)
        self.cg: confine.StepCgroup | None = None  # the batch step's cgroup (None: unconfined)
        self.cg_final: dict = {}  # what StepCgroup.finish found (OOM kills, usage)
        self.report: oci.LaunchReport | None = None  # a container task's launch report channel

    def _on_term(self, signum, frame):
        self.term_requested = True
        self._on_wake(signum, frame)

    def _on_wake(self, signum, frame):
        """SIGUSR2 from the agent: limit.json changed (``scontrol update TimeLimit=``); the
        loop re-reads it. Without a handler SIGUSR2 would kill the supervisor."""
        try:
            os.write(self.wake_w, b"x")
        except OSError:
            pass

    def _paths(self) -> tuple[str, str]:
        L = self.launch
        fill = dict(job_id=self.job_id, array_job_id=L.get("array_job_id"),
                    array_task_id=L.get("array_task_id"), user=L["user"], name=L["name"],
                    node=self.node)
        return expand_pattern(L["stdout"], **fill), expand_pattern(L["stderr"], **fill)

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGUSR2, self._on_wake)
        with open(os.path.join(self.spool, "super.pid"), "w") as fh:
            fh.write(str(os.getpid()))
        out_path, err_path = self._paths()
        start = clock.time()
        try:
            self.cg = confine.StepCgroup.for_launch(self.launch, "batch")
            if self.cg is not None and self.acct is not None:
                self.acct.follow_cgroup(self.cg)  # its processes: those of task_0's cgroup
        except (CgroupError, OSError) as exc:
            pid, self.err_fd = None, None
            failure = f"slurmstepd: error: cannot create the batch step's cgroup: {exc}"
        else:
            if oci.wanted(self.launch["env"]):
                self.report = oci.LaunchReport.make()
            pid, failure, self.err_fd = _spawn_job(self.launch, self.spool, out_path,
                                                   err_path, self.cg, self.report)
        if pid is None:
            status = {"job_id": self.job_id, "run": self.launch.get("run", 0), "exit_code": 1,
                      "signal": 0, "timed_out": False, "terminated": None,
                      "start_time": int(start), "end_time": int(clock.time()),
                      "launch_failed": True, "launch_error": failure[:1000]}
        else:
            with open(os.path.join(self.spool, "job.pid"), "w") as fh:
                fh.write(str(pid))
            if self.acct is not None:
                self.acct.add(0, pid)
            status = self._watch(pid, start)
            status.update(self._container_failure(status))
            status.update(self._finish_cgroup())
            if self.acct is not None:
                status["usage"] = self.acct.report()
            why = taskprolog.run_task_epilog(self.launch, self.launch["env"], pid,
                                             self.launch["work_dir"])
            if why:
                status["task_epilog_error"] = why  # a TaskEpilog failure is only reported
        write_json_atomic(os.path.join(self.spool, "status.json"), status)

    def _deadline(self, start: float) -> float | None:
        limit = self.launch.get("time_limit_s")
        if limit is None:
            return None
        base = self.launch.get("start_time") or start
        return base + limit

    def _watch(self, pid: int, start: float) -> dict:
        pidfd = os.pidfd_open(pid)
        deadline = self._deadline(start)
        # --signal=B:SIG@T is ours (the batch shell, on this node). Without B: the warning is
        # for the steps, on every node of the job: the controller sends it (StepManager.tick)
        sig_spec = self.launch.get("signal")
        if not (sig_spec or {}).get("batch"):
            sig_spec = None
        warned = False
        kill_at = None
        why = None
        timed_out = False

        def warn_due():  # reads the loop's current deadline, warned and why
            return _warn_time(deadline, sig_spec) if not warned and why is None else None
        while True:
            now = clock.time()
            warn_at = warn_due()
            timeouts = [t for t in (deadline if why is None else None, kill_at, warn_at,
                                    self.acct.next_due if self.acct else None) if t is not None]
            wait = max(0.0, min(timeouts) - now) if timeouts else None
            ready, _, _ = select.select([pidfd, self.wake_r], [], [], wait)
            if pidfd in ready:
                break
            if self.wake_r in ready:
                os.read(self.wake_r, 64)
            now = clock.time()
            if self.term_requested and why is None:
                why = self._read_reason()
                self._begin_kill(pid, why)
                kill_at = now + self.launch.get("kill_wait", 30)
            self.term_requested = False
            self._reload_limit()
            deadline = self._deadline(start)
            warn_at = warn_due()
            if warn_at is not None and sig_spec is not None and now >= warn_at:  # (due: a spec)
                self._send_warning(pid, sig_spec)
                warned = True
            if why is None and deadline is not None and now >= deadline:
                why, timed_out = "timeout", True
                self._begin_kill(pid, why)
                kill_at = now + self.launch.get("kill_wait", 30)
            if kill_at is not None and now >= kill_at:
                _killpg(pid, signal.SIGKILL)
                confine.signal_step(self.cg, signal.SIGKILL)
                kill_at = None
            if self.acct is not None and self.acct.due(now):
                self.acct.sample()
                self.acct.write(self.spool)
        _, wstatus, rusage = os.wait4(pid, 0)
        if self.acct is not None:
            self.acct.exited(0, rusage)  # the script and all it waited for
        os.close(pidfd)
        _killpg(pid, signal.SIGKILL)  # leftovers of the job's process group
        exit_code = os.WEXITSTATUS(wstatus) if os.WIFEXITED(wstatus) else 0
        sig = os.WTERMSIG(wstatus) if os.WIFSIGNALED(wstatus) else 0
        return {"job_id": self.job_id, "run": self.launch.get("run", 0), "exit_code": exit_code,
                "signal": sig, "timed_out": timed_out, "terminated": why,
                "start_time": int(start), "end_time": int(clock.time()), "launch_failed": False}

    def _container_failure(self, status: dict) -> dict:
        """A container that could not start (the runner's oci.LaunchReport): the batch step
        is a launch failure with its reason, as when its cgroup cannot be made, so the job
        ends FAILED with Reason=JobLaunchFailure. A job ended on purpose (cancel, time limit)
        keeps that end."""
        if self.report is None:
            return {}
        why = self.report.reason(status["exit_code"], status["signal"])
        if why is None or status["terminated"] or status["timed_out"]:
            return {}
        return {"launch_failed": True, "launch_error": why}

    def _finish_cgroup(self) -> dict:
        """The batch step is over: nothing of it may survive (double-forked daemons
        included); OOM kills in its cgroup are reported as Slurm does, on the job's stderr
        and in the status (the job ends OUT_OF_MEMORY)."""
        if self.cg is None:
            return {}
        self.cg_final = self.cg.finish()
        n = self.cg_final.get("oom_kills", 0)
        if not n:
            return {}
        write_unstalled(self.err_fd, confine.oom_line(self.job_id, "batch", n).encode())
        return {"oom_kills": n}

    def _reload_limit(self) -> None:
        path = os.path.join(self.spool, "limit.json")
        try:
            with open(path) as fh:
                self.launch["time_limit_s"] = json.load(fh)["time_limit_s"]
        except (OSError, ValueError, KeyError):
            pass

    def _read_reason(self) -> str:
        try:
            with open(os.path.join(self.spool, "terminate")) as fh:
                return fh.read().strip() or "cancel"
        except OSError:
            return "cancel"

    def _begin_kill(self, pid: int, why: str) -> None:
        """Slurm's CANCELLED line, then SIGCONT+SIGTERM. The line goes through the descriptor
        opened as the user at start: re-opening the path as root would follow whatever the job
        has put there since (a symlink to /etc/sudoers)."""
        stamp = fmt_iso(int(clock.time()))
        line = (f"slurmstepd: error: *** JOB {self.job_id} ON {self.node} CANCELLED AT {stamp}"
                f"{WHY_TEXT.get(why, '')} ***\n")
        write_unstalled(self.err_fd, line.encode())
        _killpg(pid, signal.SIGCONT)
        _killpg(pid, signal.SIGTERM)
        # what left the shell's process group (setsid) gets it too: the rest of the cgroup
        confine.signal_step(self.cg, signal.SIGCONT, signal.SIGTERM, spared_pgids={pid})

    def _send_warning(self, pid: int, spec: dict) -> None:
        """``--signal=B:SIG@T``: SIGCONT then SIG to the batch shell alone — not its children
        (srun would forward it to the steps) nor the steps, as in Slurm."""
        _kill(pid, signal.SIGCONT)
        _kill(pid, spec.get("signal", signal.SIGUSR1))


def _warn_time(deadline: float | None, spec: dict | None) -> float | None:
    """When the ``B:`` warning is due: T seconds before the (possibly updated) limit."""
    if spec is None or deadline is None:
        return None
    return deadline - spec.get("secs", 60)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# Added to every open of a path the job's user controls (always made with the user's ids,
# inside _AsUser): O_NOCTTY, because supervisors and step daemons are session leaders and a
# terminal they open for reading would become their controlling tty (the user could then
# SIGINT/SIGHUP them through it and escape the time limit); O_NONBLOCK, because opening a FIFO
# nobody has open would otherwise hang the supervisor (cleared again at once: the job gets a
# normal descriptor); O_CLOEXEC, because nothing but the job may inherit it.
USER_OPEN_FLAGS = os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC


def user_open(path: str, flags: int) -> int:
    """Open a path the job's user controls; call inside ``_AsUser`` (the caller's umask and
    effective ids apply). Returns a blocking descriptor."""
    fd = os.open(path, flags | USER_OPEN_FLAGS, 0o666)
    try:
        os.set_blocking(fd, True)
    except OSError:
        os.close(fd)
        raise
    return fd


def _open_output(path: str, flags: int, patience: float = 3.0) -> int:
    """Open an output file; if its directory does not exist yet, wait a little for it.

    Muster starts jobs within milliseconds of submission, and tools such as submitit create
    the job's log directory (``logs/%j``) only after sbatch has returned the id. Slurm's
    slower start hides that race; a short wait here closes it."""
    deadline = time.time() + patience
    while True:
        try:
            return user_open(path, flags)
        except FileNotFoundError:
            if time.time() >= deadline or not os.path.dirname(path):
                raise
            time.sleep(0.02)


def write_unstalled(fd: int | None, data: bytes, patience: float = 0.5) -> None:
    """Write to a descriptor of the job's (its stderr) without letting the job stall us.

    The file behind it is the user's choice: a pipe or FIFO whose reader stopped reading, a
    terminal paused with ^S or a file on the user's FUSE mount can block a write for ever, and
    a supervisor blocked here would never SIGKILL the job. So the write runs in a daemon
    thread and we wait for it at most ``patience`` seconds (long enough for a real file, so
    the line still comes before whatever the job prints on SIGTERM); a stuck thread dies with
    the process."""
    if fd is None:
        return
    import threading

    def write():
        try:
            os.write(fd, data)
        except OSError:
            pass
    t = threading.Thread(target=write, daemon=True)
    t.start()
    t.join(patience)


def _drop_inherited_fds(keep: tuple[int, ...] = ()) -> None:
    """Hold none of the agent's descriptors: stdin/stdout/stderr become /dev/null, the rest
    but ``keep`` (a pooled supervisor's channel to the zygote and its job's end pipe, both
    root's) are closed (the supervisor opens all it needs itself).

    A user's path may be a magic link such as ``/proc/self/fd/3``, which reaches whatever
    this process holds, past the permissions of the directories on its way: the agent's log
    (fd 3 and its stdout in a zygote-forked child) would be readable as a job's ``--input``
    even in a 0700 log directory. With only /dev/null and root's own pipes (mode 0600) left,
    the open fails the user's permission check or yields nothing."""
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        if fd != null:
            os.dup2(null, fd)
    _close_above(2, keep)


def _close_above(low: int, keep) -> None:
    """Close every descriptor above ``low`` except those in ``keep``."""
    start = low + 1
    for fd in sorted(k for k in keep if k > low):
        os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, os.sysconf("SC_OPEN_MAX"))


_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded once, in the agent and its zygote


def _undumpable() -> None:
    """Make this process non-dumpable, whatever ``fs.suid_dumpable`` says.

    Files are opened with the user's *effective* ids in this (root) process, and a path may
    lead into ``/proc/self``. While non-dumpable, everything under /proc/<our pid> is owned by
    root, so such an open fails the user's permission check: otherwise (``suid_dumpable=1``)
    ``-o /proc/self/mem`` would hand the job a descriptor writing into a root process. The
    flag is per process image (exec resets it), so the job itself is not affected."""
    if _LIBC.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE, 0
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


class _AsUser:
    """Switch the *effective* ids to the job's user (root only), so that files are opened with
    the user's permissions — root never opens a path for a user that the user could not open
    (a symlink to /etc/shadow stays harmless). Enough, and cheaper than a helper process that
    switches fully (docs/design.md, "Root and user paths"): with euid != 0 the kernel clears the
    effective capabilities and checks permissions with fsuid/fsgid = the user's; the real and
    saved uid stay 0, so the user can neither signal nor ptrace us meanwhile; a new file is
    owned by the user; and the other differences from a real user process are closed by
    ``USER_OPEN_FLAGS`` (no controlling tty, no blocking open), ``_undumpable`` and
    ``_drop_inherited_fds`` (nothing of root's to reach through /proc/self)."""

    def __init__(self, uid: int, gid: int, groups: list[int]):
        self.ids = (uid, gid, groups)
        self.active = os.geteuid() == 0 and uid != 0

    def __enter__(self):
        if self.active:
            uid, gid, groups = self.ids
            os.setgroups(groups)
            os.setegid(gid)
            os.seteuid(uid)
        return self

    def __exit__(self, *exc):
        if self.active:
            os.seteuid(0)
            os.setegid(0)
            os.setgroups([0])
        return False


# $$ of this shell is the pid the script keeps after `exec` (SLURM_TASK_PID is the batch
# shell's own pid); the wrapper costs one exec and no Python in the child.
_WRAPPER = 'SLURM_TASK_PID=$$; export SLURM_TASK_PID; ' + WORKDIR + 'exec "$0" "$@"'


def _close_all(fds) -> None:
    for fd in set(fds):
        os.close(fd)


def _spawn_job(L: dict, spool: str, out_path: str, err_path: str,
               step: confine.StepCgroup | None = None, report: oci.LaunchReport | None = None
               ) -> tuple[int | None, str, int | None]:
    """Start the batch script as the job's user in its own session. Returns (pid, "", err_fd)
    or (None, reason, None). ``err_fd`` is the job's stderr, opened as the user and kept for
    Slurm's CANCELLED line. The child runs no Python: subprocess's C fork/exec does setsid, the
    uid/gid/groups switch, umask and the fd plumbing; the shell wrapper enters the working
    directory as the user. ``step``: the batch step's cgroup, which the script is born in
    (confine.born_confined). ``report``: a container job's launch report channel, whose write
    end the script's runner inherits (our copy is closed here, whatever happens)."""
    try:
        return _spawn_job_as_user(L, spool, out_path, err_path, step, report)
    finally:
        if report is not None:
            report.started()


def _spawn_job_as_user(L: dict, spool: str, out_path: str, err_path: str,
                       step: confine.StepCgroup | None, report: oci.LaunchReport | None
                       ) -> tuple[int | None, str, int | None]:
    """_spawn_job's body (which closes the report channel's write end after it)."""
    uid, gid = L["uid"], L["gid"]
    groups = L.get("groups") or [gid]
    if os.getuid() != 0 and os.getuid() != uid:
        return None, "slurmstepd: error: agent cannot switch to the job's user (not root)", None
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if L.get("open_mode") == "append" else os.O_TRUNC)
    umask = L.get("umask", 0o022)
    fds = []
    try:
        with _AsUser(uid, gid, groups):
            old = os.umask(umask)
            try:
                out_fd = _open_output(out_path, flags)
                fds.append(out_fd)
                err_fd = out_fd if err_path == out_path else _open_output(err_path, flags)
                fds.append(err_fd)
                in_fd = user_open(L.get("stdin") or "/dev/null", os.O_RDONLY)
                fds.append(in_fd)
            finally:
                os.umask(old)
    except OSError as exc:
        _close_all(fds)
        return None, f"slurmstepd: error: {exc}", None
    script = os.path.join(spool, "script")
    kw = {}
    if os.getuid() == 0 and uid != 0:
        kw = {"user": uid, "group": gid, "extra_groups": groups}
    wrapper = taskprolog.with_task_prolog(_WRAPPER, L.get("task_prolog"))
    command = [script, *(L.get("argv") or [])]
    env: dict = L["env"]
    keep: tuple[int, ...] = ()
    if oci.wanted(L["env"]):  # the user's runner starts the container (muster.agent.oci)
        command = oci.task_argv(command, L.get("conf_dir"), batch=True)
        if report is not None:
            env, keep = report.env(env), report.fds
    argv = ["/bin/sh", "-c", wrapper, command[0], *workdir_args(L["work_dir"], L["env"]),
            *command[1:]]
    try:
        with confine.born_confined(step, 0):
            proc = subprocess.Popen(argv, stdin=in_fd, stdout=out_fd, stderr=err_fd, cwd="/",
                                    env=env, start_new_session=True, umask=umask,
                                    close_fds=True, pass_fds=keep, **kw)
    except (OSError, CgroupError) as exc:
        what = "task cgroup" if isinstance(exc, CgroupError) else "execve()"
        try:
            os.write(err_fd, f"slurmstepd: error: {what}: {exc}\n".encode())
        except OSError:
            pass
        _close_all(fds)
        return None, f"slurmstepd: error: {what}: {exc}", None
    _close_all(set(fds) - {err_fd})
    proc.returncode = 0  # reaped by _watch through the pidfd; keep Popen from reaping or warning
    return proc.pid, "", err_fd
