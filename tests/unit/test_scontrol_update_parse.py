"""scontrol update job's key rules (pure): scontrol's abbreviations and order, relative time
limits, refusals of malformed values before any job is looked at; and scontrol show step's
layout (Slurm's slurm_sprint_job_step_info), squeue -s's."""

import pytest

from muster.cli import fmt_scontrol, fmt_squeue
from muster.common.errors import RequestError
from muster.controller.jobupdate import parse_changes

NOW = 1_700_000_000


def names(changes: dict) -> list:
    return [(c.name, c.value) for c in parse_changes(changes, NOW)]


@pytest.mark.parametrize("key,name", [
    ("TimeLimit", "TimeLimit"), ("timel", "TimeLimit"), ("TIMEM", "TimeMin"),
    ("Pa", "Partition"), ("Pr", "Priority"), ("A", "Account"), ("Qo", "QOS"),
    ("De", "Dependency"), ("Dead", "Deadline"), ("Na", "Name"), ("JobN", "JobName"),
    ("Res", "ReservationName"), ("Requ", "Requeue"), ("ReqNodeL", "ReqNodeList"),
    ("NodeList", "NodeList"), ("Exc", "ExcNodeList"), ("Gr", "Gres"), ("St", "StartTime"),
    ("MinMemoryN", "MinMemoryNode"), ("MinMemoryC", "MinMemoryCPU"), ("Sh", "Shared"),
    ("ArrayTaskT", "ArrayTaskThrottle"),
])
def test_keys_abbreviate_as_scontrol_reads_them(key, name):
    value = {"TimeLimit": "5", "TimeMin": "5", "Priority": "5", "Requeue": "1",
             "MinMemoryNode": "5", "MinMemoryCPU": "5", "Shared": "no",
             "ArrayTaskThrottle": "2", "StartTime": "now", "Deadline": "now"}.get(name, "x")
    assert names({key: value})[0][0] == name


@pytest.mark.parametrize("key", ["T", "Time", "Re", "Req", "NumN", "Co", "bogus", "JobIdx", ""])
def test_unknown_or_too_short_keys_are_not_supported(key):
    with pytest.raises(RequestError) as e:
        parse_changes({key: "1"}, NOW)
    assert e.value.code == "update_not_supported"
    assert e.value.message == f"Update of this parameter is not supported: {key}=1"


def test_relative_time_limits():
    assert names({"TimeLimit": "+30"}) == [("TimeLimit", ("add", 30))]
    assert names({"TimeLimit+": "30"}) == [("TimeLimit", ("add", 30))]
    assert names({"TimeLimit-": "1:00:00"}) == [("TimeLimit", ("sub", 60))]
    assert names({"TimeLimit": "UNLIMITED"}) == [("TimeLimit", ("set", None))]


@pytest.mark.parametrize("changes,code", [
    ({}, "invalid_request"),
    ({"Comment": 5}, "invalid_request"),
    ({"TimeLimit": "+UNLIMITED"}, "invalid_time_limit"),
    ({"TimeLimit": "9" * 30}, "invalid_time_limit"),
    ({"Nice": "-2147483646"}, "invalid_nice"),
    ({"NumNodes": "0"}, "invalid_node_count"),
    ({"NumNodes": "3-1"}, "invalid_node_count"),
    ({"NumTasks": "-1"}, "bad_task_count"),
    ({"CPUsPerTask": "x"}, "invalid_cpu_count"),
    ({"StartTime": "soon"}, "invalid_time_value"),
    ({"Gres": "gpu:"}, "invalid_gres"),
    ({"Priority": "4294967295"}, "invalid_request"),
    ({"Comment": "a\0b"}, "invalid_request"),
])
def test_malformed_values_are_refused(changes, code):
    with pytest.raises(RequestError) as e:
        parse_changes(changes, NOW)
    assert e.value.code == code


STEP = {"job_id": 5, "array_job_id": None, "array_task_id": None, "step_id": 0, "uid": 1001,
        "user": "alice", "start_time": None, "time_limit": None, "state": "RUNNING",
        "partition": "gpu", "node_list": "node[1-2]", "num_nodes": 2, "num_cpus": 4,
        "num_tasks": 4, "name": "train", "tres": "cpu=4,mem=2G,node=2,gres/gpu=2",
        "resv_ports": "20000", "dist": "cyclic", "srun_host": "login1", "srun_pid": 4242}


def test_show_step_layout():
    assert fmt_scontrol.show_step(STEP) == (
        "StepId=5.0 UserId=1001 StartTime=Unknown TimeLimit=UNLIMITED\n"
        "   State=RUNNING Partition=gpu NodeList=node[1-2]\n"
        "   Nodes=2 CPUs=4 Tasks=4 Name=train Network=(null)\n"
        "   TRES=cpu=4,mem=2G,node=2,gres/gpu=2\n"
        "   ResvPorts=20000\n"
        "   CPUFreqReq=Default Dist=Cyclic\n"
        "   SrunHost:Pid=login1:4242\n\n")
    batch = {**STEP, "step_id": "batch", "array_job_id": 4, "array_task_id": 1, "dist": None,
             "srun_host": None, "srun_pid": 0, "resv_ports": None, "time_limit": 90}
    one = fmt_scontrol.show_step(batch, one_liner=True)
    assert one.startswith("StepId=4_1.batch UserId=1001 StartTime=Unknown TimeLimit=01:30:00 ")
    assert one.endswith(" ResvPorts=(null) CPUFreqReq=Default SrunHost:Pid=(null):0\n")
    assert one.count("\n") == 1


def test_squeue_steps_layout():
    out = fmt_squeue.render_steps([STEP, {**STEP, "step_id": "batch", "array_job_id": 4,
                                          "array_task_id": 1}], now=NOW)
    assert out.splitlines() == [
        "         STEPID     NAME PARTITION     USER      TIME NODELIST",
        "            5.0    train       gpu    alice      0:00 node[1-2]",
        "      4_1.batch    train       gpu    alice      0:00 node[1-2]"]
