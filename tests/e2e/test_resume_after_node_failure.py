"""The resilience issue's main scenario: a 2-node training job on a 3-node cluster loses a node
after a few checkpoints, is requeued, restarts on healthy nodes, resumes from its latest
checkpoint and ends COMPLETED with parameters bit-identical to an uninterrupted run."""

import os
import signal
import time

import pytest

from cluster import private_cluster, wait_for

torch = pytest.importorskip("torch", reason="torch is a test dependency (pyproject [test])")

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "checkpoint_train.py")


@pytest.fixture
def c():
    with private_cluster("muster-resume-", nodes=3, cpus=4) as cl:
        yield cl


def _script(c, name: str, steps: int, sleep: float) -> str:
    d = os.path.join(c.workdir, name)
    os.makedirs(d)
    import sys
    path = os.path.join(d, "train.sh")
    with open(path, "w") as fh:
        fh.write(f"""#!/bin/bash
#SBATCH -N2 --ntasks-per-node=1 --requeue --open-mode=append -o {d}/log.txt
export GLOO_SOCKET_IFNAME=lo
srun {sys.executable} {os.path.abspath(EXAMPLE)} --steps {steps} --every 10 \\
     --ckpt-dir {d}/ckpt --out {d}/final.pt --step-sleep {sleep}
""")
    return path


def _kill_node(c, node):
    os.kill(c.pids()["agents"][node], signal.SIGKILL)
    for root, dirs, files in os.walk(os.path.join(c.state_dir, "spool", node)):
        dirs[:] = [d for d in dirs if d != ".trash"]
        for name in ("job.pid", "super.pid"):
            if name in files:
                for p in open(os.path.join(root, name)).read().split():
                    for fn in (os.killpg, os.kill):
                        try:
                            fn(int(p), signal.SIGKILL)
                        except (ProcessLookupError, PermissionError):
                            pass


def test_resume_from_checkpoint_bit_identical(c):
    steps = 200
    ref = c.sbatch(_script(c, "ref", steps, 0.0), cwd=c.workdir)
    assert c.wait_done(ref, timeout=120) == "COMPLETED"
    run = c.sbatch(_script(c, "run", steps, 0.1), cwd=c.workdir)
    ckpt = os.path.join(c.workdir, "run", "ckpt")
    wait_for(lambda: os.path.isdir(ckpt) and len(os.listdir(ckpt)) >= 2, timeout=90,
             what="two checkpoints")
    nodes = c.job(run)["nodes"]
    victim = "node2" if "node2" in nodes or "[1-2]" in nodes else "node3"
    t0 = time.time()
    _kill_node(c, victim)
    # requeued, restarted on healthy nodes, resumed from a checkpoint (not step 0)
    log = os.path.join(c.workdir, "run", "log.txt")
    wait_for(lambda: "restart 1: resuming at step" in open(log).read(), timeout=60,
             what="second run resumed")
    recovery = time.time() - t0
    text = open(log).read()
    resumed_at = int(text.split("restart 1: resuming at step ")[1].split()[0])
    assert resumed_at >= 20, text
    assert c.wait_done(run, timeout=180) == "COMPLETED"
    a = torch.load(os.path.join(c.workdir, "ref", "final.pt"), weights_only=False)["model"]
    b = torch.load(os.path.join(c.workdir, "run", "final.pt"), weights_only=False)["model"]
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    r = c.run(["sacct", "--duplicates", "-j", str(run), "-X", "-P", "-n", "-o", "JobID,State"])
    assert r.out.splitlines() == [f"{run}|NODE_FAIL", f"{run}|COMPLETED"]
    assert recovery < 45, recovery
    print(f"node death → resumed from checkpoint: {recovery:.1f} s")
