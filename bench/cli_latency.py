"""cli_latency: wall time of one CLI call vs `python -c pass` (bytecode compiled first).

Each round runs every command once (order rotated per round, so drift hits all alike); the
figure is the median over the rounds, with min–max.  Goal: ≤ 2.0× `python -c pass`, never > 3×.
"""

from __future__ import annotations

import os
import subprocess

from bench import common

NAME = "cli_latency"


def ensure_bytecode() -> dict:
    """Compile the installed package (PYTHONDONTWRITEBYTECODE=1 would otherwise leave none)."""
    import muster
    pkg = os.path.dirname(muster.__file__)
    subprocess.run([common.PYTHON, "-m", "compileall", "-q", pkg], check=True)
    pyc = os.path.join(pkg, "cli", "__pycache__")
    present = os.path.isdir(pyc) and any(f.startswith("squeue.") for f in os.listdir(pyc))
    return {"package": pkg, "bytecode_present": present,
            "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE")}


def import_profile(target, argv: list[str], top: int = 10) -> list[tuple[str, float]]:
    """Largest cumulative imports of one call (python -X importtime), in ms, any depth."""
    cp = subprocess.run([common.PYTHON, "-X", "importtime", *argv], env=target.env,
                        capture_output=True, text=True)
    rows = []
    for line in cp.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        parts = line[len("import time:"):].split("|")
        try:
            rows.append((parts[2].strip(), int(parts[1]) / 1000.0))
        except (ValueError, IndexError):
            continue
    rows.sort(key=lambda x: -x[1])
    return rows[:top]


def measure(target, rounds: int) -> dict[str, list[float]]:
    py = [common.PYTHON, "-c", "pass"] if target.kind == "muster" else ["python3", "-c", "pass"]
    cmds = {
        "python -c pass": py,
        "squeue -h": [target.cmd("squeue"), "-h"],
        "sinfo -h": [target.cmd("sinfo"), "-h"],
        "sbatch --parsable --wrap true": [target.cmd("sbatch"), "--parsable", "-J", common.JOB_NAME,
                                          "-o", "/dev/null", "--wrap", "true"],
    }
    names = list(cmds)
    times: dict[str, list[float]] = {n: [] for n in names}
    for n in names:  # warm the page cache once
        common.time_call(cmds[n], target.env)
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            times[n].append(common.time_call(cmds[n], target.env))
    return times


def run(ctx) -> dict:
    rounds = 10 if ctx.quick else 40
    info = ensure_bytecode()
    rows = []
    with common.MusterCluster() as c:
        times = measure(c, rounds)
        prof = import_profile(c, [c.cmd("squeue"), "-h"])
    base = common.stats(times["python -c pass"])
    rows.append(common.row("python -c pass (baseline)", base, common.SLURM_REF["python_pass_s"],
                           "Slurm machine", "-", None))
    slurm_times = None
    if ctx.slurm:
        with ctx.slurm as s:
            slurm_times = measure(s, rounds)
    for n in ("squeue -h", "sinfo -h", "sbatch --parsable --wrap true"):
        st = common.stats(times[n])
        ratio = st["median"] / base["median"]
        met = ratio <= 2.0
        note = "" if ratio <= 3.0 else "above the 3x hard limit"
        rows.append(common.row(f"{n} / python -c pass", st, base["median"], "python -c pass, same run",
                               "<= 2.0x (never > 3x)", met, ratio=ratio, note=note))
        if slurm_times:
            sst = common.stats(slurm_times[n])
            rows.append(common.row(f"{n} vs real Slurm", st, sst["median"], "real Slurm, same run",
                                   "-", None))
        else:
            rows.append(common.row(f"{n} vs Slurm reference", st, common.SLURM_REF["cli_call_s"],
                                   "recorded ref", "-", None))
    return {"rows": rows, "info": {**info, "rounds": rounds, "squeue_top_imports_ms": prof,
                                   "raw": {k: common.stats(v) for k, v in times.items()}}}
