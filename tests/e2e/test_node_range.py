"""Node ranges end to end (``-N min-max``): srun, sbatch and salloc get as many nodes as are
free, up to the maximum, as Slurm does ("the job will be allocated as many nodes as possible
within the range"); without -n each node runs one task; SLURM_NNODES, SLURM_JOB_NUM_NODES and
``scontrol show job`` report what was allocated."""

import os
import re

import pytest

from cluster import private_cluster, wait_for


@pytest.fixture(scope="module")
def c():
    with private_cluster("mrange", nodes=4, gpus=0, cpus=4) as cl:
        yield cl


def label_lines(out: str) -> dict[int, str]:
    """``srun -l`` output → {task: its line}."""
    got = {}
    for line in out.splitlines():
        t, _, rest = line.partition(": ")
        got[int(t)] = rest
    return got


def show_job(c, jid: int) -> str:
    r = c.run(["scontrol", "show", "job", str(jid)])
    assert r.rc == 0, r
    return r.out


def field(show: str, name: str) -> str:
    m = re.search(rf"\b{name}=(\S+)", show)
    assert m, show
    return m.group(1)


def test_srun_range_on_an_idle_cluster_takes_the_maximum(c):
    r = c.run(["srun", "-l", "-N1-3", "sh", "-c", 'echo "$SLURMD_NODENAME $SLURM_NNODES '
               '$SLURM_JOB_NUM_NODES $SLURM_NTASKS $(hostname)"'], cwd=c.workdir)
    assert r.rc == 0, r
    lines = label_lines(r.out)
    assert sorted(lines) == [0, 1, 2], r.out
    fields = [v.split() for v in lines.values()]
    assert len({f[0] for f in fields}) == 3, r.out  # three different nodes
    assert {tuple(f[1:4]) for f in fields} == {("3", "3", "3")}, r.out


def test_srun_range_takes_only_the_free_nodes(c):
    busy = [c.sbatch("-w", nd, "--exclusive", "-o", "/dev/null", "--wrap", "sleep 3301")
            for nd in ("node1", "node2")]
    try:
        for jid in busy:
            c.wait_state(jid, "RUNNING")
        r = c.run(["srun", "-N1-3", "printenv", "SLURMD_NODENAME"], cwd=c.workdir)
        assert r.rc == 0, r
        assert sorted(r.out.split()) == ["node3", "node4"], r.out
    finally:
        c.run(["scancel", *map(str, busy)])
    for jid in busy:
        c.wait_done(jid)


def test_srun_range_with_ntasks_spreads_them_over_the_most_nodes(c):
    r = c.run(["srun", "-l", "-N2-3", "-n4", "sh", "-c",
               'echo "$SLURMD_NODENAME $SLURM_STEP_TASKS_PER_NODE $SLURM_NNODES"'],
              cwd=c.workdir)
    assert r.rc == 0, r
    lines = label_lines(r.out)
    assert sorted(lines) == [0, 1, 2, 3], r.out
    fields = [lines[t].split() for t in range(4)]
    assert len({f[0] for f in fields}) == 3, r.out
    assert fields[0][0] == fields[1][0], r.out  # block layout: 2 tasks on the first node
    assert {tuple(f[1:]) for f in fields} == {("2,1(x2)", "3")}, r.out


def test_sbatch_range_gets_three_nodes_and_its_steps_use_them(c):
    jid = c.sbatch("-N1-3", "-o", "range.out", "--wrap",
                   'echo "nn=$SLURM_JOB_NUM_NODES $SLURM_NNODES"; srun printenv SLURMD_NODENAME',
                   cwd=c.workdir)
    pending = show_job(c, jid)
    assert field(pending, "NumNodes") in ("1-3", "3"), pending
    assert c.wait_done(jid) == "COMPLETED"
    out = wait_for(lambda: (t := open(os.path.join(c.workdir, "range.out")).read()) and t,
                   what="job output")
    first, *names = out.split("\n")
    assert first == "nn=3 3", out
    assert len(set(filter(None, names))) == 3, out
    show = show_job(c, jid)
    assert field(show, "NumNodes") == "3", show
    assert field(show, "NumTasks") == "3", show


def test_salloc_range_gets_three_nodes(c):
    r = c.run(["salloc", "-N1-3", "bash", "-c",
               'echo "nn=$SLURM_NNODES"; srun printenv SLURMD_NODENAME'], cwd=c.workdir)
    assert r.rc == 0, r
    first, *names = r.out.split("\n")
    assert first == "nn=3", r.out
    assert len(set(filter(None, names))) == 3, r.out


def test_use_min_nodes_takes_the_fewest_nodes_that_fit(c):
    """--use-min-nodes: srun gets the minimum on an idle cluster; sbatch's environment
    variable form (SBATCH_USE_MIN_NODES) does the same; -n that needs more nodes than the
    minimum gets just enough (8 one-CPU tasks on 4-CPU nodes: two)."""
    r = c.run(["srun", "-N1-3", "--use-min-nodes", "printenv", "SLURMD_NODENAME"], cwd=c.workdir)
    assert r.rc == 0, r
    assert len(r.out.split()) == 1, r.out
    r = c.run(["srun", "-N1-4", "-n8", "--use-min-nodes", "printenv", "SLURMD_NODENAME"],
              cwd=c.workdir)
    assert r.rc == 0, r
    assert len(r.out.split()) == 8 and len(set(r.out.split())) == 2, r.out
    r = c.run(["sbatch", "--parsable", "-N2-4", "-o", "/dev/null", "--wrap", "true"],
              cwd=c.workdir, env={"SBATCH_USE_MIN_NODES": "1"})
    assert r.rc == 0, r
    jid = int(r.out.strip())
    assert c.wait_done(jid) == "COMPLETED"
    assert field(show_job(c, jid), "NumNodes") == "2"
