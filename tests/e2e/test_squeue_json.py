"""``squeue --json`` through the real daemons and command: the controller's cached v0.0.40
records (muster.controller.jobjson) written through by squeue must be byte for byte the
document squeue built itself from the plain ``jobs`` reply (the oracle below), with the
command's own filters (-t, -p, -n, -w, -u) keeping exactly their jobs, and must show every
change of a job (scontrol update, release, cancel, start) at once.
"""

import json

import pytest

import wire
from cluster import private_cluster, wait_for
from muster.common import fmt_json

DEFAULT = ["COMPLETING", "CONFIGURING", "PENDING", "RUNNING", "STAGE_OUT", "SUSPENDED"]
ODD = 'é 名前 "q" \\ tab\t </x>'


@pytest.fixture(scope="module")
def c():
    with private_cluster("muster-sqjson-", nodes=2, gpus=2, cpus=4,
                         partitions="gpu,debug:1:00:00") as cl:
        yield cl


@pytest.fixture(scope="module")
def jobs(c):
    """name → job id: held jobs (one with odd strings, an array, one in debug that waits for
    its begin time once released) and a job running on a node with a GPU."""
    out = {
        "odd": c.sbatch("-H", "-J", ODD, f"--comment={ODD}", "--wrap", "true", cwd=c.workdir),
        "array": c.sbatch("-H", "-J", "arr", "-a", "1-5%2", "--wrap", "true", cwd=c.workdir),
        "debug": c.sbatch("-H", "-J", "dbg", "-p", "debug", "-t", "7", "--begin=now+1hour",
                          "--wrap", "true", cwd=c.workdir),
        "run": c.sbatch("-J", "run", "-G", "1", "--wrap", "sleep 600", cwd=c.workdir),
    }
    c.wait_state(out["run"], "RUNNING", timeout=60)
    return out


def squeue_json(c, *args: str) -> str:
    return c.ok("squeue", "--json", *args)


def oracle(c, out: str, args: tuple[str, ...], keep=lambda r: True) -> str:
    """What squeue printed when it built the records itself: the plain reply's records (the
    query squeue sends, filtered as squeue filters) through fmt_json, at the output's time."""
    now = json.loads(out)["last_update"]["number"]
    reply = wire.call(c, {"op": "jobs", "states": DEFAULT, "hide": True})
    recs = reply["jobs"]
    doc = fmt_json.squeue_json([r for r in recs if keep(r)], now, cluster=reply["cluster"],
                               command=["squeue", "--json", *args])
    return fmt_json.dumps(doc)


def same_as_oracle(c, *args: str, keep=lambda r: True) -> dict[int, dict]:
    """Run squeue --json ARGS until it matches the oracle (a scheduling pass may change a
    record between the two reads); its records by id."""
    got: list[str] = []

    def match() -> bool:
        got[:] = [squeue_json(c, *args)]
        return got[0] == oracle(c, got[0], args, keep)
    wait_for(match, timeout=20, what=f"squeue --json {' '.join(args)} equal to the oracle")
    return {r["job_id"]: r for r in json.loads(got[0])["jobs"]}


def test_byte_for_byte_what_squeue_built_itself(c, jobs):
    recs = same_as_oracle(c)
    assert set(recs) >= set(jobs.values())
    assert recs[jobs["odd"]]["name"] == ODD and recs[jobs["odd"]]["comment"] == ODD
    assert recs[jobs["array"]]["array_task_string"] == "1-5"
    run = recs[jobs["run"]]
    assert run["job_state"] == ["RUNNING"] and run["gres_detail"] and run["nodes"]


def test_filters_keep_their_jobs(c, jobs):
    node = same_as_oracle(c)[jobs["run"]]["nodes"]
    cases = [
        (("-t", "PENDING"), lambda r: r["state"] == "PENDING",
         {jobs["odd"], jobs["array"], jobs["debug"]}),
        (("-p", "debug"), lambda r: r["partition"] == "debug", {jobs["debug"]}),
        (("-n", "arr,run"), lambda r: r["name"] in ("arr", "run"), {jobs["array"], jobs["run"]}),
        (("-w", node), lambda r: r["node_list"] == node, {jobs["run"]}),
        (("-u", "no-such-user-here"), lambda r: False, set()),
        (("-j", str(jobs["debug"])), lambda r: r["job_id"] == jobs["debug"], {jobs["debug"]}),
    ]
    for args, keep, want in cases:
        if args[0] == "-u":  # an unknown user: squeue reports it and lists nothing
            r = c.run(["squeue", "--json", *args])
            assert r.rc == 0 and "Invalid user" in r.err
            assert json.loads(r.out)["jobs"] == [] and '"jobs": [],' in r.out
            continue
        assert set(same_as_oracle(c, *args, keep=keep)) == want, args
    r = c.run(["squeue", "--json", "-j", "999999"])
    assert (r.rc, r.err) == (1, "slurm_load_jobs error: Invalid job id specified\n")


def test_every_change_shows_at_once(c, jobs):
    jid = jobs["debug"]

    def rec() -> dict:
        return next(j for j in json.loads(squeue_json(c))["jobs"] if j["job_id"] == jid)

    before = rec()
    assert before["time_limit"]["number"] == 7 and before["state_reason"] == "JobHeldUser"
    c.ok("scontrol", "update", f"JobId={jid}", "TimeLimit=3", "Comment=changed")
    now = rec()  # no wait: the change is committed before scontrol returns
    assert now["time_limit"]["number"] == 3 and now["comment"] == "changed"
    c.ok("scontrol", "release", str(jid))  # --begin keeps it waiting
    now = rec()
    assert now["hold"] is False and now["priority"]["number"] > 0
    wait_for(lambda: rec()["state_reason"] == "BeginTime", timeout=10, what="its reason")
    c.ok("scontrol", "hold", str(jid))
    now = rec()
    assert now["hold"] is True and now["priority"]["number"] == 0
    assert now["state_reason"] in ("JobHeldUser", "JobHeldAdmin")
    c.ok("scancel", str(jid))
    assert jid not in {j["job_id"] for j in json.loads(squeue_json(c))["jobs"]}
    same_as_oracle(c)
