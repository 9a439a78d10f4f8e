"""Job confinement on a node: Slurm's proctrack/cgroup and task/cgroup, on top of
:mod:`muster.agent.cgroup` (which knows cgroups, not jobs).

What is on is decided once per agent (:func:`node_settings`) from slurm.conf and the
cgroup.conf next to it:

  proctrack  ``ProctrackType=proctrack/cgroup`` (Slurm's default): a step's processes are
             found through its cgroup, so whatever a task did to its session or parent
             (``setsid nohup daemon &``), nothing of it outlives the step
  cores      ``TaskPlugin`` has ``task/cgroup`` and ``ConstrainCores=yes``: the job's cpuset
  ram, swap  ``ConstrainRAMSpace`` / ``ConstrainSwapSpace``: the job's memory limit, computed
             from its allocation as Slurm's task/cgroup does (:func:`ram_limit`)
  devices    ``ConstrainDevices``: every GPU device of the node not allocated is denied

and it needs root and a writable hierarchy: without them the agent logs one line and runs
unconfined (the session-based kill of the supervisors stays as the fallback).

Tree, one per emulated node (two clusters, or two nodes of one agent, never share one)::

    <hierarchy base>/muster_<node>_<h8>/job_<J>/step_<S>/task_<K>

``h8`` is 8 hex digits of a hash of the node's spool directory; ``S`` is ``batch`` or the
step number. On v1, ``step_S`` is made in the memory, cpuacct, freezer and pids hierarchies
only (:data:`STEP_CONTROLLERS`), ``task_K`` in memory and cpuacct only
(:data:`TASK_CONTROLLERS`); elsewhere a task sits in the deepest level made there (its
step's cgroup, or in cpuset and devices its job's, which holds the limits). The job cgroup
holds the limits; it is made by the agent before the job's first
supervisor or step daemon starts on the node (:meth:`AgentConfinement.prepare`: a failure
fails that launch, with the reason) and removed when the last of them has ended
(:meth:`AgentConfinement.job_done`). Step and task cgroups belong to the step's daemon
(:class:`StepCgroup`).

Invariants:

* a task is born confined: its daemon moves itself into ``task_K``, forks (subprocess's C
  fork/exec: no Python runs in the child) and moves back to where it was
  (:func:`born_confined`), so no instant exists where the task runs outside its cgroup;
* a step leaves nothing behind: at its end every process left in its cgroup is killed
  (freeze, SIGKILL, thaw, wait until empty) before the step's end is reported;
* the job's user cannot leave: the cgroups are root's (mode 0755), so a task cannot write
  its pid into another cgroup's ``cgroup.procs``;
* the agent, its zygote, the supervisors and step daemons run with ``oom_score_adj``
  -1000 (the OOM killer never picks them); tasks are born with 0.

What goes into ``launch.json`` is the spec of ``L["confine"]`` (:meth:`AgentConfinement.prepare`):
``plugin``, ``mount``, ``base`` (the node tree), ``cores``, ``ram``, ``swap``, ``devices``,
``proctrack``, ``cpus`` (host CPU ids), ``slots`` (the node's CPU slots they stand for),
``mem_bytes``, ``swap_bytes`` (swap on top of RAM), ``swappiness``, ``deny_devices``.
"""

from __future__ import annotations

import contextlib
import hashlib
from concurrent.futures import Future, ThreadPoolExecutor, wait
import logging
import os
from dataclasses import dataclass
from collections.abc import Set
from typing import Any

from muster.agent import cgroup as cg

log = logging.getLogger("musterd")

DAEMON_OOM_ADJ = -1000
# v1: the controllers with a task_K level (per-task OOM kills, memory and CPU usage); in the
# others a task joins its step's cgroup -- the limits are the job's, the kill is the step's,
# and each v1 cgroup costs a mkdir and an rmdir (~40 us of kernel each) per job
TASK_CONTROLLERS = frozenset(("memory", "cpuacct"))
# v1: the controllers with a step_S level -- those that give a step something of its own:
# its OOM kills and usage (memory, cpuacct), a kill no fork escapes (freezer) and a cheap
# "anything left?" (pids.current). In cpuset and devices a step's tasks sit in the job's
# cgroup, which holds the limits: a step level there held nothing and cost ~0.2-0.5 ms of
# CPU per job (the cpuset's mkdir also copies cpus and mems; docs/design.md, "Confinement")
STEP_CONTROLLERS = frozenset(("memory", "cpuacct", "freezer", "pids"))
TASK_OOM_ADJ = 0
JOB_KILL_TIMEOUT = 10.0
MB = 1024 * 1024

__all__ = ["AgentConfinement", "ConfineError", "NodeConfinement", "StepCgroup", "born_confined",
           "finish", "node_settings", "oom_line", "protect_daemon", "ram_limit", "swap_limit"]


class ConfineError(Exception):
    """A job cannot be confined as configured (the launch fails with this reason)."""


# ---- what is on ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Settings:
    """What slurm.conf and cgroup.conf ask for (before checking what the node can do)."""

    proctrack: bool = False
    cores: bool = False
    ram: bool = False
    swap: bool = False
    devices: bool = False
    plugin: str = "autodetect"
    mount: str = "/sys/fs/cgroup"
    allowed_ram: float = 100.0
    allowed_swap: float = 0.0
    max_ram_percent: float = 100.0
    max_swap_percent: float = 100.0
    min_ram_mb: int = 30
    swappiness: int | None = None
    favor_dynmods: bool = True  # cgroup.conf MusterFavorDynMods (Muster's own key)

    @property
    def any(self) -> bool:
        return self.proctrack or self.cores or self.ram or self.swap or self.devices


def node_settings(cfg) -> Settings:
    """Settings of ``cfg`` (a ClusterConfig) and the cgroup.conf next to its slurm.conf.
    Raises ConfigError for a bad cgroup.conf."""
    from muster.config.cgroupconf import load_cgroup_conf
    conf = load_cgroup_conf(cfg.path)
    plugins = {p.strip() for p in (cfg.task_plugin or "").split(",")}
    task = "task/cgroup" in plugins and conf.enabled
    return Settings(
        proctrack=cfg.proctrack_type == "proctrack/cgroup" and conf.enabled,
        cores=task and conf.constrain_cores, ram=task and conf.constrain_ram_space,
        swap=task and conf.constrain_swap_space, devices=task and conf.constrain_devices,
        plugin=conf.cgroup_plugin, mount=conf.cgroup_mountpoint,
        allowed_ram=conf.allowed_ram_space, allowed_swap=conf.allowed_swap_space,
        max_ram_percent=conf.max_ram_percent, max_swap_percent=conf.max_swap_percent,
        min_ram_mb=conf.min_ram_space, swappiness=conf.memory_swappiness,
        favor_dynmods=conf.muster_favor_dynmods)


# ---- Slurm's memory arithmetic (task/cgroup) -------------------------------------------------

def ram_limit(s: Settings, alloc_mb: int, node_mb: int) -> int:
    """The job's RAM limit in bytes: AllowedRAMSpace % of its allocation (all of the node's
    RealMemory when it has none), kept between MinRAMSpace and MaxRAMPercent % of RealMemory."""
    node = node_mb * MB
    mem = alloc_mb * MB * s.allowed_ram / 100 if alloc_mb else node
    return int(min(max(mem, s.min_ram_mb * MB), node * s.max_ram_percent / 100))


def swap_limit(s: Settings, alloc_mb: int, node_mb: int) -> int:
    """RAM + swap in bytes (v1's memsw): the RAM limit plus AllowedSwapSpace % of the
    allocation (or of RealMemory), kept between MinRAMSpace and MaxRAMPercent +
    MaxSwapPercent % of RealMemory."""
    node = node_mb * MB
    swap = (alloc_mb * MB if alloc_mb else node) * s.allowed_swap / 100
    total = ram_limit(s, alloc_mb, node_mb) + swap
    ceiling = node * s.max_ram_percent / 100 + node * s.max_swap_percent / 100
    return int(min(max(total, s.min_ram_mb * MB), ceiling))


def memory_limits(s: Settings, alloc_mb: int, node_mb: int) -> tuple[int | None, int | None]:
    """(RAM limit, swap on top of it) for :meth:`Hierarchy.set_memory`; None = unlimited.
    Swap constrained without RAM: the RAM limit is RAM + swap, with no swap on top (Slurm)."""
    if not (s.ram or s.swap):
        return None, None
    if not s.swap:
        return ram_limit(s, alloc_mb, node_mb), None
    total = swap_limit(s, alloc_mb, node_mb)
    if not s.ram:
        return total, 0
    ram = ram_limit(s, alloc_mb, node_mb)
    return ram, max(0, total - ram)


# ---- OOM score -----------------------------------------------------------------------------

def set_oom_adj(value: int) -> int | None:
    """Write our ``oom_score_adj``; the previous value, or None when it cannot be changed."""
    try:
        with open("/proc/self/oom_score_adj", "r+") as fh:
            old = int(fh.read().strip() or 0)
            if old != value:
                fh.seek(0)
                fh.write(str(value))
                fh.flush()
        return old
    except (OSError, ValueError):
        return None


_protect_warned = False


def protect_daemon() -> bool:
    """The calling daemon (agent, zygote) is never the OOM killer's choice: -1000.
    Supervisors inherit it. Needs CAP_SYS_RESOURCE: without it the score stays as it was, and
    the first call says so in the log (once per process)."""
    global _protect_warned
    old = set_oom_adj(DAEMON_OOM_ADJ)
    if old is not None:
        return True
    if not _protect_warned:
        _protect_warned = True
        log.warning("cannot set oom_score_adj to %d (needs CAP_SYS_RESOURCE): the OOM killer "
                    "may pick musterd or a supervisor over a job's task", DAEMON_OOM_ADJ)
    return False


# ---- the agent's side ----------------------------------------------------------------------

_HIER: dict = {}  # (plugin, mount) -> (hierarchy, base) or the reason it is unusable


def _open(s: Settings) -> tuple[cg.Hierarchy | None, str]:
    """The hierarchy and the base for node trees, opened once per agent process (on v2
    own_base moves the agent, and every process of its cgroup, into a leaf: once is enough).
    (None, reason) when the node cannot confine."""
    key = (s.plugin, s.mount)
    if key not in _HIER:
        try:
            if os.geteuid() != 0:
                raise ConfineError("musterd is not running as root")
            hier = cg.open_hierarchy(s.plugin, s.mount)
            if hier is None:
                raise ConfineError(f"no writable cgroup hierarchy under {s.mount} "
                                   f"(CgroupPlugin={s.plugin})")
            _HIER[key] = (hier, hier.own_base())
        except (ConfineError, cg.CgroupError, OSError) as exc:
            _HIER[key] = (None, str(exc))
    return _HIER[key]


_FAVORED: list = []  # favordynmods handled in this process (once for all its nodes)


def _favor_dynmods(s: Settings) -> None:
    """``MusterFavorDynMods`` (default yes): have the cgroup2 root favour dynamic migrations
    (cgroup.favor_dynmods), once per agent process, logged in one line either way; never
    fatal. Called only once confinement is known to be on, as root."""
    if _FAVORED or not s.favor_dynmods:
        return
    _FAVORED.append(True)
    ok, line = cg.favor_dynmods()
    (log.info if ok else log.warning)("%s", line)


def tree_name(node: str, spool: str) -> str:
    """``muster_<node>_<h8>``: h8 from the spool path, unique per cluster and node."""
    h8 = hashlib.sha256(os.path.realpath(spool).encode()).hexdigest()[:8]
    return f"muster_{node}_{h8}"


class AgentConfinement:
    """One node's confinement in the agent: makes job cgroups (with their limits), assigns
    the node's CPU slots to jobs, removes job cgroups when the job is done on the node.

    CPU slots: the node has ``CPUs`` slots (0..n-1); a job gets as many as it was allocated
    here, the lowest free ones, and slot s runs on host CPU ``host[(s + offset) % len(host)]``
    (``offset``: the node's index, so emulated nodes sharing a host spread over its CPUs).
    The controller never over-allocates a node, so slots are free unless a partition
    oversubscribes (then they wrap around)."""

    def __init__(self, s: Settings, hier: cg.Hierarchy, base: str, node, offset: int,
                 gpus: list | str):
        self.s, self.hier, self.base, self.node = s, hier, base, node
        self.host = sorted(os.sched_getaffinity(0))
        self.offset = offset
        self.gpus = gpus  # the node's GpuDevices, or why they are unknown
        self.specs: dict[int, dict] = {}  # job id -> spec of its job cgroup here
        self.pending: dict[int, Future] = {}  # job id -> its leftovers being killed/removed
        self._pool: ThreadPoolExecutor | None = None  # that worker, off the event loop

    @classmethod
    def for_node(cls, cfg, node_name: str, spool: str) -> AgentConfinement | None:
        """The node's confinement, or None (logged once, with the reason) when it is off.
        Never raises: a node that cannot confine runs its jobs unconfined."""
        try:
            s = node_settings(cfg)
        except Exception as exc:  # noqa: BLE001 - a bad cgroup.conf must not stop the agent
            log.error("%s: confinement off: %s", node_name, getattr(exc, "message", exc))
            return None
        if not s.any:
            log.info("%s: confinement off (ProctrackType=%s, TaskPlugin=%s)", node_name,
                     cfg.proctrack_type, cfg.task_plugin)
            return None
        hier, base = _open(s)
        if hier is None:
            log.warning("%s: confinement off: %s; jobs run unconfined", node_name, base)
            return None
        s = _usable(s, hier, node_name)
        _favor_dynmods(s)
        base = "/".join(p for p in (base, tree_name(node_name, spool)) if p)
        try:
            hier.make(base)
        except cg.CgroupError as exc:
            log.warning("%s: confinement off: %s; jobs run unconfined", node_name, exc)
            return None
        _record_tree(spool, s, base)
        node = cfg.nodes[node_name]
        gpus = _gpu_devices(cfg, node) if s.devices else []
        offset = list(cfg.nodes).index(node_name)
        log.info("%s: jobs confined in cgroup v%d %s (%s)", node_name, hier.version, base,
                 ", ".join(k for k in ("proctrack", "cores", "ram", "swap", "devices")
                           if getattr(s, k)) or "tracking only")
        return cls(s, hier, base, node, offset, gpus)

    def reconfigure(self, cfg) -> bool:
        """cgroup.conf and gres.conf as they read now, for the jobs that start from now on
        (running jobs keep the cgroups and limits they were made with). The hierarchy and
        the node's tree stay: a change of CgroupPlugin, CgroupMountpoint, ProctrackType or
        TaskPlugin needs an agent restart, as does turning confinement on (False, logged)."""
        try:
            s = node_settings(cfg)
        except Exception as exc:  # noqa: BLE001 - a bad cgroup.conf keeps the old settings
            log.error("%s: cgroup.conf not applied: %s", self.node.name,
                      getattr(exc, "message", exc))
            return False
        if (s.plugin, s.mount, s.proctrack, s.any) != (self.s.plugin, self.s.mount,
                                                       self.s.proctrack, self.s.any):
            log.warning("%s: CgroupPlugin/CgroupMountpoint/ProctrackType/TaskPlugin changed: "
                        "restart the agent to apply", self.node.name)
            return False
        self.node = cfg.nodes[self.node.name]
        self.s = _usable(s, self.hier, self.node.name)
        self.gpus = _gpu_devices(cfg, self.node) if self.s.devices else []
        return True

    # ---- specs and job cgroups
    def job_rel(self, job_id: int, spec: dict | None = None) -> str:
        return f"{(spec or {}).get('base', self.base)}/job_{job_id}"

    def prepare(self, L: dict) -> dict:
        """The spec for a launch (batch or step) of ``L["job_id"]``, its job cgroup made
        with the limits of the allocation ``L["node_alloc"]`` (``cpus``, ``mem`` in MB,
        ``gpus``) the first time. Raises ConfineError with the reason."""
        job_id = L["job_id"]
        spec = self.specs.get(job_id)
        if spec is not None:
            return spec
        if job_id in self.pending:  # requeued here while its last run's leftovers are killed
            wait([self.pending[job_id]])  # (rare: the one wait on the loop, bounded by the kill)
        alloc = L.get("node_alloc") or {}
        spec = self._spec(alloc)
        rel = self.job_rel(job_id)
        try:
            self.hier.make(rel)
            self._limit(rel, spec)
        except cg.CgroupError as exc:
            self._discard(rel)
            raise ConfineError(f"cannot create the job's cgroup: {exc}") from None
        self.specs[job_id] = spec
        return spec

    def _spec(self, alloc: dict) -> dict:
        s = self.s
        slots = self._take_slots(int(alloc.get("cpus") or self.node.cpus))
        mem, swap = memory_limits(s, int(alloc.get("mem") or 0), self.node.real_memory)
        deny: list = []
        if s.devices:
            if isinstance(self.gpus, str):
                raise ConfineError(self.gpus)
            from muster.config.gresfiles import deny_list
            deny = deny_list(self.gpus, alloc.get("gpus") or [])
        return {"plugin": s.plugin, "mount": s.mount, "base": self.base,
                "hier": cg.describe(self.hier),
                "proctrack": s.proctrack, "cores": s.cores, "ram": s.ram, "swap": s.swap,
                "devices": s.devices, "slots": slots,
                "cpus": sorted({self.host[(i + self.offset) % len(self.host)] for i in slots}),
                "mem_bytes": mem, "swap_bytes": swap, "swappiness": s.swappiness,
                "deny_devices": deny}

    def _take_slots(self, n: int) -> list[int]:
        used = {i for spec in self.specs.values() for i in spec.get("slots", ())}
        total = max(1, self.node.cpus)
        free = [i for i in range(total) if i not in used]
        taken = free[:n]
        i = 0
        while len(taken) < min(n, total):  # oversubscribed: share the busiest last
            if i not in taken:
                taken.append(i)
            i += 1
        return sorted(taken)

    def _limit(self, rel: str, spec: dict) -> None:
        h = self.hier
        if spec["cores"]:
            h.set_cpus(rel, spec["cpus"])
        if spec["ram"] or spec["swap"]:
            h.set_memory(rel, spec["mem_bytes"], spec["swap_bytes"], spec["swappiness"])
        if spec["devices"] and spec["deny_devices"]:
            h.deny_devices(rel, [tuple(d) for d in spec["deny_devices"]])

    def adopt(self, job_id: int, spec: dict | None) -> None:
        """After a restart: a job still running here keeps its cgroup and CPU slots."""
        if spec and job_id not in self.specs:
            self.specs[job_id] = spec

    def job_done(self, job_id: int) -> Future | None:
        """The job has nothing left running on this node (no supervisor, no step daemon):
        its slots are free again and its cgroup goes. None when that is done already: the
        usual case, where the job's daemons emptied and removed their steps and one rmdir
        per controller is left. Else a Future of the worker thread that kills what is still
        in the cgroup and removes it -- freezing and waiting for exits never happen on the
        agent's event loop; the agent reports the job's end when the Future is done."""
        spec = self.specs.pop(job_id, None)
        rel = self.job_rel(job_id, spec)
        try:
            if not cg.populated(self.hier, rel) and self.hier.try_remove(rel):
                return None
        except cg.CgroupError as exc:
            log.warning("%s: cannot remove %s: %s", self.node.name, rel, exc)
            return None
        log.info("%s: job %s left processes or cgroups in %s: killing and removing them",
                 self.node.name, job_id, rel)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="musterd-cgroup")
        fut = self._pool.submit(self._discard, rel)
        self.pending[job_id] = fut
        fut.add_done_callback(lambda f: self.pending.pop(job_id, None)
                              if self.pending.get(job_id) is f else None)
        return fut

    def _discard(self, rel: str) -> None:
        try:
            if cg.populated(self.hier, rel) and not self.hier.kill_all(rel, JOB_KILL_TIMEOUT):
                log.warning("%s: processes of %s survive SIGKILL", self.node.name, rel)
            self.hier.remove(rel)
        except cg.CgroupError as exc:
            log.warning("%s: cannot remove %s: %s", self.node.name, rel, exc)

    def close(self) -> None:
        """The agent stops: its node tree goes if no job is left in it (jobs that still run
        keep theirs; the next agent adopts or removes them)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        cg.remove_if_empty(self.hier, self.base)

    def remove_stale(self, running: set[int]) -> None:
        """At start: the job cgroups of jobs this node no longer runs (left by an agent or a
        supervisor that died) are emptied and removed."""
        for name in cg.children(self.hier, self.base):
            if not name.startswith("job_") or not name[4:].isdigit():
                continue
            if int(name[4:]) not in running:
                log.info("%s: removing stale cgroup %s/%s", self.node.name, self.base, name)
                self._discard(f"{self.base}/{name}")


TREE_FILE = "cgroup.tree"  # in the node's spool: where its tree is, for `muster down`


def _record_tree(spool: str, s: Settings, base: str) -> None:
    try:
        with open(os.path.join(spool, TREE_FILE), "w") as fh:
            fh.write(f"{s.plugin}\n{s.mount}\n{base}\n")
    except OSError as exc:
        log.warning("cannot record the cgroup tree in %s: %s", spool, exc)


def remove_node_tree(spool: str) -> bool:
    """Kill every process left in the node tree recorded in ``spool`` and remove the tree
    (``muster down``, once the agent and the supervisors are gone). False when there is
    none, or it cannot be removed."""
    path = os.path.join(spool, TREE_FILE)
    try:
        with open(path) as fh:
            plugin, mount, base = fh.read().split("\n")[:3]
    except (OSError, ValueError):
        return False
    if not base.startswith("muster_") and "/muster_" not in base:
        return False  # not a tree of ours: never kill what we did not make
    try:
        hier = cg.open_hierarchy(plugin, mount)
        if hier is None:
            return False
        hier.kill_all(base, JOB_KILL_TIMEOUT)
        hier.remove(base)
    except (cg.CgroupError, OSError):
        return False
    os.unlink(path)
    return True


def _usable(s: Settings, hier: cg.Hierarchy, node: str) -> Settings:
    """``s`` without what the hierarchy lacks a controller for (each logged)."""
    need = {"cores": "cpuset", "ram": "memory", "swap": "memory", "devices": "devices"}
    off: dict[str, Any] = {k: False for k, c in need.items()
                           if getattr(s, k) and c not in hier.controllers}
    for k in off:
        log.warning("%s: %s not constrained: no %s controller in %r", node, k, need[k], hier)
    from dataclasses import replace
    return replace(s, **off) if off else s


def _gpu_devices(cfg, node) -> list | str:
    """The node's GPU devices, or the configuration error that keeps jobs from starting
    (ConstrainDevices with a GPU whose device file is wrong: never an unconfined GPU)."""
    try:
        from muster.config.gresfiles import gpu_devices
        return gpu_devices(node, getattr(cfg, "gres_autodetect", None))
    except Exception as exc:  # noqa: BLE001 - ConfigError, or NVML trouble
        return f"ConstrainDevices: {getattr(exc, 'message', exc)}"


# ---- the supervisors' and step daemons' side -----------------------------------------------

class NodeConfinement:
    """``L["confine"]`` bound to its hierarchy (opened on first use, in the daemon that uses
    it); the cgroup paths of a job's steps and tasks."""

    def __init__(self, spec: dict):
        self.spec = spec
        self._hier: cg.Hierarchy | None = None

    @classmethod
    def from_launch(cls, L: dict) -> NodeConfinement | None:
        spec = L.get("confine")
        return cls(spec) if spec else None

    @property
    def hier(self) -> cg.Hierarchy:
        """The agent's hierarchy as the spec describes it (no mountinfo parsing or BPF probe
        per daemon); specs written before ``hier`` existed are resolved again."""
        if self._hier is None:
            if self.spec.get("hier"):
                self._hier = cg.from_description(self.spec["hier"])
            else:
                self._hier = cg.open_hierarchy(self.spec["plugin"], self.spec["mount"])
            if self._hier is None:
                raise cg.CgroupError(f"no cgroup hierarchy under {self.spec['mount']}")
        return self._hier

    def job_rel(self, job_id: int) -> str:
        return f"{self.spec['base']}/job_{job_id}"

    def step_rel(self, job_id: int, step: str) -> str:
        return f"{self.job_rel(job_id)}/step_{step}"


class StepCgroup:
    """A step's cgroup on this node, made by (and belonging to) the step's supervisor or
    step daemon. Raises CgroupError when it cannot be made."""

    def __init__(self, spec: dict, job_id: int, step_name: str):
        self.nc = NodeConfinement(spec)
        self.job_id, self.step = job_id, str(step_name)
        self.rel = self.nc.step_rel(job_id, self.step)
        self.hier = self.nc.hier
        ctrls = self.hier.controllers
        # (v2 has one tree: every level is made in it whatever these say)
        self.step_only = STEP_CONTROLLERS if STEP_CONTROLLERS & ctrls else None
        self.only = TASK_CONTROLLERS if TASK_CONTROLLERS & ctrls else self.step_only
        self.hier.make(self.rel, self.step_only)
        self.home = cg.whereabouts(self.hier)  # where this daemon lives, to come back to
        self.made: set[int] = set()  # task cgroups made (removed leaf-first at the end)
        # where a task is placed, per mount: the deepest level made there
        self.levels = [(self.rel, self.step_only), (self.nc.job_rel(job_id), None)]

    @classmethod
    def for_launch(cls, L: dict, step_name) -> StepCgroup | None:
        spec = L.get("confine")
        return cls(spec, L["job_id"], step_name) if spec else None

    def task_rel(self, k: int) -> str:
        return f"{self.rel}/task_{k}"

    @contextlib.contextmanager
    def task(self, k: int):
        """Inside: the calling process is in task_K (a fork now is born there)."""
        rel = self.task_rel(k)
        if k not in self.made:
            self.hier.make(rel, self.only)
            self.made.add(k)
        try:  # a failed attach may have moved us in some controllers: back in all of them
            self.hier.attach_levels([(rel, self.only), *self.levels])
            yield rel
        finally:
            cg.go_back(self.home)

    def pids(self, k: int | None = None) -> list[int]:
        """Processes of task K (None: of the whole step)."""
        try:
            return self.hier.procs(self.rel if k is None else self.task_rel(k))
        except cg.CgroupError:
            return []

    def oom_kills(self, k: int | None = None) -> int:
        try:
            return self.hier.oom_kills(self.rel if k is None else self.task_rel(k))
        except cg.CgroupError:
            return 0

    def signal(self, sig: int, spared_pgids: Set[int] = frozenset()) -> None:
        """``sig`` to every process of the step (scancel, the time limit: what left the
        task's session gets it too, as with Slurm's proctrack/cgroup) — but those of the
        process groups in ``spared_pgids``, which the caller signalled already: each process
        gets a signal once (a handler run twice would, say, checkpoint twice)."""
        for pid in self.pids():
            try:
                if spared_pgids and os.getpgid(pid) in spared_pgids:
                    continue
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def kill(self) -> bool:
        """SIGKILL everything in the step; True once it is empty."""
        try:
            return not cg.populated(self.hier, self.rel) or \
                self.hier.kill_all(self.rel, JOB_KILL_TIMEOUT)
        except cg.CgroupError:
            return False

    def finish(self) -> dict:
        """The step is over: kill what is left, read the OOM kills and usage, remove the
        step's cgroups. ``{"oom_kills": n, "usage": {...}, "empty": bool}``."""
        empty = self.kill()
        out = {"oom_kills": self.oom_kills(), "empty": empty, "usage": {}}
        try:
            out["usage"] = self.hier.usage(self.rel)
            self._remove()
        except cg.CgroupError as exc:
            out["error"] = str(exc)
        return out

    def _remove(self) -> None:
        """The task cgroups this daemon made, then the step's: one rmdir each per controller
        when they are empty (the usual case, after :meth:`kill`); else the full removal
        (walk, EBUSY retried)."""
        gone = all([self.hier.try_remove(self.task_rel(k), self.only) for k in sorted(self.made)])
        if not (gone and self.hier.try_remove(self.rel, self.step_only)):
            self.hier.remove(self.rel)


def finish(spec: dict | None, job_id: int, step_name=None) -> dict:
    """Kill what is left in a step's (``step_name``) or the whole job's (None) cgroup, report
    its OOM kills, and remove it. ``{}`` when confinement is off."""
    if not spec:
        return {}
    nc = NodeConfinement(spec)
    rel = nc.job_rel(job_id) if step_name is None else nc.step_rel(job_id, str(step_name))
    hier = nc.hier
    empty = hier.kill_all(rel, JOB_KILL_TIMEOUT)
    out = {"oom_kills": hier.oom_kills(rel), "empty": empty}
    hier.remove(rel)
    return out


@contextlib.contextmanager
def born_confined(step: StepCgroup | None, k: int):
    """Around the fork of task K: the caller is in the task's cgroup (when confined) with
    the tasks' OOM score, and gets its own cgroup, CPUs and score back afterwards.
    Enter this *outside* any affinity binding: joining a cpuset resets the affinity."""
    old_adj = set_oom_adj(TASK_OOM_ADJ)
    cpus = os.sched_getaffinity(0)
    try:
        if step is None:
            yield None
        else:
            with step.task(k) as rel:
                yield rel
    finally:
        try:
            os.sched_setaffinity(0, cpus)
        except OSError:
            pass
        if old_adj is not None:
            set_oom_adj(old_adj)


def oom_line(job_id: int, step: str, n: int) -> str:
    """Slurm's message on the step's stderr after OOM kills in its cgroup."""
    return (f"slurmstepd: error: Detected {n} oom-kill event(s) in StepId={job_id}.{step} "
            "cgroup. Some of your processes may have been killed by the cgroup "
            "out-of-memory handler.\n")


def signal_step(step: StepCgroup | None, *sigs: int,
                spared_pgids: Set[int] = frozenset()) -> None:
    """``sigs``, in order, to every process of the step outside ``spared_pgids`` (nothing when
    unconfined)."""
    if step is not None:
        for sig in sigs:
            step.signal(sig, spared_pgids)
