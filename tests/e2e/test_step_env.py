"""The environment of a step's tasks: what the user set wins, Muster fills in the rest.

* a batch script that exports its own MASTER_ADDR/MASTER_PORT: its srun tasks see those
  values (not Muster's) and torch's gloo all-reduce meets there; the step's SLURM_* still
  replace the batch job's;
* a nested srun (inside a task of an outer step) replaces the outer step's PyTorch values
  Muster set, but keeps one the task changed (``MUSTER_TORCH_VARS`` tells them apart);
* srun's ``--export`` (ALL, NONE, a list, ``ALL,`` + a list) and ``SRUN_EXPORT_ENV``.
"""

import os
import socket

import pytest


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DDP = os.path.join(REPO, "examples", "ddp_allreduce.py")
SHOW = ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
        "NODE_RANK", "GROUP_RANK", "MUSTER_TORCH_VARS", "SLURM_NTASKS", "SLURM_NNODES",
        "SLURM_STEP_ID", "SLURM_PROCID", "FOO", "BAR"]
# one line per task: "NAME=value|NAME=value|..." (names that are set only)
DUMP_SH = ("#!/bin/bash\nfor v in " + " ".join(SHOW) +
           "; do [ -n \"${!v+x}\" ] && printf '%s=%s|' $v \"${!v}\"; done; echo\n")


def read(path):
    with open(path) as fh:
        return fh.read()


def dump_script(workdir: str) -> str:
    path = os.path.join(workdir, "dump.sh")
    with open(path, "w") as fh:
        fh.write(DUMP_SH)
    os.chmod(path, 0o755)
    return path


def per_task(out: str) -> dict[int, dict[str, str]]:
    """``srun -l dump.sh`` output → {task: {NAME: value}}."""
    tasks = {}
    for line in out.splitlines():
        t, sep, rest = line.partition(": ")
        if sep and t.strip().isdigit():
            tasks[int(t)] = dict(kv.split("=", 1) for kv in rest.split("|") if "=" in kv)
    return tasks


def marker(env: dict) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in env.get("MUSTER_TORCH_VARS", "").split(",") if kv)


def free_port() -> int:
    """A port outside Muster's pool (20000-29999): the kernel's ephemeral range."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_batch_scripts_master_addr_wins_and_ddp_meets_there(cluster, workdir):
    pytest.importorskip("torch")
    port, dump = free_port(), dump_script(workdir)
    script = os.path.join(workdir, "ddp.sh")
    with open(script, "w") as fh:
        fh.write("#!/bin/bash\n#SBATCH -N2 --ntasks-per-node=2\n"
                 "export MASTER_ADDR=localhost\n"
                 f"export MASTER_PORT={port}\n"
                 f"srun -l {dump} > env.txt\n"
                 f"srun -N1 -n1 -l {dump} > small.txt\n"
                 f"srun python {DDP} > ddp.txt\n")
    jid = cluster.sbatch("-o", "job.out", script, cwd=workdir)
    assert cluster.wait_done(jid, timeout=120) == "COMPLETED", read(os.path.join(workdir, "job.out"))
    tasks = per_task(read(os.path.join(workdir, "env.txt")))
    assert sorted(tasks) == [0, 1, 2, 3]
    for t, env in tasks.items():
        assert env["MASTER_ADDR"] == "localhost" and env["MASTER_PORT"] == str(port), env
        assert env["RANK"] == env["SLURM_PROCID"] == str(t) and env["WORLD_SIZE"] == "4"
        assert env["LOCAL_RANK"] == str(t % 2) and env["NODE_RANK"] == str(t // 2)
        m = marker(env)
        assert "MASTER_ADDR" not in m and "MASTER_PORT" not in m  # the user's
        assert m["RANK"] == str(t) and m["WORLD_SIZE"] == "4"
    (small,) = per_task(read(os.path.join(workdir, "small.txt"))).values()
    # the step's own SLURM_* replace the batch job's, as in Slurm
    assert (small["SLURM_NTASKS"], small["SLURM_NNODES"], small["SLURM_STEP_ID"]) == ("1", "1", "1")
    assert small["WORLD_SIZE"] == "1" and small["MASTER_PORT"] == str(port)
    lines = sorted(read(os.path.join(workdir, "ddp.txt")).splitlines())
    assert lines == [f"rank {r}/4 local {r % 2} sum 6 ok" for r in range(4)], lines


def test_nested_srun_replaces_musters_values_and_keeps_the_users(cluster, workdir):
    """An srun inside an outer step's task: the outer step's RANK, WORLD_SIZE, NODE_RANK...
    are Muster's (listed in MUSTER_TORCH_VARS with their values) and are replaced by the
    inner step's; MASTER_PORT, which the task changed, is the user's and is kept."""
    inner = f"export MASTER_PORT=31234; srun -N2 --ntasks-per-node=1 -l {dump_script(workdir)}"
    r = cluster.run(["salloc", "-N2", "--ntasks-per-node=2", "srun", "-N1", "-n1", "bash", "-c",
                     inner], cwd=workdir, timeout=60)
    assert r.rc == 0, r
    tasks = per_task(r.out)
    assert sorted(tasks) == [0, 1], r.out
    for t, env in tasks.items():
        assert env["MASTER_PORT"] == "31234"
        assert env["RANK"] == str(t) and env["WORLD_SIZE"] == "2" and env["NODE_RANK"] == str(t)
        assert "MASTER_PORT" not in marker(env) and marker(env)["WORLD_SIZE"] == "2"


def test_srun_export_rules(cluster, workdir):
    """``--export``: ALL (default) passes FOO; NONE passes only SLURM_*; a list passes the
    named ones (``BAR=b`` given a value); with ``ALL,`` the user's own value wins over the
    list's; ``SRUN_EXPORT_ENV`` applies when no option is given. Muster's PyTorch variables
    are added in every case (the user set none here)."""
    dump = dump_script(workdir)

    def run(*opts, env=None):
        r = cluster.run(["srun", "-N1", "-n1", "-l", *opts, dump], cwd=workdir,
                        env={"FOO": "f", **(env or {})})
        assert r.rc == 0, r
        (got,) = per_task(r.out).values()
        assert got["WORLD_SIZE"] == "1" and got["RANK"] == "0" and "MASTER_ADDR" in got, got
        return {k: got.get(k) for k in ("FOO", "BAR")}

    assert run() == {"FOO": "f", "BAR": None}
    assert run("--export=NONE") == {"FOO": None, "BAR": None}
    assert run("--export=BAR=b") == {"FOO": None, "BAR": "b"}
    assert run("--export=FOO,BAR=b") == {"FOO": "f", "BAR": "b"}
    assert run("--export=ALL,FOO=list,BAR=b") == {"FOO": "f", "BAR": "b"}
    assert run(env={"SRUN_EXPORT_ENV": "NONE"}) == {"FOO": None, "BAR": None}
    assert run(env={"SRUN_EXPORT_ENV": "NONE", "SLURM_EXPORT_ENV": "ALL"}) == {"FOO": None, "BAR": None}
