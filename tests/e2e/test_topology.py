"""Topology-aware placement with real daemons (issue 17): ``muster up --topology tree:4`` on 8
nodes writes two leaf switches of 4 (leaf1 = node[1-4], leaf2 = node[5-8]); 4-node jobs land
on one leaf each even when slurm.conf order would spread them, and a ``--switches=1`` job
waits for one leaf, then gives up after its wait."""

from __future__ import annotations

import os

import pytest

from cluster import private_cluster, wait_for


@pytest.fixture(scope="module")
def c():
    with private_cluster("muster-topo-", nodes=8, gpus=0, cpus=4, mem=4000,
                         partitions="batch", topology="tree:4") as cl:
        yield cl


def running_on(c, jid: int) -> str:
    c.wait_state(jid, "RUNNING")
    return c.ok("squeue", "-h", "-j", str(jid), "-o", "%N").strip()


def test_topology_conf_written_and_four_node_jobs_land_on_one_leaf_each(c):
    with open(os.path.join(c.state_dir, "topology.conf")) as fh:
        text = fh.read()
    assert "SwitchName=leaf1 Nodes=node[1-4]" in text and "SwitchName=top Switches=leaf[1-2]" \
        in text
    w = c.workdir
    blocker = c.sbatch("-w", "node1", "--exclusive", "-t", "5", "--wrap", "sleep 300", cwd=w)
    assert running_on(c, blocker) == "node1"
    # free: node[2-8]; slurm.conf order would give node[2-5] (two leaves)
    a = c.sbatch("-N4", "--exclusive", "-t", "5", "--wrap", "sleep 300", cwd=w)
    assert running_on(c, a) == "node[5-8]"
    c.ok("scancel", str(blocker))
    b = c.sbatch("-N4", "--exclusive", "-t", "5", "--wrap", "sleep 300", cwd=w)
    assert running_on(c, b) == "node[1-4]"
    c.ok("scancel", str(a), str(b))
    wait_for(lambda: not c.ok("squeue", "-h", "-t", "R,CG", "-o", "%i").strip(), 30,
             what="the cluster to empty")


def test_switches_job_waits_for_one_leaf_then_gives_up(c):
    w = c.workdir
    # 5 nodes never fit one leaf of 4: with --switches=1 the job waits although 8 are idle
    s = c.sbatch("-N5", "--switches=1@0:08", "-t", "5", "--wrap", "sleep 1", cwd=w)
    show = c.ok("scontrol", "show", "job", str(s))
    assert "JobState=PENDING" in show and "Reason=Resources" in show, show
    assert "   Switches=1@00:00:08\n" in show, show
    # its wait over, it runs on two leaves
    c.wait_state(s, ("RUNNING", "COMPLETED"), timeout=60)
    assert c.wait_done(s) == "COMPLETED"
    nodes = c.job(s)["nodes"]
    assert nodes.startswith("node[") and len(c.ok("scontrol", "show", "hostnames", nodes)
                                             .split()) == 5
    # without @: max_switch_wait (300 s) applies and is shown
    t = c.sbatch("-N5", "--switches=1", "-t", "5", "--hold", "--wrap", "true", cwd=w)
    assert "   Switches=1@00:05:00\n" in c.ok("scontrol", "show", "job", str(t))
    c.ok("scancel", str(t))
    r = c.run(["sbatch", "--switches=x", "--wrap", "true"], cwd=w)
    assert r.rc != 0 and "Invalid --switches specification" in r.err, r


def test_scontrol_show_topology_lists_the_switches_as_slurm_does(c):
    lines = c.ok("scontrol", "show", "topology").splitlines()
    assert lines == ["SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[1-4]",
                     "SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=node[5-8]",
                     "SwitchName=top Level=1 LinkSpeed=1 Switches=leaf[1-2]"], lines
    # a switch by name; a node picks the leaves holding it; a miss is Slurm's error, exit 0
    assert c.ok("scontrol", "show", "topology", "top").startswith("SwitchName=top Level=1")
    assert c.ok("scontrol", "show", "topology", "node6").splitlines() == [lines[1]]
    r = c.run(["scontrol", "show", "topology", "nosuch"])
    assert (r.rc, r.out, r.err) == (
        0, "", "scontrol: error: Topology information contains no switch or node named nosuch\n")
