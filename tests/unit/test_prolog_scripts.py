"""Prolog/Epilog running (muster.agent.prolog), the TaskProlog wrapper snippet
(muster.agent.taskprolog) and the controller's failure rules (muster.controller.prologs):
real scripts and real /bin/sh, no daemons."""

from __future__ import annotations

import asyncio
import os
import pwd
import subprocess
import time
from types import SimpleNamespace

import pytest

from muster.agent import prolog, taskprolog
from muster.agent.supervisor import _WRAPPER
from muster.agent.workdir import workdir_args
from muster.common import scripts
from muster.controller.prologs import ctld_failure_action, prolog_failure_action


@pytest.fixture
def d(tmp_path):
    os.chmod(tmp_path, 0o755)
    return tmp_path


def script(d, name: str, body: str, mode: int = 0o755) -> str:
    path = os.path.join(d, name)
    with open(path, "w") as fh:
        fh.write("#!/bin/sh\n" + body)
    os.chmod(path, mode)
    return path


def run(coro):
    return asyncio.run(coro)


def cfg(**kw):
    base = dict(prolog=None, epilog=None, task_prolog=None, task_epilog=None, prolog_flags=(),
                prolog_timeout=None, epilog_timeout=None, prolog_epilog_timeout=None,
                kill_wait=1, cluster_name="c1", path="/etc/slurm/slurm.conf")
    base.update(kw)
    return SimpleNamespace(**base)


# ---- running node scripts ---------------------------------------------------------------------
def test_clean_environment_and_status(d):
    out = os.path.join(d, "env")
    path = script(d, "p.sh", f"/usr/bin/env > {out}\nexit 7\n")
    res = run(scripts.run_scripts(path, {"SLURM_JOB_ID": "5"}, None))
    assert not res.ok and (res.exit_code, res.signal, res.timed_out) == (7, 0, False)
    with open(out) as fh:
        env = dict(line.split("=", 1) for line in fh.read().splitlines())
    assert env.pop("SLURM_JOB_ID") == "5"
    assert env.pop("PWD", "/") == "/" and not env  # nothing of ours leaks in


def test_timeout_kills_the_whole_group(d):
    pidfile = os.path.join(d, "child")
    path = script(d, "slow.sh", f"/bin/sleep 300 & echo $! > {pidfile}\nwait\n")
    t0 = time.monotonic()
    res = run(scripts.run_scripts(path, {}, 0.5))
    assert res.timed_out and not res.ok and res.signal == 9
    assert time.monotonic() - t0 < 10
    child = int(open(pidfile).read())
    with pytest.raises(ProcessLookupError):
        for _ in range(200):  # SIGKILLed with its group; wait for the kernel to reap it
            os.kill(child, 0)
            if open(f"/proc/{child}/stat").read().split(") ")[1][0] == "Z":
                raise ProcessLookupError
            time.sleep(0.01)


def test_glob_runs_in_reverse_order_and_stops_at_the_first_failure(d):
    log = os.path.join(d, "log")
    script(d, "10-a.sh", f"echo a >> {log}\n")
    script(d, "20-b.sh", f"echo b >> {log}\nexit 2\n")
    script(d, "30-c.sh", f"echo c >> {log}\n")
    res = run(scripts.run_scripts(os.path.join(d, "*.sh"), {}, None))
    assert not res.ok and res.exit_code == 2
    assert open(log).read() == "c\nb\n"
    assert run(scripts.run_scripts(os.path.join(d, "none-*.sh"), {}, None)).ok


def test_untrusted_paths_are_refused(d):
    assert "absolute" in scripts.untrusted("p.sh")
    assert scripts.untrusted(os.path.join(d, "missing.sh"))
    writable = script(d, "w.sh", "exit 0\n", mode=0o777)
    res = run(scripts.run_scripts(writable, {}, None))
    assert not res.ok and "refused" in res.detail
    user = pwd.getpwnam("mustertest")
    theirs = script(d, "u.sh", "exit 0\n")
    os.chown(theirs, user.pw_uid, user.pw_gid)
    assert scripts.untrusted(theirs)
    sub = os.path.join(d, "open")
    os.mkdir(sub)
    os.chmod(sub, 0o777)  # anyone could swap the file in there
    assert "directory" in scripts.untrusted(script(sub, "x.sh", "exit 0\n"))
    assert scripts.untrusted(script(d, "ok.sh", "exit 0\n")) is None


def test_timeouts_from_slurm_conf():
    assert scripts.timeout_of(cfg(), "prolog") is None
    assert scripts.timeout_of(cfg(prolog_epilog_timeout=65534), "prolog") is None
    assert scripts.timeout_of(cfg(prolog_epilog_timeout=30), "epilog") == 30
    assert scripts.timeout_of(cfg(prolog_epilog_timeout=30, prolog_timeout=5), "prolog") == 5


def test_script_env_from_a_launch_alone():
    L = {"job_id": 9, "uid": 1001, "gid": 1001, "user": "u",
         "env": {"SLURM_JOB_PARTITION": "gpu", "HOME": "/home/u"}}
    env = prolog.script_env(None, L, node="n1", context="prolog_slurmd", cfg=cfg())
    assert env == {"SLURM_JOB_ID": "9", "SLURM_JOBID": "9", "SLURM_JOB_UID": "1001",
                   "SLURM_JOB_GID": "1001", "SLURM_JOB_USER": "u", "SLURM_JOB_PARTITION": "gpu",
                   "SLURMD_NODENAME": "n1", "SLURM_SCRIPT_CONTEXT": "prolog_slurmd",
                   "SLURM_CLUSTER_NAME": "c1", "SLURM_CONF": "/etc/slurm/slurm.conf"}


# ---- one prolog per job and node; launches wait for it ----------------------------------------
def test_launches_wait_for_one_prolog_and_are_refused_after_a_failure(d):
    count = os.path.join(d, "count")
    ok = script(d, "ok.sh", f"echo x >> {count}\n")
    bad = script(d, "bad.sh", "exit 1\n")

    async def scenario():
        sent, launched, refused = [], [], []
        ns = prolog.NodeScripts(cfg(prolog=ok), "n1", sent.append, lambda j: False)
        L = {"job_id": 1, "run": 0, "uid": 0, "gid": 0, "user": "root"}
        assert ns.defer(dict(L), lambda x: ns.defer(x, launched.append) or launched.append(x))
        assert ns.defer(dict(L, step=1), launched.append)  # a step arriving meanwhile
        await asyncio.wait([ns.prologs[(1, 0)]])
        await asyncio.sleep(0)
        assert len(launched) == 2 and sent[0]["op"] == "prolog_done" and sent[0]["ok"]
        assert not ns.defer(dict(L, step=2), launched.append)  # done: no wait, no re-run
        ns.cfg.prolog = bad
        assert ns.defer({**L, "job_id": 2}, launched.append, lambda: refused.append(2))
        await asyncio.wait([ns.prologs[(2, 0)]])
        await asyncio.sleep(0)
        assert refused == [2] and len(launched) == 2 and not sent[-1]["ok"]
        ns.ack({"kind": "prolog", "job_id": 2, "run": 0})
        assert ("prolog", 2, 0) not in ns.unacked
    run(scenario())
    assert open(count).read() == "x\n"


def test_epilog_waits_for_the_jobs_processes(d):
    out = os.path.join(d, "epilog")
    ep = script(d, "ep.sh", f"echo $SLURM_SCRIPT_CONTEXT $SLURM_JOB_ID > {out}\n")

    async def scenario():
        busy = {3}
        sent = []
        ns = prolog.NodeScripts(cfg(epilog=ep), "n1", sent.append, lambda j: j in busy)
        ns.on_epilog_request({"job_id": 3, "run": 0, "uid": 0, "gid": 0,
                              "prolog_env": {"SLURM_JOB_ID": "3"}})
        await asyncio.sleep(0.2)
        assert not os.path.exists(out)  # the job still runs here
        busy.clear()
        await asyncio.wait([ns.epilogs[(3, 0)]])
        assert sent[-1]["op"] == "epilog_done" and sent[-1]["ok"]
    run(scenario())
    assert open(out).read() == "epilog_slurmd 3\n"


# ---- TaskProlog in the task's wrapper ---------------------------------------------------------
def task(d, tp_body: str, env: dict | None = None):
    tp = script(d, "tp.sh", tp_body)
    wrapper = taskprolog.with_task_prolog(_WRAPPER, tp)
    return subprocess.run(["/bin/sh", "-c", wrapper, "/usr/bin/env", *workdir_args(str(d), {})],
                          env={"PATH": "/usr/bin:/bin", **(env or {})}, capture_output=True,
                          text=True)


def test_task_prolog_export_unset_print(d):
    r = task(d, 'echo "export A=x y \\$HOME \\`id\\`"\necho "export   B  = v  "\n'
                'echo "unset  GONE "\necho "print   hello"\necho "export 1BAD=z"\n'
                'echo "export C=$SLURM_SCRIPT_CONTEXT"\necho junk\nprintf "export D=last"\n',
             {"GONE": "1"})
    assert r.returncode == 0, r
    lines = r.stdout.splitlines()
    assert lines[0] == "hello"
    env = dict(x.split("=", 1) for x in lines[1:])
    assert env["A"] == "x y $HOME `id`" and env["B"] == " v  " and env["D"] == "last"
    assert env["C"] == "prolog_task" and "GONE" not in env and "1BAD" not in env
    assert "SLURM_SCRIPT_CONTEXT" not in env and not any(k.startswith("_muster") for k in env)
    assert env["SLURM_TASK_PID"].isdigit()


def test_task_prolog_failure_ends_the_task(d):
    r = task(d, "echo 'export A=1'\nexit 5\n")
    assert r.returncode == 5 and r.stdout == ""
    assert "TaskProlog failed status=5" in r.stderr


def test_with_task_prolog_needs_the_exec_at_the_end():
    assert taskprolog.with_task_prolog(_WRAPPER, None) == _WRAPPER
    with pytest.raises(ValueError):
        taskprolog.with_task_prolog("echo no exec", "/x")


# ---- the controller's rules -------------------------------------------------------------------
@pytest.mark.parametrize(("batch", "requeue", "flags", "nohold", "want"), [
    (True, True, (), False, ("requeue", True)),
    (True, True, (), True, ("requeue", False)),
    (True, False, (), False, ("fail", False)),
    (True, False, ("FORCEREQUEUEONFAIL",), False, ("requeue", True)),
    (False, True, ("FORCEREQUEUEONFAIL",), True, ("fail", False)),
])
def test_prolog_failure_action(batch, requeue, flags, nohold, want):
    assert prolog_failure_action(batch=batch, requeue=requeue, flags=flags, nohold=nohold) == want


def test_ctld_prolog_failure_action():
    assert ctld_failure_action(batch=True, requeue=True) == "requeue"
    assert ctld_failure_action(batch=True, requeue=False) == "cancel"
    assert ctld_failure_action(batch=False, requeue=True) == "cancel"
