"""``scontrol show topology``: the topology the controller runs with (topology.conf, read by
muster.config.topologyconf when ``TopologyPlugin`` is ``topology/tree`` or ``topology/block``).

The reply lists the records in the file's order, in the shape Slurm's topology plugins print:
tree switches (``name``, ``level``, ``link_speed``, ``nodes``, ``switches``; node and switch
lists compressed) or base blocks (``name``, ``index``, ``nodes``). ``plugin`` is ``None`` when
no topology is configured, and ``records`` is then empty (scontrol prints Slurm's "No topology
information available"). Anyone may read it, as in Slurm.
"""

from __future__ import annotations

from muster.common.hostlist import compress
from muster.controller.opspec import op


@op("topology")
def topology(ctl, msg, uid, gid):
    topo = getattr(ctl.cfg, "topology", None)
    if topo is None:
        return {"plugin": None, "records": []}
    if topo.plugin.endswith("block"):
        records = [{"name": b.name, "index": i, "nodes": compress(b.nodes)}
                   for i, b in enumerate(topo.blocks)]
    else:
        records = [{"name": s.name, "level": s.level, "link_speed": s.link_speed,
                    "nodes": compress(s.nodes) if s.nodes else "",
                    "switches": compress(s.switches) if s.switches else ""}
                   for s in topo.switches]
    return {"plugin": topo.plugin, "records": records}
