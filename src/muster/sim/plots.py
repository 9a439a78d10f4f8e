"""PNG plots of a replay (matplotlib, Agg backend; the ``sim`` extra).

``write_plots(result, dir)`` writes ``utilization.png`` (CPUs/GPUs in use over time),
``wait_cdf.png`` (wait-time distribution) and ``gantt.png`` (the first ``gantt_jobs`` jobs:
one bar per job from start to end, waiting shown thin from submit to start).
"""

from __future__ import annotations

import os

__all__ = ["MissingMatplotlib", "write_plots"]


class MissingMatplotlib(RuntimeError):
    pass


def _plt():
    try:
        import matplotlib
    except ImportError:
        raise MissingMatplotlib(
            "--plot needs matplotlib, which is not installed: "
            "pip install 'muster[sim]' (or pip install 'matplotlib>=3.8')") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def write_plots(res, out_dir: str, *, gantt_jobs: int = 200) -> list[str]:
    plt = _plt()
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    cl = res.cluster
    gpu = cl.total_gpus > 0
    # utilization over time
    fig, ax = plt.subplots(figsize=(10, 3.5))
    if res.series:
        ts = [s[0] / 3600 for s in res.series]
        used = [(s[2] / cl.total_gpus) if gpu else (s[1] / cl.total_cpus) for s in res.series]
        ax.step(ts, used, where="post", lw=0.6)
    ax.set_xlabel("time since first submit (h)")
    ax.set_ylabel("GPUs in use" if gpu else "CPUs in use")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"Utilization — {res.policy}")
    paths.append(_save(fig, plt, out_dir, "utilization.png"))
    # wait distribution (CDF)
    waits = sorted(s - j.submit for j, s in zip(res.jobs, res.start))
    fig, ax = plt.subplots(figsize=(6, 4))
    if waits:
        n = len(waits)
        ax.plot([max(w, 1) for w in waits], [(i + 1) / n for i in range(n)])
        ax.set_xscale("log")
    ax.set_xlabel("wait (s, log; 0 shown as 1)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(f"Wait-time CDF — {res.policy}")
    paths.append(_save(fig, plt, out_dir, "wait_cdf.png"))
    # Gantt chart of a window
    k = min(gantt_jobs, len(res.jobs))
    fig, ax = plt.subplots(figsize=(10, max(3, k * 0.03 + 1)))
    for y, (j, s, e) in enumerate(zip(res.jobs[:k], res.start[:k], res.end[:k])):
        ax.plot([j.submit / 3600, s / 3600], [y, y], color="0.7", lw=0.5)
        ax.plot([s / 3600, e / 3600], [y, y], color="C1" if res.killed[y] else "C0", lw=2)
    ax.invert_yaxis()
    ax.set_xlabel("time (h)")
    ax.set_ylabel("job (submit order)")
    ax.set_title(f"Gantt chart, first {k} jobs — {res.policy} (grey: waiting, orange: killed)")
    paths.append(_save(fig, plt, out_dir, "gantt.png"))
    return paths


def _save(fig, plt, out_dir: str, name: str) -> str:
    p = os.path.join(out_dir, name)
    fig.tight_layout()
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p
