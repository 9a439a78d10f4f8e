"""scale: a live 1,024-node × 8-GPU emulated cluster with 10,000 pending jobs (issue 17).

    .venv/bin/python bench/run.py --only scale            # as part of the suite
    .venv/bin/python -m bench.scale [--nodes N] [--jobs N] [--rounds N]   # alone

What it does, in order, on one cluster started with ``muster up --emulate`` (every node served
by one musterd process):

1. start-up: wall time of ``muster up --emulate --nodes 1024 --gpus-per-node 8`` until every
   node has registered (the command returns then), and the controller's RSS idle;
2. queue: 10,000 *held* jobs of mixed sizes (1–64 nodes; whole-node GPU jobs, single-node
   jobs of 1–8 GPUs and CPU-only jobs; ``sleep`` of 1–6 s under limits of 1–10 min), sent
   straight to the controller socket as ``sbatch`` builds them (``--fill``: the request of
   each distinct shape is built once by ``muster.cli.jobopts.parse_sbatch``);
3. idle latency: ``squeue`` (default format, all 10,000 jobs) and ``sbatch -H --wrap true``,
   interleaved, ``rounds`` calls each, with ``python -S -c pass`` (no controller: the
   machine's own share of a tail) and the controller's own handling times (``diag``).
   Held jobs stay out of the scheduler's snapshot, so the controller's passes are
   near-empty: this is the queue at rest;
4. release all (one ``release`` request): scheduling starts, jobs start and end, and the same
   calls are timed again while it goes on ("during scheduling");
5. the controller's pass log (``diag`` op, ``passes``: the recent passes with their time on
   the event loop and in the scheduling worker): the first pass after the release (every one
   of the 10,000 jobs new to the core: a full pass) and the passes after it (a few events
   each: incremental when the core is), and RSS with the queue full and at the end.

p50/p99 are nearest-rank. Goals (issue 17): full pass ≤ 100 ms, incremental pass ≤ 10 ms,
p99 during scheduling ≤ 2× p99 idle for both commands.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

from bench import common

NAME = "scale"
# (weight, nodes, kind): kind "gpu" = whole nodes with 8 GPUs, "gpu1" = one node, k GPUs,
# "cpu" = CPU-only, 4 tasks per node
SHAPES = [(20, 1, "gpu1"), (10, 1, "cpu"), (12, 2, "gpu"), (10, 4, "gpu"), (6, 4, "cpu"),
          (8, 8, "gpu"), (6, 16, "gpu"), (4, 32, "gpu"), (2, 64, "gpu"), (2, 64, "cpu")]


def _shape_args(rng: random.Random) -> list[str]:
    nodes, kind = rng.choices([s[1:] for s in SHAPES], weights=[s[0] for s in SHAPES])[0]
    args = ["-H", "-J", common.JOB_NAME, "-N", str(nodes), "-t", str(rng.choice((1, 2, 5, 10)))]
    if kind == "gpu":
        args += ["--gres=gpu:8", "--ntasks-per-node=8"]
    elif kind == "gpu1":
        args += [f"--gres=gpu:{rng.choice((1, 2, 4, 8))}"]
    else:
        args += ["--ntasks-per-node=4"]
    return args + ["--wrap", f"sleep {rng.randint(1, 6)}"]


def fill(n: int, seed: int) -> None:
    """(Subprocess, cluster env.) Queue n held jobs of mixed shapes; print their ids."""
    import io
    from muster.cli.client import call
    from muster.cli.jobopts import parse_sbatch
    rng = random.Random(seed)
    built: dict[tuple, dict] = {}
    ids = []
    t0 = time.perf_counter()
    for _ in range(n):
        args = _shape_args(rng)
        msg = built.get(tuple(args))
        if msg is None:
            inv = parse_sbatch(args, dict(os.environ), io.BytesIO(b""), os.getcwd(), int(time.time()))
            msg = built[tuple(args)] = {"op": "submit", "job": inv.request, "script": inv.script,
                                        "env": inv.env}
        ids.append(call(msg)["job_id"])
    print(json.dumps({"ids": ids, "seconds": time.perf_counter() - t0}))


def request(msg: dict) -> None:
    """(Subprocess, cluster env.) One request; print the reply as JSON."""
    from muster.cli.client import call
    print(json.dumps(call(msg)))


def _sub(target, *args: str, timeout: float = 900, stdin: str | None = None) -> dict:
    cp = common.run([common.PYTHON, "-m", "bench.scale", *args], {**target.env,
                    "PYTHONPATH": common.REPO}, timeout=timeout, input=stdin)
    return json.loads(cp.stdout.strip().splitlines()[-1])


def _call(target, msg: dict) -> dict:
    return _sub(target, "--call", "-", stdin=json.dumps(msg))  # 10,000 ids: not in argv


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q * len(s) + 0.5)) - 1))]


def time_commands(target, rounds: int, stop=None) -> dict[str, list[float]]:
    """``rounds`` calls of each command, interleaved. ``python`` (the commands' interpreter,
    started as they start it, doing nothing) talks to no controller: its tail during
    scheduling is what the machine's load alone adds to any process's start."""
    cmds = {"squeue": [target.cmd("squeue")],
            "sbatch": [target.cmd("sbatch"), "-H", "--parsable", "-J", common.JOB_NAME,
                       "--wrap", "true"],
            "python": [target.cmd("python"), "-S", "-c", "pass"]}
    out: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(rounds):
        for k, argv in cmds.items():
            t0 = time.perf_counter()
            cp = subprocess.run(argv, env=target.env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, cwd=target.work)
            out[k].append(time.perf_counter() - t0)
            if cp.returncode != 0:
                raise RuntimeError(f"{k} -> rc {cp.returncode}: {cp.stderr.decode()[:300]}")
        if stop is not None and stop():
            break
    return out


def _passes(target, since: int, got: dict | None = None) -> list[dict]:
    got = got or _call(target, {"op": "diag"})
    return [p for p in got.get("passes") or [] if p["seq"] > since]


def _gc_rows(marks: list[tuple[str, dict]]) -> list[dict]:
    """The controller's collector (diag ``gc``) between successive marks: collections of
    the oldest generation (each walks every object it holds) and the longest pause."""
    rows = []
    for (_, before), (name, after) in zip(marks, marks[1:]):
        if not before or not after:
            continue
        b, a = before["gen2"], after["gen2"]
        young = sum(after[g]["collections"] - before[g]["collections"] for g in ("gen0", "gen1"))
        n = a["collections"] - b["collections"]
        rows.append(common.row(f"controller GC: full collections {name}", n, None, "-",
                               "reported", None, unit="collections",
                               note=f"{a['total_ms'] - b['total_ms']:.1f} ms in all; longest "
                                    f"full pause so far {a['max_ms']:.1f} ms; {young} young "
                                    f"collections, longest so far "
                                    f"{max(after['gen0']['max_ms'], after['gen1']['max_ms']):.1f}"
                                    f" ms; refreshes so far {after['refresh']['collections']} "
                                    f"(longest {after['refresh']['max_ms']:.1f} ms), "
                                    f"{after['frozen']:,} objects frozen"))
    return rows


def _lat_rows(idle: dict, busy: dict) -> list[dict]:
    rows = []
    for k in ("squeue", "sbatch", "python"):
        if k not in idle:
            continue
        i99, b99 = pct(idle[k], 0.99), pct(busy[k], 0.99)
        note = (f"p50 idle {pct(idle[k], 0.5) * 1000:.1f} ms, during "
                f"{pct(busy[k], 0.5) * 1000:.1f} ms; n={len(idle[k])}/{len(busy[k])}")
        if k == "python":  # the machine's share of the tail: no controller involved
            rows.append(common.row("  reference: `python -S -c pass` p99 during / idle", b99,
                                   i99, "idle p99, same run", "reported", None, note=note))
        else:
            rows.append(common.row(f"{k} p99 during scheduling / idle", b99, i99,
                                   "idle p99, same run", "<= 2x idle", b99 <= 2 * i99,
                                   note=note))
    return rows


def _lag_rows(w: dict) -> list[dict]:
    """The controller's event-loop lag (diag ``loop_lag``: how late it woke a 5 ms timer)
    over the last 20 s of each phase: what a request waits for the loop, apart from the CPU."""
    rows = []
    for name, key in (("while idle", "lag_idle"), ("during scheduling", "lag_busy")):
        lag = w.get(key) or {}
        if "p99_ms" not in lag:
            continue
        rows.append(common.row(f"event-loop lag {name}: p99", lag["p99_ms"] / 1000, None, "-",
                               "reported", None,
                               note=f"median {lag['p50_ms']:.1f} ms, max {lag['max_ms']:.1f} ms "
                                    f"over the last {lag['window_s']:.0f} s "
                                    f"({lag['samples']} samples)"))
    return rows


def _release_rows(r: dict, jobs: int) -> list[dict]:
    """The release of the whole queue in one request (:func:`release_all`)."""
    if r.get("stall_ms") is None:
        return []
    handled = f"{r['handled_ms']:.0f} ms" if r.get("handled_ms") is not None else "?"
    return [common.row(f"event-loop's longest stall while {jobs} jobs are released in one "
                       "request", r["stall_ms"] / 1000, None, "-", "reported", None,
                       note=f"the request handled in {handled} (its slices included), round "
                            f"trip {r['wall_s']:.2f} s")]


def _request_rows(w: dict) -> list[dict]:
    """The controller's own time per request (diag ``request_times``: from its handling's
    start to its reply handed to the socket) over the last 20 s of each phase, beside the commands'
    latencies: what of a command's tail is the controller's."""
    rows = []
    idle, busy = w.get("req_idle") or {}, w.get("req_busy") or {}
    for cmd, op in (("squeue", "jobs"), ("sbatch", "submit")):
        i, b = idle.get(op), busy.get(op)
        if not (i and b):
            continue
        rows.append(common.row(f"  controller's handling of {cmd} ({op}) p99 during / idle",
                               b["p99_ms"] / 1000, i["p99_ms"] / 1000, "idle p99, same run",
                               "reported", None,
                               note=f"p50 idle {i['p50_ms']:.1f} ms, during {b['p50_ms']:.1f} ms;"
                                    f" max during {b['max_ms']:.1f} ms; n={i['samples']}/"
                                    f"{b['samples']} (last 20 s of each phase)"))
    return rows


def _pass_rows(passes: list[dict]) -> tuple[list[dict], dict]:
    if not passes:
        return [common.row("scheduling passes", None, None, "-", "-", None,
                           note="the controller reported no passes")], {}
    busy = [p for p in passes if p["depth"] > 0]  # before the release is applied: depth 0
    if not busy:
        return [common.row("scheduling passes", None, None, "-", "-", None,
                           note="no pass saw a pending job")], {}
    # the full pass: the one that saw the most pending jobs. A release naming many jobs is
    # applied in slices with the loop free between them (controller.bulk), so passes run
    # while it is still being applied, each seeing part of the queue; the queue is whole
    # once the last slice is in, and only shrinks after. Passes before it are neither.
    at = max(range(len(busy)), key=lambda i: (busy[i]["depth"], -i))
    first, rest = busy[at], busy[at + 1:]
    total = [p["total_ms"] / 1000 for p in rest]
    loop = [p["loop_ms"] / 1000 for p in rest]
    rows = [common.row(f"full pass (the most pending: {first['depth']}; passes while the "
                       f"release was applied: {at})",
                       first["total_ms"] / 1000, 0.1, "goal", "<= 100 ms",
                       first["total_ms"] <= 100,
                       note=f"core {first['core_ms']:.1f} ms, on the loop {first['loop_ms']:.1f} ms"
                            f" (preparing {first['prepare_ms']:.1f} ms, longest slice of starts "
                            f"{first.get('starts_ms', 0):.1f} ms, {first['starts']} starts)")]
    if total:
        rows.append(common.row("incremental pass (each later pass)", common.stats(total), 0.01,
                               "goal", "<= 10 ms", common.stats(total)["median"] <= 0.01,
                               note=f"p99 {pct(total, 0.99) * 1000:.1f} ms, n={len(total)}"))
        rows.append(common.row("  of which on the event loop (snapshot + apply)",
                               common.stats(loop), None, "-", "-", None,
                               note=f"p99 {pct(loop, 0.99) * 1000:.1f} ms"))
    prep = [p["prepare_ms"] / 1000 for p in rest]
    if prep:
        rows.append(common.row("    of which preparing (clock events; the snapshot, or for a "
                               "forked pass the views of changed jobs)",
                               common.stats(prep), None, "-", "-", None))
    starts = [p["starts_ms"] / 1000 for p in rest if "starts_ms" in p]
    if starts:  # the loop's longest single holds: what a request may wait behind
        slices = [p["slice_ms"] / 1000 for p in rest]
        rows.append(common.row("    of which the starts' commit (one hold)", common.stats(starts),
                               None, "-", "-", None,
                               note=f"p99 {pct(starts, 0.99) * 1000:.1f} ms; longest slice of "
                                    f"reasons: median {pct(slices, 0.5) * 1000:.1f} ms, p99 "
                                    f"{pct(slices, 0.99) * 1000:.1f} ms"))
    pure = [p["pure_ms"] / 1000 for p in rest if p.get("pure_ms") is not None]
    if pure:  # forked passes: the child's own compute, without the fork and the plan's transfer
        rows.append(common.row("  the core's own compute in the forked child (snapshot included)",
                               common.stats(pure), None, "-", "-", None,
                               note=f"first pass {first.get('pure_ms') or 0:.1f} ms; "
                                    f"p99 {pct(pure, 0.99) * 1000:.1f} ms"))
        cpu = [p["cpu_ms"] / 1000 for p in rest if p.get("pure_ms") is not None and "cpu_ms" in p]
        if cpu:  # the child's CPU time: its wall time less the wait for a core (2 cores here)
            rows.append(common.row("    of which the child's CPU time", common.stats(cpu), None,
                                   "-", "-", None,
                                   note=f"first pass {first.get('cpu_ms') or 0:.1f} ms"))
        made = [p["snap_ms"] / 1000 for p in rest
                if p.get("pure_ms") is not None and p.get("snap_ms")]
        if made:
            rows.append(common.row("    of which making the snapshot, in the child",
                                   common.stats(made), None, "-", "-", None,
                                   note=f"first pass {first.get('snap_ms') or 0:.1f} ms"))
    info = {"passes": len(passes), "starts": sum(p["starts"] for p in passes),
            "discarded": sum(1 for p in passes if p.get("discarded"))}
    return rows, info


def raise_job_limit(c, limit: int) -> None:
    """MaxJobCount (10,000 by default, as Slurm's) must leave room for the timed ``sbatch``
    calls on top of the queue: raised in slurm.conf and applied by ``scontrol reconfigure``."""
    with open(c.conf, "a") as fh:
        fh.write(f"MaxJobCount={limit}\n")
    common.run([c.cmd("scontrol"), "reconfigure"], c.env)
    deadline = time.time() + 60  # every node must still answer afterwards (all reconfigure)
    while set(common.run([c.cmd("sinfo"), "-h", "-o", "%t"], c.env).stdout.split()) != {"idle"}:
        if time.time() > deadline:
            raise RuntimeError("nodes not all idle after scontrol reconfigure")
        time.sleep(0.5)
    shown = common.run([c.cmd("scontrol"), "show", "config"], c.env).stdout
    if f"MaxJobCount             = {limit}" not in shown and f"MaxJobCount = {limit}" not in shown:
        got = [ln for ln in shown.splitlines() if ln.startswith("MaxJobCount")]
        raise RuntimeError(f"MaxJobCount not raised to {limit}: {got}")


def release_all(target, ids: list[int]) -> dict:
    """Release ``ids`` in one request: its round trip (a client process's start included),
    the controller's handling of it (from its start to the reply: the slices of a request
    naming many jobs, controller.bulk, included) and the event loop's longest stall from
    just before it to just after (diag's ``worst_ms`` since a reset): what any other request
    waited for the loop meanwhile (a pass started by the release may add its own)."""
    _call(target, {"op": "diag_reset"})
    t0 = time.perf_counter()
    _call(target, {"op": "release", "jobs": [{"job_id": i} for i in ids]})
    wall = time.perf_counter() - t0
    got = _call(target, {"op": "diag"})
    handled = (got.get("request_times") or {}).get("release") or {}
    return {"wall_s": wall, "handled_ms": handled.get("max_ms"),
            "stall_ms": (got.get("loop_lag") or {}).get("worst_ms")}


def scenario(nodes: int, jobs: int, rounds: int, worker: str = "fork") -> dict:
    """One cluster through steps 1-5 of the module's docstring; raw figures.
    ``worker``: where the controller computes its passes (MUSTER_SCHED_WORKER): "fork" (the
    default), "thread" (the design it replaced, for the same-run comparison), "0" (inline)."""
    t0 = time.perf_counter()
    cluster = common.MusterCluster(nodes=nodes, gpus=8, extra=("--emulate",))
    cluster.env["MUSTER_SCHED_WORKER"] = worker
    with cluster as c:
        out: dict = {"up_s": time.perf_counter() - t0}
        raise_job_limit(c, 4 * jobs)
        pid = c.controller_pid()
        out["rss_idle"] = common.rss_kib(pid)["VmRSS"]
        gc_marks = [("at start", _call(c, {"op": "diag"}).get("gc"))]
        filled = _sub(c, "--fill", str(jobs), "7")
        out["fill_s"] = filled["seconds"]
        out["rss_queued"] = common.rss_kib(pid)["VmRSS"]
        gc_marks.append(("while queuing", _call(c, {"op": "diag"}).get("gc")))
        out["idle"] = time_commands(c, rounds)
        got = _call(c, {"op": "diag"})
        gc_marks.append(("while idle", got.get("gc")))
        out["lag_idle"] = got.get("loop_lag") or {}
        out["req_idle"] = got.get("request_times") or {}
        since = max((p["seq"] for p in _passes(c, -1, got)), default=-1)
        out["release"] = release_all(c, filled["ids"])
        out["busy"] = time_commands(c, rounds)
        got = _call(c, {"op": "diag"})
        gc_marks.append(("while scheduling", got.get("gc")))
        out["lag_busy"] = got.get("loop_lag") or {}
        out["req_busy"] = got.get("request_times") or {}
        out["gc"] = gc_marks
        out["passes"] = _passes(c, since, got)
        out["rss_during"] = common.rss_kib(pid)
        out["running_at_end"] = len(common.run([c.cmd("squeue"), "-h", "-t", "R", "-o", "%i"],
                                               c.env).stdout.split())
    return out


def run(ctx, nodes: int = 1024, jobs: int = 10_000, rounds: int = 200,
        compare: bool = True) -> dict:
    if ctx.quick:
        nodes, jobs, rounds = 256, 2_000, 40
    w = scenario(nodes, jobs, rounds, worker="fork")
    other = scenario(nodes, jobs, rounds, worker="thread") if compare else w
    rows = [common.row(f"muster up --emulate --nodes {nodes} --gpus-per-node 8", w["up_s"], None,
                       "-", "seconds", None, note=f"thread run: {other['up_s']:.2f} s")]
    rows += _lat_rows(w["idle"], w["busy"])
    rows += _request_rows(w)
    rows += _lag_rows(w)
    rows += _release_rows(w["release"], jobs)
    rows += _gc_rows(w["gc"])
    prow, pinfo = _pass_rows(w["passes"])
    rows += prow
    rows.append(common.row("controller RSS during scheduling", w["rss_during"]["VmRSS"] / 1024,
                           None, "-", "reported", None, unit="MiB",
                           note=f"idle {w['rss_idle'] / 1024:.1f} MiB, {jobs} queued "
                                f"{w['rss_queued'] / 1024:.1f} MiB, peak "
                                f"{w['rss_during']['VmHWM'] / 1024:.1f} MiB"))
    for k in ("squeue", "sbatch"):
        ratio = pct(other["busy"][k], 0.99) / pct(other["idle"][k], 0.99)
        rows.append(common.row(f"{k} p99 during scheduling: forked / threaded passes",
                               pct(w["busy"][k], 0.99), pct(other["busy"][k], 0.99),
                               "passes in a thread, same run", "-", None,
                               note=f"thread run: idle p99 {pct(other['idle'][k], 0.99) * 1000:.1f}"
                                    f" ms, during/idle {ratio:.2f}x"))
    orows, oinfo = _pass_rows(other["passes"])
    for r in orows:  # the thread run's pass figures, for the same-run comparison
        rows.append({**r, "metric": "thread run: " + r["metric"].strip(), "goal": "-", "met": None})
    info = {"nodes": nodes, "gpus": nodes * 8, "jobs": jobs, "fill_s": round(w["fill_s"], 2),
            "running_at_end": w["running_at_end"], **pinfo,
            "thread": {"passes": oinfo, "running_at_end": other["running_at_end"]}}
    return {"rows": rows, "info": info}


def main() -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--fill", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--call", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="256 nodes, 2,000 jobs, 40 rounds")
    ap.add_argument("--no-compare", action="store_true",
                    help="skip the second cluster, whose passes run in a thread")
    ap.add_argument("seed", nargs="?", type=int, default=7, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.fill is not None:
        fill(args.fill, args.seed)
        return 0
    if args.call is not None:
        request(json.loads(sys.stdin.read() if args.call == "-" else args.call))
        return 0

    class _Ctx:
        quick = args.quick
    res = run(_Ctx(), args.nodes, args.jobs, args.rounds, compare=not args.no_compare)
    common.print_rows(NAME, res["rows"])
    print("   info:", json.dumps(res["info"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
