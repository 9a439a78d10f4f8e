"""Test harness: a real local Muster cluster (real daemons, sockets, SQLite, processes).

``Cluster`` starts one with ``muster up`` in a temporary state directory and runs the real
CLI commands against it through subprocesses, with the virtualenv's bin directory first on
PATH so Slurm's own commands in /usr/bin are never picked up by mistake.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import sys
import time

BIN = os.path.dirname(os.path.abspath(sys.executable))
TEST_USER = os.environ.get("MUSTER_TEST_USER", "mustertest")
TEST_USER2 = os.environ.get("MUSTER_TEST_USER2", "mustertest2")


def user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def require_root_and_users(*users: str) -> None:
    """Fail (never skip) a test that acts as other users where it cannot: not root, or one
    of ``users`` missing (CI runs as root and .ci/run creates them)."""
    import pytest
    if os.getuid() != 0:
        pytest.fail("these tests act as other users and must run as root (as CI does)")
    for u in users:
        if not user_exists(u):
            pytest.fail(f"test user {u} missing: run .ci/run (it creates it) or `useradd {u}`")


def wait_for(cond, timeout: float = 20.0, interval: float = 0.02, what: str = "condition"):
    """Poll ``cond`` until it returns a truthy value; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Result:
    def __init__(self, cp: subprocess.CompletedProcess):
        self.rc = cp.returncode
        self.out = cp.stdout
        self.err = cp.stderr

    def __repr__(self) -> str:
        return f"Result(rc={self.rc}, out={self.out!r}, err={self.err!r})"


class Cluster:
    def __init__(self, state_dir: str, nodes: int = 4, gpus: int = 8, cpus: int = 16,
                 mem: int = 64000, partitions: str = "gpu,debug:1:00:00", extra_conf: str = "",
                 topology: str | None = None):
        self.state_dir = state_dir
        self.nodes = nodes
        self.args = ["--nodes", str(nodes), "--gpus-per-node", str(gpus), "--cpus-per-node",
                     str(cpus), "--mem-per-node", str(mem), "--partitions", partitions]
        if topology:  # muster up --topology tree:N
            self.args += ["--topology", topology]
        self.extra_conf = extra_conf
        self.conf = os.path.join(state_dir, "slurm.conf")
        self.env = dict(os.environ)
        self.env["PATH"] = BIN + os.pathsep + self.env.get("PATH", "/usr/bin:/bin")
        self.env["MUSTER_CONF"] = self.conf
        self.env.pop("SLURM_CONF", None)
        for k in list(self.env):
            if k.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SACCT_", "SINFO_", "SCANCEL_")):
                del self.env[k]

    # ---- lifecycle -------------------------------------------------------------------------
    def up(self) -> Cluster:
        os.makedirs(self.state_dir, exist_ok=True)
        os.chmod(self.state_dir, 0o755)
        r = self.run(["muster", "up", "--no-link", "--state-dir", self.state_dir, *self.args])
        assert r.rc == 0, r
        if self.extra_conf:
            self.down()
            with open(self.conf, "a") as fh:
                fh.write("\n" + self.extra_conf + "\n")
            r = self.run(["muster", "up", "--no-link", "--state-dir", self.state_dir, "--config", self.conf])
            assert r.rc == 0, r
        return self

    def down(self) -> None:
        self.run(["muster", "down", "--state-dir", self.state_dir])

    def pids(self) -> dict:
        with open(os.path.join(self.state_dir, "muster.pids")) as fh:
            return json.load(fh)

    # ---- commands --------------------------------------------------------------------------
    def run(self, argv: list[str], *, user: str | None = None, input: str | bytes | None = None,
            cwd: str | None = None, env: dict | None = None, timeout: float = 60) -> Result:
        e = dict(self.env)
        if env:
            e.update(env)
        kw = {}
        if user is not None:
            pw = pwd.getpwnam(user)
            kw = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": [],
                  "umask": 0o022}
            e.update({"HOME": pw.pw_dir, "USER": user, "LOGNAME": user})
        try:
            cp = subprocess.run(argv, capture_output=True, input=input, cwd=cwd, env=e,
                                text=isinstance(input, str) or input is None, timeout=timeout, **kw)
        except subprocess.TimeoutExpired as exc:
            # pytest truncates the exception's repr; keep the whole tail so a hang can be diagnosed.
            def tail(b): return (b.decode(errors="replace") if isinstance(b, bytes) else b or "")[-6000:]
            raise AssertionError(f"{argv!r} did not finish in {timeout}s\n--- stdout ---\n"
                                 f"{tail(exc.stdout)}\n--- stderr ---\n{tail(exc.stderr)}") from None
        return Result(cp)

    def ok(self, *argv: str, user: str | None = None) -> str:
        """Run a command that must succeed; its stdout."""
        r = self.run(list(argv), user=user)
        assert r.rc == 0, r
        return r.out

    def sbatch(self, *args: str, user: str | None = None, cwd: str | None = None,
               input: str | None = None, env: dict | None = None) -> int:
        r = self.run(["sbatch", "--parsable", *args], user=user, cwd=cwd, input=input, env=env)
        assert r.rc == 0, r
        return int(r.out.strip().split(";")[0])

    def job(self, job_id: int) -> dict:
        """The job's accounting record (works for finished jobs too)."""
        r = self.run(["sacct", "-j", str(job_id), "-X", "-P", "-n", "-o",
                      "JobIDRaw,State,ExitCode,NodeList,AllocCPUS"])
        assert r.rc == 0, r
        rows = [line.split("|") for line in r.out.splitlines() if line]
        for jid, state, exitc, nodes, cpus in rows:
            if jid == str(job_id):
                return {"state": state.split()[0], "exit": exitc, "nodes": nodes, "cpus": cpus}
        return {}

    def state_of(self, job_id: int) -> str | None:
        return self.job(job_id).get("state")

    def wait_state(self, job_id: int, states, timeout: float = 30.0) -> str:
        if isinstance(states, str):
            states = (states,)
        return wait_for(lambda: (s := self.state_of(job_id)) in states and s,
                        timeout, what=f"job {job_id} in {states}")

    def wait_done(self, job_id: int, timeout: float = 30.0) -> str:
        return self.wait_state(job_id, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT",
                                        "NODE_FAIL", "OUT_OF_MEMORY"), timeout)


def read(path: str) -> str:
    """A file's text, "" while it does not exist yet (job output, logs)."""
    try:
        with open(path) as fh:
            return fh.read()
    except FileNotFoundError:
        return ""


def shared_tmp(base: str) -> str:
    """A directory every test user can write (job output lands here)."""
    os.makedirs(base, exist_ok=True)
    os.chmod(base, 0o1777)
    return base


def cleanup(path: str) -> None:
    """Remove a test's directory, and the in-memory spools a cluster in it had (`muster up`
    links them as STATE/spool; `muster down` removes them, but a test may fail before it)."""
    for link in [os.path.join(path, "spool"), *glob.glob(os.path.join(path, "*", "spool"))]:
        if os.path.islink(link) and os.path.basename(os.readlink(link)).startswith("muster-"):
            shutil.rmtree(os.readlink(link), ignore_errors=True)
    shutil.rmtree(path, ignore_errors=True)


def controller_pid(c: Cluster) -> int:
    return c.pids()["controller"]


def restart_controller(c: Cluster, kill_signal: int = 9, env: dict | None = None,
                       wait: bool = True, down_s: float = 0.0) -> int:
    """SIGKILL (by default) the controller, start a new one on the same state; return its pid.
    ``env`` adds variables to the new controller's environment (e.g. MUSTER_CRASH_AT);
    ``down_s``: how long the cluster stays without a controller (the outage under test)."""
    import signal as _signal
    rec = c.pids()
    try:
        os.kill(rec["controller"], kill_signal)
    except ProcessLookupError:
        pass
    wait_for(lambda: not _alive(rec["controller"]), what="controller exit")
    if down_s:
        time.sleep(down_s)  # the outage itself, not a wait for anything
    log = os.path.join(c.state_dir, "log", "musterctld.log")
    with open(os.path.join(c.state_dir, "log", "musterctld.out"), "ab") as out:
        p = subprocess.Popen([os.path.join(BIN, "musterctld"), "-f", c.conf, "-L", log],
                             stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                             start_new_session=True, env={**os.environ, **(env or {})})
    rec["controller"] = p.pid
    tmp = os.path.join(c.state_dir, "muster.pids.tmp")
    with open(tmp, "w") as fh:
        json.dump(rec, fh)
    os.replace(tmp, os.path.join(c.state_dir, "muster.pids"))
    del _signal
    if wait:
        wait_for(lambda: c.run(["scontrol", "ping"]).rc == 0, what="controller back")
    return p.pid


def start_agent(c: Cluster, node: str, env: dict | None = None) -> int:
    """Start musterd for ``node`` (a replacement for one that was killed: the jobs it had keep
    running under their supervisors) and record its pid for `muster down`. ``env`` adds
    variables to its environment (e.g. MUSTER_AGENT_PROTO)."""
    log = os.path.join(c.state_dir, "log", f"musterd-{node}.log")
    p = subprocess.Popen([os.path.join(BIN, "musterd"), "-f", c.conf, "-N", node, "-L", log],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True,
                         env={**os.environ, **(env or {})})
    rec = c.pids()
    rec["agents"][node] = p.pid
    tmp = os.path.join(c.state_dir, "muster.pids.tmp")
    with open(tmp, "w") as fh:
        json.dump(rec, fh)
    os.replace(tmp, os.path.join(c.state_dir, "muster.pids"))
    return p.pid


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


@contextlib.contextmanager
def private_cluster(prefix: str, **kw):
    """A cluster of its own (``Cluster(**kw)``) under ``/tmp/<prefix>…``: ``state/`` and a
    world-writable ``work/`` (``c.workdir``); stopped and removed however the block ends."""
    base = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    os.chmod(base, 0o755)
    c = Cluster(os.path.join(base, "state"), **kw).up()
    try:
        c.workdir = shared_tmp(os.path.join(base, "work"))
        yield c
    finally:
        c.down()
        keep = os.environ.get("MUSTER_KEEP_LOGS")  # a directory: each cluster's logs kept there
        if keep:
            shutil.copytree(os.path.join(c.state_dir, "log"),
                            os.path.join(keep, os.path.basename(base)), dirs_exist_ok=True)
        cleanup(base)
