"""Muster benchmark suite.

    .venv/bin/python bench/run.py [--quick] [--only NAME ...] [--json OUT] [--md OUT]

Benchmarks: cli_latency, submit_latency, throughput, array, squeue_pending, memory,
srun_fanout, node_failure, confinement (a cluster each), sched_cycle (the pure core on a synthetic 4,096-node
snapshot), sim_speed (`muster sim` on the CTC trace) and scale (a live 1,024-node emulated
cluster with 10,000 pending jobs: bench/scale.py).  Each cluster benchmark starts
its own 4-node cluster in a temporary state directory (`muster up`) and always stops it
(`muster down`, then anything still mentioning that directory is killed).  Where a real Slurm
is installed (/usr/bin/sbatch) and its slurmctld answers, the same measurement is run against it
(SLURM_CONF set) and the ratio printed; otherwise the recorded Slurm 22.05.8 figures from the
performance issue are the comparison.  --quick uses smaller counts (figures are scaled).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(_HERE)
# run as a script, bench/ itself would be sys.path[0] and bench/array.py would shadow the
# standard library's `array`; import the benchmarks as the `bench` package instead
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, _REPO)

from bench import common  # noqa: E402

ORDER = ["cli_latency", "submit_latency", "throughput", "array", "squeue_pending", "memory",
         "srun_fanout", "node_failure", "confinement", "sched_cycle", "sim_speed", "scale"]


class Ctx:
    def __init__(self, quick: bool):
        self.quick = quick
        self._slurm = common.detect_slurm()

    @property
    def slurm(self):
        """A fresh SlurmTarget per use (None when real Slurm is not installed / not answering)."""
        return common.SlurmTarget(self._slurm.conf) if self._slurm else None

    @property
    def slurm_conf(self):
        return self._slurm.conf if self._slurm else None


def machine() -> dict:
    model = ""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = 0
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) // 1024
    return {"cpus": os.cpu_count(), "cpu_model": model, "mem_mib": mem,
            "python": platform.python_version(), "kernel": platform.release(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "loadavg_start": _loadavg()}


def _loadavg() -> str:
    try:
        with open("/proc/loadavg") as fh:
            return " ".join(fh.read().split()[:3])
    except OSError:
        return "?"


def to_markdown(results: dict) -> str:
    out = []
    for name in ORDER:
        r = results["benchmarks"].get(name)
        if not r:
            continue
        out.append(f"### {name}\n")
        if r.get("error"):
            out.append(f"ERROR: {r['error']}\n")
            continue
        out.append("| measurement | Muster median (min–max) | comparison | ratio | goal | met |")
        out.append("|---|---|---|---|---|---|")
        for row in r["rows"]:
            m, unit = row["muster"], row["unit"]
            if unit == "s":
                ms = common.fmt_stats(m) if isinstance(m, dict) else common.fmt_s(m)
                cmp_ = common.fmt_s(row["compare"]) if row["compare"] is not None else "–"
            else:
                def fm(v, u=unit):
                    return f"{v:.1f} {u}"
                ms = common.fmt_stats(m, fm) if isinstance(m, dict) else (fm(m) if m is not None else "n/a")
                cmp_ = fm(row["compare"]) if row["compare"] is not None else "–"
            if row["compare"] is not None:
                cmp_ += f" ({row['compare_src']})"
            ratio = f"{row['ratio']:.2f}×" if row["ratio"] is not None else "–"
            met = {True: "**met**", False: "**NOT met**", None: "–"}[row["met"]]
            metric = row["metric"] + (f" — {row['note']}" if row.get("note") else "")
            out.append(f"| {metric} | {ms} | {cmp_} | {ratio} | {row['goal']} | {met} |")
        out.append("")
    return "\n".join(out)


def leftover_processes() -> list[str]:
    found = []
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{d}/stat") as fh:
                if fh.read().rsplit(") ", 1)[1][0] == "Z":
                    continue
        except OSError:
            continue
        if "musterbench-" in cmd:
            found.append(f"{d}: {cmd.strip()}")
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller counts (a few minutes in all)")
    ap.add_argument("--only", nargs="+", choices=ORDER, metavar="NAME", help=" ".join(ORDER))
    ap.add_argument("--json", metavar="OUT", help="write all results as JSON")
    ap.add_argument("--md", metavar="OUT", help="write the result tables as Markdown")
    args = ap.parse_args()
    import importlib
    ctx = Ctx(args.quick)
    info = machine()
    print(f"Muster benchmarks {'(quick) ' if args.quick else ''}on {info['cpus']} CPUs "
          f"({info['cpu_model']}), {info['mem_mib']} MiB, Python {info['python']}, {info['date']}, "
          f"load {info['loadavg_start']}")
    if ctx.slurm_conf:
        print(f"Real Slurm found (SLURM_CONF={ctx.slurm_conf}): comparing against it in the same run")
    else:
        print(f"Comparison: {common.SLURM_REF_NOTE}")
    results = {"machine": info, "quick": args.quick, "slurm_conf": ctx.slurm_conf,
               "reference": common.SLURM_REF, "benchmarks": {}}
    failed = False
    for name in args.only or ORDER:
        mod = importlib.import_module(f"bench.{name}")
        t0 = time.perf_counter()
        try:
            res = mod.run(ctx)
        except Exception as exc:  # noqa: BLE001 - report and go on with the next benchmark
            traceback.print_exc()
            res = {"error": f"{type(exc).__name__}: {exc}", "rows": []}
            failed = True
        res["elapsed_s"] = round(time.perf_counter() - t0, 1)
        results["benchmarks"][name] = res
        if res.get("error"):
            print(f"\n== {name} == ERROR {res['error']}")
        else:
            common.print_rows(name, res["rows"])
            if res.get("info"):
                print("   info:", json.dumps(res["info"], default=str)[:1500])
        print(f"   ({res['elapsed_s']} s)")
    results["machine"]["loadavg_end"] = _loadavg()
    print(f"\nload average: start {info['loadavg_start']}, end {results['machine']['loadavg_end']} "
          "(anything well above 0 means other work shared the CPUs)")
    left = leftover_processes()
    results["leftover_processes"] = left
    if left:
        print("\nLEFTOVER PROCESSES:\n  " + "\n  ".join(left))
        failed = True
    else:
        print("\nNo benchmark processes left behind.")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2, default=str)
    if args.md:
        with open(args.md, "w") as fh:
            fh.write(to_markdown(results))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
