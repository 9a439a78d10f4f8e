"""Queries and admin commands against Slurm 22.05.8's own output (issue 19): ``squeue -s``,
``scontrol [-o] show step(s)``, ``scontrol show config``, reservation keywords in any case
and abbreviated, and a cancelled pending array index leaving the queue.

Layouts, messages and exit codes are the real Slurm's (captured on the reference cluster;
scontrol_show_config.txt in /work/shared/reference/slurm-22.05/ for the configuration).
"""

import re

import pytest

from cluster import TEST_USER, TEST_USER2, private_cluster, require_root_and_users, wait_for
from shared_path import SHARED

REF = SHARED / "reference" / "slurm-22.05" / "scontrol_show_config.txt"

STEP_HEADER = "         STEPID     NAME PARTITION     USER      TIME NODELIST"
# one srun step on both nodes, then (once it runs) one on the first node: ids 0 and 1
TWO_STEPS = ("srun -N2 -n2 sleep 300 & "
             "until squeue -h -s $SLURM_JOB_ID.0 | grep -q .; do sleep 0.1; done; "
             "srun -N1 -n1 --overlap sleep 300 & wait")


@pytest.fixture(scope="module")
def c():
    require_root_and_users(TEST_USER, TEST_USER2)
    with private_cluster("muster-qparity-", nodes=2, gpus=0, cpus=4) as cl:
        yield cl


@pytest.fixture(scope="module")
def running(c):
    """The test user's 2-node job with steps 0 and 1 running, and the second user's batch
    job: (job, other job)."""
    mine = c.sbatch("-N2", "-J", "steps", "-o", "/dev/null", "--wrap", TWO_STEPS,
                    user=TEST_USER, cwd=c.workdir)
    other = c.sbatch("-J", "other", "-o", "/dev/null", "--wrap", "sleep 300",
                     user=TEST_USER2, cwd=c.workdir)
    wait_for(lambda: len(c.ok("squeue", "-h", "-s").splitlines()) == 4, timeout=60,
             what="steps 0, 1 and two batch steps running")
    yield mine, other
    c.run(["scancel", str(mine), str(other)])


def rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines()]


def test_squeue_steps_default_format_and_order(c, running):
    mine, other = running
    for argv in (["squeue", "-s"], ["squeue", "--steps"]):
        r = c.run(argv, user=TEST_USER)
        assert r.rc == 0 and r.err == "", r
        lines = r.out.splitlines()
        assert lines[0] == STEP_HEADER
        # partition, then step id: srun steps before the batch step, every user's jobs
        assert [x[0] for x in rows(r.out)[1:]] == [f"{mine}.0", f"{mine}.1", f"{mine}.batch",
                                                   f"{other}.batch"]
        got = {x[0]: x[1:] for x in rows(r.out)[1:]}
        assert got[f"{mine}.0"][:3] == ["sleep", "gpu", TEST_USER[:8]]
        assert got[f"{mine}.0"][4] == "node[1-2]" and got[f"{mine}.1"][4] == "node1"
        assert got[f"{other}.batch"][:3] == ["batch", "gpu", TEST_USER2[:8]]
        assert re.fullmatch(r"\d+:\d\d", got[f"{mine}.batch"][3])
        # right-justified in 15 columns, as %.15i
        assert lines[1] == f"{mine}.0".rjust(15) + lines[1][15:]


def test_squeue_steps_filters(c, running):
    mine, other = running
    ids = lambda *a: [x[0] for x in rows(c.ok("squeue", "-h", *a, user=TEST_USER))]  # noqa: E731
    assert ids("-s", f"{mine}.1") == [f"{mine}.1"]
    assert ids(f"--steps={mine}.0,{other}.batch") == [f"{mine}.0", f"{other}.batch"]
    assert ids("-s", "-j", str(mine)) == [f"{mine}.0", f"{mine}.1", f"{mine}.batch"]
    assert ids("-s", "-u", TEST_USER2) == [f"{other}.batch"]
    assert ids("-s", "--me") == [f"{mine}.0", f"{mine}.1", f"{mine}.batch"]
    assert ids("-s", "-w", "node2") == [f"{mine}.0"]
    assert ids("-s", "-p", "debug") == []
    assert ids("-s", "-S", "-i") == [f"{other}.batch", f"{mine}.batch", f"{mine}.1", f"{mine}.0"]
    assert ids("-s", "99999.0") == []
    # a job id without a step, or not a number: squeue's message, exit 1
    for arg, msg in ((str(mine), f"Invalid job_step id: {mine}.??"),
                     ("abc.0", "Invalid job_step id: abc.0")):
        r = c.run(["squeue", "-s", arg])
        assert (r.rc, r.out, r.err) == (1, "", f"squeue: error: {msg}\n"), r


def test_squeue_steps_formats(c, running):
    mine, _other = running
    out = c.ok("squeue", "-s", f"{mine}.0", "-o", "%i|%j|%P|%u|%A|%U|%l|%N|%.10i")
    uid = c.ok("id", "-u", TEST_USER).strip()
    assert out.splitlines() == [
        "STEPID|NAME|PARTITION|USER|TASKS|UID|TIME_LIMIT|NODELIST|    STEPID",
        f"{mine}.0|sleep|gpu|{TEST_USER}|2|{uid}|UNLIMITED|node[1-2]|{f'{mine}.0':>10}"]
    # a job-only code is refused on stderr, kept as text, and the rest printed (exit 0)
    r = c.run(["squeue", "-s", f"{mine}.1", "-o", "%i %t"])
    assert r.rc == 0 and r.err == "squeue: error: Invalid job step format specification: t\n", r
    assert r.out.splitlines() == ["STEPID %t", f"{mine}.1 %t"]
    out = c.ok("squeue", "-s", f"{mine}.1", "-O", "StepId,StepName:8,NumTasks,StepState,nodes")
    assert out.splitlines() == [
        "STEPID".ljust(20) + "NAME".ljust(8) + "TASKS".ljust(20) + "STATE".ljust(20)
        + "NODELIST".ljust(20),
        f"{mine}.1".ljust(20) + "sleep".ljust(8) + "1".ljust(20) + "RUNNING".ljust(20)
        + "node1".ljust(20)]
    r = c.run(["squeue", "-s", "-O", "StepId,NumNodes"])
    assert r.rc == 0 and "Invalid job step format specification: NumNodes" in r.err, r
    assert r.out.splitlines()[0] == "STEPID".ljust(20)


def test_scontrol_show_steps(c, running):
    mine, other = running
    r = c.run(["scontrol", "-o", "show", "steps"], user=TEST_USER)
    assert r.rc == 0, r
    lines = r.out.splitlines()
    assert [ln.split()[0] for ln in lines] == [f"StepId={mine}.batch", f"StepId={mine}.0",
                                               f"StepId={mine}.1", f"StepId={other}.batch"]
    assert all(" State=RUNNING " in ln and ln.count("\n") == 0 for ln in lines)
    assert " Name=batch " in lines[0] and "SrunHost:Pid=(null):0" in lines[0]
    assert " Nodes=2 " in lines[1] and " Tasks=2 " in lines[1] and " Dist=" in lines[1]
    # another user's batch step, in the seven-line layout
    out = c.ok("scontrol", "show", "step", f"{other}.batch", user=TEST_USER)
    uid2 = c.ok("id", "-u", TEST_USER2).strip()
    assert out.splitlines()[0].startswith(f"StepId={other}.batch UserId={uid2} StartTime=")
    assert len(out.splitlines()) == 8 and out.endswith("\n\n")
    # a job's steps: all of them; one step, one line with -o
    assert c.ok("scontrol", "show", "step", str(mine)).count("StepId=") == 3
    one = c.ok("scontrol", "-o", "show", "step", f"{mine}.1")
    assert one.count("\n") == 1 and one.startswith(f"StepId={mine}.1 ")
    # an unknown step of a known job, a job the controller does not hold
    r = c.run(["scontrol", "show", "step", f"{mine}.7"])
    assert (r.rc, r.out) == (1, f"Job step {mine}.7 not found\n"), r
    r = c.run(["scontrol", "show", "step", "99999.0"])
    assert (r.rc, r.out, r.err) == (1, "", "slurm_get_job_steps error: Invalid job id specified\n"), r


def test_show_config_every_setting_in_slurm_order(c):
    with open(REF) as fh:
        ref = fh.read().splitlines()
    ref_keys = [ln.split(" = ")[0].rstrip() for ln in ref[1:ref.index("")]]
    r = c.run(["scontrol", "show", "config"], user=TEST_USER)
    assert r.rc == 0, r
    lines = r.out.splitlines()
    assert re.fullmatch(r"Configuration data as of \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", lines[0])
    body = lines[1:lines.index("")]
    keys = [ln.split(" = ")[0].rstrip() for ln in body]
    assert keys == ref_keys
    # "%-23s = %s", as slurmctld lays them out
    assert all(ln[23:26] == " = " or (len(ln.split(" = ")[0]) > 23) for ln in body)
    vals = dict(ln.split(" = ", 1) for ln in body)
    vals = {k.rstrip(): v for k, v in vals.items()}
    assert vals["ClusterName"] == "muster" and vals["SLURM_CONF"] == c.conf
    assert vals["KillWait"] == "30 sec" and vals["MinJobAge"] == "300 sec"  # set by muster up
    assert vals["DefMemPerCPU"].isdigit() and vals["MaxMemPerNode"] == "UNLIMITED"
    assert vals["SelectTypeParameters"] == "CR_CORE_MEMORY"
    assert vals["MessageTimeout"] == "10 sec" and vals["TreeWidth"] == "50"  # defaults
    assert vals["PriorityDecayHalfLife"] == "7-00:00:00"
    assert int(vals["NEXT_JOB_ID"]) >= 1
    host = vals["SlurmctldHost[0]"].split("(")[0]
    assert lines[-1] == f"Slurmctld(primary) at {host} is UP"
    # the controller's running value: a job submitted moves NEXT_JOB_ID on
    jid = c.sbatch("-H", "--wrap", "true", cwd=c.workdir)
    after = c.ok("scontrol", "show", "config")
    assert f"NEXT_JOB_ID             = {jid + 1}\n" in after
    c.ok("scancel", str(jid))


def test_reservation_keywords_any_case(c):
    out = c.ok("scontrol", "create", "reservation", "start=now", "duration=60", "users=root",
               "nodes=node2", "reservationname=lc", "flags=maint,ignore_jobs")
    assert out == "Reservation created: lc\n"
    show = c.ok("scontrol", "show", "reservation", "lc")
    assert "Nodes=node2 " in show and "Flags=MAINT" in show and "Users=root " in show
    assert "Duration=01:00:00" in show
    # abbreviated as scontrol allows: r=, st=, dur=, fl=
    c.ok("scontrol", "update", "res", "r=lc", "dur=30")
    assert "Duration=00:30:00" in c.ok("scontrol", "show", "reservation", "lc")
    c.ok("scontrol", "delete", "reservation=lc")
    r = c.run(["scontrol", "create", "reservation", "bogus=1", "start=now"])
    assert (r.rc, r.out, r.err) == (
        1, "", "scontrol: error: Unknown parameter bogus=1.  No reservation created.\n"), r
    r = c.run(["scontrol", "update", "reservation", "r=lc", "node=node1"])
    assert r.rc == 1 and r.err == ("scontrol: error: Unknown parameter node=node1.  "
                                   "No reservation update.\n"), r


def test_cancelled_pending_array_task_leaves_the_queue(c):
    arr = c.sbatch("--array=0-5", "-H", "-o", "/dev/null", "--wrap", "true",
                   user=TEST_USER, cwd=c.workdir)
    try:
        r = c.run(["scancel", f"{arr}_3"], user=TEST_USER)
        assert (r.rc, r.out, r.err) == (0, "", ""), r
        for states in ([], ["-t", "all"], ["-t", "CA"]):
            out = c.ok("squeue", "-h", "-j", str(arr), "-o", "%i %T", *states)
            assert f"{arr}_3 " not in out, (states, out)
        assert c.ok("squeue", "-h", "-j", str(arr), "-o", "%i").split() == [f"{arr}_[0-2,4-5]"]
        expanded = c.ok("squeue", "-h", "-r", "-j", str(arr), "-o", "%i").split()
        assert sorted(expanded) == sorted(f"{arr}_{t}" for t in (0, 1, 2, 4, 5))
        assert "ArrayTaskId=0-2,4-5 " in c.ok("scontrol", "show", "job", str(arr))
        r = c.run(["scontrol", "show", "job", f"{arr}_3"])
        assert r.rc == 1, r
        # accounting keeps it: CANCELLED, by its owner
        acct = c.ok("sacct", "-X", "-n", "-P", "-j", str(arr), "-o", "JobID,State")
        states = dict(line.split("|") for line in acct.splitlines())
        assert states[f"{arr}_3"].startswith("CANCELLED"), acct
    finally:
        c.run(["scancel", str(arr)])


def test_show_topology_without_a_topology_is_slurms_error_and_exit_0(c):
    r = c.run(["scontrol", "show", "topology"])
    assert (r.rc, r.out, r.err) == (0, "", "scontrol: error: No topology information available\n")
