"""Usage accounting below the CLI: the node's sampler on real processes (acctgather), the
controller's validation and aggregation (controller.usage), the store's usage table."""

import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from muster.agent import acctgather
from muster.controller.usage import aggregate, clean
from muster.protocol import agentmsg
from muster.store import sqlite as store_mod

MB = 1 << 20

# a task's session: a shell whose child holds memory; the holder prints "ready" once it does
HOLD = ("import sys, time; b = bytearray(int(sys.argv[1]) << 20)\n"
        "for i in range(0, len(b), 4096): b[i] = 1\n"
        "t0 = time.process_time()\n"
        "while time.process_time() - t0 < float(sys.argv[2]): pass\n"
        "print('ready', flush=True); time.sleep(60)\n")


def start_task(megs: int, burn: float = 0.0) -> subprocess.Popen:
    """A task as the supervisor starts one: in a session of its own, here a shell whose
    child (a grandchild of ours) holds ``megs`` MB."""
    p = subprocess.Popen(["/bin/sh", "-c", f'"{sys.executable}" -c "$0" {megs} {burn}; :', HOLD],
                         stdout=subprocess.PIPE, start_new_session=True, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def kill_sessions(*procs: subprocess.Popen) -> None:
    """SIGKILL each task's session (it may have ended) and reap it."""
    for q in procs:
        try:
            os.killpg(q.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        q.wait()


@pytest.mark.parametrize("text,secs", [
    ("task=1", 1), ("30", 30), ("energy=5,task=7,network=0", 7), ("", 30), ("task=0", 0),
    ("filesystem=9", 30)])
def test_frequency_is_read_as_slurm_writes_it(text, secs):
    assert acctgather.parse_frequency(text) == secs


def test_sampler_follows_the_tasks_session_and_counts_reaped_children():
    p = start_task(64, burn=0.3)
    other = start_task(8)  # another session: not ours
    try:
        s = acctgather.StepSampler(1)
        s.add(3, p.pid)
        assert s.next_due is not None
        s.sample()
        t = s.report()["tasks"][0]
        assert t["task"] == 3
        assert 64 * MB <= t["max_rss"] < 100 * MB  # the grandchild's memory, not the other's
        assert t["rss"] >= 64 * MB and t["max_vmem"] >= t["max_rss"]
        assert t["user_ms"] + t["sys_ms"] >= 250
        os.killpg(p.pid, signal.SIGTERM)
        _, _, ru = os.wait4(p.pid, 0)
        p.returncode = 0
        s.exited(0, ru)
        final = s.report()["tasks"][0]
        assert final["rss"] == 0 and final["max_rss"] == t["max_rss"]
        assert final["user_ms"] >= t["user_ms"] and s.next_due is None and not s.live
    finally:
        kill_sessions(p, other)


def test_final_figures_come_from_wait4_without_any_sample():
    """A task shorter than one interval is never sampled: its rusage still counts the CPU
    and peak memory of everything it waited for (a peak above the sampler's own size)."""
    # above the sampler's floor, which is this test process's own peak (pytest's, large in a
    # long run), as a real job's peak is above its small supervisor's
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    size = max(200 * MB, own + 64 * MB)
    code = (f"b = bytearray({size})\nfor i in range(0, len(b), 4096): b[i] = 1\n"
            "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass\n")
    p = subprocess.Popen(["/bin/sh", "-c", f'"{sys.executable}" -c "$0"', code],
                         start_new_session=True)
    s = acctgather.StepSampler(30)
    s.add(0, p.pid)
    _, _, ru = os.wait4(p.pid, 0)
    p.returncode = 0
    s.exited(0, ru)
    t = s.report()["tasks"][0]
    assert t["max_rss"] >= size and t["user_ms"] + t["sys_ms"] >= 150
    # a peak no larger than our own may be ours (carried across fork and exec): not taken
    small = acctgather.TaskUsage(0, 0, 1)
    small.finish(ru, floor=ru.ru_maxrss * 1024)
    assert small.max_rss == 0 and small.user_ms == t["user_ms"]


class FakeStepCgroup:
    """confine.StepCgroup's surface that the sampler uses."""

    def __init__(self, pids, usage):
        self._pids, self.hier, self.asked, self._usage = pids, self, [], usage

    def pids(self, k):
        return self._pids

    def task_rel(self, k):
        return f"job_1/step_batch/task_{k}"

    def usage(self, rel):
        self.asked.append(rel)
        return self._usage


def test_sampler_takes_cgroup_membership_and_cpu_when_confined():
    p = start_task(16)
    try:
        cg = FakeStepCgroup([p.pid], {"cpu_user_us": 9_000_000, "cpu_sys_us": 1_000_000,
                                      "mem_peak": 500 * MB, "mem_cur": None})
        s = acctgather.sampler_for({"acct": {"freq": 1}, "env": {}}, cg)
        s.add(0, p.pid)
        s.sample()
        assert s.report()["tasks"][0]["max_rss"] < 16 * MB  # only the listed shell
        os.killpg(p.pid, signal.SIGKILL)
        _, _, ru = os.wait4(p.pid, 0)
        p.returncode = 0
        s.exited(0, ru)
        t = s.report()["tasks"][0]
        assert t["user_ms"] == 9000 and t["sys_ms"] >= 1000 and cg.asked == [cg.task_rel(0)]
        assert t["max_rss"] < 16 * MB  # not the cgroup's peak: that counts page cache too
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def test_sampler_of_a_launch(tmp_path):
    assert acctgather.sampler_for({"env": {}}) is None  # accounting off
    s = acctgather.sampler_for({"acct": {"freq": 5}, "env": {"SLURM_STEP_GPUS": "1,3"}})
    assert s.freq == 5 and s.gpus == [1, 3]
    s.add(0, None)  # could not start: nothing to sample
    assert s.next_due is None
    s.write(str(tmp_path))
    assert json.loads((tmp_path / "usage.json").read_text())["tasks"][0]["task"] == 0


def test_forwarder_sends_a_sample_once_and_forgets_ended_steps(tmp_path):
    d = tmp_path / "job1.0"
    d.mkdir()
    f = acctgather.UsageForwarder()
    running = [(str(d), 1, 0, "batch")]
    assert f.collect("n1", running) == []  # no sample yet
    (d / "usage.json").write_text(json.dumps({"time": 1, "tasks": []}))
    msgs = f.collect("n1", running)
    assert msgs == [{"op": "step_usage", "job_id": 1, "run": 0, "step_id": "batch",
                     "node": "n1", "usage": {"time": 1, "tasks": []}, "pids": []}]
    assert f.collect("n1", running) == []
    time.sleep(0.01)
    (d / "usage.json").write_text(json.dumps({"time": 2, "tasks": []}))
    assert len(f.collect("n1", running)) == 1
    f.collect("n1", [])
    assert f.sent == {}


@pytest.mark.parametrize("bad", [
    None, [], {"tasks": "x"}, {"tasks": [{"task": -1}]}, {"tasks": [{"task": True}]},
    {"tasks": [{"task": 0, "max_rss": "big"}]}, {"tasks": [{"task": 0, "user_ms": 1 << 63}]},
    {"tasks": [{"task": 0, "rss": -5}]}, {"tasks": ["x"]}])
def test_malformed_reports_are_dropped_whole(bad):
    assert clean(bad) is None


def test_clean_keeps_known_fields_only():
    rep = clean({"time": "x", "tasks": [{"task": 2, "max_rss": 5, "evil": "y", "gpumem": 1}]})
    assert rep == {"time": 0, "tasks": [{"task": 2, "max_rss": 5, "gpumem": 1}]}


def test_aggregate_over_nodes_and_tasks():
    n1 = clean({"time": 5, "tasks": [{"task": 0, "user_ms": 100, "sys_ms": 50, "max_rss": 10,
                                      "rss": 4, "cpu_util": 90}]})
    n2 = clean({"time": 7, "tasks": [{"task": 1, "user_ms": 300, "max_rss": 30, "rss": 6},
                                     {"task": 2, "user_ms": 20, "max_rss": 30}]})
    u = aggregate({"n2": n2, "n1": n1})
    assert u["ntasks"] == 3 and u["user_ms"] == 420 and u["sys_ms"] == 50 and u["time"] == 7
    i = u["in"]
    assert (i["max"]["mem"], i["max_node"]["mem"], i["max_task"]["mem"]) == (30, "n2", 1)
    assert (i["min"]["mem"], i["min_node"]["mem"], i["min_task"]["mem"]) == (10, "n1", 0)
    assert (i["min"]["cpu"], i["min_task"]["cpu"]) == (20, 2)
    assert i["tot"]["mem"] == 70 and i["ave"]["mem"] == 70 / 3 and i["max"]["cpu"] == 300
    assert u["rss"] == 10 and u["cpu_util"] == 90 and u["gpuutil"] is None
    assert "gres/gpumem" not in i["max"]
    assert aggregate({"n1": None}) is None and aggregate({}) is None


def test_store_migrates_old_databases_and_keeps_usage(tmp_path):
    path = str(tmp_path / "muster.db")
    db = sqlite3.connect(path, isolation_level=None)
    for sql in store_mod.MIGRATIONS[:3]:  # a database from before usage accounting
        for stmt in filter(None, (s.strip() for s in sql.split(";"))):
            db.execute(stmt)
    db.execute("INSERT INTO meta VALUES('schema', '3')")
    db.execute("INSERT INTO steps VALUES(1, 'batch', ?)", (b'{"job_id":1,"step_id":"batch"}',))
    db.close()
    st = store_mod.SqliteStore(path)
    assert st.get_meta("schema") == str(len(store_mod.MIGRATIONS))
    assert st.steps_of([1]) == {1: [{"job_id": 1, "step_id": "batch"}]}
    assert st.usage_of([1]) == {}
    u = aggregate({"n1": clean({"time": 1, "tasks": [{"task": 0, "max_rss": 7, "user_ms": 3}]})})
    st.put_step_usage(1, "batch", u)
    assert st.usage_of([1, 2]) == {1: {"batch": u}}
    row = st._db.execute("SELECT max_rss, total_cpu_ms FROM step_usage").fetchone()
    assert row == (7, 3)
    st.close()


def test_gpu_figures_from_nvml_by_process(monkeypatch):
    """gres/gpumem: memory of the task's own processes on the step's GPUs; gres/gpuutil: the
    utilisation of the GPUs it runs on (NVML faked: no GPU needed)."""
    import types

    class Proc:
        def __init__(self, pid, mem):
            self.pid, self.usedGpuMemory = pid, mem
    me = os.getpid()
    devices = {0: ([Proc(me, 300 * MB), Proc(1, 999 * MB)], 40), 1: ([Proc(me, 100 * MB)], 0),
               2: ([Proc(me, 5 * MB)], 99)}  # GPU 2 is not the step's
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetComputeRunningProcesses=lambda h: devices[h][0],
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=devices[h][1]))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(acctgather, "_NVML", {})
    s = acctgather.StepSampler(1, gpus=[0, 1], pids_of=lambda k: [me])
    s.add(0, me)
    s.sample()
    devices[0] = ([Proc(me, 10 * MB)], 0)
    s.sample()
    t = s.report()["tasks"][0]
    assert (t["gpumem"], t["gpuutil"], t["max_gpuutil"]) == (400 * MB, 0, 40)
    monkeypatch.setattr(acctgather, "_NVML", {"mod": None})  # no NVML: no GPU figures
    s2 = acctgather.StepSampler(1, gpus=[0], pids_of=lambda k: [me])
    s2.add(0, me)
    s2.sample()
    assert "gpumem" not in s2.report()["tasks"][0]


def test_live_samples_are_kept_only_for_steps_running_there():
    from types import SimpleNamespace as NS

    from muster.controller.usage import UsageBook
    job = NS(job_id=5, state="RUNNING", restarts=0, batch=True, batch_host="n1")
    ctl = NS(state=NS(jobs={5: job}), steps=NS(steps={(5, 0): NS(nodes=["n1", "n2"])}))
    book = UsageBook(ctl)
    rep = {"time": 3, "tasks": [{"task": 0, "rss": 10, "cpu_util": 50}]}
    for node, msg in [
            ("n1", {"job_id": 5, "step_id": "batch", "usage": rep}),
            ("n2", {"job_id": 5, "step_id": 0, "usage": rep}),
            ("n2", {"job_id": 5, "step_id": "batch", "usage": rep}),  # not the batch host
            ("n3", {"job_id": 5, "step_id": 0, "usage": rep}),  # not a node of the step
            ("n1", {"job_id": 5, "step_id": 1, "usage": rep}),  # no such step
            ("n1", {"job_id": 5, "run": 1, "step_id": 0, "usage": rep}),  # another run
            ("n1", {"job_id": [5], "step_id": {}, "usage": rep}),  # garbage: ignored, no raise
            ("n1", {"job_id": 5, "step_id": 0, "usage": {"tasks": [{"task": "x"}]}})]:
        book.sample(node, msg)
    assert set(book.live) == {(5, 0), (5, "batch")} and list(book.live[(5, 0)]) == ["n2"]
    assert book.running(5, "batch")["rss"] == 10 and book.running(5, 7) is None
    assert book.by_job() == {5: [100, 20, None]}
    job.state = "COMPLETED"
    book.sample("n1", {"job_id": 5, "step_id": 0, "usage": rep})
    assert "n1" not in book.live[(5, 0)]
    book.forget(5)
    assert book.live == {}


# ---- process ids of the live sample (sstat -i) -------------------------------------------------

def test_live_sample_lists_the_tasks_processes_and_the_final_report_none(tmp_path):
    p = start_task(8)
    other = start_task(8)  # another session: not the step's
    try:
        s = acctgather.StepSampler(1)
        s.add(0, p.pid)
        s.sample()
        s.write(str(tmp_path))
        live = json.loads((tmp_path / "usage.json").read_text())
        session = [int(n) for n in os.listdir("/proc") if n.isdigit()
                   and acctgather._stat_fields(int(n)) is not None
                   and int(acctgather._stat_fields(int(n))[3]) == p.pid]
        assert p.pid in live["pids"] and len(live["pids"]) >= 2  # the shell and its python
        assert set(live["pids"]) <= set(session) | {p.pid} and other.pid not in live["pids"]
        assert live["pids"] == sorted(live["pids"])
        assert "pids" not in s.report()  # the final figures (status.json) carry none
        msg = acctgather.UsageForwarder().collect("n1", [(str(tmp_path), 4, 0, 0)])[0]
        assert msg["pids"] == live["pids"] and "pids" not in msg["usage"]
        typed = agentmsg.from_agent(msg)
        assert isinstance(typed, agentmsg.StepUsage) and typed.pids == live["pids"]
        os.killpg(p.pid, signal.SIGKILL)
        _, _, ru = os.wait4(p.pid, 0)
        p.returncode = 0
        s.exited(0, ru)
        assert s.pids == []
    finally:
        kill_sessions(p, other)


def test_confined_sample_lists_the_cgroup_members():
    me = os.getpid()
    s = acctgather.StepSampler(1, pids_of=lambda k: [me, 999_999_999])  # the second is gone
    s.add(0, me)
    s.sample()
    assert s.pids == [me]


@pytest.mark.parametrize("pids", [["1"], [1.5], [True], "1,2"])
def test_step_usage_pids_are_typed(pids):
    with pytest.raises(agentmsg.Malformed):
        agentmsg.from_agent({"op": "step_usage", "job_id": 1, "step_id": 0, "pids": pids})


def test_controller_keeps_pids_per_node_for_the_live_sample_only():
    from types import SimpleNamespace as NS

    from muster.controller.usage import UsageBook, clean_pids
    stored = []
    job = NS(job_id=5, state="RUNNING", restarts=0, batch=False, batch_host=None)
    ctl = NS(state=NS(jobs={5: job}, store=NS(put_step_usage=lambda *a: stored.append(a))),
             steps=NS(steps={(5, 0): NS(nodes=["n1", "n2"])}))
    book = UsageBook(ctl)
    rep = {"time": 3, "tasks": [{"task": 0, "rss": 10}]}
    book.sample("n2", {"job_id": 5, "step_id": 0, "usage": rep, "pids": [40, 41]})
    book.sample("n1", {"job_id": 5, "step_id": 0, "usage": rep, "pids": [7]})
    assert book.pids(5, 0) == {"n1": [7], "n2": [40, 41]} and book.pids(5, 1) == {}
    book.sample("n1", {"job_id": 5, "step_id": 0, "usage": rep, "pids": [8, 0]})  # 0: no pid
    assert book.pids(5, 0)["n1"] == []
    assert book.running(5, 0)["rss"] == 20  # the ids do not disturb the figures
    assert [clean_pids(v) for v in ([3, 2], None, [-1], [1 << 22], [1] * 100_001)] == \
        [[3, 2], [], [], [], []]
    book.finish(5, 0, {"n1": {"time": 4, "tasks": [{"task": 0, "max_rss": 9}]}})
    assert book.pids(5, 0) == {} and "pids" not in stored[0][2]
