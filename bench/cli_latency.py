"""cli_latency: wall time of one CLI call vs `python -c pass` (bytecode compiled first).

Each round runs every command once (order rotated per round, so drift hits all alike); the
figure is the median over the rounds, with min–max.  Goal: ≤ 2.0× `python -c pass`, never > 3×.

Two installs are measured against the same cluster: the virtualenv's (``scripts/up.sh`` and
``scripts/test.sh`` install editable: a plain ``src`` path in a .pth file, no import hook)
and a non-editable one (a wheel of the working tree installed into a fresh virtualenv of the
system Python, bytecode compiled), each against its own ``python -c pass``. The modules a call
imports beyond ``python -c pass`` outside ``muster`` are recorded for both (the launchers are
plain scripts, ``bin/``: pip's entry-point wrapper imported ``re`` and ``enum``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

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


def extra_imports(env: dict, python: str, argv: list[str]) -> list[str]:
    """Modules outside ``muster`` that ``argv`` (run by ``python``) imports and ``python -c
    pass`` does not."""
    def mods(args):
        cp = subprocess.run([python, "-X", "importtime", *args], env=env, capture_output=True,
                            text=True)
        return {ln.rsplit("|", 1)[1].strip() for ln in cp.stderr.splitlines()
                if ln.startswith("import time:") and "cumulative" not in ln}
    return sorted(m for m in mods(argv) - mods(["-c", "pass"]) if not m.startswith("muster"))


class WheelInstall:
    """A non-editable install of the working tree in a fresh virtualenv (``with``: removed
    afterwards): the wheel is built with the project's virtualenv (its setuptools, no
    download) and installed without dependencies (the commands need none)."""

    kind = "muster"

    def __init__(self, cluster):
        self.cluster = cluster
        self.dir = tempfile.mkdtemp(prefix="musterbench-wheel-")
        self.bin = os.path.join(self.dir, "venv", "bin")
        self.env = dict(cluster.env)
        self.env["PATH"] = self.bin + os.pathsep + cluster.env["PATH"]
        self.python = os.path.join(self.bin, "python")

    def cmd(self, name: str) -> str:
        return os.path.join(self.bin, name)

    def __enter__(self) -> WheelInstall:
        wheels = os.path.join(self.dir, "wheels")
        build = os.path.join(self.dir, "src")
        shutil.copytree(common.REPO, build, ignore=shutil.ignore_patterns(
            ".venv", ".git", "*.egg-info", "__pycache__", "build", "tests", "node_modules"))
        common.run([common.PYTHON, "-m", "pip", "wheel", "-q", "--no-build-isolation",
                    "--no-deps", build, "-w", wheels], self.env, timeout=300)
        common.run(["/usr/bin/python3", "-m", "venv", os.path.join(self.dir, "venv")], self.env)
        wheel = [os.path.join(wheels, w) for w in os.listdir(wheels) if w.endswith(".whl")]
        common.run([self.python, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    *wheel], self.env, timeout=300)
        common.run([self.python, "-m", "compileall", "-q", os.path.dirname(self.bin)], self.env)
        common.run([self.python, "-m", "muster.launchers", self.bin], self.env)  # as up.sh does
        return self

    def __exit__(self, *exc) -> None:
        common.remove_at_exit(self.dir)  # thousands of files: not before the next benchmark


def measure(target, rounds: int, python: str | None = None) -> dict[str, list[float]]:
    py = [python or common.PYTHON, "-c", "pass"] if target.kind == "muster" \
        else ["python3", "-c", "pass"]
    cmds = {
        "python -c pass": py,
        "squeue -h": [target.cmd("squeue"), "-h"],
        "sinfo -h": [target.cmd("sinfo"), "-h"],
        "sbatch --parsable --wrap true": [target.cmd("sbatch"), "--parsable", "-J", common.JOB_NAME,
                                          "-o", "/dev/null", "--wrap", "true"],
        "scontrol show partition": [target.cmd("scontrol"), "show", "partition"],
        "scancel -n musterbench": [target.cmd("scancel"), "-n", common.JOB_NAME],
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
        info["extra_imports_venv"] = extra_imports(c.env, common.PYTHON, [c.cmd("squeue"), "-h"])
        with WheelInstall(c) as w:
            wtimes = measure(w, rounds, w.python)
            info["extra_imports_wheel"] = extra_imports(w.env, w.python, [w.cmd("squeue"), "-h"])
    base = common.stats(times["python -c pass"])
    rows.append(common.row("python -c pass (baseline)", base, common.SLURM_REF["python_pass_s"],
                           "Slurm machine", "-", None))
    slurm_times = None
    if ctx.slurm:
        with ctx.slurm as s:
            slurm_times = measure(s, rounds)
    wbase = common.stats(wtimes["python -c pass"])
    for n in [k for k in wtimes if k != "python -c pass"]:
        st = common.stats(wtimes[n])
        ratio = st["median"] / wbase["median"]
        rows.append(common.row(f"non-editable install: {n} / python -c pass", st,
                               wbase["median"], "python -c pass, same run", "<= 2.0x", ratio <= 2.0,
                               ratio=ratio))
    for n in [k for k in times if k != "python -c pass"]:
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
