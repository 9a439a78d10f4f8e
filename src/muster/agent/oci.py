"""Containers: run one task (or a batch script) inside an OCI container, as the job's user.

The step daemon and the batch supervisor start a container task exactly as any other — as
the user, born in its task cgroup, through the working-directory wrapper — with the command
replaced by ``python -m muster.agent.oci [--batch] -- ARGV`` (:func:`task_argv`). That runner
(this module's :func:`main`) then, still as the user:

1. reads the request from ``MUSTER_CONTAINER`` (muster.common.containerspec) and oci.conf;
2. gets a root filesystem: the bundle's (``--container``), the image's from the user's node
   cache (muster.agent.imagecache; pinned while the container runs), a private writable copy
   of it (``--container-writable``), or the job's named container (``--container-name``:
   made from the image by the first step that names it, reused by later ones);
3. writes the runtime config (:func:`build_config`) into a per-task directory (Slurm's
   per-step spool, ``%m``): the task's environment, working directory, mounts, the node's
   GPU device files, the user's ids;
4. runs the OCI runtime from oci.conf (default: rootless ``runc run``) and exits with the
   container's status. Failures print ``slurmstepd-<node>: error: container: …`` on the
   task's stderr, say the reason on the launch report channel (:class:`LaunchReport`) and
   exit 1: the task, and so the step or job, fails as a launch failure with the reason.

Why rootless, as the user (docs/design.md "Containers"): the bundle, image and mount paths
are the user's, so root never opens them; the kernel checks every mount source against the
user's rights; the container's processes are the user's on the host (the task is the
user's own uid inside too, through muster.agent.userns; with ``--container-remap-root`` it
shows uid 0, the user mapped through a user namespace); and the runtime inherits the task
cgroup it is born in — rootless runc creates no cgroup of its own, so the job's memory, CPU
and device limits hold inside exactly as outside.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys

from muster.agent import imagecache, userns
from muster.common import containerspec
from muster.config import ociconf

__all__ = ["LaunchReport", "add_gpus", "build_config", "cleanup_job", "id_maps", "main",
           "task_argv", "user_dir", "wanted"]

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CAPS = ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
NVIDIA_HOOK = "nvidia-container-runtime-hook"
GPU_FILES = re.compile(r"nvidia(\d+|ctl|-uvm|-uvm-tools|-modeset)$")
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2, signal.SIGCONT, signal.SIGALRM)


KILLING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
REPORT_ENV = "MUSTER_LAUNCH_REPORT_FD"  # the runner's end of the LaunchReport pipe
REPORT_MAX = 1024  # bytes of a launch report root reads; more are left in the pipe


class ContainerError(Exception):
    """Why the container cannot run (printed on the task's stderr)."""


# ---- the step daemon's side (root; reads nothing of the user's) -------------------------------

def wanted(env: dict) -> bool:
    """Whether the task's environment asks for a container."""
    return bool(env.get(containerspec.ENV))


def task_argv(argv: list[str], conf_dir: str | None, batch: bool = False) -> list[str]:
    """The command a container task runs instead of ``argv`` (module doc)."""
    return [sys.executable, "-I", "-m", "muster.agent.oci", "--conf", conf_dir or "",
            *(["--batch"] if batch else []), "--", *argv]


class LaunchReport:
    """Root's end of the channel on which a container task's runner says why its container
    could not start (docs/design.md "Containers", docs/security.md): a pipe made by the
    batch supervisor or step daemon, whose write end the task inherits (its number in
    ``MUSTER_LAUNCH_REPORT_FD``, which the runner removes before anything else runs).

    Invariants: root opens no path for it and reads it only after the task was reaped, once,
    without blocking and at most REPORT_MAX bytes, so a job that keeps the write end open,
    fills the pipe or writes nothing cannot stall its parent. The descriptor passed is this
    object's own, never a number taken from the task's environment (the user's). Whatever
    the job's processes write there too (the runner's end is theirs: same user) can only
    relabel their own task's failure, so the text is shown as the job's own and trusted for
    nothing else; a task that exited with anything but the runner's failure status 1 (0, a
    signal) is never called a launch failure."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.fds: tuple[int, ...] = (self.w,)

    @classmethod
    def make(cls) -> LaunchReport | None:
        """A new channel; None when no pipe can be made (out of descriptors): the task runs
        all the same, a failure is then only in its output."""
        try:
            return cls()
        except OSError:
            return None

    def env(self, env: dict) -> dict:
        """The task's environment naming its end (a value the user set is replaced)."""
        return {**env, REPORT_ENV: str(self.w)}

    def started(self) -> None:
        """The task has its copy (or never started): ours of the write end goes, so the
        reader sees only the task's writes."""
        if self.w >= 0:
            os.close(self.w)
            self.w = -1
        self.fds = ()

    def reason(self, exit_code: int, sig: int) -> str | None:
        """The runner's reason, when the task ended with its failure status (1, no
        signal) and said one; then the channel is closed. One line of printable text."""
        self.started()
        data = b""
        try:
            if exit_code == 1 and not sig:
                data = os.read(self.r, REPORT_MAX)
        except OSError:  # nothing written (EAGAIN)
            pass
        finally:
            os.close(self.r)
        text = "".join(c if c.isprintable() else " " for c in
                       data.decode("utf-8", "replace")).strip()
        return text or None


def _report(fd: int | None, text: str) -> None:
    """The runner's side of LaunchReport: one write, never blocking (the pipe is
    non-blocking: a job that filled it loses the report, not its runner)."""
    if fd is None:
        return
    try:
        os.write(fd, text.encode("utf-8", "replace")[:REPORT_MAX])
    except OSError:
        pass


def _take_report_fd() -> int | None:
    """Remove ``MUSTER_LAUNCH_REPORT_FD`` from the environment (the container and the
    runtime never see it) and keep the descriptor it names close-on-exec, so that no
    command the runner starts inherits it. None: no channel (not open, or not a number)."""
    value = os.environ.pop(REPORT_ENV, "")
    if not (value.isascii() and value.isdigit()) or len(value) > 9:
        return None
    fd = int(value)
    try:
        os.set_inheritable(fd, False)
    except OSError:
        return None
    return fd


# ---- the runner (the job's user) --------------------------------------------------------------

def user_dir(uid: int, base: str = "/tmp") -> str:
    """The user's container directory on this node, made 0700 if missing; refused when it is
    not a directory the user owns and alone may write (someone else could plant files)."""
    path = os.path.join(base, f"muster-oci-{uid}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path) or st.st_uid != uid or st.st_mode & 0o022:
        raise ContainerError(f"{path} is not a private directory of uid {uid}")
    return path


def _read_json(path: str, what: str) -> dict:
    try:
        with open(path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise ContainerError(f"{what}: {path}: No such file or directory") from None
    except (OSError, ValueError) as exc:
        raise ContainerError(f"{what}: {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ContainerError(f"{what}: {path}: not a JSON object")
    return data


def merged_env(task_env: dict, image_env: list[str], keep_host: list[str]) -> dict:
    """The container's environment (pyxis's rule): the task's, then the image's variables
    over it, except those named by ``--container-env``, whose host value wins."""
    env = dict(task_env)
    for item in image_env:
        name, _, value = item.partition("=")
        if name not in keep_host or name not in task_env:
            env[name] = value
    return env


def _mounts(spec: dict, run_dir: str, conf: ociconf.OciConf, uid: int,
            kernel: bool = True) -> list[dict]:
    """The runtime's mounts: the kernel file systems and a private /tmp (``kernel``: not for
    a bundle, whose config has its own), the node's GPU device files (the devices cgroup
    still decides which of them open), the home directory when asked, the user's binds, and
    the per-task spool at MountSpoolDir."""
    m: list[dict] = [] if not kernel else [{"destination": "/proc", "type": "proc", "source": "proc"},
         {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
          "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
         {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
          "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
         {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
          "options": ["nosuid", "nodev", "mode=1777"]},
         {"destination": "/sys", "type": "none", "source": "/sys",
          "options": ["rbind", "nosuid", "noexec", "nodev", "ro"]},
         {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
          "options": ["nosuid", "nodev", "mode=1777"]}]
    for name in sorted(os.listdir("/dev")):
        if GPU_FILES.match(name):
            m.append(_bind(f"/dev/{name}", f"/dev/{name}", ""))
    if spec.get("mount_home"):
        home = pwd.getpwuid(uid).pw_dir
        m.append(_bind(home, home, ""))
    for src, dst, flags in spec.get("mounts") or []:
        m.append(_bind(src, dst, flags))
    m.append(_bind(run_dir, conf.mount_spool_dir or "/run/muster", ""))
    return m


def _bind(src: str, dst: str, flags: str) -> dict:
    opts = [f for f in flags.split("+") if f and f not in ("bind", "rbind")]
    return {"destination": dst, "type": "none", "source": src, "options": ["rbind", *opts]}


def build_config(base: dict, *, rootfs: str, readonly: bool, argv: list[str], env: dict,
                 cwd: str, mounts: list[dict], uid: int, gid: int, keep_base: bool,
                 own_ids: bool = False) -> dict:
    """The runtime config of one task. ``base``: the bundle's config (``keep_base``: its
    mounts and namespaces stay, as with Slurm) or the image's. Always: the task's command,
    environment and working directory, no terminal, a user namespace, and no cgroup path —
    the runtime stays in the task's cgroup. Ids: with ``own_ids`` (the runtime runs in
    muster.agent.userns's outer namespace) the task is the user's uid and gid inside, and
    container root maps to outer 0 (a subordinate id); without, container root is the
    user (the only id a rootless runtime can map alone: ``--container-remap-root``)."""
    cfg = json.loads(json.dumps(base)) if keep_base else {}
    cfg["ociVersion"] = base.get("ociVersion") or "1.0.2"
    cfg["root"] = {"path": rootfs, "readonly": readonly}
    proc = cfg.setdefault("process", {})
    inside = (uid, gid) if own_ids else (0, 0)
    proc.update({"terminal": False, "user": {"uid": inside[0], "gid": inside[1]},
                 "args": argv, "env": [f"{k}={v}" for k, v in env.items()], "cwd": cwd})
    proc.setdefault("noNewPrivileges", True)
    proc.setdefault("capabilities", {k: CAPS for k in ("bounding", "effective", "permitted")})
    linux = cfg.setdefault("linux", {})
    linux["uidMappings"], linux["gidMappings"] = id_maps(uid, gid, own_ids)
    linux.pop("cgroupsPath", None)
    linux.pop("resources", None)
    spaces = [n for n in linux.get("namespaces") or [] if n.get("type") not in
              ("network", "cgroup", "user")] if keep_base else \
        [{"type": t} for t in ("pid", "ipc", "mount")]
    linux["namespaces"] = spaces + [{"type": "user"}]
    cfg["mounts"] = (cfg.get("mounts") or [] if keep_base else []) + mounts
    linux.setdefault("maskedPaths", ["/proc/kcore", "/proc/keys", "/proc/timer_list",
                                     "/sys/firmware"])
    linux.setdefault("readonlyPaths", ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                                       "/proc/sysrq-trigger"])
    return cfg


def id_maps(uid: int, gid: int, own_ids: bool) -> tuple[list[dict], list[dict]]:
    """(uidMappings, gidMappings): see build_config. With ``own_ids`` the host ids are the
    outer namespace's (userns module doc): 0 there is the subordinate id, the user's own ids
    map to themselves."""
    if own_ids:
        return ([{"containerID": 0, "hostID": 0, "size": 1},
                 {"containerID": uid, "hostID": uid, "size": 1}],
                [{"containerID": 0, "hostID": 0, "size": 1},
                 {"containerID": gid, "hostID": gid, "size": 1}])
    return ([{"containerID": 0, "hostID": uid, "size": 1}],
            [{"containerID": 0, "hostID": gid, "size": 1}])


def add_gpus(cfg: dict, env: dict, hook: str | None) -> dict:
    """The allocated GPUs inside. With the NVIDIA container toolkit's prestart hook
    installed (``hook``: its path) and GPUs allocated (``SLURM_STEP_GPUS``, or the batch
    step's ``SLURM_JOB_GPUS``: the node's GPU indices), the hook gets them as
    ``NVIDIA_VISIBLE_DEVICES`` and mounts their device files and the driver's libraries
    itself: our own binds of ``/dev/nvidia*`` go. Without it the binds stay (_mounts). Either
    way the job's device cgroup decides which device files open."""
    gpus = env.get("SLURM_STEP_GPUS") or env.get("SLURM_JOB_GPUS")
    if not hook or not gpus:
        return cfg
    proc = cfg["process"]
    names = {e.partition("=")[0] for e in proc["env"]}
    proc["env"] = [e for e in proc["env"] if not e.startswith("NVIDIA_VISIBLE_DEVICES=")]
    proc["env"].append(f"NVIDIA_VISIBLE_DEVICES={gpus}")
    if "NVIDIA_DRIVER_CAPABILITIES" not in names:
        proc["env"].append("NVIDIA_DRIVER_CAPABILITIES=compute,utility")
    cfg["mounts"] = [m for m in cfg.get("mounts") or [] if not (
        m.get("source", "").startswith("/dev/") and GPU_FILES.match(m["source"][5:]))]
    prestart = cfg.setdefault("hooks", {}).setdefault("prestart", [])
    prestart.append({"path": hook, "args": [os.path.basename(hook), "prestart"],
                     "env": [f"PATH={DEFAULT_PATH}"]})
    return cfg


class _Runner:
    def __init__(self, conf_dir: str, batch: bool, argv: list[str]):
        self.env = dict(os.environ)
        self.spec = containerspec.decode(self.env.get(containerspec.ENV)) or {}
        self.conf = ociconf.load_oci_conf(conf_dir or None)
        self.batch, self.argv = batch, argv
        self.uid, self.gid = os.getuid(), os.getgid()
        self.node = self.env.get("SLURMD_NODENAME", "")
        self.job = self.env.get("SLURM_JOB_ID", "0")
        self.step = self.env.get("SLURM_STEP_ID", "batch" if batch else "0")
        self.task = self.env.get("SLURM_PROCID", "0")
        self.home = user_dir(self.uid)
        self.pins: list[int] = []  # cache locks held while the container runs
        self.killing = False  # RunTimeKill is running (a signal came meanwhile: once is enough)
        self.sub = None if self.spec.get("remap_root") else userns.usable(
            pwd.getpwuid(self.uid).pw_name, self.uid, self.gid)
        if self.sub is None and not self.spec.get("remap_root") and self.task == "0":
            sys.stderr.write(f"slurmstepd-{self.node}: warning: container: no subordinate "
                             "ids (/etc/subuid, /etc/subgid, newuidmap) for this user: "
                             "running as root inside, as --container-remap-root\n")

    def prepare(self) -> tuple[str, dict]:
        """(the task's bundle directory, its config)."""
        run_dir = os.path.join(self.home, "run", f"{self.node}.{self.job}.{self.step}.{self.task}")
        shutil.rmtree(run_dir, ignore_errors=True)
        os.makedirs(run_dir, mode=0o700)
        self.run_dir = run_dir
        argv = self.argv
        if self.batch:  # the script lives in root's spool: the container sees a copy
            shutil.copyfile(argv[0], os.path.join(run_dir, "script"))
            os.chmod(os.path.join(run_dir, "script"), 0o700)
            argv = [os.path.join(self.conf.mount_spool_dir or "/run/muster", "script"),
                    *argv[1:]]
        cfg = self._bundle_config(argv) if "bundle" in self.spec else self._image_config(argv)
        return run_dir, add_gpus(cfg, self.env, shutil.which(NVIDIA_HOOK))

    def _bundle_config(self, argv: list[str]) -> dict:
        bundle = os.path.abspath(self.spec["bundle"])
        base = _read_json(os.path.join(bundle, "config.json"), "container bundle")
        root = (base.get("root") or {}).get("path") or "rootfs"
        rootfs = os.path.join(bundle, root)
        if not os.path.isdir(rootfs):
            raise ContainerError(f"container bundle {bundle}: root {rootfs} is not a directory")
        env = dict(e.partition("=")[::2] for e in (base.get("process") or {}).get("env") or [])
        env.update(self.env)
        return build_config(base, rootfs=rootfs, readonly=bool(base.get("root", {}).get(
            "readonly")), argv=argv, env=self._filtered(env), cwd=self.spec.get("workdir") or
            os.getcwd(), mounts=_mounts(self.spec, self.run_dir, self.conf, self.uid, kernel=False),
            uid=self.uid, gid=self.gid, keep_base=True, own_ids=self.sub is not None)

    def _image_config(self, argv: list[str]) -> dict:
        rootfs, image_cfg = self._rootfs()
        proc = image_cfg.get("process") or {}
        env = merged_env(self.env, proc.get("env") or [f"PATH={DEFAULT_PATH}"],
                         self.spec.get("env") or [])
        writable = self.spec.get("writable")
        readonly = not (writable or "name" in self.spec) if writable is not False else True
        return build_config({}, rootfs=rootfs, readonly=readonly, argv=argv,
                            env=self._filtered(env),
                            cwd=self.spec.get("workdir") or proc.get("cwd") or "/",
                            mounts=_mounts(self.spec, self.run_dir, self.conf, self.uid),
                            uid=self.uid, gid=self.gid, keep_base=False,
                            own_ids=self.sub is not None)

    def _filtered(self, env: dict) -> dict:
        pat = re.compile(self.conf.env_exclude) if self.conf.env_exclude else None
        return {k: v for k, v in env.items()
                if k != containerspec.ENV and not (pat and pat.match(k))}

    def _rootfs(self) -> tuple[str, dict]:
        """The root filesystem and the image's runtime config (module doc, step 2)."""
        named = None
        if "name" in self.spec:
            named = os.path.join(self.home, "jobs", f"{self.node}.{self.job}", self.spec["name"])
            os.makedirs(os.path.dirname(named), mode=0o700, exist_ok=True)
            if os.path.isdir(named):
                return os.path.join(named, "rootfs"), _image_cfg(named)
            if "image" not in self.spec:
                raise ContainerError(f"no container named {self.spec['name']} in job "
                                     f"{self.job} (give --container-image to create it)")
        cache = imagecache.ImageCache(os.path.join(self.home, "images"),
                                      self.conf.cache_mb << 20)
        entry, fd = cache.acquire(self.spec["image"])
        self.pins.append(fd)
        if named is not None:
            _copy_once(entry, named)
            return os.path.join(named, "rootfs"), _image_cfg(named)
        if self.spec.get("writable"):
            private = os.path.join(self.run_dir, "image")
            _copy(entry, private)
            return os.path.join(private, "rootfs"), _image_cfg(private)
        return os.path.join(entry, "rootfs"), _image_cfg(entry)

    def run(self) -> int:
        run_dir, cfg = self.prepare()
        with open(os.path.join(run_dir, "config.json"), "w") as fh:
            json.dump(cfg, fh)
        values = {"b": run_dir, "e": os.path.join(run_dir, "environment"), "j": self.job,
                  "m": run_dir, "n": self.node, "p": os.getpid(), "r": cfg["root"]["path"],
                  "s": self.step, "t": self.task, "U": self.uid,
                  "u": pwd.getpwuid(self.uid).pw_name}
        self._env_file(values["e"], cfg)
        for sig in FORWARDED:  # the runtime shares our process group: it gets them itself
            signal.signal(sig, lambda *_: None)
        try:
            if self.sub is not None:
                userns.enter(self.uid, self.gid, *self.sub)
            if self.conf.run:
                status = _sh(ociconf.expand(self.conf.run, values, self.argv))
            else:
                status = self._create_start(values)
            return self._save(cfg["root"]["path"], status)
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)

    def _save(self, rootfs: str, status: int) -> int:
        """pyxis's ``--container-save``: the root filesystem as it is now, written as a
        squashfs image (mksquashfs, as enroot exports) by the node's first task, into a
        temporary name beside the target and renamed over it whole. A failed save fails a
        task that had succeeded."""
        target = self.spec.get("save")
        if not target or self.env.get("SLURM_LOCALID", "0") != "0":
            return status
        tmp = f"{target}.{self.node}.{os.getpid()}.tmp"
        try:
            r = subprocess.run(["mksquashfs", rootfs, tmp, "-noappend", "-quiet",
                                "-no-progress", "-no-xattrs"], stdin=subprocess.DEVNULL,
                               capture_output=True, text=True)
            if r.returncode != 0:
                tail = (r.stderr or r.stdout).strip().splitlines()[-1:]
                raise ContainerError(tail[0] if tail else f"mksquashfs exit {r.returncode}")
            os.rename(tmp, target)
        except (OSError, ContainerError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else str(exc)
            sys.stderr.write(f"slurmstepd-{self.node}: error: container: save {target}: "
                             f"{why}\n")
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            return status or 1
        return status

    def _env_file(self, path: str, cfg: dict) -> None:
        mode = self.conf.create_env_file
        if mode == "disabled":
            return
        env = cfg["process"]["env"]
        sep = "\0" if mode == "null" else "\n"
        with open(path, "w") as fh:
            fh.write("".join(e + sep for e in env if mode == "null" or "\n" not in e))

    def _create_start(self, values: dict) -> int:
        """RunTimeCreate, RunTimeStart, then wait for the container's init: as a child
        subreaper, that init (orphaned by the create command) becomes our child, so its exit
        status is ours to take. A terminating signal meanwhile runs RunTimeKill (the runtime
        signals the container's init, which the step daemon's signal to our process group
        may not reach: it is pid 1 of its namespace); the end is Slurm's: RunTimeKill while
        RunTimeQuery still says running, then RunTimeDelete (:meth:`_stop`)."""
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
        conf = self.conf
        if _sh(ociconf.expand(conf.create or "", values, self.argv)) != 0:
            raise ContainerError("RunTimeCreate failed")
        try:
            if _sh(ociconf.expand(conf.start or "", values, self.argv)) != 0:
                raise ContainerError("RunTimeStart failed")
            if conf.kill:
                for sig in KILLING:
                    signal.signal(sig, lambda *_: self._kill(values))
            status = 0
            while True:
                try:
                    _, st = os.wait()
                except ChildProcessError:
                    break
                status = os.waitstatus_to_exitcode(st)
        finally:
            for sig in KILLING:
                signal.signal(sig, lambda *_: None)
            self._stop(values)
        return status if status >= 0 else 128 - status

    def _kill(self, values: dict) -> None:
        """RunTimeKill, once per signal; its own exit is waited for by pid, so the wait for
        the container's init goes on after it."""
        if not self.killing:
            self.killing = True
            try:
                _sh(ociconf.expand(self.conf.kill or "", values, self.argv))
            finally:
                self.killing = False

    def _stop(self, values: dict) -> None:
        """Slurm's end of a created container: RunTimeKill while it still runs, then
        RunTimeDelete when the runtime still knows it (or when there is no RunTimeQuery to
        ask)."""
        conf = self.conf
        state = _query(ociconf.expand(conf.query, values, self.argv)) if conf.query else None
        if state == "running" and conf.kill:
            _sh(ociconf.expand(conf.kill, values, self.argv))
        if conf.delete and (state is not None or not conf.query):
            _sh(ociconf.expand(conf.delete, values, self.argv))


def _image_cfg(entry: str) -> dict:
    path = os.path.join(entry, "config.json")
    return _read_json(path, "image config") if os.path.exists(path) else {}


def _copy(src: str, dst: str) -> None:
    r = subprocess.run(["cp", "-a", "--reflink=auto", src, dst], capture_output=True, text=True)
    if r.returncode != 0:
        raise ContainerError(f"cannot copy the image: {r.stderr.strip()}")


def _copy_once(entry: str, named: str) -> None:
    """The named container's root: a copy of the image, made by one task while the others of
    the node wait (a lock beside it), then renamed in whole."""
    import fcntl
    fd = os.open(named + ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not os.path.isdir(named):
            tmp = f"{named}.tmp{os.getpid()}"
            _copy(entry, tmp)
            os.rename(tmp, named)
    finally:
        os.close(fd)


def _query(command: str) -> str | None:
    """The container's ``status`` from RunTimeQuery's JSON (the OCI state); None when the
    runtime does not know it (the command fails) or says nothing readable."""
    try:
        r = subprocess.run(["/bin/sh", "-c", command], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True)
    except OSError:
        return None
    if r.returncode != 0:
        return None
    try:
        status = json.loads(r.stdout).get("status")
    except (ValueError, AttributeError):
        return None
    return status if isinstance(status, str) else None


def _sh(command: str) -> int:
    """Run an oci.conf command (as the user, through the shell as Slurm does); a runtime that
    is not installed is named rather than left to the shell's "not found"."""
    words = command.split()
    tool = words[0] if words else ""
    if tool and "=" not in tool and shutil.which(tool) is None:
        raise ContainerError(f"OCI runtime '{tool}' not found (install it, or set "
                             "RunTimeRun in oci.conf)")
    proc = subprocess.Popen(["/bin/sh", "-c", command])
    while True:
        try:
            rc = proc.wait()
            break
        except InterruptedError:
            continue
    return rc if rc >= 0 else 128 - rc


def cleanup_job(conf_dir: str, node: str, job: str, base: str = "/tmp") -> None:
    """The job is over on ``node`` (muster.agent.ocijobs): remove its named containers and
    bring the user's image cache back within its limit. Runs as the user, so it can remove
    nothing the user could not; a user directory that is missing or not private is left."""
    home = os.path.join(base, f"muster-oci-{os.getuid()}")
    try:
        st = os.lstat(home)
    except FileNotFoundError:
        return
    if not os.path.isdir(home) or os.path.islink(home) or st.st_uid != os.getuid():
        return
    if "/" not in node + job and job not in ("", ".", ".."):
        imagecache.remove_tree(os.path.join(home, "jobs", f"{node}.{job}"))
    images = os.path.join(home, "images")
    if os.path.isdir(images):
        conf = ociconf.load_oci_conf(conf_dir or None)
        imagecache.ImageCache(images, conf.cache_mb << 20).evict()


def main(args: list[str]) -> int:
    conf_dir, batch, cleanup = "", False, None
    while args and args[0] != "--":
        if args[0] == "--conf" and len(args) > 1:
            conf_dir, args = args[1], args[2:]
        elif args[0] == "--batch":
            batch, args = True, args[1:]
        elif args[0] == "--cleanup" and len(args) > 2:  # --cleanup NODE JOB
            cleanup, args = (args[1], args[2]), args[3:]
        else:
            break
    argv = args[1:] if args[:1] == ["--"] else args
    node = os.environ.get("SLURMD_NODENAME", "")
    report_fd = _take_report_fd()
    try:
        if cleanup is not None:
            cleanup_job(conf_dir, *cleanup)
            return 0
        if not argv:
            raise ContainerError("no command")
        return _Runner(conf_dir, batch, argv).run()
    except Exception as exc:  # oci.conf errors and the like too: one line, never a traceback
        sys.stderr.write(f"slurmstepd-{node}: error: container: {exc}\n")
        _report(report_fd, f"container: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
