"""Agents for nodes added live, `muster restart` of every daemon, and nodes removed live
(issue 16). One real cluster for the module, its slurm.conf edited as an admin would:

* node3 is added by `scontrol reconfigure`; `muster start-agents` starts its agent (and
  refuses, naming the reason, while the controller does not know the node yet), leaves the
  running agents alone, and the node runs a job;
* `muster restart` restarts each running agent, starts the missing one (with a note), then the
  controller, then musterrestd: every pid changes and the REST API answers after;
* node3 is removed while a job runs on it: `muster status` shows its agent until its last
  job ends and the agent stops, then nothing about it; node2 is removed while busy and
  `muster down` stops its still-running agent too.
"""

from __future__ import annotations

import json
import os
import re
import signal
import urllib.request

import pytest

from cluster import _alive, private_cluster, read, wait_for
from muster.common import pidfile


@pytest.fixture(scope="module")
def c():
    with private_cluster("muster-liveagents-", nodes=2, gpus=0, cpus=2, mem=2000,
                         partitions="batch") as cl:
        yield cl


def status(c, *extra: str) -> dict:
    r = c.run(["muster", "status", "--json", "--state-dir", c.state_dir, *extra])
    assert r.err == "", r
    return json.loads(r.out)


def running_pids(c) -> dict[str, int]:
    return {d["name"]: d["pid"] for d in status(c)["daemons"] if d["running"]}


def muster(c, *args: str, timeout: float = 120):
    return c.run(["muster", *args, "--state-dir", c.state_dir], timeout=timeout)


def set_nodes(c, names: list[str]) -> None:
    """slurm.conf with exactly ``names`` (nodeN at 127.0.1.N, sized like node1), all in the
    one partition; the controller is not told (run `scontrol reconfigure`)."""
    with open(c.conf) as fh:
        text = fh.read()
    node1 = re.search(r"^NodeName=node1 .*$", text, re.M).group(0)
    text = re.sub(r"^NodeName=\S+ .*\n", "", text, flags=re.M)
    lines = [node1.replace("node1", n).replace("127.0.1.1", f"127.0.1.{n[4:]}") for n in names]
    text = re.sub(r"^(PartitionName=batch .*?Nodes=)\S+", rf"\g<1>{','.join(names)}", text,
                  flags=re.M)
    with open(c.conf, "w") as fh:
        fh.write(text + "\n".join(lines) + "\n")


def reconfigure(c) -> None:
    r = c.run(["scontrol", "reconfigure"])
    assert (r.rc, r.err) == (0, ""), r


def gated_job(c, node: str, gate: str) -> int:
    out = os.path.join(c.workdir, f"gated-{node}.out")
    jid = c.sbatch("-w", node, "-o", out, "--wrap",
                   f"echo started; while [ ! -e {gate} ]; do sleep 0.1; done", cwd=c.workdir)
    wait_for(lambda: "started" in read(out), 30, what=f"job on {node} started")
    return jid


def test_start_agents_serves_a_node_added_by_reconfigure(c):
    before = running_pids(c)
    set_nodes(c, ["node1", "node2", "node3"])
    r = muster(c, "start-agents")  # the controller has not read the new file yet
    assert r.rc == 1, r
    assert r.err == ("muster: note: the controller does not know node3 yet; run "
                     "`scontrol reconfigure` first\n"), r
    assert running_pids(c) == before
    reconfigure(c)
    st = status(c)
    assert "node3" in [n["name"] for n in st["nodes"]]
    assert "musterd node3" not in [d["name"] for d in st["daemons"]]  # none ever ran
    r = muster(c, "start-agents")
    assert (r.rc, r.err) == (0, ""), r
    after = running_pids(c)
    assert r.out == f"musterd node3 started (pid {after['musterd node3']})\n"
    assert {k: v for k, v in after.items() if k != "musterd node3"} == before
    # start-agents returns once the node has registered: it is idle now, no waiting
    node3 = next(n for n in status(c)["nodes"] if n["name"] == "node3")
    assert node3["state"] == "IDLE" and "NOT_RESPONDING" not in node3["flags"], node3
    out = os.path.join(c.workdir, "on3.out")
    jid = c.sbatch("-w", "node3", "-o", out, "--wrap", "echo on $SLURMD_NODENAME",
                   cwd=c.workdir)
    assert c.wait_done(jid) == "COMPLETED"
    assert read(out) == "on node3\n"
    r = muster(c, "start-agents")  # nothing missing: nothing touched
    assert (r.rc, r.out, r.err) == (0, "No musterd to start: every node of this host has one "
                                       "running\n", ""), r
    assert running_pids(c) == after


def _api_answers(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        assert resp.status == 200
        return resp.read().decode()


def test_restart_covers_every_daemon_and_starts_missing_agents(c):
    old = running_pids(c)["musterd node2"]
    os.kill(old, signal.SIGTERM)
    wait_for(lambda: not _alive(old), what="node2's agent stopped")
    assert {"name": "musterd node2", "node": "node2", "pid": old, "running": False} \
        in status(c)["daemons"]
    before = running_pids(c)
    api = status(c)["api"]
    assert api and api["running"], "musterrestd did not start with `muster up` (api extra?)"
    r = muster(c, "restart")
    assert r.rc == 0, r
    assert r.err == "muster: note: no musterd ran for node2; starting one\n", r
    assert [ln.split()[:3] for ln in r.out.splitlines()] == [
        ["musterd", "node1", "restarted"], ["musterd", "node3", "restarted"],
        ["musterd", "node2", "started"], ["musterctld", "restarted", "(pid"],
        ["musterrestd", "restarted", "(pid"]]
    st = status(c)
    after = {d["name"]: d["pid"] for d in st["daemons"] if d["running"]}
    assert set(after) == {"musterctld", "musterd node1", "musterd node2", "musterd node3"}
    assert all(after[n] != before[n] for n in before), (before, after)
    assert old != after["musterd node2"]
    assert st["api"]["running"] and st["api"]["pid"] != api["pid"], (api, st["api"])
    assert pidfile.running(os.path.join(c.state_dir, pidfile.RESTD), "musterrestd") \
        == st["api"]["pid"] == int(r.out.splitlines()[-1].split()[-1].rstrip(")"))
    assert not _alive(api["pid"])
    # the new musterrestd answers, through the new controller (node2's new agent is seen)
    metrics = _api_answers(st["api"]["url"])
    assert "muster_up 1.0" in metrics and 'node="node2"' in metrics
    assert all(n["state"] == "IDLE" for n in st["nodes"]), st["nodes"]


def test_status_after_a_node_is_removed(c):
    gate = os.path.join(c.workdir, "gate3")
    jid = gated_job(c, "node3", gate)
    agent3 = running_pids(c)["musterd node3"]
    set_nodes(c, ["node1", "node2"])
    reconfigure(c)
    # node3 drains; its agent serves its last job and is shown for what it is
    st = status(c)
    assert {"name": "musterd node3", "node": "node3", "pid": agent3, "running": True,
            "removed": True} in st["daemons"]
    r = muster(c, "status")
    assert r.rc == 0 and f"musterd node3    pid {agent3:<8} running  (node removed from " \
        "the configuration)" in r.out, r
    open(gate, "w").close()
    assert c.wait_done(jid) == "COMPLETED"
    wait_for(lambda: not _alive(agent3), 30, what="node3's agent stops once node3 is gone")
    r = muster(c, "status")
    assert (r.rc, r.err) == (0, ""), r
    assert "node3" not in r.out and "stopped" not in r.out, r.out
    st = status(c)
    assert [d["name"] for d in st["daemons"]] == ["musterctld", "musterd node1",
                                                  "musterd node2"]
    assert all(d["running"] for d in st["daemons"])
    assert [n["name"] for n in st["nodes"]] == ["node1", "node2"]
    r = muster(c, "start-agents")  # a removed node gets no agent again
    assert (r.rc, r.err) == (0, "") and r.out.startswith("No musterd to start"), r
    assert "node3" not in c.pids()["agents"], "muster.pids still records the removed node"


def test_down_stops_the_agent_of_a_removed_node_that_still_serves(c):
    gate = os.path.join(c.workdir, "gate2")  # never opened: down ends the job
    gated_job(c, "node2", gate)
    daemons = running_pids(c)
    set_nodes(c, ["node1"])
    reconfigure(c)
    assert running_pids(c) == daemons  # node2's agent serves its job still
    r = muster(c, "down")
    assert (r.rc, r.out, r.err) == (0, "Muster cluster stopped\n", ""), r
    assert not [n for n, pid in daemons.items() if _alive(pid)], "muster down left a daemon"
