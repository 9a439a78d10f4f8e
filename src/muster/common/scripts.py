"""Running admin scripts as root (Prolog, Epilog, PrologSlurmctld, EpilogSlurmctld): the trust
check on the path, one session per script, a clean environment given by the caller, the timeout
and the tail of output kept for the log.

Shared by the agent (node Prolog/Epilog, muster.agent.prolog) and the controller
(PrologSlurmctld/EpilogSlurmctld, muster.controller.prologs), hence in ``common``; the rules
(reverse alphabetical glob order, first failure stops, untrusted path = failure) are in
muster.agent.prolog's docstring.
"""

from __future__ import annotations

import asyncio
import glob
import os
import signal
import stat
from dataclasses import dataclass

INFINITE = 65534  # Slurm's PrologEpilogTimeout default: wait indefinitely
TAIL = 2000  # bytes of a script's output kept for the log


@dataclass(frozen=True)
class ScriptResult:
    """How a (set of) script(s) ended. ``ok`` only when every one exited 0 in time."""
    ok: bool
    exit_code: int = 0
    signal: int = 0
    timed_out: bool = False
    detail: str = ""

    def status(self) -> str:
        """``exit:signal`` as Slurm logs a script's status."""
        return f"{self.exit_code}:{self.signal}"


OK = ScriptResult(True)


# ---- paths and trust ---------------------------------------------------------------------------
def script_paths(spec: str) -> list[str]:
    """The programs ``spec`` names: itself, or the matches of a glob pattern in reverse
    alphabetical order (Slurm: z-a, Z-A, 9-0). A pattern may match nothing (nothing runs); a
    plain path must exist, which :func:`untrusted` checks."""
    if not glob.has_magic(spec):
        return [spec]
    return sorted(glob.glob(spec), reverse=True)


def untrusted(path: str) -> str | None:
    """Why root must not run ``path`` (None when it may): not absolute, missing, not a regular
    executable file, or it or a directory above it (after resolving links) is owned by someone
    other than root or this daemon, or writable by group/others — except a sticky directory,
    whose entries only their owners can replace."""
    if not os.path.isabs(path):
        return f"{path}: not an absolute path"
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o111:
        return f"{path}: not an executable regular file"
    trusted = (0, os.geteuid())
    if st.st_uid not in trusted or st.st_mode & 0o022:
        return f"{path}: owned by uid {st.st_uid} or writable by group/others"
    d = os.path.dirname(real)
    while True:
        dst = os.stat(d)
        if dst.st_uid not in trusted or (dst.st_mode & 0o022 and not dst.st_mode & stat.S_ISVTX):
            return f"{path}: directory {d} is not root's alone"
        if d == "/":
            return None
        d = os.path.dirname(d)


# ---- running ----------------------------------------------------------------------------------
def timeout_of(cfg, kind: str) -> float | None:
    """Seconds a ``prolog`` or ``epilog`` may run: PrologTimeout/EpilogTimeout, else
    PrologEpilogTimeout; None (wait indefinitely) when unset, 0 or Slurm's 65534."""
    v = getattr(cfg, f"{kind}_timeout", None)
    if v is None:
        v = getattr(cfg, "prolog_epilog_timeout", None)
    return float(v) if v and 0 < v < INFINITE else None


async def run_scripts(spec: str | None, env: dict, timeout: float | None) -> ScriptResult:
    """Run every program of ``spec`` (see :func:`script_paths`) in turn; the first failure
    ends the set. Never raises for the script's sake: a refusal or an exec error is a failed
    result saying why."""
    if not spec:
        return OK
    for path in script_paths(spec):
        why = untrusted(path)
        if why:
            return ScriptResult(False, exit_code=1, detail=f"refused to run {why}")
        res = await _run_one(path, env, timeout)
        if not res.ok:
            return res
    return OK


async def _run_one(path: str, env: dict, timeout: float | None) -> ScriptResult:
    try:
        proc = await asyncio.create_subprocess_exec(
            path, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env=env, cwd="/", start_new_session=True,
            close_fds=True)
    except OSError as exc:
        return ScriptResult(False, exit_code=1, detail=f"{path}: {exc.strerror or exc}")
    tail = bytearray()
    reader = asyncio.ensure_future(_keep_tail(proc.stdout, tail))
    timed_out = False
    try:
        await asyncio.wait_for(proc.wait(), timeout)
    except TimeoutError:
        timed_out = True
    finally:
        if proc.returncode is None:  # timed out (or we are being cancelled): the whole group
            _killpg(proc.pid)
    if timed_out:
        await proc.wait()
    # a background child may hold the pipe open: take what is there, do not wait for EOF
    await asyncio.wait([reader], timeout=0.2)
    reader.cancel()
    rc = proc.returncode
    assert rc is not None  # waited for above
    code, sig = (rc, 0) if rc >= 0 else (0, -rc)
    text = tail.decode(errors="replace").strip()
    status = "timed out after %gs" % (timeout or 0) if timed_out else "status %d:%d" % (code, sig)
    detail = f"{path}: {status}"
    if text:
        detail += f": {text[-500:]}"
    return ScriptResult(rc == 0 and not timed_out, code, sig, timed_out, detail)


async def _keep_tail(stream, tail: bytearray) -> None:
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return
        tail += chunk
        del tail[:-TAIL]


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
