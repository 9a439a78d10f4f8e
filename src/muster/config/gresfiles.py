"""GPU device files of a node: which character device each GPU index is.

Slurm confines a job's devices (cgroup.conf ``ConstrainDevices=yes``) by denying every GPU
device file of the node that the job was not allocated. For that the agent must know, per GPU
index (the index that CUDA_VISIBLE_DEVICES and ``SLURM_JOB_GPUS`` use), the device file and
its (major, minor) numbers. They come from, in this order:

* gres.conf ``File=`` (``NodeName=n1 Name=gpu File=/dev/nvidia[0-7]``): the index of a GPU is
  its position in File order (``GresConf.indices`` is parallel to ``GresConf.files``); each
  file is ``stat()``-ed here, so a missing file or one that is not a character device is a
  configuration error, reported with the node, index and path — never a silently
  unconfined GPU;
* ``AutoDetect=nvml`` (or ``nvidia``) for GPUs without ``File=``: NVML's device i has minor
  number m and is ``/dev/nvidia<m>`` (NVIDIA's driver names its nodes so);
* neither (Count-only lines, ``muster up`` without mknod): no device files — there is nothing
  to deny, and :func:`gpu_devices` returns ``[]`` for those GPUs.

Standard library only (pynvml is imported lazily, and only for AutoDetect). Nothing here
changes anything: it reads the file system and NVML.
"""

from __future__ import annotations

import os
import stat
from typing import NamedTuple
from collections.abc import Callable

from muster.common.errors import ConfigError

__all__ = ["GpuDevice", "deny_list", "gpu_devices", "nvml_minors"]

NVIDIA_MAJOR = 195  # the NVIDIA driver's character-device major (/dev/nvidia<minor>)
_AUTODETECT_NVML = ("nvml", "nvidia")


class GpuDevice(NamedTuple):
    """One GPU: its gres index, device file and the numbers a device cgroup filters on."""

    index: int  # type: ignore[assignment]  # a NamedTuple field may shadow tuple.index
    path: str
    type: str  # 'c': GPUs are character devices (a block device is refused)
    major: int
    minor: int


def gpu_devices(node, autodetect: str | None = None,
                minors: Callable[[], list[int]] | None = None) -> list[GpuDevice]:
    """The GPU devices of ``node`` (a ``NodeConf``), sorted by index.

    ``autodetect`` is gres.conf's ``AutoDetect`` (``ClusterConfig.gres_autodetect``); with
    ``nvml``/``nvidia``, GPUs that have no ``File=`` are resolved through NVML (``minors``:
    the minor number of each NVML device in index order; default :func:`nvml_minors`).
    Raises ConfigError naming the node, index and path when a file is missing, is not a
    character device, or NVML knows fewer GPUs than are configured."""
    out: list[GpuDevice] = []
    nvml: list[int] | None = None
    for g in node.gres:
        if g.name != "gpu":
            continue
        if g.files:
            out.extend(_stat_device(node.name, i, p) for i, p in zip(g.indices, g.files))
        elif autodetect in _AUTODETECT_NVML:
            if nvml is None:
                nvml = (minors or nvml_minors)()
            out.extend(_nvml_device(node.name, i, nvml) for i in g.indices)
    return sorted(out)


def deny_list(devices: list[GpuDevice], allocated) -> list[list]:
    """Slurm's rule: every GPU device of the node whose index is not in ``allocated``, as
    ``[type, major, minor]`` (the form of ``L["confine"]["deny_devices"]``). Two indices
    sharing one device file (MultipleFiles) are denied only when neither is allocated."""
    allowed = {(d.type, d.major, d.minor) for d in devices if d.index in set(allocated)}
    out: list[list] = []
    for d in devices:
        key = (d.type, d.major, d.minor)
        if key not in allowed and list(key) not in out:
            out.append(list(key))
    return out


def nvml_minors() -> list[int]:
    """Minor numbers of the NVML devices in NVML index order; [] without NVML or GPUs."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:
        return []
    try:
        return [pynvml.nvmlDeviceGetMinorNumber(pynvml.nvmlDeviceGetHandleByIndex(i))
                for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _stat_device(node: str, index: int, path: str) -> GpuDevice:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ConfigError(f"gres.conf: node {node}: GPU {index} File={path}: "
                          f"{exc.strerror or exc}") from None
    if not stat.S_ISCHR(st.st_mode):
        raise ConfigError(f"gres.conf: node {node}: GPU {index} File={path}: not a character "
                          "device")
    return GpuDevice(index, path, "c", os.major(st.st_rdev), os.minor(st.st_rdev))


def _nvml_device(node: str, index: int, minors: list[int]) -> GpuDevice:
    """NVML device ``index`` as /dev/nvidia<minor>: stat()-ed when the file is there (its
    real numbers), else the driver's own (major 195, that minor)."""
    if index >= len(minors):
        raise ConfigError(f"gres.conf: node {node}: GPU {index} is configured but NVML "
                          f"(AutoDetect) found {len(minors)} GPU(s)")
    path = f"/dev/nvidia{minors[index]}"
    if os.path.exists(path):
        return _stat_device(node, index, path)
    return GpuDevice(index, path, "c", NVIDIA_MAJOR, minors[index])
