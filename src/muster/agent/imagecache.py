"""A user's unpacked container images on one node: unpacked once, shared, size-limited.

Runs as the job's user (muster.agent.oci's runner), never as root: every image path is the
user's, opened with the user's rights, and the cache is the user's own directory.

Layout under ``root``::

    <key>/            an unpacked image: rootfs/ and config.json (the image's runtime config)
    <key>.lock        flock: exclusive while unpacking or evicting, shared while in use
    <key>.size        bytes on disk of <key>/ (written after the unpack)

``key`` names the source: a local file or directory by its real path, device, inode, size
and mtime (a rewritten image is a new entry), a ``docker://`` reference by its text.

Invariants: an entry directory exists only complete (unpacked beside it, then renamed in);
concurrent steps asking for one image wait on its lock and share one unpack; an entry in use
(a shared lock held by a running container's runner) is never evicted; after an unpack, the
least recently used unused entries go until the total is under the limit.

Unpack tools (well-kept, none hand-written): ``umoci unpack --rootless`` for an OCI image
layout (a directory with ``oci-layout``, or a tar of one), ``skopeo copy`` first for
``docker://`` references, ``tar`` for a plain root-filesystem tarball, ``unsquashfs``
(squashfs-tools) for enroot's squashfs images (``enroot import`` → ``*.sqsh``, what pyxis users
keep on shared storage), whose environment is enroot's ``/etc/environment`` and whose device
nodes (a user cannot make them; the runtime provides /dev) are skipped.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time

__all__ = ["CacheError", "ImageCache", "dir_size", "remove_tree"]

UNPACK_TIMEOUT = 1800


class CacheError(Exception):
    """An image that cannot be found, pulled or unpacked (the message says why)."""


def dir_size(path: str) -> int:
    """Bytes on disk under ``path`` (no symlink followed; hard links counted once)."""
    seen, total = set(), 0
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                st = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


class ImageCache:
    def __init__(self, root: str, limit_bytes: int):
        self.root, self.limit = root, limit_bytes
        os.makedirs(root, mode=0o700, exist_ok=True)

    def key(self, image: str) -> str:
        if image.startswith("docker://"):
            ident = image
        else:
            try:
                st = os.stat(image)
            except OSError as exc:
                raise CacheError(f"image {image}: {exc.strerror}") from None
            ident = f"{os.path.realpath(image)}|{st.st_dev}|{st.st_ino}|{st.st_size}|" \
                    f"{st.st_mtime_ns}"
        return hashlib.sha256(ident.encode()).hexdigest()[:24]

    def acquire(self, image: str) -> tuple[str, int]:
        """(entry directory, lock descriptor held shared): the image unpacked, pinned until
        the descriptor is closed (by the caller, or by its exit)."""
        key = self.key(image)
        entry = os.path.join(self.root, key)
        fd = os.open(entry + ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
        if os.path.isdir(entry):
            os.utime(entry + ".lock")
            return entry, fd
        fcntl.flock(fd, fcntl.LOCK_EX)  # one unpack; the others wait here, then find it
        try:
            if not os.path.isdir(entry):
                self._unpack(image, entry)
                self.evict(keep=key)
            os.utime(entry + ".lock")
        finally:
            fcntl.flock(fd, fcntl.LOCK_SH)
        return entry, fd

    def _unpack(self, image: str, entry: str) -> None:
        tmp = tempfile.mkdtemp(prefix=".unpack-", dir=self.root)
        try:
            _unpack_into(image, tmp)
            with open(os.path.join(self.root, os.path.basename(entry) + ".size"), "w") as fh:
                fh.write(str(dir_size(tmp)))
            os.rename(tmp, entry)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def entries(self) -> list[tuple[float, str, int]]:
        """(last use, key, size) of every complete entry."""
        out = []
        for name in os.listdir(self.root):
            path = os.path.join(self.root, name)
            if name.startswith(".") or "." in name or not os.path.isdir(path):
                continue
            try:
                with open(path + ".size") as fh:
                    size = int(fh.read().strip() or 0)
                used = os.stat(path + ".lock").st_mtime
            except (OSError, ValueError):
                size, used = dir_size(path), 0.0
            out.append((used, name, size))
        return out

    def evict(self, keep: str | None = None) -> list[str]:
        """Remove the least recently used entries not in use (their lock is free) until the
        cache is within its limit; ``keep`` (the entry just made) stays. Returns the keys
        removed."""
        entries = sorted(self.entries())
        total = sum(size for _, _, size in entries)
        gone = []
        for _, key, size in entries:
            if total <= self.limit:
                break
            if key == keep:
                continue
            if self._remove_unused(key):
                total -= size
                gone.append(key)
        return gone

    def _remove_unused(self, key: str) -> bool:
        path = os.path.join(self.root, key)
        try:
            fd = os.open(path + ".lock", os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False  # a running container holds it
        try:
            doomed = os.path.join(self.root, f".evict-{key}-{time.monotonic_ns()}")
            os.rename(path, doomed)
            _rmtree(doomed)
            for suffix in (".size", ".lock"):
                try:
                    os.unlink(path + suffix)
                except OSError:
                    pass
            return True
        finally:
            os.close(fd)


def remove_tree(path: str) -> None:
    """Remove a tree of the caller's (a named container, a cache entry), read-only
    directories included; a missing one is no error."""
    _rmtree(path)


def _rmtree(path: str) -> None:
    """Remove a tree the user owns, making read-only directories of an image writable first
    (an image may ship a directory without its owner's write bit)."""
    def again(func, p, exc):
        try:
            os.chmod(os.path.dirname(p), 0o700)
            func(p)
        except OSError:
            pass
    shutil.rmtree(path, onerror=again)


def _run(argv: list[str], what: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess:
    """Run an unpack tool; CacheError (its last line of output) unless it exits with one of
    ``ok``."""
    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=UNPACK_TIMEOUT)
    except FileNotFoundError:
        raise CacheError(f"{what}: {argv[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise CacheError(f"{what}: {argv[0]} did not finish in {UNPACK_TIMEOUT} s") from None
    if r.returncode not in ok:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or [f"exit {r.returncode}"]
        raise CacheError(f"{what}: {tail[0]}")
    return r


def _unpack_into(image: str, tmp: str) -> None:
    """Fill ``tmp`` with rootfs/ and config.json from ``image`` (module doc for the tools)."""
    if image.startswith("docker://"):
        layout = os.path.join(tmp, ".layout")
        _run(["skopeo", "copy", "--quiet", image, f"oci:{layout}:image"], f"pull {image}")
        return _umoci(layout + ":image", tmp, image)
    if _is_squashfs(image):
        return _unsquash(image, tmp)
    if os.path.isdir(image):
        if not os.path.exists(os.path.join(image, "oci-layout")):
            raise CacheError(f"image {image}: a directory image must be an OCI image layout")
        return _umoci(image + ":" + _only_tag(image), tmp, image)
    try:
        with tarfile.open(image) as tf:
            names = set(tf.getnames()[:10000])
    except (OSError, tarfile.TarError) as exc:
        raise CacheError(f"image {image}: not an image file ({exc})") from None
    if "oci-layout" in names or "./oci-layout" in names:
        layout = os.path.join(tmp, ".layout")
        os.mkdir(layout)
        _run(["tar", "-xf", image, "-C", layout, "--no-same-owner"], f"unpack {image}")
        return _umoci(layout + ":" + _only_tag(layout), tmp, image)
    rootfs = os.path.join(tmp, "rootfs")
    os.mkdir(rootfs)
    _run(["tar", "-xf", image, "-C", rootfs, "--no-same-owner", "--no-same-permissions",
          "--exclude=./dev/*", "--exclude=dev/*"], f"unpack {image}")


# unsquashfs's words for a device node it cannot make ("No space left on device" is no such)
_DEVICE_ERRORS = ("could not create character device", "could not create block device")
SQUASHFS_MAGIC = b"hsqs"  # little-endian squashfs 4 superblock, as mksquashfs writes it


def _is_squashfs(image: str) -> bool:
    try:
        with open(image, "rb") as fh:
            return fh.read(4) == SQUASHFS_MAGIC
    except OSError:  # a directory, or unreadable: the other branches say why
        return False


def _unsquash(image: str, tmp: str) -> None:
    """An enroot image: the squashfs unpacked as rootfs/ (device nodes and extended
    attributes left out: the user cannot make them), and a runtime config holding the
    environment enroot recorded in /etc/environment."""
    rootfs = os.path.join(tmp, "rootfs")
    r = _run(["unsquashfs", "-no-progress", "-no-xattrs", "-ignore-errors", "-d", rootfs, image],
             f"unpack {image}", ok=(0, 2))
    # 2: non-fatal errors. Only device nodes may be among them (a user cannot make one; the
    # runtime gives the container its /dev): any other (a full disk) fails the unpack
    others = [ln.strip() for ln in r.stderr.splitlines()
              if ln.strip() and not any(d in ln for d in _DEVICE_ERRORS)]
    if r.returncode == 2 and others:
        raise CacheError(f"unpack {image}: {others[-1]}")
    env = _enroot_environment(os.path.join(rootfs, "etc", "environment"))
    if not any(e.startswith("PATH=") for e in env):
        env.insert(0, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    with open(os.path.join(tmp, "config.json"), "w") as fh:
        json.dump({"process": {"env": env, "cwd": "/"}}, fh)


def _enroot_environment(path: str) -> list[str]:
    """``KEY=VALUE`` lines of an image's /etc/environment (``export`` and one level of
    quotes allowed, comments and malformed lines skipped), in order."""
    out: list[str] = []
    try:
        with open(path, errors="replace") as fh:
            lines = fh.read(1 << 20).splitlines()
    except OSError:
        return out
    for line in lines:
        line = line.strip()
        if line.startswith("export "):
            line = line[7:].lstrip()
        key, eq, value = line.partition("=")
        if not eq or not key or not (key[0].isalpha() or key[0] == "_") or \
                not all(c.isalnum() or c == "_" for c in key):
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out.append(f"{key}={value}")
    return out


def _only_tag(layout: str) -> str:
    """The tag of a layout's single image (index.json's ref.name); 'latest' if unnamed."""
    try:
        with open(os.path.join(layout, "index.json")) as fh:
            manifests = json.load(fh).get("manifests") or []
    except (OSError, ValueError) as exc:
        raise CacheError(f"image {layout}: bad OCI layout ({exc})") from None
    tags = [m.get("annotations", {}).get("org.opencontainers.image.ref.name")
            for m in manifests]
    tags = [t for t in tags if t]
    if len(tags) > 1:
        raise CacheError(f"image {layout}: holds {len(tags)} tagged images; give one")
    return tags[0] if tags else "latest"


def _umoci(ref: str, tmp: str, image: str) -> None:
    bundle = os.path.join(tmp, ".bundle")
    _run(["umoci", "unpack", "--rootless", "--image", ref, bundle], f"unpack {image}")
    os.rename(os.path.join(bundle, "rootfs"), os.path.join(tmp, "rootfs"))
    os.rename(os.path.join(bundle, "config.json"), os.path.join(tmp, "config.json"))
    _rmtree(bundle)
    if os.path.isdir(os.path.join(tmp, ".layout")):
        _rmtree(os.path.join(tmp, ".layout"))
