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
import subprocess
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


def forked_main(spool: str, body) -> None:
    """Run ``body()`` as a forked supervisor or step daemon, then exit; never returns.

    Drops what the agent's process set up that a supervisor must not share: the event loop's
    signal wake-up fd (a signal delivered to us would otherwise be written into the agent's loop,
    which would believe *it* got the signal), the agent's signal handlers and session, and the
    garbage collector (a collection would touch — and copy — every inherited page). Any
    exception is written to ``<spool>/supervisor.err``."""
    code = 0
    try:
        import gc
        gc.disable()
        signal.set_wakeup_fd(-1)
        os.setsid()
        for s in (signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD):
            signal.signal(s, signal.SIG_DFL)
        body()
    except BaseException:  # noqa: BLE001 - report whatever happened, then leave
        code = 1
        try:
            import traceback
            with open(os.path.join(spool, "supervisor.err"), "a") as fh:
                traceback.print_exc(file=fh)
        except OSError:
            pass
    os._exit(code)


def run_supervisor(spool: str, launch: dict, node: str) -> None:
    """Entry point in the forked child. Never returns."""
    forked_main(spool, lambda: _Supervisor(spool, launch, node).run())


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
        pid, failure = _spawn_job(self.launch, self.spool, out_path, err_path)
        if pid is None:
            status = {"job_id": self.job_id, "run": self.launch.get("run", 0), "exit_code": 1,
                      "signal": 0, "timed_out": False, "terminated": None,
                      "start_time": int(start), "end_time": int(time.time()),
                      "launch_failed": True, "launch_error": failure[:1000]}
        else:
            with open(os.path.join(self.spool, "job.pid"), "w") as fh:
                fh.write(str(pid))
            status = self._watch(pid, start)
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


class _AsUser:
    """Switch the *effective* ids to the job's user (root only), so that files are opened and
    directories checked with the user's permissions — root never opens a path for a user that
    the user could not open (a symlink to /etc/shadow stays harmless)."""

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
_WRAPPER = 'SLURM_TASK_PID=$$; export SLURM_TASK_PID; exec "$0" "$@"'


def _spawn_job(L: dict, spool: str, out_path: str, err_path: str) -> tuple[int | None, str]:
    """Start the batch script as the job's user in its own session. Returns (pid, "") or
    (None, reason). The child runs no Python: subprocess's C fork/exec does setsid, the
    uid/gid/groups switch, umask, chdir and the fd plumbing."""
    uid, gid = L["uid"], L["gid"]
    groups = L.get("groups") or [gid]
    if os.getuid() != 0 and os.getuid() != uid:
        return None, "slurmstepd: error: agent cannot switch to the job's user (not root)"
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
                in_fd = os.open(L.get("stdin") or "/dev/null", os.O_RDONLY)
                fds.append(in_fd)
            finally:
                os.umask(old)
            cwd = L["work_dir"]
            if not (os.path.isdir(cwd) and os.access(cwd, os.X_OK, effective_ids=True)):
                os.write(err_fd, (f"slurmstepd: error: couldn't chdir to `{cwd}': No such file or "
                                  "directory: going to /tmp instead\n").encode())
                cwd = "/tmp"
    except OSError as exc:
        for fd in fds:
            os.close(fd)
        return None, f"slurmstepd: error: {exc}"
    script = os.path.join(spool, "script")
    kw = {}
    if os.getuid() == 0 and uid != 0:
        kw = {"user": uid, "group": gid, "extra_groups": groups}
    try:
        proc = subprocess.Popen(["/bin/sh", "-c", _WRAPPER, script, *(L.get("argv") or [])],
                                stdin=in_fd, stdout=out_fd, stderr=err_fd, cwd=cwd, env=L["env"],
                                start_new_session=True, umask=umask, close_fds=True, **kw)
    except OSError as exc:
        try:
            os.write(err_fd, f"slurmstepd: error: execve(): {exc}\n".encode())
        except OSError:
            pass
        return None, f"slurmstepd: error: execve(): {exc}"
    finally:
        for fd in set(fds):
            os.close(fd)
    proc.returncode = 0  # reaped by _watch through the pidfd; keep Popen from reaping or warning
    return proc.pid, ""
