"""Pure, deterministic scheduling core.

Pipeline (one cycle)::

    Snapshot + SchedConfig
      → screen   (blocked jobs, partition state/limits: static reasons)
      → order    ((-PriorityTier, (-priority, nice), submit_time, job_id, partition position))
      → walk     (BlockPolicy: skip? → placement.place on the free working copy)
      → Plan     (Start per started job or array task; a reason per job left pending)

Vocabulary:

* **snapshot** - immutable input: nodes with their free CPUs/memory/GPU indices,
  partitions, pending jobs, ``now`` (integer seconds).
* **entry** - one (pending job, candidate partition) pair in the queue.
* **placement** - choosing nodes, tasks, CPUs, memory and GPU indices for one job on
  given free resources (cons_tres-like, best fit); :func:`fits_ever` asks the same on
  empty nodes ("never" versus "not now").
* **block policy** - what lower-priority entries may still use after one waits for
  resources (main scheduler: nothing in that partition); backfill will replace it.
* **plan** - the decision; the shell re-checks and commits it (plan_apply).
* **timeline** - free resources per node over integer time (:mod:`.timeline`); backfill
  (:mod:`.backfill`) carves starts and reservations out of it; the variants differ only
  in reservation depth (EASY = 1, conservative = None).

Modules: snapshot (input types), placement (one job on given nodes), schedule (the
cycle), timeline, backfill, priority (multifactor), fairshare (Fair Tree / classic,
sshare), limits (partition/QOS/association → reasons, submit check), preempt, topology,
pooled (an incremental scheduler with ``schedule()``'s decisions for one pool of CPUs under
FIFO/EASY: state kept across passes, told submissions and ends; the simulator's fast path),
nodeclass (the same decisions for many identical CPU nodes: free CPUs per node grouped into
node classes, running jobs' ends; offered the queue each pass), gpuclass (its counterpart
for many identical GPU nodes and one-CPU GPU jobs: free GPU indices and CPUs per node).

Nothing here touches sockets, files, threads, subprocesses, the wall clock or global
randomness; same input → identical Plan.
"""

from .placement import (
    NEVER_BAD_CONFIG,
    NEVER_NODE_COUNT,
    NEVER_REQ_NODES,
    Allocation,
    NodeAlloc,
    Request,
    empty_view,
    first_fit,
    fits_ever,
    node_key,
    place,
    place_request,
    request_of,
)
from .preempt import Preemption
from .schedule import BlockPolicy, MainBlocking, Plan, Start, schedule
from .snapshot import (
    AssocView,
    JobView,
    NodeView,
    PartitionView,
    QosView,
    ReservationView,
    RunningView,
    SchedConfig,
    Snapshot,
    SwitchView,
)

__all__ = [
    "Allocation",
    "AssocView",
    "Preemption",
    "QosView",
    "ReservationView",
    "RunningView",
    "SwitchView",
    "BlockPolicy",
    "JobView",
    "MainBlocking",
    "NEVER_BAD_CONFIG",
    "NEVER_NODE_COUNT",
    "NEVER_REQ_NODES",
    "NodeAlloc",
    "NodeView",
    "PartitionView",
    "Plan",
    "Request",
    "SchedConfig",
    "Snapshot",
    "Start",
    "empty_view",
    "first_fit",
    "fits_ever",
    "node_key",
    "place",
    "place_request",
    "request_of",
    "schedule",
]
