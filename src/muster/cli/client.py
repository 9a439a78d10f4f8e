"""The CLI's connection to musterctld (standard library only, imported on every call).

Finding the controller costs one small file read: the config path comes from
muster.config.locate, and only ``StateSaveLocation`` (where the Unix socket lives) is read
from it, without loading the full parser.
"""

from __future__ import annotations

import _socket
import os
import sys

from muster.common import requestid, wire
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


_CONF_CACHE: dict[str, dict[str, str]] = {}


def _conf_values() -> dict[str, str]:
    """The keys the client reads from slurm.conf (one scan per process and config path)."""
    path = config_path()
    if not path:
        raise TransportError("Unable to contact slurm controller (no Muster configuration found; "
                             "run `muster up` or set MUSTER_CONF)")
    got = _CONF_CACHE.get(path)
    if got is None:
        got = _CONF_CACHE[path] = _scan_conf(path, ("statesavelocation", "musterclientretry",
                                                    "slurmdspooldir"))
    return got


RELAY_SOCKET = "musterd.sock"  # muster.agent.relay.SOCKET_NAME (not imported: asyncio)


def socket_paths() -> list[str]:
    """The sockets to try, in order: ``$MUSTER_SOCKET`` (several paths separated by ``:``),
    else the controller's socket in StateSaveLocation, then this node's musterd relay
    (muster.agent.relay), which forwards to the leading controller wherever it runs: the
    way in on every host but the controller's. Controllers that share a StateSaveLocation
    (SlurmctldHost primary and standby) serve the same path; whichever leads answers."""
    env = os.environ.get("MUSTER_SOCKET")
    if env:
        paths = [p for p in env.split(os.pathsep) if p]
        if paths:
            return paths
    conf = _conf_values()
    base = conf.get("statesavelocation") or "/var/spool"
    return [os.path.join(base, "musterctld.sock"), relay_path(conf)]


def relay_path(conf: dict[str, str]) -> str:
    """This node's relay socket: ``<SlurmdSpoolDir>/musterd.sock``, ``%n`` being the node
    (``$SLURMD_NODENAME`` inside a job, else the short hostname, as musterd's default)."""
    host = os.uname().nodename.split(".")[0]
    node = os.environ.get("SLURMD_NODENAME") or host
    spool = conf.get("slurmdspooldir") or "/var/spool/slurmd"
    return os.path.join(spool.replace("%n", node).replace("%h", host), RELAY_SOCKET)


def relay_address(sock) -> str | None:
    """The address the controller sees a command at when ``sock`` (a connected Unix socket)
    leads to a relay, not to the controller itself: srun's I/O listener binds it, for the
    step daemons connect to that address. None for a direct connection."""
    try:
        peer = sock.getpeername()
    except OSError:
        return None
    if not isinstance(peer, str) or os.path.basename(peer) != RELAY_SOCKET:
        return None
    try:
        reply = round_trip(sock, lambda: wire.send_frame(sock, {"op": "relay_info"}))
    except (_Retry, TransportError):
        return None
    addr = reply.get("addr")
    return addr if isinstance(addr, str) else None


def socket_path() -> str:
    return socket_paths()[0]


def retry_budget() -> float:
    """Seconds a command keeps trying to reach a controller that refuses connections or drops
    them before replying (a restart, a fail-over): ``$MUSTER_CLIENT_RETRY``, else
    ``MusterClientRetry=`` in slurm.conf, else RETRY_DEFAULT. 0 turns retrying off."""
    raw = os.environ.get("MUSTER_CLIENT_RETRY")
    if raw is None:
        try:
            raw = _conf_values().get("musterclientretry")
        except TransportError:
            raw = None
    try:
        v = float(raw) if raw is not None else RETRY_DEFAULT
    except ValueError:
        return RETRY_DEFAULT
    return v if 0 <= v < float("inf") else RETRY_DEFAULT


RETRY_DEFAULT = 60.0


class _Retry(Exception):
    """The controller could not be reached, or went away before replying: try again."""


def _connect(path: str, deadline: float):
    """Connect to the Unix socket. A full listen queue (EAGAIN: a burst of clients) is
    retried here with back-off until ``deadline``; a refused or missing socket (a controller
    restarting) raises _Retry, for the caller to try the next controller."""
    import errno
    import time
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
                raise _Retry() from None
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def _exchange(path: str, data: bytes, deadline: float, raw: str | None = None) -> dict:
    """One request on a fresh connection. _Retry when it could not be delivered or the
    connection ended before the reply (the controller may or may not have acted: the request
    id makes a retry safe); TransportError for what retrying cannot fix."""
    s = _connect(path, deadline)
    try:
        return round_trip(s, lambda: s.sendall(data), raw)
    finally:
        s.close()


def round_trip(s, send, raw: str | None = None) -> dict:
    """``send()`` one request on ``s`` and read its reply. _Retry when it could not be
    delivered, the connection ended before the reply, or a standby (or a leader deposed
    before it committed) answered; TransportError for a controller that is up but does not
    answer (never re-sent) or a garbled reply. ``raw``: as wire.recv_frame's."""
    try:
        send()
        reply = wire.recv_frame(s, raw=raw)
    except TimeoutError as exc:
        raise TransportError(f"Unable to contact slurm controller ({exc})") from None
    except OSError:
        raise _Retry() from None
    except wire.FrameError as exc:
        if str(exc).startswith("connection closed"):
            raise _Retry() from None
        raise TransportError(f"Unable to contact slurm controller ({exc})") from None
    if reply.get("code") == "in_standby_mode":
        raise _Retry()
    return reply


def _request(data: bytes, budget: float, raw: str | None = None) -> dict:
    """Deliver ``data`` to the first controller that answers, trying each in turn with
    back-off (50 ms doubling to 1 s) until ``budget`` seconds have passed. Like Slurm's
    commands, silent while it tries; the final error is the caller's to print."""
    import time
    paths = socket_paths()
    deadline = time.monotonic() + budget
    delay = 0.05
    while True:
        for path in paths:
            try:
                return _exchange(path, data, deadline, raw)
            except _Retry:
                continue
        if time.monotonic() + delay > deadline:
            raise TransportError()
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


def call(msg: dict, retry: float | None = None, raw: str | None = None) -> dict:
    """Send one request; return the reply or raise the MusterError it describes. ``retry``:
    seconds to keep trying an unreachable controller (default retry_budget(); a ``ping`` is a
    probe and tries once). A request that changes state carries a request id
    (muster.common.requestid), the same on every retry, so a retry after a restart is
    answered, not executed twice. ``raw``: a member of the reply left as its JSON text
    (wire.recv_frame), for output that passes it on as it is."""
    if "rid" not in msg and requestid.changes_state(msg):
        msg = {**msg, "rid": requestid.new_rid()}
    try:
        data = wire.encode(msg)
    except wire.FrameError:
        raise RequestError(None, "too_large") from None
    except (TypeError, ValueError) as exc:
        raise RequestError(f"Invalid request: {exc}", "invalid_request") from None
    if retry is None:
        retry = 0.0 if msg.get("op") == "ping" else retry_budget()
    reply = _request(data, retry, raw)
    if not reply.get("ok"):
        err = from_wire(reply)
        if isinstance(reply.get("detail"), str):
            err.detail = reply["detail"]
        raise err
    return reply


def check_clusters(prog: str, arg: str | None) -> None:
    """``-M/--cluster(s)``: Muster answers for its own cluster (ClusterName) only, which
    ``all`` includes. Each other name of the list is reported as slurmdbd's unknown cluster;
    when none is left, the command ends as Slurm's does (exit 1). No federation or database
    of clusters: the name is checked against the controller's own."""
    if arg is None:
        return
    reply = call({"op": "config"})
    mine = next((str(v) for k, v in reply["config"] if k == "ClusterName"), "")
    names = arg.split(",")
    if "all" in (n.lower() for n in names):
        return
    for name in names:
        if name != mine:
            sys.stderr.write(f"{prog}: error: No cluster '{name}' known by database.\n")
    if mine not in names:
        from muster.cli.getopt import CliExit
        raise CliExit([f"{prog}: error: '{arg}' can't be reached now, or it is an invalid "
                       "entry for --cluster.  Use 'sacctmgr list clusters' to see available "
                       "clusters."], 1)


def die(prog: str, text: str, code: int = 1) -> None:
    sys.stderr.write(f"{prog}: error: {text}\n")
    sys.exit(code)


def run_main(prog: str, fn) -> None:
    """Common wrapper: Slurm-style errors, never a traceback, broken pipes ignored."""
    from muster.cli.getopt import CliExit
    try:
        code = fn()
    except CliExit as exc:
        if getattr(exc, "stdout", ""):  # --help/--usage/--version (getopt.InfoExit)
            sys.stdout.write(exc.stdout)
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
    _exit(code or 0)


def _exit(code: int) -> None:
    """End the command without the interpreter's finalisation: freeing every module and
    object one by one costs a short command ~1.5-2 ms of CPU (a tenth of an ``sbatch``),
    and a tool that submits thousands of jobs pays it each time. What finalisation would do
    that matters is done here: the standard streams flushed, ``atexit`` functions run
    (logging's flush, among others). A command that started threads (salloc's watcher, any
    that imports ``threading``) exits the normal way, which joins the non-daemon ones."""
    if "threading" in sys.modules:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (BrokenPipeError, ValueError):  # a closed reader, or a closed stream
            pass
    import atexit
    atexit._run_exitfuncs()
    os._exit(code)
