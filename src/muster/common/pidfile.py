"""Daemon pid files (standard library only): how ``muster down``/``status``/``restart`` find
the daemons that actually run, also ones restarted by hand or by a supervisor (systemd).

Each daemon writes its own file at start and removes it at a clean exit: musterctld
``<StateSaveLocation>/musterctld.pid``, musterd ``<its node's spool>/musterd.pid`` (one per node
it serves), musterrestd ``<StateSaveLocation>/musterrestd.pid``. A file holds the pid and the
process's start time (field 22 of /proc/PID/stat, in clock ticks since boot).

Invariant: a pid read from a file is trusted only while /proc/PID still shows the same start
time and a command line naming the daemon. A stale file whose pid the kernel has since reused
for another process (anyone's) is therefore never signalled: ``running`` returns None for it.
The files are written by the daemon (root, or the cluster owner) into its own private
directory, created with O_EXCL under a temporary name and renamed into place, so no user can
plant one.
"""

from __future__ import annotations

import os

CONTROLLER = "musterctld.pid"
AGENT = "musterd.pid"
RESTD = "musterrestd.pid"


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks after boot), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    try:
        return None if fields[0] == b"Z" else int(fields[19])  # field 22 counted from 1
    except (IndexError, ValueError):
        return None


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def names_daemon(pid: int, daemon: str) -> bool:
    """/proc/PID/cmdline runs ``daemon``: as the program (``/…/musterctld -f …``) or as the
    script a Python interpreter runs (``python /…/musterctld …``)."""
    return any(os.path.basename(a) == daemon for a in _cmdline(pid)[:2])


def write(path: str, pid: int | None = None) -> None:
    pid = os.getpid() if pid is None else pid
    tmp = f"{path}.{pid}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, f"{pid} {start_time(pid) or 0}\n".encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read(path: str) -> tuple[int, int] | None:
    """(pid, start time) from the file, None when it is missing or malformed."""
    try:
        with open(path) as fh:
            pid_s, start_s = fh.read().split()[:2]
        pid, start = int(pid_s), int(start_s)
    except (OSError, ValueError):
        return None
    return (pid, start) if pid > 1 else None


def running(path: str, daemon: str) -> int | None:
    """The pid the file names if that very process (same start time) still runs ``daemon``;
    None otherwise (no file, process gone, pid reused)."""
    got = read(path)
    if got is None:
        return None
    pid, start = got
    if start_time(pid) != start or not names_daemon(pid, daemon):
        return None
    return pid


def remove(path: str) -> None:
    """Remove the file if it names this process (a successor may already have replaced it)."""
    got = read(path)
    if got is not None and got[0] == os.getpid():
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
