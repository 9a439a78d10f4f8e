"""musterd: the node agent.

One agent per node. It keeps one TCP connection to the controller (opened by the agent, from
the node's own address), over which it registers, heartbeats and reports job ends; the
controller sends launch/terminate/signal messages back.

Trust: the link starts with the linkauth handshake (muster.common.netio.initiate). Until
the controller has proved it holds the cluster key the agent sends it nothing but a hello
(a nonce, its role, key ids) and reads nothing but the proof: a process squatting the
controller's port while it is down gets no registration, no job list, and runs nothing. Every
later frame is sealed (a forged, replayed or reordered one ends the link), and every message
that makes the agent run, signal or kill something must also carry a job credential for this
node and the job's uid/gid, not expired (muster.common.auth.verify_job_cred).

Jobs are run by per-job supervisors (muster.agent.supervisor), so they survive an agent
restart and keep running while the controller is away. Reports of ended jobs stay in the
spool until the controller acknowledges them, so none is lost across disconnects or crashes:
on (re)connect the agent lists the jobs still running and the ended ones not yet
acknowledged, and the controller reconciles (it tells the agent which jobs to kill).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import platform
import random
import shutil
import signal
import socket
import time
from typing import Any

from muster import __version__
from muster.agent.relay import Relay
from muster.agent.relay import socket_path as relay_socket
from muster.agent import acctgather, confine, ocijobs
from muster.agent.prolog import NodeScripts
from muster.agent.stepd import run_stepd
from muster.agent.supervisor import run_supervisor
from muster.common import auth, securefs
from muster.common.netio import STREAM_LIMIT, BadFrame, Link, LinkForged, initiate
from muster.protocol import agentmsg

log = logging.getLogger("musterd")

HEARTBEAT_S = 5.0
# links one emulating process opens at once (run_many): under the controller's MAX_HANDSHAKES,
# so 1,024 nodes starting together queue here instead of being evicted there and retrying
CONNECT_BURST = 64
REGISTER_TIMEOUT = 60.0  # the controller reconciles a registration (a commit) before answering
TRASH_QUIET_S = 1.0  # retired spool directories are deleted after this long without a launch
TRASH_MAX = 1000  # ... or once this many wait (a node that never goes quiet)
ZYGOTE: socket.socket | None = None  # channel to the zygote (muster.agent.zygote), set by the entry point


def announced_protocol() -> int:
    """The protocol version this agent announces: PROTOCOL_VERSION, or ``$MUSTER_AGENT_PROTO``
    (a test hook: an agent posing as one release older or newer, to show that a rolling
    upgrade works, and that a peer two versions apart is refused)."""
    raw = os.environ.get("MUSTER_AGENT_PROTO")
    try:
        return int(raw) if raw else agentmsg.PROTOCOL_VERSION
    except ValueError:
        return agentmsg.PROTOCOL_VERSION


_SHARED: dict[str, tuple[tuple, float, Any]] = {}
SHARED_LOAD_S = 10.0


def shared_load(path: str):
    """slurm.conf for the nodes of one emulating process (run_many): the controller tells
    every node to reconfigure at once, and 1,024 parses of a 1,024-node file kept the process
    from heartbeating for minutes. One parse is shared while slurm.conf, gres.conf and
    cgroup.conf beside it are unchanged, for SHARED_LOAD_S (an edit to an Include'd file alone
    is seen by a reconfigure after that)."""
    from muster.config import load
    d = os.path.dirname(path)
    stamp = tuple(_stamp(os.path.join(d, f)) for f in (os.path.basename(path), "gres.conf",
                                                          "cgroup.conf"))
    hit = _SHARED.get(path)
    if hit is not None and hit[0] == stamp and time.monotonic() - hit[1] < SHARED_LOAD_S:
        return hit[2]
    cfg = load(path)
    _SHARED.clear()
    _SHARED[path] = (stamp, time.monotonic(), cfg)
    return cfg


def _stamp(path: str) -> tuple:
    try:
        st = os.stat(path)
    except OSError:
        return ()
    return (st.st_ino, st.st_size, st.st_mtime_ns)


async def run_many(agents: list[Agent]) -> None:
    """Emulation mode: several nodes served by one process, one connection per node, each
    from its own node address. Nodes stay independent (own spool, own supervisors)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop.set)
    gate = asyncio.Semaphore(CONNECT_BURST)
    for a in agents:
        a.connect_gate = gate
    await asyncio.gather(*(a.run(stop) for a in agents))


class Agent:
    def __init__(self, cfg, node_name: str):
        self.cfg = cfg
        self.node = cfg.nodes[node_name]
        self.name = node_name
        self.keys = auth.load_keys(cfg.key_path)  # the key, then muster.key.old (rotation)
        self.cred_keys = [auth.cred_key(k) for k in self.keys]
        spool_t = cfg.slurmd_spool_dir or os.path.join(cfg.state_save_location, "spool", "%n")
        self.spool = cfg.node_path(spool_t, node_name) if hasattr(cfg, "node_path") else \
            spool_t.replace("%n", node_name)
        # the spool and its parent are the agent's own: a directory someone else made (or may
        # write) is refused, never adopted (muster.common.securefs)
        securefs.ensure_private_dir(os.path.dirname(self.spool), "SlurmdSpoolDir's parent")
        securefs.ensure_private_dir(self.spool, "SlurmdSpoolDir", mode=0o711)
        self.trash = os.path.join(self.spool, ".trash")
        os.makedirs(self.trash, mode=0o700, exist_ok=True)
        self._purging = False
        self._trashed = 0  # directories put in the trash since the last purge began
        self._last_launch = 0.0  # monotonic time of the last launch (the trash waits for quiet)
        self.retired = False  # removed from slurm.conf and refused by the controller: stop
        self._hc: asyncio.Task | None = None
        self.heartbeat_s = HEARTBEAT_S
        self.jobs: dict[tuple[int, int], dict] = {}   # (job_id, run) -> {"pid", "pidfd", "dir"}
        self.unacked: dict[tuple[int, int], dict] = {}  # ended, not yet acknowledged
        self.steps: dict[tuple[int, int, int], dict] = {}  # (job, step, run) -> stepd process
        self.unacked_steps: dict[tuple[int, int, int], dict] = {}
        # named containers to remove at the end (kept across restarts)
        self.oci_jobs = ocijobs.ContainerJobs(node_name, os.path.join(self.spool,
                                                                      "container-jobs.json"))
        self.link: Link | None = None  # set once the controller has proved itself
        # emulation (run_many): the nodes of one process take turns to open their links
        self.connect_gate: asyncio.Semaphore | None = None
        # usage accounting (JobAcctGatherFrequency): the spec every launch carries, and what
        # of the supervisors' live samples has been sent on
        self.acct = {"freq": acctgather.parse_frequency(cfg.job_acct_gather_frequency)} \
            if acctgather.enabled(cfg) else None
        self.usage = acctgather.UsageForwarder()
        # cgroups of this node's jobs (muster.agent.confine); None: unconfined, logged why
        confine.protect_daemon()
        self.confine = confine.AgentConfinement.for_node(cfg, node_name, self.spool)
        self.start_time = int(time.time())
        self._stop = asyncio.Event()
        # node Prolog/Epilog and the launches waiting for the prolog (muster.agent.prolog)
        self.scripts = NodeScripts(cfg, node_name, self._send, self._job_here)

    # ---- spool --------------------------------------------------------------------------
    def _discard(self, d: str) -> None:
        """Retire an acknowledged job's spool directory: one rename now (it leaves the spool
        scan at once); the trash is emptied in a worker thread, off the event loop, once the
        node is quiet (:meth:`_purge_trash`)."""
        try:
            os.rename(d, os.path.join(self.trash, os.path.basename(d)))
        except OSError:
            return
        self._trashed += 1
        if not self._purging:
            self._purging = True
            asyncio.get_running_loop().call_later(TRASH_QUIET_S, self._purge_trash)

    def _purge_trash(self) -> None:
        """Empty the trash when no job was launched here for TRASH_QUIET_S (or once it holds
        TRASH_MAX directories): deleting competes with launching for the CPU and the file
        system, and on ext4 without a journal every inode freed within the last minute (or
        more) is skipped, one by one, by each new file's allocation in that block group
        (measured: a burst of 1,000 array tasks spent a fifth of its CPU time skipping)."""
        loop = asyncio.get_running_loop()
        busy = time.monotonic() - self._last_launch < TRASH_QUIET_S
        if busy and self._trashed < TRASH_MAX:
            loop.call_later(TRASH_QUIET_S, self._purge_trash)
            return
        self._trashed = 0

        def purge():
            for entry in os.listdir(self.trash):
                shutil.rmtree(os.path.join(self.trash, entry), ignore_errors=True)
        fut = loop.run_in_executor(None, purge)
        fut.add_done_callback(lambda _f: setattr(self, "_purging", False))

    def _dir(self, job_id: int, run: int) -> str:
        return os.path.join(self.spool, f"job{job_id}.{run}")

    def recover(self) -> None:
        """After a restart: find supervisors still running and statuses not yet reported."""
        for entry in os.listdir(self.spool):
            if entry.startswith("step"):
                self._recover_step(entry)
                continue
            if not entry.startswith("job"):
                continue
            try:
                job_id, run = (int(x) for x in entry[3:].split("."))
            except ValueError:
                continue
            d = os.path.join(self.spool, entry)
            status = _read_json(os.path.join(d, "status.json"))
            if status is not None:
                self.unacked[(job_id, run)] = status
                continue
            try:
                with open(os.path.join(d, "super.pid")) as fh:
                    pid = int(fh.read())
                pidfd = os.pidfd_open(pid)
            except (OSError, ValueError):
                # the supervisor is gone without a status: the job died with it
                self.unacked[(job_id, run)] = {"job_id": job_id, "run": run, "exit_code": 0,
                                               "signal": 9, "lost": True,
                                               "end_time": int(time.time())}
                _write_json(os.path.join(d, "status.json"), self.unacked[(job_id, run)])
                continue
            self._follow(job_id, run, pid, pidfd, child=False)
            self._adopt(job_id, d)
        running = self._running_jobs()
        for job_id, _run in self.unacked:  # batch scripts that ended while no agent ran
            self.oci_jobs.ended(job_id, busy=job_id in running)
        if self.confine is not None:
            self.confine.remove_stale(running)

    def _adopt(self, job_id: int, d: str) -> None:
        """A job still running after a restart keeps its cgroup and CPU slots."""
        if self.confine is not None:
            self.confine.adopt(job_id, (_read_json(os.path.join(d, "launch.json")) or {})
                               .get("confine"))

    def _running_jobs(self) -> set[int]:
        return {j for j, _ in self.jobs} | {k[0] for k in self.steps}

    def _job_maybe_done(self, job_id: int, report) -> None:
        """Nothing of the job runs here any more (no supervisor, no step daemon): whatever is
        left in its cgroup is killed and the cgroup removed, before its end is reported
        (``report()``: now, or on the loop once confine's worker thread has done it)."""
        fut = None
        if job_id not in self._running_jobs():
            self.oci_jobs.idle(job_id)
        if self.confine is not None and job_id not in self._running_jobs():
            fut = self.confine.job_done(job_id)
        if fut is None:
            report()
            return
        loop = asyncio.get_running_loop()

        def done(_f):
            try:
                loop.call_soon_threadsafe(report)
            except RuntimeError:
                pass  # the loop is closed: the agent stopped; the next one reports it
        fut.add_done_callback(done)

    def _recover_step(self, entry: str) -> None:
        try:
            job_id, step_id, run = (int(x) for x in entry[4:].split("."))
        except ValueError:
            return
        d = os.path.join(self.spool, entry)
        key = (job_id, step_id, run)
        status = _read_json(os.path.join(d, "status.json"))
        if status is None:
            try:
                with open(os.path.join(d, "super.pid")) as fh:
                    pid = int(fh.read())
                pidfd = os.pidfd_open(pid)
            except (OSError, ValueError):
                launch = _read_json(os.path.join(d, "launch.json")) or {}
                status = {"job_id": job_id, "step_id": step_id, "run": run, "node": self.name,
                          "tasks": [{"task": t, "exit_code": 0, "signal": 9}
                                    for t in launch.get("tasks", [])],
                          "end_time": int(time.time()), "lost": True}
                _write_json(os.path.join(d, "status.json"), status)
            else:
                self.steps[key] = {"pid": pid, "pidfd": pidfd, "child": False}
                asyncio.get_running_loop().add_reader(pidfd, self._stepd_exited, key)
                self._adopt(job_id, d)
                return
        self.unacked_steps[key] = status

    def _follow(self, job_id: int, run: int, pid: int, pidfd: int, child: bool,
                pooled: bool = False) -> None:
        """Follow a batch supervisor through ``pidfd``, which becomes readable at the job's
        end: a pidfd (a supervisor we forked, or one adopted after a restart: it exits at
        the end), or the end pipe of a supervisor from the zygote's pool (``pooled``)."""
        self.jobs[(job_id, run)] = {"pid": pid, "pidfd": pidfd, "child": child,
                                    "pooled": pooled}
        asyncio.get_running_loop().add_reader(pidfd, self._supervisor_exited, job_id, run)

    def _supervisor_exited(self, job_id: int, run: int) -> None:
        info = self.jobs.pop((job_id, run), None)
        if info is None:
            return
        loop = asyncio.get_running_loop()
        loop.remove_reader(info["pidfd"])
        os.close(info["pidfd"])
        if info.get("pooled"):
            _zygote_free(info["pid"])  # gone from self.jobs: no signal of ours reaches it now
        if info["child"]:
            try:
                os.waitpid(info["pid"], 0)
            except ChildProcessError:
                pass
        d = self._dir(job_id, run)
        status = _read_json(os.path.join(d, "status.json"))
        if status is None:
            err = ""
            try:
                with open(os.path.join(d, "supervisor.err")) as fh:
                    err = fh.read()[-2000:]
            except OSError:
                pass
            log.error("job %s: supervisor ended without status %s", job_id, err)
            status = _launch_failure(job_id, run)
            _write_json(os.path.join(d, "status.json"), status)
        self.unacked[(job_id, run)] = status
        self.oci_jobs.ended(job_id, busy=True)  # the batch script ended: so did the job
        self._job_maybe_done(job_id, lambda: self._send({"op": "job_ended", **status}))

    # ---- messages from the controller ---------------------------------------------------
    def on_message(self, msg: dict) -> None:
        op = msg.get("op")
        if op in auth.CRED_OPS and not self._cred_ok(msg):
            return
        if op == "launch":
            self.launch(msg)
        elif op == "terminate" and isinstance(msg.get("step_id"), int):
            # scancel J.S: that step alone (the step id is in the credential's subject)
            self.terminate_step((msg["job_id"], msg["step_id"], msg.get("run", 0)),
                                msg.get("why", "cancel"))
        elif op == "terminate":
            self.terminate(msg["job_id"], msg.get("run", 0), msg.get("why", "cancel"),
                           steps_only=msg.get("scope") == "steps")
        elif op == "signal":
            if _signum(msg.get("signal")):
                self.signal(msg["job_id"], msg.get("run", 0), msg["signal"],
                            msg.get("scope", "steps"), cont=msg.get("cont") is True)
        elif op == "update_limit":
            d = self._dir(msg["job_id"], msg.get("run", 0))
            if os.path.isdir(d):
                _write_json(os.path.join(d, "limit.json"), {"time_limit_s": msg.get("time_limit_s")})
                self._poke(msg["job_id"], msg.get("run", 0), signal.SIGUSR2)
        elif op == "ack":
            key: tuple = (msg.get("job_id"), msg.get("run", 0))  # as sent: may match nothing
            if self.unacked.pop(key, None) is not None:
                self._discard(self._dir(*key))
        elif op == "launch_step":
            self.launch_step(msg)
        elif op == "signal_step":
            if _signum(msg.get("signal")):
                self.signal_step((msg["job_id"], msg["step_id"], msg.get("run", 0)), [msg["signal"]])
        elif op == "ack_step":
            skey: tuple = (msg.get("job_id"), msg.get("step_id"), msg.get("run", 0))
            if self.unacked_steps.pop(skey, None) is not None:
                self._discard(self._step_dir(*skey))
        elif op == "kill_list":
            for jid in msg.get("jobs", []):
                self._kill_unknown(jid)
        elif op == "prolog":
            self.scripts.on_prolog_request(msg)
        elif op == "epilog":
            self.job_over(msg)
        elif op == "ack_script":
            self.scripts.ack(msg)
        elif op == "reconfigure":
            self.reconfigure()
        else:
            log.warning("unknown message %r", op)

    def job_over(self, msg: dict) -> None:
        """The controller's end-of-job message (op ``epilog``, muster.controller.prologs):
        every node of the allocation gets it when the run's resources are released, Epilog
        or not. The job is over on this node: its named containers go once nothing of it
        runs here, and its prolog is forgotten and its Epilog run (muster.agent.prolog).
        Idempotent: a repeat, or one after a ``terminate``, changes nothing more. The rest
        of a job's state here ends with its processes (cgroup, CPU slots) or with the
        controller's acknowledgements (spool directories), on every node alike."""
        self.oci_jobs.ended(msg["job_id"], busy=msg["job_id"] in self._running_jobs())
        self.scripts.on_epilog_request(msg)

    def reconfigure(self) -> bool:
        """``scontrol reconfigure``: re-read slurm.conf, gres.conf and cgroup.conf for the
        jobs that start from now on (running jobs keep their cgroups and scripts). False
        (logged, old configuration kept) when the files do not load or no longer name this
        node (the controller removes it once its jobs are gone)."""
        from muster.config import load
        try:
            cfg = load(self.cfg.path) if self.connect_gate is None else shared_load(self.cfg.path)
        except Exception as exc:  # noqa: BLE001 - the controller refused it too
            log.error("%s: reconfigure: %s", self.name, getattr(exc, "message", exc))
            return False
        if self.name not in cfg.nodes:
            log.info("%s: no longer in %s; serving the jobs still here", self.name, cfg.path)
            return False
        health = (self.cfg.health_check_program, self.cfg.health_check_interval)
        self.cfg, self.node = cfg, cfg.nodes[self.name]
        self.acct = {"freq": acctgather.parse_frequency(cfg.job_acct_gather_frequency)} \
            if acctgather.enabled(cfg) else None
        self.scripts.configure(cfg)
        if self.confine is not None:
            self.confine.reconfigure(cfg)
        if health != (cfg.health_check_program, cfg.health_check_interval):
            self._health_check_changed()
        log.info("%s: reconfigured from %s", self.name, cfg.path)
        return True

    def _health_check_changed(self) -> None:
        """HealthCheckProgram/Interval as configured now: the loop is restarted with the new
        ones (its first run at once), or stopped when none is configured any more."""
        if self._hc is not None:
            self._hc.cancel()
            self._hc = None
        self._start_health_check()

    def _start_health_check(self) -> None:
        if self.cfg.health_check_program and self.cfg.health_check_interval > 0 and \
                self._hc is None and self.link is not None:
            self._hc = asyncio.create_task(self._health_loop())

    def removed(self) -> bool:
        """Is this node gone from slurm.conf (as it reads now)? Asked when the controller
        refuses the registration: a removed node's agent stops instead of retrying."""
        from muster.config import load
        try:
            return self.name not in load(self.cfg.path).nodes
        except Exception:  # noqa: BLE001 - a file being edited: keep trying
            return False

    def _cred_ok(self, msg: dict) -> bool:
        """Does the message carry a valid job credential for this node and the job's user?
        A refused launch is reported as a launch failure (unless that run is already here), so
        the job does not hang; a refused step launch likewise."""
        op = msg["op"]
        if op in ("launch", "launch_step", "prolog", "epilog"):
            ids: tuple | None = (msg.get("uid"), msg.get("gid"))
        else:
            ids = self._job_ids(msg)
        try:
            auth.verify_job_cred(self.cred_keys, msg, self.name, ids)
            return True
        except auth.CredentialError as exc:
            log.warning("refused %s of job %s on %s: %s", op, msg.get("job_id"), self.name, exc)
        job_id, run = msg.get("job_id"), msg.get("run", 0)
        if op == "launch" and (job_id, run) not in self.jobs and \
                (job_id, run) not in self.unacked and isinstance(job_id, int):
            self._send({"op": "job_ended", **_launch_failure(job_id, run)})
        elif op == "launch_step" and isinstance(msg.get("tasks"), list):
            key = (job_id, msg.get("step_id"), run)
            if key not in self.steps and key not in self.unacked_steps:
                self._send({"op": "step_ended", **_step_failure(key, self.name, msg["tasks"])})
        return False

    def _job_ids(self, msg: dict) -> tuple | None:
        """(uid, gid) of the job a terminate/signal/update names, from its launch on this
        node (batch or step); None when this node never ran it (nothing to act on)."""
        if msg.get("op") == "kill_list":
            return None
        job_id: Any = msg.get("job_id")  # as sent: a job never run here matches no directory
        run = msg.get("run", 0)
        dirs = [self._dir(job_id, run)] + [self._step_dir(*k) for k in self.steps
                                            if k[0] == job_id]
        for d in dirs:
            launch = _read_json(os.path.join(d, "launch.json"))
            if launch is not None:
                return launch.get("uid"), launch.get("gid")
        return None

    def launch(self, L: dict) -> None:
        self._last_launch = time.monotonic()
        key = (L["job_id"], L.get("run", 0))
        d = self._dir(*key)
        if key in self.jobs or key in self.unacked or os.path.exists(d):
            self._send({"op": "job_started", "job_id": key[0], "run": key[1]})
            return  # duplicate launch (controller restarted before our confirmation)
        if self.scripts.defer(self.scripts.prepare(L), self.launch):
            return  # after the node's Prolog (muster.agent.prolog)
        os.makedirs(d, mode=0o711)
        os.chmod(d, 0o711)
        script = os.path.join(d, "script")
        fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
        with os.fdopen(fd, "w") as fh:
            fh.write(L["script"])
        if os.getuid() == 0:
            os.chown(script, L["uid"], L["gid"])
        L["acct"] = self.acct
        L["conf_dir"] = os.path.dirname(self.cfg.path)  # oci.conf's, for container tasks
        self.oci_jobs.note(L)
        reason = self._confine(L)
        if reason is not None:
            status = {**_launch_failure(*key), "launch_error": reason}
            _write_json(os.path.join(d, "status.json"), status)
            self.unacked[key] = status
            self._send({"op": "job_ended", **status})
            return
        _write_json(os.path.join(d, "launch.json"), {k: v for k, v in L.items() if k != "script"})
        pid, pidfd, child = self._spawn("batch", d, L)
        self._follow(key[0], key[1], pid, pidfd, child=child, pooled=not child)
        self._send({"op": "job_started", "job_id": key[0], "run": key[1]})

    def _confine(self, L: dict) -> str | None:
        """Put the job's cgroup spec into the launch (``L["confine"]``, None when unconfined);
        the reason, logged, when its cgroup cannot be made: that launch fails (never hangs)."""
        L["confine"] = None
        if self.confine is None:
            return None
        try:
            L["confine"] = self.confine.prepare(L)
            return None
        except confine.ConfineError as exc:
            log.error("%s: job %s cannot start: %s", self.name, L["job_id"], exc)
            return f"{self.name}: {exc}"

    def _job_here(self, job_id: int) -> bool:
        """Does a batch supervisor or step daemon of the job run on this node?"""
        return any(k[0] == job_id for k in self.jobs) or any(k[0] == job_id for k in self.steps)

    def _spawn(self, kind: str, spool: str, L: dict) -> tuple[int, int, bool]:
        """Start a supervisor (batch) or step daemon; returns (pid, fd, is_our_child), ``fd``
        readable when it is done: a pidfd, or, for a batch supervisor of the zygote's pool,
        its job's end pipe. Through the zygote when there is one (cheap fork of a small
        process, or a pooled supervisor: no fork at all), else by forking ourselves."""
        global ZYGOTE
        if ZYGOTE is not None:
            try:
                ZYGOTE.send(json.dumps({"kind": kind, "spool": spool, "node": self.name}).encode())
                data, fds, _flags, _addr = socket.recv_fds(ZYGOTE, 65536, 1)
                reply = json.loads(data or b"{}")
                if "pid" in reply and fds:
                    return reply["pid"], fds[0], False
                for fd in fds:
                    os.close(fd)
                log.error("zygote: %s", reply.get("error"))
            except (OSError, ValueError) as exc:
                log.error("zygote unusable (%s): forking directly from now on", exc)
                ZYGOTE = None
        pid = os.fork()
        if pid == 0:
            if kind == "batch":
                run_supervisor(spool, L, self.name)  # never returns
            run_stepd(spool, L, self.name)
        return pid, os.pidfd_open(pid), True

    def _poke(self, job_id: int, run: int, sig: int) -> None:
        info = self.jobs.get((job_id, run))
        if info:
            try:
                os.kill(info["pid"], sig)
            except ProcessLookupError:
                pass

    def terminate(self, job_id: int, run: int, why: str, steps_only: bool = False) -> None:
        """End the job's processes on this node: its steps, then (unless ``steps_only``: the
        controller ending the steps of a batch job at its time limit, which the supervisor
        enforces itself) the batch job."""
        if not steps_only:
            self.scripts.cancel(job_id, run)  # launches still waiting for the prolog
            self.oci_jobs.ended(job_id, busy=job_id in self._running_jobs())
        for key in [k for k in self.steps if k[0] == job_id and k[2] == run]:
            self.terminate_step(key, why)
        if steps_only:
            return
        if (job_id, run) not in self.jobs and any(k[0] == job_id for k in self.steps):
            return  # an interactive allocation: its steps are all there is
        d = self._dir(job_id, run)
        if (job_id, run) not in self.jobs:
            if (job_id, run) in self.unacked:
                self._send({"op": "job_ended", **self.unacked[(job_id, run)]})
            else:
                # never launched here (or already cleaned): report so resources are released
                self._send({"op": "job_ended", "job_id": job_id, "run": run, "exit_code": 0,
                            "signal": 0, "end_time": int(time.time())})
            return
        with open(os.path.join(d, "terminate"), "w") as fh:
            fh.write(why)
        self._poke(job_id, run, signal.SIGTERM)

    def signal(self, job_id: int, run: int, sig: int, scope: str, cont: bool = False) -> None:
        """Deliver ``sig`` (after SIGCONT when ``cont``) to what of the job runs here, by
        ``scope`` (Slurm 23.11's scancel and --signal; controller.steps.StepManager.signal_job):
        ``steps``: the tasks of every step of this run, never the batch shell; ``batch``: the
        batch shell's own pid, not its children; ``full`` (and ``all``): the batch shell's
        process group (the shell, srun and whatever else it started) and every step."""
        sigs = [signal.SIGCONT, sig] if cont else [sig]
        if scope in ("batch", "full", "all"):
            self._signal_batch(job_id, run, sigs, group=scope != "batch")
        if scope in ("steps", "full", "all"):
            for key in [k for k in self.steps if k[0] == job_id and k[2] == run]:
                self.signal_step(key, sigs)

    def _signal_batch(self, job_id: int, run: int, sigs: list[int], group: bool) -> None:
        pid = _read_int(os.path.join(self._dir(job_id, run), "job.pid"))
        if pid is None or (job_id, run) not in self.jobs:
            return  # no batch shell here (or it has ended: its pid may not be ours to signal)
        for sig in sigs:
            try:
                if group:
                    os.killpg(pid, sig)
                else:
                    os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    # ---- job steps -------------------------------------------------------------------------
    def _step_dir(self, job_id: int, step_id: int, run: int) -> str:
        return os.path.join(self.spool, f"step{job_id}.{step_id}.{run}")

    def launch_step(self, L: dict) -> None:
        self._last_launch = time.monotonic()
        key = (L["job_id"], L["step_id"], L.get("run", 0))
        d = self._step_dir(*key)
        if key in self.steps or key in self.unacked_steps or os.path.exists(d):
            return
        if self.scripts.defer(self.scripts.prepare(L), self.launch_step, lambda: self._send(
                {"op": "step_ended", **_step_failure(key, self.name, L["tasks"])})):
            return  # after the node's Prolog; refused when it failed
        os.makedirs(d, mode=0o711)
        L["acct"] = self.acct
        L["conf_dir"] = os.path.dirname(self.cfg.path)  # oci.conf's, for container tasks
        self.oci_jobs.note(L)
        reason = self._confine(L)
        if reason is not None:
            status = {**_step_failure(key, self.name, L["tasks"]), "launch_error": reason}
            _write_json(os.path.join(d, "status.json"), status)
            self.unacked_steps[key] = status
            self._send({"op": "step_ended", **status})
            return
        _write_json(os.path.join(d, "launch.json"), L)
        pid, pidfd, child = self._spawn("step", d, L)
        self.steps[key] = {"pid": pid, "pidfd": pidfd, "child": child}
        asyncio.get_running_loop().add_reader(pidfd, self._stepd_exited, key)

    def _stepd_exited(self, key) -> None:
        info = self.steps.pop(key, None)
        if info is None:
            return
        asyncio.get_running_loop().remove_reader(info["pidfd"])
        os.close(info["pidfd"])
        if info["child"]:
            try:
                os.waitpid(info["pid"], 0)
            except ChildProcessError:
                pass
        d = self._step_dir(*key)
        status = _read_json(os.path.join(d, "status.json"))
        if status is None:
            launch = _read_json(os.path.join(d, "launch.json")) or {}
            status = _step_failure(key, self.name, launch.get("tasks", []))
            _write_json(os.path.join(d, "status.json"), status)
        self.unacked_steps[key] = status
        self._job_maybe_done(key[0], lambda: self._send({"op": "step_ended", **status}))

    def terminate_step(self, key, why: str) -> None:
        if key not in self.steps:
            return
        with open(os.path.join(self._step_dir(*key), "terminate"), "w") as fh:
            fh.write(why)
        self._poke_step(key, signal.SIGTERM)

    def signal_step(self, key, sigs: list[int]) -> None:
        """Have a step's daemon deliver ``sigs`` to each of its tasks' process groups.

        The step daemon is root's fork, not a task: a signal sent to it would be taken for
        itself (SIGUSR1 would kill it). So the numbers are appended to ``signals`` in the
        step's spool (one per line; the daemon reads on from where it stopped, so none is lost
        or repeated, even across an agent restart) and SIGUSR2 wakes the daemon — only once
        ``super.pid`` exists, which the daemon writes after installing that handler; before
        that it would die of SIGUSR2, and it reads the file anyway once its tasks have
        started."""
        if key not in self.steps:
            return
        d = self._step_dir(*key)
        try:
            fd = os.open(os.path.join(d, "signals"),
                         os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            log.warning("step %s: cannot queue signals: %s", key, exc)
            return
        try:
            os.write(fd, "".join(f"{s}\n" for s in sigs).encode())
        finally:
            os.close(fd)
        if os.path.exists(os.path.join(d, "super.pid")):
            self._poke_step(key, signal.SIGUSR2)

    def _poke_step(self, key, sig: int) -> None:
        info = self.steps.get(key)
        if info:
            try:
                os.kill(info["pid"], sig)
            except ProcessLookupError:
                pass

    def _kill_unknown(self, job_id: int) -> None:
        self.scripts.cancel(job_id)
        for (jid, run) in list(self.jobs):
            if jid == job_id:
                self.terminate(jid, run, "cancel")
        for key in [k for k in self.steps if k[0] == job_id]:
            self.terminate_step(key, "cancel")

    # ---- connection -----------------------------------------------------------------------
    def _send(self, msg: dict) -> None:
        if self.link is not None:
            self.link.send(msg)

    async def run(self, stop_event: asyncio.Event | None = None) -> None:
        """Serve until ``stop_event`` (default: SIGTERM/SIGINT) is set."""
        loop = asyncio.get_running_loop()
        if stop_event is None:
            for s in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(s, self._stop.set)
        else:
            self._stop = stop_event
        self.recover()
        # commands run on this node reach the controller through us (muster.agent.relay)
        relay = Relay(self.cfg, self.keys, self.name, relay_socket(self.spool),
                      self.node.addr if _is_local_addr(self.node.addr) else None)
        try:
            await relay.start()
        except OSError as exc:
            log.error("%s: no relay socket for local commands: %s", self.name, exc)
        delay = 0.05
        stop = asyncio.create_task(self._stop.wait())
        while not self._stop.is_set() and not self.retired:
            session = asyncio.create_task(self._session())
            done, _ = await asyncio.wait({session, stop}, return_when=asyncio.FIRST_COMPLETED)
            if stop in done:
                session.cancel()
                break
            if session.result():
                delay = 0.05  # we were connected: retry fast
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        relay.close()
        if self.link:
            self.link.close()
        if self.confine is not None:
            self.confine.close()
        # jobs keep running under their supervisors: stopping the agent does not kill work

    def _registration(self) -> dict:
        return {
            "op": "agent_register", "node": self.name, "cpus": self.node.cpus,
            "mem": self.node.real_memory,
            "running": sorted({jid for jid, _ in self.jobs} | {k[0] for k in self.steps}),
            "finished": list(self.unacked.values()),
            "steps_running": [list(k) for k in self.steps],
            "steps_finished": list(self.unacked_steps.values()), "version": __version__,
            "arch": platform.machine(), "os": f"{platform.system()} {platform.release()}",
            "boot_time": _boot_time(), "agent_start": self.start_time,
            "proto": announced_protocol(),
        }

    async def _connect(self) -> Link | None:
        """An authenticated, sealed link to the leading controller with our registration
        sent: each SlurmctldHost in order, as slurmd does (a standby listens on no TCP port,
        so it refuses at once); None (logged) when none can be reached or proves it holds
        the cluster key."""
        addrs = self.cfg.slurmctld_addrs or (self.cfg.slurmctld_addr or "127.0.0.1",)
        for host in addrs:
            link = await self._connect_to(host, self.cfg.slurmctld_port)
            if link is not None:
                return link
        return None

    async def _connect_to(self, host: str, port: int) -> Link | None:
        if self.connect_gate is None:
            return await self._open_link(host, port)
        async with self.connect_gate:
            return await self._open_link(host, port)

    async def _open_link(self, host: str, port: int) -> Link | None:
        try:
            reader, writer = await asyncio.open_connection(
                host, port, local_addr=(self.node.addr, 0)
                if _is_local_addr(self.node.addr) else None, limit=STREAM_LIMIT)
        except OSError as exc:
            log.debug("controller unreachable: %s", exc)
            return None
        link = Link(reader, writer)
        claims = {"uid": os.getuid(), "gid": os.getgid(), "host": socket.gethostname(),
                  "node": self.name}
        try:
            await initiate(link, self.keys, "agent", claims, first=self._registration())
            return link
        except LinkForged as exc:
            log.warning("%s: no authenticated controller at %s:%s (%s): sent it nothing but "
                        "a hello, running nothing it says", self.name, host, port, exc)
        except (TimeoutError, BadFrame, ConnectionError, OSError, asyncio.IncompleteReadError) as exc:
            log.warning("%s: link handshake with %s:%s failed: %s", self.name, host, port,
                        exc or type(exc).__name__)
        link.close()
        return None

    async def _session(self) -> bool:
        link = await self._connect()
        if link is None:
            return False
        self.link = link
        hb = None
        try:
            reply = await asyncio.wait_for(link.recv(), REGISTER_TIMEOUT)
            if not reply or not reply.get("ok"):
                log.error("registration refused: %s", reply and reply.get("error"))
                if reply and reply.get("code") == "invalid_nodelist" and self.removed():
                    log.info("%s: removed from the configuration; agent stops", self.name)
                    self.retired = True
                    return False
                await asyncio.sleep(1.0)
                return False
            peer = reply.get("proto", agentmsg.UNVERSIONED)
            refusal = agentmsg.incompatible(peer if isinstance(peer, int) else 0,
                                            announced_protocol())
            if refusal:  # an older controller that did not check: the agent refuses it
                log.error("controller refused: %s", refusal)
                await asyncio.sleep(1.0)
                return False
            self.heartbeat_s = max(0.5, min(HEARTBEAT_S, (reply.get("slurmd_timeout") or 20) / 4))
            log.info("registered with controller as %s", self.name)
            hb = asyncio.create_task(self._heartbeat())
            if self.acct and self.acct["freq"]:
                hb.add_done_callback(_cancel_with(asyncio.create_task(self._usage_loop())))
            self._start_health_check()
            while True:
                msg = await link.recv()
                if msg is None:
                    break
                try:
                    self.on_message(msg)
                except Exception:
                    log.exception("handling %s failed", msg.get("op"))
        except LinkForged as exc:
            log.warning("controller link closed: a frame failed its integrity check (%s)", exc)
        except (TimeoutError, BadFrame, ConnectionError, asyncio.IncompleteReadError) as exc:
            log.warning("controller link lost: %s", exc or type(exc).__name__)
        finally:
            if hb:
                hb.cancel()
            link.close()
            self.link = None
        return True

    async def _health_loop(self) -> None:
        """Run HealthCheckProgram every HealthCheckInterval seconds (as root, with the node's
        name in the environment); a non-zero exit drains the node with the program's output,
        a later success undoes it. NVIDIA GPU health (XID/ECC/lost GPUs) comes from NVML
        when the library and a GPU are present."""
        prog = self.cfg.health_check_program
        interval = self.cfg.health_check_interval
        while True:
            ok, message = True, ""
            try:
                proc = await asyncio.create_subprocess_exec(
                    prog, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                    env={**os.environ, "SLURMD_NODENAME": self.name, "MUSTER_NODE": self.name})
                out, _ = await asyncio.wait_for(proc.communicate(), timeout=max(5, interval))
                ok = proc.returncode == 0
                message = (out.decode(errors="replace").strip().splitlines() or [""])[-1]
                if not ok and not message:
                    message = f"HealthCheckProgram exited {proc.returncode}"
            except (TimeoutError, OSError) as exc:
                ok, message = False, f"HealthCheckProgram failed: {exc}"
            gpu_problem = _nvml_problem()
            if gpu_problem:
                ok, message = False, gpu_problem
            self._send({"op": "health", "ok": ok, "message": message})
            await asyncio.sleep(interval)

    async def _usage_loop(self) -> None:
        """Forward the supervisors' and step daemons' live usage samples (usage.json), at
        twice the sampling rate so that a sample waits at most half an interval."""
        assert self.acct is not None  # the loop runs only with accounting on
        period = max(0.5, self.acct["freq"] / 2)
        while True:
            await asyncio.sleep(period)
            running: list[tuple[str, int, int, object]] = [
                (self._dir(j, r), j, r, "batch") for j, r in self.jobs]
            running += [(self._step_dir(*k), k[0], k[2], k[1]) for k in self.steps]
            for msg in self.usage.collect(self.name, running):
                self._send(msg)

    async def _heartbeat(self) -> None:
        # the first one after a random part of the interval: nodes that registered together
        # (an emulated cluster, a rack after a power cut) do not all beat in the same moment
        delay = self.heartbeat_s * random.random()
        while True:
            await asyncio.sleep(delay)
            delay = self.heartbeat_s
            try:
                load = os.getloadavg()[0]
            except OSError:
                load = None
            self._send({"op": "heartbeat", "load": load, "free_mem": _free_mem_mb()})
            # re-send unacknowledged ends (the first copy may have crossed a reconnect)
            for status in list(self.unacked.values()):
                self._send({"op": "job_ended", **status})
            for status in list(self.unacked_steps.values()):
                self._send({"op": "step_ended", **status})
            self.scripts.resend()


def _cancel_with(task: asyncio.Task):
    """A done-callback that cancels ``task`` (it lives as long as the heartbeat)."""
    return lambda _f: task.cancel()


def _nvml_problem() -> str | None:
    """A short description of a sick NVIDIA GPU (ECC uncorrectable errors, a GPU lost), or
    None when all is well or NVML is not available (no NVIDIA GPU, library missing)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            try:
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
            except Exception:
                return f"GPU {i} lost"
            try:
                ecc = pynvml.nvmlDeviceGetTotalEccErrors(
                    h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
                if ecc:
                    return f"GPU {i}: {ecc} uncorrectable ECC errors"
            except Exception:
                pass  # ECC not supported on this GPU
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _signum(v: object) -> bool:
    """A signal number a controller message may ask for (1-64)."""
    return isinstance(v, int) and not isinstance(v, bool) and 0 < v < 65


def _launch_failure(job_id: int, run: int) -> dict:
    """The end report of a batch job that never started (the controller fails it with
    reason JobLaunchFailure instead of waiting for it)."""
    return {"job_id": job_id, "run": run, "exit_code": 1, "signal": 0, "launch_failed": True,
            "end_time": int(time.time())}


def _step_failure(key: tuple, node: str, tasks: list) -> dict:
    """The end report of a step whose tasks never started on this node."""
    return {"job_id": key[0], "step_id": key[1], "run": key[2], "node": node,
            "tasks": [{"task": t, "exit_code": 1, "signal": 0} for t in tasks],
            "end_time": int(time.time()), "launch_failed": True}


def _is_local_addr(addr: str | None) -> bool:
    return addr is not None and addr.startswith("127.")


def _zygote_free(pid: int) -> None:
    """Tell the zygote that the job of its pooled supervisor ``pid`` is over here: the
    supervisor may be given another (muster.agent.zygote). No answer comes back."""
    if ZYGOTE is not None:
        try:
            ZYGOTE.send(json.dumps({"free": pid}).encode())
        except OSError:
            pass  # the zygote is gone: _spawn notices on the next launch


def _read_json(path: str) -> dict | None:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


_write_json = securefs.write_private_json


def _read_int(path: str) -> int | None:
    try:
        with open(path) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def _boot_time() -> int | None:
    try:
        with open("/proc/stat") as fh:
            for line in fh:
                if line.startswith("btime"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _free_mem_mb() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None
