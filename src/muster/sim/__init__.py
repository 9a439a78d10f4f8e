"""Trace-driven simulator: the live lifecycle and scheduling core in virtual time.

Pipeline::

    traces.read_trace(path)            SWF / ITP / Alibaba openb / Philly  → Trace (TraceJob…)
      → replay.select_jobs(window)     --start-job/--jobs, time bounds, random windows
      → cluster.*                      slurm.conf | flags | the trace  → SimCluster (NodeViews)
      → engine.Simulator.run()         events → muster.core.schedule → muster.lifecycle.job
      → metrics.compute(result)        wait, bounded slowdown, utilization, fairness, GPU frag
      → plots.write_plots(result)      PNGs (optional matplotlib extra)

Contract: the simulator decides nothing itself. Starts come only from
:func:`muster.core.schedule` on a :class:`muster.core.Snapshot` built by the engine, job
state changes only through :mod:`muster.lifecycle.job`, so a policy tuned here is the one
the controller runs. A slurm.conf is read the controller's way
(:mod:`muster.controller.scheduling`: node order, partition, scheduling settings), and with
multifactor priority the controller's own accounting (``Accounts`` on an in-memory store)
charges usage and computes fair-share. ``sim`` never starts daemons and never imports
``agent`` or ``api``.
Time is virtual (integer seconds); the only randomness is the window draw, seeded.
"""

from .engine import POLICIES, SimError, SimResult, Simulator
from .metrics import compute, format_table
from .replay import MachineSpec, replay_trace, select_jobs
from .traces import Trace, TraceError, TraceJob, read_trace

__all__ = [
    "POLICIES", "MachineSpec", "SimError", "SimResult", "Simulator",
    "Trace", "TraceError", "TraceJob", "compute", "format_table",
    "read_trace", "replay_trace", "select_jobs",
]
