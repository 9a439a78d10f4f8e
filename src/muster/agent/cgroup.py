"""Low-level cgroup access for cgroup v1 and v2: make, limit, attach, kill, measure, remove.

No job semantics here (those are in :mod:`muster.agent.confine`).  :func:`open_hierarchy`
returns a :class:`V1Hierarchy` or :class:`V2Hierarchy` (or ``None`` when no usable, writable
hierarchy exists); both offer the same methods.

Paths
-----
``rel`` arguments are cgroup paths relative to the hierarchy's mount (per controller on v1),
e.g. ``"muster_node1_ab12cd34/job_5/step_batch/task_0"``; leading/trailing slashes are ignored,
``..`` is refused.  :meth:`Hierarchy.own_base` gives the prefix a node tree should live under.

Invariants
----------
* Every failed write raises :class:`CgroupError` whose message names the file.
* Removal tolerates ENOENT (already gone) and retries EBUSY briefly (a cgroup whose last task
  has just exited stays busy until the kernel finishes the exit).
* v1: a new cpuset cgroup gets ``cpuset.cpus``/``cpuset.mems`` copied from its parent before
  anything can join it, whatever ``cgroup.clone_children`` says.  ``memory.memsw.*`` is used only
  where the kernel has it (swap accounting on).
* v2: a device filter replaced by :meth:`deny_devices` is never absent: the new BPF program is
  attached (``BPF_F_ALLOW_MULTI``) before the old one is detached; while both are attached a
  device is allowed only if both allow it.
* ``swap_limit_bytes`` is swap on top of the RAM limit (v2 ``memory.swap.max``); v1 writes
  ``memory.memsw.limit_in_bytes = limit + swap``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import signal
import struct
import time
from typing import Any

from muster.common import mountinfo as mountinfo_entries
from muster.common.hostlist import int_ranges

__all__ = [
    "CONTROLLERS",
    "CgroupError",
    "Hierarchy",
    "V1Hierarchy",
    "V2Hierarchy",
    "format_cpus",
    "open_hierarchy",
]

CONTROLLERS = frozenset(("cpuset", "memory", "devices", "pids", "freezer", "cpuacct"))
AGENT_LEAF = "muster_agent"
_V2_ENABLE = ("cpuset", "memory", "pids")  # domain controllers enabled down the tree
_RMDIR_RETRY_S = 2.0
_FREEZE_WAIT_S = 5.0


class CgroupError(Exception):
    """A cgroup operation failed; the message names the path and the reason."""


# ---------------------------------------------------------------------------------------------
# file primitives (methods of Hierarchy call these through self._read/_write/_mkdir so that a
# test can put a fake kernel behind them)


def _read(path: str) -> str:
    """The whole file as text. Raw read(2)s, not a text-mode ``open()``: a supervisor reads a
    dozen interface files per job, and in a freshly forked one the first text-mode open with
    ``encoding="ascii"`` imported the codec module (~1 ms of CPU per job); ``bytes.decode``
    of ASCII needs no codec lookup."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise CgroupError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except OSError as exc:
        raise CgroupError(f"{path}: cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    return b"".join(chunks).decode("ascii", "replace")


def _write(path: str, value: str) -> None:
    """One write(2) of *value*; no O_CREAT, so a missing interface file is an error as on
    cgroupfs (where it means the controller is not enabled there)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    except OSError as exc:
        raise CgroupError(f"{path}: cannot open for writing: {exc.strerror}") from None
    try:
        os.write(fd, value.encode())
    except OSError as exc:
        raise CgroupError(f"{path}: cannot write {value!r}: {exc.strerror}") from None
    finally:
        os.close(fd)


class _NoParent(CgroupError):
    """mkdir failed because the parent cgroup does not exist."""


def _mkdir(path: str) -> bool:
    """mkdir one level; True if it was created here (_NoParent when its parent is absent)."""
    try:
        os.mkdir(path)
        return True
    except FileExistsError:
        return False
    except FileNotFoundError:
        raise _NoParent(f"{path}: cannot create cgroup: parent missing") from None
    except OSError as exc:
        raise CgroupError(f"{path}: cannot create cgroup: {exc.strerror}") from None


def _rmdir(path: str, deadline: float) -> None:
    """rmdir with ENOENT tolerated and EBUSY retried until *deadline* (monotonic)."""
    delay = 0.005
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise CgroupError(f"{path}: cannot remove cgroup: {exc.strerror}") from None
        time.sleep(delay)  # the kernel finishing an exit; nothing to wait on
        delay = min(delay * 2, 0.1)


def _subdirs_bottom_up(path: str) -> list[str]:
    """*path* and every cgroup below it, children before parents ([] if *path* is gone).
    Directories only (``d_type``, no stat): a cgroup holds dozens of interface files."""
    try:
        with os.scandir(path) as it:
            subs = [e.path for e in it if e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    out: list[str] = []
    for sub in subs:
        out += _subdirs_bottom_up(sub)
    out.append(path)
    return out


def _rmdir_now(path: str) -> bool:
    """One rmdir, no retry: True when *path* is gone (ENOENT included), False when it is
    busy or has children (EBUSY on cgroupfs, ENOTEMPTY elsewhere)."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno in (errno.EBUSY, errno.ENOTEMPTY):
            return False
        raise CgroupError(f"{path}: cannot remove cgroup: {exc.strerror}") from None
    return True


def _first_missing(top: str, levels: list[str]) -> int:
    """Index of the first of *levels* (``_ancestry`` of a path) absent under *top*, found from
    the deepest upwards (usually one or two stats); ``len(levels)`` when all exist."""
    i = len(levels)
    while i > 0 and not os.path.isdir(os.path.join(top, levels[i - 1])):
        i -= 1
    return i


def _norm(rel: str) -> str:
    parts = [p for p in str(rel).split("/") if p and p != "."]
    if ".." in parts:
        raise CgroupError(f"{rel}: '..' is not allowed in a cgroup path")
    return "/".join(parts)


def _ancestry(rel: str) -> list[str]:
    """``"a/b/c"`` -> ``["a", "a/b", "a/b/c"]``."""
    parts = rel.split("/") if rel else []
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def format_cpus(cpus) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"`` (the kernel's list format)."""
    return int_ranges(int(c) for c in cpus)


def _kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _keyed(text: str) -> dict[str, int]:
    """``"key value"`` lines (memory.events, cpu.stat, oom_control) as a dict."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


# ---------------------------------------------------------------------------------------------
# common behaviour


class Hierarchy:
    """One cgroup hierarchy (v1: a set of per-controller mounts; v2: the unified tree)."""

    version: int = 0
    controllers: frozenset = frozenset()

    _read = staticmethod(_read)
    _write = staticmethod(_write)
    _mkdir = staticmethod(_mkdir)

    # --- subclasses provide
    def _dirs(self, rel: str) -> list[str]:
        """Absolute directories of *rel*, one per distinct mount (v2: one)."""
        raise NotImplementedError

    def _freeze(self, rel: str, frozen: bool) -> bool:
        """Freeze/thaw the subtree; False when freezing is not available."""
        raise NotImplementedError

    def own_base(self) -> str:
        """The base of the node's cgroup tree (relative), as each version places it."""
        raise NotImplementedError

    def make(self, rel: str, only=None) -> None:
        """Create *rel* (in the controllers *only*, default all)."""
        raise NotImplementedError

    def set_cpus(self, rel: str, cpus) -> None:
        raise NotImplementedError

    def set_memory(self, rel, limit_bytes, swap_limit_bytes=None, swappiness=None) -> None:
        raise NotImplementedError

    def deny_devices(self, rel: str, devs) -> None:
        raise NotImplementedError

    def oom_kills(self, rel: str) -> int:
        raise NotImplementedError

    def usage(self, rel: str) -> dict:
        raise NotImplementedError

    # --- shared
    def procs(self, rel: str) -> list[int]:
        """Every process in the subtree of *rel* (any controller), sorted."""
        rel = _norm(rel)
        found: set[int] = set()
        for top in self._dirs(rel):
            for d in _subdirs_bottom_up(top):
                try:
                    text = self._read(os.path.join(d, "cgroup.procs"))
                except CgroupError:
                    continue  # removed meanwhile
                found.update(int(x) for x in text.split())
        return sorted(found)

    def attach(self, rel: str, pid: int = 0, only=None, elsewhere: str | None = None) -> None:
        """Move *pid* (0: the calling process) into *rel* in every controller.  v1 with
        *only* (controller names): into *rel* in their mounts and into *elsewhere* (an
        ancestor of *rel*) in the others -- for a cgroup made with ``make(rel, only)``."""
        self.attach_levels([(rel, only), (elsewhere or rel, None)], pid)

    def attach_levels(self, levels: list[tuple[str, Any]], pid: int = 0) -> None:
        """Move *pid* (0: the calling process), in each mount, into the first of *levels*
        ``(rel, only)`` made there -- deepest first, each made with ``make(rel, only)``
        (*only* None: in every controller; the last level's must be None). v2 has one
        tree: the first level."""
        value = str(pid or os.getpid())
        for d in self._targets([(_norm(rel), only) for rel, only in levels]):
            self._write(os.path.join(d, "cgroup.procs"), value)

    def _targets(self, levels: list[tuple[str, Any]]) -> list[str]:
        return self._dirs(levels[0][0])  # one tree (v2): *only* does not apply

    def _dirs_of(self, rel: str, only) -> list[str]:
        """:meth:`_dirs` of *rel* where ``make(rel, only)`` made it."""
        return self._dirs(rel)  # one tree (v2): *only* does not apply

    def set_pids_max(self, rel: str, n: int | None) -> None:
        """``pids.max`` (None: unlimited)."""
        self._write(self._file("pids", rel, "pids.max"), "max" if n is None else str(int(n)))

    def kill_all(self, rel: str, timeout: float = 10.0) -> bool:
        """SIGKILL every process of the subtree; True once it is empty (within *timeout*).

        The subtree is frozen first so nothing can fork away between listing and killing;
        after the first round of SIGKILLs it is thawed (frozen tasks die only when thawed)
        and the listing is repeated until empty.
        """
        rel = _norm(rel)
        if not populated(self, rel):
            return True  # nothing to kill: no freeze/thaw round trip
        deadline = time.monotonic() + timeout
        frozen = self._freeze(rel, True)
        delay = 0.005
        try:
            while True:
                pids = self.procs(rel)
                if not pids:
                    return True
                _kill(pids)
                if frozen:
                    self._freeze(rel, False)
                    frozen = False
                if time.monotonic() > deadline:
                    return not self.procs(rel)
                time.sleep(delay)  # SIGKILLed tasks exiting: no event to wait on portably
                delay = min(delay * 2, 0.05)
        finally:
            if frozen:
                self._freeze(rel, False)

    def try_remove(self, rel: str, only=None) -> bool:
        """rmdir *rel* itself in every controller (*only*: where ``make(rel, only)`` made
        it), once, without waiting: True when it is gone everywhere (absent included); False
        when it still has a process or a child cgroup somewhere (then :meth:`remove` or
        :meth:`kill_all` is needed; it may be gone from some controllers already).  The
        cheap path for a cgroup whose owner has already emptied and cleared it: no walk, no
        sleep."""
        gone = True
        for top in self._dirs_of(_norm(rel), only):
            gone = _rmdir_now(top) and gone
        return gone

    def remove(self, rel: str) -> None:
        """rmdir the subtree of *rel*, bottom-up, in every controller (absent: no-op).  EBUSY
        is retried for ``_RMDIR_RETRY_S`` in all; every directory is tried before the first
        error is raised.  A leaf (the usual case) goes with one rmdir per controller."""
        first: CgroupError | None = None
        deadline = time.monotonic() + _RMDIR_RETRY_S
        for top in self._dirs(_norm(rel)):
            if _rmdir_now(top):
                continue
            for d in _subdirs_bottom_up(top):
                try:
                    _rmdir(d, deadline)
                except CgroupError as exc:
                    first = first or exc
        if first is not None:
            raise first

    def _file(self, controller: str, rel: str, name: str) -> str:
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# cgroup v1


class V1Hierarchy(Hierarchy):
    """cgroup v1: one mount per controller (``mounts``: controller -> mount directory).

    Two controllers may share a mount (``cpu,cpuacct``); directories are made, joined and
    removed once per distinct mount.
    """

    version = 1

    def __init__(self, mounts: dict[str, str], unique: list[str] | None = None):
        """*unique*: the distinct mounts, when already known (:func:`from_description`)."""
        self.mounts = {c: m for c, m in mounts.items() if c in CONTROLLERS}
        self.controllers = frozenset(self.mounts)
        if unique is None:
            seen, unique = set(), []
            for c in sorted(self.mounts):
                real = os.path.realpath(self.mounts[c])
                if real not in seen:
                    seen.add(real)
                    unique.append(self.mounts[c])
        self._unique = list(unique)

    def __repr__(self):
        return f"V1Hierarchy({self.mounts!r})"

    def own_base(self) -> str:
        """The root of every controller (``""``).

        v1 hierarchies are independent: the calling process usually sits at different places
        in different controllers, so (as Slurm does) node trees are rooted at each
        controller's top.
        """
        return ""

    def _dirs(self, rel):
        return [os.path.join(m, rel) for m in self._unique]

    def _file(self, controller, rel, name):
        if controller not in self.mounts:
            raise CgroupError(f"cgroup v1 controller {controller!r} is not mounted")
        return os.path.join(self.mounts[controller], _norm(rel), name)

    def make(self, rel: str, only=None) -> None:
        """mkdir -p *rel* in every controller (*only*: in the mounts of these controllers).
        Only the missing levels are made, and each is initialised (see class) by the call
        that made it, before its own children exist: levels that were there already were
        initialised when they were made."""
        levels = _ancestry(_norm(rel))
        for mount in self._mounts_of(only):
            if levels:
                self._make_levels(mount, levels)

    def _mounts_of(self, only) -> list[str]:
        """The distinct mounts (of the controllers in *only*; None: all)."""
        if only is None:
            return self._unique
        mine = {self.mounts[c] for c in only if c in self.mounts}
        return [m for m in self._unique if m in mine]

    def _targets(self, levels):
        made = [(rel, set(self._mounts_of(only))) for rel, only in levels]
        return [os.path.join(m, next(rel for rel, mounts in made if m in mounts))
                for m in self._unique]

    def _dirs_of(self, rel, only):
        return [os.path.join(m, rel) for m in self._mounts_of(only)]

    def _make_levels(self, mount: str, levels: list[str]) -> None:
        """mkdir the leaf, going up only while the parent is missing (one mkdir when just
        the leaf is new), then the rest top-down, each level initialised before its child
        is made."""
        k = len(levels) - 1
        while True:
            try:
                created = self._mkdir(os.path.join(mount, levels[k]))
                break
            except _NoParent:
                if k == 0:
                    raise
                k -= 1
        inherited: dict[str, str] = {}  # cpuset.cpus/mems of the deepest existing level
        if created:
            self._init_level(mount, os.path.join(mount, levels[k]), inherited)
        for level in levels[k + 1:]:
            path = os.path.join(mount, level)
            if self._mkdir(path):
                self._init_level(mount, path, inherited)

    def _init_level(self, mount: str, path: str, inherited: dict[str, str]) -> None:
        """A level just made: cpuset gets its parent's cpus/mems (read once per make: every
        level made below the same parent gets the same values); memory gets
        ``use_hierarchy=1`` right under the mount root (children inherit it at mkdir)."""
        if mount == self.mounts.get("cpuset"):
            parent = os.path.dirname(path)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if name not in inherited:
                    inherited[name] = self._read(os.path.join(parent, name)).strip()
                self._write(os.path.join(path, name), inherited[name])
        if mount == self.mounts.get("memory") and os.path.dirname(path) == mount.rstrip("/"):
            flag = os.path.join(path, "memory.use_hierarchy")
            if os.path.exists(flag) and self._read(flag).strip() == "0":
                self._write(flag, "1")

    def set_cpus(self, rel: str, cpus) -> None:
        """``cpuset.cpus`` (set it before making children: they copy it when created)."""
        self._write(self._file("cpuset", rel, "cpuset.cpus"), format_cpus(cpus))

    def set_memory(self, rel, limit_bytes, swap_limit_bytes=None, swappiness=None) -> None:
        """RAM limit (None: unlimited), swap on top of it (None: unlimited), swappiness.

        memsw must never be below the RAM limit, so it is opened to unlimited first, then the
        RAM limit is written, then memsw = RAM + swap.
        """
        memsw = self._file("memory", rel, "memory.memsw.limit_in_bytes")
        has_memsw = os.path.exists(memsw)
        if has_memsw:
            self._write(memsw, "-1")
        limit = "-1" if limit_bytes is None else str(int(limit_bytes))
        self._write(self._file("memory", rel, "memory.limit_in_bytes"), limit)
        if has_memsw and limit_bytes is not None and swap_limit_bytes is not None:
            self._write(memsw, str(int(limit_bytes) + int(swap_limit_bytes)))
        if swappiness is not None:
            self._write(self._file("memory", rel, "memory.swappiness"), str(int(swappiness)))

    def deny_devices(self, rel: str, devs) -> None:
        """Add ``devices.deny`` entries ``'c 195:0 rwm'`` (minor/major None: ``*``).

        Type ``'a'`` is written as a ``c`` and a ``b`` entry: v1's own ``a`` would switch the
        cgroup to deny-everything, whatever major/minor say.
        """
        path = self._file("devices", rel, "devices.deny")
        for dtype, major, minor in devs:
            for t in ("c", "b") if _dev_type(dtype) == "a" else (dtype,):
                self._write(path, f"{t} {_wild(major)}:{_wild(minor)} rwm")

    def _freeze(self, rel, frozen):
        if "freezer" not in self.mounts:
            return False
        path = self._file("freezer", rel, "freezer.state")
        if not os.path.exists(path):
            return False
        if not frozen:
            self._thaw_subtree(rel)
            return True
        self._write(path, "FROZEN")
        deadline = time.monotonic() + _FREEZE_WAIT_S
        while self._read(path).strip() != "FROZEN" and time.monotonic() < deadline:
            time.sleep(0.005)  # FREEZING -> FROZEN has no notification on v1
        return True

    def _thaw_subtree(self, rel: str) -> None:
        """THAWED into *rel* and every cgroup below it, parents first. On v1 thawing a parent
        does not thaw a child that was frozen by its own write: a step daemon that froze its
        step to kill it and was itself killed meanwhile leaves the step frozen, and its
        processes then sit in the refrigerator, where even SIGKILL cannot end them."""
        for d in reversed(_subdirs_bottom_up(os.path.join(self.mounts["freezer"], _norm(rel)))):
            state = os.path.join(d, "freezer.state")
            try:
                if self._read(state).strip() != "THAWED":
                    self._write(state, "THAWED")
            except CgroupError:
                pass  # removed meanwhile

    def oom_kills(self, rel: str) -> int:
        """OOM kills in the subtree: v1 counts a kill only in the victim's own memcg, so the
        ``oom_kill`` counters of every cgroup below are summed."""
        if "memory" not in self.mounts:
            return 0
        total = 0
        for d in _subdirs_bottom_up(os.path.join(self.mounts["memory"], _norm(rel))):
            try:
                total += _keyed(self._read(os.path.join(d, "memory.oom_control"))).get(
                    "oom_kill", 0)
            except CgroupError:
                continue
        return total

    def usage(self, rel: str) -> dict:
        """``cpu_user_us``, ``cpu_sys_us``, ``mem_peak``, ``mem_cur`` (None if unknown)."""
        out: dict[str, int | None] = {"cpu_user_us": None, "cpu_sys_us": None, "mem_peak": None,
                                      "mem_cur": None}
        files = (("cpuacct", "cpuacct.usage_user", "cpu_user_us", 1000),
                 ("cpuacct", "cpuacct.usage_sys", "cpu_sys_us", 1000),
                 ("memory", "memory.max_usage_in_bytes", "mem_peak", 1),
                 ("memory", "memory.usage_in_bytes", "mem_cur", 1))
        for ctrl, name, key, div in files:
            if ctrl in self.mounts:
                try:
                    out[key] = int(self._read(self._file(ctrl, rel, name)).strip()) // div
                except (CgroupError, ValueError):
                    pass
        self._precise_cpu(rel, out)
        return out

    def _precise_cpu(self, rel: str, out: dict) -> None:
        """``cpuacct.usage`` (ns) is the exact total: the scheduler's runtime of every task
        that ran in the cgroup, what the processes' own rusage sums to. ``usage_user`` and
        ``usage_sys`` are tick samples (on 6.x kernels the cpustat ticks taken while one of
        the cgroup's tasks was current, user+nice and system+irq+softirq), biased either way
        on a busy host: 104 ms of a 578 ms busy loop and 1.47 s of 2.19 s here, while a
        loaded run of the test suite drove them 3-16 % *above* the runtime (2.47 s against
        2.12 s of the job's rusage), interrupts served while the job was current included.
        So the total is always ``cpuacct.usage``, split in the user:system ratio of the two
        samples (all user when neither has a tick)."""
        if "cpuacct" not in self.mounts:
            return
        try:
            total_us = int(self._read(self._file("cpuacct", rel, "cpuacct.usage")).strip()) // 1000
        except (CgroupError, ValueError):
            return
        user, system = out["cpu_user_us"] or 0, out["cpu_sys_us"] or 0
        if user + system == total_us:
            return
        user_part = total_us * user // (user + system) if user + system else total_us
        out["cpu_user_us"], out["cpu_sys_us"] = user_part, total_us - user_part


def _dev_type(dtype: str) -> str:
    if dtype not in ("c", "b", "a"):
        raise CgroupError(f"device type {dtype!r}: expected 'c', 'b' or 'a'")
    return dtype


def _wild(num) -> str:
    return "*" if num is None or num == "*" or num == -1 else str(int(num))


# ---------------------------------------------------------------------------------------------
# cgroup v2


class V2Hierarchy(Hierarchy):
    """cgroup v2: the unified tree at *root*.

    ``proc_cgroup`` is where the calling process's membership is read (``0::/path``).
    ``devices`` says whether BPF device programs can be loaded (probed by
    :func:`open_hierarchy`; None: probe now).
    """

    version = 2

    def __init__(self, root: str, proc_cgroup: str = "/proc/self/cgroup",
                 devices: bool | None = None):
        self.root = root.rstrip("/") or "/"
        self.proc_cgroup = proc_cgroup
        self._base: str | None = None
        try:
            own = os.path.join(self.root, self._own_path())
        except CgroupError:
            own = self.root
        try:
            avail = set(self._read(os.path.join(own, "cgroup.controllers")).split())
        except CgroupError:
            avail = set()
        if devices is None:
            devices = bpf_device_filter_supported()
        ctrls = {"freezer", "cpuacct"} | (avail & {"cpuset", "memory", "pids"})
        if devices:
            ctrls.add("devices")
        self.controllers = frozenset(ctrls)

    def __repr__(self):
        return f"V2Hierarchy({self.root!r})"

    def _own_path(self) -> str:
        for line in self._read(self.proc_cgroup).splitlines():
            if line.startswith("0::"):
                return _norm(line[3:])
        raise CgroupError(f"{self.proc_cgroup}: no cgroup v2 entry")

    def _dirs(self, rel):
        return [os.path.join(self.root, rel)]

    def _file(self, controller, rel, name):
        return os.path.join(self.root, _norm(rel), name)

    def own_base(self) -> str:
        """The cgroup the calling process belongs to, made fit to hold a node tree.

        A non-root v2 cgroup cannot both hold processes and hand controllers to children
        ("no internal processes"), so the caller -- and every other process of that cgroup,
        which would block it just the same -- moves into ``<own>/muster_agent`` first.
        Idempotent: a caller already in ``.../muster_agent`` gets that leaf's parent.
        """
        own = self._own_path()
        if os.path.basename(own) == AGENT_LEAF:
            own = os.path.dirname(own)
        if own:
            self._move_into_leaf(own)
        self._base = own
        return own

    def _move_into_leaf(self, own: str) -> None:
        leaf = os.path.join(self.root, own, AGENT_LEAF)
        self._mkdir(leaf)
        self._write(os.path.join(leaf, "cgroup.procs"), str(os.getpid()))
        procs_file = os.path.join(self.root, own, "cgroup.procs")
        for pid in self._read(procs_file).split():
            try:
                self._write(os.path.join(leaf, "cgroup.procs"), pid)
            except CgroupError:
                pass  # exited meanwhile, or a kernel thread: nothing we can do
        left = self._read(procs_file).split()
        if left:
            raise CgroupError(f"{procs_file}: processes {' '.join(left)} cannot be moved to "
                              f"{AGENT_LEAF}; controllers cannot be enabled below {own!r}")

    def make(self, rel: str, only=None) -> None:
        """mkdir -p *rel*; enable cpuset/memory/pids in ``cgroup.subtree_control`` of every
        level that gets a child, from the base (:meth:`own_base`, else the root) down.
        *only* does not apply (one tree)."""
        rel = _norm(rel)
        base = self._base if self._base is not None else ""
        levels = [""] + _ancestry(rel)
        start = 0
        if base and (rel == base or rel.startswith(base + "/")):
            start = levels.index(base)
        # levels that exist already had their parents enabled when they were made: only the
        # deepest existing level and the new ones below it get a child here
        first = 1 + _first_missing(self.root, levels[1:])
        for i in range(first - 1, len(levels)):
            path = os.path.join(self.root, levels[i]) if levels[i] else self.root
            if i:
                self._mkdir(path)
            if start <= i < len(levels) - 1:
                self._enable(path)

    def _enable(self, path: str) -> None:
        avail = set(self._read(os.path.join(path, "cgroup.controllers")).split())
        ctl = os.path.join(path, "cgroup.subtree_control")
        have = set(self._read(ctl).split())
        missing = [c for c in _V2_ENABLE if c in avail and c not in have]
        if missing:
            self._write(ctl, " ".join("+" + c for c in missing))

    def set_cpus(self, rel: str, cpus) -> None:
        """``cpuset.cpus`` (the cpuset controller must be enabled at the parent)."""
        self._write(self._file("cpuset", rel, "cpuset.cpus"), format_cpus(cpus))

    def set_memory(self, rel, limit_bytes, swap_limit_bytes=None, swappiness=None) -> None:
        """``memory.max``; ``memory.swap.max`` where the kernel has it.  v2 has no
        per-cgroup swappiness: *swappiness* is ignored."""
        mx = "max" if limit_bytes is None else str(int(limit_bytes))
        self._write(self._file("memory", rel, "memory.max"), mx)
        swap = self._file("memory", rel, "memory.swap.max")
        if os.path.exists(swap):
            self._write(swap, "max" if swap_limit_bytes is None else str(int(swap_limit_bytes)))

    def deny_devices(self, rel: str, devs) -> None:
        """Replace the cgroup's device filter by one denying *devs* (empty: no filter)."""
        rules = [(_dev_type(t), _num(ma), _num(mi)) for t, ma, mi in devs]
        replace_device_filter(os.path.join(self.root, _norm(rel)), rules)

    def _freeze(self, rel, frozen):
        path = self._file("freezer", rel, "cgroup.freeze")
        if not os.path.exists(path):
            return False
        self._write(path, "1" if frozen else "0")
        if frozen:
            events = self._file("freezer", rel, "cgroup.events")
            deadline = time.monotonic() + _FREEZE_WAIT_S
            while (_keyed(self._read(events)).get("frozen") != 1
                   and time.monotonic() < deadline):
                time.sleep(0.005)
        return True

    def kill_all(self, rel: str, timeout: float = 10.0) -> bool:
        """``cgroup.kill`` (Linux 5.14+: atomic over the subtree) when present, else the
        freeze/kill/thaw loop; True once the subtree is empty."""
        kill = self._file("freezer", rel, "cgroup.kill")
        if not os.path.exists(kill):
            return super().kill_all(rel, timeout)
        if not populated(self, rel):
            return True
        deadline = time.monotonic() + timeout
        delay = 0.005
        while self.procs(rel):
            if time.monotonic() > deadline:
                return False
            self._write(kill, "1")
            time.sleep(delay)  # waiting for exits; cgroup.events has no portable wait here
            delay = min(delay * 2, 0.05)
        return True

    def oom_kills(self, rel: str) -> int:
        """``oom_kill`` of memory.events: summed ``memory.events.local`` over the subtree
        where the kernel has it (immune to the memory_localevents mount option), else the
        hierarchical count at *rel*."""
        top = os.path.join(self.root, _norm(rel))
        if os.path.exists(os.path.join(top, "memory.events.local")):
            total = 0
            for d in _subdirs_bottom_up(top):
                try:
                    text = self._read(os.path.join(d, "memory.events.local"))
                except CgroupError:
                    continue
                total += _keyed(text).get("oom_kill", 0)
            return total
        try:
            return _keyed(self._read(os.path.join(top, "memory.events"))).get("oom_kill", 0)
        except CgroupError:
            return 0

    def usage(self, rel: str) -> dict:
        """``cpu_user_us``, ``cpu_sys_us`` (cpu.stat), ``mem_peak`` (memory.peak, Linux
        5.19+), ``mem_cur`` (memory.current); None where the file is absent."""
        top = os.path.join(self.root, _norm(rel))
        out: dict[str, int | None] = {"cpu_user_us": None, "cpu_sys_us": None, "mem_peak": None,
                                      "mem_cur": None}
        try:
            stat = _keyed(self._read(os.path.join(top, "cpu.stat")))
            out["cpu_user_us"] = stat.get("user_usec")
            out["cpu_sys_us"] = stat.get("system_usec")
        except CgroupError:
            pass
        for name, key in (("memory.peak", "mem_peak"), ("memory.current", "mem_cur")):
            try:
                out[key] = int(self._read(os.path.join(top, name)).split()[0])
            except (CgroupError, ValueError, IndexError):
                pass
        return out


def _num(n) -> int | None:
    return None if n is None or n == "*" or n == -1 else int(n)


# ---------------------------------------------------------------------------------------------
# BPF cgroup device programs (v2), assembled by hand and loaded with bpf(2) through ctypes
#
# The program sees struct bpf_cgroup_dev_ctx { u32 access_type; u32 major; u32 minor; } in R1,
# access_type = (access << 16) | type with type 1 = block, 2 = char.  It returns 0 (EPERM) for
# a device matching a deny rule and 1 (allow) for everything else.

_SYS_BPF = {"x86_64": 321, "aarch64": 280, "ppc64le": 361, "ppc64": 361, "s390x": 351,
            "riscv64": 280, "loongarch64": 280, "i686": 357, "i386": 357, "armv7l": 386}
_BPF_PROG_LOAD, _BPF_PROG_ATTACH, _BPF_PROG_DETACH = 5, 8, 9
_BPF_PROG_GET_FD_BY_ID, _BPF_OBJ_GET_INFO_BY_FD, _BPF_PROG_QUERY = 13, 15, 16
_BPF_PROG_TYPE_CGROUP_DEVICE = 15
_BPF_CGROUP_DEVICE = 6  # attach type
_BPF_F_ALLOW_MULTI = 2
_PROG_NAME = b"muster_dev"
_ATTR_SIZE = 128
_DEV_TYPES = {"b": 1, "c": 2, "a": None}

# opcodes: class | op | source
_LDX_W = 0x61    # BPF_LDX | BPF_MEM | BPF_W
_AND32_K = 0x54  # BPF_ALU | BPF_AND | BPF_K
_JNE_K = 0x55    # BPF_JMP | BPF_JNE | BPF_K
_MOV64_K = 0xB7  # BPF_ALU64 | BPF_MOV | BPF_K
_EXIT = 0x95     # BPF_JMP | BPF_EXIT


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def assemble_device_filter(rules) -> bytes:
    """Instructions of a program denying each ``(type, major, minor)`` of *rules* (type
    ``'c'``/``'b'``/``'a'``, major/minor None = any) and allowing everything else."""
    prog = [
        _insn(_LDX_W, dst=2, src=1, off=0),     # r2 = ctx->access_type
        _insn(_AND32_K, dst=2, imm=0xFFFF),      # r2 &= 0xffff  (device type)
        _insn(_LDX_W, dst=3, src=1, off=4),     # r3 = ctx->major
        _insn(_LDX_W, dst=4, src=1, off=8),     # r4 = ctx->minor
    ]
    for dtype, major, minor in rules:
        conds = [(reg, val) for reg, val in ((2, _DEV_TYPES[dtype]), (3, major), (4, minor))
                 if val is not None]
        for i, (reg, val) in enumerate(conds):
            if not 0 <= val < 2 ** 31:
                raise CgroupError(f"device number {val} out of range")
            # not this rule: skip the rest of the conditions and the 2-insn "deny" tail
            prog.append(_insn(_JNE_K, dst=reg, off=len(conds) - i - 1 + 2, imm=val))
        prog += [_insn(_MOV64_K, dst=0, imm=0), _insn(_EXIT)]
    prog += [_insn(_MOV64_K, dst=0, imm=1), _insn(_EXIT)]
    return b"".join(prog)


_libc = None


def _bpf(cmd: int, attr: ctypes.Array) -> int:
    """bpf(2); OSError on failure."""
    global _libc
    nr = _SYS_BPF.get(platform.machine())
    if nr is None:
        raise OSError(errno.ENOSYS, f"bpf(2) number unknown for {platform.machine()}")
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    ret = _libc.syscall(ctypes.c_long(nr), ctypes.c_int(cmd), attr,
                        ctypes.c_uint(ctypes.sizeof(attr)))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret


def _attr(fmt: str, *values) -> ctypes.Array:
    buf = ctypes.create_string_buffer(_ATTR_SIZE)
    struct.pack_into(fmt, buf, 0, *values)
    return buf


def load_device_filter(rules) -> int:
    """Load the program for *rules*; returns its fd.  On a verifier refusal the error carries
    the verifier log."""
    code = assemble_device_filter(rules)
    insns = ctypes.create_string_buffer(code, len(code))
    lic = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(65536)
    for level in (0, 1):
        attr = _attr("<IIQQIIQII16s", _BPF_PROG_TYPE_CGROUP_DEVICE, len(code) // 8,
                     ctypes.addressof(insns), ctypes.addressof(lic), level,
                     ctypes.sizeof(log) if level else 0,
                     ctypes.addressof(log) if level else 0, 0, 0, _PROG_NAME)
        try:
            return _bpf(_BPF_PROG_LOAD, attr)
        except OSError as exc:
            if level:
                text = log.value.decode(errors="replace").strip()
                raise CgroupError(f"BPF device program refused: {exc.strerror}"
                                  + (f": {text}" if text else "")) from None
    raise AssertionError("unreachable: the last level raises")


def _attached_ids(cg_fd: int) -> list[int]:
    ids = (ctypes.c_uint32 * 64)()
    attr = _attr("<IIIIQI", cg_fd, _BPF_CGROUP_DEVICE, 0, 0, ctypes.addressof(ids), 64)
    _bpf(_BPF_PROG_QUERY, attr)
    count = struct.unpack_from("<I", attr, 24)[0]
    return list(ids[: min(count, 64)])


def _prog_name(fd: int) -> bytes:
    info = ctypes.create_string_buffer(256)
    attr = _attr("<IIQ", fd, 256, ctypes.addressof(info))
    _bpf(_BPF_OBJ_GET_INFO_BY_FD, attr)
    return info.raw[64:80].split(b"\0", 1)[0]


def attached_device_filters(cgroup_dir: str) -> list[int]:
    """Ids of the Muster device programs attached directly to *cgroup_dir*."""
    cg_fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        progs = _our_programs(cg_fd)
    finally:
        os.close(cg_fd)
    for _pid, fd in progs:
        os.close(fd)
    return [pid for pid, _fd in progs]


def _our_programs(cg_fd: int) -> list[tuple[int, int]]:
    """(id, fd) of each Muster program attached to the cgroup; the caller closes the fds."""
    out = []
    for pid in _attached_ids(cg_fd):
        try:
            fd = _bpf(_BPF_PROG_GET_FD_BY_ID, _attr("<I", pid))
        except OSError:
            continue  # detached meanwhile
        if _prog_name(fd) == _PROG_NAME:
            out.append((pid, fd))
        else:
            os.close(fd)
    return out


def replace_device_filter(cgroup_dir: str, rules) -> None:
    """Attach a program for *rules* to *cgroup_dir* (none when *rules* is empty), then
    detach the Muster programs attached before it -- in that order, so the cgroup is never
    unfiltered."""
    try:
        cg_fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise CgroupError(f"{cgroup_dir}: cannot open cgroup: {exc.strerror}") from None
    old: list[tuple[int, int]] = []
    new_fd = None
    try:
        old = _our_programs(cg_fd)
        if rules:
            new_fd = load_device_filter(rules)
            _bpf(_BPF_PROG_ATTACH, _attr("<IIII", cg_fd, new_fd, _BPF_CGROUP_DEVICE,
                                         _BPF_F_ALLOW_MULTI))
        for _pid, fd in old:
            _bpf(_BPF_PROG_DETACH, _attr("<III", cg_fd, fd, _BPF_CGROUP_DEVICE))
    except OSError as exc:
        raise CgroupError(f"{cgroup_dir}: device filter: {exc.strerror}") from None
    finally:
        for fd in [fd for _pid, fd in old] + ([new_fd] if new_fd is not None else []):
            os.close(fd)  # an attached program is held by the cgroup itself
        os.close(cg_fd)


_bpf_supported: bool | None = None


def bpf_device_filter_supported() -> bool:
    """Whether a cgroup device program can be loaded here (probed once)."""
    global _bpf_supported
    if _bpf_supported is None:
        try:
            os.close(load_device_filter([]))
            _bpf_supported = True
        except (CgroupError, OSError):
            _bpf_supported = False
    return _bpf_supported


# ---------------------------------------------------------------------------------------------
# discovery


def _cgroup_mount_entries(mountinfo: str) -> list[mountinfo_entries.Entry]:
    """(mount point, fs type, per-mount options, superblock options in their order) of every
    cgroup/cgroup2 line of *mountinfo*; [] when it cannot be read."""
    return [e for e in mountinfo_entries.entries(mountinfo) if e[1] in ("cgroup", "cgroup2")]


def _mounts(mountinfo: str = "/proc/self/mountinfo") -> list[tuple[str, str, set[str]]]:
    """(mount point, fs type, super options) of every cgroup/cgroup2 mount."""
    return [(p, kind, set(sup)) for p, kind, _opts, sup in _cgroup_mount_entries(mountinfo)]


def _find_v2(mount: str, mounts) -> str | None:
    for cand in (mount, os.path.join(mount, "unified")):
        if any(p == cand and t == "cgroup2" for p, t, _o in mounts) and os.access(cand, os.W_OK):
            return cand
    return None


def _find_v1(mount: str, mounts) -> dict[str, str]:
    found: dict[str, str] = {}
    for point, fstype, opts in mounts:
        if fstype != "cgroup" or os.path.dirname(point) != mount:
            continue
        if not os.access(point, os.W_OK):
            continue
        for ctrl in sorted(opts & CONTROLLERS):
            found.setdefault(ctrl, point)
    return found


def open_hierarchy(plugin: str = "autodetect", mount: str = "/sys/fs/cgroup",
                   mountinfo: str = "/proc/self/mountinfo") -> Hierarchy | None:
    """The hierarchy *plugin* (cgroup.conf ``CgroupPlugin``) selects under *mount*, or None
    when it is absent, not writable or ``disabled``.

    ``autodetect`` follows Slurm: *mount* itself a cgroup2 mount -> v2; v1 controllers
    mounted under it (also the "hybrid" layout with a cgroup2 ``unified`` beside them) ->
    v1; only a cgroup2 ``<mount>/unified`` -> v2.  ``cgroup/v2`` accepts *mount* or
    ``<mount>/unified``.
    """
    if plugin == "disabled":
        return None
    if plugin not in ("autodetect", "cgroup/v1", "cgroup/v2"):
        raise CgroupError(f"CgroupPlugin={plugin}: unknown plugin")
    mount = mount.rstrip("/") or "/"
    mounts = _mounts(mountinfo)
    if plugin in ("autodetect", "cgroup/v2"):
        v2 = _find_v2(mount, mounts)
        pure = any(p == mount and t == "cgroup2" for p, t, _o in mounts)
        if v2 and (plugin == "cgroup/v2" or pure):
            return V2Hierarchy(v2)
    if plugin in ("autodetect", "cgroup/v1"):
        v1 = _find_v1(mount, mounts)
        if v1:
            return V1Hierarchy(v1)
    if plugin == "autodetect":
        v2 = _find_v2(mount, mounts)
        return V2Hierarchy(v2) if v2 else None
    return None


def describe(hier: Hierarchy) -> dict:
    """What :func:`from_description` needs to rebuild *hier* in another process (the job's
    daemons) without reading mountinfo again or probing BPF: JSON-able."""
    if isinstance(hier, V1Hierarchy):
        return {"version": 1, "mounts": dict(hier.mounts), "unique": list(hier._unique)}
    assert isinstance(hier, V2Hierarchy)
    return {"version": 2, "root": hier.root, "devices": "devices" in hier.controllers}


def from_description(d: dict) -> Hierarchy:
    """The hierarchy :func:`describe` described (CgroupError when the description is bad)."""
    try:
        if d["version"] == 1:
            return V1Hierarchy(d["mounts"], d["unique"])
        return V2Hierarchy(d["root"], devices=bool(d["devices"]))
    except (KeyError, TypeError, AttributeError) as exc:
        raise CgroupError(f"bad cgroup hierarchy description {d!r}: {exc}") from None


# ---------------------------------------------------------------------------------------------
# added for muster.agent.confine [H-confine]: where the calling process is, to come back to
# after forking a task in the task's cgroup; the children of a cgroup (stale job trees)


def whereabouts(hier: Hierarchy, proc_cgroup: str = "/proc/self/cgroup") -> list[str]:
    """The ``cgroup.procs`` file of the calling process's cgroup in each distinct mount of
    *hier* (v1 controllers may each place it elsewhere): :func:`go_back` writes the pid
    there again. Entries the process is not listed in are left out."""
    lines = [ln.split(":", 2) for ln in _read(proc_cgroup).splitlines() if ln.count(":") >= 2]
    if isinstance(hier, V2Hierarchy):
        return [os.path.join(hier.root, _norm(path), "cgroup.procs")
                for hid, ctrls, path in lines if hid == "0" and ctrls == ""][:1]
    assert isinstance(hier, V1Hierarchy)
    out = []
    for mount in hier._unique:
        mine = {c for c, m in hier.mounts.items() if m == mount}
        for _hid, ctrls, path in lines:
            if mine & set(ctrls.split(",")):
                out.append(os.path.join(mount, _norm(path), "cgroup.procs"))
                break
    return out


def go_back(procs_files: list[str]) -> None:
    """Move the calling process back into the cgroups :func:`whereabouts` listed."""
    pid = str(os.getpid())
    for path in procs_files:
        _write(path, pid)


def children(hier: Hierarchy, rel: str) -> list[str]:
    """Names of the child cgroups of *rel* (in its first mount; [] when it is absent)."""
    try:
        top = hier._dirs(_norm(rel))[0]
        return sorted(e.name for e in os.scandir(top) if e.is_dir(follow_symlinks=False))
    except (OSError, IndexError):
        return []


def remove_if_empty(hier: Hierarchy, rel: str) -> None:
    """rmdir *rel* in every mount where it has no child cgroup and no process (else leave
    it: a job still runs there)."""
    for d in hier._dirs(_norm(rel)):
        try:
            os.rmdir(d)
        except OSError:
            pass


def populated(hier: Hierarchy, rel: str) -> bool:
    """Whether any process is left in the subtree of *rel*, cheaply where the kernel keeps
    the count (v2 ``cgroup.events``, v1 ``pids.current``); else by listing (:meth:`procs`)."""
    rel = _norm(rel)
    try:
        if isinstance(hier, V2Hierarchy):
            return _keyed(_read(os.path.join(hier.root, rel, "cgroup.events"))).get(
                "populated", 1) != 0
        if isinstance(hier, V1Hierarchy) and "pids" in hier.mounts:
            return int(_read(os.path.join(hier.mounts["pids"], rel, "pids.current"))) > 0
    except (CgroupError, ValueError):
        if not any(os.path.isdir(d) for d in hier._dirs(rel)):
            return False
    return bool(hier.procs(rel))


# ---------------------------------------------------------------------------------------------
# favordynmods: cheap cgroup migrations (issue 14's benchmark goal)
#
# Moving a task between cgroups takes the kernel's cgroup_threadgroup_rwsem for writing. That
# percpu rwsem is one for the whole kernel (every v1 hierarchy and the v2 one), and after an
# idle spell its first writer waits for an RCU grace period (~10 ms) to switch its readers to
# the slow path -- paid by nearly every job start and end on a quiet node. The cgroup2 mount
# option ``favordynmods`` (Linux 6.0+) keeps it switched (rcu_sync_enter on that global rwsem;
# since 6.18 also a per-threadgroup rwsem for cgroup.procs writes). The flag belongs to a
# cgroup root (v2 has one root, however many times it is mounted) and its effect is global.
# Mounting or remounting cgroup2 sets the root's options to exactly those given, so a remount
# passes every option the root has (nsdelegate, memory_recursiveprot, ...) plus this one, and
# the mount point's own nosuid/nodev/noexec/ro.

FAVOR_DYNMODS = "favordynmods"
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT = 1, 2, 4, 8, 32
_MOUNT_FLAGS = {"ro": _MS_RDONLY, "nosuid": _MS_NOSUID, "nodev": _MS_NODEV,
                "noexec": _MS_NOEXEC}
_PRIVATE_PREFIX = "muster-cgroup2-"


def _mount_syscall(source: str, target: str, fstype: str, flags: int, data: str) -> None:
    """mount(2) through libc; OSError on failure."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                           ctypes.c_char_p)
    if libc.mount(source.encode(), target.encode(), fstype.encode(), flags, data.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def cgroup2_mounts(mountinfo: str = "/proc/self/mountinfo") -> list[tuple[str, set, list]]:
    """(mount point, per-mount options, superblock options) of every cgroup2 mount."""
    return [(p, set(opts), sup) for p, kind, opts, sup in _cgroup_mount_entries(mountinfo)
            if kind == "cgroup2"]


def favor_dynmods(mountinfo: str = "/proc/self/mountinfo", private_parent: str | None = None,
                  only: list[str] | None = None, mount=_mount_syscall) -> tuple[bool, str]:
    """Make sure the cgroup2 root has ``favordynmods``: remount the first cgroup2 mount
    with it when it lacks it; with no cgroup2 mount at all (a v1-only host) mount a private
    one with it in a new temporary directory (under *private_parent*) and leave it mounted.
    *only*: consider just the cgroup2 mounts at these points (tests: a fresh private mount;
    ``[]``: as if none were mounted).  Returns (on, one line for the log); never raises
    (root and Linux 6.0+ are needed)."""
    mounts = [m for m in cgroup2_mounts(mountinfo) if only is None or m[0] in only]
    for point, _mopts, sopts in mounts:
        if FAVOR_DYNMODS in sopts:
            return True, f"cgroup2 at {point} already has {FAVOR_DYNMODS}"
    try:
        if mounts:
            point = remount_favoring(*mounts[0], mount=mount)
            what = f"remounted cgroup2 at {point} with {FAVOR_DYNMODS}"
        else:
            point = mount_private_favoring(private_parent, mount=mount)
            what = f"mounted a private cgroup2 at {point} with {FAVOR_DYNMODS} (none was mounted)"
    except OSError as exc:
        hint = " (Linux before 6.0?)" if exc.errno == errno.EINVAL else ""
        return False, f"cannot set {FAVOR_DYNMODS} on cgroup2: {exc.strerror}{hint}; " \
                      "each job start and end may wait for an RCU grace period"
    if not any(p == point and FAVOR_DYNMODS in s for p, _m, s in cgroup2_mounts(mountinfo)):
        return False, f"{what}, but the option did not stick (a cgroup namespace?)"
    return True, what + ": cgroup migrations no longer wait for an RCU grace period"


def remount_favoring(point: str, mount_opts: set, super_opts: list,
                     mount=_mount_syscall) -> str:
    """Remount the cgroup2 mount at *point* with ``favordynmods`` added to the root's
    options it has (*super_opts*), keeping its own nosuid/nodev/noexec/ro (*mount_opts*).
    Returns *point*; OSError from mount(2)."""
    keep = [o for o in super_opts if o not in ("rw", "ro", FAVOR_DYNMODS)]
    flags = _MS_REMOUNT | sum(f for o, f in _MOUNT_FLAGS.items() if o in mount_opts)
    mount("cgroup2", point, "cgroup2", flags, ",".join(keep + [FAVOR_DYNMODS]))
    return point


def mount_private_favoring(parent: str | None = None, mount=_mount_syscall) -> str:
    """Mount cgroup2 with ``favordynmods`` (and nothing else: for a host with no cgroup2
    mount, whose root options nobody relies on) on a new ``muster-cgroup2-*`` directory
    under *parent* (default: the temporary directory). Returns it; OSError (the directory
    removed again) when mount(2) fails."""
    import tempfile
    point = tempfile.mkdtemp(prefix=_PRIVATE_PREFIX, dir=parent)
    try:
        mount("cgroup2", point, "cgroup2", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, FAVOR_DYNMODS)
    except OSError:
        os.rmdir(point)
        raise
    return point
