"""Bulk submission straight to the controller socket (used to queue thousands of held jobs fast).

Builds the request exactly as `sbatch` does (muster.cli.jobopts.parse_sbatch on the same
arguments, environment and cwd) once, then sends it N times with muster.cli.client.call — one
connection per request, as sbatch would, minus the interpreter start-up of N sbatch processes.
Run with the virtualenv's python and MUSTER_CONF set:

    python bench/submit_direct.py N [sbatch args...]      # prints "N <seconds>"
"""

from __future__ import annotations

import io
import os
import sys
import time


def main() -> None:
    from muster.cli.client import call
    from muster.cli.jobopts import parse_sbatch
    n = int(sys.argv[1])
    args = sys.argv[2:]
    inv = parse_sbatch(args, dict(os.environ), io.BytesIO(b""), os.getcwd(), int(time.time()))
    msg = {"op": "submit", "job": inv.request, "script": inv.script, "env": inv.env}
    t0 = time.perf_counter()
    for _ in range(n):
        call(msg)
    print(n, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
