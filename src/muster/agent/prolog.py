"""Node Prolog and Epilog (slurm.conf ``Prolog=``, ``Epilog=``), run by the agent as root.

When (Slurm's prolog_epilog guide):
  * Prolog: on a node, before the first batch script or step task of a job run there — the
    launch waits for it (:meth:`NodeScripts.defer`). With ``PrologFlags=Alloc`` (``Contain``
    implies it) the controller asks every node of the allocation at once (op ``prolog``);
    launches that arrive meanwhile wait for that same run. One prolog per (job, run) per node.
  * Epilog: on every node of the allocation when the controller releases it (op ``epilog``),
    after the job's batch supervisor and step daemons on this node are gone.
  * ``PrologFlags=Serial``: prologs and epilogs of this node run one at a time.

How: each script named by the admin's slurm.conf (a glob runs every match, in reverse
alphabetical order, stopping at the first failure) runs as root in its own session, with a
clean environment (:func:`script_env`: Slurm's variables only — no PATH, as in Slurm) and
``/`` as working directory, stdin/stdout/stderr on /dev/null except a small tail of its output
kept for the log. ``PrologTimeout``/``EpilogTimeout`` (else ``PrologEpilogTimeout``; default:
wait indefinitely) SIGKILL its process group; a timeout counts as a failure.

Trust (docs/design.md, "Root and user paths"): root runs a file only when it and every
directory above it (symlinks resolved) belong to root or this daemon's user and nobody else
may write them (a sticky directory such as /tmp may be on the way when the entry in it is
ours). Anything else is refused, and the refusal is a failure: never run a path a user could
have swapped.

Results go to the controller as ``prolog_done`` / ``epilog_done`` {job_id, run, ok, exit_code,
signal, timed_out, detail}, repeated on every heartbeat until acknowledged (``ack_script``),
like job ends. The controller drains the node on a failure ("Prolog error" / "Epilog error")
and requeues or ends the job (muster.controller.prologs).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import asdict

from muster.common.scripts import ScriptResult, run_scripts, timeout_of

log = logging.getLogger("musterd")

BUSY_GRACE = 60  # seconds past KillWait an epilog waits for the job's processes to go


# ---- environment ------------------------------------------------------------------------------
def script_env(base: dict | None, L: dict, *, node: str, context: str, cfg) -> dict:
    """The environment of a node Prolog/Epilog: what the controller computed for this job and
    node (``prolog_env``: job, user, partition, node list, this node's GPUs as global indices),
    else the little a launch message tells, plus what only the node knows. Values are strings;
    nothing of the agent's own environment leaks in."""
    env = {k: str(v) for k, v in (base or _from_launch(L)).items()
           if isinstance(k, str) and k and "=" not in k and "\0" not in k and v is not None
           and "\0" not in str(v)}
    env.update(SLURMD_NODENAME=node, SLURM_SCRIPT_CONTEXT=context,
               SLURM_CLUSTER_NAME=cfg.cluster_name, SLURM_CONF=cfg.path)
    return env


def _from_launch(L: dict) -> dict:
    """A Prolog environment from a launch message alone (an older controller's, or the relaunch
    after a reconnect, which carries no ``prolog_env``)."""
    job_env = L.get("env") or {}
    out = {"SLURM_JOB_ID": L.get("job_id"), "SLURM_JOBID": L.get("job_id"),
           "SLURM_JOB_UID": L.get("uid"), "SLURM_JOB_GID": L.get("gid"),
           "SLURM_JOB_USER": L.get("user")}
    for k in ("SLURM_JOB_PARTITION", "SLURM_JOB_NODELIST", "SLURM_JOB_ACCOUNT",
              "SLURM_JOB_NUM_NODES", "SLURM_JOB_QOS"):
        if k in job_env:
            out[k] = job_env[k]
    return out


def _outcome(task: asyncio.Task) -> ScriptResult:
    """A finished script task's result; a crash of our own code counts as a failure."""
    if task.cancelled() or task.exception() is not None:
        if not task.cancelled():
            log.error("prolog/epilog task failed: %r", task.exception())
        return ScriptResult(False, exit_code=1, detail="could not be run (see the agent's log)")
    return task.result()


# ---- per node coordination --------------------------------------------------------------------
class NodeScripts:
    """The Prolog/Epilog state of one node (one :class:`muster.agent.daemon.Agent`).

    Invariants: at most one prolog and one epilog task per (job, run); a launch held for the
    prolog is re-run (``relaunch(L)``) only after it succeeded, and dropped (``on_fail()``)
    after it failed or once the job was terminated here (:meth:`cancel`); a prolog's outcome is
    remembered until the job's epilog request, so later steps of the job neither wait nor run it
    again; every outcome is reported until the controller acknowledges it."""

    def __init__(self, cfg, node: str, send, busy):
        self.node, self.send, self.busy = node, send, busy
        self.configure(cfg)
        self._lock: asyncio.Lock | None = None
        self.prologs: dict[tuple[int, int], asyncio.Task] = {}
        self.waiting: dict[tuple[int, int], list[tuple]] = {}
        self.epilogs: dict[tuple[int, int], asyncio.Task] = {}
        self.unacked: dict[tuple[str, int, int], dict] = {}

    def configure(self, cfg) -> None:
        """Prolog/Epilog paths and PrologFlags: at start and on reconfigure (scripts that
        run keep going; the next job gets the new ones)."""
        self.cfg = cfg
        self.serial = "SERIAL" in set(cfg.prolog_flags or ())

    @property
    def active(self) -> bool:
        """Is there anything for this node to run around a job?"""
        return bool(self.cfg.prolog or self.cfg.epilog)

    def prepare(self, L: dict) -> dict:
        """The launch with this node's TaskProlog/TaskEpilog (from our slurm.conf, never from
        the message: muster.agent.taskprolog runs them in the task's wrapper and step daemon)."""
        L["task_prolog"] = self.cfg.task_prolog or None
        L["task_epilog"] = self.cfg.task_epilog or None
        return L

    # ---- prolog ---------------------------------------------------------------------------
    def defer(self, L: dict, relaunch, on_fail=None) -> bool:
        """True when the launch ``L`` must wait for (or was refused by) the job's prolog on this
        node: ``relaunch(L)`` is called once it has succeeded, ``on_fail()`` if it failed."""
        if not self.cfg.prolog:
            return False
        key = (L["job_id"], L.get("run", 0))
        task = self.prologs.get(key)
        if task is not None and task.done():
            if _outcome(task).ok:
                return False
            if on_fail is not None:
                on_fail()
            return True
        if task is None:
            self._start_prolog(key, L.get("prolog_env"), L)
        self.waiting.setdefault(key, []).append((relaunch, L, on_fail))
        return True

    def on_prolog_request(self, msg: dict) -> None:
        """``PrologFlags=Alloc``: the controller asks for the prolog at allocation time."""
        key = (msg["job_id"], msg.get("run", 0))
        task = self.prologs.get(key)
        if task is None and self.cfg.prolog:
            self._start_prolog(key, msg.get("prolog_env"), msg)
        elif task is not None and task.done():
            self._report("prolog", key, _outcome(task))  # the controller asks again: answer

    def _start_prolog(self, key, base: dict | None, L: dict) -> None:
        env = script_env(base, L, node=self.node, context="prolog_slurmd", cfg=self.cfg)
        task = self.prologs[key] = asyncio.ensure_future(self._prolog(key, env))
        # once the task is done (a relaunch finds it done, and does not wait for itself)
        task.add_done_callback(lambda t: self._release(key, t))

    async def _prolog(self, key, env: dict) -> ScriptResult:
        res = await self._run(self.cfg.prolog, env, timeout_of(self.cfg, "prolog"))
        if not res.ok:
            log.error("[job %s] prolog failed status=%s %s", key[0], res.status(), res.detail)
        self._report("prolog", key, res)
        return res

    def _release(self, key, task: asyncio.Task) -> None:
        """The launches that waited for the prolog: run them, or refuse them."""
        res = _outcome(task)
        for relaunch, L, on_fail in self.waiting.pop(key, []):
            try:
                if res.ok:
                    relaunch(L)
                elif on_fail is not None:
                    on_fail()
            except Exception:  # one launch's trouble must not strand the others
                log.exception("job %s: launch after the prolog failed", key[0])

    def cancel(self, job_id: int, run: int | None = None) -> None:
        """The job is being terminated here: launches still waiting for its prolog are dropped
        (the prolog itself finishes, and its outcome is still reported)."""
        for key in [k for k in self.waiting if k[0] == job_id and run in (None, k[1])]:
            del self.waiting[key]

    # ---- epilog ---------------------------------------------------------------------------
    def on_epilog_request(self, msg: dict) -> None:
        """The controller released the job's allocation: forget its prolog and run the epilog
        once the job's processes here are gone. A repeated request gets the known outcome."""
        key = (msg["job_id"], msg.get("run", 0))
        self.waiting.pop(key, None)
        if not self.cfg.epilog:
            self.prologs.pop(key, None)
            return
        task = self.epilogs.get(key)
        if task is None:
            env = script_env(msg.get("prolog_env"), msg, node=self.node,
                             context="epilog_slurmd", cfg=self.cfg)
            self.epilogs[key] = asyncio.ensure_future(self._epilog(key, env))
        elif task.done():
            self._report("epilog", key, _outcome(task))

    async def _epilog(self, key, env: dict) -> ScriptResult:
        await self._processes_gone(key[0])
        prolog = self.prologs.get(key)
        if prolog is not None and not prolog.done():
            await asyncio.wait([prolog])  # an epilog never overtakes the job's own prolog
        self.prologs.pop(key, None)
        res = await self._run(self.cfg.epilog, env, timeout_of(self.cfg, "epilog"))
        if not res.ok:
            log.error("[job %s] epilog failed status=%s %s", key[0], res.status(), res.detail)
        self._report("epilog", key, res)
        return res

    async def _processes_gone(self, job_id: int) -> None:
        """Wait until no batch supervisor or step daemon of the job runs on this node (the
        controller's terminate, sent before the epilog request, ends them within KillWait)."""
        deadline = time.monotonic() + max(1, self.cfg.kill_wait) + BUSY_GRACE
        delay = 0.02
        while self.busy(job_id):
            if time.monotonic() > deadline:
                log.error("job %s: processes still running; running the epilog anyway", job_id)
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    # ---- shared ---------------------------------------------------------------------------
    async def _run(self, spec: str, env: dict, timeout: float | None) -> ScriptResult:
        if not self.serial:
            return await run_scripts(spec, env, timeout)
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            return await run_scripts(spec, env, timeout)

    def _report(self, kind: str, key, res: ScriptResult) -> None:
        rep = {"op": f"{kind}_done", "job_id": key[0], "run": key[1], **asdict(res)}
        rep["detail"] = rep["detail"][-1000:]
        self.unacked[(kind, *key)] = rep
        self.send(rep)

    def ack(self, msg: dict) -> None:
        key: tuple = (msg.get("kind"), msg.get("job_id"), msg.get("run", 0))  # as sent: may miss
        if self.unacked.pop(key, None) is not None and key[0] == "epilog":
            self.epilogs.pop(key[1:], None)

    def resend(self) -> None:
        """Heartbeat: outcomes the controller has not acknowledged yet (the first copy may
        have crossed a reconnect)."""
        for rep in list(self.unacked.values()):
            self.send(rep)
