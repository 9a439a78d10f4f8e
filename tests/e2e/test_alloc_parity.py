"""srun/salloc/sbatch allocation-side parity with Slurm 22.05 (issue 19), with real daemons:
-N as Slurm reads it (and srun's own prefix), impossible --mincpus/--tmp/--constraint refused
with Slurm's lines, --tmp honoured against TmpDisk, --account without association
enforcement, --immediate (bare and =N: no job left behind, sacct as Slurm; salloc's
SALLOC_IMMEDIATE), scontrol's MinTmpDiskNode, SLURM_NPROCS.

Expected lines and exit codes are those of the Slurm 22.05.8 reference cluster on this machine.
One 2-node cluster (4 CPUs each; node1 has TmpDisk=1000) for the module."""

from __future__ import annotations

import re

import pytest

from cluster import TEST_USER, private_cluster


@pytest.fixture(scope="module")
def c():
    with private_cluster("muster-alloc-", nodes=2, cpus=4, gpus=1) as cl:
        cl.down()
        with open(cl.conf) as fh:
            text = fh.read()
        text = re.sub(r"^(NodeName=node1\b.*)$", r"\1 TmpDisk=1000", text, flags=re.M)
        with open(cl.conf, "w") as fh:
            fh.write(text)
        r = cl.run(["muster", "up", "--no-link", "--state-dir", cl.state_dir, "--config", cl.conf])
        assert r.rc == 0, r
        yield cl


def run(c, *argv, env=None):
    return c.run(list(argv), user=TEST_USER, cwd=c.workdir, env=env)


def acct(c, jid: int) -> dict:
    r = c.run(["sacct", "-X", "-n", "-P", "-j", str(jid), "-o",
               "JobID,State,ExitCode,NodeList,Account"])
    rows = [ln.split("|") for ln in r.out.splitlines() if ln.startswith(f"{jid}|")]
    assert rows, r
    return dict(zip(("id", "state", "exit", "nodes", "account"), rows[0]))


def last_job(c) -> int:
    r = c.run(["sacct", "-X", "-n", "-P", "-a", "-o", "JobID"])
    assert r.rc == 0, r
    return max((int(x) for x in r.out.split()), default=0)  # 0: no job yet on this cluster


@pytest.mark.parametrize("prog", ["srun", "salloc", "sbatch"])
@pytest.mark.parametrize("value,line", [
    ("3-", "Maximum node count -1 is less than minimum node count 3"),
    ("-", "Maximum node count -1 is less than minimum node count 1"),
    ("5-3", "Maximum node count 3 is less than minimum node count 5"),
    ("abc", '"abc" is not a valid node count'),
    ("-3x", '"3x" is not a valid node count'),
])
def test_node_count_refused_with_the_commands_own_prefix(c, prog, value, line):
    extra = ["--wrap", "true"] if prog == "sbatch" else ["true"]
    r = run(c, prog, f"-N{value}", *extra)
    assert (r.rc, r.out, r.err) == (255, "", f"{prog}: error: {line}\n"), r


def test_node_count_with_only_a_maximum_runs_and_zero_is_refused_by_the_controller(c):
    r = run(c, "srun", "-N-2", "true")
    assert (r.rc, r.err) == (0, ""), r
    r = run(c, "srun", "-N0", "true")
    assert (r.rc, r.err) == (
        1, "srun: error: Unable to allocate resources: Node count specification invalid\n"), r
    r = run(c, "sbatch", "-N0", "--wrap", "true")
    assert (r.rc, r.err) == (
        1, "sbatch: error: Batch job submission failed: Node count specification invalid\n"), r


_NODE_CONFIG = "Requested node configuration is not available"
_FAILED = {"srun": "Unable to allocate resources", "salloc": "Job submit/allocate failed",
           "sbatch": "Batch job submission failed"}


@pytest.mark.parametrize("prog", ["srun", "salloc", "sbatch"])
@pytest.mark.parametrize("opt,detail,err", [
    ("--mincpus=999999", "CPU count per node can not be satisfied", _NODE_CONFIG),
    ("--tmp=999999", "Temporary disk specification can not be satisfied", _NODE_CONFIG),
    ("--constraint=invalid", None, "Invalid feature specification"),
])
def test_impossible_requests_refused_as_slurm(c, prog, opt, detail, err):
    extra = ["--wrap", "true"] if prog == "sbatch" else ["true"]
    before = last_job(c)
    r = run(c, prog, opt, *extra)
    want = (f"{prog}: error: {detail}\n" if detail else "") + f"{prog}: error: {_FAILED[prog]}: {err}\n"
    assert (r.rc, r.out, r.err) == (1, "", want), r
    assert last_job(c) == before  # nothing was queued


def test_tmp_is_honoured_against_tmpdisk(c):
    r = run(c, "srun", "-N1", "--tmp=500", "-J", "tmpjob", "hostname")
    assert r.rc == 0 and r.err == "", r
    assert acct(c, last_job(c))["nodes"] == "node1"  # node2 has TmpDisk=0
    held = c.sbatch("-H", "--tmp=500", "--wrap", "true", user=TEST_USER, cwd=c.workdir)
    plain = c.sbatch("-H", "--wrap", "true", user=TEST_USER, cwd=c.workdir)
    try:  # scontrol shows it as Slurm does (MB in its units: 500M, 1G), 0 when not asked
        show = c.run(["scontrol", "show", "job", str(held)]).out
        assert " MinTmpDiskNode=500M\n" in show, show
        show = c.run(["scontrol", "show", "job", str(plain)]).out
        assert " MinTmpDiskNode=0\n" in show, show
    finally:
        c.run(["scancel", str(held), str(plain)])
    r = run(c, "srun", "-N2", "--tmp=500", "true")  # only one node has that much
    assert (r.rc, r.err) == (1, f"srun: error: Unable to allocate resources: {_NODE_CONFIG}\n"), r


def test_unknown_account_accepted_without_association_enforcement(c):
    r = run(c, "sbatch", "--parsable", "-A", "X", "--wrap", "true")
    assert r.rc == 0 and r.err == "", r
    jid = int(r.out)
    assert c.wait_done(jid) == "COMPLETED"
    assert acct(c, jid)["account"] == "X"


def test_unknown_account_refused_with_association_enforcement():
    with private_cluster("muster-acctenf-", nodes=1, cpus=2, gpus=1,
                         extra_conf="AccountingStorageEnforce=associations") as c:
        r = run(c, "sbatch", "-A", "X", "--wrap", "true")
        assert (r.rc, r.err) == (1, "sbatch: error: Batch job submission failed: Invalid account "
                                    "or account/partition combination specified\n"), r
        r = run(c, "sbatch", "--parsable", "--wrap", "true")  # the implicit default still works
        assert r.rc == 0, r


def test_immediate_leaves_no_job_behind(c):
    blocker = c.sbatch("-N2", "--exclusive", "--wrap", "sleep 300", user=TEST_USER, cwd=c.workdir)
    c.wait_state(blocker, "RUNNING")
    try:
        busy = "Unable to allocate resources: Requested nodes are busy"
        r = run(c, "srun", "--immediate", "true")
        assert (r.rc, r.out, r.err) == (1, "", f"srun: error: {busy}\n"), r
        jid = last_job(c)
        assert (acct(c, jid)["state"], acct(c, jid)["exit"]) == ("FAILED", "1:0")
        r = run(c, "salloc", "-I", "true")
        jid = last_job(c)
        assert (r.rc, r.err) == (1, f"salloc: error: {busy}\n"
                                    f"salloc: Job allocation {jid} has been revoked.\n"), r
        assert acct(c, jid)["state"] == "FAILED"
        r = run(c, "srun", "--immediate=1", "true")
        jid = last_job(c)
        assert (r.rc, r.err) == (1, f"srun: job {jid} queued and waiting for resources\n"
                                    f"srun: error: {busy}\n"), r
        assert acct(c, jid)["state"].startswith("CANCELLED")
        r = run(c, "salloc", "-I1", "true")
        jid = last_job(c)
        assert (r.rc, r.err) == (1, f"salloc: Pending job allocation {jid}\n"
                                    f"salloc: job {jid} queued and waiting for resources\n"
                                    "salloc: error: Unable to allocate resources: Connection timed out\n"
                                    f"salloc: Job allocation {jid} has been revoked.\n"), r
        assert acct(c, jid)["state"].startswith("CANCELLED")
        queue = c.run(["squeue", "-h", "-o", "%i"]).out.split()
        assert queue == [str(blocker)]
        r = run(c, "srun", "-Ifoo", "true")
        assert (r.rc, r.err) == (1, 'srun: error: Invalid numeric value "foo" for immediate.\n'), r
        # salloc reads SALLOC_IMMEDIATE (empty: a bare -I), as Slurm 22.05's salloc does
        r = run(c, "salloc", "true", env={"SALLOC_IMMEDIATE": ""})
        jid = last_job(c)
        assert (r.rc, r.err) == (1, f"salloc: error: {busy}\n"
                                    f"salloc: Job allocation {jid} has been revoked.\n"), r
        r = run(c, "salloc", "true", env={"SALLOC_IMMEDIATE": "1"})
        jid = last_job(c)
        assert (r.rc, r.err) == (1, f"salloc: Pending job allocation {jid}\n"
                                    f"salloc: job {jid} queued and waiting for resources\n"
                                    "salloc: error: Unable to allocate resources: Connection timed out\n"
                                    f"salloc: Job allocation {jid} has been revoked.\n"), r
        assert c.run(["squeue", "-h", "-o", "%i"]).out.split() == [str(blocker)]
    finally:
        c.ok("scancel", str(blocker))
    c.wait_done(blocker)
    r = run(c, "srun", "-I", "true")  # free resources: it starts at once
    assert (r.rc, r.err) == (0, ""), r


def test_sbatch_has_no_immediate_option(c):
    r = run(c, "sbatch", "--immediate", "--wrap", "true")
    assert (r.rc, r.err) == (255, "sbatch: unrecognized option '--immediate'\n"
                                  "Try \"sbatch --help\" for more information\n"), r


def test_srun_reads_slurm_nprocs(c):
    r = run(c, "srun", "-l", "echo", "x", env={"SLURM_NPROCS": "3"})
    assert r.rc == 0, r
    assert sorted(r.out.splitlines()) == ["0: x", "1: x", "2: x"], r
