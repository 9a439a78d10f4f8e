"""Wire records (docs/records.md) reproducing the reference cluster of
/work/shared/reference/slurm-22.05 (section 4 of capture.sh): jobs 42-49 on node[1-4],
partitions gpu (default) / debug.  Times are UTC epochs of the captured wall-clock times;
tests must run with TZ=UTC (see ``utc_tz`` below)."""
from __future__ import annotations
import os as _os  # noqa: E402
import sys as _sys  # noqa: E402
_sys.path.insert(0, _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))))
from shared_path import SHARED  # noqa: E402

import calendar
import time

import pytest

REF = SHARED / "reference" / "slurm-22.05"
CWD = "/tmp/slurmref-cap"


def ts(hms: str, day: str = "2026-11-29") -> int:
    """'17:31:01' -> epoch seconds (UTC)."""
    return calendar.timegm(time.strptime(f"{day}T{hms}", "%Y-%m-%dT%H:%M:%S"))


NOW = ts("17:31:04")        # squeue_default.txt / squeue_long.txt (TIME 0:03)
NOW_FMT = ts("17:31:05")    # squeue_format_examples.txt (TIME 0:04), sinfo_*, show config


def ref_lines(name: str) -> list[str]:
    return (REF / name).read_text().splitlines()


def ref_sections(name: str) -> dict[str, list[str]]:
    """Split a '### $ command' transcript into {command: output lines (blank lines at the
    end removed)}."""
    out: dict[str, list[str]] = {}
    cur = None
    for line in ref_lines(name):
        if line.startswith("### $ "):
            cur = line[6:]
            out[cur] = []
        elif cur is not None:
            out[cur].append(line)
    for v in out.values():
        while v and v[-1] == "":
            v.pop()
    return out


@pytest.fixture
def utc_tz(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def job(**kw) -> dict:
    """A job record with the defaults of the reference cluster."""
    j = {
        "job_id": 0, "array_job_id": None, "array_task_id": None, "array_task_str": None,
        "array_max_tasks": 0, "name": "wrap", "user": "alice", "uid": 1001,
        "group": "alice", "gid": 1001, "account": "research", "qos": "normal",
        "partition": "gpu", "state": "PENDING", "reason": "None", "reason_desc": None,
        "priority": 11000, "nice": 0, "hold": None, "dependency": None, "requeue": True,
        "restarts": 0, "batch": True, "exit_code": 0, "exit_signal": 0,
        "derived_exit_code": 0, "derived_exit_signal": 0,
        "submit_time": None, "eligible_time": None, "start_time": None, "end_time": None,
        "time_limit": None, "time_min": None, "nodes_min": 1, "nodes_max": None,
        "num_nodes": 1, "num_cpus": 1, "num_tasks": 1, "ntasks_set": False,
        "cpus_per_task": 1, "ntasks_per_node": None, "mem_per_node": None,
        "mem_per_cpu": 1024, "mem_per_gpu": None, "gpus_per_node": 0, "gpu_type": None,
        "gpus": None, "gpus_per_task": None, "tres_per_node": None, "req_nodes": None,
        "exc_nodes": None, "node_list": None, "batch_host": None, "alloc": [],
        "tres_req": "cpu=1,mem=1G,node=1,billing=1", "tres_alloc": None,
        "work_dir": CWD, "std_out": None, "std_err": None, "std_in": "/dev/null",
        "command": None, "comment": None, "submit_host": "localhost", "exclusive": False,
        "open_mode": None, "signal": None, "cancelled_by": None, "scheduler": "Main",
        "last_sched_eval": None, "sched_nodes": None, "events": [],
        "alloc_sid": 2338,
    }
    j.update(kw)
    if j["std_out"] is None:
        j["std_out"] = f"{CWD}/slurm-{j['job_id']}.out"
    if j["std_err"] is None:
        j["std_err"] = j["std_out"]
    return j


def _gpu(n):
    return {"gpus_per_node": n, "tres_per_node": f"gres:gpu:{n}"}


def busy_jobs() -> list[dict]:
    """Jobs 42-49 as squeue saw them at 17:31:04 (controller order: by job id)."""
    sub0, sub1, start = ts("17:30:59"), ts("17:31:00"), ts("17:31:01")
    return [
        job(job_id=42, name="train-llm", state="RUNNING", submit_time=sub0,
            eligible_time=sub0, start_time=start, end_time=ts("18:31:01"), time_limit=60,
            nodes_min=2, nodes_max=2, num_nodes=2, num_cpus=16, num_tasks=2, ntasks_set=True,
            cpus_per_task=8, ntasks_per_node=1, node_list="node[1-2]", batch_host="node1",
            alloc=[{"node": "node1", "cpus": 8, "mem": 8192, "gpus": list(range(8)),
                    "cpu_ids": "0-3,8-11"},
                   {"node": "node2", "cpus": 8, "mem": 8192, "gpus": list(range(8)),
                    "cpu_ids": "0-3,8-11"}],
            tres_req="cpu=16,mem=16G,node=2,billing=16,gres/gpu=16",
            tres_alloc="cpu=16,mem=16G,node=2,billing=16,gres/gpu=16",
            last_sched_eval=start, **_gpu(8)),
        job(job_id=43, name="finetune", user="bob", uid=1002, group="bob", gid=1002,
            account="prod", state="RUNNING", submit_time=sub0, eligible_time=sub0,
            start_time=start, end_time=None, num_cpus=4, cpus_per_task=4,
            mem_per_cpu=None, mem_per_node=8192, node_list="node3", batch_host="node3",
            alloc=[{"node": "node3", "cpus": 4, "mem": 8192, "gpus": [0, 1, 2, 3]}],
            tres_req="cpu=4,mem=8G,node=1,billing=4,gres/gpu=4",
            tres_alloc="cpu=4,mem=8G,node=1,billing=4,gres/gpu=4",
            last_sched_eval=start, **_gpu(4)),
        job(job_id=44, name="dbg", user="root", uid=0, group="root", gid=0,
            account="root", partition="debug", state="RUNNING", submit_time=sub0,
            eligible_time=sub0, start_time=start, end_time=ts("17:41:01"), time_limit=10,
            node_list="node3", batch_host="node3",
            alloc=[{"node": "node3", "cpus": 1, "mem": 1024, "gpus": [4]}],
            tres_req="cpu=1,mem=1G,node=1,billing=1,gres/gpu=1",
            tres_alloc="cpu=1,mem=1G,node=1,billing=1,gres/gpu=1",
            last_sched_eval=start, **_gpu(1)),
        job(job_id=45, name="big-pretrain", reason="Resources", submit_time=sub1,
            eligible_time=sub1, time_limit=120, nodes_min=4, nodes_max=4, num_nodes=4,
            num_cpus=4, num_tasks=4, tres_req="cpu=4,mem=4G,node=4,billing=4,gres/gpu=32",
            last_sched_eval=start, **_gpu(8)),
        job(job_id=46, name="small-eval", user="bob", uid=1002, group="bob", gid=1002,
            account="prod", reason="Priority", submit_time=sub1, eligible_time=sub1,
            tres_req="cpu=1,mem=1G,node=1,billing=1,gres/gpu=1", last_sched_eval=start,
            **_gpu(1)),
        job(job_id=47, name="held", reason="JobHeldUser", priority=0, hold="user",
            submit_time=sub1, tres_req="cpu=1,mem=1G,node=1,billing=1,gres/gpu=1",
            last_sched_eval=sub1, **_gpu(1)),
        job(job_id=48, array_job_id=48, array_task_str="1-6", array_max_tasks=2,
            name="sweep", reason="Priority", submit_time=sub1, eligible_time=start,
            time_limit=10, tres_req="cpu=1,mem=1G,node=1,billing=1,gres/gpu=1",
            last_sched_eval=start, std_out=f"{CWD}/slurm-48_4294967294.out", **_gpu(1)),
        job(job_id=49, name="after", reason="Dependency",
            dependency="afterok:42(unfulfilled)", submit_time=sub1, last_sched_eval=sub1),
    ]


def node(name: str, port: int, **kw) -> dict:
    n = {
        "name": name, "addr": "127.0.0.1", "hostname": "localhost", "port": port,
        "state": "IDLE", "flags": [], "cpus": 16, "cpus_alloc": 0, "sockets": 2,
        "cores_per_socket": 8, "threads_per_core": 1, "boards": 1, "real_memory": 64000,
        "mem_alloc": 0, "free_mem": 22164, "gres": "gpu:8", "gres_used": "gpu:0",
        "gpus_total": 8, "gpus_alloc": [], "partitions": ["gpu", "debug"], "reason": None,
        "reason_user": None, "reason_time": None, "boot_time": ts("17:07:39"),
        "slurmd_start_time": ts("17:30:08"), "last_heartbeat": None,
        "last_busy_time": ts("17:30:35"), "weight": 1, "tmp_disk": 0, "features": None,
        "cpu_load": 2.92, "version": "22.05.8", "arch": "x86_64",
        "os": "Linux 6.18.44-fc-v595 #1 SMP PREEMPT_DYNAMIC @0",
        "cfg_tres": "cpu=16,mem=62.50G,billing=16,gres/gpu=8", "alloc_tres": "",
    }
    n.update(kw)
    return n


def busy_nodes() -> list[dict]:
    return [
        node("node1", 17101, state="MIXED", cpus_alloc=8, mem_alloc=8192, free_mem=22165,
             gres_used="gpu:8", gpus_alloc=list(range(8)), last_busy_time=ts("17:30:55"),
             alloc_tres="cpu=8,mem=8G,gres/gpu=8"),
        node("node2", 17102, state="MIXED", cpus_alloc=8, mem_alloc=8192,
             gres_used="gpu:8", gpus_alloc=list(range(8)),
             alloc_tres="cpu=8,mem=8G,gres/gpu=8"),
        node("node3", 17103, state="MIXED", cpus_alloc=5, mem_alloc=9216,
             gres_used="gpu:5", gpus_alloc=[0, 1, 2, 3, 4],
             alloc_tres="cpu=5,mem=9G,gres/gpu=5"),
        node("node4", 17104),
    ]


def partitions() -> list[dict]:
    common = {
        "state": "UP", "nodes": "node[1-4]",
        "node_names": ["node1", "node2", "node3", "node4"], "max_nodes": None,
        "min_nodes": 0, "priority_tier": 1, "priority_job_factor": 1,
        "allow_accounts": "ALL", "allow_groups": "ALL", "allow_qos": "ALL",
        "over_subscribe": "NO", "total_cpus": 64, "total_nodes": 4,
        "tres": "cpu=64,mem=250G,node=4,billing=64,gres/gpu=32", "grace_time": 0,
        "hidden": False,
    }
    return [
        dict(common, name="gpu", default=True, max_time=None, default_time=None),
        dict(common, name="debug", default=False, max_time=60, default_time=10),
    ]
