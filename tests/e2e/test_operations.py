"""Operations (issue 16): scontrol setdebug/setdebugflags, sdiag, log rotation on SIGUSR2 and
SIGHUP — against a real private cluster (musterctld, musterd, musterrestd as processes).

Layout facts come from Slurm 22.05.8 (tests/data/slurm-ref/sdiag.txt: the installed sdiag
and scontrol run against the reference cluster)."""

from __future__ import annotations

import json
import os
import re
import signal
import sys

import pytest

from cluster import TEST_USER, private_cluster, user_exists, wait_for

REF = os.path.join(os.path.dirname(__file__), "..", "data", "slurm-ref", "sdiag.txt")
RPC_TYPE = re.compile(r"^\t(\S.{39})\(([ \d]{5})\) count:(\d+) *ave_time:(\d+) *total_time:(\d+)$")
RPC_USER = re.compile(r"^\t(\S.{15})\(([ \d]{8})\) count:(\d+) *ave_time:(\d+) *total_time:(\d+)$")


@pytest.fixture(scope="module")
def c():
    with private_cluster("muster-ops-", nodes=2, gpus=1, cpus=2, partitions="gpu") as cl:
        yield cl


def ctld_log(c) -> str:
    return os.path.join(c.state_dir, "log", "musterctld.log")


def read(path: str) -> str:
    try:
        with open(path, errors="replace") as fh:
            return fh.read()
    except FileNotFoundError:
        return ""


def sdiag(c, *args: str, user: str | None = None) -> str:
    r = c.run(["sdiag", *args], user=user)
    assert r.rc == 0 and r.err == "", r
    return r.out


def value(text: str, label: str) -> int:
    m = re.search(rf"^\t?{re.escape(label)}:\s+(\d+)$", text, re.M)
    assert m, f"{label!r} not in\n{text}"
    return int(m.group(1))


def rpc_types(text: str) -> dict[str, tuple[int, int, int, int]]:
    """Message type -> (id, count, ave_time, total_time) of the by-type table."""
    part = text.split("Remote Procedure Call statistics by message type\n")[1].split("\n\n")[0]
    out = {}
    for line in part.splitlines():
        m = RPC_TYPE.match(line)
        assert m, f"not an sdiag RPC line: {line!r}"
        out[m.group(1).strip()] = tuple(int(m.group(i)) for i in range(2, 6))
    return out


def rpc_users(text: str) -> dict[str, tuple[int, int, int, int]]:
    part = text.split("Remote Procedure Call statistics by user\n")[1].split("\n\n")[0]
    out = {}
    for line in part.splitlines():
        m = RPC_USER.match(line)
        assert m, f"not an sdiag user line: {line!r}"
        out[m.group(1).strip()] = tuple(int(m.group(i)) for i in range(2, 6))
    return out


def labels(text: str) -> list[str]:
    """The layout of an sdiag text: its titles and labels, values and RPC rows left out."""
    out = []
    for line in text.splitlines():
        if not line.strip() or RPC_TYPE.match(line) or RPC_USER.match(line):
            continue
        if line.startswith(("sdiag output at ", "Data since ")):
            out.append(line[:10])
        else:
            out.append(re.sub(r":\s.*$", ":", line))
    return out


def show_config(c, key: str) -> str:
    out = c.ok("scontrol", "show", "config")
    m = re.search(rf"^{key}\s+= (.*)$", out, re.M)
    assert m, out
    return m.group(1)


# ---- sdiag ----------------------------------------------------------------------------------

def test_sdiag_has_slurms_layout(c):
    with open(REF) as fh:
        ref = fh.read().split("\n# sdiag --help")[0].split("\n", 1)[1]
    ours = sdiag(c)
    # every title and label of Slurm's output, in Slurm's order; "Cycles per minute" is
    # printed only once there is more than a minute of data (ours is younger); those Slurm
    # prints only after a backfill cycle may be in ours as well
    it = iter(labels(ours))
    missing = [lab for lab in labels(ref) if lab != "\tCycles per minute:" and lab not in it]
    assert missing == [], (missing, ours)
    assert ours.startswith("*" * 55 + "\nsdiag output at ")
    assert rpc_types(ours) and rpc_users(ours)  # every row parses with Slurm's widths
    assert ours.rstrip().endswith("Pending RPC statistics\n\tNo pending RPCs")


def test_sdiag_counts_rpcs_by_type_and_user_and_jobs(c):
    before = sdiag(c)
    b_types, b_users = rpc_types(before), rpc_users(before)
    ids = [c.sbatch("-o", "/dev/null", "--wrap", "true") for _ in range(2)]
    for jid in ids:
        assert c.wait_done(jid) == "COMPLETED"
    if user_exists(TEST_USER):
        c.ok("squeue", user=TEST_USER)
        c.ok("squeue", user=TEST_USER)
    after = sdiag(c)
    a_types, a_users = rpc_types(after), rpc_users(after)
    sub = "REQUEST_SUBMIT_BATCH_JOB"
    assert a_types[sub][1] == b_types.get(sub, (4003, 0))[1] + 2 and a_types[sub][0] == 4003
    assert a_types[sub][3] >= a_types[sub][2] > 0  # total_time >= ave_time > 0 (microseconds)
    assert value(after, "Jobs submitted") == value(before, "Jobs submitted") + 2
    assert value(after, "Jobs started") >= value(before, "Jobs started") + 2
    assert value(after, "Jobs completed") == value(before, "Jobs completed") + 2
    assert a_users["root"][1] > b_users["root"][1] and a_users["root"][0] == 0
    if user_exists(TEST_USER):
        uid = __import__("pwd").getpwnam(TEST_USER).pw_uid
        assert a_users[TEST_USER][:2] == (uid, b_users.get(TEST_USER, (uid, 0))[1] + 2)
    # agents' reports are counted too (a batch job's end: REQUEST_COMPLETE_BATCH_SCRIPT)
    assert a_types["REQUEST_COMPLETE_BATCH_SCRIPT"][1] >= 2
    assert value(after, "Total cycles") > 0 and value(after, "Max cycle") >= 0
    # the raw diag adds each operation's recent handling times (controller.looplag)
    r = c.run([sys.executable, "-c", "import json; from muster.cli.client import call; "
               "print(json.dumps(call({'op': 'diag'})['request_times']))"])
    assert r.rc == 0, r.err
    times = json.loads(r.out)
    assert times["submit"]["samples"] >= 2, times
    assert 0 < times["submit"]["p50_ms"] <= times["submit"]["max_ms"] <= times["submit"]["worst_ms"]


def test_sdiag_sort_orders(c):
    text = sdiag(c, "-i")
    ids = [v[0] for v in rpc_types(text).values()]
    assert ids == sorted(ids)
    totals = [v[3] for v in rpc_types(sdiag(c, "-t")).values()]
    assert totals == sorted(totals, reverse=True)
    counts = [v[1] for v in rpc_types(sdiag(c)).values()]
    assert counts == sorted(counts, reverse=True)


@pytest.mark.skipif(not user_exists(TEST_USER), reason="needs the unprivileged test user")
def test_sdiag_reset_is_for_root_only(c):
    c.sbatch("-o", "/dev/null", "--wrap", "true")
    r = c.run(["sdiag", "--reset"], user=TEST_USER)
    assert (r.rc, r.out, r.err) == (255, "", "slurm_reset_statistics: Access/permission denied\n")
    assert value(sdiag(c), "Jobs submitted") > 0  # nothing was reset
    r = c.run(["sdiag", "-r"])
    assert (r.rc, r.out, r.err) == (0, "Reset scheduling statistics\n", "")
    text = sdiag(c)
    for label in ("Jobs submitted", "Jobs started", "Jobs completed", "Jobs canceled",
                  "Jobs failed"):
        assert value(text, label) == 0, text
    # only what came after the reset: the reset itself (REQUEST_STATS_INFO) and nothing else
    assert set(rpc_types(text)) <= {"REQUEST_STATS_INFO", "MUSTER_HEARTBEAT"}, text
    types = rpc_types(text)
    assert types["REQUEST_STATS_INFO"][1] == 1
    # every RPC since the reset came from root (this sdiag, and any agent heartbeat that
    # arrived in between): the unprivileged user's refused reset came before it
    users = rpc_users(text)
    assert set(users) == {"root"}, text
    assert users["root"][1] == sum(v[1] for v in types.values())


# ---- setdebug / setdebugflags -----------------------------------------------------------------

def test_setdebug_changes_what_the_log_holds(c):
    log = ctld_log(c)
    assert show_config(c, "SlurmctldDebug") == "info"
    c.ok("squeue")
    size = len(read(log))
    c.ok("squeue")  # at info: no record per RPC
    assert "RPC jobs from uid 0" not in read(log)[size:]
    assert c.run(["scontrol", "setdebug", "debug2"]).rc == 0
    try:
        assert show_config(c, "SlurmctldDebug") == "debug2"
        size = len(read(log))
        c.ok("squeue")
        new = read(log)[size:]
        assert re.search(r" DEBUG2 RPC jobs from uid 0: ok in \d+ us$", new, re.M), new
    finally:
        assert c.run(["scontrol", "setdebug", "3"]).rc == 0  # by number: info
    assert show_config(c, "SlurmctldDebug") == "info"
    size = len(read(log))
    c.ok("squeue")
    assert "RPC jobs" not in read(log)[size:]


def test_setdebugflags_turns_a_subsystem_on_and_off(c):
    log = ctld_log(c)
    assert show_config(c, "DebugFlags") == "(null)"
    assert c.run(["scontrol", "setdebugflags", "+TraceJobs,protocol"]).rc == 0
    try:
        assert show_config(c, "DebugFlags") == "Protocol,TraceJobs"
        size = len(read(log))
        jid = c.sbatch("-o", "/dev/null", "--wrap", "true")
        assert c.wait_done(jid) == "COMPLETED"
        new = read(log)[size:]
        assert f"TraceJobs: job {jid} PENDING -> RUNNING" in new, new
        assert re.search(rf"TraceJobs: job {jid} RUNNING -> COMPLETED", new), new
        assert "RPC submit from uid 0: ok" in new  # Protocol, at the info level
        assert c.run(["scontrol", "setdebugflags", "-Protocol"]).rc == 0
        assert show_config(c, "DebugFlags") == "TraceJobs"
        size = len(read(log))
        c.ok("squeue")
        assert "RPC jobs" not in read(log)[size:]
    finally:
        assert c.run(["scontrol", "setdebugflags", "-TraceJobs"]).rc == 0
    assert show_config(c, "DebugFlags") == "(null)"
    size = len(read(log))
    jid = c.sbatch("-o", "/dev/null", "--wrap", "true")
    assert c.wait_done(jid) == "COMPLETED"
    assert "TraceJobs" not in read(log)[size:]


def test_rpc_flags_of_a_subsystem(c):
    log = ctld_log(c)
    size = len(read(log))
    c.ok("scontrol", "show", "reservation")
    assert "reservations from uid 0" not in read(log)[size:]
    assert c.run(["scontrol", "setdebugflags", "+Reservation"]).rc == 0
    try:
        size = len(read(log))
        c.ok("scontrol", "show", "reservation")
        c.ok("squeue")
        new = read(log)[size:]
        assert re.search(r" DEBUG reservations from uid 0: ok$", new, re.M), new
        assert "RPC jobs" not in new and "jobs from uid" not in new  # only its subsystem
    finally:
        assert c.run(["scontrol", "setdebugflags", "-Reservation"]).rc == 0


@pytest.mark.parametrize("args,err", [
    (["setdebug", "bogus"], ["invalid debug level: bogus"]),
    (["setdebug", "10"], ["invalid debug level: 10"]),
    (["setdebug", "debug6"], ["invalid debug level: debug6"]),
    (["setdebug"], ["too few arguments for keyword:setdebug"]),
    (["setdebug", "debug", "extra"], ["too many arguments for keyword:setdebug"]),
    (["setdebugflags", "+Bogus"], ["scontrol: error: Invalid DebugFlag: Bogus",
                                   "invalid debug flag: +Bogus"]),
    (["setdebugflags", "+Backfill,-Steps"], ["scontrol: error: Invalid DebugFlag: -Steps",
                                             "invalid debug flag: +Backfill,-Steps"]),
    (["setdebugflags", "Backfill"], ["invalid debug flag: Backfill",
                                     "Usage: setdebugflags [+|-]NAME"]),
    (["setdebugflags"], ["too few arguments for keyword:setdebugflags"]),
])
def test_bad_levels_and_flags(c, args, err):
    r = c.run(["scontrol", *args])
    assert (r.rc, r.out, r.err.splitlines()) == (1, "", err)
    assert show_config(c, "SlurmctldDebug") == "info"


def test_the_controller_checks_levels_and_flags_itself(c):
    import wire
    r = wire.call(c, {"op": "setdebug", "level": 42})
    assert r["ok"] is False and r["code"] == "invalid_request"
    r = wire.call(c, {"op": "setdebugflags", "add": ["NoSuchFlag"]})
    assert r["ok"] is False and "Invalid DebugFlag: NoSuchFlag" in r["error"]
    assert show_config(c, "DebugFlags") == "(null)"


@pytest.mark.skipif(not user_exists(TEST_USER), reason="needs the unprivileged test user")
def test_plain_users_may_not_change_the_log(c):
    for args, what in ((["setdebug", "debug5"], "slurm_set_debug_level"),
                       (["setdebugflags", "+Protocol"], "slurm_set_debug_flags")):
        r = c.run(["scontrol", *args], user=TEST_USER)
        assert (r.rc, r.out, r.err) == (1, "", f"{what} error: Permission denied\n")
    assert show_config(c, "SlurmctldDebug") == "info"
    assert show_config(c, "DebugFlags") == "(null)"


# ---- log rotation ---------------------------------------------------------------------------

def _rotate(path: str, pid: int, sig: int) -> str:
    """logrotate's way: rename the file, then signal the daemon; the renamed path."""
    old = path + ".1"
    os.rename(path, old)
    os.kill(pid, sig)
    name = signal.Signals(sig).name
    wait_for(lambda: "log file reopened" in read(path), what=f"{path} reopened after {name}")
    return old


@pytest.mark.parametrize("sig", [signal.SIGUSR2, signal.SIGHUP])
def test_controller_reopens_its_log(c, sig):
    path = ctld_log(c)
    c.ok("scontrol", "setdebug", "verbose")  # "set debug level to 'verbose'": before
    first = read(path)
    old = _rotate(path, c.pids()["controller"], sig)
    c.ok("scontrol", "setdebug", "info")  # after
    before, after = read(old), read(path)
    assert before.startswith(first) and first.endswith("set debug level to 'verbose' (uid 0)\n")
    assert "set debug level to 'verbose'" not in after  # nothing written twice
    assert after.count("set debug level to 'info'") == 1  # nor lost, nor in the old file
    assert "set debug level to 'info'" not in before[len(first):]
    if sig == signal.SIGHUP:  # slurmctld's SIGHUP: reopen, and reconfigure
        assert "SIGHUP: log file reopened; reconfiguring" in after
        assert wait_for(lambda: "reconfigured from" in read(path), what="reconfigure")
    else:
        assert "SIGUSR2: log file reopened" in after and "reconfigur" not in after
    assert c.run(["scontrol", "ping"]).rc == 0
    os.unlink(old)


@pytest.mark.parametrize("sig", [signal.SIGUSR2, signal.SIGHUP])
def test_agent_and_rest_daemon_reopen_their_logs(c, sig):
    pids = c.pids()
    logdir = os.path.join(c.state_dir, "log")
    daemons = [(os.path.join(logdir, f"musterd-{node}.log"), pid)
               for node, pid in sorted(pids["agents"].items())]
    import importlib.util
    if importlib.util.find_spec("uvicorn") and not os.environ.get("MUSTER_NO_API"):
        assert pids.get("restd"), pids  # muster up starts it when it can
    if pids.get("restd"):
        daemons.append((os.path.join(logdir, "musterrestd.log"), pids["restd"]))
    for path, pid in daemons:
        first = read(path)
        assert first, path
        old = _rotate(path, pid, sig)
        assert read(old).startswith(first)  # the renamed file kept everything
        after = read(path)
        assert first not in after and f"{signal.Signals(sig).name}: log file reopened" in after
        os.unlink(old)
    # the agents still serve: a job runs on every node
    jid = c.sbatch("-N", "2", "-o", "/dev/null", "--wrap", "true")
    assert c.wait_done(jid) == "COMPLETED"
