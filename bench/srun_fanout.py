"""srun_fanout: `srun -N1 true` and `srun -N4 hostname` on the 4-node cluster (Slurm 22.05:
74 ms and 126 ms on this kind of machine), and `srun -N256 true` on 256 emulated nodes served
by one agent process (`muster up --emulate`; goal under 1 s). Wall time of the whole command,
allocation included, median of N calls."""

from __future__ import annotations

from bench import common

NAME = "srun_fanout"
REF = {"srun -N1 true": 0.074, "srun -N4 hostname": 0.126}


def _measure(target, argv_list: dict[str, list[str]], rounds: int) -> dict[str, list[float]]:
    out = {k: [] for k in argv_list}
    for argv in argv_list.values():
        common.time_call(argv, target.env)  # warm-up
    for _ in range(rounds):
        for k, argv in argv_list.items():
            out[k].append(common.time_call(argv, target.env))
    return out


def run(ctx) -> dict:
    rounds = 5 if ctx.quick else 15
    rows = []
    with common.MusterCluster() as c:
        small = _measure(c, {"srun -N1 true": [c.cmd("srun"), "-N1", "true"],
                             "srun -N4 hostname": [c.cmd("srun"), "-N4", "hostname"]}, rounds)
    slurm = None
    if ctx.slurm:
        with ctx.slurm as s:
            slurm = _measure(s, {"srun -N1 true": [s.cmd("srun"), "-N1", "true"],
                                 "srun -N4 hostname": [s.cmd("srun"), "-N4", "hostname"]}, rounds)
    for k, times in small.items():
        st = common.stats(times)
        ref, src = (common.stats(slurm[k])["median"], "real Slurm, same run") if slurm else \
            (REF[k], "recorded ref")
        rows.append(common.row(k, st, ref, src, "no slower than Slurm", st["median"] <= ref))
    with common.MusterCluster(nodes=256, gpus=0, extra=("--emulate", "--cpus-per-node", "4")) as c:
        big = _measure(c, {"srun -N256 true": [c.cmd("srun"), "-N256", "true"]},
                       max(3, rounds // 3))
    st = common.stats(big["srun -N256 true"])
    rows.append(common.row("srun -N256 true (emulated)", st, 1.0, "goal", "< 1 s",
                           st["median"] < 1.0))
    return {"rows": rows, "info": {"rounds": rounds}}
