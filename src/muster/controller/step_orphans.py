"""Ends of steps that began under an earlier controller process (issue 16: restarts never
kill work).

The live step table (StepManager.steps) is memory: a restarted controller does not have the
steps that were running when its predecessor stopped, but their tasks went on under their
step daemons, and their accounting rows are in the store, RUNNING. When such a step's ends
arrive (live, or in a registration's ``steps_finished``), this module completes its row: it
collects one report per node of the row's NodeList and, once all are in, writes the same
outcome a live step gets (``step_outcome``), keeping every other field of the stored row.

Invariants: only a row that is still RUNNING, of a job the controller knows, and only reports
from nodes the row names are used; a node reports once. Nothing is signalled or launched here.
"""

from __future__ import annotations

import weakref

from muster.common import clock
from muster.common.hostlist import expand

_PENDING: weakref.WeakKeyDictionary[object, dict[tuple[int, int], dict[str, dict]]] = \
    weakref.WeakKeyDictionary()


def step_outcome(reports: list[dict]) -> tuple[str, int, int]:
    """(state, exit code, signal) of a step from its nodes' end reports, as Slurm shows it."""
    tasks = [t for r in reports for t in r.get("tasks", [])]
    exit_code = max((t["exit_code"] for t in tasks), default=0)
    sig = max((t["signal"] for t in tasks), default=0)
    if any(r.get("lost") for r in reports):
        return "NODE_FAIL", exit_code, sig
    if any(r.get("terminated") for r in reports):
        return "CANCELLED", exit_code, sig
    if any(r.get("oom_kills") for r in reports):  # the OOM killer struck: 0:125, as Slurm
        return "OUT_OF_MEMORY", 0, 125
    if sig in (9, 15):
        return "CANCELLED", exit_code, sig
    if sig or exit_code:
        return "FAILED", exit_code, sig
    return "COMPLETED", exit_code, sig


def report(ctl, node: str, rep: dict) -> None:
    """A node's end report of a step the live table does not know."""
    job_id, step_id = rep.get("job_id"), rep.get("step_id")
    if not isinstance(job_id, int) or not isinstance(step_id, int):
        return
    job = ctl.state.jobs.get(job_id)
    if job is None:
        return
    store = ctl.state.store
    row = next((r for r in store.steps_of([job_id]).get(job_id, [])
                if str(r.get("step_id")) == str(step_id)), None)
    if row is None or row.get("state") != "RUNNING":
        return
    nodes = expand(row.get("node_list") or "")
    if node not in nodes:
        return
    got = _PENDING.setdefault(ctl, {}).setdefault((job_id, step_id), {})
    got.setdefault(node, rep)
    if len(got) < len(nodes):
        return
    del _PENDING[ctl][(job_id, step_id)]
    state, exit_code, sig = step_outcome(list(got.values()))
    end = max((r.get("end_time") or 0) for r in got.values()) or clock.now()
    with store.transaction():
        store.put_step(job_id, str(step_id), {**row, "state": state, "exit_code": exit_code,
                                              "exit_signal": sig, "end_time": end})
        if (exit_code, sig) > (job.derived_exit_code, job.derived_exit_signal):
            job.derived_exit_code, job.derived_exit_signal = exit_code, sig
            ctl.state.save(job)
