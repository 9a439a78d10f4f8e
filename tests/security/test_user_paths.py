"""Root never opens, creates, follows or reads a path the job's user controls.

Real daemons; every job is submitted by the unprivileged TEST_USER and behaves like an attacker
(docs/design.md, "Root and user paths"):

* a job swaps its output or error file for a symlink to a root-owned file, then is cancelled
  or reaches its time limit: the root-owned file must stay byte-for-byte the same and Slurm's
  ``*** JOB … CANCELLED ***`` line must land in the file the job was started with;
* the working directory is flipped between a directory the user may enter and one it may not
  while jobs and steps start: none may run in the forbidden one, and each that cannot enter its
  directory gets Slurm's fallback message;
* the files are opened as the user but in a root process: ``/proc/self/fd/N`` must reach none
  of its descriptors, a terminal must not become its controlling tty, a FIFO must not stall it;
* the API's output tail (op ``job_output``) of a job whose output path leads into root-only
  places returns nothing from there.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import termios
import threading

import pytest

from cluster import TEST_USER, user_exists, wait_for

SECRET = b"root-owned: never to be written or read through a job\n"
FALLBACK = re.compile(r"slurmstepd: error: couldn't chdir to `(?P<dir>[^']*)': (?P<why>[^:]+): "
                      r"going to /tmp instead")
CALL = ("import json, sys\nfrom muster.cli import client\n"
        "print(json.dumps(client.call(json.loads(sys.argv[1]))))")


class Arena:
    """Directories of one module: ``user`` (owned by TEST_USER, 0755 and not sticky, so the
    kernel's protected_symlinks rule cannot hide a bug), ``rootonly`` (root, 0700) holding
    ``victim`` (root, 0644, SECRET), and ``forbidden`` (root, 0700), an empty directory."""

    def __init__(self, base: str):
        pw = pwd.getpwnam(TEST_USER)
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        self.user = os.path.join(base, "user")
        os.mkdir(self.user, 0o755)
        os.chown(self.user, self.uid, self.gid)
        self.rootonly = os.path.join(base, "rootonly")
        os.mkdir(self.rootonly, 0o700)
        self.victim = os.path.join(self.rootonly, "victim")
        with open(self.victim, "wb") as fh:
            fh.write(SECRET)
        os.chmod(self.victim, 0o644)
        self.victim_stat = os.stat(self.victim)
        self.forbidden = os.path.join(base, "forbidden")
        os.mkdir(self.forbidden, 0o700)

    def path(self, name: str) -> str:
        return os.path.join(self.user, name)

    def assert_victim_intact(self) -> None:
        with open(self.victim, "rb") as fh:
            assert fh.read() == SECRET, "root wrote into a file through the job's symlink"
        st = os.stat(self.victim)
        assert (st.st_size, st.st_mtime_ns, st.st_uid, stat.S_IMODE(st.st_mode)) == \
            (len(SECRET), self.victim_stat.st_mtime_ns, 0, 0o644)


def read(path: str) -> str:
    with open(path, errors="replace") as fh:
        return fh.read()


def running(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def supervisor_pid(cluster, jid: int) -> int:
    spool = os.path.join(cluster.state_dir, "spool")
    for node in os.listdir(spool):
        try:
            return int(read(os.path.join(spool, node, f"job{jid}.0", "super.pid")))
        except (OSError, ValueError):  # not on this node, or being written
            continue
    return 0


def swap_script(arena: Arena, target: str, ready: str) -> str:
    """A batch script that replaces ``target`` (its own output or error file) by a symlink to
    the root-owned victim, says so through ``ready``, and waits to be killed."""
    return ("#!/bin/sh\necho job-out; echo job-err >&2\n"
            f"mv '{target}' '{target}.orig' && ln -s '{arena.victim}' '{target}' && "
            f"touch '{ready}'\nexec sleep 300\n")


def submit_swap(cluster, arena: Arena, tag: str, stream: str, *extra: str) -> dict:
    """Submit a swapping job; ``stream`` ("output"/"error") is the file it swaps."""
    out, err = arena.path(f"{tag}-{stream}.out"), arena.path(f"{tag}-{stream}.err")
    target = out if stream == "output" else err
    ready = arena.path(f"{tag}-{stream}.ready")
    args = ["-o", out] + (["-e", err] if stream == "error" else [])
    jid = cluster.sbatch(*args, *extra, user=TEST_USER, cwd=arena.user,
                         input=swap_script(arena, target, ready))
    return {"jid": jid, "out": out, "err": err, "target": target, "ready": ready}


def wait_swapped(job: dict) -> None:
    wait_for(lambda: os.path.exists(job["ready"]), 30, what="the job to swap its file")


def wait_supervisor_gone(cluster, jid: int) -> None:
    """For a job that has started: its record may say CANCELLED/TIMEOUT before its supervisor
    has written Slurm's line and exited; wait for that (its spool may be gone already)."""
    wait_for(lambda: not running(supervisor_pid(cluster, jid)), 30, what="the supervisor to finish")


def assert_banner_in_original(arena: Arena, job: dict, why: str) -> None:
    """The root-owned file is untouched, the job's path is still the job's symlink, and Slurm's
    line went through the descriptor opened at start: into the renamed original file."""
    arena.assert_victim_intact()
    assert os.readlink(job["target"]) == arena.victim
    original = read(job["target"] + ".orig")
    banner = f"*** JOB {job['jid']} ON "
    assert banner in original and "CANCELLED AT " in original, original
    assert (" DUE TO TIME LIMIT ***" in original) == (why == "timeout"), original
    first = "job-out" if job["target"] == job["out"] else "job-err"
    assert original.startswith(first + "\n"), original
    if job["target"] == job["err"]:  # the output file kept its own content only
        assert read(job["out"]) == "job-out\n"


@pytest.fixture(scope="module")
def arena(cluster):
    if os.getuid() != 0 or not user_exists(TEST_USER):
        pytest.fail(f"must run as root, with the test user {TEST_USER} (useradd -m {TEST_USER})")
    base = tempfile.mkdtemp(prefix="userpaths-", dir=cluster.workdir)
    os.chmod(base, 0o755)
    yield Arena(base)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module", autouse=True)
def timeout_jobs(cluster, arena):
    """The time-limit cases need a 1-minute limit (the smallest Slurm's units allow, and there is
    no honest way to shorten it), so they are submitted before this module's first test and
    checked by its last one, while the other tests run."""
    jobs = {s: submit_swap(cluster, arena, "timeout", s, "-t", "1") for s in ("output", "error")}
    yield jobs
    for job in jobs.values():
        cluster.run(["scancel", str(job["jid"])])


# ---- 1. Slurm's CANCELLED line never follows the job's symlink -----------------------------

@pytest.mark.parametrize("stream", ["output", "error"])
def test_cancel_banner_goes_to_the_original_file(cluster, arena, stream):
    job = submit_swap(cluster, arena, "cancel", stream)
    wait_swapped(job)
    assert cluster.run(["scancel", str(job["jid"])]).rc == 0
    assert cluster.wait_done(job["jid"]) == "CANCELLED"
    wait_supervisor_gone(cluster, job["jid"])
    assert_banner_in_original(arena, job, "cancel")


# ---- 2. the working directory is entered as the user, never by root ------------------------

@contextlib.contextmanager
def flipping(link: str, allowed: str, forbidden: str):
    """Keep re-pointing the symlink ``link`` between ``allowed`` and ``forbidden`` (atomically,
    by rename) until the block ends: every start races with a flip."""
    stop = threading.Event()
    flips = [0]

    def loop():
        tmp = link + ".next"
        while not stop.is_set():
            os.symlink(forbidden if flips[0] % 2 else allowed, tmp)
            os.replace(tmp, link)
            flips[0] += 1
            stop.wait(0.0005)  # pacing only: a flip about every millisecond

    os.symlink(allowed, link)
    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield flips
    finally:
        stop.set()
        t.join()


def check_race(runs: list[tuple[str, str]], link: str, allowed: str, forbidden: str) -> dict:
    """``runs``: (pwd -P printed by the job, its stderr). Nothing ran in ``forbidden``; each run
    in /tmp got Slurm's fallback message for ``link``. Returns how many ran where."""
    seen = {"allowed": 0, "fallback": 0}
    for where, err in runs:
        assert where != forbidden and not where.startswith(forbidden + "/"), (where, err)
        if where == allowed:
            seen["allowed"] += 1
            assert FALLBACK.search(err) is None, err
            continue
        assert where == "/tmp", (where, err)
        m = FALLBACK.search(err)
        assert m and m["dir"] == link and m["why"] in ("Permission denied",
                                                       "No such file or directory"), err
        seen["fallback"] += 1
    return seen


def test_workdir_race_batch(cluster, arena):
    link, allowed = arena.path("wd-batch"), arena.path("wd-batch-real")
    os.mkdir(allowed)
    os.chown(allowed, arena.uid, arena.gid)
    with flipping(link, allowed, arena.forbidden) as flips:
        jids = [cluster.sbatch("-D", link, "-o", arena.path("race-%j.out"), "--wrap", "pwd -P",
                               user=TEST_USER, cwd=arena.user) for _ in range(40)]
        for jid in jids:
            cluster.wait_done(jid, timeout=60)
    runs = []
    for jid in jids:
        text = read(arena.path(f"race-{jid}.out"))
        runs.append((text.splitlines()[-1] if text else "", text))
    seen = check_race(runs, link, allowed, arena.forbidden)
    assert flips[0] > 40
    assert seen["allowed"] and seen["fallback"], f"the race was not exercised: {seen}"


def start_as_user(cluster, argv: list[str]) -> subprocess.Popen:
    pw = pwd.getpwnam(TEST_USER)
    env = dict(cluster.env, HOME=pw.pw_dir, USER=TEST_USER, LOGNAME=TEST_USER)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=pw.pw_dir if os.path.isdir(pw.pw_dir) else "/",
                            user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])


def test_workdir_race_srun(cluster, arena):
    link, allowed = arena.path("wd-step"), arena.path("wd-step-real")
    os.mkdir(allowed)
    os.chown(allowed, arena.uid, arena.gid)
    with flipping(link, allowed, arena.forbidden):
        procs = [start_as_user(cluster, ["srun", "-l", "-n2", "-D", link, "pwd", "-P"])
                 for _ in range(20)]
        results = [p.communicate(timeout=120) for p in procs]
    runs = []
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, (out, err)
        for task in (0, 1):
            where = [line[len(f"{task}: "):] for line in out.splitlines()
                     if line.startswith(f"{task}: ")]
            mine = "\n".join(line for line in err.splitlines() if line.startswith(f"{task}: "))
            assert len(where) == 1, (out, err)
            runs.append((where[0], mine))
    seen = check_race(runs, link, allowed, arena.forbidden)
    assert seen["allowed"] and seen["fallback"], f"the race was not exercised: {seen}"


def test_missing_workdir_message_and_env(cluster, arena):
    """The plain case (a directory that does not exist) keeps Slurm's exact message, and a
    job that does enter its directory sees the submitter's PWD (a symlinked path) unchanged."""
    gone = arena.path("no-such-dir")
    jid = cluster.sbatch("-D", gone, "-o", arena.path("gone-%j.out"), "--wrap", "pwd -P",
                         user=TEST_USER, cwd=arena.user)
    assert cluster.wait_done(jid) == "COMPLETED"
    assert read(arena.path(f"gone-{jid}.out")) == (
        f"slurmstepd: error: couldn't chdir to `{gone}': No such file or directory: "
        "going to /tmp instead\n/tmp\n")
    r = cluster.run(["srun", "-D", gone, "pwd", "-P"], user=TEST_USER, cwd=arena.user)
    assert r.rc == 0 and r.out == "/tmp\n", r
    assert (f"slurmstepd: error: couldn't chdir to `{gone}': No such file or directory: "
            "going to /tmp instead") in r.err
    real = arena.path("pwd-real")
    os.mkdir(real)
    os.symlink(real, arena.path("pwd-link"))
    r = cluster.run(["sbatch", "-W", "-o", arena.path("pwd-%j.out"), "--wrap",
                     'echo "$PWD"; echo "$OLDPWD"; pwd -P'], user=TEST_USER,
                    cwd=arena.path("pwd-link"), env={"PWD": arena.path("pwd-link"),
                                                     "OLDPWD": "/old/place"})
    assert r.rc == 0, r
    jid = int(r.out.split()[-1])
    lines = read(arena.path(f"pwd-{jid}.out")).splitlines()
    assert lines == [arena.path("pwd-link"), "/old/place", real]


def test_proc_self_fd_reaches_no_root_descriptor(cluster, arena):
    """Files are opened in the (root) supervisor or step daemon with the user's effective ids;
    a magic link ``/proc/self/fd/N`` as ``--input`` must reach none of the agent's descriptors
    (its log files), which would bypass the log directory's permissions."""
    logs = os.path.join(cluster.state_dir, "log")
    secrets = set()
    for name in os.listdir(logs):
        if name.startswith("musterd"):
            secrets.update(line for line in read(os.path.join(logs, name)).splitlines() if line)
    assert secrets, "the agents have logged nothing to compare with"
    for n in range(1, 6):
        jid = cluster.sbatch("-i", f"/proc/self/fd/{n}", "-o", arena.path(f"procfd-{n}.out"),
                             "--wrap", "cat", user=TEST_USER, cwd=arena.user)
        cluster.wait_done(jid)
        got = read(arena.path(f"procfd-{n}.out")).splitlines()
        r = cluster.run(["srun", f"--input=/proc/self/fd/{n}", "cat"], user=TEST_USER,
                        cwd=arena.user)
        got += r.out.splitlines()
        assert not secrets & set(got), (n, got[:5])


def test_a_pooled_supervisors_own_descriptors_are_out_of_reach(cluster, arena):
    """A reused batch supervisor keeps two descriptors of root's across jobs: its channel to
    the zygote and the job's end pipe (muster.agent.supervisor.run_pooled). A job naming any
    descriptor of a supervisor as ``/proc/self/fd/N`` for its input or output gets none of
    root's: the open fails the user's permission check (root's pipes are mode 0600; a socket
    cannot be opened at all) — or, where N is by then the job's own file, that file. So no
    job can read or write the pipe whose end tells the agent a job is over, and a job running
    beside it is untouched."""
    other = cluster.sbatch("-o", "/dev/null", "--wrap", "sleep 30", user=TEST_USER,
                           cwd=arena.user)
    cluster.wait_state(other, "RUNNING")
    pid = wait_for(lambda: supervisor_pid(cluster, other), 20, what="the supervisor's pid")
    fds = [int(fd) for fd in os.listdir(f"/proc/{pid}/fd") if int(fd) > 2]
    assert any(os.readlink(f"/proc/{pid}/fd/{fd}").startswith(("pipe:", "socket:"))
               for fd in fds), "a supervisor holds root's pipes"
    roots = ("pipe:", "socket:", "anon_inode:")
    for n in fds:
        got = arena.path(f"pooled-fd-{n}.in")
        jid = cluster.sbatch("-i", f"/proc/self/fd/{n}", "-o", got, "--wrap",
                             "readlink /proc/self/fd/0", user=TEST_USER, cwd=arena.user)
        if cluster.wait_done(jid) == "COMPLETED":
            assert not read(got).startswith(roots), (n, read(got))
        got = arena.path(f"pooled-fd-{n}.err")
        jid = cluster.sbatch("-o", f"/proc/self/fd/{n}", "-e", got, "--wrap",
                             "readlink /proc/self/fd/1 >&2", user=TEST_USER, cwd=arena.user)
        if cluster.wait_done(jid) == "COMPLETED":
            assert not read(got).startswith(roots), (n, read(got))
    assert cluster.state_of(other) == "RUNNING"  # its end was not faked
    assert cluster.run(["scancel", str(other)]).rc == 0


def test_terminal_input_never_becomes_the_supervisors_tty(cluster, arena):
    """The supervisor is a session leader: had it opened a terminal (for reading: the kernel
    gives a controlling tty only to an open with read access) without O_NOCTTY, that terminal
    would be its controlling tty, and ^C typed on it would kill the root supervisor, leaving
    the job without a time limit."""
    master, slave = os.openpty()
    try:
        tty = os.ttyname(slave)
        os.chown(tty, arena.uid, -1)
        out = arena.path("tty.out")
        jid = cluster.sbatch("-i", tty, "-o", out, "--wrap", "echo started; exec sleep 300",
                             user=TEST_USER, cwd=arena.user)
        pid = wait_for(lambda: supervisor_pid(cluster, jid), 30, what="the supervisor")
        wait_for(lambda: os.path.exists(out) and read(out), 30, what="the job's output")
        with open(f"/proc/{pid}/stat") as fh:
            tty_nr = int(fh.read().rsplit(")", 1)[1].split()[4])
        assert tty_nr == 0, "the supervisor took the job's terminal as its controlling tty"
        os.write(master, b"\x03")  # ^C: SIGINT to the foreground process group of the tty
        assert cluster.run(["scancel", str(jid)]).rc == 0
        assert cluster.wait_done(jid) == "CANCELLED"
        wait_supervisor_gone(cluster, jid)
        assert f"*** JOB {jid} ON " in read(out)
    finally:
        os.close(master)
        os.close(slave)


def test_fifos_never_stall_the_supervisor(cluster, arena):
    """A FIFO as a job's file must not hang the (root) supervisor: not at the open (input with
    no writer, output with no reader), not when Slurm's line is written into a full pipe."""
    fifo_in, fifo_out, fifo_err = (arena.path(f"fifo.{n}") for n in ("in", "out", "err"))
    for path in (fifo_in, fifo_out, fifo_err):
        os.mkfifo(path)
        os.chown(path, arena.uid, arena.gid)
    jid = cluster.sbatch("-i", fifo_in, "-o", arena.path("fifo-in.out"), "--wrap",
                         "cat; echo read-to-the-end", user=TEST_USER, cwd=arena.user)
    assert cluster.wait_done(jid) == "COMPLETED"
    assert read(arena.path("fifo-in.out")) == "read-to-the-end\n"
    jid = cluster.sbatch("-o", fifo_out, "--wrap", "true", user=TEST_USER, cwd=arena.user)
    assert cluster.wait_done(jid) == "FAILED"  # nobody reads: the start fails, nothing waits
    reader = os.open(fifo_err, os.O_RDONLY | os.O_NONBLOCK)  # a reader that never reads
    try:
        out = arena.path("fifo-err.out")
        jid = cluster.sbatch("-o", out, "-e", fifo_err, "--wrap",
                             "echo started; head -c 200000 /dev/zero >&2; exec sleep 300",
                             user=TEST_USER, cwd=arena.user)
        wait_for(lambda: os.path.exists(out) and read(out), 30, what="the job to start")
        pid = supervisor_pid(cluster, jid)
        pending = bytearray(4)
        wait_for(lambda: fcntl.ioctl(reader, termios.FIONREAD, pending) == 0 and
                 int.from_bytes(pending, sys.byteorder) >= 65536, 30, what="a full pipe")
        assert holding(pid, fifo_err)  # its stderr, kept for Slurm's CANCELLED line
        assert cluster.run(["scancel", str(jid)]).rc == 0
        assert cluster.wait_done(jid) == "CANCELLED"
        # the job's record says CANCELLED at once; the supervisor must also finish its work:
        # exit, or (a pooled one, idle for the next job) let go of the job's files
        wait_for(lambda: not holding(pid, fifo_err), 20,
                 what="the supervisor to kill the job and be done with it")
    finally:
        os.close(reader)


def holding(pid: int, path: str) -> bool:
    """Is ``pid`` alive with ``path`` open?"""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == path:
                return running(pid)
        except OSError:
            continue
    return False


# ---- 3. the API's output tail is read as the job's user ------------------------------------

def job_output(cluster, jid: int, user: str | None) -> dict:
    r = cluster.run([sys.executable, "-c", CALL, json.dumps({"op": "job_output", "job_id": jid})],
                    user=user, timeout=30)
    assert r.rc == 0, r
    return json.loads(r.out)


def test_api_output_tail_reads_as_the_user(cluster, arena):
    sub = arena.path("tail")
    os.mkdir(sub)
    os.chown(sub, arena.uid, arena.gid)
    jid = cluster.sbatch("-o", os.path.join(sub, "t.out"), "--wrap", "echo visible",
                         user=TEST_USER, cwd=arena.user)
    assert cluster.wait_done(jid) == "COMPLETED"
    assert job_output(cluster, jid, TEST_USER)["data"] == "visible\n"
    swap = ["sh", "-c", 'rm -f "$1" && ln -s "$2" "$1"', "-", os.path.join(sub, "t.out")]
    # the output file is now a symlink to a root-only file
    assert cluster.run(swap + [arena.victim], user=TEST_USER).rc == 0
    for who in (TEST_USER, None):  # the owner, and root (an operator) asking
        rep = job_output(cluster, jid, who)
        assert rep["data"] == "" and not rep["available"], rep
        assert "Permission denied" in rep["reason"], rep
    # a directory on the path is a symlink into a root-only directory that holds a file the
    # user owns: root would follow it (O_NOFOLLOW guards the last component only)
    hidden = os.path.join(arena.rootonly, "t.out")
    with open(hidden, "wb") as fh:
        fh.write(SECRET)
    os.chown(hidden, arena.uid, arena.gid)
    moved = cluster.run(["sh", "-c", 'mv "$1" "$1.away" && ln -s "$2" "$1"', "-", sub,
                         arena.rootonly], user=TEST_USER)
    assert moved.rc == 0, moved
    for who in (TEST_USER, None):
        rep = job_output(cluster, jid, who)
        assert rep["data"] == "" and not rep["available"], rep
    # a FIFO with no writer answers at once (the reader opens it without blocking)
    os.unlink(sub)
    os.rename(sub + ".away", sub)
    fifo = ["sh", "-c", 'rm -f "$1" && mkfifo "$1"', "-", os.path.join(sub, "t.out")]
    assert cluster.run(fifo, user=TEST_USER).rc == 0
    rep = job_output(cluster, jid, TEST_USER)
    assert not rep["available"] and rep["reason"] == "output is not a regular file", rep
    arena.assert_victim_intact()


# ---- 1b. the same at the time limit (jobs submitted by the module fixture) ------------------

@pytest.mark.parametrize("stream", ["output", "error"])
def test_timeout_banner_goes_to_the_original_file(cluster, arena, timeout_jobs, stream):
    job = timeout_jobs[stream]
    wait_swapped(job)
    assert cluster.wait_done(job["jid"], timeout=150) == "TIMEOUT"
    wait_supervisor_gone(cluster, job["jid"])
    assert_banner_in_original(arena, job, "timeout")
