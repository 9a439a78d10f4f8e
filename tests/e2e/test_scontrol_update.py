"""scontrol update job and scontrol show step against real daemons.

Every field a user may change on a pending job, changed by its owner: the job keeps its id,
submit time and eligibility (its queue age) and takes the new value; invalid values are
refused with Slurm's message and the job is exactly as before; another user is refused, root
and operators may do more; a running job's time limit may go down, not up (root: both ways);
an update of an array id reaches its pending tasks and reports the running one; the running
steps (srun's and the batch step) are listed in Slurm's layout. MinCPUsNode, Contiguous and
WCKey (and sbatch/srun's --mincpus, --contiguous, --wckey) are stored, shown and honoured by
placement; Contiguous follows slurmctld's permission rule (operators set it, owners may only
clear it).
"""

import re
import time

import pytest

import wire
from muster.common.hostlist import expand
from cluster import TEST_USER, TEST_USER2, private_cluster, user_exists, wait_for

# fields the scheduler itself rewrites while a job waits: not the update's doing
VOLATILE = {"reason", "reason_desc", "last_sched_eval", "sched_nodes", "start_time",
            "priority"}


@pytest.fixture(scope="module")
def c():
    for u in (TEST_USER, TEST_USER2):
        if not user_exists(u):
            pytest.fail(f"test user {u} missing: `useradd -m {u}`")
    # associations enforced (as the reference cluster): Account=nosuch is refused
    with private_cluster("muster-upd-", nodes=3, gpus=4, cpus=8,
                         partitions="gpu,debug:1:00:00",
                         extra_conf="AccountingStorageEnforce=associations") as cl:
        cl.ok("sacctmgr", "-i", "add", "qos", "high")
        yield cl


def held(c, *args, user=TEST_USER) -> int:
    return c.sbatch("-H", *args, "--wrap", "true", user=user, cwd=c.workdir)


def upd(c, jid, *changes, user=TEST_USER):
    return c.run(["scontrol", "update", f"JobId={jid}", *changes], user=user)


def rec(c, jid) -> dict:
    return wire.jobs(c)[jid]


def stable(r: dict) -> dict:
    return {k: v for k, v in r.items() if k not in VOLATILE}


# ---- every field on a pending job, by its owner -------------------------------------------

CASES = [
    (["Partition=debug"], {"partition": "debug"}),
    (["Partition=debug,gpu"], {"partition": "debug,gpu"}),
    (["Account=root"], {"account": "root"}),
    (["QOS=high"], {"qos": "high"}),
    (["ReqNodeList=node2"], {"req_nodes": "node2"}),
    (["NodeList=node1"], {"req_nodes": "node1"}),
    (["ExcNodeList=node1"], {"exc_nodes": "node1"}),
    (["Gres=gpu:2"], {"gpus_per_node": 2, "tres_per_node": "gres:gpu:2"}),
    (["TresPerNode=gres:gpu:1"], {"gpus_per_node": 1}),
    (["NumNodes=2"], {"nodes_min": 2, "num_nodes": 2, "num_tasks": 2}),
    (["NumNodes=1-2"], {"nodes_min": 1, "nodes_max": 2}),
    (["NumTasks=4"], {"num_tasks": 4, "num_cpus": 4}),
    (["CPUsPerTask=2"], {"cpus_per_task": 2, "num_cpus": 2}),
    (["MinMemoryNode=2G"], {"mem_per_node": 2048, "mem_per_cpu": None}),
    (["MinMemoryCPU=500"], {"mem_per_cpu": 500, "mem_per_node": None}),
    (["TimeLimit=30"], {"time_limit": 30}),
    (["TimeLimit=UNLIMITED"], {"time_limit": None}),  # gpu partition: MaxTime=UNLIMITED
    (["TimeMin=10"], {"time_min": 10}),
    (["JobName=renamed"], {"name": "renamed"}),
    (["Name=other"], {"name": "other"}),
    (["Comment=for the record"], {"comment": "for the record"}),
    (["Nice=10"], {"nice": 10}),
    (["Requeue=0"], {"requeue": False}),
    (["MinCPUsNode=4"], {"min_cpus_node": 4, "num_cpus": 4}),
    (["MinC=2"], {"min_cpus_node": 2, "num_cpus": 2}),
    (["WCKey=proj"], {"wckey": "proj"}),
    (["Dependency="], {"dependency": None}),
    # several at once, and scontrol's abbreviations and relative limits
    (["Partition=debug", "TimeLimit=20", "Comment=moved"],
     {"partition": "debug", "time_limit": 20, "comment": "moved"}),
    (["TimeL=7", "Pr=0"], {"time_limit": 7, "priority": 0}),
    (["TimeLimit+=5"], {"time_limit": 55}),  # relative to the job's limit (50)
    (["TimeLimit=-10"], {"time_limit": 40}),
]


@pytest.mark.parametrize("changes,want", CASES, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_pending_job_takes_each_field_and_keeps_its_queue_age(c, changes, want):
    jid = held(c, "-t", "50")
    before = rec(c, jid)
    r = upd(c, jid, *changes)
    assert (r.rc, r.out, r.err) == (0, "", ""), r
    after = rec(c, jid)
    assert {k: after[k] for k in want} == want
    for k in ("job_id", "submit_time", "eligible_time", "user", "hold"):
        assert after[k] == before[k], k
    assert f"Partition={after['partition']}" in c.ok("scontrol", "show", "job", str(jid))
    c.ok("scancel", str(jid))


def test_dependency_and_start_time(c):
    first = held(c)
    jid = held(c)
    assert upd(c, jid, f"Dependency=afterok:{first}").rc == 0
    r = rec(c, jid)
    assert r["dependency"].startswith(f"afterok:{first}")
    later = int(time.time()) + 3600
    assert upd(c, jid, "StartTime=now+1hour").rc == 0
    assert abs(rec(c, jid)["begin_time"] - later) < 60
    assert upd(c, jid, "StartTime=now").rc == 0  # eligible now: no begin time left
    assert rec(c, jid)["begin_time"] is None
    c.ok("scancel", str(first), str(jid))


def test_array_task_throttle_and_reservation(c):
    arr = held(c, "--array=0-3")
    assert upd(c, arr, "ArrayTaskThrottle=2").rc == 0
    assert rec(c, arr)["array_max_tasks"] == 2
    assert "ArrayTaskThrottle=2" in c.ok("scontrol", "show", "job", str(arr))
    c.ok("scontrol", "create", "reservation", "ReservationName=upd", "StartTime=now+1day",
         "Duration=60", f"Users={TEST_USER}", "Nodes=node1")
    assert upd(c, arr, "ReservationName=upd").rc == 0
    r = upd(c, arr, "ReservationName=nosuch")
    assert (r.rc, r.err) == (1, "slurm_update error: Requested reservation is invalid\n"), r
    assert upd(c, arr, "ReservationName=").rc == 0
    c.ok("scancel", str(arr))
    c.ok("scontrol", "delete", "ReservationName=upd")


# ---- refusals: Slurm's message, and the job exactly as it was -----------------------------

REFUSED = [
    (["Partition=nosuch"], "slurm_update error: Invalid partition name specified"),
    (["Account=nosuch"],
     "slurm_update error: Invalid account or account/partition combination specified"),
    (["QOS=nosuch"], "slurm_update error: Invalid qos specification"),
    (["ReqNodeList=node9"], "slurm_update error: Invalid node name specified"),
    (["ExcNodeList=node[1-"], "slurm_update error: Invalid node name specified"),
    (["Gres=fpga:1"], "slurm_update error: Invalid generic resource (gres) specification"),
    (["Gres=gpu:9"], "slurm_update error: Requested node configuration is not available"),
    (["CPUsPerTask=64"], "slurm_update error: Requested node configuration is not available"),
    (["MinMemoryNode=999G"], "slurm_update error: Requested node configuration is not available"),
    (["NumNodes=0"], "slurm_update error: Node count specification invalid"),
    (["NumNodes=3-1"], "slurm_update error: Node count specification invalid"),
    (["NumTasks=0"], "slurm_update error: Task count specification invalid"),
    (["TimeLimit=soon"],
     "slurm_update error: Requested time limit is invalid (missing or exceeds some limit)"),
    (["TimeLimit-=90"],
     "slurm_update error: Requested time limit is invalid (missing or exceeds some limit)"),
    (["TimeMin=90"], "slurm_update error: Invalid time-min specification (exceeds job's time "
                     "or other limits)"),
    (["Dependency=afterok:999999"], "slurm_update error: Job dependency problem"),
    (["StartTime=someday"], "slurm_update error: Invalid time specified"),
    (["Features=fast"], "slurm_update error: Invalid feature specification"),  # no node has it
    (["ArrayTaskThrottle=2"], "slurm_update error: Invalid job array specification"),
    (["TimeLimit=2:00:00"], "slurm_update error: Access/permission denied"),  # > debug MaxTime
    (["Nice=-5"], "slurm_update error: Access/permission denied"),
    (["OverSubscribe=yes"], "slurm_update error: Access/permission denied"),
    (["TasksPerNode=2"], "slurm_update error: Access/permission denied"),
    (["Contiguous=yes"], "slurm_update error: Access/permission denied"),
    (["Contiguous=no"], "slurm_update error: Access/permission denied"),  # nothing to clear
    (["MinCPUsNode=64"],  # no node has 64 CPUs
     "slurm_update error: Requested node configuration is not available"),
    (["MinCPUsNode=0"], "slurm_update error: CPU count specification invalid"),
    (["Priority=7"], "slurm_update error: Job is in held state, pending scheduler release"),
    (["Bogus=1"], "Update of this parameter is not supported: Bogus=1\nRequest aborted"),
    (["Comment=kept?", "Partition=nosuch"], "slurm_update error: Invalid partition name specified"),
    (["Comment=kept?", "Nice=-1"], "slurm_update error: Access/permission denied"),
]


@pytest.mark.parametrize("changes,err", REFUSED, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_invalid_changes_are_refused_and_change_nothing(c, changes, err):
    jid = held(c, "-p", "debug", "-t", "30")
    before = stable(rec(c, jid))
    r = upd(c, jid, *changes)
    assert (r.rc, r.out, r.err) == (1, "", err + "\n"), r
    assert stable(rec(c, jid)) == before
    c.ok("scancel", str(jid))


def test_circular_dependency_refused(c):
    a = held(c)
    b = c.sbatch("-H", f"--dependency=afterok:{a}", "--wrap", "true", user=TEST_USER,
                 cwd=c.workdir)
    for target, dep in ((a, a), (a, b)):
        r = upd(c, target, f"Dependency=afterok:{dep}")
        assert (r.rc, r.err) == (1, "slurm_update error: Circular job dependency\n"), r
    assert rec(c, a)["dependency"] is None
    c.ok("scancel", str(a), str(b))


# ---- who may change what -------------------------------------------------------------------

def test_another_user_is_refused_root_and_operators_may_do_more(c):
    jid = held(c, "-p", "debug", "-t", "30")
    before = stable(rec(c, jid))
    r = upd(c, jid, "Comment=mine now", user=TEST_USER2)
    assert (r.rc, r.err) == (1, "slurm_update error: Access/permission denied\n"), r
    assert stable(rec(c, jid)) == before
    for change in ("TimeLimit=2:00:00", "Nice=-5", "OverSubscribe=no", "TasksPerNode=1",
                   "Comment=by root"):
        r = upd(c, jid, change, user=None)
        assert (r.rc, r.err) == (0, ""), (change, r)
    got = rec(c, jid)
    assert (got["time_limit"], got["nice"], got["exclusive"], got["ntasks_per_node"],
            got["comment"]) == (120, -5, True, 1, "by root")
    assert "OverSubscribe=NO" in c.ok("scontrol", "show", "job", str(jid))
    c.ok("scancel", str(jid))


def test_priority_rules(c):
    blocker = held(c)
    jid = c.sbatch(f"--dependency=afterok:{blocker}", "--wrap", "true", user=TEST_USER,
                   cwd=c.workdir)  # pending, not held: it has a priority
    assert upd(c, jid, "Nice=7").rc == 0
    assert upd(c, jid, "Priority=5000", user=None).rc == 0  # operators set it; nice is reset
    assert (rec(c, jid)["priority"], rec(c, jid)["nice"]) == (5000, 0)
    for change, err in (("Priority=6000", "Access/permission denied"),
                        ("Priority=4000", "Changes to job priority are not persistent, change "
                                          "nice instead")):
        r = upd(c, jid, change)
        assert (r.rc, r.err) == (1, f"slurm_update error: {err}\n"), r
    assert rec(c, jid)["priority"] == 5000
    assert upd(c, jid, "Priority=0").rc == 0  # the owner holds it
    assert (rec(c, jid)["hold"], rec(c, jid)["reason"]) == ("user", "JobHeldUser")
    r = upd(c, jid, "Priority=10", user=None)  # a held job is released, not re-prioritised
    assert (r.rc, r.err) == (1, "slurm_update error: Job is in held state, pending scheduler "
                                "release\n"), r
    c.ok("scontrol", "release", str(jid), user=TEST_USER)
    assert rec(c, jid)["hold"] is None
    c.ok("scancel", str(blocker), str(jid))


# ---- running jobs ---------------------------------------------------------------------------

def test_running_job_time_limit_down_for_users_up_for_operators(c):
    jid = c.sbatch("-t", "10", "--wrap", "sleep 300", user=TEST_USER, cwd=c.workdir)
    c.wait_state(jid, "RUNNING")
    start = rec(c, jid)["start_time"]
    assert upd(c, jid, "TimeLimit=5").rc == 0
    got = rec(c, jid)
    assert (got["time_limit"], got["end_time"]) == (5, start + 300)
    r = upd(c, jid, "TimeLimit=8")
    assert (r.rc, r.err) == (1, "slurm_update error: Access/permission denied\n"), r
    assert rec(c, jid)["time_limit"] == 5
    assert upd(c, jid, "TimeLimit=-2").rc == 0
    assert rec(c, jid)["time_limit"] == 3
    assert upd(c, jid, "TimeLimit=20", user=None).rc == 0
    assert (rec(c, jid)["time_limit"], rec(c, jid)["end_time"]) == (20, start + 1200)
    for change, err in (("Partition=debug", "Job is no longer pending execution"),
                        ("NumNodes=2", "Requested operation not supported on this system"),
                        ("Dependency=", "Job is no longer pending execution")):
        r = upd(c, jid, change)
        assert (r.rc, r.err) == (1, f"slurm_update error: {err}\n"), r
    assert upd(c, jid, "Comment=still running", "JobName=live").rc == 0
    assert (rec(c, jid)["comment"], rec(c, jid)["name"]) == ("still running", "live")
    c.ok("scancel", str(jid))
    c.wait_done(jid)
    r = upd(c, jid, "Comment=late")
    assert (r.rc, r.err) == (1, "slurm_update error: Job/step already completing or "
                                "completed\n"), r


# ---- job arrays ---------------------------------------------------------------------------

def test_update_of_an_array_id_reaches_its_pending_tasks(c):
    arr = c.sbatch("--array=0-3%1", "-t", "10", "--wrap", "sleep 300", user=TEST_USER,
                   cwd=c.workdir)
    wait_for(lambda: any(j.get("array_job_id") == arr and j["state"] == "RUNNING"
                         for j in wire.jobs(c).values()), what="first task running")
    r = upd(c, arr, "Partition=debug", "Comment=batch")
    assert r.rc == 1 and r.err == f"{arr}_0: Job is no longer pending execution\n", r
    recs = [j for j in wire.jobs(c).values() if j.get("array_job_id") == arr]
    running = [j for j in recs if j["state"] == "RUNNING"]
    pending = [j for j in recs if j["state"] == "PENDING"]
    assert [j["partition"] for j in running] == ["gpu"] and running[0]["comment"] is None
    assert pending and all((j["partition"], j["comment"]) == ("debug", "batch") for j in pending)
    # settings any task takes reach all of them; one index on its own is split off
    assert upd(c, arr, "TimeLimit=9", "ArrayTaskThrottle=2").rc == 0
    assert all(j["time_limit"] == 9 for j in wire.jobs(c).values() if j.get("array_job_id") == arr)
    wait_for(lambda: sum(j.get("array_job_id") == arr and j["state"] == "RUNNING"
                         for j in wire.jobs(c).values()) == 2, what="throttle raised to 2")
    assert c.run(["scontrol", "update", f"JobId={arr}_3", "Comment=three"],
                 user=TEST_USER).rc == 0
    three = [j for j in wire.jobs(c).values()
             if j.get("array_job_id") == arr and j.get("array_task_id") == 3]
    assert [j["comment"] for j in three] == ["three"]
    c.ok("scancel", str(arr))


# ---- spellings -----------------------------------------------------------------------------

def test_scontrol_spellings(c):
    a, b = held(c, "-J", "spell-a"), held(c, "-J", "spell-b")
    steps = [(["scontrol", "update", f"job={a}", "Comment=one"], {a: "one"}),
             (["scontrol", "update", "JobId", str(a), "Comment", "two"], {a: "two"}),
             (["scontrol", "update", "job", f"JobId={a},{b}", "Comment=three"],
              {a: "three", b: "three"}),
             (["scontrol", "update", "JobName=spell-b", "Comment=four"], {b: "four"})]
    for argv, want in steps:
        r = c.run(argv, user=TEST_USER)
        assert (r.rc, r.err) == (0, ""), (argv, r)
        assert {j: rec(c, j)["comment"] for j in want} == want
    assert c.run(["scontrol", "update", f"JobId={a}", "Nice"], user=TEST_USER).rc == 0
    assert rec(c, a)["nice"] == 100  # a bare Nice is Nice=100
    r = c.run(["scontrol", "update", f"JobId={a}"], user=TEST_USER)
    assert (r.rc, r.err) == (1, "No changes specified\n"), r
    r = c.run(["scontrol", "update", "JobName=no-such-name", "Comment=x"], user=TEST_USER)
    assert (r.rc, r.err) == (1, "scontrol: error: No jobs with name 'no-such-name'\n"), r
    c.ok("scancel", str(a), str(b))


# ---- scontrol show step -------------------------------------------------------------------

STEP_RE = (r"StepId={id} UserId={uid} StartTime=\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d "
           r"TimeLimit=UNLIMITED\n"
           r"   State=RUNNING Partition=gpu NodeList={nodes}\n"
           r"   Nodes=1 CPUs=2 Tasks={tasks} Name={name} Network=\(null\)\n"
           r"   TRES=cpu=2,mem=\d+[MG],node=1\n"
           r"   ResvPorts={ports}\n"
           r"   CPUFreqReq=Default{dist}\n"
           r"   SrunHost:Pid={srun}\n\n")


def test_show_step_lists_srun_and_batch_steps(c):
    import pwd
    uid = pwd.getpwnam(TEST_USER).pw_uid
    jid = c.sbatch("-n2", "--wrap", "srun -n2 sleep 300", user=TEST_USER, cwd=c.workdir)
    wait_for(lambda: f"StepId={jid}.0 " in c.run(["scontrol", "show", "steps"]).out,
             what="the srun step")
    node = rec(c, jid)["batch_host"]
    batch = STEP_RE.format(id=f"{jid}\\.batch", uid=uid, nodes=node, tasks=1, name="batch",
                           ports=r"\(null\)", dist="", srun=r"\(null\):0")
    step0 = STEP_RE.format(id=f"{jid}\\.0", uid=uid, nodes=node, tasks=2, name="sleep",
                           ports=r"\d+", dist=" Dist=Block", srun=r"[^:\s]+:\d+")
    out = c.ok("scontrol", "show", "step", str(jid))
    assert re.fullmatch(batch + step0, out), out
    assert re.fullmatch(step0, c.ok("scontrol", "show", "step", f"{jid}.0")), out
    one = c.ok("scontrol", "-o", "show", "step", f"{jid}.batch")
    assert one.count("\n") == 1 and one.startswith(f"StepId={jid}.batch UserId={uid} ")
    assert one.rstrip("\n").endswith("CPUFreqReq=Default SrunHost:Pid=(null):0"), one
    # squeue -s: a job's steps by -j (-s's own list names steps), srun steps first
    out = c.ok("squeue", "--steps", "-j", str(jid), "-o", "%i %j %u %N")
    assert out.splitlines() == ["STEPID NAME USER NODELIST", f"{jid}.0 sleep {TEST_USER} {node}",
                                f"{jid}.batch batch {TEST_USER} {node}"], out
    assert c.ok("squeue", "-h", f"--steps={jid}.batch", "-o", "%i").split() == [f"{jid}.batch"]
    assert f"{jid}.0 " in c.ok("squeue", "-s", "-u", TEST_USER)
    r = c.run(["scontrol", "show", "step", f"{jid}.7"])
    assert (r.rc, r.out) == (1, f"Job step {jid}.7 not found\n"), r
    r = c.run(["scontrol", "show", "step", "x.0"])
    assert (r.rc, r.err) == (1, '"x" does not look like a jobid\n'), r
    c.ok("scancel", str(jid))
    c.wait_done(jid)
    wait_for(lambda: c.run(["scontrol", "show", "steps"]).out == "No job steps in the system\n",
             what="no steps left")


# ---- MinCPUsNode, Contiguous, WCKey (and --mincpus, --contiguous, --wckey) ------------------

LONG = 120  # seconds: generous waits for a loaded machine


def sched_reason(c, jid) -> str:
    """The job's reason once the scheduler has looked at it (not the submit-time "None")."""
    def looked():
        r = rec(c, jid)
        return r["last_sched_eval"] is not None and r["reason"]
    return wait_for(looked, LONG, what=f"job {jid} evaluated by the scheduler")


def test_contiguous_permissions_owner_clears_operator_sets(c):
    plain = held(c)
    contig = held(c, "--contiguous", "-N2")
    assert rec(c, contig)["contiguous"] is True
    show = c.ok("scontrol", "show", "job", str(contig))
    assert "Contiguous=1 " in show and "Contiguous=0 " in c.ok("scontrol", "show", "job",
                                                               str(plain))
    # the owner may not set it, nor set it again, nor clear what is not set
    for jid, change in ((plain, "Contiguous=yes"), (plain, "Contiguous=no"),
                        (contig, "Contiguous=yes")):
        r = upd(c, jid, change)
        assert (r.rc, r.err) == (1, "slurm_update error: Access/permission denied\n"), (change, r)
    r = upd(c, contig, "Contiguous=no", user=TEST_USER2)  # not the owner
    assert (r.rc, r.err) == (1, "slurm_update error: Access/permission denied\n"), r
    assert (rec(c, plain)["contiguous"], rec(c, contig)["contiguous"]) == (False, True)
    # the owner clears it; an operator sets it (root) and clears it
    assert upd(c, contig, "Contiguous=no").rc == 0
    assert rec(c, contig)["contiguous"] is False
    r = upd(c, plain, "Contig=yes", user=None)
    assert (r.rc, r.err) == (0, ""), r
    assert rec(c, plain)["contiguous"] is True
    assert c.ok("squeue", "-h", "-j", str(plain), "-o", "%O") == "1\n"
    assert upd(c, plain, "Contiguous=no", user=None).rc == 0
    assert rec(c, plain)["contiguous"] is False
    c.ok("scancel", str(plain), str(contig))


def test_pending_only_fields_refused_on_a_running_job(c):
    jid = c.sbatch("--mem=100", "--wrap", "sleep 300", user=TEST_USER, cwd=c.workdir)
    c.wait_state(jid, "RUNNING", timeout=LONG)
    before = stable(rec(c, jid))
    for change, user in (("MinCPUsNode=2", TEST_USER), ("WCKey=x", TEST_USER),
                         ("Contiguous=yes", None)):
        r = upd(c, jid, change, user=user)
        assert (r.rc, r.err) == (1, "slurm_update error: Job is no longer pending "
                                    "execution\n"), (change, r)
    assert stable(rec(c, jid)) == before
    c.ok("scancel", str(jid))


def test_wckey_is_stored_shown_updated_and_accounted(c):
    jid = held(c, "--wckey=proj")
    assert rec(c, jid)["wckey"] == "proj"
    assert "   WCKey=proj\n" in c.ok("scontrol", "show", "job", str(jid))
    assert c.ok("squeue", "-h", "-j", str(jid), "-o", "%w|%O") == "proj|0\n"
    assert c.ok("squeue", "-h", "-j", str(jid), "-O", "wckey").strip() == "proj"
    import json
    doc = json.loads(c.ok("squeue", "--json", "-j", str(jid)))
    assert [j["wckey"] for j in doc["jobs"]] == ["proj"]
    assert upd(c, jid, "WCKey=other").rc == 0
    assert rec(c, jid)["wckey"] == "other"
    assert upd(c, jid, "WCKey=").rc == 0  # empty clears it
    assert rec(c, jid)["wckey"] is None
    assert "WCKey=" not in c.ok("scontrol", "show", "job", str(jid))
    assert c.ok("squeue", "-h", "-j", str(jid), "-o", "%w") == "(null)\n"
    c.ok("scancel", str(jid))
    done = c.sbatch("--wckey=acct-key", "--mem=100", "--wrap", "true", user=TEST_USER,
                    cwd=c.workdir)
    c.wait_done(done, timeout=LONG)
    assert c.ok("sacct", "-j", str(done), "-X", "-n", "-P", "-o", "JobID,WCKey") == \
        f"{done}|acct-key\n"


def test_mincpus_is_shown_and_placement_needs_that_many_free_cpus(c):
    # node1 keeps 6 of its 8 CPUs busy: 2 free
    busy = c.sbatch("-w", "node1", "-c", "6", "--mem=100", "--wrap", "sleep 300",
                    user=TEST_USER, cwd=c.workdir)
    c.wait_state(busy, "RUNNING", timeout=LONG)
    small = c.sbatch("-w", "node1", "--mincpus=2", "--mem=100", "--wrap", "sleep 300",
                     user=TEST_USER, cwd=c.workdir)
    c.wait_state(small, "RUNNING", timeout=LONG)
    assert c.job(small)["cpus"] == "2"  # the job gets its minimum
    big = c.sbatch("-w", "node1", "--mincpus=3", "--mem=100", "--wrap", "sleep 300",
                   user=TEST_USER, cwd=c.workdir)
    assert sched_reason(c, big) == "Resources"
    r = rec(c, big)
    assert (r["state"], r["min_cpus_node"], r["num_cpus"]) == ("PENDING", 3, 3)
    assert "MinCPUsNode=3 " in c.ok("scontrol", "show", "job", str(big))
    assert c.ok("squeue", "-h", "-j", str(big), "-o", "%c") == "3\n"
    c.ok("scancel", str(small))  # 2 CPUs free again: still not 3
    c.wait_done(small, timeout=LONG)
    assert upd(c, big, "MinCPUsNode=2").rc == 0  # the owner lowers it: it fits now
    c.wait_state(big, "RUNNING", timeout=LONG)
    assert c.job(big)["cpus"] == "2"
    c.ok("scancel", str(busy), str(big))
    c.wait_done(busy, timeout=LONG)
    c.wait_done(big, timeout=LONG)
    r = c.run(["sbatch", "--mincpus=64", "--wrap", "true"], user=TEST_USER, cwd=c.workdir)
    assert (r.rc, r.out, r.err) == (1, "", "sbatch: error: CPU count per node can not be "
                                           "satisfied\nsbatch: error: Batch job submission "
                                           "failed: Requested node configuration is not "
                                           "available\n"), r


def test_srun_takes_mincpus_contiguous_and_wckey_without_warnings(c):
    r = c.run(["srun", "-N2", "--mincpus=3", "--contiguous", "--wckey=interactive",
               "--mem=100", "sh", "-c", "echo $SLURM_JOB_ID"], user=TEST_USER, cwd=c.workdir,
              timeout=LONG)
    assert r.rc == 0 and r.err == "", r
    jid = int(r.out.split()[0])
    job = rec(c, jid)
    assert (job["min_cpus_node"], job["contiguous"], job["wckey"]) == (3, True, "interactive")
    assert job["node_list"] in ("node[1-2]", "node[2-3]")
    assert c.job(jid)["cpus"] == "6"  # 3 on each node


def test_contiguous_job_waits_for_the_middle_node(c):
    """3 nodes; node2 busy. A 2-node job takes node1 and node3; a contiguous one waits with
    reason Resources (squeue --start plans it on adjacent nodes) and starts on node[1-2] once
    node2 is freed."""
    blocker = c.sbatch("-w", "node2", "--exclusive", "-t", "10", "--wrap", "sleep 300",
                       user=TEST_USER, cwd=c.workdir)
    c.wait_state(blocker, "RUNNING", timeout=LONG)
    plain = c.sbatch("-N2", "-t", "5", "--wrap", "sleep 300", user=TEST_USER, cwd=c.workdir)
    c.wait_state(plain, "RUNNING", timeout=LONG)
    assert rec(c, plain)["node_list"] == "node[1,3]"
    c.ok("scancel", str(plain))
    c.wait_done(plain, timeout=LONG)
    contig = c.sbatch("-N2", "--contiguous", "-t", "5", "--wrap", "sleep 300",
                      user=TEST_USER, cwd=c.workdir)
    assert sched_reason(c, contig) == "Resources"
    assert rec(c, contig)["state"] == "PENDING"
    start = c.ok("squeue", "--start", "-h", "-j", str(contig), "-o", "%i %Y")
    jid, planned = start.split()
    assert (jid, expand(planned)) == (str(contig), ["node1", "node2"]), start
    c.ok("scancel", str(blocker))
    c.wait_state(contig, "RUNNING", timeout=LONG)
    assert rec(c, contig)["node_list"] == "node[1-2]"
    c.ok("scancel", str(contig))
    c.wait_done(contig, timeout=LONG)
