"""The CLI's connection to musterctld (standard library only, imported on every call).

Finding the controller costs one small file read: the config path comes from
muster.config.locate, and only ``StateSaveLocation`` (where the Unix socket lives) is read
from it, without loading the full parser.
"""

from __future__ import annotations

import _socket
import os
import sys

from muster.common import wire
from muster.common.errors import MusterError, RequestError, TransportError, from_wire


def _env_number(name: str, default: float) -> float:
    try:
        v = float(os.environ.get(name, default))
    except ValueError:
        return default
    return v if v > 0 and v == v and v != float("inf") else default


TIMEOUT = _env_number("MUSTER_TIMEOUT", 60.0)


def exit_error() -> int:
    """The exit code for errors: SLURM_EXIT_ERROR when it is a valid code, else 1."""
    try:
        code = int(os.environ.get("SLURM_EXIT_ERROR", "1"))
    except ValueError:
        return 1
    return code if 0 <= code <= 255 else 1


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


def _connect(path: str):
    """Connect to the Unix socket; a full listen queue (EAGAIN: a burst of clients) is
    retried with back-off until TIMEOUT, anything else is a connect failure."""
    import errno
    import time
    deadline = time.monotonic() + TIMEOUT
    delay = 0.005
    while True:
        # _socket, not socket: the wrapper module costs ~5 ms of start-up (enum, selectors)
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        s.settimeout(TIMEOUT)
        try:
            s.connect(path)
            return s
        except OSError as exc:
            s.close()
            if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK) or time.monotonic() > deadline:
                raise TransportError() from None
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def call(msg: dict) -> dict:
    """Send one request; return the reply or raise the MusterError it describes."""
    try:
        data = wire.encode(msg)
    except wire.FrameError:
        raise RequestError(None, "too_large") from None
    except (TypeError, ValueError) as exc:
        raise RequestError(f"Invalid request: {exc}", "invalid_request") from None
    path = socket_path()
    s = _connect(path)
    try:
        s.sendall(data)
        reply = wire.recv_frame(s)
    except (OSError, wire.FrameError) as exc:
        raise TransportError(f"Unable to contact slurm controller ({exc})") from None
    finally:
        s.close()
    if not reply.get("ok"):
        err = from_wire(reply)
        if isinstance(reply.get("detail"), str):
            err.detail = reply["detail"]
        raise err
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
        code = exit_error()
    except MusterError as exc:
        sys.stderr.write(f"{prog}: error: {exc.message}\n")
        code = exit_error()
    except BrokenPipeError:
        try:
            sys.stdout = None
        except Exception:
            pass
        os._exit(0)
    except KeyboardInterrupt:
        code = 130
    except Exception as exc:  # a bug: still a one-line error, never a traceback
        if os.environ.get("MUSTER_DEBUG"):
            raise
        sys.stderr.write(f"{prog}: error: Unexpected error ({type(exc).__name__}: {exc}); "
                         f"set MUSTER_DEBUG=1 for details\n")
        code = exit_error()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        os._exit(0)
    sys.exit(code or 0)
