"""Golden tests: muster.cli.fmt_scontrol against real Slurm 22.05 scontrol output, with
our deliberate 23.11 difference: ``TRES=`` becomes ``ReqTRES=`` + ``AllocTRES=``."""
import pytest

from muster.cli import fmt_scontrol as sc
from records_fixture import (NOW_FMT, busy_jobs, busy_nodes, node, partitions,  # noqa: F401
                             ref_lines, ts, utc_tz)

NOW_JOB = ts("17:31:05")  # RunTime=00:00:04


def _to_2311(lines, job):
    out = []
    for ln in lines:
        if ln.startswith("   TRES="):
            out.append("   ReqTRES=" + ln[len("   TRES="):])
            out.append("   AllocTRES=" + (job.get("tres_alloc") or "(null)"))
        else:
            out.append(ln)
    return out


def _job(jid):
    return next(j for j in busy_jobs() if j["job_id"] == jid)


@pytest.mark.parametrize("name,jid,details", [
    ("scontrol_show_job_running_multinode.txt", 42, False),
    ("scontrol_show_job_d_running_multinode.txt", 42, True),
    ("scontrol_show_job_running_bob.txt", 43, False),
    ("scontrol_show_job_pending_resources.txt", 45, False),
    ("scontrol_show_job_pending_priority.txt", 46, False),
    ("scontrol_show_job_held.txt", 47, False),
    ("scontrol_show_job_array.txt", 48, False),
    ("scontrol_show_job_dependency.txt", 49, False),
])
def test_show_job(utc_tz, name, jid, details):
    j = _job(jid)
    got = sc.show_job(j, NOW_JOB, details=details)
    assert got.endswith("\n\n")
    assert got.splitlines() == _to_2311(ref_lines(name), j)


def test_show_job_one_liner(utc_tz):
    j = _job(42)
    want = ref_lines("scontrol_o_show_job.txt")[0]
    want = want.replace("TRES=cpu=16", "ReqTRES=cpu=16").replace(
        "gres/gpu=16 Socks", "gres/gpu=16 AllocTRES=" + j["tres_alloc"] + " Socks")
    assert sc.show_job(j, NOW_JOB, one_liner=True) == want + "\n"


def test_reason_desc_spaces(utc_tz):
    j = dict(_job(47), reason_desc="job requeued in held state")
    assert "Reason=job_requeued_in_held_state " in sc.show_job(j, NOW_JOB)


def test_system_comment_follows_workdir_before_comment(utc_tz):
    """Slurm's order: WorkDir=, AdminComment=, SystemComment=, Comment=; shown only when set."""
    j = dict(_job(42), reason="JobLaunchFailure", comment="mine",
             system_comment="container: image /x.tar: No such file or directory")
    lines = sc.show_job(j, NOW_JOB).splitlines()
    at = lines.index("   SystemComment=container: image /x.tar: No such file or directory ")
    assert lines[at - 1].startswith("   WorkDir=") and lines[at + 1] == "   Comment=mine "
    assert "SystemComment=" not in sc.show_job(_job(42), NOW_JOB)


def test_show_node(utc_tz):
    n = busy_nodes()[0]
    assert sc.show_node(n, NOW_FMT).splitlines() == ref_lines("scontrol_show_node_node1.txt")
    assert (sc.show_node(n, NOW_FMT, details=True).splitlines()
            == ref_lines("scontrol_show_node_d_node1.txt"))


def test_show_nodes_all(utc_tz):
    got = "".join(sc.show_node(n, NOW_FMT) for n in busy_nodes())
    assert got.splitlines() == ref_lines("scontrol_show_nodes_all.txt")


def test_show_node_down_reason(utc_tz):
    n = node("node4", 17104, state="DOWN", flags=["NOT_RESPONDING"], cpu_load=6.92,
             reason="Not responding", reason_user="slurm", reason_time=ts("17:54:32"))
    lines = sc.show_node(n, 0).splitlines()
    assert "   State=DOWN+NOT_RESPONDING ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A" in lines
    assert lines[-2] == "   Reason=Not responding [slurm@2026-11-29T17:54:32]"
    assert lines[-1] == ""


def test_show_partition(utc_tz):
    got = "".join(sc.show_partition(p) for p in partitions())
    assert got.splitlines() == ref_lines("scontrol_show_partition.txt")


def test_show_config(utc_tz):
    ref = ref_lines("scontrol_show_config.txt")
    items = [tuple(part.strip() for part in ln.split(" = ", 1)) if " = " in ln
             else (ln.rstrip(" ="), "") for ln in ref[1:ref.index("")]]
    got = sc.show_config(items, ts("17:31:05")).splitlines()
    assert got == ref[:ref.index("")]
