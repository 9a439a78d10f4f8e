"""What changed between two configurations, and whether it can be applied live.

``diff(old, new)`` compares two :class:`~muster.config.slurmconf.ClusterConfig` (the running
one, the file as it reads now) and returns a :class:`ConfigDiff`: the changes, in the order
they are applied (nodes, partitions, settings), and the reasons a restart is needed instead.
Pure: it reads the two records, nothing else. ``scontrol reconfigure`` refuses the whole
file when ``refused`` is not empty (the controller keeps running the old configuration).

What needs a restart, and why (docs/design.md, "Live reconfiguration"):

* the keys of ``RESTART_KEYS``: where the daemons listen and keep their state, who they
  run as, how peers authenticate, and the plugins whose choice shapes state built at start
  (the select/priority/proctrack/task plugins, GresTypes);
* an existing node's hardware or address (``NODE_HARDWARE``): its running jobs were placed
  on the old sizes, and the agent's link is bound to its address. Removing the node and
  adding it back under a new name is the live way.

Standard library only (the CLI may import the config package).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Change", "ConfigDiff", "NODE_HARDWARE", "RESTART_KEYS", "diff"]

RESTART_KEYS: frozenset[str] = frozenset((
    "ClusterName", "SlurmctldHost", "SlurmctldAddr", "SlurmctldPort", "SlurmdPort",
    "SlurmUser", "SlurmdUser", "StateSaveLocation", "SlurmdSpoolDir", "AuthType", "AuthInfo",
    "CredType", "SelectType", "SelectTypeParameters", "PriorityType", "ProctrackType",
    "TaskPlugin", "GresTypes", "AccountingStorageType", "JobAcctGatherType", "TopologyPlugin",
    "PreemptType", "SlurmctldPidFile", "SlurmdPidFile", "SlurmctldLogFile", "SlurmdLogFile",
    "MaxJobId", "FirstJobId",
))
"""slurm.conf keys whose change needs a restart of the daemons."""

NODE_HARDWARE: dict[str, str] = {
    "addr": "NodeAddr", "hostname": "NodeHostname", "port": "Port", "cpus": "CPUs",
    "boards": "Boards", "sockets": "Sockets", "cores_per_socket": "CoresPerSocket",
    "threads_per_core": "ThreadsPerCore", "real_memory": "RealMemory",
    "mem_spec_limit": "MemSpecLimit", "core_spec_count": "CoreSpecCount",
    "cpu_spec_list": "CpuSpecList",
}
"""NodeConf field -> slurm.conf key of the node fields that cannot change live."""

_NODE_LIVE = {"tmp_disk": "TmpDisk", "weight": "Weight", "features": "Features",
              "active_features": "ActiveFeatures"}

# kinds of Change, in the order they are applied
NODE_ADDED, NODE_REMOVED, NODE_CHANGED = "node_added", "node_removed", "node_changed"
PART_ADDED, PART_REMOVED, PART_CHANGED = "partition_added", "partition_removed", \
    "partition_changed"
SETTING = "setting"


@dataclass(frozen=True, slots=True)
class Change:
    """One difference: ``kind`` (the constants above), the node, partition or key it is
    about, and what changed (``Key=old->new`` pairs, for the log and the reply)."""

    kind: str
    name: str
    detail: str = ""

    def __str__(self) -> str:
        what = self.kind.replace("_", " ")
        return f"{what} {self.name}" + (f": {self.detail}" if self.detail else "")


@dataclass(frozen=True, slots=True)
class ConfigDiff:
    changes: tuple[Change, ...]
    refused: tuple[str, ...]  # why the new file cannot be applied live (empty: it can)

    def names(self, kind: str) -> list[str]:
        return [c.name for c in self.changes if c.kind == kind]


def _shown(v) -> str:
    if v is None:
        return "(null)"
    if isinstance(v, tuple):
        return ",".join(str(x) for x in v) or "(null)"
    return str(v)


def _pairs(old, new, fields: dict[str, str]) -> list[str]:
    return [f"{key}={_shown(getattr(old, f))}->{_shown(getattr(new, f))}"
            for f, key in fields.items() if getattr(old, f) != getattr(new, f)]


def _gres_hw(node) -> list[tuple]:
    """What of a node's gres is hardware: names, types and counts (device files and core
    affinity are gres.conf details the agents re-read)."""
    return sorted((g.name, g.type or "", g.count, g.no_consume) for g in node.gres)


def _node_changes(old, new) -> tuple[list[Change], list[str]]:
    changes: list[Change] = []
    refused: list[str] = []
    for name, nc in new.nodes.items():
        oc = old.nodes.get(name)
        if oc is None:
            changes.append(Change(NODE_ADDED, name))
            continue
        hw = _pairs(oc, nc, NODE_HARDWARE)
        if _gres_hw(oc) != _gres_hw(nc):
            hw.append(f"Gres={oc.gres_spec or '(null)'}->{nc.gres_spec or '(null)'}")
        if hw:
            refused.append(f"node {name}: {', '.join(hw)} cannot change while the cluster runs "
                           "(restart the daemons, or remove the node and add it under a new "
                           "name)")
            continue
        live = _pairs(oc, nc, _NODE_LIVE)
        if oc.gres != nc.gres:
            live.append("gres.conf")
        if live:
            changes.append(Change(NODE_CHANGED, name, ", ".join(live)))
    changes.extend(Change(NODE_REMOVED, n) for n in old.nodes if n not in new.nodes)
    return changes, refused


def _partition_changes(old, new) -> list[Change]:
    out: list[Change] = []
    for name, pc in new.partitions.items():
        op = old.partitions.get(name)
        if op is None:
            out.append(Change(PART_ADDED, name))
        elif op != pc:
            fields = {f: f for f in pc.__dataclass_fields__ if f != "nodes_expr"}
            out.append(Change(PART_CHANGED, name, ", ".join(_pairs(op, pc, fields))))
    out.extend(Change(PART_REMOVED, n) for n in old.partitions if n not in new.partitions)
    return out


def _setting_changes(old, new) -> tuple[list[Change], list[str]]:
    changes: list[Change] = []
    refused: list[str] = []
    keys = sorted(set(old.raw) | set(new.raw))
    for key in keys:
        a, b = old.raw.get(key), new.raw.get(key)
        if a == b:
            continue
        if key in RESTART_KEYS:
            refused.append(f"{key} cannot change without a restart ({_shown(a)} -> "
                           f"{_shown(b)})")
        else:
            changes.append(Change(SETTING, key, f"{_shown(a)}->{_shown(b)}"))
    if old.gres_autodetect != new.gres_autodetect:
        changes.append(Change(SETTING, "AutoDetect (gres.conf)",
                              f"{_shown(old.gres_autodetect)}->{_shown(new.gres_autodetect)}"))
    return changes, refused


def diff(old, new) -> ConfigDiff:
    """The changes from ``old`` to ``new`` (nodes, partitions, then settings) and the reasons
    the change needs a restart (empty: all of it can be applied live)."""
    nodes, refused_nodes = _node_changes(old, new)
    settings, refused_keys = _setting_changes(old, new)
    return ConfigDiff(tuple(nodes + _partition_changes(old, new) + settings),
                      tuple(refused_keys + refused_nodes))
