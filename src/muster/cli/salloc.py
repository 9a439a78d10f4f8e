"""salloc: obtain an allocation, run a command (default: the user's shell) on the submit host
with the allocation's environment, give the allocation back when the command exits.

The allocation is leased to salloc's controller connection (see muster.controller.steps): if
salloc is killed, the allocation is released; if the allocation is cancelled (scancel, time
limit), salloc reports ``Job allocation N has been revoked.`` and stops the command.
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


def _main() -> int:
    from muster.cli import srun
    from muster.cli.client import config_path, exit_error
    from muster.common.errors import RequestError
    argv = sys.argv[1:]
    env = dict(os.environ)
    inv = srun.parse(argv, env, os.getcwd(), prog="salloc")
    if inv.flags.get("version"):
        from muster import SLURM_COMPAT_VERSION
        print(f"slurm {SLURM_COMPAT_VERSION} (muster)")
        return 0
    if inv.flags.get("help"):
        print("Usage: salloc [OPTIONS(0)...] [command(0) [args(0)...]]")
        return 0
    quiet = bool(inv.flags.get("quiet"))
    cmd = inv.argv or [env.get("SHELL") or "/bin/sh"]
    req = dict(inv.req)
    req["name"] = req.get("name") or "interactive"
    req["submit_dir"] = os.getcwd()
    ctl = srun.Controller()
    try:
        job_id = ctl.call({"op": "allocate", "job": req})["job_id"]
    except RequestError as exc:
        if exc.code == "invalid_partition":
            sys.stderr.write(f"salloc: error: invalid partition specified: {req.get('partition')}\n")
        raise CliExit([f"salloc: error: Job submit/allocate failed: {exc.message}"],
                      exit_error()) from None
    reply = ctl.call({"op": "wait_alloc", "job_id": job_id, "timeout": 0.5}, timeout=None)
    job = reply["job"]
    if job["state"] == "PENDING":
        if not quiet:
            sys.stderr.write(f"salloc: Pending job allocation {job_id}\n")
            sys.stderr.write(f"salloc: job {job_id} queued and waiting for resources\n")
            sys.stderr.flush()
        while job["state"] == "PENDING":
            job = ctl.call({"op": "wait_alloc", "job_id": job_id, "timeout": 30}, timeout=None)["job"]
        if job["state"] == "RUNNING" and not quiet:
            sys.stderr.write(f"salloc: job {job_id} has been allocated resources\n")
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
    try:
        proc = subprocess.Popen(cmd, env=run_env)
    except OSError as exc:
        sys.stderr.write(f"salloc: error: {cmd[0]}: {exc.strerror}\n")
        code = 1
        proc = None
    revoked = threading.Event()
    if proc is not None:
        def watch():
            # the allocation may be revoked (scancel, time limit) while the command runs
            while proc.poll() is None:
                try:
                    j = ctl_watch.call({"op": "wait_alloc", "job_id": job_id, "timeout": 2},
                                       timeout=None)["job"]
                except Exception:
                    return
                if j["state"] != "RUNNING" or j.get("completing"):
                    revoked.set()
                    try:
                        proc.send_signal(signal.SIGHUP)
                    except OSError:
                        pass
                    return
                threading.Event().wait(1.0)
        ctl_watch = srun.Controller()
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
