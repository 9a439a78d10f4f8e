"""Active/standby controllers (issue 16): ``SlurmctldHost`` listed several times, one leads.

A musterctld whose slurm.conf names several SlurmctldHosts runs ``run()``: terms of standby
and leadership, one after the other, until SIGTERM. Which controller leads is the lease in
the state store (muster.store.lease: holder, fencing epoch, expiry on the database's clock).

    standby ──(lease expired, or handed to us)──► leader ──(fenced / handover)──► standby
      │ polls the lease every POLL_S                │ a full Controller, built from the store
      │ own socket: ping, takeover;                 │ (the code path of a restart), serving
      │ everything else "in standby mode"           │ everything; renews every Lease.renew_s

Invariants:
  * A leader's every commit is fenced (``store.fence = lease.check``): once another
    controller has taken a newer epoch, the leader's next commit rolls back and raises
    Fenced, whose ``on_fenced`` tears the Controller down at once — listeners closed,
    agent links aborted (so no queued message leaves), the serve loop stopped — and the
    process opens a fresh store as a standby. Its memory is dropped whole, never reused.
  * A standby listens on nothing but its own Unix socket (``musterctld.<index>.sock``): no
    TCP port, not the shared ``musterctld.sock``. Agents and musterrestd find the leader by
    trying each SlurmctldHost address in order (a refused connection moves them on), the
    CLI by the shared socket, which only a leader binds (a new leader re-binds it).
  * The leader also answers on its own socket, as on the shared one: ``scontrol ping``
    asks each controller there, by index.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import pwd
import signal
import socket
import struct

from muster.common.errors import MusterError
from muster.common.netio import SMALL_READS, STREAM_LIMIT, BadFrame, Link, cap_reads
from muster.store import open_store
from muster.store.lease import Fenced, Lease

log = logging.getLogger("musterctld")

SEEN_S = 1.0  # how often a standby records that it is alive (scontrol ping from elsewhere)
SEEN_LIMIT_S = 3 * SEEN_S  # a controller not seen for this long is DOWN to the leader
POLL_S = 0.25  # a standby's look at the lease: a fail-over is SlurmctldTimeout + at most this
STANDBY = {"ok": False, "code": "in_standby_mode",
           "error": "Slurm backup controller in standby mode"}


def own_socket(cfg, index: int) -> str:
    """Controller ``index``'s own Unix socket, beside the shared one in StateSaveLocation."""
    return os.path.join(cfg.state_save_location, f"musterctld.{index}.sock")


def holder_name(cfg, index: int) -> str:
    return f"{cfg.slurmctld_hosts[index]}#{index}"


def my_index(cfg, requested: int | None) -> int:
    """Which SlurmctldHost this process is: ``requested`` (musterctld --index), else the
    first whose name is this host's short name, else the primary."""
    hosts = cfg.slurmctld_hosts or (cfg.slurmctld_host,)
    if requested is not None:
        if not 0 <= requested < len(hosts):
            raise MusterError(f"--index {requested}: slurm.conf names {len(hosts)} "
                              "SlurmctldHost(s)", "invalid_request")
        return requested
    short = socket.gethostname().split(".")[0]
    return next((i for i, h in enumerate(hosts) if h == short), 0)


def _open(cfg):
    return open_store(cfg.store_url, claim="musterctld", shared=True)


def run(cfg, index: int, clock) -> int:
    """Standby and leader terms until SIGTERM/SIGINT; the exit status."""
    cfg = dataclasses.replace(cfg, slurmctld_addr=cfg.slurmctld_addrs[index])  # our TCP address
    holder = holder_name(cfg, index)
    stale = os.environ.get("MUSTER_FAULT_LEAD_EPOCH")
    if stale:  # fault injection (tests/integration/test_failover.py): lead on a stale epoch
        log.warning("MUSTER_FAULT_LEAD_EPOCH=%s: leading without the lease", stale)
        if _lead(cfg, index, holder, int(stale), clock) == "stop":
            return 0
    while True:
        store = _open(cfg)
        try:
            epoch = asyncio.run(Standby(cfg, index, Lease(store, holder,
                                                          cfg.slurmctld_timeout)).serve())
        finally:
            store.close()
        if epoch is None:
            return 0
        outcome = _lead(cfg, index, holder, epoch, clock)
        if outcome == "stop":
            return 0
        log.warning("%s: back to standby (%s)", holder, outcome)


def _lead(cfg, index: int, holder: str, epoch: int, clock) -> str:
    """One term as the leader: a Controller loaded from the store (after our takeover, so
    it holds every commit of the previous leader's epoch). "stop", "fenced" or "handover"."""
    from muster.controller.server import Controller
    store = _open(cfg)  # fresh: the backend's commit stamp is read after our takeover
    lease = Lease(store, holder, cfg.slurmctld_timeout)
    lease.epoch = epoch
    store.fence = lease.check
    try:
        ctl = Controller(cfg, store, clock)
    except Fenced:
        store.close()
        return "fenced"
    log.info("%s leads (epoch %d): state loaded, %d jobs", holder, epoch, len(ctl.state.jobs))
    return asyncio.run(_serve(ctl, lease, own_socket(cfg, index)))


async def _serve(ctl, lease: Lease, own_path: str) -> str:
    outcome = ["stop"]

    def fenced() -> None:
        outcome[0] = "fenced"
        _tear_down(ctl)

    lease.on_fenced = fenced
    ctl.peers = Peers(ctl.cfg, lease)  # ping tells who else is alive (handlers.ping)
    own = await _listen(own_path, ctl._on_unix)
    renew = asyncio.create_task(_renew(ctl, lease, outcome))
    try:
        await ctl.serve()
    finally:
        renew.cancel()
        own.close()
    return outcome[0]


class Peers:
    """The leader's view of every controller of the set, for ``scontrol ping`` on hosts that
    cannot reach them: itself, and the others by their last liveness mark in the store
    (Lease.mark_seen: standbys every SEEN_S) within SEEN_LIMIT_S."""

    def __init__(self, cfg, lease: Lease):
        self.holders = [holder_name(cfg, i) for i in range(len(cfg.slurmctld_hosts))]
        self.lease = lease

    def up(self) -> list[bool]:
        ages = self.lease.seen_ages()
        return [h == self.lease.holder or ages.get(h, SEEN_LIMIT_S + 1) <= SEEN_LIMIT_S
                for h in self.holders]


def _tear_down(ctl) -> None:
    """Stop acting as the leader now, synchronously, from inside the commit that found us
    deposed: no listener accepts, no agent link carries another byte, the loop stops."""
    for server in ctl._servers:
        server.close()
    for link in list(ctl.agents.values()):
        link.writer.transport.abort()
    ctl._stopping.set()


async def _renew(ctl, lease: Lease, outcome: list[str]) -> None:
    """Renew every ``lease.renew_s``; on a handover request, expire our lease and stop
    (the standby that asked takes over at its next poll and reloads what we committed).
    After each renewal, the shared socket is checked to be ours: a deposed controller that
    bound it before it learnt it was deposed left it dead, and the leader binds it again."""
    inode: list[int | None] = [None]
    while True:
        await asyncio.sleep(lease.renew_s)
        try:
            want = lease.renew()
        except Fenced:
            return  # on_fenced has torn the controller down
        except Exception:
            log.exception("lease renewal failed")
            continue
        await _keep_socket(ctl, inode)
        if want:
            log.warning("%s hands over to %s (scontrol takeover)", lease.holder, want)
            outcome[0] = "handover"
            with contextlib.suppress(Fenced):
                lease.release()
            _tear_down(ctl)
            return


async def _keep_socket(ctl, inode: list[int | None]) -> None:
    path = ctl.cfg.socket_path
    try:
        now = os.stat(path).st_ino
    except FileNotFoundError:
        now = None
    if inode[0] is None and now is not None:
        inode[0] = now  # bound by Controller.serve at the start of the term
        return
    if now is not None and now == inode[0]:
        return
    log.warning("the shared socket %s is not ours any more; binding it again", path)
    ctl._servers.append(await _listen(path, ctl._on_unix))
    inode[0] = os.stat(path).st_ino


async def _listen(path: str, handler) -> asyncio.base_events.Server:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    server = await asyncio.start_unix_server(handler, path=path, limit=STREAM_LIMIT)
    os.chmod(path, 0o666)
    return server


class Standby:
    """A controller waiting for the lease: answers ``ping`` and (from root, SlurmUser or an
    operator) ``takeover`` on its own socket, refuses everything else with Slurm's standby
    error, and returns the epoch once it holds the lease (None on SIGTERM)."""

    def __init__(self, cfg, index: int, lease: Lease):
        self.cfg, self.index, self.lease = cfg, index, lease
        self.path = own_socket(cfg, index)

    async def serve(self) -> int | None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        server = await _listen(self.path, self._on_unix)
        log.info("%s standing by (lease held by %s)", self.lease.holder,
                 self.lease.read().holder or "nobody")
        seen_at = 0.0
        try:
            while not stop.is_set():
                if loop.time() - seen_at >= SEEN_S:
                    seen_at = loop.time()
                    with contextlib.suppress(Exception):  # a database hiccup: next time
                        self.lease.mark_seen()
                st = self.lease.read()
                if st.remaining_s <= 0 or st.holder == self.lease.holder:
                    epoch = self.lease.try_acquire()
                    if epoch is not None:
                        return epoch
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), POLL_S)
            return None
        finally:
            server.close()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)

    def _admin(self, uid: int) -> bool:
        if uid in (0, os.getuid()):
            return True
        try:
            return pwd.getpwuid(uid).pw_name in self.cfg.operators
        except KeyError:
            return False

    async def _on_unix(self, reader, writer) -> None:
        try:
            sock = writer.get_extra_info("socket")
            _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(
                socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
            cap_reads(writer, SMALL_READS)
            link = Link(reader, writer)
            msg = await asyncio.wait_for(link.recv(SMALL_READS), 10)
            writer.write(link.encode(self.answer(msg, uid)))
            await writer.drain()
        except (BadFrame, TimeoutError, ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        except Exception:
            log.exception("standby: client request failed")
        finally:
            writer.close()

    def answer(self, msg: object, uid: int) -> dict:
        op = msg.get("op") if isinstance(msg, dict) else None
        if op == "ping":
            st = self.lease.read()
            return {"ok": True, "role": "standby", "index": self.index, "leader": st.holder,
                    "epoch": st.epoch, "cluster": self.cfg.cluster_name}
        if op == "takeover":
            if not self._admin(uid):
                return {"ok": False, "code": "access_denied", "error": "Access/permission denied"}
            self.lease.request_handover()
            log.warning("%s: takeover requested by uid %d", self.lease.holder, uid)
            return {"ok": True}
        return dict(STANDBY)
