"""A job's or step's container request: Slurm's ``--container=BUNDLE`` and the pyxis-style
``--container-image`` family, as srun/sbatch/salloc build it and the task runner reads it.

Standard library only: the CLI imports this module.

The request travels in the job's (or step's) environment as ``MUSTER_CONTAINER`` (compact
JSON), the way pyxis's options reach slurmstepd through the job's environment and Slurm's
``SLURM_CONTAINER`` reaches srun: a batch script, and every step started from an allocation
made with container options, run in that container unless the step names its own. Nothing in
it is trusted by root: the step daemon only reads whether it is there; the runner that acts on
it (muster.agent.oci) runs as the job's user and opens every path with the user's rights.

Keys: ``bundle`` (an OCI bundle directory) or ``image`` (a local image file or directory, or
``docker://…``) and/or ``name``; ``mounts`` (list of [src, dst, flags]), ``workdir``,
``writable`` (bool, None = default), ``env`` (names whose host value wins over the image's),
``mount_home`` (bool), ``remap_root`` (bool), ``save`` (an absolute path: the container
saved there as a squashfs image when the node's first task ends, pyxis's
``--container-save``).
"""

from __future__ import annotations

import json
import os
import re

__all__ = ["ENV", "ContainerSpecError", "MOUNT_FLAGS", "decode", "encode", "from_options",
           "parse_mounts"]

ENV = "MUSTER_CONTAINER"
# bind-mount flags a user may ask for (pyxis passes the same to enroot's fstab)
MOUNT_FLAGS = frozenset(("ro", "rw", "bind", "rbind", "nosuid", "nodev", "noexec", "private",
                         "rprivate", "slave", "rslave", "shared", "rshared"))
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_ENVNAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_TEXT = 4096


class ContainerSpecError(ValueError):
    """A container option that cannot be honoured (the message names it)."""


def parse_mounts(text: str) -> list[list[str]]:
    """``SRC[:DST[:FLAGS]],…`` (pyxis): DST defaults to SRC, FLAGS are ``+``- or
    ``:``-separated words of MOUNT_FLAGS. Both paths must be absolute (a relative source would
    depend on the directory the runner starts in); ``..`` is refused in DST so a mount cannot
    be aimed outside the container's root through the spec itself."""
    out = []
    for item in (text or "").split(","):
        if not item:
            continue
        parts = item.split(":")
        src = parts[0]
        dst = parts[1] if len(parts) > 1 and parts[1] else src
        flags = [f for p in parts[2:] for f in p.split("+") if f]
        if not src.startswith("/") or not dst.startswith("/"):
            raise ContainerSpecError(f"invalid --container-mounts entry '{item}': "
                                     "paths must be absolute")
        if ".." in dst.split("/") or "\0" in item:
            raise ContainerSpecError(f"invalid --container-mounts entry '{item}'")
        bad = [f for f in flags if f not in MOUNT_FLAGS]
        if bad:
            raise ContainerSpecError(f"invalid --container-mounts flag '{bad[0]}' in '{item}'")
        out.append([src, dst, "+".join(flags)])
    return out


def _text(value, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT or "\0" in value:
        raise ContainerSpecError(f"invalid {what}")
    return value


def from_options(opts: dict) -> dict | None:
    """The request from CLI option values (keys as the options, dashes as underscores:
    ``container``, ``container_image``, …); None when none was given. Raises
    ContainerSpecError for a bad combination or value."""
    bundle, image = opts.get("container"), opts.get("container_image")
    name = opts.get("container_name")
    extras = [k for k in ("container_mounts", "container_workdir", "container_writable",
                          "container_readonly", "container_env", "container_mount_home",
                          "no_container_mount_home", "container_remap_root",
                          "no_container_remap_root", "container_save")
              if opts.get(k) is not None]
    if bundle is None and image is None and name is None:
        if extras:
            raise ContainerSpecError("--container-image or --container-name is required by "
                                     f"--{extras[0].replace('_', '-')}")
        return None
    if bundle is not None and (image is not None or name is not None):
        raise ContainerSpecError("--container cannot be combined with --container-image "
                                 "or --container-name")
    if bundle is not None:
        return {"bundle": _text(bundle, "--container")}
    spec: dict = {}
    if image is not None:
        spec["image"] = _text(image, "--container-image")
    if name is not None:
        name = _text(name, "--container-name")
        if not _NAME.fullmatch(name):
            raise ContainerSpecError(f"invalid --container-name '{name}'")
        spec["name"] = name
    if opts.get("container_mounts") is not None:
        spec["mounts"] = parse_mounts(opts["container_mounts"])
    if opts.get("container_workdir") is not None:
        wd = _text(opts["container_workdir"], "--container-workdir")
        if not wd.startswith("/"):
            raise ContainerSpecError(f"invalid --container-workdir '{wd}': must be absolute")
        spec["workdir"] = wd
    if opts.get("container_writable") and opts.get("container_readonly"):
        raise ContainerSpecError("--container-writable and --container-readonly conflict")
    if opts.get("container_writable") or opts.get("container_readonly"):
        spec["writable"] = bool(opts.get("container_writable"))
    if opts.get("container_env") is not None:
        names = [n for n in str(opts["container_env"]).split(",") if n]
        if not all(_ENVNAME.fullmatch(n) for n in names):
            raise ContainerSpecError(f"invalid --container-env '{opts['container_env']}'")
        spec["env"] = names
    if opts.get("container_save") is not None:  # relative: to where the command runs
        spec["save"] = os.path.abspath(_text(opts["container_save"], "--container-save"))
    spec["mount_home"] = bool(opts.get("container_mount_home")) and \
        not opts.get("no_container_mount_home")
    spec["remap_root"] = bool(opts.get("container_remap_root")) and \
        not opts.get("no_container_remap_root")
    return spec


def encode(spec: dict) -> str:
    return json.dumps(spec, separators=(",", ":"), sort_keys=True)


def decode(text: str | None) -> dict | None:
    """The request in ``MUSTER_CONTAINER``; None when unset or empty. Raises
    ContainerSpecError when it is not one (the runner reports it as the task's failure)."""
    if not text:
        return None
    try:
        spec = json.loads(text)
    except ValueError:
        raise ContainerSpecError(f"invalid {ENV} (not JSON)") from None
    if not isinstance(spec, dict) or not ({"bundle", "image", "name"} & spec.keys()):
        raise ContainerSpecError(f"invalid {ENV}")
    for key in ("bundle", "image", "name", "workdir", "save"):
        if key in spec:
            _text(spec[key], key)
    if "save" in spec and not spec["save"].startswith("/"):
        raise ContainerSpecError(f"invalid {ENV} save")
    mounts = spec.get("mounts") or []
    if not (isinstance(mounts, list) and all(
            isinstance(m, list) and len(m) == 3 and all(isinstance(x, str) for x in m)
            for m in mounts)):
        raise ContainerSpecError(f"invalid {ENV} mounts")
    parse_mounts(",".join(f"{s}:{d}:{f}" if f else f"{s}:{d}" for s, d, f in mounts))
    if not all(isinstance(n, str) and _ENVNAME.fullmatch(n) for n in spec.get("env") or []):
        raise ContainerSpecError(f"invalid {ENV} env")
    return spec
