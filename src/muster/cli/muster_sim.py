"""``muster sim TRACE``: replay a workload trace through the scheduling core in virtual time.

Argument parsing and output only; the work is in :mod:`muster.sim` (imported when the
command runs, never by ``muster`` itself).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from muster.cli.getopt import CliExit

PROG = "muster sim"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=PROG, description="Replay a job trace (SWF, Microsoft ITP CSV, Alibaba openb "
        "pods, Philly-derived CSV) through Muster's scheduling core in virtual time.")
    ap.add_argument("trace", help="trace file (.swf, .swf.gz, .csv, .csv.gz)")
    ap.add_argument("--format", choices=["swf", "itp", "openb", "philly"],
                    help="trace format (default: by extension and header)")
    ap.add_argument("--nodes-file", help="Alibaba node list (default: "
                    "openb_node_list_all_node.csv.gz next to the pod list)")
    m = ap.add_argument_group("machine (default: sized from the trace)")
    m.add_argument("--config", help="slurm.conf describing the cluster and its scheduling "
                   "settings (default partition unless --partition)")
    m.add_argument("--partition", help="partition(s) of --config; a comma list offers every job "
                   "to each (as sbatch -p a,b): it runs in the first whose limits allow")
    m.add_argument("--nodes", type=int)
    m.add_argument("--cpus-per-node", type=int)
    m.add_argument("--gpus-per-node", type=int)
    m.add_argument("--gpu-type")
    m.add_argument("--topology", metavar="SPEC",
                   help="network topology: tree:N (leaf switches of N nodes), block:N, or a "
                        "topology.conf file (default: the one next to --config, if its "
                        "TopologyPlugin is topology/tree or topology/block)")
    ap.add_argument("--policy", choices=["fifo", "easy", "conservative", "config"],
                    help="fifo = main scheduler, no backfill; easy = backfill with one "
                         "reservation; conservative = a reservation for every job (no window, "
                         "every job tested); config = the --config file's own SchedulerType "
                         "and SchedulerParameters. Priority weights and fair-share always come "
                         "from --config. Default: config with --config, else fifo")
    w = ap.add_argument_group("window")
    w.add_argument("--start-job", type=int, default=0,
                   help="index (0-based, submit order) of the first job to replay")
    w.add_argument("--jobs", type=int, help="number of jobs to replay")
    w.add_argument("--start-time", type=int, help="replay jobs submitted at or after (s)")
    w.add_argument("--end-time", type=int, help="replay jobs submitted before (s)")
    w.add_argument("--windows", type=int,
                   help="replay this many random windows of --jobs jobs (RLScheduler protocol) "
                        "and report each and their mean")
    w.add_argument("--seed", type=int, default=0, help="seed for --windows (default 0)")
    o = ap.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="metrics as JSON on stdout")
    o.add_argument("--plot", metavar="DIR", help="write utilization, wait-CDF and Gantt PNGs")
    o.add_argument("--schedule", metavar="FILE",
                   help="write every replayed job's schedule as CSV (job, user, submit, start, "
                        "end, wait, cpus, gpus, state, nodes)")
    o.add_argument("--gantt-jobs", type=int, default=200)
    o.add_argument("--progress", action="store_true",
                   help="progress bar on stderr even when it is not a terminal")
    return ap


class _Progress:
    def __init__(self, label: str) -> None:
        self.label = label
        self.t0 = time.perf_counter()
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if now - self.last < 0.1 and done < total:
            return
        self.last = now
        frac = done / total if total else 1.0
        bar = "#" * int(30 * frac)
        rate = done / max(1e-9, now - self.t0)
        sys.stderr.write(f"\r{self.label} [{bar:<30}] {frac:6.1%} {done:,}/{total:,} jobs "
                         f"{rate:,.0f} jobs/s")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")
        sys.stderr.flush()


def _fail(msg: str, code: int = 1) -> CliExit:
    return CliExit([f"{PROG}: error: {msg}"], code)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from muster import sim
    from muster.sim import replay as rp

    if args.windows is not None and (args.jobs is None or args.windows < 1):
        raise _fail("--windows needs --jobs N and a count ≥ 1")
    if args.windows is not None and (args.plot or args.schedule):
        raise _fail("--plot and --schedule describe one replay: drop --windows, or pick one "
                    "window with --start-job/--jobs")
    if args.config and (args.nodes or args.cpus_per_node or args.gpus_per_node):
        raise _fail("give either --config or --nodes/--cpus-per-node/--gpus-per-node")
    if args.config and not os.path.isfile(args.config):
        raise _fail(f"{args.config}: no such file")
    if (args.cpus_per_node or args.gpus_per_node is not None) and args.nodes is None \
            and args.config is None and not args.trace.endswith((".swf", ".swf.gz")):
        raise _fail("--cpus-per-node/--gpus-per-node need --nodes for GPU traces")
    if args.policy is None:
        args.policy = "config" if args.config else "fifo"
    if args.policy == "config" and not args.config:
        raise _fail("--policy config needs --config FILE")
    machine = rp.MachineSpec(config=args.config, partition=args.partition, nodes=args.nodes,
                             cpus_per_node=args.cpus_per_node, gpus_per_node=args.gpus_per_node,
                             gpu_type=args.gpu_type, topology=args.topology)
    try:
        # the first jobs alone are needed when a count is asked for from a start job
        head = (args.start_job or 0) + args.jobs if args.jobs and args.jobs > 0 and \
            not args.windows and args.start_time is None and args.end_time is None and \
            (args.start_job or 0) >= 0 else None
        trace = sim.read_trace(args.trace, fmt=args.format, nodes_file=args.nodes_file,
                               limit=head)
    except (sim.TraceError, OSError) as e:
        raise _fail(str(e)) from None
    if not trace.jobs:
        raise _fail(f"{args.trace}: no replayable jobs")
    show = args.progress or sys.stderr.isatty()
    try:
        if args.windows:
            starts = rp.random_starts(len(trace.jobs), args.jobs, args.windows, args.seed)
            runs = []
            for k, s in enumerate(starts):
                sel = trace.jobs[s:s + args.jobs]
                bar = _Progress(f"window {k + 1}/{len(starts)}") if show else None
                res, met = rp.replay_trace(trace, sel, args.policy, machine, progress=bar)
                if bar:
                    bar.close()
                met["start_job"] = s
                runs.append((res, met))
            return _report_windows(args, trace, runs)
        sel = rp.select_jobs(trace, start_job=args.start_job, jobs=args.jobs,
                             start_time=args.start_time, end_time=args.end_time)
        if not sel:
            raise _fail("the window selects no jobs")
        bar = _Progress("replay") if show else None
        res, met = rp.replay_trace(trace, sel, args.policy, machine,
                                   record_series=bool(args.plot), progress=bar)
        if bar:
            bar.close()
    except ValueError as e:
        raise _fail(str(e)) from None
    except sim.SimError as e:
        raise _fail(f"simulation invariant violated: {e}", 2) from None
    plots = []
    if args.plot:
        from muster.sim.plots import MissingMatplotlib, write_plots
        try:
            plots = write_plots(res, args.plot, gantt_jobs=args.gantt_jobs)
        except MissingMatplotlib as e:
            raise _fail(str(e)) from None
    if args.schedule:
        try:
            _write_schedule(args.schedule, res)
        except OSError as e:
            raise _fail(f"{args.schedule}: {e.strerror}") from None
    return _report(args, trace, res, met, plots)


def _write_schedule(path: str, res) -> None:
    """One row per replayed job, in submit order; times in trace seconds."""
    import csv
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["job", "user", "submit", "start", "end", "wait", "cpus", "gpus", "state",
                    "nodes"])
        nodes = res.nodes or [()] * len(res.jobs)
        for tj, st, en, k, ns in zip(res.jobs, res.start, res.end, res.killed, nodes):
            w.writerow([tj.orig_id or tj.job_id, tj.user, tj.submit, st, en, st - tj.submit,
                        tj.cpus, tj.gpus, "TIMEOUT" if k else "COMPLETED", ",".join(ns)])


def _header(trace, res) -> dict:
    """``read_first_jobs``: the reader stopped after that many jobs (an SWF file lists them
    by submit time); ``dropped_by_reader`` then counts the lines read. None: read whole."""
    return {"trace": trace.path, "format": trace.fmt, "machine": res.cluster.describe(),
            "dropped_by_reader": dict(trace.dropped), "read_first_jobs": trace.read_limit}


def _report(args, trace, res, met, plots) -> int:
    skipped = [{"job": tj.orig_id, "cpus": tj.cpus, "gpus": tj.gpus, "why": why}
               for tj, why in res.skipped]
    if args.json:
        out = {**_header(trace, res), "metrics": met, "skipped_jobs": skipped[:100],
               "plots": plots, "notes": res.notes}
        json.dump(out, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
        return 0
    from muster.sim.metrics import format_table
    h = _header(trace, res)
    print(f"trace    {h['trace']} ({h['format']})")
    print(f"machine  {h['machine']}")
    print(f"policy   {res.policy}")
    for note in res.notes:
        print(f"note     {note}")
    if trace.read_limit:
        print(f"read     the first {trace.read_limit:,} jobs of the file (SWF lists them by "
              "submit time)")
    if trace.dropped:
        print("dropped  " + ", ".join(f"{v:,} {k}" for k, v in trace.dropped.items()))
    for s in skipped[:5]:
        print(f"skipped  job {s['job']} ({s['cpus']} CPUs, {s['gpus']} GPUs): {s['why']}")
    if len(skipped) > 5:
        print(f"skipped  … and {len(skipped) - 5} more")
    print()
    print(format_table(met))
    for p in plots:
        print(f"wrote {p}")
    return 0


_MEAN_KEYS = ("jobs", "wait_mean_s", "bounded_slowdown_mean", "utilization", "jct_mean_s",
              "gpu_utilization", "fairness_jain", "makespan_s")


def _report_windows(args, trace, runs) -> int:
    mean = {}
    for k in _MEAN_KEYS:
        vals = [m[k] for _, m in runs if m.get(k) is not None]
        if vals:
            mean[k] = sum(vals) / len(vals)
    if args.json:
        out = {**_header(trace, runs[0][0]), "policy": args.policy, "seed": args.seed,
               "window_jobs": args.jobs, "windows": [m for _, m in runs], "mean": mean}
        json.dump(out, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
        return 0
    print(f"trace    {trace.path} ({trace.fmt})")
    print(f"machine  {runs[0][0].cluster.describe()}")
    print(f"policy   {args.policy}; {len(runs)} windows of {args.jobs} jobs, seed {args.seed}")
    print()
    print(f"{'start job':>10} {'mean wait (s)':>14} {'mean bsld':>12} {'utilization':>12}")
    for _, m in runs:
        print(f"{m['start_job']:>10} {m['wait_mean_s']:>14,.0f} {m['bounded_slowdown_mean']:>12,.2f} "
              f"{(m.get('utilization') or m.get('gpu_utilization') or 0):>12.3f}")
    print(f"{'mean':>10} {mean['wait_mean_s']:>14,.0f} {mean['bounded_slowdown_mean']:>12,.2f} "
          f"{(mean.get('utilization') or mean.get('gpu_utilization') or 0):>12.3f}")
    return 0


def run(argv: list[str]) -> int:
    return main(argv)
