"""slurm.conf as the core sees it: the one builder of :class:`SchedConfig` and of the partition
views, used by the controller (musterctld's passes, the submit-time fit check, sprio/sshare,
squeue's expected start times) and by the simulator, so a policy tuned in the simulator is read
from slurm.conf exactly as it runs live.

Pure: ``cfg`` is any object with the attributes of muster.config.slurmconf.SlurmConf (read with
``getattr`` and defaults where a setting may be absent); nothing here imports the config parser.
"""

from __future__ import annotations

from typing import Any

from .snapshot import PartitionView, SchedConfig, SwitchView

__all__ = ["partition_views", "sched_config", "topology_fields", "topology_views"]


def sched_config(cfg: Any) -> SchedConfig:
    """slurm.conf → the core's settings. SchedulerType=sched/backfill (Slurm's default) turns
    backfill on; SchedulerParameters bf_window (minutes), bf_resolution (s), bf_max_job_test,
    and Muster's bf_depth (1 = EASY; default: every tested job may reserve, as Slurm does)."""
    sp = getattr(cfg, "scheduler_parameters", None) or {}

    def num(key: str, default: int) -> int:
        try:
            return int(sp.get(key, default))
        except (TypeError, ValueError):
            return default
    depth = sp.get("bf_depth")
    # PriorityType: Slurm 23.11's default is priority/multifactor (slurmconf's default too);
    # with every weight 0 each job's priority is 1 minus its nice (at least 1), computed per
    # job without the factors (muster.core.priority.static)
    ptype = "basic" if str(getattr(cfg, "priority_type", "") or "").lower().endswith(
        "/basic") else "multifactor"
    enforce = {e.lower() for e in getattr(cfg, "accounting_storage_enforce", ()) or ()}
    if enforce & {"limits", "qos", "safe"}:
        enforce.add("associations")
    if "safe" in enforce:
        enforce.add("limits")
    pmode = (getattr(cfg, "preempt_mode", "OFF") or "OFF").upper().split(",")[0]
    wt = getattr(cfg, "priority_weight_tres", None) or {}
    return SchedConfig(
        priority_type=ptype,
        priority_max_age=int(getattr(cfg, "priority_max_age", 7 * 86400) or 0),
        priority_favor_small=bool(getattr(cfg, "priority_favor_small", False)),
        priority_flags=frozenset(f.upper() for f in getattr(cfg, "priority_flags", ()) or ()),
        weight_age=int(getattr(cfg, "priority_weight_age", 0) or 0),
        weight_assoc=int(getattr(cfg, "priority_weight_assoc", 0) or 0),
        weight_fairshare=int(getattr(cfg, "priority_weight_fairshare", 0) or 0),
        weight_jobsize=int(getattr(cfg, "priority_weight_job_size", 0) or 0),
        weight_partition=int(getattr(cfg, "priority_weight_partition", 0) or 0),
        weight_qos=int(getattr(cfg, "priority_weight_qos", 0) or 0),
        weight_tres=tuple(sorted((("gres/gpu" if k.lower() in ("gres/gpu", "gpu") else k.lower()),
                                  int(v)) for k, v in wt.items())),
        enforce=frozenset(enforce),
        preempt_type=getattr(cfg, "preempt_type", "preempt/none") or "preempt/none",
        preempt_mode=pmode,
        preempt_exempt_time=int(getattr(cfg, "preempt_exempt_time", 0) or 0),
        def_mem_per_cpu=cfg.def_mem_per_cpu, def_mem_per_node=cfg.def_mem_per_node,
        def_mem_per_gpu=cfg.def_mem_per_gpu,
        backfill=(getattr(cfg, "scheduler_type", "sched/backfill") or "").endswith("backfill"),
        bf_depth=int(depth) if depth and str(depth).isdigit() else None,
        bf_window=num("bf_window", 1440), bf_resolution=num("bf_resolution", 60),
        bf_max_job_test=num("bf_max_job_test", 500), kill_wait=cfg.kill_wait,
        over_time_limit=cfg.over_time_limit or 0,
        max_switch_wait=num("max_switch_wait", 300))


def topology_fields(cfg: Any) -> dict[str, Any]:
    """The Snapshot fields of topology.conf (``switches``, or ``blocks`` and
    ``block_sizes``), empty without a topology plugin. Built once per config object by the
    caller (the controller keeps it with its SchedConfig): the views are immutable."""
    return topology_views(getattr(cfg, "topology", None))


def topology_views(topo: Any) -> dict[str, Any]:
    """:func:`topology_fields` of a parsed topology.conf (muster.config.topologyconf's
    TopologyConf, or None)."""
    if topo is None:
        return {}
    if topo.blocks:
        return {"blocks": tuple(SwitchView(b.name, nodes=tuple(b.nodes)) for b in topo.blocks),
                "block_sizes": tuple(topo.block_sizes)}
    return {"switches": tuple(SwitchView(s.name, nodes=tuple(s.nodes),
                                         switches=tuple(s.switches)) for s in topo.switches)}


def _names(v: Any) -> frozenset[str] | None:
    if not v or "ALL" in v:
        return None
    return frozenset(v)


def partition_views(cfg: Any) -> dict[str, PartitionView]:
    """Partitions as the core sees them. AllowGroups is checked at submit (with the
    submitter's supplementary groups, which the core does not know), so it is not here."""
    return {p.name: PartitionView(name=p.name, state=p.state, priority_tier=p.priority_tier,
                                  node_names=tuple(p.nodes), max_time=p.max_time,
                                  max_nodes=p.max_nodes, min_nodes=p.min_nodes,
                                  priority_job_factor=p.priority_job_factor,
                                  allow_accounts=_names(p.allow_accounts),
                                  allow_qos=_names(p.allow_qos),
                                  deny_accounts=frozenset(p.deny_accounts or ()),
                                  deny_qos=frozenset(p.deny_qos or ()), qos=p.qos or None,
                                  preempt_mode=(p.preempt_mode or "").upper().split(",")[0] or None,
                                  grace_time=p.grace_time or 0)
            for p in cfg.partitions.values()}
