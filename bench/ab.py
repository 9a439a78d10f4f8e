"""A/B of two Muster checkouts on one machine, interleaved (before/after a change).

    python bench/ab.py BEFORE_TREE AFTER_TREE [--rounds N]

Each tree must have its own virtualenv in ``TREE/.venv`` (``python3 -m venv TREE/.venv &&
TREE/.venv/bin/pip install -e TREE``). One 4-node cluster per tree runs side by side; the
measurements alternate between them (the order flips every round), so load from anything else
on the machine falls on both alike — what single full runs of ``bench/run.py`` a few minutes
apart cannot promise on a shared 2-core machine. Measures:

* ``srun -N1 true`` and ``srun -N4 hostname`` (wall time of the command, median of 2×rounds);
* 320 ``sbatch --wrap true`` from 8 parallel submitters until all have completed (median of
  ``rounds`` bursts).

Prints medians with min–max and the after/before ratio. Nothing is asserted: a benchmark.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import threading
import time


def up(tree: str) -> tuple[str, dict]:
    d = tempfile.mkdtemp(prefix=f"muster-ab-{os.path.basename(tree.rstrip('/'))}-")
    env = dict(os.environ, PATH=f"{tree}/.venv/bin:/usr/bin:/bin", MUSTER_CONF=f"{d}/slurm.conf",
               MUSTER_NO_API="1", XDG_CONFIG_HOME=d)
    subprocess.run([f"{tree}/.venv/bin/muster", "up", "--no-link", "--state-dir", d,
                    "--nodes", "4"], env=env, check=True, capture_output=True)
    return d, env


def timed(argv: list[str], d: str, env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, cwd=d, capture_output=True, check=True)
    return time.perf_counter() - t0


def burst(d: str, env: dict, submitters: int = 8, each: int = 40) -> float:
    def submit():
        for _ in range(each):
            subprocess.run(["sbatch", "-J", "muster-ab", "-o", "/dev/null", "--wrap", "true"],
                           env=env, cwd=d, capture_output=True, check=True)
    t0 = time.perf_counter()
    threads = [threading.Thread(target=submit) for _ in range(submitters)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    while subprocess.run(["squeue", "-h", "-n", "muster-ab", "-o", "%i"], env=env,
                         capture_output=True, text=True).stdout.strip():
        time.sleep(0.1)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    trees = [os.path.abspath(args.before), os.path.abspath(args.after)]
    clusters = {t: up(t) for t in trees}
    res: dict[str, dict[str, list[float]]] = {t: {"srun -N1 true": [], "srun -N4 hostname": [],
                                                  "320 sbatch, 8 submitters": []} for t in trees}
    try:
        for r in range(args.rounds):
            for t in (trees if r % 2 == 0 else trees[::-1]):
                d, env = clusters[t]
                for _ in range(2 * 10):
                    res[t]["srun -N1 true"].append(timed(["srun", "-N1", "true"], d, env))
                    res[t]["srun -N4 hostname"].append(timed(["srun", "-N4", "hostname"], d, env))
                res[t]["320 sbatch, 8 submitters"].append(burst(d, env))
    finally:
        for t, (d, env) in clusters.items():
            subprocess.run([f"{t}/.venv/bin/muster", "down", "--state-dir", d], env=env,
                           capture_output=True)
    for name in res[trees[0]]:
        b, a = (statistics.median(res[t][name]) for t in trees)
        fmt = "{:.1f} ms" if b < 1 else "{:.2f} s"
        scale = 1000 if b < 1 else 1
        row = [f"{fmt.format(statistics.median(res[t][name]) * scale)} "
               f"({fmt.format(min(res[t][name]) * scale)}–{fmt.format(max(res[t][name]) * scale)})"
               for t in trees]
        print(f"{name:28s} before {row[0]:28s} after {row[1]:28s} ratio {a / b:.2f}")


if __name__ == "__main__":
    main()
