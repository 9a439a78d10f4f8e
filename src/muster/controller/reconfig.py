"""Live reconfiguration: ``scontrol reconfigure`` (operation ``reconfigure``).

The controller re-reads the files it was started with (slurm.conf, the gres.conf and
cgroup.conf next to it), compares them with the configuration it runs
(muster.config.diff) and applies the difference in one step on the event loop:

* all or nothing: a file that does not parse (every error names ``file:line``), or a change
  that needs a restart (``diff.RESTART_KEYS``, an existing node's hardware), or a node
  removal the cluster still refers to (a reservation), refuses the whole reconfigure and the
  running configuration stays in force;
* everything derived from the configuration is rebuilt by one function, ``apply_settings``,
  the same one ``Controller.__init__`` uses, so a reconfigured controller and a restarted one
  cannot differ;
* running jobs are never touched: a removed node that runs jobs stays (drained, reason
  ``removed by reconfigure``, in no partition) until its jobs are gone, then ``retire_idle``
  removes it; a removed partition's running jobs finish where they are, its pending jobs are
  cancelled (Slurm ends them NODE_FAIL; Muster's job machine has no node failure for a job
  that holds no node, and a cancel says what happened: the event log names the partition);
* the agents get a ``reconfigure`` message and re-read gres.conf/cgroup.conf for their next
  jobs (running jobs keep their cgroups). A new node's agent is started by the operator
  (``muster start-agents`` on its host, or ``musterd -N <node>``); the node shows UNKNOWN
  until it registers.
"""

from __future__ import annotations

import dataclasses
import logging

from muster.common.errors import RequestError
from muster.config import diff as cdiff
from muster.controller.nodes import NodeRuntime
from muster.controller.opspec import op
from muster.controller.scheduling import sched_config_of
from muster.controller.state import forget_identities, identity, now
from muster.lifecycle import events, jobfsm
from muster.model.job import PENDING

log = logging.getLogger("musterctld")

REMOVED_REASON = "removed by reconfigure"


def apply_settings(ctl, cfg) -> None:
    """Make ``cfg`` the controller's configuration and rebuild everything derived from it:
    at start (Controller.__init__) and on every reconfigure. Node runtimes are not rebuilt
    here (they carry allocations and states: ``_sync_nodes``)."""
    ctl.cfg = cfg
    st = ctl.state
    st.cfg = cfg
    st.__dict__.pop("_sched_cfg", None)  # muster.controller.scheduling.sched_config_of's cache
    st.empty_views = {}  # FitChecker's empty partition views
    st.drop_views()  # scheduling views of jobs (their requests read the config)
    ctl.sched_cfg = sched_config_of(st)
    ctl.operators = set(cfg.operators or ())
    ctl._limited_cache = {}  # who is an operator may have changed
    # Slurm's SlurmdTimeout default (300 s) leaves a dead node's jobs hanging for minutes;
    # Muster detects a dead node within ~12 s unless slurm.conf says otherwise (agents
    # heartbeat four times per timeout)
    ctl.slurmd_timeout = cfg.slurmd_timeout if "SlurmdTimeout" in (cfg.raw or {}) else 12
    # Slurm holds a requeued job ~121 s (BeginTime); Muster defaults to 2 s
    # (SchedulerParameters=requeue_delay=N to change it)
    ctl.requeue_delay = int((cfg.scheduler_parameters or {}).get("requeue_delay", 2))
    ctl.applier.configure()
    ctl.prologs.configure(cfg)
    st.accounts.configure(cfg)
    st.mailer.configure(cfg)
    st.reservations.cfg = cfg
    if hasattr(ctl, "diag"):  # SlurmctldDebug, DebugFlags (at start: built after this)
        ctl.diag.configure(cfg)


def read_config(path: str):
    """The configuration at ``path`` as it reads now, every file checked (slurm.conf and its
    includes, gres.conf, cgroup.conf); ConfigError naming ``file:line`` otherwise."""
    from muster.config import load
    from muster.config.cgroupconf import load_cgroup_conf
    cfg = load(path)
    load_cgroup_conf(path)  # the agents apply it; a bad one is refused here, before anything
    return cfg


@op("reconfigure")
def reconfigure(ctl, msg: dict, uid: int, gid: int) -> dict:
    """Re-read and apply the configuration files (root, SlurmUser and operators only, as
    Slurm's REQUEST_RECONFIGURE). The reply lists what changed."""
    if not ctl.is_admin(uid):
        raise RequestError("Access/permission denied", "access_denied")
    forget_identities()  # users' groups are looked up afresh, as the files are
    try:
        new = read_config(ctl.cfg.path)
    except RequestError:
        raise
    except Exception as exc:  # ConfigError, or an unreadable file: one line, old config kept
        log.warning("reconfigure refused: %s", getattr(exc, "message", exc))
        raise RequestError(getattr(exc, "message", None) or str(exc), "config") from None
    d = cdiff.diff(ctl.cfg, new)
    refused = list(d.refused) + _still_referenced(ctl, d.names(cdiff.NODE_REMOVED))
    if refused:
        log.warning("reconfigure refused: %s", "; ".join(refused))
        raise RequestError("; ".join(refused), "config")
    apply(ctl, new, d, identity(uid)["user"])
    for w in new.warnings:
        log.warning("config: %s", w)
    log.info("reconfigured from %s: %s", new.path,
             "; ".join(str(c) for c in d.changes) or "no change")
    return {"changes": [str(c) for c in d.changes], "warnings": list(new.warnings)}


def _still_referenced(ctl, removed: list[str]) -> list[str]:
    """Removals the cluster still refers to: a node named by a reservation."""
    out = []
    for name, r in ctl.state.reservations.resv.items():
        held = sorted(set(r.get("nodes") or ()) & set(removed))
        if held:
            out.append(f"node {','.join(held)} is in reservation {name}: update or delete the "
                       "reservation first")
    return out


def apply(ctl, new, d: cdiff.ConfigDiff, user: str) -> None:
    """Apply ``new`` (checked, ``d`` its difference from the running configuration) in one
    commit; the agents' messages and the scheduling pass follow it."""
    st = ctl.state
    removed = d.names(cdiff.NODE_REMOVED)
    busy = [n for n in removed if n in st.nodes and (st.nodes[n].jobs
                                                      or st.nodes[n].completing_jobs)]
    effective = _with_nodes(new, {n: ctl.cfg.nodes[n] for n in busy})
    t = now()
    with ctl.applier.transaction():
        apply_settings(ctl, effective)
        _sync_nodes(ctl, effective)
        for name in removed:
            if name in busy:
                _retire(ctl, st.nodes[name], user, t)
            else:
                _remove_node(ctl, name)
        for name in new.nodes:
            if name in ctl.retiring:  # named again before its jobs ended: it stays
                ctl.retiring.discard(name)
                node = st.nodes[name]
                if node.drain and node.reason == REMOVED_REASON:
                    ctl.applier.node(node, events.NodeResume(), t)
        _cancel_orphans(ctl, d.names(cdiff.PART_REMOVED), t)
        st.event(None, "reconfigure", "; ".join(str(c) for c in d.changes)[:2000])
    for link in list(ctl.agents.values()):
        link.send({"op": "reconfigure"})
    ctl.request_schedule()


def _with_nodes(cfg, extra: dict):
    """``cfg`` with the node records of ``extra`` appended (removed nodes still running
    jobs: lookups of their names keep working until they are gone)."""
    if not extra:
        return cfg
    return dataclasses.replace(cfg, nodes={**cfg.nodes, **extra})


def _sync_nodes(ctl, cfg) -> None:
    """The node runtimes follow ``cfg``: new nodes appear (UNKNOWN until their agent
    registers), kept ones take their new record (features, weight), partitions and place in
    the order. Allocations, states and links are untouched."""
    st = ctl.state
    parts: dict[str, list[str]] = {n: [] for n in cfg.nodes}
    for p in cfg.partitions.values():
        for n in p.nodes:
            parts[n].append(p.name)
    nodes: dict[str, NodeRuntime] = {}
    for i, (name, nc) in enumerate(cfg.nodes.items()):
        node = st.nodes.get(name)
        if node is None:
            node = NodeRuntime(nc, i, parts[name])
        else:
            node.conf, node.index, node.partitions = nc, i, parts[name]
        nodes[name] = node
    for name, node in st.nodes.items():  # removed ones: _remove_node or _retire decide
        nodes.setdefault(name, node)
    st.nodes = nodes


def _retire(ctl, node, user: str, t: int) -> None:
    """A removed node that still runs jobs: drained (nothing new starts there) and removed
    by ``retire_idle`` once its jobs are gone."""
    ctl.retiring.add(node.name)
    if not node.drain:
        ctl.applier.node(node, events.NodeDrain(REMOVED_REASON, user), t)


def _remove_node(ctl, name: str) -> None:
    """Forget ``name``: its runtime, its queued messages and its agent's link (the agent,
    refused at its next registration, finds itself gone from slurm.conf and stops)."""
    st = ctl.state
    st.nodes.pop(name, None)
    ctl.retiring.discard(name)
    ctl.outbox.pop(name, None)
    link = ctl.agents.pop(name, None)
    if link is not None:
        link.writer.close()
    st.event(None, "node_removed", REMOVED_REASON, node=name)


def retire_idle(ctl, t: int) -> None:
    """Remove the retiring nodes whose jobs have all ended (run by the controller's tick)."""
    if not ctl.retiring:
        return
    st = ctl.state
    done = [n for n in ctl.retiring
            if n not in st.nodes or not (st.nodes[n].jobs or st.nodes[n].completing_jobs)]
    if not done:
        return
    with ctl.applier.transaction():
        for name in done:
            _remove_node(ctl, name)
        cfg = ctl.cfg
        apply_settings(ctl, dataclasses.replace(
            cfg, nodes={n: nc for n, nc in cfg.nodes.items() if n not in done}))
        _sync_nodes(ctl, ctl.cfg)
    log.info("removed node(s) %s: their last jobs ended", ",".join(sorted(done)))


def _cancel_orphans(ctl, removed: list[str], t: int) -> None:
    """Pending jobs that asked only for removed partitions can never run: they are
    cancelled (by the slurm user), the event log says why. A job that named several
    partitions keeps waiting for those that are left."""
    if not removed:
        return
    gone = set(removed)
    for job in list(ctl.state.jobs.values()):
        if job.state != PENDING:
            continue
        wanted = set(job.partitions_req or [job.partition])
        if wanted and wanted <= gone:
            try:
                ctl.applier.job(job, events.Cancel(by_uid=ctl.owner_uid), t)
            except jobfsm.Refused:
                continue
            ctl.state.event(job, "partition_removed",
                            f"partition {job.partition} removed by reconfigure")
