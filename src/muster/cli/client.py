"""The CLI's connection to musterctld (standard library only, imported on every call).

Finding the controller costs one small file read: the config path comes from
muster.config.locate, and only ``StateSaveLocation`` (where the Unix socket lives) is read
from it, without loading the full parser.
"""

from __future__ import annotations

import os
import socket
import sys

from muster.common import wire
from muster.common.errors import MusterError, TransportError, from_wire

TIMEOUT = float(os.environ.get("MUSTER_TIMEOUT", "60"))


def config_path() -> str | None:
    from muster.config.locate import find_config_path
    return find_config_path()


def _scan_conf(path: str, keys: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        with open(path) as fh:
            for line in fh:
                line = line.split("#", 1)[0].strip()
                if "=" not in line:
                    continue
                for tok in line.split():
                    k, _, v = tok.partition("=")
                    kl = k.lower()
                    if kl in keys and kl not in out:
                        out[kl] = v.strip('"')
    except OSError:
        pass
    return out


def socket_path() -> str:
    env = os.environ.get("MUSTER_SOCKET")
    if env:
        return env
    path = config_path()
    if not path:
        raise TransportError("Unable to contact slurm controller (no Muster configuration found; "
                             "run `muster up` or set MUSTER_CONF)")
    vals = _scan_conf(path, ("statesavelocation",))
    base = vals.get("statesavelocation") or "/var/spool"
    return os.path.join(base, "musterctld.sock")


def call(msg: dict) -> dict:
    """Send one request; return the reply or raise the MusterError it describes."""
    path = socket_path()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(TIMEOUT)
    try:
        s.connect(path)
    except OSError:
        s.close()
        raise TransportError() from None
    try:
        wire.send_frame(s, msg)
        reply = wire.recv_frame(s)
    except (OSError, wire.FrameError) as exc:
        raise TransportError(f"Unable to contact slurm controller ({exc})") from None
    finally:
        s.close()
    if not reply.get("ok"):
        raise from_wire(reply)
    return reply


def die(prog: str, text: str, code: int = 1) -> None:
    sys.stderr.write(f"{prog}: error: {text}\n")
    sys.exit(code)


def run_main(prog: str, fn) -> None:
    """Common wrapper: Slurm-style errors, never a traceback, broken pipes ignored."""
    from muster.cli.getopt import CliExit
    try:
        code = fn()
    except CliExit as exc:
        text = exc.render() if hasattr(exc, "render") else "\n".join(exc.lines)
        if text:
            sys.stderr.write(text if text.endswith("\n") else text + "\n")
        code = exc.code
    except TransportError as exc:
        sys.stderr.write(f"{prog}: error: {exc.message}\n")
        code = int(os.environ.get("SLURM_EXIT_ERROR", "1"))
    except MusterError as exc:
        sys.stderr.write(f"{prog}: error: {exc.message}\n")
        code = int(os.environ.get("SLURM_EXIT_ERROR", "1"))
    except BrokenPipeError:
        try:
            sys.stdout = None
        except Exception:
            pass
        os._exit(0)
    except KeyboardInterrupt:
        code = 130
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        os._exit(0)
    sys.exit(code or 0)
