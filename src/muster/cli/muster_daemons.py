"""``muster down``/``status``/``restart``/``start-agents``: find the cluster's daemons by their
own pid files, stop or restart them without touching the work they run, and start the agents
that are missing (issue 16).

Standard library, muster.common and the CLI client only; ``muster`` (cli/muster.py) hands in
what it read from slurm.conf (the state directory, each node's spool directory).

Invariants:

* **Only our processes are signalled.** A daemon is found through its pid file
  (muster.common.pidfile), and only while /proc confirms the same process (start time) still
  runs that daemon; a pid from ``muster.pids`` is used only under the same check. A reused pid
  is never signalled.
* **Stopping a daemon never stops jobs.** Batch jobs run under their supervisors and steps
  under their step daemons, which outlive the agent on purpose; a restarted agent adopts them
  (muster.agent.daemon.Agent.recover) and the controller reconciles on registration.
* **A rolling restart keeps the cluster serving.** Agents go one process at a time, and the
  next waits until the previous one's nodes have registered again (their SlurmdStartTime is
  the new agent's); missing agents are started after them; then the controller, and clients
  ride through its absence by retrying (cli/client.py); musterrestd, a client of the
  controller, goes last and is back when it answers HTTP.
* **An agent is started only where it can serve.** A node's agent talks from the node's
  address, so only nodes whose NodeAddr this host can bind (or whose NodeHostname is this
  host) get one here (``is_local``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field

from muster.common import pidfile

STOP_TIMEOUT = 10.0


@dataclass
class Daemon:
    """One running daemon process: ``kind`` (musterctld, musterd, musterrestd), its pid, the
    nodes it serves (musterd), its command line as the kernel shows it (to start it again)."""
    kind: str
    pid: int
    nodes: list[str] = field(default_factory=list)
    argv: list[str] = field(default_factory=list)


def _argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode(errors="surrogateescape") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def _verified(pid: object, kind: str) -> int | None:
    """``pid`` if it is a live process running ``kind`` (a pid from muster.pids)."""
    if not isinstance(pid, int) or pid <= 1 or pidfile.start_time(pid) is None:
        return None
    return pid if pidfile.names_daemon(pid, kind) else None


def find(state: str, spools: dict[str, str], rec: dict | None,
         retired: dict[str, str] | None = None) -> list[Daemon]:
    """The cluster's running daemons: controller, agents (one entry per process, with the
    nodes it serves, in node order), REST daemon. ``spools``: node -> its spool directory.
    ``retired``: the same for nodes gone from the configuration (``scontrol reconfigure``)
    whose agent may still run until its last job ends; found by their pid file only, as
    muster.pids may name a pid reused since by another agent of the cluster."""
    rec = rec or {}
    out: list[Daemon] = []
    ctld = pidfile.running(os.path.join(state, pidfile.CONTROLLER), "musterctld") \
        or _verified(rec.get("controller"), "musterctld")
    if ctld:
        out.append(Daemon("musterctld", ctld, argv=_argv(ctld)))
    for i, pid in sorted((rec.get("standby") or {}).items()):  # active/standby controllers
        found = pidfile.running(os.path.join(state, f"musterctld.{i}.pid"), "musterctld") \
            or _verified(pid, "musterctld")
        if found and found != ctld:
            out.append(Daemon("musterctld", found, argv=_argv(found)))
    by_pid: dict[int, Daemon] = {}
    recorded = rec.get("agents") or {}
    for node, spool in [*spools.items(), *(retired or {}).items()]:
        pid = pidfile.running(os.path.join(spool, pidfile.AGENT), "musterd") \
            or (_verified(recorded.get(node), "musterd") if node in spools else None)
        if pid:
            d = by_pid.get(pid)
            if d is None:
                d = by_pid[pid] = Daemon("musterd", pid, argv=_argv(pid))
                out.append(d)
            d.nodes.append(node)
    restd = pidfile.running(os.path.join(state, pidfile.RESTD), "musterrestd") \
        or _verified(rec.get("restd"), "musterrestd")
    if restd:
        out.append(Daemon("musterrestd", restd, argv=_argv(restd)))
    return out


def _gone(d: Daemon) -> bool:
    return not pidfile.names_daemon(d.pid, d.kind) or pidfile.start_time(d.pid) is None


def stop(daemons: list[Daemon], timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM each (a clean exit: pid files removed, jobs left running), SIGKILL what is
    still there after ``timeout``. The check before each signal is the /proc one."""
    starts = {d.pid: pidfile.start_time(d.pid) for d in daemons}
    for d in daemons:
        _signal(d, signal.SIGTERM, starts[d.pid])
    deadline = time.monotonic() + timeout
    while any(not _gone(d) for d in daemons) and time.monotonic() < deadline:
        time.sleep(0.05)
    for d in daemons:
        if not _gone(d):
            _signal(d, signal.SIGKILL, starts[d.pid])
    while any(not _gone(d) for d in daemons) and time.monotonic() < deadline + 5:
        time.sleep(0.05)


def _signal(d: Daemon, sig: int, start: int | None) -> None:
    if start is None or pidfile.start_time(d.pid) != start:
        return  # gone, or the pid now belongs to another process
    try:
        os.kill(d.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def spawn(argv: list[str], out_log: str) -> int:
    """Start a daemon again with the command line it had (its own session, like muster up)."""
    with open(out_log, "ab") as fh:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=fh,
                             start_new_session=True, close_fds=True)
    return p.pid


def _nodes_back(call, nodes: list[str], since: int) -> bool:
    """Every one of ``nodes`` is connected with an agent started at or after ``since``."""
    try:
        reply = call({"op": "nodes"}, retry=0)
    except Exception:
        return False
    recs = {n["name"]: n for n in reply.get("nodes", [])}
    return all(n in recs and "NOT_RESPONDING" not in recs[n].get("flags", [])
               and (recs[n].get("slurmd_start_time") or 0) >= since for n in nodes)


def _wait_registered(call, started: list[Daemon], since: int, logdir: str,
                     timeout: float) -> None:
    """Return once every node of ``started`` is connected with an agent started at or after
    ``since``; raise RuntimeError when one of the processes exits, TimeoutError at the end."""
    nodes = [n for d in started for n in d.nodes]
    deadline = time.monotonic() + timeout
    while not _nodes_back(call, nodes, since):
        dead = [n for d in started if pidfile.start_time(d.pid) is None for n in d.nodes]
        if dead:
            raise RuntimeError(f"musterd for {','.join(dead)} exited; see {logdir}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{','.join(nodes)} did not register in time")
        time.sleep(0.05)


def restart_agent(d: Daemon, call, logdir: str, timeout: float) -> int:
    """Stop one agent process and start it again; return the new pid once each node it
    serves has registered again (so its jobs are adopted) — or raise TimeoutError."""
    since = int(time.time())
    stop([d])
    pid = spawn(d.argv, os.path.join(logdir, f"musterd-{d.nodes[0]}.out"))
    _wait_registered(call, [Daemon("musterd", pid, d.nodes, d.argv)], since, logdir, timeout)
    return pid


def start_agents(plans: list[tuple[list[str], list[str]]], call, logdir: str,
                 timeout: float) -> list[Daemon]:
    """Start a musterd for each (nodes, argv) of ``plans``, all at once (none of them runs
    a job yet, so there is nothing to roll); return them once every node has registered."""
    since = int(time.time())
    started = [Daemon("musterd", spawn(argv, os.path.join(logdir, f"musterd-{nodes[0]}.out")),
                      list(nodes), argv) for nodes, argv in plans]
    _wait_registered(call, started, since, logdir, timeout)
    return started


def is_local(addr: str, hostname: str) -> bool:
    """Does the node with this NodeAddr and NodeHostname live on this host? Its hostname is
    this host's, or its address is one a process here can bind (any 127/8 address, the
    interfaces' own): an agent talks to the controller from its node's address, so an agent
    started here for any other node could not serve it."""
    me = socket.gethostname()  # no getfqdn(): a reverse DNS lookup can stall for seconds
    if hostname and hostname in (me, me.split(".")[0]):
        return True
    try:
        infos = socket.getaddrinfo(addr, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    for family, _type, _proto, _name, sockaddr in infos:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((sockaddr[0], 0))
            return True
        except OSError:
            continue
    return False


def _listen_of(argv: list[str]) -> tuple[str, int] | None:
    """musterrestd's ``--listen HOST:PORT`` (``:PORT`` is loopback, as the daemon reads it)."""
    for i, a in enumerate(argv):
        value = argv[i + 1] if a == "--listen" and i + 1 < len(argv) else \
            a.split("=", 1)[1] if a.startswith("--listen=") else None
        if value is not None:
            host, _, port = value.rpartition(":")
            return (host or "127.0.0.1", int(port)) if port.isdigit() else None
    return ("127.0.0.1", 6820) if argv else None  # its default


def _http_answers(where: tuple[str, int]) -> bool:
    """An HTTP status line comes back for ``GET /`` (a redirect to the dashboard that needs
    no controller): the server is listening and its application runs."""
    try:
        with socket.create_connection(where, timeout=2) as s:
            s.sendall(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")
            return s.recv(16).startswith(b"HTTP/")
    except OSError:
        return False


def restart_restd(d: Daemon, state: str, logdir: str, timeout: float) -> int:
    """Stop musterrestd and start it again with its command line; return its pid once it
    has written its pid file and answers HTTP on its address."""
    stop([d])
    pid = spawn(d.argv, os.path.join(logdir, "musterrestd.out"))
    where = _listen_of(d.argv)
    path = os.path.join(state, pidfile.RESTD)
    deadline = time.monotonic() + timeout
    while pidfile.running(path, "musterrestd") != pid or (where and not _http_answers(where)):
        if pidfile.start_time(pid) is None:
            raise RuntimeError(f"musterrestd exited during start-up; see {logdir}/musterrestd.*")
        if time.monotonic() > deadline:
            raise TimeoutError("musterrestd did not answer in time")
        time.sleep(0.05)
    return pid


def restart_controller(d: Daemon, call, logdir: str, nodes: list[str], timeout: float) -> int:
    """Stop the controller and start it again; return its pid once it answers and every
    node's agent has reconnected (its own retry loop brings it back)."""
    stop([d])
    pid = spawn(d.argv, os.path.join(logdir, "musterctld.out"))
    deadline = time.monotonic() + timeout
    while True:
        try:
            info = call({"op": "ping"}, retry=0)
            if info.get("nodes_up", 0) >= len(nodes):
                return pid
        except Exception:
            pass
        if pidfile.start_time(pid) is None:
            raise RuntimeError(f"musterctld exited during start-up; see {logdir}/musterctld.*")
        if time.monotonic() > deadline:
            raise TimeoutError("musterctld did not come back in time")
        time.sleep(0.05)
