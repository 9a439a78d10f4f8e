"""Bad input through the real CLI: Slurm's message and exit code, never a traceback, no harm.

Every sbatch/squeue/sinfo/scancel/scontrol/sacct case of the reference transcript
errors_bad_input.txt (real Slurm 22.05, same 4-node 8-GPU cluster shape) is replayed as a
plain user. Where Muster deliberately differs from Slurm the test says so and checks Muster's
message instead. Then more abuse: malformed hostlists and dependencies, huge, NUL, CRLF and
empty scripts, impossible resource requests, hostile environment variables. Jobs submitted
before all of it must come out unchanged, and the daemons must still be the same processes.
"""

from __future__ import annotations

import json
import os

import pytest

from cluster import TEST_USER, user_exists, wait_for

SLURM_1 = "sbatch: error: Batch job submission failed: "


@pytest.fixture(scope="module")
def files(cluster):
    d = os.path.join(cluster.workdir, "bad_input")
    os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o1777)
    out = {}

    def put(name, data: bytes):
        path = os.path.join(d, name)
        with open(path, "wb") as fh:
            fh.write(data)
        os.chmod(path, 0o644)
        out[name] = path

    put("noshebang.sh", b"echo no shebang\n")
    put("empty.sh", b"")
    put("blank.sh", b"   \n\n\t\n")
    put("nul.sh", b"#!/bin/sh\necho a\x00b\n")
    put("crlf.sh", b"#!/bin/sh\r\necho dos\r\n")
    line = b"# " + b"x" * 97 + b"\n"
    put("big.sh", b"#!/bin/sh\n" + line * (10 * 1024 * 1024 // len(line) + 1) + b"true\n")
    assert os.path.getsize(out["big.sh"]) >= 10 * 1024 * 1024
    put("binary.sh", b"#!/bin/sh\n" + bytes(range(1, 256)) * 100 + b"\n")
    out["dir"] = d
    return out


def norm_show(text: str) -> dict:
    """``scontrol show job`` as a dict, minus fields that change with the clock."""
    out = {}
    for tok in text.split():
        k, sep, v = tok.partition("=")
        if sep:
            out[k] = v
    for k in ("RunTime", "LastSchedEval"):
        out.pop(k, None)
    return out


@pytest.fixture(scope="module")
def before(cluster, files):
    """Jobs that exist before the bad input: held, running and completed, all test_user's."""
    test_user = TEST_USER
    if os.getuid() != 0 or not user_exists(test_user):
        pytest.fail(f"must run as root with user {test_user} present")
    d = files["dir"]
    held = cluster.sbatch("-H", "-J", "keep-held", "-t", "17", "--comment", "do not touch",
                          "--gres=gpu:1", "-o", "held.out", "--wrap", "true", user=test_user, cwd=d)
    running = cluster.sbatch("-J", "keep-running", "-c", "2", "--gres=gpu:2", "-o", "run.out",
                             "--wrap", "sleep 600", user=test_user, cwd=d)
    done = cluster.sbatch("-J", "keep-done", "-o", "done.out", "--wrap", "echo done",
                          user=test_user, cwd=d)
    cluster.wait_state(running, "RUNNING")
    assert cluster.wait_done(done) == "COMPLETED"
    snap = {}
    for jid in (held, running, done):
        r = cluster.run(["scontrol", "show", "job", str(jid)])
        assert r.rc == 0, r
        snap[jid] = norm_show(r.out)
    acct = cluster.run(["sacct", "-j", f"{held},{running},{done}", "-X", "-P", "-n", "-o",
                        "JobID,JobName,State,ExitCode,NodeList,AllocTRES"]).out
    status = json.loads(cluster.run(["muster", "status", "--json"]).out)
    yield {"held": held, "running": running, "done": done, "show": snap, "acct": acct,
           "status": status, "pids": cluster.pids()}
    cluster.run(["scancel", str(held), str(running)])


def check(r, rc, err=None, out=None):
    assert "Traceback" not in r.err and "Traceback" not in r.out, r
    assert r.rc == rc, r
    if err is not None:
        assert r.err == err, r
    if out is not None:
        assert r.out == out, r


def daemons_alive(cluster, before):
    for pid in [before["pids"]["controller"], *before["pids"]["agents"].values()]:
        os.kill(pid, 0)


# ---- sbatch: as in the reference transcript ----------------------------------------------

NODE_CONFIG = SLURM_1 + "Requested node configuration is not available\n"

SBATCH_SLURM = [
    (["--bogus-option", "--wrap", "true"], 255,
     "sbatch: unrecognized option '--bogus-option'\nTry \"sbatch --help\" for more information\n"),
    (["--gres=gpu:9", "--wrap", "true"], 1, NODE_CONFIG),
    (["-N1", "--gres=gpu:9", "--wrap", "true"], 1, NODE_CONFIG),
    (["--gpus=33", "--wrap", "true"], 1, NODE_CONFIG),
    (["--gres=tpu:1", "--wrap", "true"], 1,
     "sbatch: error: Invalid generic resource (gres) specification\n"),
    (["--gres=gpu:abc", "--wrap", "true"], 1, NODE_CONFIG),
    (["-p", "nosuch", "--wrap", "true"], 1,
     "sbatch: error: invalid partition specified: nosuch\n" + SLURM_1
     + "Invalid partition name specified\n"),
    (["-t", "abc", "--wrap", "true"], 255, "sbatch: error: Invalid --time specification\n"),
    (["-c", "17", "--wrap", "true"], 1,
     "sbatch: error: CPU count per node can not be satisfied\n" + NODE_CONFIG),
    (["--mem=100G", "--wrap", "true"], 1,
     "sbatch: error: Memory specification can not be satisfied\n" + NODE_CONFIG),
    # -A nosuch: accepted without AccountingStorageEnforce=associations, refused with it
    # (the reference cluster enforces them): tests/e2e/test_alloc_parity.py
    (["--array=0-20000", "--wrap", "true"], 1, SLURM_1 + "Invalid job array specification\n"),
    (["--array=abc", "--wrap", "true"], 1, SLURM_1 + "Invalid job array specification\n"),
    ([], 1, "sbatch: error: Batch script is empty!\n"),
    (["{noshebang.sh}"], 1,
     "sbatch: error: This does not look like a batch script.  The first\n"
     "sbatch: error: line must start with #! followed by the path to an interpreter.\n"
     "sbatch: error: For instance: #!/bin/sh\n"),
    (["/nonexistent/script.sh"], 1, "sbatch: error: Unable to open file /nonexistent/script.sh\n"),
]


def _args(args, files):
    return [files[a[1:-1]] if a.startswith("{") else a for a in args]


@pytest.mark.parametrize("args,rc,err", SBATCH_SLURM, ids=[" ".join(a) or "(no script)"
                                                           for a, _, _ in SBATCH_SLURM])
def test_sbatch_like_slurm(cluster, files, before, test_user, args, rc, err):
    r = cluster.run(["sbatch", *_args(args, files)], user=test_user, cwd=files["dir"], input="")
    check(r, rc, err, out="")
    daemons_alive(cluster, before)


def test_sbatch_accepted_like_slurm_then_pending_with_reason(cluster, files, before, test_user):
    """Slurm accepts a too-long limit and too many nodes (EnforcePartLimits=NO) and leaves
    the jobs pending with PartitionTimeLimit / PartitionNodeLimit (reference:
    squeue_after_bad_input_accepted_jobs.txt)."""
    r = cluster.run(["sbatch", "-p", "debug", "-t", "2:00:00", "--parsable", "--wrap", "true"],
                    user=test_user, cwd=files["dir"])
    check(r, 0, "")
    long_job = int(r.out)
    r = cluster.run(["sbatch", "-N5", "--wrap", "true"], user=test_user, cwd=files["dir"])
    check(r, 0, "")
    assert r.out.startswith("Submitted batch job ")
    wide_job = int(r.out.split()[-1])
    try:
        def rows():
            r = cluster.run(["squeue", "-h", "-j", f"{long_job},{wide_job}", "-o",
                             "%i %.8T %.12l %.5D %q %r"])
            got = {int(line.split()[0]): line.split()[1:] for line in r.out.splitlines()}
            want = {long_job: ["PENDING", "2:00:00", "1", "normal", "PartitionTimeLimit"],
                    wide_job: ["PENDING", "UNLIMITED", "5", "normal", "PartitionNodeLimit"]}
            return got == want or None
        wait_for(rows, 10, what="pending reasons PartitionTimeLimit/PartitionNodeLimit")
    finally:
        cluster.run(["scancel", str(long_job), str(wide_job)])


# Muster refuses what Slurm 22.05 silently accepts (documented deviations).
SBATCH_MUSTER = [
    # Slurm takes "-t -5" as no limit; Muster refuses a negative time
    (["-t", "-5", "--wrap", "true"], 255, "sbatch: error: Invalid --time specification\n"),
    # Slurm (without QOS enforcement) accepts an unknown QOS; Muster refuses it
    (["--qos=nosuch", "--wrap", "true"], 1, SLURM_1 + "Invalid qos specification\n"),
    # Slurm accepts a dependency on a job that never existed; Muster refuses it (spec §3)
    (["--dependency=afterok:999999", "--wrap", "true"], 1, SLURM_1 + "Job dependency problem\n"),
]


@pytest.mark.parametrize("args,rc,err", SBATCH_MUSTER, ids=[" ".join(a) for a, _, _ in SBATCH_MUSTER])
def test_sbatch_muster_refuses(cluster, files, before, test_user, args, rc, err):
    r = cluster.run(["sbatch", *args], user=test_user, cwd=files["dir"])
    check(r, rc, err, out="")


# ---- more bad sbatch input ---------------------------------------------------------------

NODE_NAME = SLURM_1 + "Invalid node name specified\n"
DEPENDENCY = SLURM_1 + "Job dependency problem\n"

SBATCH_MORE = [
    (["-w", "node[3-1]", "--wrap", "true"], 1, NODE_NAME),
    (["-w", "node[1-", "--wrap", "true"], 1, NODE_NAME),
    (["-w", "node[1-2]]", "--wrap", "true"], 1, NODE_NAME),
    (["-w", "node9", "--wrap", "true"], 1, NODE_NAME),
    (["-w", "node[a-c]", "--wrap", "true"], 1, NODE_NAME),
    (["-x", "node[1-", "--wrap", "true"], 1, NODE_NAME),
    (["--nodelist=node[1-99999999999]", "--wrap", "true"], 1, NODE_NAME),
    (["-d", "afterok:", "--wrap", "true"], 1, DEPENDENCY),
    (["-d", "afterok:abc", "--wrap", "true"], 1, DEPENDENCY),
    (["-d", "bogus:1", "--wrap", "true"], 1, DEPENDENCY),
    (["-d", "afterok:1?afterany:1,afterok:1", "--wrap", "true"], 1, DEPENDENCY),
    (["-d", ",,,", "--wrap", "true"], 1, DEPENDENCY),
    (["-d", "afterok:-1", "--wrap", "true"], 1, DEPENDENCY),
    (["-d", "afterok:99999999999999999999999", "--wrap", "true"], 1, DEPENDENCY),
    (["-d", "afterok:\u00b2", "--wrap", "true"], 1, DEPENDENCY),
    (["-d", "after:1+x", "--wrap", "true"], 1, DEPENDENCY),
    (["--gres=gpu:9", "--wrap", "true"], 1, NODE_CONFIG),
    (["--gpus=33", "--wrap", "true"], 1, NODE_CONFIG),
    (["-N5", "--gres=gpu:9", "--wrap", "true"], 1, NODE_CONFIG),
    # -A nosuch: accepted without AccountingStorageEnforce=associations, refused with it
    # (the reference cluster enforces them): tests/e2e/test_alloc_parity.py
    (["-q", "nosuch", "--wrap", "true"], 1, SLURM_1 + "Invalid qos specification\n"),
    (["--array=5-1", "--wrap", "true"], 1, SLURM_1 + "Invalid job array specification\n"),
    (["--array=\u00b2", "--wrap", "true"], 1, SLURM_1 + "Invalid job array specification\n"),
    (["-t", "1:2:3:4", "--wrap", "true"], 255, "sbatch: error: Invalid --time specification\n"),
    (["-t", "5--", "--wrap", "true"], 255, "sbatch: error: Invalid --time specification\n"),
    (["-t", "-1:00", "--wrap", "true"], 255, "sbatch: error: Invalid --time specification\n"),
    (["--time-min=abc", "--wrap", "true"], 255, None),
    (["--mem=-5", "--wrap", "true"], 255, None),
    (["-N", "0", "--wrap", "true"], 1, SLURM_1 + "Node count specification invalid\n"),
    (["-N", "abc", "--wrap", "true"], 255, None),
    (["-c", "0", "--wrap", "true"], 255, None),
    (["-n", "-1", "--wrap", "true"], 255, None),
    (["--begin=garbage", "--wrap", "true"], 255, None),
    (["--signal=FOO", "--wrap", "true"], 255, None),
    (["--nice=abc", "--wrap", "true"], 255, None),
    (["--open-mode=sideways", "--wrap", "true"], None, None),
    (["--wrap"], 255, None),
    (["-J", "x" * 70000, "--wrap", "true"], 1, None),
    (["-N", "99999999999999999999999", "--wrap", "true"], None, None),
    (["-t", "99999999999999999999", "--wrap", "true"], None, None),
    (["--gres=gpu:99999999999999999999999", "--wrap", "true"], 1, None),
]


@pytest.mark.parametrize("args,rc,err", SBATCH_MORE,
                         ids=[" ".join(a)[:50] for a, _, _ in SBATCH_MORE])
def test_sbatch_more_bad_input(cluster, files, before, test_user, args, rc, err):
    r = cluster.run(["sbatch", *args], user=test_user, cwd=files["dir"])
    assert "Traceback" not in r.err and "Traceback" not in r.out, r
    assert r.out == "" and r.rc != 0, r
    if rc is not None:
        assert r.rc == rc, r
    assert r.err.startswith("sbatch: "), r
    assert r.err.count("\n") <= 4, r
    if err is not None:
        assert r.err == err, r
    daemons_alive(cluster, before)


@pytest.mark.parametrize("name,words", [
    ("big.sh", "too large"),
    ("nul.sh", "NUL"),
    ("crlf.sh", "DOS line breaks"),
    ("empty.sh", "Batch script is empty!"),
    ("blank.sh", "Batch script contains only whitespace!"),
])
@pytest.mark.parametrize("how", ["file", "stdin"])
def test_sbatch_bad_scripts(cluster, files, before, test_user, name, words, how):
    if how == "file":
        r = cluster.run(["sbatch", files[name]], user=test_user, cwd=files["dir"])
    else:
        with open(files[name], "rb") as fh:
            r = cluster.run(["sbatch"], user=test_user, cwd=files["dir"], input=fh.read())
        r.out, r.err = r.out.decode(errors="replace"), r.err.decode(errors="replace")
    assert "Traceback" not in r.err, r.err[-3000:]
    assert r.rc == 1 and r.out == "", r
    assert r.err.startswith("sbatch: error: ") and words in r.err, r
    daemons_alive(cluster, before)


def test_sbatch_script_with_undecodable_bytes_or_env(cluster, files, before, test_user):
    """Bytes that are not UTF-8 in an option or the environment never break the request:
    the job is submitted. A script that is not text gets a clear refusal or is accepted."""
    jids = []
    r = cluster.run(["sbatch", "--parsable", "-H", files["binary.sh"]], user=test_user,
                    cwd=files["dir"])
    assert "Traceback" not in r.err, r
    if r.rc == 0:
        jids.append(r.out.strip())
    else:  # refusing a script that is not text is fine too, with one clear line
        assert (r.rc, r.out) == (1, "") and r.err.startswith("sbatch: error: "), r
        assert r.err.count("\n") == 1, r
    r = cluster.run(["sbatch", "--parsable", "-H", "--wrap", "true"], user=test_user,
                    cwd=files["dir"], env={"WEIRD": "caf\udce9"})
    check(r, 0, "")
    jids.append(r.out.strip())
    r = cluster.run(["sbatch", "--parsable", "-H", "-J", "na\udcefme", "--wrap", "true"],
                    user=test_user, cwd=files["dir"])
    check(r, 0, "")
    jids.append(r.out.strip())
    assert cluster.run(["scancel", *jids]).rc == 0


def test_hostile_client_environment(cluster, files, before, test_user):
    d = files["dir"]
    r = cluster.run(["squeue", "-h", "-j", str(before["held"]), "-o", "%i"], user=test_user,
                    env={"MUSTER_TIMEOUT": "abc"})
    check(r, 0, "", f"{before['held']}\n")
    r = cluster.run(["sbatch", "-p", "nosuch", "--wrap", "true"], user=test_user, cwd=d,
                    env={"SLURM_EXIT_ERROR": "7"})
    check(r, 7)
    r = cluster.run(["sbatch", "-p", "nosuch", "--wrap", "true"], user=test_user, cwd=d,
                    env={"SLURM_EXIT_ERROR": "abc"})
    check(r, 1, "sbatch: error: invalid partition specified: nosuch\n" + SLURM_1
          + "Invalid partition name specified\n")
    r = cluster.run(["squeue"], user=test_user, env={"MUSTER_CONF": "/nonexistent/slurm.conf"})
    assert "Traceback" not in r.err and r.rc != 0 and r.err.startswith("squeue: error: "), r


# ---- the other commands, as in the reference transcript ----------------------------------

SQUEUE_HDR = ("             JOBID PARTITION     NAME     USER ST       TIME  NODES "
              "NODELIST(REASON)\n")
SINFO_HDR = "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n"
SACCT_HDR = ("JobID           JobName  Partition    Account  AllocCPUS      State ExitCode \n"
             "------------ ---------- ---------- ---------- ---------- ---------- -------- \n")

OTHERS = [
    (["squeue", "--bogus-option"], 1,
     "squeue: unrecognized option '--bogus-option'\nTry \"squeue --help\" for more information\n",
     ""),
    (["squeue", "-j", "999999"], 1, "slurm_load_jobs error: Invalid job id specified\n", ""),
    (["squeue", "-j", "abc"], 1, "squeue: error: Invalid job id: abc\n", ""),
    (["squeue", "-u", "nosuchuser"], 0, "squeue: error: Invalid user: nosuchuser\n", SQUEUE_HDR),
    (["squeue", "-p", "nosuch"], 0, "", SQUEUE_HDR),
    (["sinfo", "--bogus-option"], 1,
     "sinfo: unrecognized option '--bogus-option'\nTry \"sinfo --help\" for more information\n",
     ""),
    (["sinfo", "-p", "nosuch"], 0, "", SINFO_HDR),
    (["sinfo", "-n", "nosuch"], 0, "",
     SINFO_HDR + "gpu*         up   infinite      0    n/a \n"
     "debug        up    1:00:00      0    n/a \n"),
    (["scancel"], 1, "scancel: error: No job identification provided\n", ""),
    (["scancel", "abc"], 1, "scancel: error: Invalid job id abc\n", ""),
    (["scancel", "999999"], 0, "", ""),
    (["scontrol", "show", "job", "999999"], 1, "slurm_load_jobs error: Invalid job id specified\n",
     ""),
    (["scontrol", "show", "job", "abc"], 1, "scontrol_print_job error: Invalid job id specified\n",
     ""),
    (["scontrol", "show", "node", "nosuch"], 1, "", "Node nosuch not found\n"),
    (["scontrol", "show", "partition", "nosuch"], 1, "", "Partition nosuch not found\n"),
    (["scontrol", "bogus"], 1, "invalid keyword: bogus\n", ""),
    (["scontrol", "update", "nodename=node1", "state=drain", "reason=x"], 1,
     "slurm_update error: Invalid user id\n", ""),
    (["sacct", "--bogus-option"], 1, "sacct: unrecognized option '--bogus-option'\n", ""),
    (["sacct", "-j", "999999"], 0, "", SACCT_HDR),
    (["sacct", "-j", "abc"], 1, "sacct: fatal: Bad job/step specified: abc\n", ""),
    (["sacct", "--format=bogus"], 1, "sacct: error: Invalid field requested: \"bogus\"\n", ""),
]


@pytest.mark.parametrize("argv,rc,err,out", OTHERS, ids=[" ".join(a) for a, *_ in OTHERS])
def test_other_commands_like_slurm(cluster, files, before, test_user, argv, rc, err, out):
    r = cluster.run(argv, user=test_user, cwd=files["dir"])
    check(r, rc, err, out)
    daemons_alive(cluster, before)


def test_squeue_bogus_format_like_slurm(cluster, before, test_user):
    r = cluster.run(["squeue", "-o", "%bogus"], user=test_user)
    check(r, 0, "")
    lines = r.out.splitlines()
    assert lines[0] == "TRES_PER_NODEogus"
    assert lines[1:] and all(line.endswith("ogus") for line in lines[1:])


@pytest.mark.parametrize("argv", [
    ["squeue", "-j", "1,,abc"], ["squeue", "-t", "NOSUCHSTATE"], ["squeue", "-o", "%"],
    ["squeue", "-O", "nosuchfield"], ["squeue", "-S", "???"], ["squeue", "-j", "9" * 40],
    ["sinfo", "-o", "%"], ["sinfo", "-t", "nosuchstate"], ["sinfo", "-n", "node[1-"],
    ["scancel", "9" * 40], ["scancel", "1_abc"], ["scancel", "-u", "nosuchuser"],
    ["scancel", "--signal=NOSUCH", "1"],
    ["scontrol", "show", "job", "9" * 40], ["scontrol", "show", "hostnames", "node[3-1]"],
    ["scontrol", "show", "hostlist", "node[1-"], ["scontrol", "update", "JobId=abc", "TimeLimit=5"],
    ["scontrol", "update", "JobId=999999", "TimeLimit=5"], ["scontrol", "hold", "abc"],
    ["scontrol", "release", "999999"], ["scontrol", "requeue", "abc"], ["scontrol"],
    ["sacct", "-S", "garbage"], ["sacct", "-j", "9" * 40], ["sacct", "-s", "nosuchstate"],
], ids=lambda a: " ".join(a)[:40])
def test_other_commands_never_traceback(cluster, before, test_user, argv):
    r = cluster.run(argv, user=test_user, input="")
    assert "Traceback" not in r.err and "Traceback" not in r.out, r
    assert r.rc in (0, 1), r
    daemons_alive(cluster, before)


# ---- afterwards: nothing harmed ----------------------------------------------------------

def test_zz_earlier_jobs_and_daemons_intact(cluster, before):
    for jid, snap in before["show"].items():
        r = cluster.run(["scontrol", "show", "job", str(jid)])
        assert r.rc == 0, r
        assert norm_show(r.out) == snap, (jid, r.out)
    acct = cluster.run(["sacct", "-j", f"{before['held']},{before['running']},{before['done']}",
                        "-X", "-P", "-n", "-o",
                        "JobID,JobName,State,ExitCode,NodeList,AllocTRES"]).out
    assert acct == before["acct"]
    assert cluster.state_of(before["running"]) == "RUNNING"
    assert cluster.state_of(before["held"]) == "PENDING"
    assert cluster.state_of(before["done"]) == "COMPLETED"
    assert cluster.pids() == before["pids"]
    status = json.loads(cluster.run(["muster", "status", "--json"]).out)
    assert status["controller_responding"] is True
    assert all(d["running"] for d in status["daemons"])
    assert [d["pid"] for d in status["daemons"]] == [d["pid"] for d in before["status"]["daemons"]]
    assert [n["state"] for n in status["nodes"]] == [n["state"] for n in before["status"]["nodes"]]
    r = cluster.run(["scontrol", "ping"])
    assert r.rc == 0 and "UP" in r.out
    # and it still works: a good job runs
    jid = cluster.sbatch("--wrap", "true", cwd=cluster.workdir)
    assert cluster.wait_done(jid) == "COMPLETED"
