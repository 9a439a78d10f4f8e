"""oci.conf reader (Slurm's file for ``--container``) and its ``%`` patterns.

Standard library only (plus muster.common). The file lives next to slurm.conf; a missing
file gives Muster's defaults: rootless runc run as the job's user (docs/design.md
"Containers"). Syntax as cgroup.conf: ``Key=Value``, case-insensitive keys, ``#`` comments;
a value may be double-quoted (commands have spaces).

Either ``RunTimeRun`` (one command that runs the container to its end) or the
``RunTimeCreate``/``RunTimeStart`` pair (with ``RunTimeQuery``, ``RunTimeKill`` and
``RunTimeDelete``) — as Slurm, the two styles are exclusive.

Patterns (:func:`expand`): ``%%`` a percent sign, ``%@`` the task's command (every argument,
shell-quoted), ``%b`` the bundle directory, ``%e`` the environment file, ``%j`` job id,
``%m`` the step's spool directory (where the generated bundle lives), ``%n`` node name,
``%p`` the task's pid (the runner's), ``%r`` the root filesystem, ``%s`` step id, ``%t``
task id, ``%U`` uid, ``%u`` user name. Each substituted value is shell-quoted: commands run
through ``/bin/sh -c`` as the job's user, and a value (a path, the command) must stay one word.
Unknown codes stay verbatim.

``MusterImageCacheMB`` (Muster's own key, not Slurm's): the size limit of a user's image
cache on a node (default 20480).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field

from muster.common.errors import ConfigError

__all__ = ["DEFAULT_RUN", "OciConf", "expand", "load_oci_conf", "parse_oci_conf"]

FILENAME = "oci.conf"
DEFAULT_RUN = ("runc --rootless=true --root=%m/runc run --no-new-keyring --bundle %b "
               "muster-%n-%j-%s-%t")
_COMMANDS = {"runtimerun": "run", "runtimecreate": "create", "runtimestart": "start",
             "runtimequery": "query", "runtimekill": "kill", "runtimedelete": "delete"}
_ACCEPTED = frozenset(("containerpath", "debugflags", "disablecleanup", "disablehooks",
                       "filedebug", "ignorefileconfigjson", "srunpath", "srunargs",
                       "stdiodebug", "syslogdebug"))
_PAIR = re.compile(r'\s*([A-Za-z]+)\s*=\s*("(?:[^"\\]|\\.)*"|\S+)')


@dataclass(frozen=True)
class OciConf:
    """The settings Muster acts on; the rest of Slurm's keys are accepted and ignored."""

    run: str | None = DEFAULT_RUN
    create: str | None = None
    start: str | None = None
    query: str | None = None
    kill: str | None = None
    delete: str | None = None
    env_exclude: str | None = None  # RunTimeEnvExclude: a regular expression
    mount_spool_dir: str | None = None
    create_env_file: str = "disabled"  # null | newline | disabled
    cache_mb: int = 20480
    path: str | None = None  # the file read; None for the defaults
    extra: dict = field(default_factory=dict)


def parse_oci_conf(text: str, path: str = FILENAME) -> OciConf:
    """Parse oci.conf text; ConfigError("<file>:<line>: <what>") for a bad line."""
    vals: dict = {}
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip() if '"' not in raw else _strip_comment(raw)
        pos = 0
        while pos < len(line):
            m = _PAIR.match(line, pos)
            if not m:
                raise ConfigError(f"{path}:{no}: cannot parse '{line[pos:].strip()}'")
            key, value = m.group(1).lower(), m.group(2)
            if value.startswith('"'):
                value = re.sub(r"\\(.)", r"\1", value[1:-1])
            _take(vals, key, value, f"{path}:{no}")
            pos = m.end()
            while pos < len(line) and line[pos].isspace():
                pos += 1
    return _settle(vals, path)


def _strip_comment(raw: str) -> str:
    """The line before a ``#`` that is outside double quotes."""
    quoted = False
    for i, ch in enumerate(raw):
        if ch == '"' and (i == 0 or raw[i - 1] != "\\"):
            quoted = not quoted
        elif ch == "#" and not quoted:
            return raw[:i].strip()
    return raw.strip()


def _take(vals: dict, key: str, value: str, where: str) -> None:
    if key in _COMMANDS:
        vals[_COMMANDS[key]] = value or None
    elif key == "runtimeenvexclude" or key == "envexclude":
        try:
            re.compile(value)
        except re.error as exc:
            raise ConfigError(f"{where}: invalid RunTimeEnvExclude regex: {exc}") from None
        vals["env_exclude"] = value
    elif key == "mountspooldir":
        if not value.startswith("/"):
            raise ConfigError(f"{where}: MountSpoolDir must be an absolute path")
        vals["mount_spool_dir"] = value
    elif key == "createenvfile":
        v = {"true": "null", "false": "disabled"}.get(value.lower(), value.lower())
        if v not in ("null", "newline", "disabled"):
            raise ConfigError(f"{where}: invalid CreateEnvFile '{value}'")
        vals["create_env_file"] = v
    elif key == "musterimagecachemb":
        if not value.isdigit() or int(value) < 1:
            raise ConfigError(f"{where}: invalid MusterImageCacheMB '{value}'")
        vals["cache_mb"] = int(value)
    elif key in _ACCEPTED:
        vals.setdefault("extra", {})[key] = value
    else:
        raise ConfigError(f"{where}: unknown key '{key}'")


def _settle(vals: dict, path: str) -> OciConf:
    """Slurm's rule: RunTimeRun, or RunTimeCreate with RunTimeStart, never both."""
    styles = [k for k in ("create", "start", "query", "kill", "delete") if vals.get(k)]
    if vals.get("run") and styles:
        raise ConfigError(f"{path}: RunTimeRun cannot be combined with RunTime"
                          f"{styles[0].capitalize()}")
    if styles and not (vals.get("create") and vals.get("start")):
        raise ConfigError(f"{path}: RunTimeCreate and RunTimeStart are both required "
                          "without RunTimeRun")
    if styles:
        vals["run"] = None  # the create/start style: no default RunTimeRun beside it
    elif not vals.get("run"):
        vals["run"] = DEFAULT_RUN
    return OciConf(**vals, path=path)


def load_oci_conf(path_or_dir: str | None) -> OciConf:
    """oci.conf next to slurm.conf (``path_or_dir``: that directory, slurm.conf, or oci.conf
    itself); Muster's defaults when there is none."""
    if not path_or_dir:
        return OciConf()
    path = path_or_dir
    if os.path.isdir(path):
        path = os.path.join(path, FILENAME)
    elif os.path.basename(path) != FILENAME:
        path = os.path.join(os.path.dirname(path), FILENAME)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return OciConf()
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from None
    return parse_oci_conf(text, path)


def expand(pattern: str, values: dict, argv: list[str] | None = None) -> str:
    """``pattern`` with its codes replaced (module doc); ``values`` maps a code letter to its
    value. Each value is shell-quoted; ``%@`` is every word of ``argv`` quoted."""
    out = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch != "%" or i + 1 == len(pattern):
            out.append(ch)
            i += 1
            continue
        code = pattern[i + 1]
        if code == "%":
            out.append("%")
        elif code == "@":
            out.append(shlex.join(argv or []))
        elif code in values:
            out.append(shlex.quote(str(values[code])))
        else:
            out.append(pattern[i:i + 2])
        i += 2
    return "".join(out)
