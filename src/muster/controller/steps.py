"""Job steps and interactive allocations (srun, salloc) in the controller.

* ``allocate``: an allocation without a batch script (srun standalone, salloc). The caller's
  connection is the allocation's lease: when it closes without ``release`` the allocation is
  given back (Slurm uses InactiveLimit for the same purpose; a lease needs no timer).
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
from muster.core.steplayout import AllocNode, StepError, StepRequest, layout
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
        """srun/salloc gives its allocation back; the job ends with the command's status."""
        from muster.lifecycle import job as lifecycle
        st = self.ctl.state
        if job.uid != uid and not self.ctl.is_admin(uid):
            raise AccessDenied()
        if job.batch:
            raise RequestError("not an interactive allocation", "invalid_request")
        if job.state == PENDING:
            lifecycle.cancel_pending(job, by_uid=uid, now=clock.now())
            st.save(job)
            self.notify(job)
            return
        if job.state != RUNNING:
            return
        live = [s for s in self.steps.values() if s.job_id == job.job_id]
        with st.store.transaction():
            if live:
                # steps still report (their daemons are finishing): end when the last one has
                self.ctl.kill_running(job, final_state="COMPLETED" if not (exit_code or signal)
                                      else "FAILED", by_uid=None, why="cancel")
                job.exit_code, job.exit_signal = exit_code, signal
                job.reason = "NonZeroExitCode" if exit_code else ("RaisedSignal" if signal else "None")
                st.save(job)
            else:
                lifecycle.finish(job, exit_code=exit_code, signal=signal, timed_out=False,
                                 now=clock.now())
                st.release(job)
                st.save(job)
            st.event(job, "released", f"exit {exit_code}:{signal}")
        self.ctl.request_schedule()

    # ---- steps -----------------------------------------------------------------------------
    def create(self, job, uid: int, req: dict, io_host: str) -> dict:
        st = self.ctl.state
        if job.uid != uid and not self.ctl.is_admin(uid):
            raise AccessDenied()
        if job.state != RUNNING or job.completing:
            if job.state in TERMINAL or job.completing:
                raise RequestError(None, "already_done")
            raise RequestError("Job is pending execution", "job_pending")
        sreq = _step_request(req)
        cpu_bind = _cpu_bind_spec(req)
        affinity = "task/affinity" in [p.strip() for p in self.ctl.cfg.task_plugin.split(",")]
        used_cpus: dict[str, int] = {}
        used_gpus: dict[str, set] = {}
        for s in self.steps.values():
            if s.job_id != job.job_id or s.overlap:
                continue
            for ns in s.layout.nodes:
                used_cpus[ns.node] = used_cpus.get(ns.node, 0) + ns.cpus
                if ns.task_gpus is not None or req.get("gpus_explicit"):
                    used_gpus.setdefault(ns.node, set()).update(ns.gpus)
        alloc = [AllocNode(a["node"], a["cpus"], tuple(a["gpus"])) for a in job.alloc]
        try:
            lay = layout(alloc, used_cpus, {k: frozenset(v) for k, v in used_gpus.items()}, sreq)
        except StepError as exc:
            code = "busy" if exc.code == "busy" else "bad_node_config"
            raise RequestError(exc.message, code) from None
        step_id = job.next_step_id
        job.next_step_id += 1
        port = self._take_port()
        argv = req.get("argv") or []
        name = req.get("name") or (os.path.basename(argv[0]) if argv else "step")
        step = Step(job.job_id, step_id, job.restarts, name, lay, port, sreq.overlap, uid)
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
        for idx, ns in enumerate(lay.nodes):
            node = st.nodes[ns.node]
            env = dict(common)
            env.update({
                "SLURMD_NODENAME": ns.node, "SLURM_NODEID": str(idx), "SLURM_TOPOLOGY_ADDR": ns.node,
                "SLURM_GTIDS": ",".join(map(str, ns.tasks)),
                "SLURM_CPUS_ON_NODE": str(ns.cpus), "HOSTNAME": ns.node,
            })
            _add_torch(env, torch_vars, {"NODE_RANK": str(idx), "GROUP_RANK": str(idx),
                                         "LOCAL_WORLD_SIZE": str(len(ns.tasks))})
            job_gpus: list[int] = next((a["gpus"] for a in job.alloc if a["node"] == ns.node), [])
            if job_gpus:
                env["SLURM_JOB_GPUS"] = ",".join(map(str, job_gpus))
            if ns.gpus:
                g = ",".join(map(str, ns.gpus))
                env["SLURM_STEP_GPUS"] = g
                env["SLURM_GPUS_ON_NODE"] = str(len(ns.gpus))
                for var in ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES",
                            "ZE_AFFINITY_MASK"):
                    env[var] = g
            msg = {
                "op": "launch_step", "job_id": job.job_id, "step_id": step_id, "run": job.restarts,
                "uid": job.uid, "gid": job.gid, "groups": list(job.groups), "user": job.user,
                "job_name": job.name, "cwd": req.get("cwd") or job.work_dir, "argv": argv,
                "env": env, "tasks": list(ns.tasks),
                "task_gpus": [list(t) for t in ns.task_gpus] if ns.task_gpus else None,
                "io": io, "stdin_target": req.get("stdin_target", 0),
                "output": req.get("output"), "error": req.get("error"), "input": req.get("input"),
                "error_to_output": req.get("error") is None and req.get("output") is not None,
                "open_mode": req.get("open_mode"), "umask": req.get("umask", job.umask),
                "kill_wait": max(1, self.ctl.cfg.kill_wait), "node_index": idx,
                "array_job_id": job.array_job_id, "array_task_id": job.array_task_id,
                "torch_vars": list(torch_vars), "pty": bool(req.get("pty")),
                "cpu_bind": cpubind.effective(cpu_bind, affinity, ns.cpus, len(ns.tasks),
                                              sreq.cpus_per_task),
                "cpus_per_task": sreq.cpus_per_task,
                "node_alloc": node_alloc(job, ns.node),
            }
            self.ctl.send_to_node(node.name, msg)
        return {"step_id": step_id, "key": key, "nodes": nodes_expr, "ntasks": lay.ntasks,
                "layout": [{"node": ns.node, "tasks": list(ns.tasks)} for ns in lay.nodes],
                "master_addr": first.conf.addr, "master_port": port}

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
            "SLURM_JOB_CPUS_PER_NODE": compress_counts([a["cpus"] for a in job.alloc]),
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
        """Signal a running job's processes (``scancel --signal``, ``--signal`` warnings).

        ``scope``: ``steps`` (scancel's default, and ``--signal`` without ``B:``): the tasks of
        every running step, on every node, not the batch shell; ``batch`` (``-b``, ``B:``):
        the batch shell alone, not its children; ``full`` (``-f``): the batch shell's whole
        process group and every step. The message goes to each node of the allocation (and the
        batch host), whose agent signals what of the job runs there: the steps a node runs are
        its own knowledge, which survives a controller restart (this manager's step table does
        not). ``cont``: SIGCONT first, as Slurm does before a ``--signal`` warning."""
        if scope == "batch":
            nodes = [job.batch_host] if job.batch and job.batch_host else []
        else:
            nodes = list(dict.fromkeys(([job.batch_host] if job.batch_host else [])
                                       + [a["node"] for a in job.alloc]))
        for n in nodes:
            self.ctl.send_to_node(n, {"op": "signal", "job_id": job.job_id, "run": job.restarts,
                                      "signal": sig, "scope": scope, "cont": cont})

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

    def _warn_steps(self, job, spec: dict) -> None:
        job.signal_spec = {**spec, "warned": job.restarts}
        self.ctl.state.save(job)
        self.ctl.state.event(job, "signal_warning",
                             f"signal {spec.get('signal')} to steps, {spec.get('secs', 60)} s left")
        self.signal_job(job, spec.get("signal", 10), "steps", cont=True)

    def _end_steps(self, job, why: str) -> None:
        for n in dict.fromkeys(a["node"] for a in job.alloc):
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
        if step is None or node not in step.nodes or node in step.reports:
            return
        step.reports[node] = rep
        if len(step.reports) < len(step.nodes):
            return
        self._finish(step)

    def _finish(self, step: Step) -> None:
        st = self.ctl.state
        del self.steps[(step.job_id, step.step_id)]
        self.ports_used.discard(step.port)
        tasks = [t for r in step.reports.values() for t in r.get("tasks", [])]
        exit_code = max((t["exit_code"] for t in tasks), default=0)
        sig = max((t["signal"] for t in tasks), default=0)
        terminated = any(r.get("terminated") for r in step.reports.values())
        lost = any(r.get("lost") for r in step.reports.values())
        oom = any(r.get("oom_kills") for r in step.reports.values())
        if lost:
            state = "NODE_FAIL"
        elif terminated:
            state = "CANCELLED"
        elif oom:  # the OOM killer struck in the step's cgroup: 0:125, as Slurm reports it
            state, exit_code, sig = "OUT_OF_MEMORY", 0, 125
        elif sig in (9, 15):
            state = "CANCELLED"
        elif sig or exit_code:
            state = "FAILED"
        else:
            state = "COMPLETED"
        job = st.jobs.get(step.job_id)
        if job is None:
            return
        rec = self._record(job, step, {"state": state, "exit_code": exit_code, "exit_signal": sig,
                                       "end_time": max((r.get("end_time") or 0)
                                                       for r in step.reports.values())
                                       or clock.now()})
        with st.store.transaction():
            st.store.put_step(job.job_id, str(step.step_id), rec)
            self.ctl.usage.finish(job.job_id, step.step_id,
                                  {n: r.get("usage") for n, r in step.reports.items()})
            if (exit_code, sig) > (job.derived_exit_code, job.derived_exit_signal):
                job.derived_exit_code, job.derived_exit_signal = exit_code, sig
                st.save(job)
            # an interactive allocation being torn down ends when its last step is gone
            if not job.batch and job.completing and not any(
                    s.job_id == job.job_id for s in self.steps.values()):
                from muster.lifecycle import job as lifecycle
                lifecycle.finish(job, exit_code=job.exit_code, signal=job.exit_signal,
                                 timed_out=False, now=clock.now())
                st.release(job)
                st.save(job)
                self.ctl.request_schedule()
        if not job.batch and job.terminal:
            self.notify(job)
        self.ctl.request_schedule()

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
    a = next((a for a in job.alloc if a["node"] == node), None) or {}
    return {"cpus": a.get("cpus"), "mem": a.get("mem"), "gpus": list(a.get("gpus") or [])}


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
    dist = req.get("distribution") or "block"
    if not isinstance(dist, str) or dist.split(":")[0] not in ("block", "cyclic", "arbitrary", "plane"):
        raise RequestError("Invalid distribution", "invalid_request")
    return StepRequest(ntasks=num("ntasks"), nodes_min=num("nodes_min"), nodes_max=num("nodes_max"),
                       ntasks_per_node=num("ntasks_per_node"), cpus_per_task=num("cpus_per_task") or 1,
                       gpus_per_task=num("gpus_per_task"), gpus_per_node=num("gpus_per_node"),
                       gpus=num("gpus"), nodelist=nodelist, exclude=exclude,
                       distribution=dist.split(":")[0], overlap=bool(req.get("overlap")),
                       gpu_bind=req.get("gpu_bind"))

