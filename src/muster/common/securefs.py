"""Ownership and mode checks for the daemons' own directories (standard library only).

The state directory holds the controller's database, its Unix socket, the cluster key and the
agents' spool; whoever can write to it (or swap it) can forge jobs or read the key. As MUNGE
does for its key and socket directories, a daemon refuses to start on a directory that is not
owned by its own user (or root) or that group or others may write; ``muster up`` creates its
state directory with the right owner and mode and refuses one that someone else created, rather
than adopting it (a hostile user could have planted files or links in it beforehand).
"""

from __future__ import annotations

import os
import stat


class UnsafePath(Exception):
    """A directory or file the daemon must not trust; the message says why and how to fix it."""


def _trusted_owner(uid: int) -> bool:
    return uid in (0, os.geteuid())


def check_private_dir(path: str, what: str) -> None:
    """Refuse ``path`` unless it is a real directory (not a symlink) owned by root or us and
    not writable by group or others. Sticky world-writable directories (``/tmp``) are refused
    too: a daemon's state never lives directly in one."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise UnsafePath(f"{what} {path}: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"{what} {path} is a symbolic link; use the real path")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{what} {path} is not a directory")
    if not _trusted_owner(st.st_uid):
        raise UnsafePath(f"{what} {path} is owned by uid {st.st_uid}, not by this daemon's user "
                         f"(uid {os.geteuid()}) or root; remove it or fix its owner")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafePath(f"{what} {path} is writable by group or others (mode "
                         f"{stat.S_IMODE(st.st_mode):04o}); chmod go-w it")


def ensure_private_dir(path: str, what: str, mode: int = 0o755) -> None:
    """Create ``path`` (and missing parents) with ``mode`` owned by us, or check an existing
    one with :func:`check_private_dir`. An existing directory is never chowned or chmodded
    into trust: a directory someone else made stays refused."""
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        try:
            os.mkdir(path, mode)
        except FileExistsError:
            pass
    else:
        os.chmod(path, mode)  # the umask may have removed bits we want (never adds write)
    check_private_dir(path, what)


def write_private_json(path: str, obj: dict) -> None:
    """Write ``obj`` to ``path`` atomically (a temporary file renamed over it) and privately
    (0600: the agent's launch descriptions hold the job's environment). Encoded in one
    ``json.dumps`` (C) and one write: ``json.dump`` to a file runs the pure-Python encoder,
    which cost ~1 ms per launch. For the daemons' own directories (no user-chosen path)."""
    import json  # here: `muster` (the CLI) imports this module for its directory checks
    tmp = path + ".tmp"
    data = json.dumps(obj).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    os.replace(tmp, path)
