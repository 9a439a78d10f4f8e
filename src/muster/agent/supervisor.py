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
  status.json   written atomically when everything is over: exit_code, signal, timed_out

Control: the agent writes ``terminate`` and sends SIGTERM to the supervisor, which sends
SIGCONT+SIGTERM to the job's process group, writes Slurm's ``*** JOB N ON node CANCELLED ***``
line to the job's stderr, and SIGKILLs the group after KillWait. The same sequence runs at the
time limit (``DUE TO TIME LIMIT``).
"""

from __future__ import annotations

import json
import os
import select
import signal
import time

from muster.common.patterns import expand_pattern
from muster.common.timefmt import fmt_iso

WHY_TEXT = {"cancel": "", "timeout": " DUE TO TIME LIMIT", "requeue": " DUE TO JOB REQUEUE",
            "node_fail": " DUE TO NODE FAILURE", "preempt": " DUE TO PREEMPTION"}


def write_json_atomic(path: str, obj: dict) -> None:
    """Write-then-rename: readers see the old file or the whole new one. No fsync: the file
    must survive a crash of a process, not of the host (a host crash kills the job too)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(obj, fh)
    os.replace(tmp, path)


def run_supervisor(spool: str, launch: dict, node: str) -> None:
    """Entry point in the forked child. Never returns."""
    code = 0
    try:
        # the agent's event loop registered a wake-up fd for signals; a signal delivered to us
        # must not be written into the agent's loop (it would think *it* got the signal)
        signal.set_wakeup_fd(-1)
        os.setsid()
        for s in (signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD):
            signal.signal(s, signal.SIG_DFL)
        _Supervisor(spool, launch, node).run()
    except BaseException:  # noqa: BLE001 - report whatever happened, then leave
        code = 1
        try:
            import traceback
            with open(os.path.join(spool, "supervisor.err"), "a") as fh:
                traceback.print_exc(file=fh)
        except OSError:
            pass
    os._exit(code)


class _Supervisor:
    def __init__(self, spool: str, launch: dict, node: str):
        self.spool = spool
        self.launch = launch
        self.node = node
        self.job_id = launch["job_id"]
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        self.term_requested = False

    def _on_term(self, signum, frame):
        self.term_requested = True
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
        with open(os.path.join(self.spool, "super.pid"), "w") as fh:
            fh.write(str(os.getpid()))
        out_path, err_path = self._paths()
        self.err_path = err_path
        start = time.time()
        # exec-failure pipe: closed by a successful execve (O_CLOEXEC), written on failure
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:
            os.close(err_r)
            _exec_job(self.launch, self.spool, out_path, err_path, err_w)  # never returns
        os.close(err_w)
        with open(os.path.join(self.spool, "job.pid"), "w") as fh:
            fh.write(str(pid))
        failure = b""
        while chunk := os.read(err_r, 4096):
            failure += chunk
        os.close(err_r)
        status = self._watch(pid, start)
        if failure:
            status["launch_failed"] = True
            status["launch_error"] = failure.decode(errors="replace")[:1000]
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
        sig_spec = self.launch.get("signal")
        warn_at = None
        if sig_spec and deadline is not None:
            warn_at = deadline - sig_spec.get("secs", 60)
        kill_at = None
        why = None
        timed_out = False
        while True:
            now = time.time()
            timeouts = [t for t in (deadline if why is None else None, kill_at, warn_at)
                        if t is not None]
            wait = max(0.0, min(timeouts) - now) if timeouts else None
            ready, _, _ = select.select([pidfd, self.wake_r], [], [], wait)
            if pidfd in ready:
                break
            if self.wake_r in ready:
                os.read(self.wake_r, 64)
            now = time.time()
            if self.term_requested and why is None:
                why = self._read_reason()
                self._begin_kill(pid, why)
                kill_at = now + self.launch.get("kill_wait", 30)
            self.term_requested = False
            self._reload_limit()
            deadline = self._deadline(start)
            if warn_at is not None and now >= warn_at:
                self._send_warning(pid, sig_spec)
                warn_at = None
            if why is None and deadline is not None and now >= deadline:
                why, timed_out = "timeout", True
                self._begin_kill(pid, why)
                kill_at = now + self.launch.get("kill_wait", 30)
            if kill_at is not None and now >= kill_at:
                _killpg(pid, signal.SIGKILL)
                kill_at = None
        _, wstatus = os.waitpid(pid, 0)
        os.close(pidfd)
        _killpg(pid, signal.SIGKILL)  # leftovers of the job's process group
        exit_code = os.WEXITSTATUS(wstatus) if os.WIFEXITED(wstatus) else 0
        sig = os.WTERMSIG(wstatus) if os.WIFSIGNALED(wstatus) else 0
        return {"job_id": self.job_id, "run": self.launch.get("run", 0), "exit_code": exit_code,
                "signal": sig, "timed_out": timed_out, "terminated": why,
                "start_time": int(start), "end_time": int(time.time()), "launch_failed": False}

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
        stamp = fmt_iso(int(time.time()))
        line = f"slurmstepd: error: *** JOB {self.job_id} ON {self.node} CANCELLED AT {stamp}{WHY_TEXT.get(why, '')} ***\n"
        try:
            fd = os.open(self.err_path, os.O_WRONLY | os.O_APPEND)
            os.write(fd, line.encode())
            os.close(fd)
        except OSError:
            pass
        _killpg(pid, signal.SIGCONT)
        _killpg(pid, signal.SIGTERM)

    def _send_warning(self, pid: int, spec: dict) -> None:
        sig = spec.get("signal", signal.SIGUSR1)
        if spec.get("batch"):
            _kill(pid, signal.SIGCONT)
            _kill(pid, sig)
        else:
            # no job steps yet (srun is another issue): Slurm would signal the steps only;
            # with none running, the warning reaches the batch shell's process group
            _killpg(pid, signal.SIGCONT)
            _killpg(pid, sig)


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


def _open_output(path: str, flags: int, patience: float = 3.0) -> int:
    """Open an output file; if its directory does not exist yet, wait a little for it.

    Muster starts jobs within milliseconds of submission, and tools such as submitit create
    the job's log directory (``logs/%j``) only after sbatch has returned the id. Slurm's
    slower start hides that race; a short wait here closes it."""
    deadline = time.time() + patience
    while True:
        try:
            return os.open(path, flags, 0o666)
        except FileNotFoundError:
            if time.time() >= deadline or not os.path.dirname(path):
                raise
            time.sleep(0.02)


def _exec_job(L: dict, spool: str, out_path: str, err_path: str, err_w: int) -> None:
    """In the job's own process: become the user, set up files, exec. Never returns."""
    try:
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        if os.getuid() == 0 and L["uid"] != 0:
            os.setgroups(L.get("groups") or [L["gid"]])
            os.setgid(L["gid"])
            os.setuid(L["uid"])
        elif os.getuid() != L["uid"] and os.getuid() != 0:
            raise PermissionError("agent cannot switch to the job's user (not root)")
        os.umask(L.get("umask", 0o022))
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if L.get("open_mode") == "append" else os.O_TRUNC)
        try:
            os.chdir(L["work_dir"])
        except OSError as exc:
            os.chdir("/tmp")
            chdir_error = f"slurmstepd: error: couldn't chdir to `{L['work_dir']}': {exc.strerror}: going to /tmp instead\n"
        else:
            chdir_error = None
        out_fd = _open_output(out_path, flags)
        err_fd = out_fd if err_path == out_path else _open_output(err_path, flags)
        in_fd = os.open(L.get("stdin") or "/dev/null", os.O_RDONLY)
        os.dup2(in_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        if chdir_error:
            os.write(2, chdir_error.encode())
        env = dict(L["env"])
        env["SLURM_TASK_PID"] = str(os.getpid())
        script = os.path.join(spool, "script")
        os.execve(script, [script] + list(L.get("argv") or []), env)
    except BaseException as exc:  # noqa: BLE001
        msg = f"slurmstepd: error: execve(): {exc}\n".encode()
        for fd in (err_w, 2):
            try:
                os.write(fd, msg)
            except OSError:
                pass
        os._exit(127)
