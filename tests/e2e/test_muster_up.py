"""`muster up/down/status`: a local cluster of separate daemons, found without env vars."""

import json
import os
import subprocess
import tempfile

import pytest

from cluster import BIN, Cluster, _alive, cleanup, wait_for


@pytest.fixture
def base():
    d = tempfile.mkdtemp(prefix="muster-up-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    cleanup(d)


def _env(base):
    env = dict(os.environ)
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    env["XDG_CONFIG_HOME"] = os.path.join(base, "xdg")
    for k in ("MUSTER_CONF", "SLURM_CONF"):
        env.pop(k, None)
    return env


def run(argv, env, **kw):
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, **kw)


def test_up_status_down_lifecycle(base):
    env = _env(base)
    state = os.path.join(base, "state")
    r = run(["muster", "up", "--state-dir", state, "--nodes", "3", "--gpus-per-node", "2",
             "--cpus-per-node", "4", "--mem-per-node", "8000", "--partitions", "batch,short:30"], env)
    assert r.returncode == 0, r
    try:
        # commands find the cluster with no MUSTER_CONF/SLURM_CONF (pointer in XDG_CONFIG_HOME)
        r = run(["sinfo", "-h", "-o", "%P %D %l"], env)
        assert r.returncode == 0, r
        assert r.stdout.split("\n")[:2] == ["batch* 3 infinite", "short 3 30:00"]
        st = json.loads(run(["muster", "status", "--json", "--state-dir", state], env).stdout)
        assert st["controller_responding"] is True
        assert st["config"] == os.path.join(state, "slurm.conf")
        names = [d["name"] for d in st["daemons"]]
        assert names == ["musterctld", "musterd node1", "musterd node2", "musterd node3"]
        assert all(d["running"] for d in st["daemons"])
        assert len({d["pid"] for d in st["daemons"]}) == 4  # one process per node
        assert [n["addr"] for n in st["nodes"]] == ["127.0.1.1", "127.0.1.2", "127.0.1.3"]
        assert all(n["state"] == "IDLE" and n["gpus"] == 2 for n in st["nodes"])
        # each agent talks to the controller from its own node address
        port = next(line.split("=")[1].strip() for line in open(st["config"])
                    if line.startswith("SlurmctldPort="))
        ss = subprocess.run(["ss", "-tnp"], capture_output=True, text=True).stdout
        peers = {line.split()[3].rsplit(":", 1)[0] for line in ss.splitlines()
                 if f"127.0.0.1:{port}" in line.split()[4:5] and "musterd" in line}
        assert peers == {"127.0.1.1", "127.0.1.2", "127.0.1.3"}
        # key file is private
        assert os.stat(os.path.join(state, "muster.key")).st_mode & 0o777 == 0o600
        # the nodes' spools are in memory (/dev/shm is a tmpfs here), linked from the state dir
        link = os.path.join(state, "spool")
        spools = os.readlink(link)
        assert os.path.dirname(spools) == "/dev/shm" and \
            os.path.basename(spools).startswith("muster-"), spools
        assert os.lstat(spools).st_mode & 0o7777 == 0o711
        assert sorted(os.listdir(link)) == ["node1", "node2", "node3"]
        assert f"SlurmdSpoolDir={spools}/%n" in open(st["config"]).read()
        # a second `up` on a running cluster is a clear error
        r = run(["muster", "up", "--state-dir", state], env)
        assert r.returncode == 1
        assert "already running" in r.stderr and "Traceback" not in r.stderr
        # a running job's processes are stopped by `down` too
        work = os.path.join(base, "w")
        os.makedirs(work)
        r = run(["sbatch", "--parsable", "-o", os.path.join(work, "o"), "--wrap", "sleep 300"], env)
        jid = r.stdout.strip()
        wait_for(lambda: run(["squeue", "-h", "-j", jid, "-o", "%t"], env).stdout.strip() == "R",
                 what="job running")
        spool = os.path.join(state, "spool")
        job_pid = wait_for(lambda: _find_job_pid(spool), what="job pid")
        pids = [d["pid"] for d in st["daemons"]]
    finally:
        r = run(["muster", "down", "--state-dir", state], env)
    assert r.returncode == 0, r
    assert not os.path.lexists(spools) and not os.path.lexists(link)  # gone with the cluster
    assert not any(_alive(p) for p in pids)
    wait_for(lambda: not _alive(job_pid), timeout=10, what="job killed by down")
    r = run(["muster", "status", "--state-dir", state], env)
    assert r.returncode == 1


def _find_job_pid(spool):
    for root, _dirs, files in os.walk(spool):
        if "job.pid" in files:
            return int(open(os.path.join(root, "job.pid")).read())
    return None


def test_up_with_existing_config(base):
    c = Cluster(os.path.join(base, "s1"), nodes=2)
    c.up()
    c.down()
    # hand-edit the generated file: add a partition, then start from it with --config
    with open(c.conf, "a") as fh:
        fh.write("PartitionName=extra Nodes=node2 MaxTime=5 State=UP\n")
    env = _env(base)
    r = run(["muster", "up", "--state-dir", c.state_dir, "--config", c.conf], env)
    assert r.returncode == 0, r
    try:
        r = run(["sinfo", "-h", "-p", "extra", "-o", "%P %N %l"], env)
        assert r.stdout.strip() == "extra node2 5:00"
    finally:
        run(["muster", "down", "--state-dir", c.state_dir], env)


def test_bad_config_is_reported_with_line(base):
    env = _env(base)
    conf = os.path.join(base, "bad.conf")
    with open(conf, "w") as fh:
        fh.write("ClusterName=x\nSlurmctldHost=localhost\nBogusKey=1\n")
    r = run(["muster", "up", "--state-dir", os.path.join(base, "s"), "--config", conf], env)
    assert r.returncode == 1
    assert f"{conf}:3" in r.stderr and "BogusKey" in r.stderr
    assert "Traceback" not in r.stderr


def test_emulated_cluster_larger_than_the_handshake_cap_registers_and_schedules(base):
    """`muster up --emulate`: one musterd serves every node. 300 nodes open their links in
    turns (the agent's CONNECT_BURST), so none is evicted by the controller's cap on peers in
    their handshake (MAX_HANDSHAKES, 256) and every node registers; a job then spans them all."""
    env = _env(base)
    state = os.path.join(base, "state")
    r = run(["muster", "up", "--state-dir", state, "--emulate", "--nodes", "300",
             "--gpus-per-node", "2", "--cpus-per-node", "2", "--mem-per-node", "1000"], env)
    assert r.returncode == 0, r
    try:
        st = json.loads(run(["muster", "status", "--json", "--state-dir", state], env).stdout)
        assert len({d["pid"] for d in st["daemons"] if d["name"].startswith("musterd")}) == 1
        r = run(["sinfo", "-h", "-p", "gpu", "-o", "%D %t"], env)
        assert r.stdout.split() == ["300", "idle"], r
        with open(os.path.join(state, "log", "musterctld.log")) as fh:
            log = fh.read()
        assert "evicting" not in log and "refused TCP peer" not in log
        work = os.path.join(base, "w")
        os.makedirs(work)
        r = run(["sbatch", "--parsable", "-N", "300", "-o", os.path.join(work, "o"),
                 "--wrap", "echo $SLURM_JOB_NUM_NODES"], env)
        assert r.returncode == 0, r
        jid = r.stdout.strip()
        wait_for(lambda: run(["sacct", "-X", "-n", "-P", "-j", jid, "-o", "State"],
                             env).stdout.strip() == "COMPLETED", timeout=60, what="job completed")
        with open(os.path.join(work, "o")) as fh:
            assert fh.read().strip() == "300"
    finally:
        run(["muster", "down", "--state-dir", state], env)
