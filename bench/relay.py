"""relay: what a command costs through a node's musterd relay (muster.agent.relay, issue 16).

On every host but the controller's, commands reach the controller through the local musterd,
which opens an authenticated TCP link per command connection. One 4-node cluster; the same
commands are run with ``MUSTER_SOCKET`` naming the controller's own socket (direct) and a
node's relay socket (relayed), interleaved so that load from elsewhere falls on both alike:
``squeue -h`` (20 held jobs queued), ``sbatch -H --wrap true`` and ``srun -N2 true`` (its I/O
listener on the address the relay reports). Medians with min–max.

    .venv/bin/python bench/relay.py [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(_HERE)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, _REPO)

from bench import common  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    with common.MusterCluster(nodes=4, gpus=0) as c:
        for _ in range(20):
            common.sbatch(c, "-H", "--wrap", "true")
        direct = os.path.join(c.dir, "musterctld.sock")
        relayed = os.path.join(c.dir, "spool", "node1", "musterd.sock")
        cmds = {"squeue -h": [c.cmd("squeue"), "-h"],
                "sbatch -H --wrap true": [c.cmd("sbatch"), "-H", "--wrap", "true"],
                "srun -N2 true": [c.cmd("srun"), "-N2", "true"]}
        times: dict[tuple[str, str], list[float]] = {}
        envs = {"direct": {**c.env, "MUSTER_SOCKET": direct},
                "relay": {**c.env, "MUSTER_SOCKET": relayed, "SLURMD_NODENAME": "node1"}}
        for argv in cmds.values():
            for env in envs.values():
                common.time_call(argv, env)  # warm: the relay's first link, page cache
        for _ in range(args.rounds):
            for name, argv in cmds.items():
                for way, env in envs.items():
                    times.setdefault((name, way), []).append(common.time_call(argv, env))
        rows = []
        for name in cmds:
            d, r = common.stats(times[(name, "direct")]), common.stats(times[(name, "relay")])
            rows.append(common.row(f"{name}: through the relay", r, d["median"],
                                   "direct to the controller's socket, same run", "-", None))
        common.print_rows("relay", rows)
        for name in cmds:
            d, r = times[(name, "direct")], times[(name, "relay")]
            print(f"  {name:24} direct {common.fmt_stats(common.stats(d))}   "
                  f"relay {common.fmt_stats(common.stats(r))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
