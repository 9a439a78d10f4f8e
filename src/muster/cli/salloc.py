"""salloc: obtain an allocation, run a command (default: the user's shell) on the submit host
with the allocation's environment, give the allocation back when the command exits.

The allocation is leased to salloc's controller connection (see muster.controller.leases): if
salloc is killed, the allocation is released; if the allocation is cancelled (scancel, time
limit), salloc reports ``Job allocation N has been revoked.`` and stops the command. A
controller restart or fail-over breaks the connection, not the session: the lease is
re-attached to the next controller (muster.cli.lease).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

from muster.cli.getopt import CliExit


def allocation_env(job: dict, base: dict, conf: str | None) -> dict:
    """env.md §1 column A."""
    from muster.common.hostlist import compress_counts
    env = dict(base)
    alloc = job.get("alloc") or []
    s = {
        "SLURM_JOB_ID": str(job["job_id"]), "SLURM_JOBID": str(job["job_id"]),
        "SLURM_JOB_NAME": job["name"], "SLURM_JOB_NODELIST": job["node_list"] or "",
        "SLURM_NODELIST": job["node_list"] or "", "SLURM_JOB_NUM_NODES": str(job["num_nodes"]),
        "SLURM_NNODES": str(job["num_nodes"]),
        "SLURM_JOB_CPUS_PER_NODE": compress_counts([a["cpus"] for a in alloc] or [job["num_cpus"]]),
        "SLURM_TASKS_PER_NODE": compress_counts([a.get("tasks", 1) for a in alloc] or [1]),
        "SLURM_JOB_ACCOUNT": job["account"], "SLURM_JOB_PARTITION": job["partition"],
        "SLURM_JOB_QOS": job["qos"], "SLURM_SUBMIT_DIR": os.getcwd(),
        "SLURM_SUBMIT_HOST": job.get("submit_host") or "",
        "SLURM_JOB_START_TIME": str(job.get("start_time") or 0),
        "SLURM_JOB_END_TIME": str(job.get("end_time") or 0),
    }
    if conf:
        s["SLURM_CONF"] = s["MUSTER_CONF"] = conf
        from muster.cli.client import _scan_conf
        s["SLURM_CLUSTER_NAME"] = _scan_conf(conf, ("clustername",)).get("clustername") or "cluster"
    if job.get("ntasks_set"):
        s["SLURM_NTASKS"] = s["SLURM_NPROCS"] = str(job["num_tasks"])
    if job.get("ntasks_per_node"):
        s["SLURM_NTASKS_PER_NODE"] = str(job["ntasks_per_node"])
    if job.get("overcommit"):  # the steps srun starts in it overcommit too (-O)
        s["SLURM_OVERCOMMIT"] = "1"
    if (job.get("cpus_per_task") or 0) > 1:
        s["SLURM_CPUS_PER_TASK"] = str(job["cpus_per_task"])
    if job.get("gpus_per_node"):
        s["SLURM_GPUS_PER_NODE"] = str(job["gpus_per_node"])
    if job.get("mem_per_cpu"):
        s["SLURM_MEM_PER_CPU"] = str(job["mem_per_cpu"])
    elif job.get("mem_per_node"):
        s["SLURM_MEM_PER_NODE"] = str(job["mem_per_node"])
    env.update(s)
    return env


def _await_grant(ctl, job_id: int, quiet: bool, immediate: int | None) -> dict:
    """The allocation's record once it has left PENDING. With ``--immediate=N`` it is given
    up (cancelled) when still pending after N seconds, with Slurm's lines and exit code."""
    import time
    reply = ctl.call({"op": "wait_alloc", "job_id": job_id, "timeout": 0.5}, timeout=None)
    job = reply["job"]
    if job["state"] != "PENDING":
        return job
    if not quiet:
        sys.stderr.write(f"salloc: Pending job allocation {job_id}\n")
        sys.stderr.write(f"salloc: job {job_id} queued and waiting for resources\n")
        sys.stderr.flush()
    give_up = time.monotonic() + immediate if immediate else None
    while job["state"] == "PENDING":
        wait = 30.0 if give_up is None else max(0.0, min(30.0, give_up - time.monotonic()))
        job = ctl.call({"op": "wait_alloc", "job_id": job_id, "timeout": wait}, timeout=None)["job"]
        if job["state"] == "PENDING" and give_up is not None and time.monotonic() >= give_up:
            from muster.cli import srun
            srun.give_up_pending(ctl, job_id)
            from muster.cli.client import exit_error
            raise CliExit(["salloc: error: Unable to allocate resources: Connection timed out",
                           f"salloc: Job allocation {job_id} has been revoked."], exit_error())
    if job["state"] == "RUNNING" and not quiet:
        sys.stderr.write(f"salloc: job {job_id} has been allocated resources\n")
    return job


def _last_of(given, names) -> str | None:
    """Which of ``names`` came last on the command line (None: none of them)."""
    last = None
    for name, _ in given:
        if name in names:
            last = name
    return last


def ring_bell(choice: str | None, waited: float, tty: bool) -> bool:
    """Whether the grant rings the terminal bell: always with --bell, never with --no-bell,
    and by default only after more than ten seconds of waiting (someone may have turned
    away), as Slurm's salloc does. Only a terminal on stdout hears it."""
    if not tty or choice == "no-bell":
        return False
    return choice == "bell" or waited > 10.0


def kill_signal(value, interactive: bool) -> int | None:
    """``-K/--kill-command[=signal]``: the signal for the command when the allocation is
    revoked. Without a value: SIGHUP for an interactive session, SIGTERM otherwise (Slurm's
    defaults). None when the option was not given (the command then gets SIGHUP)."""
    if value is None:
        return None
    if value is True:
        return int(signal.SIGHUP if interactive else signal.SIGTERM)
    text = str(value).strip().upper()
    if text.isdigit() and 0 < int(text) < 65:
        return int(text)
    num = getattr(signal, text if text.startswith("SIG") else "SIG" + text, None)
    if isinstance(num, signal.Signals):
        return int(num)
    raise CliExit(["salloc: error: Invalid --kill-command specification"], 255)


def user_login_env(value, uid: int | None) -> dict[str, str]:
    """``--get-user-env[=timeout][S|L]``: the login environment of the --uid user (else of the
    caller), read by running ``su`` as that user. Root only, as in Slurm, whose message the
    others get: running ``su`` for another user is what only root may do."""
    import pwd
    import re
    text = "" if value is True or value is None else str(value)
    m = re.fullmatch(r"(\d*)([SLsl]?)", text)
    if m is None:
        raise CliExit(["salloc: error: Invalid --get-user-env specification"], 255)
    if os.getuid() != 0:
        raise CliExit(["salloc: error: SlurmdUser must be root to use --get-user-env"], 1)
    timeout = int(m.group(1)) if m.group(1) else 8
    user = pwd.getpwuid(os.getuid() if uid is None else uid).pw_name
    mark = "==muster-login-env=="
    su = ["su"] + ([] if m.group(2).upper() == "S" else ["-"]) + [
        user, "-c", f"echo {mark}; env -0"]
    try:
        out = subprocess.run(su, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL,
                             check=True).stdout
    except (OSError, subprocess.SubprocessError):
        raise CliExit([f"salloc: error: Unable to get the login environment of {user}"],
                      1) from None
    body = out.split((mark + "\n").encode(), 1)[-1]
    env = {}
    for item in body.split(b"\0"):
        name, eq, val = item.partition(b"=")
        if eq and name:
            env[name.decode(errors="replace")] = val.decode(errors="replace")
    return env


def _revoke(proc, sig: int | None) -> None:
    """Stop the command of a revoked allocation: with -K, its signal to the command's
    process group when the command leads one of its own (as Slurm signals it), else to the
    command; without -K, SIGHUP to the command, as a closing terminal would."""
    try:
        if sig is not None and os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(signal.SIGHUP if sig is None else sig)
    except OSError:
        pass


def _immediate_value(given, env: dict):
    """-I's value, else SALLOC_IMMEDIATE's (empty: a bare -I), as Slurm 22.05's salloc reads
    it (its srun reads no SLURM_IMMEDIATE: nor does Muster's)."""
    if given is None and "SALLOC_IMMEDIATE" in env:
        return env["SALLOC_IMMEDIATE"] or True
    return given


def _main() -> int:
    from muster.cli import srun
    from muster.cli.client import config_path, exit_error
    from muster.common.errors import RequestError, TransportError
    argv = sys.argv[1:]
    env = dict(os.environ)
    inv = srun.parse(argv, env, os.getcwd(), prog="salloc")
    quiet = bool(inv.flags.get("quiet"))
    kill_sig = kill_signal(inv.srun.get("kill_command"), os.isatty(0))
    if "get_user_env" in inv.srun:  # before anything is allocated: it may be refused
        env = {**user_login_env(inv.srun["get_user_env"], inv.req.get("uid")), **env}
    cmd = inv.argv or [env.get("SHELL") or "/bin/sh"]
    req = dict(inv.req)
    req["name"] = req.get("name") or "interactive"
    req["submit_dir"] = os.getcwd()
    req["overcommit"] = srun._flag(req.get("overcommit"), env, "SALLOC_OVERCOMMIT")
    ctl = srun.Controller()
    immediate = srun.immediate_secs(_immediate_value(inv.srun.get("immediate"), env), "salloc")
    try:
        reply = ctl.call(srun.allocate_msg(req, immediate))
    except RequestError as exc:
        if exc.code == "invalid_partition":
            sys.stderr.write(f"salloc: error: invalid partition specified: {req.get('partition')}\n")
        if exc.detail:
            sys.stderr.write(f"salloc: error: {exc.detail}\n")
        raise CliExit([f"salloc: error: Job submit/allocate failed: {exc.message}"],
                      exit_error()) from None
    job_id = reply["job_id"]
    if reply.get("busy"):  # --immediate: the controller could not start it (job FAILED)
        raise CliExit([f"salloc: error: Unable to allocate resources: {reply['busy']}",
                       f"salloc: Job allocation {job_id} has been revoked."], exit_error())
    import time
    asked = time.monotonic()
    job = _await_grant(ctl, job_id, quiet, immediate)
    if job["state"] == "RUNNING" and ring_bell(_last_of(inv.given, ("bell", "no-bell")),
                                               time.monotonic() - asked, os.isatty(1)):
        sys.stdout.write("\a")
        sys.stdout.flush()
    if job["state"] != "RUNNING":
        sys.stderr.write(f"salloc: Job allocation {job_id} has been revoked.\n")
        return 1
    if not quiet:
        sys.stderr.write(f"salloc: Granted job allocation {job_id}\n")
        sys.stderr.flush()
    conf = config_path()
    run_env = allocation_env(job, env, os.path.realpath(conf) if conf else None)
    from muster.cli.jobopts import step_env
    run_env.update(step_env(req))  # --gpu-bind, -m for the allocation's steps
    run_env.update(inv.env_extra)  # --container*: the allocation's steps run in it
    try:
        proc = subprocess.Popen(cmd, env=run_env)
    except OSError as exc:
        sys.stderr.write(f"salloc: error: {cmd[0]}: {exc.strerror}\n")
        code = 1
        proc = None
    revoked = threading.Event()
    if proc is not None:
        def watch():
            # the allocation may be revoked (scancel, time limit) while the command runs. A
            # controller restart breaks both connections: this one notices at once, and on
            # reconnecting re-attaches the lease (it holds job_id), however long the outage
            while proc.poll() is None:
                try:
                    j = ctl_watch.call({"op": "wait_alloc", "job_id": job_id, "timeout": 2},
                                       timeout=None)["job"]
                except TransportError:  # no controller for a whole retry budget: go on trying
                    threading.Event().wait(1.0)
                    continue
                except Exception:
                    return
                if j["state"] != "RUNNING" or j.get("completing"):
                    revoked.set()
                    _revoke(proc, kill_sig)
                    return
                threading.Event().wait(1.0)
        ctl_watch = srun.Controller()
        ctl_watch.job_id = job_id  # re-attached here when a restart breaks the connections
        threading.Thread(target=watch, daemon=True).start()
        for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM):
            signal.signal(s, lambda *_: None)  # the command gets terminal signals, not us
        code = proc.wait()
        if code < 0:
            code = 128 - code
    if revoked.is_set():
        sys.stderr.write(f"salloc: Job allocation {job_id} has been revoked.\n")
    elif not quiet:
        sys.stderr.write(f"salloc: Relinquishing job allocation {job_id}\n")
    try:
        ctl.call({"op": "release_alloc", "job_id": job_id, "exit_code": min(max(code, 0), 255),
                  "signal": 0})
    except Exception:
        pass
    return code


def main() -> None:
    from muster.cli.client import run_main
    run_main("salloc", _main)


if __name__ == "__main__":
    main()
