"""Golden tests: muster.cli.fmt_sacct against real Slurm 22.05 sacct output (a subset of
the captured jobs, compared with the matching lines of each reference file)."""
import pytest

from muster.cli import fmt_sacct as fa
from records_fixture import job, ref_lines, ts, utc_tz  # noqa: F401

P_FORMAT = ("JobID,JobIDRaw,JobName,Partition,Account,User,AllocCPUS,AllocTRES,ReqTRES,"
            "State,ExitCode,Elapsed,Submit,Start,End,NodeList")


def step(job_id, step_id, name, start, end, cpus=1, tres="cpu=1,mem=1G,node=1",
         state="COMPLETED", ec=0, sig=0, nodes="node1", nn=1):
    return {"job_id": job_id, "step_id": step_id, "name": name, "state": state,
            "exit_code": ec, "exit_signal": sig, "start_time": start, "end_time": end,
            "node_list": nodes, "num_nodes": nn, "num_cpus": cpus, "num_tasks": 1,
            "tres_alloc": tres}


def acct_jobs():
    t = ts
    t1 = "cpu=1,mem=1G,node=1,billing=1"
    return [
        job(job_id=1, name="envbatch", state="COMPLETED", submit_time=t("17:30:08"),
            start_time=t("17:30:11"), end_time=t("17:30:11"), node_list="node1",
            tres_req=t1 + ",gres/gpu=2", tres_alloc=t1 + ",gres/gpu=2",
            steps=[step(1, "batch", "batch", t("17:30:11"), t("17:30:11"),
                        tres="cpu=1,mem=1G,node=1,gres/gpu=2")]),
        job(job_id=2, name="env", state="COMPLETED", submit_time=t("17:30:18"),
            start_time=t("17:30:18"), end_time=t("17:30:19"), node_list="node[1-2]",
            num_nodes=2, num_cpus=4,
            tres_req="cpu=4,mem=4G,node=2,billing=4,gres/gpu=4",
            tres_alloc="cpu=4,mem=4G,node=2,billing=4,gres/gpu=4",
            steps=[step(2, 0, "env", t("17:30:18"), t("17:30:19"), cpus=4,
                        tres="cpu=4,mem=4G,node=2,gres/gpu=4", nodes="node[1-2]", nn=2)]),
        job(job_id=5, array_job_id=4, array_task_id=0, name="envarray", state="COMPLETED",
            submit_time=t("17:30:21"), start_time=t("17:30:22"), end_time=t("17:30:22"),
            node_list="node1", tres_req=t1 + ",gres/gpu=1", tres_alloc=t1 + ",gres/gpu=1",
            steps=[step(5, "batch", "batch", t("17:30:22"), t("17:30:22"),
                        tres="cpu=1,mem=1G,node=1,gres/gpu=1")]),
        job(job_id=7, name="interactive", state="COMPLETED", submit_time=t("17:30:23"),
            start_time=t("17:30:23"), end_time=t("17:30:23"), node_list="node1",
            tres_req=t1 + ",gres/gpu=1", tres_alloc=t1 + ",gres/gpu=1", steps=[]),
        job(job_id=12, name="wrap", state="FAILED", exit_code=0, exit_signal=9,
            reason="None", submit_time=t("17:30:33"), start_time=t("17:30:33"),
            end_time=t("17:30:33"), node_list="node1", tres_req=t1, tres_alloc=t1,
            steps=[step(12, "batch", "batch", t("17:30:33"), t("17:30:33"),
                        state="CANCELLED", sig=9)]),
        job(job_id=33, name="wrap", partition="debug", state="CANCELLED", cancelled_by=0,
            reason="PartitionConfig", submit_time=t("17:30:39"), end_time=t("17:30:58"),
            tres_req=t1, steps=[]),
        job(job_id=42, name="train-llm", state="NODE_FAIL", submit_time=t("17:30:59"),
            start_time=t("17:31:01"), end_time=t("17:31:07"), node_list="node[1-2]",
            num_nodes=2, num_cpus=16,
            tres_req="cpu=16,mem=16G,node=2,billing=16,gres/gpu=16",
            tres_alloc="cpu=16,mem=16G,node=2,billing=16,gres/gpu=16",
            steps=[step(42, "batch", "batch", t("17:31:01"), t("17:31:08"), cpus=8,
                        tres="cpu=8,mem=8G,node=1,gres/gpu=8", state="CANCELLED",
                        ec=None)]),
        job(job_id=44, name="dbg", user="root", uid=0, account="root", partition="debug",
            state="CANCELLED", cancelled_by=0, submit_time=t("17:30:59"),
            start_time=t("17:31:01"), end_time=t("17:31:13"), node_list="node3",
            tres_req=t1 + ",gres/gpu=1", tres_alloc=t1 + ",gres/gpu=1",
            steps=[step(44, "batch", "batch", t("17:31:01"), t("17:31:13"),
                        tres="cpu=1,mem=1G,node=1,gres/gpu=1", state="CANCELLED", sig=15,
                        nodes="node3")]),
        job(job_id=48, array_job_id=48, array_task_str="1-6", array_max_tasks=2,
            name="sweep", state="CANCELLED", cancelled_by=0, submit_time=t("17:31:00"),
            end_time=t("17:31:13"), tres_req=t1 + ",gres/gpu=1", steps=[]),
    ]


IDS = ("1", "1.", "2", "2.", "4_0", "7", "12", "33", "42", "44", "48_")


def _pick(lines, header_lines):
    return lines[:header_lines] + [ln for ln in lines[header_lines:]
                                   if ln.split("|")[0].split(" ")[0].split(".")[0] in
                                   ("1", "2", "4_0", "7", "12", "33", "42", "44", "48_[1-6%2]")]


def test_parsable2_format(utc_tz):
    got = fa.render(acct_jobs(), fields=P_FORMAT, parsable2=True, now=ts("17:40:00"))
    assert got.splitlines() == _pick(ref_lines("sacct_P_format.txt"), 1)


def test_default_fixed_width(utc_tz):
    got = fa.render(acct_jobs(), fields=None, now=ts("17:40:00"))
    assert got.splitlines() == _pick(ref_lines("sacct_a.txt"), 2)


def test_allocations_only(utc_tz):
    got = fa.render(acct_jobs(), fields=None, allocations_only=True, now=ts("17:40:00"))
    want = [ln for ln in _pick(ref_lines("sacct_a.txt"), 2) if "." not in ln.split(" ")[0]]
    assert got.splitlines() == want


def test_states_exitcodes(utc_tz):
    got = fa.render(acct_jobs(),
                    fields="JobID,JobName%15,State,ExitCode,DerivedExitCode,Reason",
                    now=ts("17:40:00"))
    assert got.splitlines() == _pick(ref_lines("sacct_states_exitcodes.txt"), 2)


def test_noheader_parsable2_allocations(utc_tz):
    got = fa.render(acct_jobs(), fields="JobID,State,ExitCode", parsable2=True,
                    noheader=True, allocations_only=True, now=0)
    want = [ln for ln in ref_lines("sacct_nP_jobid_state_exit.txt")
            if ln.split("|")[0] in ("1", "2", "4_0", "7", "12", "33", "42", "44",
                                    "48_[1-6%2]")]
    assert got.splitlines() == want


def test_parsable_trailing_and_delimiter(utc_tz):
    js = acct_jobs()[:1]
    got = fa.render(js, fields="JobID,State", parsable=True, allocations_only=True)
    assert got.splitlines() == ["JobID|State|", "1|COMPLETED|"]
    got = fa.render(js, fields="jobid,state", parsable2=True, delimiter=",",
                    allocations_only=True)
    assert got.splitlines() == ["JobID,State", "1,COMPLETED"]


def test_widths_and_unknown():
    assert fa.parse_fields("jobid,JobName%30,state%-12") == [
        ("JobID", None, False), ("JobName", 30, False), ("State", 12, True)]
    with pytest.raises(ValueError, match="bogus"):
        fa.parse_fields("JobID,bogus")
    got = fa.render(acct_jobs()[:1], fields="JobID%-5,JobName%5", allocations_only=True)
    assert got.splitlines()[2] == "1     envb+ "


def test_cluster_and_jobidraw(utc_tz):
    got = fa.render(acct_jobs()[2:3], fields="JobID,JobIDRaw,Cluster", parsable2=True,
                    noheader=True, cluster="benchcluster")
    assert got.splitlines() == ["4_0|5|benchcluster", "4_0.batch|5.batch|benchcluster"]
