"""Prometheus exposition of the controller's ``metrics`` op (prometheus-client).

Names follow Prometheus conventions: ``muster_`` prefix, base units (seconds, bytes),
``_total`` for counters; documented in docs/api.md.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily)

MB = 1024 * 1024


class _Snapshot:
    """A collector over one reply of the controller's ``metrics`` op."""

    def __init__(self, m: dict):
        self.m = m

    def collect(self):
        m = self.m
        yield GaugeMetricFamily("muster_up", "1 when the controller answered the scrape", value=1)
        g = GaugeMetricFamily("muster_jobs", "Jobs known to the controller (unfinished, and "
                              "finished within MinJobAge) by state and partition",
                              labels=["state", "partition"])
        for state, part, n in m["jobs"]:
            g.add_metric([state, part], n)
        yield g
        if m.get("jobs_by_user") is not None:  # only in an operator's authenticated scrape
            g = GaugeMetricFamily("muster_jobs_by_user", "Jobs by state, partition and user "
                                  "(operators only)", labels=["state", "partition", "user"])
            for state, part, user, n in m["jobs_by_user"]:
                g.add_metric([state, part, user], n)
            yield g
        g = GaugeMetricFamily("muster_jobs_pending", "Pending jobs by reason and partition",
                              labels=["reason", "partition"])
        for reason, part, n in m["pending_reasons"]:
            g.add_metric([reason, part], n)
        yield g
        g = GaugeMetricFamily("muster_nodes", "Nodes by state (DRAINED/DRAINING/NOT_RESPONDING "
                              "take precedence over the allocation state)", labels=["state"])
        for state, n in sorted(m["nodes"].items()):
            g.add_metric([state], n)
        yield g
        res = m["resources"]
        for kind, unit, scale, what in (("gpus", "", 1, "GPUs"), ("cpus", "", 1, "CPUs"),
                                        ("memory", "_bytes", MB, "memory")):
            src = "mem" if kind == "memory" else kind
            yield GaugeMetricFamily(f"muster_{kind}{unit}",
                                    f"Configured {what} on all nodes",
                                    value=res[f"{src}_total"] * scale)
            yield GaugeMetricFamily(f"muster_{kind}_allocated{unit}",
                                    f"{what} allocated to jobs", value=res[f"{src}_alloc"] * scale)
            yield GaugeMetricFamily(f"muster_{kind}_idle{unit}",
                                    f"{what} free on usable nodes (not down, drained or "
                                    "unresponsive)", value=res[f"{src}_idle"] * scale)
        s = m["scheduler"]
        yield GaugeMetricFamily("muster_scheduler_cycle_duration_seconds",
                                "Duration of the last scheduling pass",
                                value=s["last_cycle_seconds"])
        yield CounterMetricFamily("muster_scheduler_cycles", "Scheduling passes run",
                                  value=s["cycles"])
        yield GaugeMetricFamily("muster_scheduler_queue_depth",
                                "Pending jobs the last passes consider", value=s["depth"])
        yield CounterMetricFamily("muster_scheduler_job_starts", "Jobs started by the main "
                                  "scheduler", value=s["starts"])
        yield CounterMetricFamily("muster_backfill_job_starts", "Jobs started by backfill "
                                  "(0 until backfill exists)", value=s["backfill_starts"])
        yield CounterMetricFamily("muster_controller_rpcs", "Client requests handled (all "
                                  "operations)", value=m["rpcs_total"])
        buckets = m["buckets"]
        h = HistogramMetricFamily("muster_rpc_duration_seconds",
                                  "Controller request handling time by operation",
                                  labels=["op"])
        c = CounterMetricFamily("muster_rpc_requests", "Controller requests by operation",
                                labels=["op"])
        for op, d in m["rpc"].items():
            h.add_metric([op], _buckets(buckets, d), sum_value=d["sum"])
            c.add_metric([op], d["count"])
        yield h
        yield c
        d = m["commit"]
        h = HistogramMetricFamily("muster_store_commit_duration_seconds",
                                  "SQLite commit latency of the controller's store")
        h.add_metric([], _buckets(buckets, d), sum_value=d["sum"])
        yield h
        g = GaugeMetricFamily("muster_node_heartbeat_age_seconds",
                              "Seconds since each node's agent was last heard from",
                              labels=["node"])
        for node, age in m["heartbeat_age"]:
            if age is not None:
                g.add_metric([node], age)
        yield g
        yield CounterMetricFamily("muster_job_requeues", "Job requeues (events table)",
                                  value=m["events"].get("requeues", 0))
        yield CounterMetricFamily("muster_node_failures", "Node failures: agents lost or nodes "
                                  "set down (events table)",
                                  value=m["events"].get("node_failures", 0))
        yield GaugeMetricFamily("muster_controller_uptime_seconds",
                                "Seconds since the controller started", value=m["uptime_seconds"])


def _buckets(bounds: list[float], d: dict) -> list[tuple[str, float]]:
    out = [(repr(float(b)), n) for b, n in zip(bounds, d["buckets"])]
    out.append(("+Inf", d["count"]))
    return out


def render(m: dict) -> tuple[bytes, str]:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Snapshot(m))
    return generate_latest(reg), CONTENT_TYPE_LATEST
