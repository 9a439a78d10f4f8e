"""srun -v: Slurm's launch lines on stderr, with its prefixes, wording and order (tools and
scripts parse ``jobid N: nodes(K):`` and ``launching StepId=N.S on host ...``). Standard
library only.

Level 1 (``-v``): the "defined options" table, the allocation line, the launch lines per
node, a line per node whose step daemon has connected (Slurm's "tasks started") and one per
task exit. Level 2 (``-vv``) adds the "propagating" lines of the limits and settings srun
sends with the step. Slurm's other debug lines describe its own threads and plugins and are
not imitated."""

from __future__ import annotations

import sys

from muster.common.hostlist import int_ranges

TASK_FINISH = "srun: launch/slurm: _task_finish: "


class LaunchLog:
    """Writes nothing below level 1; every line is flushed at once (srun's stderr is
    unbuffered in Slurm, and the order against the tasks' output matters to readers)."""

    def __init__(self, level: int):
        self.level = level

    def _say(self, *lines: str) -> None:
        if self.level >= 1:
            sys.stderr.write("".join(f"{ln}\n" for ln in lines))
            sys.stderr.flush()

    def options(self, given: list[tuple[str, str | None]]) -> None:
        """The options of the command line, sorted by name (a flag shows ``set``; -v its
        count), between Slurm's rules."""
        shown: dict[str, str] = {}
        for name, value in given:
            if name == "verbose":
                continue
            shown[name] = "set" if value is None else value
        shown["verbose"] = str(self.level)
        rule = "srun: " + "-" * 20 + " " + "-" * 20
        self._say("srun: defined options", rule,
                  *(f"srun: {name:<20}: {shown[name]}" for name in sorted(shown)),
                  rule, "srun: end of defined options")

    def propagating(self, limits: dict[str, int], prio: int, umask: int) -> None:
        if self.level >= 2:
            self._say(*(f"srun: debug:  propagating RLIMIT_{k}={v}" for k, v in limits.items()),
                      f"srun: debug:  propagating SLURM_PRIO_PROCESS={prio}",
                      f"srun: debug:  propagating UMASK={umask:04o}")

    def allocated(self, job_id: int, nodes: str, cpus: list[int]) -> None:
        self._say(f"srun: jobid {job_id}: nodes({len(cpus)}):`{nodes}', "
                  f"cpu counts: {cpu_counts(cpus)}")

    def launching(self, job_id: int, step_id: int, layout: list[dict], cpu_bind: str | None) -> None:
        self._say(f"srun: launch/slurm: launch_p_step_launch: CpuBindType="
                  f"{cpu_bind or '(null type)'}",
                  *(f"srun: launching StepId={job_id}.{step_id} on host {n['node']}, "
                    f"{len(n['tasks'])} tasks: {task_ids(n['tasks'])}" for n in layout),
                  "srun: route/default: init: route default plugin loaded")

    def started(self, node: str, ntasks: int) -> None:
        self._say(f"srun: launch/slurm: _task_start: Node {node}, {ntasks} tasks started")

    def exited(self, step: str, node: str, task: int, e: dict) -> None:
        """One task's exit: Slurm's notification line, and ``Completed`` for a clean exit (a
        failure gets srun's error line, printed as without -v)."""
        status = wait_status(e)
        lines = [f"{TASK_FINISH}Received task exit notification for 1 task of StepId={step} "
                 f"(status=0x{status:04x})."]
        if not status:
            lines.append(f"{TASK_FINISH}{node}: task {task}: Completed")
        self._say(*lines)


def wait_status(e: dict) -> int:
    """A task's exit as the wait(2) status Slurm prints: code << 8, or the signal."""
    if e.get("oom") and not e.get("signal"):
        return 9
    if e.get("signal"):
        return int(e["signal"]) & 0x7F
    return (int(e.get("exit_code") or 0) & 0xFF) << 8


def cpu_counts(cpus: list[int]) -> str:
    """``2(x3),1(x1)``: runs of equal per-node CPU counts, in node order."""
    runs: list[list[int]] = []
    for c in cpus:
        if runs and runs[-1][0] == c:
            runs[-1][1] += 1
        else:
            runs.append([c, 1])
    return ",".join(f"{c}(x{n})" for c, n in runs)


def task_ids(ids: list[int]) -> str:
    """A node's task ids as Slurm prints them: ``2`` alone, else ``[0-1,4]``."""
    return str(ids[0]) if len(ids) == 1 else f"[{int_ranges(ids)}]"
