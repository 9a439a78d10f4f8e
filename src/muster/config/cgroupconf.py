"""cgroup.conf reader (Slurm's file, the keys Muster uses plus those it accepts and ignores).

Standard library only (plus muster.common): the agent and the CLI may both import it.

``load_cgroup_conf(path_or_dir)`` returns a frozen :class:`CgroupConf`.  The file lives next to
slurm.conf: *path_or_dir* may be that directory, the slurm.conf path (its directory is used) or
the cgroup.conf path itself.  A missing cgroup.conf gives Slurm's defaults (Slurm runs without
one too).  Every problem raises ``ConfigError("<file>:<line>: <what>")``.

Syntax (as Slurm's parser): ``Key=Value`` per line, several pairs per line allowed, key names
case-insensitive, ``#`` starts a comment, blank lines ignored.

Units: ``AllowedRAMSpace``/``AllowedSwapSpace``/``MaxRAMPercent``/``MaxSwapPercent`` are
percentages (floats); ``MinRAMSpace`` is MB; ``MemorySwappiness`` 0..100 or ``None`` (unset:
the kernel's value is left alone).

``MusterFavorDynMods`` (yes/no, default yes) is Muster's own key, not Slurm's: whether an agent
that confines jobs as root sets the cgroup2 mount option ``favordynmods`` (Linux 6.0+; on a
v1-only host through a private cgroup2 mount), so that moving a task between cgroups does not
wait for an RCU grace period (muster.agent.cgroup.favor_dynmods). Slurm would reject the key.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields
from typing import Any

from muster.common.errors import ConfigError

__all__ = ["CgroupConf", "PLUGINS", "load_cgroup_conf", "parse_cgroup_conf"]

FILENAME = "cgroup.conf"
PLUGINS = ("autodetect", "cgroup/v1", "cgroup/v2", "disabled")


@dataclass(frozen=True, slots=True)
class CgroupConf:
    """The cgroup.conf settings; defaults are Slurm 22.05's."""

    cgroup_plugin: str = "autodetect"
    cgroup_mountpoint: str = "/sys/fs/cgroup"
    constrain_cores: bool = False
    constrain_ram_space: bool = False
    constrain_swap_space: bool = False
    constrain_devices: bool = False
    allowed_ram_space: float = 100.0
    allowed_swap_space: float = 0.0
    max_ram_percent: float = 100.0
    max_swap_percent: float = 100.0
    min_ram_space: int = 30  # MB
    memory_swappiness: int | None = None
    ignore_systemd: bool = False
    ignore_systemd_on_failure: bool = False
    muster_favor_dynmods: bool = True  # Muster's own key (see the module doc), not Slurm's
    path: str | None = None  # the file read; None when defaults were used

    @property
    def enabled(self) -> bool:
        """False for ``CgroupPlugin=disabled``."""
        return self.cgroup_plugin != "disabled"


# lower-case key -> (field name, kind)
_KEYS: dict[str, tuple[str, str]] = {
    "cgroupplugin": ("cgroup_plugin", "plugin"),
    "cgroupmountpoint": ("cgroup_mountpoint", "path"),
    "constraincores": ("constrain_cores", "bool"),
    "constrainramspace": ("constrain_ram_space", "bool"),
    "constrainswapspace": ("constrain_swap_space", "bool"),
    "constraindevices": ("constrain_devices", "bool"),
    "allowedramspace": ("allowed_ram_space", "percent"),
    "allowedswapspace": ("allowed_swap_space", "percent"),
    "maxrampercent": ("max_ram_percent", "percent"),
    "maxswappercent": ("max_swap_percent", "percent"),
    "minramspace": ("min_ram_space", "mb"),
    "memoryswappiness": ("memory_swappiness", "swappiness"),
    "ignoresystemd": ("ignore_systemd", "bool"),
    "ignoresystemdonfailure": ("ignore_systemd_on_failure", "bool"),
    "musterfavordynmods": ("muster_favor_dynmods", "bool"),  # Muster's own
}

# Keys Slurm 22.05 (or a neighbouring release) accepts that have no effect in Muster: kernel
# memory (gone from cgroup v2 and deprecated on v1), automounting, obsolete release agents,
# later releases' systemd/controller knobs.
_IGNORED = frozenset(k.lower() for k in (
    "CgroupAutomount", "CgroupReleaseAgentDir", "AllowedKmemSpace", "ConstrainKmemSpace",
    "MaxKmemPercent", "MinKmemSpace", "AllowedDevicesFile", "TaskAffinity",
    "EnableControllers", "SystemdTimeout", "SignalChildrenProcesses", "CgroupSlice",
    "EnableExtraControllers",
))

_TRUE = frozenset(("yes", "true", "1", "on", "y"))
_FALSE = frozenset(("no", "false", "0", "off", "n"))
_PAIR = re.compile(r"\s*([A-Za-z][A-Za-z0-9_]*)\s*=\s*(\"[^\"]*\"|\S*)")


def _number(value: str, cast, what: str):
    try:
        return cast(value)
    except ValueError:
        raise ValueError(f"expected {what}") from None


def _convert(kind: str, value: str) -> object:
    """Typed value of one setting; ValueError with a short reason when it does not parse."""
    low = value.lower()
    if kind == "bool":
        if low in _TRUE or low in _FALSE:
            return low in _TRUE
        raise ValueError("expected yes or no")
    if kind == "plugin":
        if low not in PLUGINS:
            raise ValueError("expected one of " + ", ".join(PLUGINS))
        return low
    if kind == "path":
        if not value.startswith("/"):
            raise ValueError("expected an absolute path")
        return value.rstrip("/") or "/"
    if kind == "percent":  # Slurm lets Allowed*Space exceed 100 (over-subscription)
        pct = _number(value.rstrip("%"), float, "a percentage")
        if not 0 <= pct < float("inf"):
            raise ValueError("expected a percentage")
        return pct
    limit, what = (100, "0..100") if kind == "swappiness" else (None, "a number of MB")
    n = _number(value, int, what)
    if n < 0 or (limit is not None and n > limit):
        raise ValueError(f"expected {what}")
    return n


def _pairs(line: str) -> list[tuple[str, str]]:
    """``Key=Value`` pairs of one comment-stripped line; ValueError on anything else."""
    out, pos = [], 0
    while pos < len(line):
        if line[pos:].strip() == "":
            break
        m = _PAIR.match(line, pos)
        if not m or not m.group(2):
            raise ValueError(f"expected Key=Value, got {line[pos:].strip()!r}")
        out.append((m.group(1), m.group(2).strip('"')))
        pos = m.end()
    return out


def parse_cgroup_conf(text: str, path: str = FILENAME) -> CgroupConf:
    """Parse cgroup.conf *text*; *path* names the file in error messages."""
    values: dict[str, Any] = {}  # checked per key by _convert
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0]
        try:
            pairs = _pairs(line)
        except ValueError as exc:
            raise ConfigError(f"{path}:{lineno}: {exc}") from None
        for key, value in pairs:
            low = key.lower()
            if low in _IGNORED:
                continue
            if low not in _KEYS:
                raise ConfigError(f"{path}:{lineno}: unknown cgroup.conf parameter {key!r}")
            name, kind = _KEYS[low]
            try:
                values[name] = _convert(kind, value)
            except ValueError as exc:
                raise ConfigError(f"{path}:{lineno}: {key}={value}: {exc}") from None
    return CgroupConf(path=path, **values)


def _resolve(path_or_dir: str) -> str:
    """The cgroup.conf path for a directory, a slurm.conf path or a cgroup.conf path."""
    if os.path.isdir(path_or_dir):
        return os.path.join(path_or_dir, FILENAME)
    if os.path.basename(path_or_dir) == FILENAME:
        return path_or_dir
    return os.path.join(os.path.dirname(path_or_dir) or ".", FILENAME)


def load_cgroup_conf(path_or_dir: str) -> CgroupConf:
    """Read the cgroup.conf that belongs to *path_or_dir* (see the module doc); a missing
    file gives the defaults."""
    path = _resolve(path_or_dir)
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except FileNotFoundError:
        return CgroupConf()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_cgroup_conf(text, path)


# every key maps to a real field (guards the table against typos at import time)
assert {n for n, _ in _KEYS.values()} <= {f.name for f in fields(CgroupConf)}
