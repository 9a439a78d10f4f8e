"""--json/--yaml output (muster.common.fmt_json) against Slurm 23.11's data_parser v0.0.40 shape."""

import json
import subprocess
import sys

import pytest

from records_fixture import NOW, busy_jobs, busy_nodes, job, partitions, ts  # noqa: F401

from muster.common import fmt_json

NUMKEYS = {"set", "infinite", "number"}


def is_num(v) -> bool:
    return isinstance(v, dict) and set(v) == NUMKEYS and isinstance(v["set"], bool) \
        and isinstance(v["infinite"], bool) and isinstance(v["number"], (int, float))


def check_meta(doc, plugin):
    assert set(doc) >= {"meta", "errors", "warnings"}
    m = doc["meta"]
    assert m["plugin"]["data_parser"] == "data_parser/v0.0.40"
    assert m["plugin"]["type"] == plugin
    assert set(m["client"]) == {"source", "user", "group"}
    assert isinstance(m["command"], list)
    v = m["slurm"]["version"]
    assert set(v) == {"major", "micro", "minor"} and all(isinstance(x, str) for x in v.values())
    assert m["slurm"]["release"].startswith("23.11")
    assert doc["errors"] == [] and doc["warnings"] == []


def test_squeue_json_v0040_shape():
    jobs = busy_jobs()
    doc = fmt_json.squeue_json(jobs, NOW, cluster="c1")
    check_meta(doc, "openapi/slurmctld")
    assert is_num(doc["last_update"]) and doc["last_update"]["number"] == NOW
    assert is_num(doc["last_backfill"])
    assert [j["job_id"] for j in doc["jobs"]] == [j["job_id"] for j in jobs]
    for out, rec in zip(doc["jobs"], jobs):
        assert isinstance(out["job_state"], list) and out["job_state"][0] == rec["state"]
        for key in ("time_limit", "submit_time", "start_time", "end_time", "eligible_time",
                    "priority", "cpus", "node_count", "tasks", "array_job_id", "array_task_id",
                    "cpus_per_task", "memory_per_cpu", "memory_per_node"):
            assert is_num(out[key]), key
        for key in ("exit_code", "derived_exit_code"):
            ec = out[key]
            assert set(ec) == {"status", "return_code", "signal"}
            assert isinstance(ec["status"], list) and is_num(ec["return_code"])
            assert set(ec["signal"]) == {"id", "name"} and is_num(ec["signal"]["id"])
        assert out["user_name"] == rec["user"] and out["user_id"] == rec["uid"]
        assert out["partition"] == rec["partition"] and out["cluster"] == "c1"
        assert out["current_working_directory"] == rec["work_dir"]
        assert isinstance(out["hold"], bool) and isinstance(out["flags"], list)
    run = doc["jobs"][0]
    assert run["job_state"] == ["RUNNING"]
    assert run["time_limit"] == {"set": True, "infinite": False, "number": 60}
    assert run["nodes"] == "node[1-2]"
    assert run["exit_code"]["status"] == ["PENDING"]  # not ended yet


def test_job_json_special_values():
    unl = fmt_json.job_json(job(job_id=7, time_limit=None))
    assert unl["time_limit"] == {"set": True, "infinite": True, "number": 0}
    assert unl["array_task_id"] == {"set": False, "infinite": False, "number": 0}
    failed = fmt_json.job_json(job(job_id=8, state="FAILED", exit_code=3, end_time=ts("17:40:00")))
    assert failed["exit_code"]["status"] == ["ERROR"]
    assert failed["exit_code"]["return_code"]["number"] == 3
    sig = fmt_json.job_json(job(job_id=9, state="CANCELLED", exit_code=0, exit_signal=15))
    assert sig["exit_code"]["status"] == ["SIGNALED"]
    assert sig["exit_code"]["signal"] == {"id": {"set": True, "infinite": False, "number": 15},
                                          "name": "SIGTERM"}
    ok = fmt_json.job_json(job(job_id=10, state="COMPLETED"))
    assert ok["exit_code"]["status"] == ["SUCCESS"]
    held = fmt_json.job_json(job(job_id=11, hold="user", priority=0, reason="JobHeldUser"))
    assert held["hold"] is True and held["state_reason"] == "JobHeldUser"
    comp = fmt_json.job_json(job(job_id=12, state="COMPLETING"))
    assert comp["job_state"] == ["COMPLETING"]


def test_sinfo_json_groups_by_partition_and_state():
    doc = fmt_json.sinfo_json(partitions(), busy_nodes(), NOW, cluster="c1")
    check_meta(doc, "openapi/slurmctld")
    groups = doc["sinfo"]
    # gpu and debug each have MIXED (node1-3) and IDLE (node4)
    keys = [(g["partition"]["name"], tuple(g["node"]["state"]), tuple(g["nodes"]["nodes"]))
            for g in groups]
    assert ("gpu", ("MIXED",), ("node1", "node2", "node3")) in keys
    assert ("debug", ("IDLE",), ("node4",)) in keys
    g = next(x for x in groups if x["partition"]["name"] == "gpu" and x["node"]["state"] == ["MIXED"])
    assert g["cpus"]["allocated"] == 21 and g["cpus"]["total"] == 48
    assert g["nodes"]["total"] == 3 and g["nodes"]["allocated"] == 3
    assert g["memory"]["allocated"] == 8192 + 8192 + 9216
    assert is_num(g["memory"]["free"]["minimum"])
    assert g["gres"]["total"] == "gpu:8"
    part = g["partition"]
    assert part["maximums"]["time"] == {"set": True, "infinite": True, "number": 0}
    assert part["partition"]["state"] == ["UP"] and part["nodes"]["configured"] == "node[1-4]"
    dbg = next(x for x in groups if x["partition"]["name"] == "debug")["partition"]
    assert dbg["maximums"]["time"]["number"] == 60


def test_nodes_and_partitions_json():
    doc = fmt_json.nodes_json(busy_nodes(), NOW)
    n1 = doc["nodes"][0]
    assert n1["name"] == "node1" and n1["state"] == ["MIXED"] and n1["alloc_cpus"] == 8
    assert is_num(n1["boot_time"]) and is_num(n1["free_mem"])
    drained = fmt_json.node_json(busy_nodes()[3] | {"flags": ["DRAIN"], "reason": "maint"})
    assert drained["state"] == ["IDLE", "DRAIN"] and drained["reason"] == "maint"
    p = fmt_json.partitions_json(partitions(), NOW)["partitions"]
    assert [x["name"] for x in p] == ["gpu", "debug"] and p[0]["flags"] == ["DEFAULT"]


def test_sacct_json_with_steps_and_tres():
    rec = job(job_id=50, state="COMPLETED", submit_time=ts("17:30:00"),
              eligible_time=ts("17:30:00"), start_time=ts("17:30:01"),
              end_time=ts("17:30:11"), time_limit=10, node_list="node1", num_nodes=1,
              tres_alloc="cpu=2,mem=2G,node=1,billing=2,gres/gpu=1",
              steps=[{"job_id": 50, "step_id": "batch", "name": "batch", "state": "COMPLETED",
                      "exit_code": 0, "exit_signal": 0, "start_time": ts("17:30:01"),
                      "end_time": ts("17:30:11"), "node_list": "node1", "num_nodes": 1,
                      "num_cpus": 2, "num_tasks": 1,
                      "tres_alloc": "cpu=2,mem=2G,node=1,gres/gpu=1"}])
    doc = fmt_json.sacct_json([rec], ts("17:31:00"), cluster="c1")
    check_meta(doc, "openapi/slurmdbd")
    j = doc["jobs"][0]
    assert j["state"] == {"current": ["COMPLETED"], "reason": "None"}
    assert j["time"]["elapsed"] == 10 and j["time"]["start"] == ts("17:30:01")
    assert j["time"]["limit"] == {"set": True, "infinite": False, "number": 10}
    assert j["exit_code"]["status"] == ["SUCCESS"]
    tres = {t["type"] + (("/" + t["name"]) if t["name"] else ""): t["count"]
            for t in j["tres"]["allocated"]}
    assert tres == {"cpu": 2, "mem": 2048, "node": 1, "billing": 2, "gres/gpu": 1}
    st = j["steps"][0]
    assert st["step"] == {"id": "50.batch", "name": "batch"}
    assert st["state"] == ["COMPLETED"] and st["nodes"]["list"] == ["node1"]
    assert st["time"]["elapsed"] == 10


def test_yaml_round_trips_to_the_same_document():
    yaml = pytest.importorskip("yaml")
    doc = fmt_json.squeue_json(busy_jobs(), NOW)
    doc["jobs"][0]["comment"] = "a: b # not a comment\n'quoted' \"x\""
    doc["jobs"][0]["name"] = "123"
    doc["jobs"][1]["name"] = "yes"
    text = fmt_json.to_yaml(doc)
    assert text.startswith("---\n")
    assert yaml.safe_load(text) == json.loads(json.dumps(doc))
    assert yaml.safe_load(fmt_json.to_yaml({"a": [], "b": {}, "c": [[1, 2], {"d": None}]})) == \
        {"a": [], "b": {}, "c": [[1, 2], {"d": None}]}


def test_fmt_json_is_stdlib_only():
    code = ("import sys; import muster.common.fmt_json; "
            "bad=[m for m in sys.modules if m.split('.')[0] in "
            "('msgspec','starlette','jwt','prometheus_client','asyncio','yaml')]; print(bad)")
    out = subprocess.check_output([sys.executable, "-c", code], text=True).strip()
    assert out == "[]"
