"""srun and salloc end to end: real cluster, real CLI, real processes.

Covers the step's task layout and environment, GPU binding with the cluster's fake GPUs, I/O
(line integrity, labels, per-task files, stdin), signals and exit codes, node death, salloc,
and the errors srun prints for requests that cannot work.
"""

import os
import re
import signal
import subprocess
import time

import pytest

from cluster import private_cluster, wait_for


def read(path):
    with open(path) as fh:
        return fh.read()


def label_env(out: str) -> dict[int, dict[str, str]]:
    """``srun -l env`` output → {task: {VAR: value}}."""
    tasks: dict[int, dict[str, str]] = {}
    for line in out.splitlines():
        t, _, rest = line.partition(": ")
        k, sep, v = rest.partition("=")
        if sep:
            tasks.setdefault(int(t), {})[k] = v
    return tasks


def marker_procs(marker: str) -> list[int]:
    """Pids whose command line contains ``marker`` (a test's own sleep argument)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().split(") ", 1)[1][0] == "Z":
                    continue
        except OSError:
            continue
        if marker in cmd:
            found.append(int(pid))
    return found


def no_marker_left(marker: str, timeout: float = 15.0) -> None:
    wait_for(lambda: not marker_procs(marker), timeout, what=f"no process with {marker!r} left")


class Bg:
    """A CLI command running in the background, its stdout/stderr in files."""

    def __init__(self, cluster, argv, cwd, name="bg", stdin=subprocess.DEVNULL):
        self.out_path = os.path.join(cwd, f"{name}.out")
        self.err_path = os.path.join(cwd, f"{name}.err")
        self._out = open(self.out_path, "wb")
        self._err = open(self.err_path, "wb")
        self.p = subprocess.Popen(argv, stdout=self._out, stderr=self._err, stdin=stdin,
                                  env=cluster.env, cwd=cwd)

    @property
    def out(self):
        return read(self.out_path)

    @property
    def err(self):
        return read(self.err_path)

    def wait(self, timeout=30):
        try:
            return self.p.wait(timeout)
        finally:
            self._out.close()
            self._err.close()

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.wait()


def job_id_by_name(cluster, name):
    r = cluster.run(["squeue", "-h", "-n", name, "-o", "%i"])
    ids = r.out.split()
    return int(ids[0]) if ids else None


def running_job(cluster, name):
    return wait_for(lambda: (j := job_id_by_name(cluster, name)) and
                    cluster.run(["squeue", "-h", "-j", str(j), "-o", "%T"]).out.strip() == "RUNNING" and j,
                    what=f"job {name} running")


# ------------------------------------------------------------------------------------------------
# task layout and environment
# ------------------------------------------------------------------------------------------------


def test_task_env_two_nodes_two_tasks_each(cluster, workdir):
    r = cluster.run(["srun", "-l", "-N2", "--ntasks-per-node=2", "env"], cwd=workdir)
    assert r.rc == 0, r
    tasks = label_env(r.out)
    assert sorted(tasks) == [0, 1, 2, 3]
    nodes = [tasks[t]["SLURMD_NODENAME"] for t in range(4)]
    assert nodes[0] == nodes[1] != nodes[2] == nodes[3]
    first, second = nodes[0], nodes[2]
    assert int(first[4:]) < int(second[4:])
    expanded = cluster.run(["scontrol", "show", "hostnames", tasks[0]["SLURM_STEP_NODELIST"]]).out.split()
    assert expanded == [first, second]
    for t, e in tasks.items():
        local, nid = t % 2, t // 2
        assert e["SLURM_PROCID"] == e["RANK"] == str(t)
        assert e["SLURM_LOCALID"] == e["LOCAL_RANK"] == str(local)
        assert e["SLURM_NODEID"] == e["NODE_RANK"] == e["GROUP_RANK"] == str(nid)
        assert e["SLURM_GTIDS"] == ("0,1" if nid == 0 else "2,3")
        assert e["SLURM_STEP_ID"] == e["SLURM_STEPID"] == "0"
        assert e["SLURM_STEP_NUM_NODES"] == e["SLURM_NNODES"] == "2"
        assert e["SLURM_STEP_NUM_TASKS"] == e["SLURM_NTASKS"] == e["WORLD_SIZE"] == "4"
        assert e["SLURM_STEP_TASKS_PER_NODE"] == e["SLURM_TASKS_PER_NODE"] == "2(x2)"
        assert e["LOCAL_WORLD_SIZE"] == "2"
        assert e["SLURM_JOB_ID"] == e["SLURM_JOBID"] == tasks[0]["SLURM_JOB_ID"]
        assert e["SLURM_JOB_NODELIST"] == e["SLURM_STEP_NODELIST"]
        assert e["SLURM_LABELIO"] == "1"
        assert int(e["SLURM_TASK_PID"]) > 1
    # the rendezvous point is the same for every task: the first step node's address
    assert len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in tasks.values()}) == 1
    addr = tasks[0]["MASTER_ADDR"]
    assert re.fullmatch(r"127\.0\.1\.\d+", addr), addr
    conf = read(cluster.conf)
    assert re.search(rf"NodeName={first}\s.*NodeAddr={re.escape(addr)}\b", conf), (first, addr)
    assert 1024 <= int(tasks[0]["MASTER_PORT"]) <= 65535


def test_cyclic_distribution(cluster, workdir):
    r = cluster.run(["srun", "-l", "-N2", "--ntasks-per-node=2", "-m", "cyclic", "env"], cwd=workdir)
    assert r.rc == 0, r
    tasks = label_env(r.out)
    by_node: dict[str, list[int]] = {}
    for t in sorted(tasks):
        by_node.setdefault(tasks[t]["SLURMD_NODENAME"], []).append(t)
    assert sorted(by_node.values()) == [[0, 2], [1, 3]]
    for t, e in tasks.items():
        assert e["SLURM_DISTRIBUTION"] == "cyclic"
        assert e["SLURM_NODEID"] == str(t % 2)
        assert e["SLURM_LOCALID"] == str(t // 2)
        assert e["SLURM_GTIDS"] == ("0,2" if t % 2 == 0 else "1,3")


def test_seven_tasks_on_four_nodes_are_balanced(cluster, workdir):
    """Slurm's block layout balances: ceil(7/4) on the first 7 mod 4 nodes → ``2(x3),1``."""
    r = cluster.run(["srun", "-l", "-n7", "-N4", "env"], cwd=workdir)
    assert r.rc == 0, r
    tasks = label_env(r.out)
    assert sorted(tasks) == list(range(7))
    assert {e["SLURM_STEP_TASKS_PER_NODE"] for e in tasks.values()} == {"2(x3),1"}
    assert {e["SLURM_TASKS_PER_NODE"] for e in tasks.values()} == {"2(x3),1"}
    assert [tasks[t]["SLURM_NODEID"] for t in range(7)] == ["0", "0", "1", "1", "2", "2", "3"]


def test_steps_inside_batch_job(cluster, workdir):
    """Steps of a batch job are N.0, N.1, … (env and sacct); srun inherits the job geometry;
    ``scontrol show hostnames`` without argument expands SLURM_JOB_NODELIST."""
    script = os.path.join(workdir, "steps.sh")
    with open(script, "w") as fh:
        fh.write("#!/bin/bash\n#SBATCH -N2\n#SBATCH --ntasks-per-node=2\n"
                 "srun -l printenv SLURM_STEP_ID > step0.txt\n"
                 "srun printenv SLURM_STEP_ID SLURM_STEP_NUM_TASKS > step1.txt\n"
                 "scontrol show hostnames > hosts.txt\n"
                 "echo $SLURM_JOB_NODELIST > nodelist.txt\n")
    jid = cluster.sbatch("-o", "steps.out", script, cwd=workdir)
    assert cluster.wait_done(jid) == "COMPLETED", read(os.path.join(workdir, "steps.out"))
    step0 = sorted(read(os.path.join(workdir, "step0.txt")).splitlines())
    assert step0 == ["0: 0", "1: 0", "2: 0", "3: 0"]
    assert sorted(read(os.path.join(workdir, "step1.txt")).split()) == ["1"] * 4 + ["4"] * 4
    nodelist = read(os.path.join(workdir, "nodelist.txt")).strip()
    expected = cluster.run(["scontrol", "show", "hostnames", nodelist]).out.split()
    assert len(expected) == 2
    assert read(os.path.join(workdir, "hosts.txt")).split() == expected
    r = cluster.run(["sacct", "-j", str(jid), "-P", "-n", "-o", "JobID,State"])
    rows = dict(line.split("|") for line in r.out.splitlines())
    assert rows.get(f"{jid}.0") == "COMPLETED", r.out
    assert rows.get(f"{jid}.1") == "COMPLETED", r.out


def test_srun_honours_slurm_cpus_per_task(cluster, workdir):
    """23.11 semantics: srun inside ``sbatch -c2 -n2`` reads SLURM_CPUS_PER_TASK."""
    jid = cluster.sbatch("-N1", "-n2", "-c2", "-o", "cpt.out", "--wrap",
                         "srun -l sh -c 'echo $SLURM_CPUS_PER_TASK $SLURM_CPUS_ON_NODE'", cwd=workdir)
    assert cluster.wait_done(jid) == "COMPLETED"
    assert sorted(read(os.path.join(workdir, "cpt.out")).splitlines()) == ["0: 2 4", "1: 2 4"]


# ------------------------------------------------------------------------------------------------
# GPUs (the cluster's fake GPUs: 8 per node)
# ------------------------------------------------------------------------------------------------


def test_gres_all_eight_gpus(cluster, workdir):
    r = cluster.run(["srun", "--gres=gpu:8", "-N1", "printenv", "CUDA_VISIBLE_DEVICES"], cwd=workdir)
    assert r.rc == 0, r
    assert r.out == "0,1,2,3,4,5,6,7\n"


def test_gpus_per_task_one_each(cluster, workdir):
    r = cluster.run(["srun", "-l", "-N1", "-n4", "--gpus-per-task=1", "printenv", "CUDA_VISIBLE_DEVICES"],
                    cwd=workdir)
    assert r.rc == 0, r
    got = dict(line.split(": ") for line in r.out.splitlines())
    assert sorted(got) == ["0", "1", "2", "3"]
    assert len(set(got.values())) == 4
    assert all(v.isdigit() for v in got.values())


def test_gpu_bind_maps_each_task_to_its_gpus(cluster, workdir):
    """--gpu-bind reaches the step layout: map_gpu gives task i the i-th listed GPU of the
    step (indices within the step's GPUs), single:1 one GPU each."""
    r = cluster.run(["srun", "-l", "-N1", "-n2", "--gres=gpu:2", "--gpu-bind=map_gpu:1,0",
                     "printenv", "CUDA_VISIBLE_DEVICES"], cwd=workdir)
    assert r.rc == 0, r
    got = dict(line.split(": ") for line in r.out.splitlines())
    assert sorted(got) == ["0", "1"] and got["0"] != got["1"], got
    r2 = cluster.run(["srun", "-l", "-N1", "-n2", "--gres=gpu:2", "printenv",
                      "CUDA_VISIBLE_DEVICES"], cwd=workdir)
    unbound = dict(x.split(": ") for x in r2.out.splitlines())
    assert r2.rc == 0 and unbound["0"] == unbound["1"] and unbound["0"].count(",") == 1, r2
    r3 = cluster.run(["srun", "-l", "-N1", "-n2", "--gres=gpu:2", "--gpu-bind=single:1",
                      "printenv", "CUDA_VISIBLE_DEVICES"], cwd=workdir)
    assert r3.rc == 0, r3
    single = dict(line.split(": ") for line in r3.out.splitlines())
    assert all(v.isdigit() for v in single.values()) and single["0"] != single["1"], single


def test_gpu_jobs_on_one_node_disjoint_and_third_waits(cluster, workdir):
    """Two ``--gres=gpu:4`` jobs on node3 get disjoint sets; a third waits (Resources) until one
    ends, then runs on the freed GPUs."""
    tag = f"g{os.getpid()}"
    cmd = "echo $CUDA_VISIBLE_DEVICES; exec sleep 3101"
    a = Bg(cluster, ["srun", "-w", "node3", "--gres=gpu:4", "-J", f"{tag}a", "sh", "-c", cmd], workdir, "a")
    b = Bg(cluster, ["srun", "-w", "node3", "--gres=gpu:4", "-J", f"{tag}b", "sh", "-c", cmd], workdir, "b")
    c = None
    try:
        ja, jb = running_job(cluster, f"{tag}a"), running_job(cluster, f"{tag}b")
        wait_for(lambda: a.out and b.out, what="both jobs printed their GPUs")
        ga, gb = set(a.out.split()[0].split(",")), set(b.out.split()[0].split(","))
        assert len(ga) == len(gb) == 4 and not ga & gb
        c = Bg(cluster, ["srun", "-w", "node3", "--gres=gpu:4", "-J", f"{tag}c", "printenv",
                         "CUDA_VISIBLE_DEVICES"], workdir, "c")
        jc = wait_for(lambda: job_id_by_name(cluster, f"{tag}c"), what="third job queued")
        wait_for(lambda: cluster.run(["squeue", "-h", "-j", str(jc), "-o", "%T %r"]).out.strip()
                 == "PENDING Resources", what="third job pending on Resources")
        wait_for(lambda: "queued and waiting for resources" in c.err, what="srun says it waits")
        assert c.p.poll() is None
        assert cluster.run(["scancel", str(ja)]).rc == 0
        assert c.wait(30) == 0, c.err
        assert set(c.out.split()[0].split(",")) == ga
        assert f"srun: job {jc} has been allocated resources" in c.err
        assert cluster.wait_done(jc) == "COMPLETED"
        assert cluster.run(["scancel", str(jb)]).rc == 0
        assert a.wait() != 0 and b.wait() != 0
    finally:
        for p in (a, b, c):
            if p is not None:
                p.kill()
    no_marker_left("sleep 3101")


# ------------------------------------------------------------------------------------------------
# I/O
# ------------------------------------------------------------------------------------------------


def test_output_lines_never_interleave(cluster, workdir):
    prog = os.path.join(workdir, "spam.py")
    with open(prog, "w") as fh:
        fh.write("import os, sys\nr = os.environ['SLURM_PROCID']\n"
                 "for i in range(200):\n"
                 "    sys.stdout.write(f'task{r} line{i:04d} ' + 'x' * 3000 + ' end\\n')\n"
                 "    sys.stdout.flush()\n")
    r = cluster.run(["srun", "-N2", "--ntasks-per-node=2", "python3", prog], cwd=workdir)
    assert r.rc == 0, r.err
    assert r.out.endswith("\n")
    pat = re.compile(r"task(\d) line(\d{4}) x{3000} end")
    seen: dict[str, list[int]] = {}
    for line in r.out.splitlines():
        m = pat.fullmatch(line)
        assert m, f"broken line: {line[:80]!r}…"
        seen.setdefault(m.group(1), []).append(int(m.group(2)))
    assert sorted(seen) == ["0", "1", "2", "3"]
    assert all(v == list(range(200)) for v in seen.values())  # each task's lines in order


def test_label_width_and_per_task_files(cluster, workdir):
    r = cluster.run(["srun", "-l", "-N1", "-n11", "sh", "-c", "echo hi $SLURM_PROCID"], cwd=workdir)
    assert r.rc == 0, r
    assert sorted(r.out.splitlines()) == sorted(f"{t:>2}: hi {t}" for t in range(11))
    r = cluster.run(["srun", "-n3", "-o", "out-%t.txt", "sh", "-c", "echo task $SLURM_PROCID; echo err >&2"],
                    cwd=workdir)
    assert r.rc == 0, r
    assert r.out == ""
    for t in range(3):
        assert read(os.path.join(workdir, f"out-{t}.txt")) == f"task {t}\nerr\n"


def test_stdin_goes_to_task_zero_or_all(cluster, workdir):
    r = cluster.run(["srun", "-n2", "cat"], input="hi\n", cwd=workdir)
    assert (r.rc, r.out) == (0, "hi\n"), r
    r = cluster.run(["srun", "-l", "-n2", "--input=all", "cat"], input="hi\n", cwd=workdir)
    assert r.rc == 0, r
    assert sorted(r.out.splitlines()) == ["0: hi", "1: hi"]


def test_unbuffered_passes_partial_lines(cluster, workdir):
    """``-u``: bytes reach srun's stdout as the task writes them, without waiting for a newline."""
    p = subprocess.Popen(["srun", "-u", "-n1", "sh", "-c", "printf ready; exec sleep 3102"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cluster.env, cwd=workdir)
    try:
        got = b""
        deadline = time.monotonic() + 20
        os.set_blocking(p.stdout.fileno(), False)
        while b"ready" not in got and time.monotonic() < deadline:
            try:
                got += os.read(p.stdout.fileno(), 100) or b""
            except BlockingIOError:
                time.sleep(0.02)
        assert got == b"ready"
        assert p.poll() is None
    finally:
        p.send_signal(signal.SIGINT)
        time.sleep(0.1)
        p.send_signal(signal.SIGINT)
        p.wait(20)
    no_marker_left("sleep 3102")


# ------------------------------------------------------------------------------------------------
# exit codes and signals
# ------------------------------------------------------------------------------------------------


def test_exit_code_is_highest_task_exit(cluster, workdir):
    r = cluster.run(["srun", "-N1", "-n2", "sh", "-c", "exit $SLURM_PROCID"], cwd=workdir)
    assert r.rc == 1
    assert re.fullmatch(r"srun: error: node\d+: task 1: Exited with exit code 1\n", r.err), r.err
    r = cluster.run(["srun", "-n1", "sh", "-c", "kill -9 $$"], cwd=workdir)
    assert r.rc == 128 + 9
    assert re.search(r"srun: error: node\d+: task 0: Killed", r.err), r.err
    r = cluster.run(["srun", "-n1", "true"], cwd=workdir)
    assert (r.rc, r.out, r.err) == (0, "", "")


def test_sigint_is_forwarded_to_tasks(cluster, workdir):
    bg = Bg(cluster, ["srun", "-n2", "bash", "-c",
                      "trap 'echo got INT $SLURM_PROCID; exit 7' INT; echo ready; sleep 3103 & wait"],
            workdir)
    try:
        wait_for(lambda: bg.out.count("ready") == 2, what="both tasks ready")
        bg.p.send_signal(signal.SIGINT)
        assert bg.wait(20) == 7, bg.err
    finally:
        bg.kill()
    assert sorted(bg.out.splitlines()) == ["got INT 0", "got INT 1", "ready", "ready"]
    assert "Exited with exit code 7" in bg.err
    no_marker_left("sleep 3103")


def test_two_sigints_within_a_second_kill_the_step(cluster, workdir):
    bg = Bg(cluster, ["srun", "-n2", "bash", "-c",
                      "trap 'echo got INT' INT; echo ready; while true; do sleep 3104 & wait; done"],
            workdir)
    try:
        wait_for(lambda: bg.out.count("ready") == 2, what="both tasks ready")
        bg.p.send_signal(signal.SIGINT)
        wait_for(lambda: bg.out.count("got INT") == 2, what="first interrupt delivered")
        assert bg.p.poll() is None  # one interrupt does not end a task that traps it
        bg.p.send_signal(signal.SIGINT)
        rc = bg.wait(20)
    finally:
        bg.kill()
    assert rc != 0
    no_marker_left("sleep 3104")


def test_kill_on_bad_exit(cluster, workdir):
    t0 = time.monotonic()
    r = cluster.run(["srun", "-K1", "-n2", "sh", "-c",
                     "if [ $SLURM_PROCID = 1 ]; then exit 3; fi; exec sleep 3105"], cwd=workdir, timeout=60)
    assert time.monotonic() - t0 < 20
    assert r.rc != 0
    assert re.search(r"task 1: Exited with exit code 3", r.err), r.err
    no_marker_left("sleep 3105")


def test_scancel_of_running_srun_job(cluster, workdir):
    name = f"scx{os.getpid()}"
    bg = Bg(cluster, ["srun", "-J", name, "-n2", "sleep", "3106"], workdir)
    try:
        jid = running_job(cluster, name)
        wait_for(lambda: len(marker_procs("sleep 3106")) >= 3, what="tasks running")
        assert cluster.run(["scancel", str(jid)]).rc == 0
        rc = bg.wait(15)
    finally:
        bg.kill()
    assert rc != 0
    assert cluster.wait_done(jid) == "CANCELLED"
    no_marker_left("sleep 3106")


@pytest.fixture
def own_cluster():
    with private_cluster("muster-srun-", nodes=2, cpus=4) as c:
        yield c


def _env_of(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return dict(kv.split(b"=", 1) for kv in fh.read().split(b"\0") if b"=" in kv)
    except OSError:
        return {}


def test_node_death_is_reported(own_cluster):
    """SIGKILL one node's agent, its step daemon and tasks: srun says ``Node failure`` and
    exits non-zero; the tasks on the surviving node are stopped."""
    c = own_cluster
    bg = Bg(c, ["srun", "-N2", "sh", "-c", "exec sleep 3107"], c.workdir)
    try:
        def victims():
            for pid in marker_procs("sleep 3107"):
                if _env_of(pid).get(b"SLURMD_NODENAME") == b"node2":
                    with open(f"/proc/{pid}/stat") as fh:
                        return pid, int(fh.read().split(") ", 1)[1].split()[1])
            return None
        task, stepd = wait_for(victims, what="task on node2")
        agent = c.pids()["agents"]["node2"]
        for pid in (agent, stepd, task):
            os.kill(pid, signal.SIGKILL)
        rc = bg.wait(20)
    finally:
        bg.kill()
    assert rc != 0
    assert "srun: error: Node failure on node2" in bg.err, bg.err
    no_marker_left("sleep 3107")


# ------------------------------------------------------------------------------------------------
# salloc
# ------------------------------------------------------------------------------------------------


def test_salloc_runs_steps_and_returns_exit_code(cluster, workdir):
    r = cluster.run(["salloc", "-N2", "bash", "-c", "srun -l printenv SLURMD_NODENAME; exit 5"], cwd=workdir)
    assert r.rc == 5, r
    m = re.match(r"salloc: Granted job allocation (\d+)\n", r.err)
    assert m, r.err
    jid = m.group(1)
    assert f"salloc: Relinquishing job allocation {jid}\n" in r.err
    got = dict(line.split(": ") for line in r.out.splitlines())
    assert sorted(got) == ["0", "1"] and got["0"] != got["1"]
    r = cluster.run(["sacct", "-j", jid, "-P", "-n", "-o", "JobID,State"])
    assert f"{jid}.0|COMPLETED" in r.out.splitlines(), r.out


def test_salloc_environment(cluster, workdir):
    """env_salloc_N1_gres1.txt: allocation variables, no per-step/per-task ones."""
    r = cluster.run(["salloc", "-N1", "--gres=gpu:1", "env"], cwd=workdir)
    assert r.rc == 0, r
    env = dict(line.split("=", 1) for line in r.out.splitlines() if "=" in line)
    jid = re.match(r"salloc: Granted job allocation (\d+)", r.err).group(1)
    assert env["SLURM_JOB_ID"] == env["SLURM_JOBID"] == jid
    assert env["SLURM_JOB_NAME"] == "interactive"
    assert env["SLURM_JOB_NODELIST"] == env["SLURM_NODELIST"]
    assert re.fullmatch(r"node\d+", env["SLURM_JOB_NODELIST"])
    assert env["SLURM_JOB_NUM_NODES"] == env["SLURM_NNODES"] == "1"
    assert env["SLURM_JOB_CPUS_PER_NODE"] == "1"
    assert env["SLURM_TASKS_PER_NODE"] == "1"
    assert env["SLURM_JOB_PARTITION"] == "gpu"
    assert env["SLURM_JOB_QOS"] == "normal"
    assert env["SLURM_SUBMIT_DIR"] == workdir
    assert env["SLURM_CLUSTER_NAME"]
    assert os.path.realpath(env["SLURM_CONF"]) == os.path.realpath(cluster.conf)
    for k in ("SLURM_PROCID", "SLURM_STEP_ID", "SLURMD_NODENAME", "SLURM_NTASKS", "RANK",
              "CUDA_VISIBLE_DEVICES"):
        assert k not in env, k


def test_salloc_revoked_by_scancel(cluster, workdir):
    name = f"sax{os.getpid()}"
    bg = Bg(cluster, ["salloc", "-J", name, "-N1", "sleep", "3108"], workdir)
    try:
        jid = running_job(cluster, name)
        wait_for(lambda: "Granted job allocation" in bg.err, what="salloc granted")
        assert cluster.run(["scancel", str(jid)]).rc == 0
        rc = bg.wait(20)
    finally:
        bg.kill()
    assert rc != 0
    assert f"salloc: Job allocation {jid} has been revoked.\n" in bg.err
    assert "Relinquishing" not in bg.err
    assert cluster.wait_done(jid) == "CANCELLED"
    no_marker_left("sleep 3108")


# ------------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------------


def test_bad_step_requests_inside_allocations(cluster, workdir):
    r = cluster.run(["salloc", "-n2", "bash", "-c", "srun -n8 -c4 sleep 3109; echo inner=$?"], cwd=workdir)
    assert r.rc == 0, r
    assert "inner=1" in r.out
    assert re.search(r"srun: error: Unable to create step for job \d+: "
                     r"More processors requested than permitted",
                     r.err), r.err
    r = cluster.run(["salloc", "-N1", "-w", "node1", "bash", "-c", "srun -w node2 sleep 3109; echo inner=$?"],
                    cwd=workdir)
    assert "inner=1" in r.out, r
    assert re.search(r"srun: error: Unable to create step for job \d+: "
                     r"Requested node configuration is not available",
                     r.err), r.err
    r = cluster.run(["salloc", "-N1", "--gres=gpu:2", "bash", "-c",
                     "srun -n1 --gpus-per-task=3 sleep 3109; echo inner=$?"], cwd=workdir)
    assert "inner=1" in r.out, r
    assert re.search(r"srun: error: Unable to create step for job \d+: ", r.err), r.err
    no_marker_left("sleep 3109")


def test_unknown_option_and_missing_command(cluster, workdir):
    r = cluster.run(["srun", "--bogus", "true"], cwd=workdir)
    assert r.rc == 255
    assert r.err == "srun: unrecognized option '--bogus'\nTry \"srun --help\" for more information\n"
    r = cluster.run(["srun", "/nonexistent/cmd"], cwd=workdir)
    assert r.rc == 2
    assert "execve(): /nonexistent/cmd: No such file or directory" in r.err
    assert re.search(r"srun: error: node\d+: task 0: Exited with exit code 2", r.err), r.err
    r = cluster.run(["srun", "--gres=gpu:9", "true"], cwd=workdir)
    assert r.rc == 1
    assert "srun: error: Unable to allocate resources: Requested node configuration is not available" in r.err
