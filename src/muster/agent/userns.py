"""A user namespace in which a rootless OCI runtime can run a task as the user's own uid.

Runs in the container runner (muster.agent.oci), as the job's user, never as root.

Why: rootless runc 1.1 needs container uid 0 mapped, and chowns its exec fifo and stdio
pipes to the host id of that container root. Mapped onto the user (the only id a user may
map alone), the task can only be uid 0 inside. Mapped onto a subordinate id (/etc/subuid,
through the setuid newuidmap), those chowns fail: the user may not give files away.

So the runner first makes an *outer* user namespace (with a mount namespace it owns, which
runc needs to open bind sources): outer uid 0 is the user's first subordinate uid, the
user's uid maps to itself, and the same for gids. It keeps its full capability set there,
and raises it as ambient capabilities so the runtime it starts keeps them although its uid
is not 0: runc sees a non-zero euid (rootless: no cgroups of its own, no setgroups), yet
holds CAP_CHOWN/CAP_SETUID in the namespace that owns every id it hands out. Its container
maps container 0 -> outer 0 and the user's uid -> itself, so the task runs as the user's
uid, on the host as inside. Those capabilities are worth nothing outside: a user namespace
grants power only over what it owns (its mount namespace, ids mapped in it).

Supplementary groups: ``setgroups`` is denied in the outer namespace before its gid map is
written, so neither newgidmap nor the runtime can change them: the task keeps the user's
groups (shown inside as the overflow gid, still honoured by the host's permission checks).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

__all__ = ["UsernsError", "enter", "subordinate", "usable"]

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE = 47, 2
_CAP_VERSION_3 = 0x20080522


class UsernsError(Exception):
    """The namespace could not be made (the message says which step failed)."""


def subordinate(path: str, name: str, ident: int) -> int | None:
    """The first id of the user's first subordinate range in ``path`` (/etc/subuid or
    /etc/subgid: ``name-or-id:start:count``), None when there is none."""
    try:
        with open(path) as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.strip().split(":")
        if len(parts) != 3 or parts[0] not in (name, str(ident)):
            continue
        if parts[1].isdigit() and parts[2].isdigit() and int(parts[2]) > 0:
            return int(parts[1])
    return None


def usable(name: str, uid: int, gid: int) -> tuple[int, int] | None:
    """(subordinate uid, subordinate gid) when the task can run as the user's own ids: not
    root, both ranges given to the user, newuidmap and newgidmap installed; else None."""
    if uid == 0 or gid == 0 or not (shutil.which("newuidmap") and shutil.which("newgidmap")):
        return None
    sub_u = subordinate("/etc/subuid", name, uid)
    sub_g = subordinate("/etc/subgid", name, gid)
    return (sub_u, sub_g) if sub_u is not None and sub_g is not None else None


def enter(uid: int, gid: int, sub_uid: int, sub_gid: int) -> None:
    """Move this (single-threaded) process into a new user and mount namespace mapped as the
    module doc says, with every capability of it ambient. A helper forked before the
    unshare, still outside, writes the maps: new[ug]idmap must act on a process in the
    namespace from outside it."""
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the helper
        os.close(ready_w)
        code = 1
        try:
            if os.read(ready_r, 1) == b"u":
                parent = str(os.getppid())
                code = _map("newuidmap", parent, sub_uid, uid) or \
                    _map("newgidmap", parent, sub_gid, gid)
        finally:
            os._exit(code)
    os.close(ready_r)
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
            raise UsernsError(f"unshare: {os.strerror(ctypes.get_errno())}")
        with open("/proc/self/setgroups", "w") as fh:
            fh.write("deny")
        os.write(ready_w, b"u")
    finally:
        os.close(ready_w)
        _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise UsernsError("newuidmap/newgidmap refused the subordinate ids of uid "
                          f"{uid} (/etc/subuid, /etc/subgid)")
    _ambient_all(libc)


def _map(tool: str, pid: str, sub: int, own: int) -> int:
    r = subprocess.run([tool, pid, "0", str(sub), "1", str(own), str(own), "1"],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if r.returncode != 0:
        os.write(2, (r.stderr or f"{tool} failed\n").encode())
    return r.returncode


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _ambient_all(libc: ctypes.CDLL) -> None:
    """Make every permitted capability inheritable, then ambient, so programs started from
    here keep them across execve without being uid 0."""
    header, data = _Header(_CAP_VERSION_3, 0), (_Data * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise UsernsError(f"capget: {os.strerror(ctypes.get_errno())}")
    for half in data:
        half.inheritable = half.permitted
    if libc.capset(ctypes.byref(header), data) != 0:
        raise UsernsError(f"capset: {os.strerror(ctypes.get_errno())}")
    with open("/proc/sys/kernel/cap_last_cap") as fh:
        last = int(fh.read())
    for cap in range(last + 1):
        if libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0:
            raise UsernsError(f"cannot raise ambient capability {cap}: "
                              f"{os.strerror(ctypes.get_errno())}")
