"""In-process harness for the controller: the real :class:`Controller` (its SQLite store, its
request dispatch, its agent-message handlers, its scheduling pass and periodic duties) in this
process, with a :class:`VirtualClock` and fake agents instead of sockets.

What is real: everything from ``Controller.dispatch`` (the path a Unix-socket request takes,
with the caller's uid) and ``Controller.on_agent_message`` / ``agent_attached`` /
``agent_detached`` (the path an agent's frames take) down to the store. What is not: the event
loop (``schedule_once`` and ``tick`` are called where the daemon's wake-up and once-a-second
timer would call them) and the agents (a :class:`FakeAgent` records what the controller sends
and answers the way musterd does: ``job_started`` for a launch, ``job_ended`` for a terminate).

Time moves only with :meth:`InProc.advance`; live agents heartbeat at every instant the
harness visits, dead ones do not, so SlurmdTimeout, time limits and reservation roll-overs
happen at virtual times, deterministically and at once.
"""

from __future__ import annotations

import os
import pwd

import pytest

from muster.common import auth
from muster.common import clock as clocks
from muster.config import load
from muster.controller.server import Controller
from muster.store.sqlite import SqliteStore

START = 1_800_000_000  # a fixed virtual epoch: every run sees the same times
BASE_CONF = """ClusterName=inproc
SlurmctldHost=localhost
StateSaveLocation={d}
FirstJobId=100
SlurmdTimeout=30
SchedulerParameters=requeue_delay=0
NodeName=n[1-2] CPUs=4 RealMemory=4000
PartitionName=main Nodes=ALL Default=YES MaxTime=UNLIMITED State=UP
"""


class _Writer:
    """What the controller closes when it drops a link (check_agents, a newer registration)."""

    def __init__(self):
        self.closed = False

    def close(self) -> None:
        self.closed = True


class FakeAgent:
    """One node's agent link without a socket. ``sent``: every message the controller sent
    here, in order; ``inbox``: those not yet answered (``InProc.pump`` answers them)."""

    def __init__(self, name: str):
        self.name = name
        self.sent: list[dict] = []
        self.inbox: list[dict] = []
        self.writer = _Writer()
        self.alive = False
        self.deadlines: dict[tuple[int, int], int] = {}  # (job, run) → end of its time limit

    def send(self, msg: dict) -> bool:
        self.sent.append(msg)
        self.inbox.append(msg)
        return True

    def ops(self, op: str, job_id: int | None = None) -> list[dict]:
        return [m for m in self.sent if m.get("op") == op
                and (job_id is None or m.get("job_id") == job_id)]


class InProc:
    def __init__(self, d: str, extra: str = "", user: str = "mustertest"):
        conf = os.path.join(d, "slurm.conf")
        with open(conf, "w") as fh:
            fh.write(BASE_CONF.format(d=d) + extra)
        self.cfg = load(conf)
        auth.generate_key(self.cfg.key_path)
        self.start = START
        self.clock = clocks.VirtualClock(START)
        self._prev_clock = clocks.current()
        self.store = SqliteStore(self.cfg.db_path)
        try:
            self.ctl = Controller(self.cfg, self.store, self.clock)  # installs self.clock
        except BaseException:
            self.close()
            raise
        pw = pwd.getpwnam(user)
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        self.agents = {name: FakeAgent(name) for name in self.ctl.state.nodes}
        for name in self.agents:
            self.connect(name)

    def close(self) -> None:
        self.store.close()
        clocks.install(self._prev_clock)

    # ---- agents ------------------------------------------------------------------------------
    def connect(self, name: str, running: list[int] | None = None) -> FakeAgent:
        """Register ``name``'s agent, as its first frame on a new link does."""
        agent = self.agents[name] = FakeAgent(name)
        agent.alive = True
        self.ctl.agent_attached(self.ctl.state.nodes[name], agent, {
            "op": "agent_register", "node": name, "running": running or [], "finished": [],
            "boot_time": START - 100, "agent_start": START - 50, "version": "test"})
        return agent

    def disconnect(self, name: str) -> None:
        """The agent's link breaks (and it stops heartbeating)."""
        agent = self.agents[name]
        agent.alive = False
        self.ctl.agent_detached(self.ctl.state.nodes[name], agent)

    def report(self, name: str, msg: dict) -> None:
        """One frame from ``name``'s agent."""
        self.ctl.on_agent_message(self.ctl.state.nodes[name], self.agents[name], msg)

    def end(self, job_id: int, exit_code: int = 0, signal: int = 0, **extra) -> None:
        """The batch script of the job's current run ended (the batch host reports it)."""
        job = self.ctl.state.jobs[job_id]
        self.agents[job.batch_host].deadlines.pop((job_id, job.restarts), None)
        self.report(job.batch_host, {"op": "job_ended", "job_id": job_id, "run": job.restarts,
                                     "exit_code": exit_code, "signal": signal,
                                     "end_time": int(self.clock.time()), **extra})

    def pump(self) -> None:
        """Live agents answer what they were sent, as musterd would: a launch is confirmed
        (``job_started``) and its time limit noted; a terminate of the whole job (not one
        with ``scope: steps``, which spares the batch script) ends the job's run by SIGKILL
        on its batch host. The batch script's time limit is the agent's to enforce (its
        supervisor's deadline): past it, the agent reports the run ended ``timed_out``."""
        t = int(self.clock.time())
        for agent in self.agents.values():
            for (jid, run), deadline in sorted(agent.deadlines.items()):
                if agent.alive and t >= deadline:
                    del agent.deadlines[(jid, run)]
                    self.report(agent.name, {"op": "job_ended", "job_id": jid, "run": run,
                                             "exit_code": 0, "signal": 15, "timed_out": True,
                                             "end_time": deadline})
            while agent.alive and agent.inbox:
                msg = agent.inbox.pop(0)
                job = self.ctl.state.jobs.get(msg.get("job_id"))
                if msg.get("op") == "launch":
                    if msg.get("time_limit_s") is not None:
                        agent.deadlines[(msg["job_id"], msg["run"])] = \
                            msg["start_time"] + msg["time_limit_s"]
                    self.report(agent.name, {"op": "job_started", "job_id": msg["job_id"],
                                             "run": msg["run"]})
                elif msg.get("op") == "terminate" and msg.get("scope") != "steps" \
                        and job is not None and job.batch and job.batch_host == agent.name:
                    agent.deadlines.pop((msg["job_id"], msg["run"]), None)
                    self.report(agent.name, {"op": "job_ended", "job_id": msg["job_id"],
                                             "run": msg["run"], "exit_code": 0, "signal": 9,
                                             "end_time": int(self.clock.time())})

    # ---- clients and time -------------------------------------------------------------------
    def request(self, op: str, uid: int | None = None, **fields) -> dict:
        """One client request through the controller's dispatch, as from the Unix socket."""
        uid = self.uid if uid is None else uid
        gid = self.gid if uid == self.uid else 0
        return self.ctl.dispatch({"op": op, **fields}, uid, gid)

    def submit(self, uid: int | None = None, **job) -> int:
        req = {"ntasks": 1, "time_limit": 10, "work_dir": "/tmp", "name": "t", **job}
        reply = self.request("submit", uid, job=req, script="#!/bin/sh\ntrue\n", env={})
        assert reply["ok"], reply
        return reply["job_id"]

    def settle(self) -> None:
        """A scheduling pass, then the agents' answers, until nothing changes."""
        for _ in range(10):
            self.ctl.schedule_once()
            if not any(a.alive and a.inbox for a in self.agents.values()):
                return
            self.pump()

    def advance(self, seconds: int) -> None:
        """Move the clock; live agents heartbeat at the new instant; then the controller's
        once-a-second duties (``tick``) and a scheduling pass run."""
        self.clock.advance(seconds)
        for agent in self.agents.values():
            if agent.alive:
                self.report(agent.name, {"op": "heartbeat", "load": 0.0, "free_mem": 4000})
        self.ctl.tick()
        self.pump()
        self.settle()

    def job(self, job_id: int):
        return self.ctl.state.jobs[job_id]


@pytest.fixture
def make_inproc(tmp_path):
    """``make_inproc(extra_conf="")`` → a fresh in-process controller; closed afterwards."""
    made: list[InProc] = []

    def make(extra: str = "") -> InProc:
        d = tmp_path / f"ctl{len(made)}"
        d.mkdir(mode=0o700)
        ip = InProc(str(d), extra)
        made.append(ip)
        return ip
    yield make
    for ip in reversed(made):
        ip.close()


@pytest.fixture
def ip(make_inproc) -> InProc:
    return make_inproc()
