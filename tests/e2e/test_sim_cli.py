"""`muster sim` through the real console script: a small window of a real trace, --json."""

import os as _os  # noqa: E402
import sys as _sys  # noqa: E402
_sys.path.insert(0, _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))))
from shared_path import SHARED  # noqa: E402
import json
import os
import pathlib
import subprocess
import sys

import pytest

BIN = pathlib.Path(sys.executable).parent / "muster"
TRACES = str(SHARED / "traces")


def _muster(*args, check=True):
    p = subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=60)
    if check:
        assert p.returncode == 0, p.stderr
    return p


@pytest.mark.skipif(not os.path.isdir(TRACES), reason="shared traces not present")
def test_sim_json_on_a_window_of_kth():
    p = _muster("sim", f"{TRACES}/swf/KTH-SP2-1996-2.1-cln.swf.gz", "--start-job", "100",
                "--jobs", "500", "--policy", "fifo", "--json")
    out = json.loads(p.stdout)
    m = out["metrics"]
    assert m["jobs"] == 500 and m["policy"] == "fifo"
    assert 0 < m["utilization"] <= 1 and m["bounded_slowdown_mean"] >= 1
    assert m["wait_p99_s"] >= m["wait_p95_s"] >= m["wait_median_s"] >= 0
    assert 0 < m["fairness_jain"] <= 1
    assert "100 CPUs" in out["machine"]
    assert p.stderr == ""  # no progress bar when stderr is not a terminal


def test_sim_on_a_synthetic_gpu_trace_with_flags_and_seeded_windows(tmp_path):
    trace = tmp_path / "itp.csv"
    rows = [f"j{i},{i * 30},{100 + (i * 37) % 900},{[1, 2, 4, 8, 16][i % 5]}" for i in range(300)]
    trace.write_text("job_id,submission_time,duration,num_gpu\n" + "\n".join(rows) + "\n")
    p = _muster("sim", str(trace), "--nodes", "4", "--gpus-per-node", "8", "--json")
    m = json.loads(p.stdout)["metrics"]
    assert m["jobs"] == 300 and 0 < m["gpu_utilization"] <= 1
    assert "gpu_idle_while_waiting" in m
    a = _muster("sim", str(trace), "--nodes", "2", "--jobs", "50", "--windows", "3",
                "--seed", "7", "--json")
    b = _muster("sim", str(trace), "--nodes", "2", "--jobs", "50", "--windows", "3",
                "--seed", "7", "--json")
    wa, wb = json.loads(a.stdout), json.loads(b.stdout)
    assert [w["start_job"] for w in wa["windows"]] == [w["start_job"] for w in wb["windows"]]
    assert wa["mean"] == wb["mean"]


def test_sim_errors_are_one_line(tmp_path):
    p = _muster("sim", str(tmp_path / "missing.swf"), check=False)
    assert p.returncode == 1 and p.stderr.startswith("muster sim: error:")
    assert "Traceback" not in p.stderr


def test_sim_says_what_of_the_config_it_does_not_model(tmp_path):
    conf = tmp_path / "p.conf"
    conf.write_text("ClusterName=x\nSlurmctldHost=localhost\nPreemptType=preempt/qos\n"
                    "PreemptMode=REQUEUE\nNodeName=n1 CPUs=4 RealMemory=4000\n"
                    "PartitionName=p Nodes=n1 Default=YES State=UP\n")
    trace = tmp_path / "t.swf"
    trace.write_text("; MaxProcs: 4\n1 0 -1 10 1 -1 -1 1 60 -1 1 1 -1 -1 -1 -1 -1 -1\n")
    p = _muster("sim", str(trace), "--config", str(conf))
    assert "note     PreemptType=preempt/qos is not simulated" in p.stdout
    j = json.loads(_muster("sim", str(trace), "--config", str(conf), "--json").stdout)
    assert j["notes"] == ["PreemptType=preempt/qos is not simulated (no job is preempted)"]
    bad = _muster("sim", str(trace), "--policy", "config", check=False)
    assert bad.returncode == 1 and "--policy config needs --config" in bad.stderr
    win = _muster("sim", str(trace), "--jobs", "1", "--windows", "2", "--plot", str(tmp_path),
                  check=False)
    assert win.returncode == 1 and "describe one replay" in win.stderr
