"""A small process that forks the per-job supervisors and step daemons for the agent.

Forking costs in proportion to the parent's memory: the agent (asyncio, msgspec, its state) is
~25 MB and a fork of it costs ~1 ms of CPU in the child plus the page-table copy in the parent.
The zygote is forked from the agent *before* those imports (~10 MB) and does nothing but
fork on request, so a job's supervisor starts several times cheaper.

Protocol (a SOCK_SEQPACKET socketpair, one datagram per message):
  agent → zygote  {"kind": "batch"|"step", "spool": dir, "node": name}
  zygote → agent  {"pid": pid} with a pidfd of the child attached (SCM_RIGHTS), or {"error": text}
The pidfd is opened before the zygote can reap the child, so the agent can follow even a
supervisor that has already finished.
The launch description is read from ``<spool>/launch.json``, which the agent wrote first.
Supervisors are the zygote's children (it reaps them; the agent follows them by pidfd, as it
does after a restart). When the agent's end closes, the zygote exits; running supervisors are
not affected.
"""

from __future__ import annotations

import json
import os
import signal
import socket


def start() -> tuple[socket.socket, int]:
    """Fork the zygote; return the agent's end of the channel and the zygote's pid."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        a.close()
        try:
            _serve(b)
        finally:
            os._exit(0)
    b.close()
    return a, pid


def _warm_up() -> None:
    """Load what supervisors import lazily (subprocess, locale, the codecs behind text-mode
    open()) once here, instead of in every forked supervisor: ~4 ms of CPU per job otherwise."""
    import subprocess
    import tempfile
    subprocess.Popen(["/bin/true"], start_new_session=True, close_fds=True).wait()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "warm.json")
        with open(path, "w") as fh:
            json.dump({"warm": True}, fh)
        with open(path) as fh:
            json.load(fh)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.close()
    import selectors
    selectors.DefaultSelector().close()


def _serve(chan: socket.socket) -> None:
    # imported here, in the zygote only, so that every supervisor starts with them loaded
    from muster.agent import confine, stepd, supervisor
    confine.protect_daemon()  # -1000: the OOM killer never takes the zygote (supervisors inherit it)
    _warm_up()
    def reap(signum, frame):
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
    signal.signal(signal.SIGCHLD, reap)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)  # the agent's stop must not stop the zygote mid-fork
    import gc
    gc.collect()
    gc.freeze()
    while True:
        try:
            data = chan.recv(65536)
        except InterruptedError:
            continue
        if not data:
            return
        try:
            req = json.loads(data)
            with open(os.path.join(req["spool"], "launch.json")) as fh:
                launch = json.load(fh)
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
            pid = os.fork()
            if pid == 0:
                chan.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
                if req["kind"] == "batch":
                    supervisor.run_supervisor(req["spool"], launch, req["node"])
                else:
                    stepd.run_stepd(req["spool"], launch, req["node"])
                os._exit(1)  # not reached
            pidfd = os.pidfd_open(pid)  # SIGCHLD is blocked: the child cannot be reaped yet
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
            try:
                socket.send_fds(chan, [json.dumps({"pid": pid}).encode()], [pidfd])
            finally:
                os.close(pidfd)
            continue
        except Exception as exc:  # noqa: BLE001 - answer, never die
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        chan.send(json.dumps(reply).encode())
