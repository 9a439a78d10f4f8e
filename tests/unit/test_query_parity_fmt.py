"""Pure logic of issue 19: scontrol show config's lines from a slurm.conf, reservation
keywords as scontrol matches them, squeue -s's step order and formats."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from shared_path import SHARED  # noqa: E402

from muster.cli import fmt_squeue  # noqa: E402
from muster.cli.scontrol import parse_reservation, resv_key  # noqa: E402
from muster.config.showconf import show_config_items  # noqa: E402
from muster.config.slurmconf import load  # noqa: E402

REF = SHARED / "reference" / "slurm-22.05"


def test_show_config_matches_slurm_for_the_reference_conf():
    """The reference cluster's own slurm.conf gives the lines its slurmctld printed, but for
    what is that host's (boot time, plugin directory, the file's path)."""
    ref = (REF / "scontrol_show_config.txt").read_text().splitlines()
    want = ref[1:ref.index("")]
    cfg = load(str(REF / "slurm.conf"))
    got = [f"{k:<23} = {v}" for k, v in
           show_config_items(cfg, boot_time=None, next_job_id=50, version="22.05.8")]
    # SlurmUser's uid is this host's (no such user here: "N/A")
    host_specific = ("BOOT_TIME ", "PluginDir ", "SLURM_CONF ", "SlurmUser ")
    assert [ln.split(" = ")[0] for ln in got] == [ln.split(" = ")[0] for ln in want]
    diff = [(a, b) for a, b in zip(want, got) if a != b]
    assert [a for a, _b in diff if not a.startswith(host_specific)] == [], diff
    assert f"SLURM_CONF              = {REF / 'slurm.conf'}" in got
    assert next(v for v in got if v.startswith("SlurmUser ")).split(" = ")[1].startswith("slurm(")


def test_show_config_defaults_and_never_other_keys(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=c\nSlurmctldHost=h(10.0.0.1)\nAccountingStoragePass=secret\n"
                    "DefMemPerNode=2048\nNodeName=n1 CPUs=2\nPartitionName=p Nodes=n1\n")
    items = show_config_items(load(str(conf)), boot_time=0, next_job_id=7, version="x")
    vals = dict(items)
    assert "secret" not in repr(items)
    assert vals["DefMemPerNode"] == "2048" and "DefMemPerCPU" not in vals
    assert vals["SlurmctldHost[0]"] == "h(10.0.0.1)" and vals["NEXT_JOB_ID"] == "7"
    assert vals["KillWait"] == "30 sec" and vals["MaxNodeCount"] == "1"
    assert vals["OverTimeLimit"] == "0 min" and vals["AccountingStorageEnforce"] == "none"


@pytest.mark.parametrize("key,field", [
    ("start", "start"), ("StartTime", "start"), ("st", "start"), ("s", "start"),
    ("duration", "duration"), ("dur", "duration"), ("users", "users"), ("user", "users"),
    ("nodes", "nodes"), ("NODES", "nodes"), ("nodecnt", "node_cnt"), ("reservationname", "name"),
    ("r", "name"), ("reservation", "name"), ("flags", "flags"), ("fl", "flags"),
    ("accounts", "accounts"), ("a", "accounts"), ("partition", "partition"),
    ("corecnt", "core_cnt"), ("cpucount", "core_cnt"), ("tres", "tres"), ("name", "name"),
])
def test_reservation_keywords(key, field):
    assert resv_key(key) == field


@pytest.mark.parametrize("key", ["node", "f", "bogus", "nodesx", "", "startt1me"])
def test_reservation_keywords_refused(key):
    assert resv_key(key) is None


def test_reservation_lowercase_spec():
    spec = parse_reservation(["start=now", "duration=60", "users=root", "nodes=node1",
                              "reservationname=x", "flags=maint"], 100)
    assert spec == {"start": 100, "duration": 60, "users": ["root"], "nodes": ["node1"],
                    "name": "x", "flags": ["maint"]}
    with pytest.raises(ValueError) as exc:
        parse_reservation(["bogus=1"], 0)
    assert exc.value.args == ("bogus=1", "parameter")
    with pytest.raises(ValueError) as exc:
        parse_reservation(["st=never"], 0)
    assert exc.value.args == ("st=never", "start")


def _step(job, step, part="gpu", user="a", **kw):
    return {"job_id": job, "step_id": step, "partition": part, "user": user, "uid": 1,
            "name": "n", "start_time": 100, "node_list": "node1", "num_tasks": 1, **kw}


def test_step_order_srun_steps_before_batch():
    steps = [_step(9, "batch"), _step(3, 1), _step(3, "batch"), _step(3, 0), _step(2, "extern"),
             _step(2, "batch"), _step(5, 0, part="debug")]
    ids = [(s["job_id"], s["step_id"]) for s in fmt_squeue.sort_steps(steps)]
    assert ids == [(5, 0), (2, "batch"), (2, "extern"), (3, 0), (3, 1), (3, "batch"),
                   (9, "batch")]
    ids = [(s["job_id"], s["step_id"]) for s in fmt_squeue.sort_steps(steps, "-i")]
    assert ids == [(9, "batch"), (5, 0), (3, "batch"), (3, 1), (3, 0), (2, "extern"),
                   (2, "batch")]
    with pytest.raises(ValueError):
        fmt_squeue.sort_steps(steps, "Z")


def test_step_formats():
    steps = [_step(3, 0, num_tasks=4), _step(3, "batch")]
    out = fmt_squeue.render_steps(steps, now=165)
    assert out.splitlines() == [
        "         STEPID     NAME PARTITION     USER      TIME NODELIST",
        "            3.0        n       gpu        a      1:05 node1",
        "        3.batch        n       gpu        a      1:05 node1"]
    errors: list[str] = []
    out = fmt_squeue.render_steps(steps, fmt="%i %A %D", now=165, errors=errors, noheader=True)
    assert out.splitlines() == ["3.0 4 %D", "3.batch 1 %D"] and errors == ["D"]
    errors = []
    out = fmt_squeue.render_steps(steps[:1], fmt_long="stepid:6,bogus,numtasks:.3", now=0,
                                  errors=errors)
    assert out.splitlines() == ["STEPIDTAS", "3.0     4"] and errors == ["bogus"]
