"""Metrics of a replay (:class:`~muster.sim.engine.SimResult` → dict), and their table.

Definitions (wait = start − submit, run = end − start as executed, i.e. cut at the limit):

* **makespan** = last end − first submit.
* **utilization** = Σ run × CPUs / (total CPUs × makespan); **GPU utilization** likewise.
* **bounded slowdown** = max(1, (wait + run) / max(run, τ)), τ = 10 s (Feitelson).
* **JCT** (job completion time) = wait + run.
* **fairness** = Jain's index (Σx)² / (n Σx²) over users of x = the user's mean bounded
  slowdown; 1 = every user is slowed equally; None when the trace has no users.
* **GPU fragmentation** (GPU clusters): ``gpu_idle_while_waiting`` = time-averaged fraction
  of all GPUs that are free while at least one GPU job waits (capacity stranded by shape,
  placement or reservations); ``gpu_free_on_partial_nodes`` = time-averaged share of the
  free GPUs that lie on partly used nodes (scattered free GPUs, Weng et al.'s concern).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["TAU", "bounded_slowdown", "compute", "format_table", "jain", "percentile"]

TAU = 10


def bounded_slowdown(wait: float, run: float, tau: float = TAU) -> float:
    return max(1.0, (wait + run) / max(run, tau))


def jain(xs: Sequence[float]) -> float | None:
    if not xs:
        return None
    s, s2 = sum(xs), sum(x * x for x in xs)
    if s2 == 0:
        return 1.0
    return s * s / (len(xs) * s2)


def percentile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), ``q`` in [0, 100]."""
    if not sorted_xs:
        return 0.0
    k = (len(sorted_xs) - 1) * q / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (k - lo)


def compute(res) -> dict:
    jobs, start, end = res.jobs, res.start, res.end
    n = len(jobs)
    out: dict = {"policy": res.policy, "jobs": n, "skipped": len(res.skipped),
                 "killed_at_limit": sum(res.killed)}
    if n == 0:
        return out
    waits, bslds, jcts = [], [], []
    cpu_s = gpu_s = 0
    per_user: dict[str, list[float]] = {}
    for tj, s, e in zip(jobs, start, end):
        w, r = s - tj.submit, e - s
        b = bounded_slowdown(w, r)
        waits.append(w)
        bslds.append(b)
        jcts.append(w + r)
        cpu_s += r * tj.cpus
        gpu_s += r * tj.gpus
        if tj.user not in ("", "-1"):
            per_user.setdefault(tj.user, []).append(b)
    first = min(tj.submit for tj in jobs)
    last = max(end)
    span = max(1, last - first)
    sw = sorted(waits)
    cl = res.cluster
    out.update({
        "makespan_s": last - first,
        "utilization": cpu_s / (cl.total_cpus * span) if cl.total_cpus else None,
        "wait_mean_s": sum(waits) / n,
        "wait_median_s": percentile(sw, 50),
        "wait_p95_s": percentile(sw, 95),
        "wait_p99_s": percentile(sw, 99),
        "bounded_slowdown_mean": sum(bslds) / n,
        "jct_mean_s": sum(jcts) / n,
        "fairness_jain": jain([sum(v) / len(v) for v in per_user.values()]) if per_user else None,
        "users": len(per_user),
    })
    if cl.total_gpus:
        out["gpu_utilization"] = gpu_s / (cl.total_gpus * span)
        out["gpu_idle_while_waiting"] = res.gpu_idle_waiting / (cl.total_gpus * span)
        out["gpu_free_on_partial_nodes"] = (res.gpu_free_partial / res.gpu_free_total
                                            if res.gpu_free_total else 0.0)
    if cl.topology:
        out.update(topology_metrics(res))
    out["sim"] = {"wall_s": res.wall_s, "jobs_per_s": n / res.wall_s if res.wall_s else None,
                  "core_calls": res.core_calls, "core_s": res.core_s, "events": res.events,
                  "core": res.core}
    return out


def _groups(topology: dict, names: Sequence[str]) -> tuple[dict[str, str], dict[str, list[int]]]:
    """(node → its leaf/block, fabric → its leaves' sizes) over the cluster's ``names``; a
    node under no leaf is its own leaf and fabric; blocks form one fabric."""
    leaf_of: dict[str, str] = {}
    fabric_of: dict[str, str] = {}
    if topology.get("blocks"):
        for b in topology["blocks"]:
            fabric_of[b.name] = ""
            for nm in b.nodes:
                leaf_of.setdefault(nm, b.name)
    else:
        sw = topology.get("switches", ())
        parent = {c: s.name for s in sw for c in s.switches}
        for s in sw:
            root, seen = s.name, set()
            while root in parent and root not in seen:
                seen.add(root)
                root = parent[root]
            fabric_of[s.name] = root
            for nm in s.nodes:
                leaf_of.setdefault(nm, s.name)
    sizes: dict[str, dict[str, int]] = {}
    for nm in names:
        leaf = leaf_of.setdefault(nm, "\0" + nm)
        fab = fabric_of.get(leaf, leaf)
        sizes.setdefault(fab, {})[leaf] = sizes.get(fab, {}).get(leaf, 0) + 1
    return leaf_of, {f: sorted(v.values(), reverse=True) for f, v in sizes.items()}


def min_leaves(k: int, fabrics: dict[str, list[int]]) -> int | None:
    """The fewest leaves any ``k`` nodes of one fabric can lie under (largest leaves first),
    None when no fabric has ``k`` nodes."""
    best = None
    for sizes in fabrics.values():
        total = 0
        for m, s in enumerate(sizes, 1):
            total += s
            if total >= k:
                best = m if best is None else min(best, m)
                break
    return best


def topology_metrics(res) -> dict:
    """Placement quality under a topology, over the jobs that ran on more than one node:
    ``topo_min_leaves_fraction`` = share placed on the fewest leaves (blocks) an empty
    cluster allows for their node count, ``topo_leaves_mean`` = mean leaves per such job."""
    names = [n.name for n in res.cluster.nodes]
    leaf_of, fabrics = _groups(res.cluster.topology, names)
    multi = [ns for ns in res.nodes if len(ns) > 1]
    if not multi:
        return {"topo_multinode_jobs": 0}
    used = [len({leaf_of.get(nm, nm) for nm in ns}) for ns in multi]
    best = sum(1 for ns, u in zip(multi, used) if u == min_leaves(len(ns), fabrics))
    return {"topo_multinode_jobs": len(multi), "topo_min_leaves_fraction": best / len(multi),
            "topo_leaves_mean": sum(used) / len(multi)}


_ROWS = [
    ("jobs", "jobs replayed", "{:,}"),
    ("skipped", "skipped (too large)", "{:,}"),
    ("killed_at_limit", "killed at limit", "{:,}"),
    ("makespan_s", "makespan", "dur"),
    ("utilization", "utilization (CPU)", "{:.3f}"),
    ("gpu_utilization", "utilization (GPU)", "{:.3f}"),
    ("wait_mean_s", "wait mean", "dur"),
    ("wait_median_s", "wait median", "dur"),
    ("wait_p95_s", "wait p95", "dur"),
    ("wait_p99_s", "wait p99", "dur"),
    ("bounded_slowdown_mean", "bounded slowdown mean (τ=10s)", "{:,.2f}"),
    ("jct_mean_s", "job completion time mean", "dur"),
    ("fairness_jain", "fairness (Jain, per-user slowdown)", "{:.3f}"),
    ("gpu_idle_while_waiting", "GPUs idle while GPU jobs wait", "{:.3f}"),
    ("gpu_free_on_partial_nodes", "free GPUs on partly used nodes", "{:.3f}"),
    ("topo_multinode_jobs", "multi-node jobs (topology)", "{:,}"),
    ("topo_min_leaves_fraction", "  on the fewest leaves possible", "{:.3f}"),
    ("topo_leaves_mean", "  leaves per multi-node job (mean)", "{:.2f}"),
]


def _dur(s: float) -> str:
    s = float(s)
    if s < 120:
        return f"{s:,.0f} s"
    if s < 2 * 86400:
        return f"{s:,.0f} s ({s / 3600:.1f} h)"
    return f"{s:,.0f} s ({s / 86400:.1f} d)"


def format_table(m: dict) -> str:
    lines = []
    for key, label, fmt in _ROWS:
        v = m.get(key)
        if v is None:
            continue
        lines.append(f"{label:<36} {_dur(v) if fmt == 'dur' else fmt.format(v)}")
    sim = m.get("sim")
    if sim and sim.get("jobs_per_s"):
        lines.append(f"{'replay speed':<36} {sim['jobs_per_s']:,.0f} jobs/s "
                     f"({sim['wall_s']:.2f} s, {sim['core_calls']:,} core calls, "
                     f"{sim['core_s']:.2f} s in core"
                     f"{', incremental pooled core' if sim.get('core') == 'pooled' else ''})")
    return "\n".join(lines)
