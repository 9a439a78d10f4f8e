"""Options Slurm 22.05's help lists that Muster's parsers used to reject (issue 19), honoured
with real daemons: srun -r/--relative, salloc -K/--kill-command and --get-user-env, squeue
--array-unique/--noconvert, sinfo --hide/-a, scancel --sibling, sacct's -B/--env-vars/-c/-f
and its record filters (-g, -i, -I, -k/-K, -W). Expected lines and exit codes are those of the
Slurm 22.05.8 reference cluster on this machine.

One 3-node cluster (2 CPUs each) with an extra hidden partition and one open to group root
only, for the module."""

from __future__ import annotations

import grp
import pwd
import re

import pytest

from cluster import TEST_USER, TEST_USER2, private_cluster, user_exists, wait_for
from muster.cli import salloc
from muster.common.hostlist import expand


@pytest.fixture(scope="module")
def c():
    with private_cluster("muster-optgap-", nodes=3, cpus=2) as cl:
        cl.down()
        with open(cl.conf) as fh:
            text = fh.read()
        nodes = re.search(r"^PartitionName=\S+.*?\bNodes=(\S+)", text, re.M).group(1)
        with open(cl.conf, "a") as fh:
            fh.write(f"PartitionName=secret Nodes={nodes} Hidden=YES State=UP\n"
                     f"PartitionName=staff Nodes={nodes} AllowGroups=root State=UP\n")
        r = cl.run(["muster", "up", "--no-link", "--state-dir", cl.state_dir, "--config", cl.conf])
        assert r.rc == 0, r
        yield cl


def run(c, *argv, env=None, user=TEST_USER):
    return c.run(list(argv), user=user, cwd=c.workdir, env=env)


# ---- srun -r/--relative -------------------------------------------------------------------

def test_relative_places_the_step_from_node_n(c):
    script = ("echo alloc=$SLURM_JOB_NODELIST; "
              "srun -r1 -N1 printenv SLURMD_NODENAME; "
              "srun -r1 -N2 printenv SLURMD_NODENAME | sort; "
              "srun -r0 -N1 printenv SLURMD_NODENAME; "
              "srun --relative=2 -N1 printenv SLURMD_NODENAME")
    r = run(c, "salloc", "-Q", "-N3", "bash", "-c", script)
    assert r.rc == 0, r
    lines = r.out.split()
    alloc = expand(lines[0].split("=", 1)[1])
    assert len(alloc) == 3
    assert lines[1:] == [alloc[1], *sorted(alloc[1:]), alloc[0], alloc[2]], r


@pytest.mark.parametrize("args,code,line", [
    (["-r1"], 1, "srun: error: --relative and SLURM_JOB_NUM_NODES option incompatible with "
                 "count of allocated nodes (1+2>2)"),
    (["-r1", "-N2"], 1, "srun: error: --relative and --nodes option incompatible with count of "
                        "allocated nodes (1+2>2)"),
    (["-r0", "-w", "$SLURM_JOB_NODELIST"], 1,
     "srun: error: -r,--relative not allowed with -w,--nodelist or -x,--exclude."),
    (["-rx"], 1, 'srun: error: Invalid numeric value "x" for --relative.'),
    (["-r", "-1"], 1, 'srun: error: Invalid numeric value "-1" for --relative.'),
])
def test_relative_refusals_inside_an_allocation(c, args, code, line):
    r = run(c, "salloc", "-Q", "-N2", "bash", "-c",
            f"srun {' '.join(args)} true; echo rc=$?")
    assert r.rc == 0, r
    assert f"rc={code}" in r.out and r.err.splitlines() == [line], r


def test_relative_outside_an_allocation_is_fatal(c):
    r = run(c, "srun", "-r1", "true")
    assert (r.rc, r.err) == (1, "srun: fatal: --relative option invalid for job allocation "
                                "request\n"), r


# ---- salloc -K/--kill-command, --get-user-env -----------------------------------------------

_TRAPPER = ("trap 'echo got-TERM; exit 3' TERM; trap 'echo got-HUP; exit 4' HUP; "
            "trap 'echo got-USR1; exit 5' USR1; scancel $SLURM_JOB_ID; "
            "for i in $(seq 300); do sleep 0.1; done; echo not-signalled")


@pytest.mark.parametrize("opt,word,code", [("-K", "got-TERM", 3), ("-KUSR1", "got-USR1", 5),
                                           ("--kill-command=10", "got-USR1", 5),
                                           (None, "got-HUP", 4)])
def test_kill_command_signals_the_command_of_a_revoked_allocation(c, opt, word, code):
    r = run(c, "salloc", *([opt] if opt else []), "bash", "-c", _TRAPPER)
    assert r.rc == code and r.out.split() == [word], r
    assert re.search(r"^salloc: Job allocation \d+ has been revoked\.$", r.err, re.M), r


def test_kill_command_and_get_user_env_refusals(c):
    r = run(c, "salloc", "-Kfoo", "true")
    assert (r.rc, r.out, r.err) == (255, "", "salloc: error: Invalid --kill-command "
                                             "specification\n"), r
    r = run(c, "salloc", "--get-user-env=zz", "true")
    assert (r.rc, r.err) == (255, "salloc: error: Invalid --get-user-env specification\n"), r
    r = run(c, "salloc", "--get-user-env", "true")
    assert (r.rc, r.err) == (1, "salloc: error: SlurmdUser must be root to use "
                                "--get-user-env\n"), r
    assert "Granted" not in r.err


def test_get_user_env_gives_root_the_login_environment(c):
    """A login shell sets MAIL, which salloc's own environment lacks here; salloc's own
    variables win over the login ones."""
    cmd = ["bash", "-c", "echo mail=${MAIL:-unset} keep=$KEEP_ME"]
    env = {"KEEP_ME": "salloc-side"}
    plain = c.run(["env", "-u", "MAIL", "salloc", "-Q", *cmd], cwd=c.workdir, env=env)
    assert plain.out.split() == ["mail=unset", "keep=salloc-side"], plain
    r = c.run(["env", "-u", "MAIL", "salloc", "-Q", "--get-user-env=20L", *cmd],
              cwd=c.workdir, env=env)
    assert r.rc == 0, r
    mail, keep = r.out.split()
    assert mail.startswith("mail=/") and keep == "keep=salloc-side", r


def test_bell_and_kill_signal_rules():
    assert salloc.ring_bell("bell", 0.1, True) and not salloc.ring_bell("bell", 99, False)
    assert not salloc.ring_bell("no-bell", 99, True)
    assert salloc.ring_bell(None, 10.5, True) and not salloc.ring_bell(None, 9.5, True)
    assert salloc.kill_signal(None, True) is None
    assert (salloc.kill_signal(True, True), salloc.kill_signal(True, False)) == (1, 15)
    assert salloc.kill_signal("sigint", False) == 2 and salloc.kill_signal("9", False) == 9


# ---- squeue, sinfo, scancel -----------------------------------------------------------------

def test_squeue_array_unique_and_noconvert(c):
    jid = c.sbatch("-H", "--array=1-3", "--mem=2048", "--wrap", "true", user=TEST_USER,
                   cwd=c.workdir)
    try:
        grouped = c.run(["squeue", "-h", "-j", str(jid), "-o", "%i %m"]).out.split("\n")
        assert grouped[0] == f"{jid}_[1-3] 2G", grouped
        unique = c.run(["squeue", "-h", "-j", str(jid), "--array-unique", "--noconvert",
                        "-o", "%i %m"]).out.splitlines()
        assert unique == [f"{jid}_{t} 2048M" for t in (1, 2, 3)], unique
    finally:
        c.run(["scancel", str(jid)])


def test_sinfo_hides_hidden_partitions_unless_all(c):
    def parts(*opts):
        r = c.run(["sinfo", "-h", "-o", "%R", *opts])
        assert r.rc == 0, r
        return set(r.out.split())
    assert "secret" not in parts() and "secret" not in parts("--hide")
    assert "secret" in parts("-a") and "secret" not in parts("-a", "--hide")
    assert parts("--hide", "-a") == parts() | {"secret"}


def test_squeue_hides_jobs_of_hidden_and_closed_partitions_unless_all(c):
    mine = c.sbatch("-H", "--wrap", "true", user=TEST_USER, cwd=c.workdir)
    hidden = c.sbatch("-H", "-p", "secret", "--wrap", "true", user=TEST_USER, cwd=c.workdir)
    staff = c.sbatch("-H", "-p", "staff", "--wrap", "true", cwd=c.workdir)  # root's group only
    ours = {mine, hidden, staff}
    try:
        def ids(*opts, user=TEST_USER, env=None):
            r = run(c, "squeue", "-h", "-o", "%i", *opts, user=user, env=env)
            assert r.rc == 0, r
            return {int(x) for x in r.out.split()} & ours
        assert ids() == ids("--hide") == ids("-a", "--hide") == {mine}
        assert ids("-a") == ids("--all") == ids("--hide", "-a") == ours
        assert ids(env={"SQUEUE_ALL": "1"}) == ours and ids("--hide", env={"SQUEUE_ALL": "1"}) \
            == {mine}
        assert ids("-j", str(hidden)) == set() and ids("-a", "-j", str(hidden)) == {hidden}
        assert ids(user=None) == ours  # root, an operator, sees every partition
    finally:
        c.run(["scancel", *map(str, ours)])


def test_scontrol_federation_options_and_clusters(c):
    jid = c.sbatch("-H", "--wrap", "true", user=TEST_USER, cwd=c.workdir)
    try:
        plain = run(c, "scontrol", "show", "job", str(jid))
        assert plain.rc == 0 and f"JobId={jid} " in plain.out, plain
        for opt in ("--federation", "--local", "--sibling", f"-M{_cluster(c)}",
                    f"--cluster={_cluster(c)}", "--clusters=all"):
            r = run(c, "scontrol", opt, "show", "job", str(jid))
            assert (r.rc, r.out, r.err) == (0, plain.out, ""), (opt, r)
        r = run(c, "scontrol", "--sibling=x", "show", "job")
        assert (r.rc, r.err.splitlines()) == (1, [
            "scontrol: option '--sibling' doesn't allow an argument",
            'Try "scontrol --help" for more information']), r
        r = run(c, "scontrol", "show", "federation")
        assert (r.rc, r.out, r.err) == (0, "", ""), r
        r = run(c, "scontrol", "-M", "nosuch", "show", "job", str(jid))
        assert (r.rc, r.out, r.err.splitlines()) == (1, "", [
            "scontrol: error: No cluster 'nosuch' known by database.",
            "scontrol: error: 'nosuch' can't be reached now, or it is an invalid entry for "
            "--cluster.  Use 'sacctmgr list clusters' to see available clusters."]), r
        r = run(c, "scontrol", "-M", f"nosuch,{_cluster(c)}", "show", "job", str(jid))
        assert (r.rc, r.out, r.err) == (
            0, plain.out, "scontrol: error: No cluster 'nosuch' known by database.\n"), r
    finally:
        c.run(["scancel", str(jid)])


def _cluster(c) -> str:
    with open(c.conf) as fh:
        return re.search(r"^ClusterName=(\S+)", fh.read(), re.M).group(1)


def test_sprio_federation_options_and_cluster_column(c):
    base = run(c, "sprio")
    assert base.rc == 0, base
    for opt in ("--federation", "--local", f"-M{_cluster(c)}"):
        r = run(c, "sprio", opt)
        assert (r.rc, r.out) == (0, base.out), (opt, r)
    head = run(c, "sprio", "--sibling").out.splitlines()[0]
    assert head.startswith("          JOBID PARTITION  CLUSTER   PRIORITY       SITE"), head
    assert run(c, "sprio", env={"SPRIO_SIBLING": "1"}).out.splitlines()[0] == head
    assert "CLUSTER" not in run(c, "sprio", "--sibling", "-l").out.splitlines()[0]
    r = run(c, "sprio", "-h", "-o", "%c|%i")
    assert r.rc == 0 and all(line.startswith(_cluster(c) + "|") for line in r.out.split()), r
    r = run(c, "sprio", "-M", "elsewhere")
    assert r.rc == 1 and r.out == "" and r.err.startswith(
        "sprio: error: No cluster 'elsewhere' known by database.\n"), r


def test_sshare_helpformat_and_cluster_field(c):
    r = run(c, "sshare", "-e")
    assert r.rc == 0 and r.err == "", r
    lines = r.out.splitlines()
    names = " ".join(lines).split()
    assert names == sorted(names) and {"Account", "Cluster", "User", "FairShare"} <= set(names)
    assert all(len(line) == 17 * 4 + 3 for line in lines[:-1]), lines
    for name in names:  # every field -e lists is one -o takes
        assert run(c, "sshare", "-n", "-P", "-o", name).rc == 0, name
    r = run(c, "sshare", "-a", "-n", "-P", "-o", "Cluster,Account")
    assert r.rc == 0 and {line.split("|")[0] for line in r.out.split()} == {_cluster(c)}, r


def test_sacctmgr_oneliner_prints_what_it_prints_without(c):
    for what in (["show", "assoc", "format=cluster,account,user"], ["show", "qos"]):
        plain = c.run(["sacctmgr", *what])
        assert plain.rc == 0 and plain.out, plain
        for opt in ("-o", "--oneliner"):
            r = c.run(["sacctmgr", opt, *what])
            assert (r.rc, r.out) == (0, plain.out), r


def test_sstat_pidformat_lists_the_steps_nodes(c):
    script = ("srun -N2 -n2 sleep 30 & "
              "for i in $(seq 300); do out=$(sstat -n -P -i -j $SLURM_JOB_ID.0); "
              "[ -n \"$out\" ] && break; sleep 0.1; done; echo \"$out\"; "
              "sstat -i -P -j $SLURM_JOB_ID.0 -o maxrss; kill %1; wait; true")
    r = run(c, "salloc", "-Q", "-N2", "bash", "-c", script)
    assert r.rc == 0, r
    lines = r.out.splitlines()
    rows = [line for line in lines if not line.startswith("JobID")]
    assert len(rows) >= 2, r
    first = rows[:2]
    jid = first[0].split(".")[0]
    nodes = [row.split("|")[1] for row in first]
    assert len(set(nodes)) == 2 and all(  # Pids: empty until the node's first sample
        re.fullmatch(rf"{jid}\.0\|{n}\|(\d+(,\d+)*)?", row) for row, n in zip(first, nodes)), r
    assert "JobID|Nodelist|Pids|MaxRSS" in lines, r


def test_scancel_sibling_refuses_and_cancels_nothing(c):
    jid = c.sbatch("-H", "--wrap", "true", user=TEST_USER, cwd=c.workdir)
    try:
        r = run(c, "scancel", "--sibling=other", str(jid))
        assert (r.rc, r.err) == (191, f"scancel: error: Kill job error on job id {jid}: Not a "
                                      "valid federated job\n"), r
        assert c.run(["squeue", "-h", "-j", str(jid), "-o", "%T"]).out.strip() == "PENDING"
        r = run(c, "scancel", "--sibling", "other")
        assert (r.rc, r.err) == (1, "scancel: error: No job identification provided\n"), r
    finally:
        c.run(["scancel", str(jid)])


# ---- sacct ----------------------------------------------------------------------------------

_SCRIPT = "#!/bin/bash\n#SBATCH -J scripted\necho from-the-script\n"


def test_sacct_prints_the_stored_batch_script_and_environment(c):
    jid = c.sbatch(user=TEST_USER, cwd=c.workdir, input=_SCRIPT, env={"GAP_MARK": "seen-42"})
    c.wait_done(jid)
    dashes = "-" * 80
    r = run(c, "sacct", "-B", "-j", str(jid))
    assert (r.rc, r.out, r.err) == (0, f"Batch Script for {jid}\n{dashes}\n{_SCRIPT}\n", ""), r
    assert c.run(["sacct", "--batch-script", "-j", str(jid)]).out == r.out  # root: an operator
    r = run(c, "sacct", "--env-vars", "-j", str(jid))
    head = f"Environment used for {jid} (must be batch to display)\n{dashes}\n"
    assert r.rc == 0 and r.out.startswith(head) and r.out.endswith("\n\n"), r
    env = r.out[len(head):-1].splitlines()
    assert "GAP_MARK=seen-42" in env and f"USER={TEST_USER}" in env, r
    assert all("=" in line for line in env), r


def test_sacct_script_of_another_users_job_is_never_shown(c):
    if not user_exists(TEST_USER2):
        pytest.skip(f"needs the user {TEST_USER2}")
    jid = c.sbatch(user=TEST_USER, cwd=c.workdir, input=_SCRIPT, env={"GAP_MARK": "private"})
    c.wait_done(jid)
    for opt in ("-B", "--env-vars"):
        r = run(c, "sacct", opt, "-j", str(jid), user=TEST_USER2)
        assert (r.rc, r.out, r.err) == (0, "", ""), r
        assert "private" in run(c, "sacct", "--env-vars", "-j", str(jid)).out


def test_sacct_script_of_jobs_without_one_and_of_array_tasks(c):
    r = run(c, "srun", "bash", "-c", "echo $SLURM_JOB_ID")
    assert r.rc == 0, r
    step_job = int(r.out.strip())
    r = run(c, "sacct", "-B", "-j", str(step_job))
    assert r.out == f"Batch Script for {step_job}\n{'-' * 80}\nNONE\n\n", r
    arr = c.sbatch("--array=1-2", "--wrap", "echo wrapped-cmd", user=TEST_USER, cwd=c.workdir)
    wait_for(lambda: c.run(["squeue", "-h", "-j", str(arr)]).out == "", 30,
             what=f"array {arr} done")  # each task its own record by then
    r = run(c, "sacct", "-B", "-j", str(arr))
    titles = [line for line in r.out.splitlines() if line.startswith("Batch Script for")]
    assert titles == [f"Batch Script for {arr}_1", f"Batch Script for {arr}_2"], r
    assert r.out.count("echo wrapped-cmd\n") == 2, r
    r = run(c, "sacct", "-B", "-j", f"{arr}_2")
    assert r.out.splitlines()[0] == f"Batch Script for {arr}_2" and r.out.count("Batch") == 1, r
    r = run(c, "sacct", "-B")
    assert (r.rc, r.out, r.err) == (1, "", "sacct: fatal: When requesting job scripts you must "
                                           "also request specific jobs with the '-j' "
                                           "option.\n"), r
    r = run(c, "sacct", "--env-vars")
    assert r.rc == 1 and "requesting job environment" in r.err, r


def test_sacct_completion_data_is_disabled(c):
    for args in (["-c"], ["-f", "/etc/hostname"]):
        r = run(c, "sacct", *args)
        assert (r.rc, r.out, r.err) == (1, "", "Slurm job completion is disabled\n"), r
    r = run(c, "sacct", "-f", "/nonexistent/x")
    assert (r.rc, r.err) == (1, "/nonexistent/x is not a valid file\n"), r


def test_sacct_record_filters(c):
    small = c.sbatch("-N1", "-n1", "-t", "5", "--wckey=alpha", "--wrap", "true",
                     user=TEST_USER, cwd=c.workdir)
    big = c.sbatch("-N2", "-n4", "-t", "10", "--wckey=beta", "--wrap", "true",
                   user=TEST_USER, cwd=c.workdir)
    for j in (small, big):
        c.wait_done(j)
    ids = f"{small},{big}"

    def got(*opts):
        r = run(c, "sacct", "-X", "-n", "-P", "-o", "JobID", "-j", ids, *opts)
        assert r.rc == 0, r
        return sorted(int(x) for x in r.out.split())
    assert got() == sorted([small, big])
    assert got("-i", "2") == [big] and got("--nnodes=1-2") == sorted([small, big])
    assert got("-I", "4") == [big] and got("-I", "1") == [small]
    assert got("-k", "5") == [small] and got("-k", "5", "-K", "10") == sorted([small, big])
    assert got("-K", "5") == sorted([small, big])  # -K alone: ignored, as by Slurm
    assert got("-W", "beta") == [big] and got("--wckeys=alpha,beta") == sorted([small, big])
    gid = pwd.getpwnam(TEST_USER).pw_gid
    assert got("-g", str(gid)) == sorted([small, big])
    assert got("--group", grp.getgrgid(gid).gr_name) == sorted([small, big])
    assert got("-g", str(gid + 12345)) == []
    assert got("--federation") == got("--local") == sorted([small, big])
    assert got("--whole-hetjob=no") == sorted([small, big])


@pytest.mark.parametrize("args,line", [
    (["-i", "x"], 'sacct: error: Invalid numeric value "x" for requested node range.'),
    (["-I", "x"], 'sacct: error: Invalid numeric value "x" for requested cpu range.'),
    (["-k", "1-abc"], "sacct: fatal: Invalid time limit specification"),
    (["-g", "nosuchgroup"], "sacct: error: Invalid group id: nosuchgroup"),
    (["--whole-hetjob=maybe"], 'sacct: error: Invalid --whole-hetjob value "maybe". Valid '
                               "values: [yes|no]."),
])
def test_sacct_filter_refusals(c, args, line):
    r = run(c, "sacct", *args)
    assert (r.rc, r.out, r.err) == (1, "", line + "\n"), r


def test_gpu_freq_warns_and_gpus_per_socket_is_refused(c):
    r = run(c, "sbatch", "--gpu-freq=high", "--wrap", "true")
    assert r.rc == 0 and r.err == ("sbatch: warning: --gpu-freq is not supported by Muster: "
                                   "no GPU frequency control; ignored\n"), r
    assert re.fullmatch(r"Submitted batch job \d+\n", r.out), r
    for prog, extra in (("sbatch", ["--wrap", "true"]), ("srun", ["true"]),
                        ("salloc", ["true"])):
        r = run(c, prog, "--gpus-per-socket=1", *extra)
        assert (r.rc, r.out) == (1, ""), r
        assert r.err == (f"{prog}: error: --gpus-per-socket is not supported by Muster: Muster "
                         "allocates GPUs per node, not per socket (use --gpus-per-node)\n"), r


def test_step_layout_starts_at_the_relative_node():
    from muster.core.steplayout import AllocNode, StepError, StepRequest, layout
    alloc = [AllocNode(f"n{i}", 2, ()) for i in range(3)]
    lay = layout(alloc, {}, {}, StepRequest(nodes_min=2, relative=1))
    assert [n.node for n in lay.nodes] == ["n1", "n2"]
    assert [n.node for n in layout(alloc, {}, {}, StepRequest(ntasks=1, relative=2)).nodes] == \
        ["n2"]
    for bad in (StepRequest(nodes_min=1, relative=3), StepRequest(relative=1, nodelist=("n0",)),
                StepRequest(nodes_min=3, relative=1)):
        with pytest.raises(StepError):
            layout(alloc, {}, {}, bad)
