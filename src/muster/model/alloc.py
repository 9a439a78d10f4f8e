"""The one allocation type: one node's share of a job's allocation.

Placement hands it out (``muster.core``), a running job holds a tuple of them in
``Job.alloc`` (slurm.conf node order, batch host first), the controller books and frees
node resources by them, and the simulator replays them. On the wire and in the store it is the
JSON object ``{"node", "cpus", "mem", "gpus", "tasks"}`` (docs/records.md): ``to_wire`` and
``from_wire`` are the only conversions, and ``from_wire`` reads rows written before ``tasks``
existed as one task.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class NodeAlloc:
    """``cpus`` and ``mem`` (MB) taken on ``node``, the GPU indices there, the job's tasks
    there (steps lay out their tasks within these)."""

    node: str
    cpus: int
    mem: int
    gpus: tuple[int, ...] = ()
    tasks: int = 1

    def to_wire(self) -> dict[str, Any]:
        return {"node": self.node, "cpus": self.cpus, "mem": self.mem, "gpus": list(self.gpus),
                "tasks": self.tasks}

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> NodeAlloc:
        return cls(str(d["node"]), int(d.get("cpus") or 0), int(d.get("mem") or 0),
                   tuple(int(g) for g in d.get("gpus") or ()), int(d.get("tasks") or 1))
