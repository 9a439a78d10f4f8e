"""Prologs and epilogs in the controller: PrologSlurmctld/EpilogSlurmctld, and the controller's
side of the nodes' Prolog/Epilog (muster.agent.prolog runs those).

Order at a job's start (:meth:`Prologs.job_started`, called for every job the scheduler
started): PrologSlurmctld (off the event loop, as this daemon's user) → with
``PrologFlags=Alloc`` (``Contain`` implies it) the ``prolog`` op to every node of the
allocation → the batch launch, or the wake-up of the waiting srun/salloc. Until that point the
job is *gated*: the launch is not sent and ``wait_alloc`` keeps waiting. With Alloc the gate
also waits for every node's prolog for salloc/srun unless ``NoHold``, and for a batch job only
with ``DeferBatch``; otherwise each node holds its own launches until its prolog is done.

Failures (Slurm's prolog_epilog guide and slurmd's ``_launch_job_fail``):
  * a node Prolog (non-zero, or past its timeout): the node is drained with reason
    ``Prolog error``; a batch job that may be requeued (``--requeue``/JobRequeue, or
    ``PrologFlags=ForceRequeueOnFail``) is requeued *held* ("launch failed requeued held")
    unless ``SchedulerParameters=nohold_on_prolog_fail``; any other job fails
    (FAILED, JobLaunchFailure);
  * PrologSlurmctld: a requeueable batch job is requeued (not held); any other job is
    cancelled;
  * a node Epilog: the node is drained with reason ``Epilog error``;
  * EpilogSlurmctld: logged only.

At a job's end (:meth:`Prologs.job_released`, called by ``ClusterState.release``, the one place
a run's resources are given back) every node of the allocation hears it: the ``epilog`` op is
the end-of-job message (Slurm's REQUEST_TERMINATE_JOB, less the kill, which the ``terminate``
op does), sent whether or not an Epilog is configured. On it the node treats the job as over
there: it removes the job's named containers (muster.agent.ocijobs), forgets the job's prolog
and runs its Epilog if it has one. The one node spared is a batch job's batch host when no
node script is configured: it saw the job end itself (its script ended, or it was sent the
terminate), so a single-node batch job costs no extra message. A node that was also sent a
``terminate`` for this run still gets it: that terminate may have waited in an outbox that a
controller restart lost, and a second end is a no-op on the node. To a node that is away the
message waits in the outbox like any other. It leaves after the commit of the transaction that
released the resources (``Applier.after_commit``), behind that transaction's effects (a
cancel's ``terminate`` first), never for a change that was rolled back. No protocol bump: the
op is as old as node Epilogs (issue 14), so an older agent that knows it acts the same (less
the container cleanup if it predates issue 18), and one older than the op logs it as unknown
and drops it — no worse than the nothing it was sent before.

With an Epilog configured the job's resources on a node stay taken — the node shows
COMPLETING — until that node reports its epilog done. Such holds live in memory: after a
controller restart the nodes are free at once. A hold on a node that goes DOWN is dropped; the
request is repeated every EPILOG_RESEND_S while the node is up and silent about it.
"""

from __future__ import annotations

import asyncio
import logging

from muster.common import clock
from muster.common.scripts import run_scripts, timeout_of
from muster.controller.state import now
from muster.lifecycle import events
from muster.model.alloc import NodeAlloc
from muster.model.job import RUNNING

log = logging.getLogger("musterctld")

EPILOG_RESEND_S = 30.0
HELD_DESC = "launch failed requeued held"


def prolog_failure_action(*, batch: bool, requeue: bool, flags, nohold: bool) -> tuple[str, bool]:
    """What a failed node Prolog does to its job: ``("requeue", held)`` or ``("fail", False)``
    (Slurm: only batch jobs requeue; ForceRequeueOnFail ignores --no-requeue; held unless
    nohold_on_prolog_fail)."""
    if batch and (requeue or "FORCEREQUEUEONFAIL" in flags):
        return "requeue", not nohold
    return "fail", False


def ctld_failure_action(*, batch: bool, requeue: bool) -> str:
    """What a failed PrologSlurmctld does: ``requeue`` (not held) a batch job that may be
    requeued, else ``cancel`` (Slurm's prep_prolog_slurmctld_callback)."""
    return "requeue" if batch and requeue else "cancel"


class Prologs:
    def __init__(self, ctl):
        self.ctl = ctl
        self.configure(ctl.cfg)
        self.gates: dict[int, dict] = {}  # job id -> {"run", "nodes": set | None}
        self.holds: dict[tuple[int, int, str], dict] = {}  # (job, run, node) -> epilog hold
        self._tasks: set[asyncio.Task] = set()

    def configure(self, cfg) -> None:
        """PrologFlags, nohold_on_prolog_fail and the script paths (read from ``cfg`` when
        used): at start and on reconfigure. Jobs already gated keep their gates."""
        self.cfg = cfg
        self.flags = frozenset(f.upper() for f in (cfg.prolog_flags or ()))
        self.alloc = bool(self.flags & {"ALLOC", "CONTAIN"})
        self.nohold = "nohold_on_prolog_fail" in (cfg.scheduler_parameters or {})

    @property
    def node_scripts(self) -> bool:
        return bool(self.cfg.prolog or self.cfg.epilog)

    # ---- environments -----------------------------------------------------------------------
    def job_env(self, job) -> dict:
        """Variables every prolog/epilog of the job gets (Slurm's prolog_epilog guide)."""
        env = {"SLURM_JOB_ID": job.job_id, "SLURM_JOBID": job.job_id,
               "SLURM_JOB_USER": job.user, "SLURM_JOB_UID": job.uid, "SLURM_JOB_GID": job.gid,
               "SLURM_JOB_ACCOUNT": job.account, "SLURM_JOB_PARTITION": job.partition,
               "SLURM_JOB_NODELIST": job.node_list, "SLURM_JOB_NUM_NODES": len(job.alloc),
               "SLURM_JOB_QOS": job.qos, "SLURM_JOB_CONSTRAINTS": job.features,
               "SLURM_JOB_RESTART_COUNT": job.restarts}
        return {k: str(v) for k, v in env.items() if v not in (None, "")}

    def node_env(self, job, node: str) -> dict:
        """A node Prolog/Epilog's: the job's variables plus the job's GPUs on that node, as
        global indices (env.md: Prolog/Epilog always get global indices). The node adds
        SLURMD_NODENAME, SLURM_SCRIPT_CONTEXT, SLURM_CLUSTER_NAME and SLURM_CONF."""
        env = self.job_env(job)
        gpus = next((a.gpus for a in job.alloc if a.node == node), None)
        if gpus:
            ids = ",".join(str(g) for g in sorted(gpus))
            for k in ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES",
                      "SLURM_JOB_GPUS"):
                env[k] = ids
        return env

    def ctld_env(self, job, context: str) -> dict:
        """PrologSlurmctld/EpilogSlurmctld's; the epilog's also says how the job ended."""
        env = self.job_env(job)
        env.update(SLURM_JOB_NAME=job.name or "", SLURM_CLUSTER_NAME=self.cfg.cluster_name,
                   SLURM_SCRIPT_CONTEXT=context)
        if job.array_job_id is not None:
            env["SLURM_ARRAY_JOB_ID"] = str(job.array_job_id)
            env["SLURM_ARRAY_TASK_ID"] = str(job.array_task_id)
        if context == "epilog_slurmctld":
            code, sig = int(job.exit_code or 0), int(job.exit_signal or 0)
            env.update(SLURM_JOB_EXIT_CODE=str((code << 8) | sig),
                       SLURM_JOB_EXIT_CODE2=f"{code}:{sig}",
                       SLURM_JOB_DERIVED_EC=str(int(job.derived_exit_code or 0)))
        return env

    # ---- start ----------------------------------------------------------------------------
    def job_started(self, job) -> None:
        """The scheduler started ``job`` (committed): launch it, or run what comes first."""
        alloc_prolog = self.alloc and bool(self.cfg.prolog)
        if not (self.cfg.prolog_slurmctld or alloc_prolog):
            self._open(job)
            return
        self.gates[job.job_id] = {"run": job.restarts, "nodes": None}
        if self.cfg.prolog_slurmctld:
            env = self.ctld_env(job, "prolog_slurmctld")
            self._spawn(self._ctld_prolog(job.job_id, job.restarts, env))
            return
        self._after_ctld(job)

    def gated(self, job_id: int) -> bool:
        """Is the job started but not yet to be launched (its prologs are running)?"""
        return job_id in self.gates

    def _after_ctld(self, job) -> None:
        if self.alloc and self.cfg.prolog:
            nodes = list(dict.fromkeys(a.node for a in job.alloc))
            for n in nodes:
                self.ctl.send_to_node(n, {"op": "prolog", "job_id": job.job_id,
                                          "run": job.restarts, "uid": job.uid, "gid": job.gid,
                                          "prolog_env": self.node_env(job, n)})
            wait = "DEFERBATCH" in self.flags if job.batch else "NOHOLD" not in self.flags
            if wait:
                self.gates[job.job_id]["nodes"] = set(nodes)
                return
        self._open(job)

    def _open(self, job) -> None:
        self.gates.pop(job.job_id, None)
        if job.batch:
            self.ctl.launch(job)
        else:
            self.ctl.steps.notify(job)

    def _live(self, job_id: int, run: int):
        """The job if this run of it is still starting or running (not being torn down)."""
        job = self.ctl.state.jobs.get(job_id)
        if job is None or job.restarts != run or job.state != RUNNING or job.completing:
            return None
        return job

    async def _ctld_prolog(self, job_id: int, run: int, env: dict) -> None:
        res = await run_scripts(self.cfg.prolog_slurmctld, env, timeout_of(self.cfg, "prolog"))
        gate = self.gates.get(job_id)
        job = self._live(job_id, run)
        if job is None or gate is None or gate["run"] != run:
            return
        if res.ok:
            self._after_ctld(job)
            return
        log.error("prolog_slurmctld JobId=%d prolog exit status %s %s", job_id, res.status(),
                  res.detail)
        self.gates.pop(job_id, None)
        if ctld_failure_action(batch=job.batch, requeue=job.requeue) == "requeue":
            self._requeue(job, hold=False, why="PrologSlurmctld failed")
        else:
            self._end(job, "CANCELLED", "None", by_uid=0,
                      why="PrologSlurmctld failed, job killed")

    # ---- reports from the nodes -----------------------------------------------------------
    def decorate(self, node: str, msg: dict) -> dict:
        """A launch on its way to ``node`` gets the job's Prolog environment for that node."""
        if not self.cfg.prolog or msg.get("op") not in ("launch", "launch_step") \
                or "prolog_env" in msg:
            return msg
        job = self.ctl.state.jobs.get(msg.get("job_id"))
        return msg if job is None else {**msg, "prolog_env": self.node_env(job, node)}

    def on_report(self, node, link, msg: dict) -> None:
        """``prolog_done`` / ``epilog_done`` from a node (acknowledged, so it stops repeating)."""
        kind = "prolog" if msg.get("op") == "prolog_done" else "epilog"
        job_id, run = msg.get("job_id"), msg.get("run", 0)
        link.send({"op": "ack_script", "kind": kind, "job_id": job_id, "run": run})
        if not (isinstance(job_id, int) and isinstance(run, int)):
            return
        ok = msg.get("ok") is True
        detail = str(msg.get("detail") or "")[:500]
        if kind == "epilog":
            self._unhold(job_id, run, node.name)
            if not ok:
                self._drain(node, "Epilog error", f"job {job_id}: {detail}")
        elif ok:
            self._node_prolog_ok(job_id, run, node.name)
        else:
            self._node_prolog_failed(node, job_id, run, detail)

    def _node_prolog_ok(self, job_id: int, run: int, node: str) -> None:
        gate = self.gates.get(job_id)
        if gate is None or gate["run"] != run or gate["nodes"] is None:
            return
        gate["nodes"].discard(node)
        job = self._live(job_id, run)
        if not gate["nodes"] and job is not None:
            self._open(job)

    def _node_prolog_failed(self, node, job_id: int, run: int, detail: str) -> None:
        self._drain(node, "Prolog error", f"job {job_id}: {detail}")
        job = self._live(job_id, run)
        if job is None:
            return
        self.gates.pop(job_id, None)
        action, held = prolog_failure_action(batch=job.batch, requeue=job.requeue,
                                             flags=self.flags, nohold=self.nohold)
        if action == "requeue":
            self._requeue(job, hold=held, why=f"prolog failed on {node.name}")
        else:
            self._end(job, "FAILED", "JobLaunchFailure", by_uid=None,
                      why=f"prolog failed on {node.name}")

    def _drain(self, node, reason: str, detail: str) -> None:
        """Drain ``node`` with Slurm's reason, unless it is already drained or down (an
        admin's reason stays)."""
        log.error("%s on node %s: %s", reason, node.name, detail)
        if node.drain or node.down:
            return
        self.ctl.applier.node(
            node, events.NodeDrain(reason, self.cfg.slurm_user or "root", detail), now())

    # ---- what a failure does to the job -----------------------------------------------------
    def _requeue(self, job, *, hold: bool, why: str) -> None:
        """Back to the queue under the same id (the run never started its script)."""
        self.ctl.applier.job(job, events.PrologFailed(why, requeue=True, hold=hold,
                                                      held_desc=HELD_DESC), now())

    def _end(self, job, final_state: str, reason: str, *, by_uid, why: str) -> None:
        """End a job that cannot be requeued; it completes once its nodes confirm."""
        self.ctl.applier.job(job, events.PrologFailed(
            why, requeue=False, final_state=final_state, reason=reason, by_uid=by_uid), now())

    # ---- end ------------------------------------------------------------------------------
    def job_released(self, job, allocs: list[NodeAlloc]) -> None:
        """``ClusterState.release`` gave back the job's resources on ``allocs``' nodes: each
        of them hears the job's end (:meth:`end_on`), and EpilogSlurmctld runs."""
        gate = self.gates.get(job.job_id)
        if gate is not None and gate["run"] == job.restarts:
            del self.gates[job.job_id]
        for a in allocs:
            if self.node_scripts or not (job.batch and a.node == job.batch_host):
                self.end_on(job, a)
        if self.cfg.epilog_slurmctld:
            env = self.ctld_env(job, "epilog_slurmctld")
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            # the caller settles the job's final state right after releasing it
            loop.call_soon(self._epilog_ctld_now, job.job_id, job.restarts, env)

    def end_on(self, job, a: NodeAlloc) -> None:
        """The end-of-job message (module doc) to ``a``'s node for the job's current run; with
        an Epilog configured, ``a``'s resources stay held there until the node reports it."""
        msg = {"op": "epilog", "job_id": job.job_id, "run": job.restarts, "uid": job.uid,
               "gid": job.gid, "prolog_env": self.node_env(job, a.node)}
        node = a.node
        self.ctl.applier.after_commit(lambda: self.ctl.send_to_node(node, msg))
        if self.cfg.epilog:
            self._hold(job.job_id, job.restarts, a, msg)

    def _epilog_ctld_now(self, job_id: int, run: int, env: dict) -> None:
        job = self.ctl.state.jobs.get(job_id)
        if job is not None and job.restarts == run:
            env = self.ctld_env(job, "epilog_slurmctld")
        self._spawn(self._epilog_ctld(job_id, env))

    async def _epilog_ctld(self, job_id: int, env: dict) -> None:
        res = await run_scripts(self.cfg.epilog_slurmctld, env, timeout_of(self.cfg, "epilog"))
        if not res.ok:
            log.error("epilog_slurmctld JobId=%d epilog exit status %s %s", job_id,
                      res.status(), res.detail)

    def _hold(self, job_id: int, run: int, a: NodeAlloc, msg: dict) -> None:
        n = self.ctl.state.nodes.get(a.node)
        key = (job_id, run, a.node)
        if n is None or key in self.holds:
            return
        n.cpus_alloc += a.cpus
        n.mem_alloc += a.mem
        n.gpus_alloc.update(a.gpus)
        n.completing_jobs.add(job_id)
        self.holds[key] = {"alloc": a, "msg": msg, "sent": clock.monotonic()}

    def _unhold(self, job_id: int, run: int, node: str) -> None:
        h = self.holds.pop((job_id, run, node), None)
        n = self.ctl.state.nodes.get(node)
        if h is None or n is None:
            return
        a = h["alloc"]
        n.cpus_alloc = max(0, n.cpus_alloc - a.cpus)
        n.mem_alloc = max(0, n.mem_alloc - a.mem)
        n.gpus_alloc.difference_update(a.gpus)
        if job_id not in n.jobs and not any(k[0] == job_id and k[2] == node for k in self.holds):
            n.completing_jobs.discard(job_id)
        self.ctl.request_schedule()

    def tick(self, t: int) -> None:
        """Periodic: drop epilog holds on DOWN nodes; ask again where an epilog is overdue."""
        mono = clock.monotonic()
        for key, h in list(self.holds.items()):
            n = self.ctl.state.nodes.get(key[2])
            if n is None or n.down:
                self._unhold(*key)
            elif n.connected and mono - h["sent"] > EPILOG_RESEND_S:
                h["sent"] = mono
                self.ctl.send_to_node(key[2], h["msg"])

    # ---- helpers --------------------------------------------------------------------------
    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(self._guard(coro))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _guard(coro) -> None:
        try:
            await coro
        except Exception:  # a bug here must not leave an unretrieved exception behind
            log.exception("prolog/epilog handling failed")
