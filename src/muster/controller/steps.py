"""Job steps and interactive allocations (srun, salloc) in the controller.

* ``allocate``: an allocation without a batch script (srun standalone, salloc). The caller's
  connection is the allocation's lease: when it closes without ``release`` the allocation is
  given back (Slurm uses InactiveLimit for the same purpose; a lease needs no timer). After a
  controller restart or take-over the client re-attaches it (``lease``; leases.py).
* ``step_create``: lay a step out inside a running allocation (muster.core.steplayout), record
  it, and send it to all its nodes at once — every agent link is written in the same loop
  iteration, so a 256-node step costs one pass, not 256 round trips.
* ``step_ended`` (from agents): one report per node; when every node has reported, the step's
  accounting row (``N.S``) is final and its CPUs/GPUs return to the allocation.

Ports: MASTER_PORT comes from a cluster-wide pool (``MpiParams=ports=A-B``, default
20000-29999); every running step holds one, so two steps never race for a port even when
emulated nodes share one host.
"""

from __future__ import annotations

import asyncio
import os
import secrets

from muster.common import clock, cpubind
from muster.common.errors import AccessDenied, InvalidJobId, RequestError
from muster.common.hostlist import compress_counts, expand
from muster.common.torchenv import user_env_for_step
from muster.controller import step_orphans
from muster.controller.leases import Leases
from muster.core.steplayout import AllocNode, StepError, StepRequest, layout
from muster.lifecycle import events, jobfsm
from muster.model.job import PENDING, RUNNING, TERMINAL


class Step:
    __slots__ = ("job_id", "step_id", "run", "name", "nodes", "layout", "reports", "start_time",
                 "port", "overlap", "state", "ntasks", "uid", "dist", "srun_host", "srun_pid")

    def __init__(self, job_id, step_id, run, name, lay, port, overlap, uid):
        self.job_id, self.step_id, self.run, self.name = job_id, step_id, run, name
        self.layout = lay
        self.nodes = [n.node for n in lay.nodes]
        self.reports: dict[str, dict] = {}
        self.start_time = clock.now()
        self.port = port
        self.overlap = overlap
        self.state = RUNNING
        self.ntasks = lay.ntasks
        self.uid = uid
        # scontrol show step's Dist= and SrunHost:Pid= (set by create)
        self.dist, self.srun_host, self.srun_pid = "block", "", 0


class StepManager:
    def __init__(self, ctl):
        self.ctl = ctl
        self.steps: dict[tuple[int, int], Step] = {}
        self.waiters: dict[int, list[asyncio.Future]] = {}
        mpi = (getattr(ctl.cfg, "raw", {}) or {}).get("MpiParams", "")
        lo, hi = 20000, 29999
        if "ports=" in mpi:
            try:
                a, b = mpi.split("ports=", 1)[1].split(",")[0].split("-")
                lo, hi = int(a), int(b)
            except ValueError:
                pass
        self.port_range = (lo, hi)
        self.ports_used: set[int] = set()
        self._next_port = lo
        self._limit_sent: set[tuple[int, int]] = set()  # (job, run): steps told of the limit
        self.leases = Leases(ctl)  # who holds each srun/salloc allocation (leases.py)

    # ---- allocations -----------------------------------------------------------------------
    def notify(self, job) -> None:
        """A job started or ended: wake the srun/salloc waiting for it."""
        for fut in self.waiters.pop(job.job_id, []):
            if not fut.done():
                fut.set_result(job)

    async def wait_alloc(self, job_id: int, timeout: float):
        job = self.ctl.state.jobs.get(job_id)
        if job is None:
            raise InvalidJobId()
        prologs = getattr(self.ctl, "prologs", None)
        gated = prologs.gated if prologs is not None else (lambda _jid: False)
        if job.state != PENDING and not gated(job_id):
            return job  # started, and its prologs (muster.controller.prologs) are done
        while True:
            fut = asyncio.get_running_loop().create_future()
            self.waiters.setdefault(job_id, []).append(fut)
            try:
                # a started job whose prologs run is not granted yet: no timeout then (the
                # prologs' own timeouts bound the wait; the gate's opening notifies us)
                return await asyncio.wait_for(fut, None if gated(job_id) else timeout)
            except TimeoutError:
                if not gated(job_id):
                    return self.ctl.state.jobs.get(job_id)

    def release(self, job, uid: int, exit_code: int, signal: int) -> None:
        """srun/salloc gives its allocation back; the job ends with the command's status
        (``ReleaseAllocation``: at once, or when its last live step has reported)."""
        if job.uid != uid and not self.ctl.is_admin(uid):
            raise AccessDenied()
        if job.batch:
            raise RequestError("not an interactive allocation", "invalid_request")
        live = any(s.job_id == job.job_id for s in self.steps.values())
        try:
            self.ctl.applier.job(job, events.ReleaseAllocation(uid, exit_code, signal, live),
                                 clock.now())
        except jobfsm.Refused:
            pass  # already ending or ended

    # ---- steps -----------------------------------------------------------------------------
    def create(self, job, uid: int, req: dict, io_host: str) -> dict:
        """A new step of a running allocation (srun): lay its tasks out on the job's nodes
        beside the steps already running, record it, send each node its ``launch_step``.
        Returns what srun needs: the step id, the I/O stream's key, the layout."""
        st = self.ctl.state
        _check_may_step(self.ctl, job, uid)
        sreq = _step_request(req)
        alloc = [AllocNode(a.node, a.cpus, tuple(a.gpus)) for a in job.alloc]
        used_cpus, used_gpus = self._in_use(job, req)
        try:
            lay = layout(alloc, used_cpus, used_gpus, sreq)
        except StepError as exc:
            code = "busy" if exc.code == "busy" else "bad_node_config"
            raise RequestError(exc.message, code) from None
        extras = launch_fields(req, lay.ntasks, getattr(self.ctl.cfg, "raw", {}) or {})
        step_id = job.next_step_id
        job.next_step_id += 1
        argv = req.get("argv") or []
        name = req.get("name") or (os.path.basename(argv[0]) if argv else "step")
        step = Step(job.job_id, step_id, job.restarts, name, lay, self._take_port(), sreq.overlap,
                    uid)
        step.dist = sreq.distribution
        step.srun_host = (req.get("srun_host") or _host_name(io_host))[:256]
        step.srun_pid = req.get("srun_pid") or 0
        self.steps[(job.job_id, step_id)] = step
        key = secrets.token_hex(32)  # K of the step's I/O stream (iostream): srun and the nodes only
        nodes_expr = st.node_list_of(step.nodes)
        with st.store.transaction():
            st.save(job)
            st.store.put_step(job.job_id, str(step_id), self._record(job, step))
            st.event(job, "step_started", f"step {step_id} on {nodes_expr}")
        first = st.nodes[step.nodes[0]]
        io = {"host": io_host, "port": req.get("io_port"), "key": key} if req.get("io_port") else None
        common, torch_vars = self.step_env(job, step, req, nodes_expr,
                                           first.conf.addr or "127.0.0.1")
        # srun's host as its tasks see it: the address the step daemons reach srun at
        common["SLURM_LAUNCH_NODE_IPADDR"] = common["SLURM_SRUN_COMM_HOST"] = io_host
        base = self._launch_base(job, step, req, sreq, io, torch_vars)
        for idx, ns in enumerate(lay.nodes):
            msg = dict(base)
            msg.update(env=_node_env(common, torch_vars, job, ns, idx), tasks=list(ns.tasks),
                       task_gpus=[list(t) for t in ns.task_gpus] if ns.task_gpus else None,
                       node_index=idx, node_alloc=node_alloc(job, ns.node),
                       cpu_bind=cpubind.effective(base["cpu_bind"], self._affinity(), ns.cpus,
                                                  len(ns.tasks), sreq.cpus_per_task),
                       **_node_extras(extras, ns.tasks))
            self.ctl.send_to_node(st.nodes[ns.node].name, msg)
        return {"step_id": step_id, "key": key, "nodes": nodes_expr, "ntasks": lay.ntasks,
                "layout": [{"node": ns.node, "tasks": list(ns.tasks)} for ns in lay.nodes],
                "master_addr": first.conf.addr, "master_port": step.port,
                "job_nodes": job.node_list, "job_cpus": [a.cpus for a in job.alloc],
                "kill_wait": self.ctl.cfg.kill_wait}  # srun -W's "Waiting up to" line

    def _affinity(self) -> bool:
        return "task/affinity" in [p.strip() for p in self.ctl.cfg.task_plugin.split(",")]

    def _in_use(self, job, req: dict) -> tuple[dict[str, int], dict[str, frozenset]]:
        """CPUs and GPUs of the job's nodes held by its running steps (``--overlap`` steps
        hold nothing); GPUs count only when those steps or this one bound GPUs per task or
        asked for them explicitly."""
        used_cpus: dict[str, int] = {}
        used_gpus: dict[str, set] = {}
        for s in self.steps.values():
            if s.job_id != job.job_id or s.overlap:
                continue
            for ns in s.layout.nodes:
                used_cpus[ns.node] = used_cpus.get(ns.node, 0) + ns.cpus
                if ns.task_gpus is not None or req.get("gpus_explicit"):
                    used_gpus.setdefault(ns.node, set()).update(ns.gpus)
        return used_cpus, {k: frozenset(v) for k, v in used_gpus.items()}

    def _launch_base(self, job, step, req: dict, sreq, io, torch_vars) -> dict:
        """The part of a ``launch_step`` message that is the same on every node (``cpu_bind``
        holds the requested binding until each node's is computed)."""
        return {
            "op": "launch_step", "job_id": job.job_id, "step_id": step.step_id,
            "run": job.restarts, "uid": job.uid, "gid": job.gid, "groups": list(job.groups),
            "user": job.user, "job_name": job.name, "cwd": req.get("cwd") or job.work_dir,
            "argv": req.get("argv") or [], "io": io, "stdin_target": req.get("stdin_target", 0),
            "output": req.get("output"), "error": req.get("error"), "input": req.get("input"),
            "error_to_output": req.get("error") is None and req.get("output") is not None,
            "open_mode": req.get("open_mode"), "umask": req.get("umask", job.umask),
            "kill_wait": max(1, self.ctl.cfg.kill_wait),
            "array_job_id": job.array_job_id, "array_task_id": job.array_task_id,
            "torch_vars": list(torch_vars), "pty": bool(req.get("pty")),
            "cpu_bind": _cpu_bind_spec(req), "cpus_per_task": sreq.cpus_per_task,
        }

    def step_env(self, job, step, req: dict, nodes_expr: str,
                 master_addr: str) -> tuple[dict, tuple[str, ...]]:
        """The environment common to all the step's tasks, and the PyTorch variables Muster
        adds (torchenv.user_env_for_step: only those absent from srun's environment; the rest
        of them are set per node here and per task by the step daemon). SLURM_* variables are
        always the step's, replacing those srun inherited from its job or an outer step."""
        base, torch_vars = user_env_for_step(req.get("env") or {})
        counts = compress_counts(step.layout.tasks_per_node)
        cfg = self.ctl.cfg
        s = {
            "SLURM_JOB_ID": str(job.job_id), "SLURM_JOBID": str(job.job_id),
            "SLURM_JOB_NAME": job.name, "SLURM_JOB_NODELIST": job.node_list or nodes_expr,
            "SLURM_JOB_NUM_NODES": str(job.num_nodes),
            "SLURM_JOB_CPUS_PER_NODE": compress_counts([a.cpus for a in job.alloc]),
            "SLURM_JOB_ACCOUNT": job.account, "SLURM_JOB_PARTITION": job.partition,
            "SLURM_JOB_QOS": job.qos, "SLURM_JOB_UID": str(job.uid), "SLURM_JOB_USER": job.user,
            "SLURM_JOB_GID": str(job.gid), "SLURM_CLUSTER_NAME": cfg.cluster_name,
            "SLURM_CONF": cfg.path, "MUSTER_CONF": cfg.path,
            "SLURM_STEP_ID": str(step.step_id), "SLURM_STEPID": str(step.step_id),
            "SLURM_STEP_NODELIST": nodes_expr, "SLURM_NODELIST": nodes_expr,
            "SLURM_NNODES": str(len(step.nodes)), "SLURM_STEP_NUM_NODES": str(len(step.nodes)),
            "SLURM_STEP_NUM_TASKS": str(step.ntasks), "SLURM_NTASKS": str(step.ntasks),
            "SLURM_NPROCS": str(step.ntasks), "SLURM_STEP_TASKS_PER_NODE": counts,
            "SLURM_TASKS_PER_NODE": counts, "SLURM_DISTRIBUTION": req.get("distribution") or "block",
            "SLURM_SUBMIT_DIR": job.submit_dir or job.work_dir, "SLURM_SUBMIT_HOST": job.submit_host,
            "SLURM_UMASK": f"{req.get('umask', job.umask):04o}",
            "SLURM_JOB_START_TIME": str(job.start_time or 0),
            "SLURM_JOB_END_TIME": str(job.end_time or 0),
            "SLURM_PRIO_PROCESS": "0", "SLURM_TOPOLOGY_ADDR_PATTERN": "node",
        }
        if req.get("io_port"):
            s["SLURM_SRUN_COMM_PORT"] = str(req["io_port"])
        if req.get("label"):
            s["SLURM_LABELIO"] = "1"
        if req.get("cpus_per_task"):
            s["SLURM_CPUS_PER_TASK"] = str(req["cpus_per_task"])
        if req.get("ntasks_per_node"):
            s["SLURM_NTASKS_PER_NODE"] = str(req["ntasks_per_node"])
        if req.get("overcommit"):
            s["SLURM_OVERCOMMIT"] = "1"
        else:
            base.pop("SLURM_OVERCOMMIT", None)  # the job's, which this step did not take up
        if job.restarts:
            s["SLURM_RESTART_COUNT"] = str(job.restarts)
        if job.array_job_id is not None and job.array_task_id is not None:
            spec = job.array_spec or {}
            s.update({"SLURM_ARRAY_JOB_ID": str(job.array_job_id),
                      "SLURM_ARRAY_TASK_ID": str(job.array_task_id),
                      "SLURM_ARRAY_TASK_COUNT": str(spec.get("count", 1)),
                      "SLURM_ARRAY_TASK_MIN": str(spec.get("min", job.array_task_id)),
                      "SLURM_ARRAY_TASK_MAX": str(spec.get("max", job.array_task_id)),
                      "SLURM_ARRAY_TASK_STEP": str(spec.get("step", 1))})
        for k in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL",
                  "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK", "SLURM_GPUS_ON_NODE"):
            base.pop(k, None)  # the submitter's (or the batch step's) values do not apply here
        base.update(s)
        _add_torch(base, torch_vars, {"MASTER_ADDR": master_addr, "MASTER_PORT": str(step.port),
                                      "WORLD_SIZE": str(step.ntasks)})
        return base, torch_vars

    def _record(self, job, step: Step, final: dict | None = None) -> dict:
        cpus = sum(ns.cpus for ns in step.layout.nodes)
        gpus = sum(len(ns.gpus) for ns in step.layout.nodes)
        from muster.common.units import tres_string
        rec = {"job_id": job.job_id, "step_id": step.step_id, "name": step.name,
               "state": RUNNING, "exit_code": 0, "exit_signal": 0, "start_time": step.start_time,
               "end_time": None, "node_list": self.ctl.state.node_list_of(step.nodes),
               "num_nodes": len(step.nodes), "num_cpus": cpus, "num_tasks": step.ntasks,
               "tres_alloc": tres_string(cpus, 0, len(step.nodes), None,
                                         {"gres/gpu": gpus} if gpus else {})}
        if final:
            rec.update(final)
        return rec

    def _take_port(self) -> int:
        lo, hi = self.port_range
        for _ in range(hi - lo + 1):
            p = self._next_port
            self._next_port = lo if p >= hi else p + 1
            if p not in self.ports_used:
                self.ports_used.add(p)
                return p
        raise RequestError("no free step ports (MpiParams=ports)", "busy")

    # ---- signals and the job's clock (Slurm 23.11 semantics) -------------------------------
    def signal_job(self, job, sig: int, scope: str, cont: bool = False) -> None:
        """Signal a running job's processes (``scancel --signal``, ``--signal`` warnings): the
        job machine's ``SignalJob`` names the nodes (every node of the allocation and the batch
        host; the batch host alone for ``batch``), the applier sends each its message.

        ``scope``: ``steps`` (scancel's default, and ``--signal`` without ``B:``): the tasks of
        every running step, not the batch shell; ``batch`` (``-b``, ``B:``): the batch shell
        alone, not its children; ``full`` (``-f``): the batch shell's whole process group and
        every step. Each agent signals what of the job runs on its node: the steps a node runs
        are its own knowledge, which survives a controller restart (this manager's step table
        does not). ``cont``: SIGCONT first, as Slurm does before a ``--signal`` warning. A job
        that is not running is left alone."""
        try:
            self.ctl.applier.job(job, events.SignalJob(sig, scope, cont), clock.now())
        except jobfsm.Refused:
            pass

    def tick(self, t: int) -> None:
        """The job clock's duties towards steps, once a second (the controller's periodic
        pass). A job's steps run on all its nodes, and the batch supervisor knows only its own
        node, so the controller — which holds every job's end time, including a limit changed
        by ``scontrol update`` — is where they are decided:

        * ``--signal=SIG@T`` without ``B:``: once ``end_time - T`` is reached, SIGCONT then SIG
          to the tasks of the steps running *at that moment* on every node. Sent once per run
          (the mark is stored in ``signal_spec["warned"]`` = the run number, so a restarted
          controller does not send it again, and a requeue re-arms it); with no step running
          nothing is signalled and a later step gets nothing, as in Slurm. ``B:`` is the batch
          supervisor's (it signals the shell alone, on its node).
        * the time limit of a batch job: its supervisor sends SIGTERM to the batch shell's
          process group; here every node is told to end the job's steps ``DUE TO TIME LIMIT``
          (SIGCONT+SIGTERM to their tasks, SIGKILL after KillWait), so tasks that are not
          srun's children on the batch node get SIGTERM at the limit too. Interactive
          allocations are timed out whole by ``enforce_interactive_limits``."""
        past_limit = set()
        for job in self.ctl.state.jobs.values():
            if job.state != RUNNING or job.completing or job.end_time is None:
                continue
            spec = job.signal_spec
            if spec and not spec.get("batch") and spec.get("warned") != job.restarts \
                    and t >= job.end_time - spec.get("secs", 60):
                self._warn_steps(job, spec)
            if job.batch and t >= job.end_time:
                key = (job.job_id, job.restarts)
                past_limit.add(key)
                if key not in self._limit_sent:
                    self._end_steps(job, "timeout")
        self._limit_sent = past_limit
        self.leases.tick()  # allocations whose client did not re-attach after our start

    def _warn_steps(self, job, spec: dict) -> None:
        job.signal_spec = {**spec, "warned": job.restarts}
        self.ctl.state.save(job)
        self.ctl.state.event(job, "signal_warning",
                             f"signal {spec.get('signal')} to steps, {spec.get('secs', 60)} s left")
        self.signal_job(job, spec.get("signal", 10), "steps", cont=True)

    def _end_steps(self, job, why: str) -> None:
        for n in dict.fromkeys(a.node for a in job.alloc):
            self.ctl.send_to_node(n, {"op": "terminate", "job_id": job.job_id,
                                      "run": job.restarts, "why": why, "scope": "steps"})

    def signal(self, job, uid: int, step_id: int | None, sig: int) -> None:
        if job.uid != uid and not self.ctl.is_admin(uid):
            raise AccessDenied()
        for s in list(self.steps.values()):
            if s.job_id == job.job_id and (step_id is None or s.step_id == step_id):
                for n in s.nodes:
                    self.ctl.send_to_node(n, {"op": "signal_step", "job_id": s.job_id,
                                              "step_id": s.step_id, "run": s.run, "signal": sig})

    def kill_step(self, step: Step, sig: int | None) -> None:
        """``scancel J.S`` (controller.stepkill), to every node of the step and nothing else
        of the job. No signal, or SIGKILL (Slurm's scancel sends a cancel as SIGKILL): end it
        as a cancel ends a job's steps — ``terminate`` with the step id: ``*** STEP … CANCELLED
        ***``, SIGCONT+SIGTERM, SIGKILL after KillWait, record CANCELLED. Any other signal:
        to its running tasks' process groups (``signal_step``)."""
        ids = {"job_id": step.job_id, "step_id": step.step_id, "run": step.run}
        if sig is None or sig == 9:
            msg = {"op": "terminate", **ids, "why": "cancel"}
        else:
            msg = {"op": "signal_step", **ids, "signal": sig}
        for n in step.nodes:
            self.ctl.send_to_node(n, dict(msg))

    def node_report(self, node: str, rep: dict) -> None:
        """One node's report of a step's end."""
        key: tuple = (rep.get("job_id"), rep.get("step_id"))  # as reported: may match nothing
        step = self.steps.get(key)
        if step is None:  # begun under an earlier controller process: its stored row
            step_orphans.report(self.ctl, node, rep)
            return
        if node not in step.nodes or node in step.reports:
            return
        step.reports[node] = rep
        if len(step.reports) < len(step.nodes):
            return
        self._finish(step)

    def _finish(self, step: Step) -> None:
        st = self.ctl.state
        del self.steps[(step.job_id, step.step_id)]
        self.ports_used.discard(step.port)
        state, exit_code, sig = step_orphans.step_outcome(list(step.reports.values()))
        job = st.jobs.get(step.job_id)
        if job is None:
            return
        rec = self._record(job, step, {"state": state, "exit_code": exit_code, "exit_signal": sig,
                                       "end_time": max((r.get("end_time") or 0)
                                                       for r in step.reports.values())
                                       or clock.now()})
        why = next((r["launch_error"] for r in step.reports.values()
                    if isinstance(r.get("launch_error"), str)), None)
        with self.ctl.applier.transaction():  # one commit; the wake-ups leave after it
            if why:
                self._launch_failed(job, step, rec, why[:1000])
            st.store.put_step(job.job_id, str(step.step_id), rec)
            self.ctl.usage.finish(job.job_id, step.step_id,
                                  {n: r.get("usage") for n, r in step.reports.items()})
            if (exit_code, sig) > (job.derived_exit_code, job.derived_exit_signal):
                job.derived_exit_code, job.derived_exit_signal = exit_code, sig
                st.save(job)
            # an interactive allocation being torn down ends when its last step is gone
            drained = not job.batch and job.completing and not any(
                s.job_id == job.job_id for s in self.steps.values())
            if drained:
                self.ctl.applier.job(job, events.StepsDrained(), clock.now())  # wakes srun
        if not drained and not job.batch and job.terminal:
            self.notify(job)
        self.ctl.request_schedule()

    def _launch_failed(self, job, step: Step, rec: dict, why: str) -> None:
        """Tasks of the step could not start (a container, the step's cgroup): the reason
        goes to the step's record, the job's event log and, while the job runs, its
        SystemComment (scontrol), as the batch step's own launch failure does. The text is
        the node's report; a container's part of it comes from the job's own runner, so it
        only ever describes this job."""
        rec["launch_error"] = why
        self.ctl.state.event(job, "step_launch_failed", f"step {step.step_id}: {why[:200]}")
        if not job.terminal or job.completing:
            job.system_comment = f"step {step.step_id}: {why}"
            self.ctl.state.save(job)

    def forget_job(self, job_id: int) -> None:
        """The allocation is gone (ended, node failure): its steps cannot report any more."""
        for key in [k for k in self.steps if k[0] == job_id]:
            step = self.steps[key]
            for n in step.nodes:
                step.reports.setdefault(n, {"tasks": [], "lost": True})
            self._finish(step)


def node_alloc(job, node: str) -> dict:
    """What the job holds on ``node`` (CPUs, memory in MB, GPU indices): the agent confines
    the job's processes there to it (muster.agent.confine)."""
    a = next((a for a in job.alloc if a.node == node), None)
    if a is None:
        return {"cpus": None, "mem": None, "gpus": []}
    return {"cpus": a.cpus, "mem": a.mem, "gpus": list(a.gpus)}


def _host_name(addr: str) -> str:
    """srun's host as scontrol show step names it: this host's short name for a local srun
    (loopback or the Unix socket), else the address it connected from."""
    if addr.startswith("127.") or addr in ("::1", "localhost"):
        import socket
        return socket.gethostname().split(".")[0]
    return addr


def _add_torch(env: dict, torch_vars, values: dict) -> None:
    """Set those of ``values`` that Muster adds for this step (``torch_vars``); the others
    were set by the user and stay as they are."""
    for name, value in values.items():
        if name in torch_vars:
            env[name] = value


def launch_fields(req: dict, ntasks: int, conf: dict) -> dict:
    """The srun-side launch fields of a step request, checked (RequestError refuses the step;
    nothing here is trusted): each task's argv (--multi-prog: one per task of the layout),
    the user's --task-prolog/--task-epilog (paths the step daemon runs as the user, never as
    root), -o/-e task ids, and srun's soft limits kept to those propagated — --propagate's
    names, else slurm.conf's PropagateResourceLimits less PropagateResourceLimitsExcept
    (``rlimits_explicit``: the names the user asked for, whose failures are reported)."""
    from muster.common import rlimits
    out: dict = {}
    argv = req.get("task_argv")
    if argv is not None:
        if not (isinstance(argv, list) and len(argv) == ntasks and all(
                isinstance(a, list) and 0 < len(a) <= 4096
                and all(isinstance(w, str) and len(w) <= 65536 for w in a) for a in argv)):
            raise RequestError("invalid --multi-prog task list", "invalid_request")
        out["task_argv"] = argv
    for key in ("task_prolog", "task_epilog"):
        path = req.get(key)
        if path is not None:
            if not isinstance(path, str) or not path or len(path) > 4096 or "\0" in path:
                raise RequestError(f"invalid --{key.replace('_', '-')}", "invalid_request")
            out["user_" + key] = path
    for key in ("output_task", "error_task"):
        tid = req.get(key)
        if tid is not None:
            if isinstance(tid, bool) or not isinstance(tid, int) or not 0 <= tid < 1 << 20:
                raise RequestError(f"invalid {key}", "invalid_request")
            out[key] = tid
    prop = req.get("propagate")
    if prop is not None and not isinstance(prop, str):
        raise RequestError("invalid --propagate", "invalid_request")
    names = rlimits.selected(prop, conf.get("PropagateResourceLimits"),
                             conf.get("PropagateResourceLimitsExcept"))
    out["rlimits"] = {k: v for k, v in rlimits.clean(req.get("rlimits")).items() if k in names}
    out["rlimits_explicit"] = sorted(names) if prop is not None else []
    return out


def _node_extras(extras: dict, tasks) -> dict:
    """One node's share of :func:`launch_fields`: the argv of its own tasks only."""
    out = {k: v for k, v in extras.items() if k != "task_argv"}
    if "task_argv" in extras:
        out["task_argv"] = [extras["task_argv"][t] for t in tasks]
    return out


def _cpu_bind_spec(req: dict) -> str | None:
    """The step's --cpu-bind as sent by srun (checked there; checked again here)."""
    spec = req.get("cpu_bind")
    if spec is None:
        return None
    try:
        if not isinstance(spec, str) or len(spec) > 4096:
            raise ValueError("invalid --cpu-bind")
        cpubind.parse(spec)
    except ValueError as exc:
        raise RequestError(str(exc), "invalid_request") from None
    return spec


def _check_may_step(ctl, job, uid: int) -> None:
    """Only the owner (or an operator) starts steps, and only in a running allocation."""
    if job.uid != uid and not ctl.is_admin(uid):
        raise AccessDenied()
    if job.state != RUNNING or job.completing:
        if job.state in TERMINAL or job.completing:
            raise RequestError(None, "already_done")
        raise RequestError("Job is pending execution", "job_pending")


def _node_env(common: dict, torch_vars, job, ns, idx: int) -> dict:
    """The step's environment on its ``idx``-th node: the node's name and rank, its tasks'
    global ids, CPUs, and the GPUs of the job and of the step there."""
    env = dict(common)
    env.update({
        "SLURMD_NODENAME": ns.node, "SLURM_NODEID": str(idx), "SLURM_TOPOLOGY_ADDR": ns.node,
        "SLURM_GTIDS": ",".join(map(str, ns.tasks)),
        "SLURM_CPUS_ON_NODE": str(ns.cpus), "HOSTNAME": ns.node,
    })
    _add_torch(env, torch_vars, {"NODE_RANK": str(idx), "GROUP_RANK": str(idx),
                                 "LOCAL_WORLD_SIZE": str(len(ns.tasks))})
    job_gpus: list[int] = next((a.gpus for a in job.alloc if a.node == ns.node), [])
    if job_gpus:
        env["SLURM_JOB_GPUS"] = ",".join(map(str, job_gpus))
    if ns.gpus:
        g = ",".join(map(str, ns.gpus))
        env["SLURM_STEP_GPUS"] = g
        env["SLURM_GPUS_ON_NODE"] = str(len(ns.gpus))
        for var in ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES",
                    "ZE_AFFINITY_MASK"):
            env[var] = g
    return env


def _step_request(req: dict) -> StepRequest:
    def num(k):
        v = req.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0 or v > 1 << 20):
            raise RequestError(f"invalid {k}", "invalid_request")
        return v
    nodelist: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    try:
        if req.get("nodelist"):
            nodelist = tuple(expand(req["nodelist"]))
        if req.get("exclude"):
            exclude = tuple(expand(req["exclude"]))
    except Exception:
        raise RequestError(None, "invalid_nodelist") from None
    if req.get("overcommit") not in (None, False, True):
        raise RequestError("invalid overcommit", "invalid_request")
    dist = req.get("distribution") or "block"
    if not isinstance(dist, str) or dist.split(":")[0] not in ("block", "cyclic", "arbitrary", "plane"):
        raise RequestError("Invalid distribution", "invalid_request")
    return StepRequest(ntasks=num("ntasks"), nodes_min=num("nodes_min"), nodes_max=num("nodes_max"),
                       ntasks_per_node=num("ntasks_per_node"), cpus_per_task=num("cpus_per_task") or 1,
                       gpus_per_task=num("gpus_per_task"), gpus_per_node=num("gpus_per_node"),
                       gpus=num("gpus"), nodelist=nodelist, exclude=exclude,
                       distribution=dist.split(":")[0], overlap=bool(req.get("overlap")),
                       overcommit=bool(req.get("overcommit")),
                       gpu_bind=req.get("gpu_bind"), relative=num("relative") or 0)

