"""The simulator and the live controller make the same decisions for the same events.

The controller side is the real :class:`muster.controller.server.Controller` in this process:
its SQLite store, the ``submit`` request handler, ``schedule_once`` (snapshot → core → plan
applied and committed) and ``job_ended`` (the agent's end report). Only two things differ from
a running daemon: its clock is a VirtualClock set to each event's time (injected, as musterctld
injects the real one), and there are no agents connected, so launch messages wait in the
controller's outbox (nothing runs; the test reports each job's end at ``start + min(run,
limit)`` as an agent would). A scheduling pass runs after every event instant, as the daemon's
wake-up does.

The simulator replays the same jobs from the same slurm.conf. For every random cluster,
workload and policy the two must start every job at the same second on the same nodes.
"""

from __future__ import annotations

import heapq
import os
import shutil
import tempfile
from contextlib import ExitStack

from hypothesis import example, given, settings
from hypothesis import strategies as st

from muster.common import auth
from muster.common import clock as clocks
from muster.config import load
from muster.controller import handlers, server
from muster.model.job import PENDING
from muster.protocol import agentmsg
from muster.sim.cluster import from_config
from muster.sim.engine import Simulator
from muster.sim.traces import TraceJob
from muster.store.sqlite import SqliteStore

# one slurm.conf per policy: the simulator's --policy shorthand, spelled as an admin would
SCHED_LINES = {
    "fifo": "SchedulerType=sched/builtin",
    "easy": "SchedulerType=sched/backfill\n"
            "SchedulerParameters=bf_depth=1,bf_window=10512000,bf_max_job_test=0",
    "conservative": "SchedulerType=sched/backfill\n"
                    "SchedulerParameters=bf_window=10512000,bf_max_job_test=0",
}


def write_conf(d: str, nodes: list[tuple[int, int]], policy: str, extra: str = "",
               split: bool = False) -> str:
    """``extra``: scheduling lines of the file itself (policy "config"). ``split``: besides
    "sim" (every node, no limit) a "short" partition of the first nodes, MaxTime 5 minutes."""
    lines = ["ClusterName=simcheck", "SlurmctldHost=localhost", f"StateSaveLocation={d}",
             "FirstJobId=1", "GresTypes=gpu", SCHED_LINES.get(policy, "")]
    for i, (cpus, gpus) in enumerate(nodes):
        gres = f" Gres=gpu:{gpus}" if gpus else ""
        lines.append(f"NodeName=n{i} CPUs={cpus} RealMemory={cpus}{gres}")
    lines.append("PartitionName=sim Nodes=ALL Default=YES MaxTime=UNLIMITED State=UP")
    if split:
        first = ",".join(f"n{i}" for i in range(max(1, len(nodes) // 2)))
        lines.append(f"PartitionName=short Nodes={first} MaxTime=5 PriorityTier=2 State=UP")
    if extra:
        lines.append(extra)
    path = os.path.join(d, "slurm.conf")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


def submit_request(tj: TraceJob, gpn: int, partitions: str | None = None) -> dict:
    """What a user would pass to sbatch for this trace job, the way the simulator reads it
    (muster.sim.engine.Simulator._view): CPUs as tasks, 1 MB per CPU, GPUs in total or as
    whole nodes, the limit rounded up to minutes."""
    req = {"mem_per_cpu": 1, "time_limit": -(-tj.limit // 60), "work_dir": "/tmp",
           "name": f"t{tj.job_id}", "partition": partitions}
    if tj.gpus and gpn and tj.gpus >= gpn and tj.gpus % gpn == 0 and tj.cpus <= 1:
        req.update(nodes_min=tj.gpus // gpn, gres=[{"name": "gpu", "count": gpn}])
    elif tj.gpus and gpn and tj.gpus > gpn and tj.cpus <= 1:
        req.update(gpus={"count": tj.gpus})
    elif tj.gpus:
        req.update(ntasks=max(1, tj.cpus), gpus={"count": tj.gpus})
    else:
        req.update(ntasks=tj.cpus)
    return req


def run_controller(conf: str, jobs: list[TraceJob], uid_of,
                   partitions: str | None = None) -> dict[int, tuple[int, tuple]]:
    """Drive the real controller through the trace; job id → (start time, node names)."""
    cfg = load(conf)
    auth.generate_key(cfg.key_path)
    clock = clocks.VirtualClock(jobs[0].submit)
    out: dict[int, tuple[int, tuple]] = {}
    with ExitStack() as stack:
        stack.callback(clocks.install, clocks.current())  # the controller installs its clock
        store = SqliteStore(cfg.db_path)
        stack.callback(store.close)
        ctl = server.Controller(cfg, store, clock)
        for n in ctl.state.nodes.values():  # as after every agent registered
            n.connected = n.registered = True
        gpn = max((len(n.gpu_indices) for n in ctl.state.nodes.values()), default=0)
        ends: list[tuple[int, int]] = []
        by_id = {tj.job_id: tj for tj in jobs}
        waiting: set[int] = set()
        nxt = 0
        while nxt < len(jobs) or ends:
            t = min(ends[0][0] if ends else 1 << 62,
                    jobs[nxt].submit if nxt < len(jobs) else 1 << 62)
            clock.set(t)
            while ends and ends[0][0] == t:
                _, jid = heapq.heappop(ends)
                job = ctl.state.jobs[jid]
                tj = by_id[jid]
                killed = tj.run > 60 * job.time_limit
                ctl.job_ended(job.batch_host, agentmsg.JobEnded(
                    job_id=jid, run=job.restarts, exit_code=0,
                    signal=9 if killed else 0, timed_out=killed, end_time=t))
            while nxt < len(jobs) and jobs[nxt].submit == t:
                tj = jobs[nxt]
                nxt += 1
                uid = uid_of(tj)
                got = handlers.submit(ctl, {"job": submit_request(tj, gpn, partitions),
                                            "script": "#!/bin/sh\ntrue\n", "env": {}}, uid, uid)
                assert got["job_id"] == tj.job_id
                waiting.add(tj.job_id)
            ctl.schedule_once()
            for jid in sorted(waiting):
                job = ctl.state.jobs[jid]
                if job.state != PENDING:
                    assert job.state == "RUNNING", (jid, job.state)
                    waiting.discard(jid)
                    out[jid] = (t, tuple(a.node for a in job.alloc))
                    stop = t + min(by_id[jid].run, 60 * job.time_limit)
                    heapq.heappush(ends, (stop, jid))
        assert not waiting, f"jobs never started: {sorted(waiting)}"
    return out


def run_sim(conf: str, jobs: list[TraceJob], policy: str,
            partitions: str | None = None, core: str | None = None) -> dict[int, tuple[int, tuple]]:
    res = Simulator(from_config(conf, partition=partitions), jobs, policy).run()
    assert not res.skipped
    if core is not None:
        assert res.core == core
    return {tj.job_id: (s, nodes) for tj, s, nodes in zip(res.jobs, res.start, res.nodes)}


def _arrival(draw, t: int) -> tuple[int, int, int]:
    """The next job's submit time after ``t``, its run time and its limit (seconds): exact,
    rounded up a minute, doubled, too short, or an hour."""
    t += draw(st.sampled_from([0, 0, 1, 30, 60, 200]))
    run = draw(st.integers(1, 900))
    limit = draw(st.sampled_from([run, run + 59, 2 * run + 1, max(1, run // 2), 3600]))
    return t, run, limit


@st.composite
def workloads(draw, max_jobs=14, pooled=False):
    """``pooled``: one node without GPUs (the incremental pooled scheduler's scope)."""
    gpus = 0 if pooled else draw(st.sampled_from([0, 0, 2, 4]))
    count = 1 if pooled else draw(st.integers(1, 4))
    nodes = [(draw(st.sampled_from([2, 4, 8, 16] if pooled else [2, 4, 8])), gpus)
             for _ in range(count)]
    max_cpus = max(c for c, _ in nodes)
    n = draw(st.integers(1, max_jobs))
    t, jobs = 0, []
    for i in range(1, n + 1):
        t, run, limit = _arrival(draw, t)
        g = draw(st.sampled_from([0, 1, gpus, 2 * gpus])) if gpus else 0
        g = min(g, gpus * len(nodes))
        cpus = draw(st.integers(1, max_cpus))
        if g > gpus:  # a multi-node GPU job: one task per node, as the simulator sizes it
            cpus = 1
        jobs.append(TraceJob(i, t, run, limit, cpus, g, user=f"u{i % 3}"))
    return nodes, jobs


@st.composite
def gpu_workloads(draw, max_jobs=40):
    """Identical GPU nodes and ITP-shaped jobs (one CPU; some of one node's GPUs, whole
    nodes, or more than a node's GPUs spread over nodes): the GPU node-class scheduler's
    scope."""
    gpus = draw(st.sampled_from([2, 4, 8]))
    count = draw(st.integers(1, 4))
    nodes = [(draw(st.sampled_from([gpus // 2, gpus, 4 * gpus])), gpus)] * count
    n = draw(st.integers(1, max_jobs))
    t, jobs = 0, []
    for i in range(1, n + 1):
        t, run, limit = _arrival(draw, t)
        g = draw(st.sampled_from([1, 1, gpus // 2, gpus, gpus * draw(st.integers(1, count)),
                                  min(gpus + 1, gpus * count)]))  # the last: spread
        jobs.append(TraceJob(i, t, run, limit, 1, g, user=f"u{i % 3}"))
    return nodes, jobs


@st.composite
def site_settings(draw):
    """A slurm.conf's own scheduling settings (``--policy config``): any backfill depth, a
    window and test budget that bind, multifactor weights, fair-share with decay."""
    lines = []
    if draw(st.booleans()):
        params = [f"bf_window={draw(st.sampled_from([1, 5, 30, 1440]))}",
                  f"bf_max_job_test={draw(st.sampled_from([0, 1, 3, 500]))}",
                  f"bf_resolution={draw(st.sampled_from([1, 60, 300]))}"]
        depth = draw(st.sampled_from([None, 1, 2]))
        if depth:
            params.append(f"bf_depth={depth}")
        lines += ["SchedulerType=sched/backfill", "SchedulerParameters=" + ",".join(params)]
    else:
        lines.append("SchedulerType=sched/builtin")
    weights = {k: draw(st.sampled_from([0, 0, 100, 10000]))
               for k in ("Age", "Fairshare", "JobSize")}
    lines.append("PriorityType=priority/multifactor")
    lines += [f"PriorityWeight{k}={v}" for k, v in weights.items()]
    lines.append(f"PriorityMaxAge={draw(st.sampled_from(['00:01:00', '00:10:00', '7-0']))}")
    lines.append(f"PriorityDecayHalfLife={draw(st.sampled_from(['0', '00:05:00', '7-0']))}")
    if draw(st.booleans()):
        lines.append("PriorityFavorSmall=YES")
    return "\n".join(lines)


def check_same(work, policy, settings_text: str = "", split: bool = False,
               core: str | None = None):
    nodes, jobs = work
    parts = "short,sim" if split else None
    d = tempfile.mkdtemp(prefix="muster-simcheck-")
    try:
        conf = write_conf(d, nodes, policy, settings_text, split)
        # jobs the machine can never hold: the simulator skips them, sbatch refuses them
        kept = Simulator(from_config(conf, partition=parts), jobs, policy).jobs
        if not kept:
            return
        # users are uids without a passwd entry: the controller names them by number
        jobs = [TraceJob(i, j.submit, j.run, j.limit, j.cpus, j.gpus,
                         user=str(60000 + int(j.user[1:])))
                for i, j in enumerate(kept, 1)]
        sim = run_sim(conf, jobs, policy, parts, core)
        live = run_controller(conf, jobs, lambda tj: int(tj.user), parts)
        assert live == sim
    finally:
        shutil.rmtree(d, ignore_errors=True)


SHORTHANDS = sorted(SCHED_LINES)


@settings(max_examples=300, deadline=None)
@given(workloads(), st.sampled_from(SHORTHANDS))
def test_simulator_and_controller_decide_the_same(work, policy):
    check_same(work, policy)


@settings(max_examples=150, deadline=None)
@given(workloads(max_jobs=45), st.sampled_from(SHORTHANDS))
def test_same_decisions_with_long_queues(work, policy):
    """Queues long enough for the simulator's pruning (reservation holders, later jobs that
    fit, arrival-only passes) to matter."""
    check_same(work, policy)


@settings(max_examples=150, deadline=None)
@given(workloads(max_jobs=40, pooled=True), st.sampled_from(["fifo", "easy", "conservative"]))
def test_same_decisions_by_the_pooled_scheduler(work, policy):
    """One node of pooled CPUs under FIFO, EASY or conservative backfill: the simulator's
    incremental PooledScheduler (told only arrivals and ends) against the controller's full
    passes."""
    check_same(work, policy, core="pooled")


@settings(max_examples=150, deadline=None)
@given(gpu_workloads(), st.sampled_from(["fifo", "easy"]))
def test_same_decisions_by_the_gpu_node_class_scheduler(work, policy):
    """Identical GPU nodes under FIFO or EASY: the simulator's incremental
    GpuClassScheduler (told only its starts and the ends) against the controller's passes."""
    check_same(work, policy, core="gpuclass")


@settings(max_examples=200, deadline=None)
@given(workloads(max_jobs=30), site_settings())
def test_same_decisions_under_the_sites_own_settings(work, text):
    """``--policy config``: multifactor priority (age, job size, fair-share of three users
    with usage decay) and backfill with a binding window and test budget, as the file says."""
    check_same(work, "config", text)


@settings(max_examples=150, deadline=None)
@given(workloads(max_jobs=30), st.sampled_from(SHORTHANDS + ["config"]), site_settings())
# found by this test: "short" can never hold the 3-CPU job; that pair used up a test budget of
# 1, so the job was never tried in "sim" and never ran (the core now skips such pairs)
@example(([(2, 0), (4, 0)], [TraceJob(1, 0, 1, 1, 3, 0, user="u1")]), "config",
         "SchedulerType=sched/backfill\n"
         "SchedulerParameters=bf_window=1,bf_max_job_test=1,bf_resolution=1")
def test_same_decisions_with_two_partitions(work, policy, text):
    """Every job offered to a 5-minute "short" partition (higher tier, half the nodes) and to
    "sim" (all nodes): partition limits and tiers route them, in both."""
    check_same(work, policy, text if policy == "config" else "", split=True)
