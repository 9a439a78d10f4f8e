"""musterctld: listeners, authentication, the scheduling loop and the agent links.

Threading model: one asyncio loop owns all state; nothing else touches it. Requests are
handled to completion (including their commit) before the next one starts, so every reply
reflects committed state. Scheduling runs on events (submit, job end, node change) after a
short coalescing delay, plus a periodic pass as a safety net.

Endpoints:
  * Unix socket ``<StateSaveLocation>/musterctld.sock`` (mode 0666): local clients; the caller's
    uid/gid come from SO_PEERCRED. One request, one reply, no handshake.
  * TCP ``SlurmctldHost:SlurmctldPort``: agents and the REST daemon. Nothing is read but the
    link handshake (muster.common.linkauth, muster.common.netio.respond) until the peer has
    proved it holds the cluster key; its claims (uid, gid, node) are covered by that proof, and
    every later frame is sealed. Agents must be root, the cluster owner or operators.

Bounded cost for hostile peers (every local user is assumed hostile):
  * before authentication: frames of at most PRE_AUTH_MAX_FRAME, HANDSHAKE_TIMEOUT to finish,
    at most MAX_HANDSHAKES such TCP peers at once (a new one evicts the oldest);
  * plain users on the Unix socket: MAX_CONNS_PER_UID connections each, MAX_USER_CONNECTIONS
    all together, and UID_PENDING_BYTES of half-received frames each (USERS_PENDING_BYTES
    together); past these they get "Controller busy". Root, the daemon's uid and operators
    are never limited.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import signal
import socket
import struct
import time
from typing import TypeGuard

import msgspec

from muster.common import auth
from muster.common import clock as clocks
from muster.common.errors import MusterError
from muster.common.linkauth import HANDSHAKE_TIMEOUT
from muster.common.netio import (SMALL_READS, STREAM_LIMIT, BadFrame, ByteBudget, Link,
                                 LinkForged, cap_reads, frame, respond)
from muster.common.wire import MAX_FRAME
from muster.controller import api_ops, diag, idempotency, ops, reconfig
from muster.controller.faults import crash_point
from muster.controller.gcwatch import GcWatch
from muster.controller.looplag import LoopLag, RequestTimes
from muster.controller.passes import PassRunner
from muster.controller.state import ClusterState, identity, now
from muster.controller.steps import node_alloc
from muster.core.snapshot import SchedConfig
from muster.lifecycle import events, jobfsm
from muster.model.job import RUNNING, Job
from muster.protocol import agentmsg

log = logging.getLogger("musterctld")

COALESCE_S = 0.002
PERIODIC_S = 1.0
IDLE_CLIENT_TIMEOUT = 30.0
MAX_HANDSHAKES = 256  # TCP peers not yet authenticated; a new one evicts the oldest
MAX_CONNS_PER_UID = 1024  # Unix connections of one plain user (srun/salloc leases count)
MAX_USER_CONNECTIONS = 8192  # Unix connections of all plain users together
UID_PENDING_BYTES = 32 << 20  # bytes of half-received frames per plain user (> MAX_FRAME)
USERS_PENDING_BYTES = 256 << 20  # ... of all plain users together
LISTEN_BACKLOG = 4096  # bursts of CLI calls (a workflow tool polling) queue, not fail
BUSY = {"ok": False, "code": "busy", "error": "Controller busy, try again"}
_INTERNAL = {"ok": False, "code": "internal", "error": "Unexpected controller error"}


def _error_reply(exc: MusterError) -> dict:
    out = exc.to_wire()
    detail = getattr(exc, "detail", None)
    if detail:
        out["detail"] = detail
    return out


def _ok_reply(reply: object) -> dict:
    if not isinstance(reply, dict):
        return dict(_INTERNAL)
    reply.setdefault("ok", True)
    return reply
# agent reports applied together, one transaction per turn of the loop (queue_agent_message)
BATCHED_REPORTS = frozenset(("job_started", "job_ended", "heartbeat"))
# the longest the loop applies queued agent reports before it commits them and lets a request
# in: 1,024 emulated nodes ending jobs in bursts held it 60-175 ms per batch
AGENT_SLICE_S = 0.015


def _is_id(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**32


class ClientConn:
    """Per-connection context handed to handlers: where the peer is, what to do on close."""

    __slots__ = ("peer_host", "on_close")

    def __init__(self, writer):
        peer = writer.get_extra_info("peername")
        self.peer_host = peer[0] if isinstance(peer, tuple) and peer else "127.0.0.1"
        self.on_close: list = []


class AgentLink:
    """The controller's end of one agent's persistent (sealed) connection. Messages that make
    the agent act get their job credential here, when the frame is written: one that waited
    in the outbox leaves with a fresh one, signed with the key this link was authenticated
    with (during a key rotation an agent may still hold only the old key)."""

    __slots__ = ("ctl", "node", "link", "cred_key")

    def __init__(self, ctl: Controller, node: str, link: Link, key: bytes):
        self.ctl, self.node, self.link = ctl, node, link
        self.cred_key = auth.cred_key(key)

    @property
    def writer(self) -> asyncio.StreamWriter:
        return self.link.writer

    def send(self, msg: dict) -> bool:
        if self.link.writer.is_closing():
            return False
        if msg.get("op") in auth.CRED_OPS:
            msg = {**msg, "cred": self.ctl.job_cred(self.node, msg, self.cred_key)}
        return self.link.send(msg)


class Controller:
    def __init__(self, cfg, store, clock: clocks.Clock | None = None):
        """``clock``: the process's clock (muster.common.clock); it is installed here, so
        every ``now()`` of the controller's modules reads it. Default: the one installed."""
        self.clock = clock if clock is not None else clocks.current()
        clocks.install(self.clock)
        self.cfg = cfg
        self.state = ClusterState(cfg, store)
        self.state.ctl = self
        self.sched_cfg: SchedConfig  # set by reconfig.apply_settings, below
        from muster.controller.steps import StepManager
        from muster.controller.usage import UsageBook
        self.steps = StepManager(self)
        from muster.controller.prologs import Prologs
        self.prologs = Prologs(self)  # PrologSlurmctld, node Prolog/Epilog outcomes
        self.usage = UsageBook(self)  # usage accounting: live samples, final statistics
        from muster.controller.applier import Applier
        self.applier = Applier(self)  # lifecycle events → one commit → effects dispatched
        self.passes = PassRunner(self)  # scheduling passes, their pure part off the loop
        self.agents: dict[str, AgentLink] = {}
        self.outbox: dict[str, list[dict]] = {}  # messages for agents that are away
        self.keys = auth.load_keys(cfg.key_path)  # the key, then muster.key.old (rotation)
        self.owner_uid = os.getuid()
        # derived from the configuration, at start and on every `scontrol reconfigure`, by
        # the one function that builds them (muster.controller.reconfig.apply_settings)
        self.operators: set[str]
        self.slurmd_timeout: int
        self.requeue_delay: int
        self.retiring: set[str] = set()  # nodes gone from slurm.conf, removed once idle
        self.peers = None  # an active/standby set's liveness view while we lead (leader.Peers)
        reconfig.apply_settings(self, cfg)
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self.stats = {"cycles": 0, "last_cycle_ms": 0.0, "starts": 0, "rpcs": 0}
        self.diag = diag.Diag(self)  # sdiag's statistics, setdebug/setdebugflags
        self.gc_watch = GcWatch()  # the collector: its pauses (diag), what it walks
        self.loop_lag = LoopLag()  # how late the loop runs what is due (diag)
        self.request_times = RequestTimes(ops.OPS)  # per operation, handling to reply (diag)
        self._servers: list[asyncio.base_events.Server] = []
        self._conns = 0  # Unix connections of plain users
        self._user_conns: dict[int, int] = {}
        self._limited_cache: dict[int, tuple[bool, float]] = {}
        self._handshakes: collections.OrderedDict = collections.OrderedDict()
        self._warned: dict[str, tuple[float, int]] = {}
        self.budget = ByteBudget(UID_PENDING_BYTES, USERS_PENDING_BYTES)
        self._handlers: set[asyncio.Task] = set()  # running connection handlers
        self.current_conn = None
        self._agent_batch: list[tuple] = []  # agent frames not yet applied (queue_agent_message)
        self._acks: list | None = None  # acks waiting for the commit of the batch being applied

    # ---- authorization -----------------------------------------------------------------
    def is_admin(self, uid: int) -> bool:
        if uid in (0, self.owner_uid):
            return True
        return identity(uid)["user"] in self.operators

    # ---- lifecycle of the daemon --------------------------------------------------------
    async def serve(self) -> None:
        sock_path = self.cfg.socket_path
        os.makedirs(os.path.dirname(sock_path), exist_ok=True)
        if os.path.exists(sock_path):
            os.unlink(sock_path)
        unix = await asyncio.start_unix_server(self._on_unix, path=sock_path, limit=STREAM_LIMIT,
                                               backlog=LISTEN_BACKLOG)
        os.chmod(sock_path, 0o666)
        host = self.cfg.slurmctld_addr or "127.0.0.1"
        tcp = await asyncio.start_server(self._on_tcp, host=host, port=self.cfg.slurmctld_port,
                                         reuse_address=True, limit=STREAM_LIMIT,
                                         backlog=LISTEN_BACKLOG)
        self._servers = [unix, tcp]
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        loop.add_signal_handler(signal.SIGHUP, diag.on_sighup, self)  # reopen logs, reconfigure
        log.info("musterctld ready: %s, %s:%s", sock_path, host, self.cfg.slurmctld_port)
        self.gc_watch.install()
        tasks = [asyncio.create_task(self._scheduler_loop()),
                 asyncio.create_task(self._periodic()),
                 asyncio.create_task(self.loop_lag.run())]
        self.request_schedule()
        await self._stopping.wait()
        self.gc_watch.uninstall()
        for t in tasks:
            t.cancel()
        for s in self._servers:
            s.close()
        for link in list(self.agents.values()):
            link.writer.close()
        # finish the connection handlers (an agent link records its disconnection) while
        # the store is still open
        handlers_left = [t for t in self._handlers if t is not asyncio.current_task()]
        for t in handlers_left:
            t.cancel()
        if handlers_left:
            await asyncio.wait(handlers_left, timeout=2)
        # what the agents reported last, before the store closes
        self.apply_agent_messages(whole=True)
        self.state.store.close()

    def request_schedule(self) -> None:
        self._wake.set()

    async def _scheduler_loop(self) -> None:
        # Coalescing adapts to the cost of a pass: after a pass of X ms the next one waits at
        # least X ms, so a burst of submissions into a long queue spends at most about half of
        # the loop on scheduling instead of one full pass per request (O(n²) per burst).
        last = 0.0
        while True:
            await self._wake.wait()
            await asyncio.sleep(max(COALESCE_S, last))
            self._wake.clear()
            t0 = time.perf_counter()
            try:
                await self.passes.run_async()  # the core in a forked child (passes.py)
            except Exception:  # a bug here must not kill the controller
                log.exception("scheduling pass failed")
            last = min(time.perf_counter() - t0, 0.5)

    def schedule_once(self) -> None:
        """One whole pass on the loop (the in-process tests, ``--immediate``): snapshot, core,
        then starts and reasons in one commit; the launches (after the prologs) leave after
        it. The daemon's own passes run the core off the loop (muster.controller.passes)."""
        self.passes.run_sync()

    def preempt(self, preemptions, t: int) -> None:
        """Plan.preemptions become ``Preempt`` events: REQUEUE puts the victim back in the
        queue under the same id, CANCEL ends it PREEMPTED; with GraceTime the victim gets
        SIGTERM now and a timer kills it when the grace time is over. A victim already in its
        grace time is not preempted again."""
        if not preemptions:
            return
        seen: set[int] = set()
        with self.applier.transaction():  # one commit; signals, kills and timers after it
            for p in preemptions:
                job = self.state.jobs.get(p.victim)
                if job is None or job.state != RUNNING or job.completing \
                        or p.victim in self.applier.armed or p.victim in seen:
                    continue
                seen.add(p.victim)
                self.applier.job(job, events.Preempt(p.mode, p.preemptor, p.grace), t)

    async def _periodic(self) -> None:
        while True:
            await asyncio.sleep(PERIODIC_S)
            try:
                self.tick()
            except Exception:
                log.exception("periodic pass failed")
            self.gc_watch.tick()  # the daemon's collector policy (wall time; controller.gcwatch)

    def tick(self) -> None:
        """The once-a-second duties at the clock's present (the in-process tests call it after
        moving a virtual clock): purge, silent agents, time limits, overdue epilogs."""
        t = now()
        self.state.purge_old(t)
        self.check_agents(t)
        reconfig.retire_idle(self, t)  # nodes removed by reconfigure whose jobs have ended
        self.enforce_interactive_limits(t)
        self.steps.tick(t)  # --signal warnings and time limits for steps (steps.py)
        self.prologs.tick(t)  # overdue epilogs (prologs.py)
        self.request_schedule()

    # ---- client connections --------------------------------------------------------------
    # Nothing a peer sends may raise out of these coroutines: every connection ends with a
    # reply (when one can still be written) and a closed socket, and the daemon keeps going.

    def _limited(self, uid: int) -> bool:
        """Plain users are limited (connections, unfinished bytes); root, the daemon's own uid
        and operators never are. Cached for a minute: it runs for every Unix connection."""
        if uid in (0, self.owner_uid):
            return False
        if not self.operators:
            return True
        t = clocks.monotonic()
        hit = self._limited_cache.get(uid)
        if hit is None or t - hit[1] > 60:
            if len(self._limited_cache) > 10_000:
                self._limited_cache.clear()
            hit = self._limited_cache[uid] = (not self.is_admin(uid), t)
        return hit[0]

    def _track(self) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)

    def _untrack(self) -> None:
        self._handlers.discard(asyncio.current_task())

    def _admit_user(self, uid: int) -> bool:
        """Count a plain user's Unix connection; False (refuse) past the per-uid or the
        all-users cap, so one user's flood never locks out anyone else."""
        mine = self._user_conns.get(uid, 0)
        if mine >= MAX_CONNS_PER_UID or self._conns >= MAX_USER_CONNECTIONS:
            self._warn_limited("busy", "refusing Unix connections of uid %d (%d open; %d of all "
                               "users)", uid, mine, self._conns)
            return False
        self._user_conns[uid] = mine + 1
        self._conns += 1
        return True

    def _release_user(self, uid: int) -> None:
        left = self._user_conns[uid] - 1
        if left:
            self._user_conns[uid] = left
        else:
            del self._user_conns[uid]
        self._conns -= 1

    def _warn_limited(self, kind: str, fmt: str, *args) -> None:
        """A warning at most every 10 s per kind: a flood must not fill the log (or the disk)."""
        t = clocks.monotonic()
        last, skipped = self._warned.get(kind, (0.0, 0))
        if t - last < 10:
            self._warned[kind] = (last, skipped + 1)
            return
        self._warned[kind] = (t, 0)
        log.warning(fmt + (f" (and {skipped} more like it)" if skipped else ""), *args)

    async def _on_unix(self, reader, writer) -> None:
        self._track()
        try:
            sock = writer.get_extra_info("socket")
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _pid, uid, gid = struct.unpack("3i", creds)
            limited = self._limited(uid)
            if limited and not self._admit_user(uid):
                writer.write(frame(BUSY))
                return
            if limited:
                cap_reads(writer, SMALL_READS)
            try:
                await self._client_loop(Link(reader, writer), uid, gid,
                                        self.budget if limited else None)
            finally:
                if limited:
                    self._release_user(uid)
        except Exception:
            log.exception("unix client connection failed")
        finally:
            self._untrack()
            writer.close()

    def _admit_handshake(self, link: Link) -> None:
        """Hold at most MAX_HANDSHAKES TCP peers in their handshake: a new one evicts the
        oldest, so unauthenticated connections can never fill the controller and a real agent
        (which finishes its handshake in a round trip) always gets through."""
        if len(self._handshakes) >= MAX_HANDSHAKES:
            _task, old = self._handshakes.popitem(last=False)
            old.writer.transport.abort()
            self._warn_limited("evict", "%d TCP peers in their handshake: evicting the oldest",
                               MAX_HANDSHAKES)
        self._handshakes[asyncio.current_task()] = link

    async def _on_tcp(self, reader, writer) -> None:
        self._track()
        link = Link(reader, writer)
        try:
            await self._tcp_session(link)
        except Exception:
            log.exception("TCP connection from %s failed", writer.get_extra_info("peername"))
        finally:
            self._untrack()
            writer.close()

    async def _tcp_session(self, link: Link) -> None:
        """The handshake (nothing else is read or answered before it), then the agent's or
        the client's loop on the sealed link."""
        peer = link.writer.get_extra_info("peername")
        self._admit_handshake(link)
        cap_reads(link.writer, SMALL_READS)
        try:
            role, claims, key = await asyncio.wait_for(
                respond(link, self.keys, ("agent", "client")), HANDSHAKE_TIMEOUT)
        except LinkForged as exc:
            self._warn_limited("auth", "refused TCP peer %s: %s", peer, exc)
            return
        except BadFrame as exc:
            self._warn_limited("auth", "refused TCP peer %s: bad frame: %s", peer, exc)
            await self._refuse(link, exc.code, f"bad frame: {exc}")
            return
        except TimeoutError:
            self._warn_limited("auth", "refused TCP peer %s: no handshake within %ss", peer,
                               HANDSHAKE_TIMEOUT)
            return
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            return
        finally:
            self._handshakes.pop(asyncio.current_task(), None)
        cap_reads(link.writer, None)  # a key holder: full-size reads again
        uid, gid = claims.get("uid"), claims.get("gid")
        if not (_is_id(uid) and _is_id(gid)):
            log.warning("refused TCP peer %s: claims without a valid uid/gid", peer)
            await self._refuse(link, "auth", "Authentication failure: no valid uid/gid claimed")
            return
        if role == "agent":
            if not self.is_admin(uid):
                log.warning("refused agent registration from %s by uid %d", peer, uid)
                await self._refuse(link, "access_denied",
                                   "Access/permission denied: agents must run as root or SlurmUser")
                return
            await self._agent_loop(link, claims, key)
            return
        # a node's relay (muster.agent.relay) speaks for a plain user: that user's limits
        # apply as on the Unix socket (connections, half-received bytes)
        limited = "via" in claims and self._limited(uid)
        if limited and not self._admit_user(uid):
            await self._refuse(link, "busy", "Controller busy, try again")
            return
        if limited:
            cap_reads(link.writer, SMALL_READS)
        try:
            await self._client_loop(link, uid, gid, self.budget if limited else None)
        finally:
            if limited:
                self._release_user(uid)

    async def _refuse(self, link: Link, code: str, message: str) -> None:
        """A last error reply (sealed on a sealed link), then the close."""
        try:
            link.send({"ok": False, "code": code, "error": message})
            await asyncio.wait_for(link.writer.drain(), 5)
        except Exception:
            pass
        link.close()

    async def _client_loop(self, link: Link, uid: int, gid: int,
                           budget: ByteBudget | None) -> None:
        """Answer requests until the peer closes, idles too long or sends a bad frame (which
        gets an error reply, then the connection is closed; a frame failing its MAC is not
        answered). A connection that holds an allocation lease (srun, salloc) never idles
        out; closing it gives the allocation back. ``budget`` bounds the bytes of unfinished
        frames of limited (plain) users."""
        writer = link.writer
        conn = ClientConn(writer)
        try:
            while True:
                try:
                    msg = await asyncio.wait_for(
                        link.recv(MAX_FRAME, budget, uid),
                        None if conn.on_close else IDLE_CLIENT_TIMEOUT)
                except LinkForged as exc:
                    log.warning("closing link of uid %d from %s: %s", uid, conn.peer_host, exc)
                    break
                except BadFrame as exc:
                    await self._refuse(link, exc.code, f"bad frame: {exc}" if exc.code !=
                                       "busy" else str(exc))
                    break
                except TimeoutError:
                    break
                if msg is None:
                    break
                t0 = time.perf_counter()
                reply = self.dispatch(msg, uid, gid, conn)
                if asyncio.iscoroutine(reply):
                    reply = await reply
                try:
                    pieces = link.frames(reply)
                except Exception:
                    log.exception("reply to %r could not be encoded", msg.get("op"))
                    pieces = [link.encode(_INTERNAL)]
                for data in pieces:
                    writer.write(data)
                # the reply is made and handed to the socket: what follows is the client's
                # reading (a 10,000-row squeue fills the socket's buffer several times)
                self.request_times.note(msg.get("op"), time.perf_counter() - t0)
                await writer.drain()
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            for cb in conn.on_close:
                try:
                    cb()
                except Exception:
                    log.exception("connection close callback failed")

    def dispatch(self, msg: dict, uid: int, gid: int, conn=None):
        """The reply to one request (a dict), or a coroutine for the few ops that wait.
        Every request is counted and timed for /metrics (muster.controller.api_ops)."""
        t0 = time.perf_counter()
        reply = self._dispatch(msg, uid, gid, conn)
        dt = time.perf_counter() - t0
        op = msg.get("op")
        api_ops.observe_rpc(self, op, dt)
        self.diag.rpc(op, uid, dt, reply)  # sdiag: by type and by user
        return reply

    def _dispatch(self, msg: dict, uid: int, gid: int, conn=None):
        self.stats["rpcs"] += 1
        op = msg.get("op")
        self.passes.note_request(op)  # a change of more than one job drops a plan in flight
        handler = ops.OPS.get(op) if isinstance(op, str) else None
        if handler is None:
            shown = op if isinstance(op, str) and len(op) <= 64 else type(op).__name__
            return {"ok": False, "code": "invalid_request",
                    "error": f"Invalid request: unknown operation {shown!r}"}
        if asyncio.iscoroutinefunction(handler):
            return self._awaited(op, handler(self, msg, uid, gid))
        self.current_conn = conn
        try:
            reply = idempotency.run(self, handler, msg, uid, gid)  # retries: first reply
        except MusterError as exc:
            return _error_reply(exc)
        except Exception:
            log.exception("handler %s failed", op)
            return dict(_INTERNAL)
        finally:
            self.current_conn = None
        if asyncio.iscoroutine(reply):  # the rest of a request naming many jobs (bulk.py)
            return self._awaited(op, reply)
        return _ok_reply(reply)

    async def _awaited(self, op, pending) -> dict:
        """The reply of a handler that waits, or of the slices still to apply of a request
        naming many jobs, with the errors mapped as for any other."""
        try:
            reply = await pending
        except MusterError as exc:
            return _error_reply(exc)
        except Exception:
            log.exception("handler %s failed", op)
            return dict(_INTERNAL)
        return _ok_reply(reply)

    # ---- agents ----------------------------------------------------------------------------
    async def _agent_loop(self, link: Link, claims: dict, key: bytes) -> None:
        """An authenticated agent's link: its first (sealed) frame registers the node its
        proof named; then heartbeats and reports, until the link breaks."""
        name = claims.get("node")
        node = self.state.nodes.get(name) if isinstance(name, str) else None
        try:
            reg = await asyncio.wait_for(link.recv(), HANDSHAKE_TIMEOUT)
        except (TimeoutError, BadFrame, ConnectionError, OSError, asyncio.IncompleteReadError) as exc:
            log.warning("agent %r sent no registration: %s", name, exc or type(exc).__name__)
            return
        try:
            typed: agentmsg.AgentRegister | None = agentmsg.registration(reg)
        except agentmsg.Malformed as exc:
            log.warning("agent %r sent a malformed registration: %s", name, exc)
            typed = None
        if node is None or typed is None or typed.node != name:
            await self._refuse(link, "invalid_nodelist", f"unknown node {name!r}"[:200])
            return
        refusal = agentmsg.incompatible(typed.proto)  # rolling upgrades: one version apart
        if refusal:
            log.warning("refused agent %s: %s", name, refusal)
            await self._refuse(link, "protocol_version", refusal)
            return
        assert isinstance(name, str)  # the node was found by it
        agent = AgentLink(self, name, link, key)
        self.agent_attached(node, agent, typed)
        try:
            while True:
                msg = await link.recv()
                if msg is None:
                    break
                self.queue_agent_message(node, agent, msg, claims["uid"])
        except (BadFrame, ConnectionError, asyncio.IncompleteReadError) as exc:
            log.warning("agent %s link broken: %s", name, exc)
        finally:
            self.agent_detached(node, agent)
            link.close()

    def agent_attached(self, node, agent, reg: agentmsg.AgentRegister | dict) -> None:
        """``agent`` (anything with ``send(msg)`` and ``writer.close()``: an AgentLink, or the
        in-process tests' fake) is now ``node``'s link: it replaces an older one, gets the
        registration reply, the jobs it must kill and what waited in the outbox. ``reg``: the
        typed registration, or its frame as decoded (converted here; the caller checked it)."""
        if not isinstance(reg, agentmsg.AgentRegister):
            reg = agentmsg.registration(reg)
        old = self.agents.get(node.name)
        if old is not None:
            old.writer.close()
        self.agents[node.name] = agent
        reply, kill = self.register_agent(node, reg)
        agent.send(reply)
        if kill:
            agent.send({"op": "kill_list", "jobs": kill})
        for msg in self.outbox.pop(node.name, []):
            agent.send(msg)
        self.request_schedule()

    def agent_detached(self, node, agent) -> None:
        """``agent``'s link is gone (unless a newer link already replaced it): the node is
        not responding; SlurmdTimeout later (check_agents) it is DOWN."""
        if self.agents.get(node.name) is agent:
            del self.agents[node.name]
            node.connected = False
            self.state.event(None, "node_not_responding", "agent disconnected", node=node.name)

    def job_cred(self, node: str, msg: dict, ckey: bytes) -> dict:
        """The job credential for ``msg`` to ``node``, for the job's uid/gid (those of the
        message for launches; the job's for the other ops; none for kill lists)."""
        if msg.get("op") in ("launch", "launch_step", "prolog", "epilog"):
            uid, gid = msg.get("uid"), msg.get("gid")
        else:
            job = self._job_named(msg)
            uid, gid = (job.uid, job.gid) if job is not None else (None, None)
        return auth.mint_job_cred(ckey, msg, node, uid, gid)

    def register_agent(self, node, reg: agentmsg.AgentRegister) -> tuple[dict, list[int]]:
        """Reconcile a (re)registering node; the reply, and the jobs it runs that must die
        (sent as a ``kill_list``, with its job credential)."""
        t = now()
        if node.down:  # the node machine decides whether it returns (ReturnToService)
            self.applier.node(node, events.NodeRegistered(self.cfg.return_to_service), t)
        node.connected = True
        node.registered = True
        node.last_heartbeat = t
        node.boot_time = reg.boot_time
        node.agent_start = reg.agent_start
        node.version, node.arch, node.os = reg.version, reg.arch, reg.os
        running = set(reg.running)
        with self.state.store.transaction():
            for res in reg.finished:
                self.job_ended(node.name, res)
            kill = []
            for rep in reg.steps_finished:
                self.steps.node_report(node.name, msgspec.to_builtins(rep))
            for jid in running:
                job = self.state.jobs.get(jid)
                if job is None or not (job.state == RUNNING or job.completing) or \
                        node.name not in {a.node for a in job.alloc}:
                    kill.append(jid)
            known_steps = {tuple(k[:2]) for k in reg.steps_running}
            for (jid, sid), step in list(self.steps.steps.items()):
                if node.name in step.nodes and (jid, sid) not in known_steps \
                        and node.name not in step.reports and step.start_time < t - 5:
                    self.steps.node_report(node.name, {"job_id": jid, "step_id": sid,
                                                       "tasks": [], "lost": True})
            relaunch = []
            for job in list(self.state.jobs.values()):
                if not job.batch or job.batch_host != node.name or job.job_id in running:
                    continue
                if job.state == RUNNING and not job.launch_confirmed \
                        and not self.prologs.gated(job.job_id):
                    relaunch.append(job)
                elif (job.state == RUNNING or job.completing) and job.launch_confirmed:
                    # the agent does not know a job it had confirmed: its processes are gone
                    self.job_ended(node.name, agentmsg.JobEnded(
                        job_id=job.job_id, run=job.restarts, signal=9, lost=True))
            self.state.event(None, "node_registered", f"{len(running)} jobs running", node=node.name)
        for job in relaunch:
            self.outbox.setdefault(node.name, []).append(self.launch_message(job))
        return {"op": "registered", "ok": True, "time": t, "proto": agentmsg.PROTOCOL_VERSION,
                "slurmd_timeout": self.slurmd_timeout}, kill

    def queue_agent_message(self, node, agent: AgentLink, msg: object, uid: int) -> None:
        """A frame from an agent's link. Job starts and ends (and heartbeats) are handled
        with the others that arrive in the same turn of the event loop, from any agent, in
        one transaction (:meth:`apply_agent_messages`): 1,000 array tasks ending within
        seconds were 2,000 commits. Any other report is handled at once, after the queued
        ones (each agent's reports keep their order)."""
        if not (isinstance(msg, dict) and msg.get("op") in BATCHED_REPORTS):
            self.apply_agent_messages(whole=True)  # every queued one first, in order
            t0 = time.perf_counter()
            self.on_agent_message(node, agent, msg)
            self.diag.agent_message(node.name, uid, msg, time.perf_counter() - t0)
            return
        self._agent_batch.append((node, agent, msg, uid))
        if len(self._agent_batch) == 1:
            asyncio.get_running_loop().call_soon(self.apply_agent_messages)

    def apply_agent_messages(self, whole: bool = False) -> None:
        """The queued agent frames, in arrival order (so in each agent's order), in slices of
        about AGENT_SLICE_S (``whole``: all of them), each in ONE transaction; the rest waits for
        the loop's next turn, after the requests that came meanwhile (before, a burst of
        ends held the loop for the whole batch). The acknowledgements of the end reports
        in a slice leave only after its commit (an agent forgets an end once acknowledged:
        an ack before the commit could lose it in a crash). Nothing else runs during a
        slice: no client request shares its transaction or sees its effects before the
        commit. If one fails, nothing of it is kept and the links of every frame still
        queued are closed: their agents reconnect and report again (as when one message's
        failure ended its link)."""
        batch, self._agent_batch = self._agent_batch, []
        if not batch:
            return
        acks: list = []
        self._acks = acks
        done = 0
        until = None if whole else time.perf_counter() + AGENT_SLICE_S
        try:
            with self.applier.transaction():
                for node, agent, msg, uid in batch:
                    t0 = time.perf_counter()
                    self.on_agent_message(node, agent, msg)
                    t1 = time.perf_counter()
                    self.diag.agent_message(node.name, uid, msg, t1 - t0)
                    done += 1
                    if until is not None and t1 >= until:
                        break
        except Exception:
            log.exception("agent reports not applied; their links are reset")
            batch += self._agent_batch
            self._agent_batch = []
            for _node, agent, _msg, _uid in batch:
                agent.writer.close()
            return
        finally:
            self._acks = None
        for agent, ack in acks:
            agent.send(ack)
        if done < len(batch):  # the rest, still before anything queued since
            self._agent_batch = batch[done:] + self._agent_batch
            asyncio.get_running_loop().call_soon(self.apply_agent_messages)

    def _ack(self, link, msg: dict) -> None:
        """Acknowledge an agent's report: after the commit of the batch it is in (see
        :meth:`apply_agent_messages`), or at once outside one (the in-process tests' calls,
        whose applier transaction has already committed)."""
        if self._acks is not None:
            self._acks.append((link, msg))
        else:
            link.send(msg)

    def on_agent_message(self, node, link: AgentLink, msg: object) -> None:
        """One frame of ``node``'s agent, decoded into its typed message (protocol.agentmsg)
        first: one that does not fit (unknown op, missing field, wrong type) is logged and
        dropped, never acted on. Any frame proves the agent alive. Subsystems that keep the
        reports (steps, usage, prologs) get the validated message as plain data."""
        node.last_heartbeat = now()
        try:
            m = agentmsg.from_agent(msg)
        except agentmsg.Malformed as exc:
            op = msg.get("op") if isinstance(msg, dict) else None
            shown = op if isinstance(op, str) and len(op) <= 64 else type(op).__name__
            log.warning("agent %s sent a malformed %r message: %s", node.name, shown, exc)
            return
        if isinstance(m, agentmsg.Heartbeat):
            node.cpu_load, node.free_mem = m.load, m.free_mem
        elif isinstance(m, agentmsg.JobStarted):
            job = self.state.jobs.get(m.job_id)
            if job is not None and job.restarts == m.run and not job.launch_confirmed:
                job.launch_confirmed = True
                self.state.save(job)
        elif isinstance(m, agentmsg.JobEnded):
            self.job_ended(node.name, m)
            self._ack(link, {"op": "ack", "job_id": m.job_id, "run": m.run})
        elif isinstance(m, agentmsg.Health):
            self.on_health(node, m)
        elif isinstance(m, agentmsg.StepEnded):
            self.steps.node_report(node.name, msgspec.to_builtins(m))
            self._ack(link, {"op": "ack_step", "job_id": m.job_id, "step_id": m.step_id,
                             "run": m.run})
        elif isinstance(m, agentmsg.StepUsage):
            self.usage.sample(node.name, msgspec.to_builtins(m))
        else:  # PrologDone, EpilogDone
            self.prologs.on_report(node, link, msgspec.to_builtins(m))

    def on_health(self, node, msg: agentmsg.Health) -> None:
        """HealthCheckProgram (or GPU health) on the node failed: drain it with the message;
        a later passing check undoes a drain that the health check itself set."""
        text = (msg.message or "health check failed")[:200]
        if not msg.ok and not node.drain:
            self.applier.node(node, events.NodeDrain(text, "health"), now())
        elif msg.ok and node.drain and node.reason_user == "health" and not node.down:
            self.applier.node(node, events.NodeResume(), now())  # undo its own drain only

    def enforce_interactive_limits(self, t: int) -> None:
        """Batch jobs are timed by their supervisors; allocations without a batch script
        (srun, salloc) are timed here."""
        for job in list(self.state.jobs.values()):
            if (not job.batch and job.state == RUNNING and not job.completing
                    and job.end_time is not None and t >= job.end_time):
                self.applier.job(job, events.Timeout(), t)

    def check_agents(self, t: int) -> None:
        """A node whose agent has been silent for SlurmdTimeout is DOWN ("Not responding"):
        its jobs end as NODE_FAIL, and batch jobs that may requeue go back to the queue."""
        timeout = self.slurmd_timeout
        for node in self.state.nodes.values():
            silent = node.last_heartbeat is not None and t - node.last_heartbeat > timeout
            if node.connected and silent:
                link = self.agents.pop(node.name, None)
                if link:
                    link.writer.close()
                node.connected = False
            if not node.connected and silent and not node.down and node.registered:
                self.node_failed(node, "Not responding", user="slurm", auto=True)

    def node_failed(self, node, reason: str, user: str, auto: bool = False) -> None:
        """The node is DOWN (``NodeDown``, node machine): its jobs fail in the same commit."""
        t = now()
        with self.applier.transaction():  # one commit; kills and wake-ups leave after it
            self.applier.node(node, events.NodeDown(reason, user, auto), t)
        self.request_schedule()

    def fail_jobs_on(self, node, t: int) -> None:
        """``FailJobs``: the jobs still running (or completing) on a node that went down."""
        for jid in sorted(node.jobs):
            job = self.state.jobs.get(jid)
            if job is not None and (job.state == RUNNING or job.completing):
                self.job_node_failed(job, node.name, t)

    def job_node_failed(self, job, node_name: str, t: int) -> None:
        """One of the job's nodes died: requeue (batch, requeue allowed) or NODE_FAIL, as the
        job machine decides (``NodeFailed``). Its steps end first, as lost: their records and
        the end of an allocation being torn down see the job as it was."""
        self.steps.forget_job(job.job_id)
        self.usage.forget(job.job_id)
        try:
            self.applier.job(job, events.NodeFailed(node_name), t)
        except jobfsm.Refused:
            pass  # its last step's end just finished it

    def send_to_node(self, node: str, msg: dict) -> None:
        msg = self.prologs.decorate(node, msg)
        link = self.agents.get(node)
        if link is None or not link.send(msg):
            self.outbox.setdefault(node, []).append(msg)

    # ---- job launch and end ------------------------------------------------------------------
    def launch_message(self, job) -> dict:
        from muster.controller.jobenv import batch_env
        stored = self.state.store.get_script(job.script_id or job.job_id)
        script, env = stored if stored else ("#!/bin/sh\nexit 1\n", {})
        ident = identity(job.uid, job.gid)
        login = {"HOME": ident["home"], "USER": job.user, "LOGNAME": job.user,
                 "SHELL": ident["shell"], "PATH": "/usr/local/bin:/usr/bin:/bin"}
        return {
            "op": "launch", "job_id": job.job_id, "run": job.restarts, "uid": job.uid,
            "gid": job.gid, "groups": list(job.groups), "user": job.user, "name": job.name,
            "work_dir": job.work_dir, "script": script, "argv": list(job.argv),
            "env": batch_env(job, env, cluster_name=self.cfg.cluster_name,
                             conf_path=self.cfg.path, login=login),
            "stdout": job.std_out, "stderr": job.std_err, "stdin": job.std_in,
            "open_mode": job.open_mode or ("append" if self.cfg.job_file_append else "truncate"),
            "time_limit_s": None if job.time_limit is None else 60 * job.time_limit,
            "start_time": job.start_time, "kill_wait": max(1, self.cfg.kill_wait),
            "umask": job.umask, "signal": job.signal_spec,
            "array_job_id": job.array_job_id, "array_task_id": job.array_task_id,
            "node_alloc": node_alloc(job, job.batch_host),
        }

    def launch(self, job) -> None:
        self.send_to_node(job.batch_host, self.launch_message(job))

    def _job_named(self, msg: dict) -> Job | None:
        """The job a node's message names by ``job_id`` (None: no such job, or not an id)."""
        jid = msg.get("job_id")
        return self.state.jobs.get(jid) if isinstance(jid, int) else None

    def job_ended(self, node_name: str, res: agentmsg.JobEnded) -> None:
        """The agent's end report (typed, so its fields are trusted to be of their types):
        matched to the job here, decided by the job machine (``Ended``), committed and acted
        on by the applier."""
        crash_point("before_end_commit")  # the agent reported an end; nothing committed yet
        job = self.state.jobs.get(res.job_id)
        if job is None or job.batch_host != node_name or job.restarts != res.run:
            return  # unknown, or a report of an older run we already closed
        if job.batch and not (job.state == RUNNING or job.completing):
            return  # duplicate report
        steps_running = any(s.job_id == job.job_id for s in self.steps.steps.values())
        event = events.Ended(
            node=node_name, exit_code=res.exit_code, signal=res.signal, timed_out=res.timed_out,
            end_time=res.end_time, launch_failed=res.launch_failed, oom=bool(res.oom_kills),
            lost=res.lost, launch_error=res.launch_error, usage=res.usage,
            steps_running=steps_running)
        try:
            self.applier.job(job, event, now())
        except jobfsm.Refused:
            pass  # an allocation's end report before it is being torn down

