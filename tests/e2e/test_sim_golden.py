"""Golden traces: small SWF files whose schedules were worked out by hand, replayed through
``muster sim --schedule`` (the real console script, the real SWF reader, the real core).

Every expected row below is derived in the comments; a change in any start time, end, kill
or node means the scheduler's behaviour changed, never noise. Times are trace seconds; time
limits are whole minutes (the requested 60/120/240/300 s) and the machine is one node
holding the trace's MaxProcs processors.
"""

import csv
import pathlib
import subprocess
import sys

import pytest

BIN = pathlib.Path(sys.executable).parent / "muster"
DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "sim"


def schedule(trace: str, *args: str, tmp_path) -> dict[str, tuple]:
    out = tmp_path / "schedule.csv"
    p = subprocess.run([str(BIN), "sim", str(DATA / trace), *args, "--schedule", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    with open(out) as fh:
        return {r["job"]: (int(r["start"]), int(r["end"]), r["state"]) for r in csv.DictReader(fh)}


# golden_backfill.swf, 4 CPUs:
#   job 1: t=0,  2 CPUs, runs 100 s, limit 2 min     job 4: t=25, 2 CPUs, 200 s, limit 5 min
#   job 2: t=10, 4 CPUs, runs 50 s,  limit 1 min     job 5: t=30, 1 CPU,  10 s,  limit 1 min
#   job 3: t=20, 2 CPUs, runs 30 s,  limit 1 min     job 6: t=40, 1 CPU, 500 s,  limit 1 min
#   job 7: 8 CPUs: larger than the machine, reported and skipped.
BACKFILL = {
    # FIFO: job 2 waits for all 4 CPUs (job 1 ends at 100) and everything queues behind it;
    # at 150 jobs 3 and 4 fill the node, at 180 job 3's CPUs go to jobs 5 and 6; job 6 is
    # killed at its 1-minute limit (240).
    "fifo": {"1": (0, 100, "COMPLETED"), "2": (100, 150, "COMPLETED"),
             "3": (150, 180, "COMPLETED"), "4": (150, 350, "COMPLETED"),
             "5": (180, 190, "COMPLETED"), "6": (180, 240, "TIMEOUT")},
    # EASY: job 2 reserves the node from 120 (job 1's limit). Job 3 fits the 2 free CPUs and
    # its limit ends at 80 < 120: it starts at 20. At 50 (job 3 done) job 4 would run past 120
    # and cannot; jobs 5 and 6 end by 110 (limits) and start. Job 1 ends early at 100 but job 6
    # holds a CPU until its kill at 110: job 2 starts at 110 (before its reservation), job 4
    # after it at 160.
    "easy": {"1": (0, 100, "COMPLETED"), "2": (110, 160, "COMPLETED"),
             "3": (20, 50, "COMPLETED"), "4": (160, 360, "COMPLETED"),
             "5": (50, 60, "COMPLETED"), "6": (50, 110, "TIMEOUT")},
}
# conservative: every waiting job also reserves (job 4 from 180, jobs 5 and 6 after it at 180),
# but at 50 jobs 5 and 6 still fit before job 2's reservation: the same schedule as EASY.
BACKFILL["conservative"] = BACKFILL["easy"]


@pytest.mark.parametrize("policy", ["fifo", "easy", "conservative"])
def test_golden_backfill(policy, tmp_path):
    assert schedule("golden_backfill.swf", "--policy", policy, tmp_path=tmp_path) == BACKFILL[policy]


# golden_depth.swf, 4 CPUs, every job runs exactly its limit:
#   job 1: t=0, 3 CPUs, 120 s     job 3: t=2, 4 CPUs, 60 s
#   job 2: t=1, 3 CPUs, 60 s      job 4: t=3, 1 CPU, 240 s
DEPTH = {
    # FIFO: 2 at 120 (after 1), 3 at 180 (after 2), 4 behind 3 at 240.
    "fifo": {"1": (0, 120, "COMPLETED"), "2": (120, 180, "COMPLETED"),
             "3": (180, 240, "COMPLETED"), "4": (240, 480, "COMPLETED")},
    # EASY: only job 2 reserves (3 CPUs at 120, leaving 1). Job 4 takes the free CPU at 3 and
    # keeps it until 243 without touching job 2's reservation, which delays job 3 to 243.
    "easy": {"1": (0, 120, "COMPLETED"), "2": (120, 180, "COMPLETED"),
             "3": (243, 303, "COMPLETED"), "4": (3, 243, "COMPLETED")},
    # conservative: job 3 also reserves all 4 CPUs for [180, 240), so job 4 may not start
    # before 240: FIFO's schedule.
    "conservative": {"1": (0, 120, "COMPLETED"), "2": (120, 180, "COMPLETED"),
                     "3": (180, 240, "COMPLETED"), "4": (240, 480, "COMPLETED")},
}


@pytest.mark.parametrize("policy", ["fifo", "easy", "conservative"])
def test_golden_reservation_depth(policy, tmp_path):
    assert schedule("golden_depth.swf", "--policy", policy, tmp_path=tmp_path) == DEPTH[policy]


def test_golden_skips_a_job_larger_than_the_machine(tmp_path):
    p = subprocess.run([str(BIN), "sim", str(DATA / "golden_backfill.swf"), "--json"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    import json
    out = json.loads(p.stdout)
    assert [s["job"] for s in out["skipped_jobs"]] == ["7"]
    assert out["metrics"]["jobs"] == 6


# golden_fairshare.swf on fairshare.conf: one 2-CPU node, the queue ordered by fair-share
# only (no decay). User 1's job 1 runs [0, 100) on both CPUs; jobs 2 (user 1, t=10) and 3
# (user 2, t=20) wait. At 100 user 1 has used 200 CPU-seconds and user 2 nothing, so user 2's
# job goes first although it was submitted later.
FAIRSHARE = {"1": (0, 100, "COMPLETED"), "2": (150, 200, "COMPLETED"), "3": (100, 150, "COMPLETED")}


def test_golden_fair_share_orders_by_usage(tmp_path):
    got = schedule("golden_fairshare.swf", "--config", str(DATA / "fairshare.conf"),
                   tmp_path=tmp_path)
    assert got == FAIRSHARE
    # the same trace without priority weights: submit order
    conf = tmp_path / "flat.conf"
    conf.write_text((DATA / "fairshare.conf").read_text().replace(
        "PriorityWeightFairshare=1000", "PriorityWeightFairshare=0"))
    flat = schedule("golden_fairshare.swf", "--config", str(conf), tmp_path=tmp_path)
    assert flat == {"1": (0, 100, "COMPLETED"), "2": (100, 150, "COMPLETED"),
                    "3": (150, 200, "COMPLETED")}


# golden_partitions: two 1-CPU nodes; "short" (n1, MaxTime 2 min, higher tier) and "long"
# (n1, n2). Every job is offered to both (--partition short,long), as sbatch -p short,long.
#   job 1: t=0, 10-minute limit: too long for short → long; best fit puts it on n1
#   job 2: t=5, 1-minute limit: short's tier comes first, but n1 is busy; long has n2 → n2
#   job 3: t=10, 1-minute limit: both nodes busy; at 65 job 2 frees n2, which only "long"
#          has (short's n1 is job 1's until 600) → long, n2, at 65
PARTITIONS_CONF = """ClusterName=golden
SlurmctldHost=localhost
SchedulerType=sched/builtin
NodeName=n[1-2] CPUs=1 RealMemory=1000
PartitionName=short Nodes=n1 MaxTime=2 PriorityTier=2 State=UP
PartitionName=long Nodes=n[1-2] Default=YES MaxTime=UNLIMITED State=UP
"""
PARTITIONS_SWF = """; MaxProcs: 2
1 0 -1 600 1 -1 -1 1 600 -1 1 1 -1 -1 -1 -1 -1 -1
2 5 -1 60 1 -1 -1 1 60 -1 1 2 -1 -1 -1 -1 -1 -1
3 10 -1 60 1 -1 -1 1 60 -1 1 3 -1 -1 -1 -1 -1 -1
"""


def test_golden_partitions_route_by_limit_and_tier(tmp_path):
    (tmp_path / "p.conf").write_text(PARTITIONS_CONF)
    (tmp_path / "p.swf").write_text(PARTITIONS_SWF)
    out = tmp_path / "s.csv"
    p = subprocess.run([str(BIN), "sim", str(tmp_path / "p.swf"), "--config", str(tmp_path / "p.conf"),
                        "--partition", "short,long", "--schedule", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "partitions short,long" in p.stdout
    with open(out) as fh:
        rows = {r["job"]: (int(r["start"]), r["nodes"]) for r in csv.DictReader(fh)}
    assert rows == {"1": (0, "n1"), "2": (5, "n2"), "3": (65, "n2")}
