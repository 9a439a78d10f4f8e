"""Golden tests: muster.cli.fmt_squeue against real Slurm 22.05 squeue output."""
import pytest

from muster.cli import fmt_squeue as fq
from records_fixture import (NOW, NOW_FMT, busy_jobs, job, ref_lines, ref_sections,  # noqa: F401
                             ts, utc_tz)


def _render(jobs=None, now=NOW, **kw):
    opts = dict(fmt=None, fmt_long=None, long=False, start=False, noheader=False,
                array_expand=False, now=now, sort=None)
    opts.update(kw)
    return fq.render(busy_jobs() if jobs is None else jobs, **opts).splitlines()


def test_default(utc_tz):
    assert _render() == ref_lines("squeue_default.txt")


def test_long(utc_tz):
    assert _render(long=True) == ref_lines("squeue_long.txt")


def test_array_expanded(utc_tz):
    assert _render(array_expand=True) == ref_lines("squeue_r_array_expanded.txt")


def test_state_filter_pd(utc_tz):
    want = fq.parse_states("PD")
    jobs = [j for j in busy_jobs() if j["state"] in want]
    assert _render(jobs) == ref_lines("squeue_t_PD.txt")


def test_user_filter(utc_tz):
    jobs = [j for j in busy_jobs() if j["user"] == "alice"]
    assert _render(jobs) == ref_lines("squeue_u_alice.txt")


def test_start(utc_tz):
    assert _render(start=True) == ref_lines("squeue_start.txt")


def test_noheader_o_i(utc_tz):
    assert _render(fmt="%i", noheader=True) == ref_lines("squeue_h_o_i.txt")


def _cmd_to_kwargs(cmd):
    import shlex
    argv = shlex.split(cmd)[1:]
    kw = {}
    args = iter(argv)
    for a in args:
        if a == "-o":
            kw["fmt"] = next(args)
        elif a == "-O":
            kw["fmt_long"] = next(args)
        elif a.startswith("--format="):
            kw["fmt"] = a.split("=", 1)[1]
        elif a.startswith("--Format="):
            kw["fmt_long"] = a.split("=", 1)[1]
        elif a == "--noheader":
            kw["noheader"] = True
        else:
            raise AssertionError(a)
    return kw


@pytest.mark.parametrize("cmd", list(ref_sections("squeue_format_examples.txt")))
def test_format_examples(utc_tz, cmd):
    want = ref_sections("squeue_format_examples.txt")[cmd]
    assert _render(now=NOW_FMT, **_cmd_to_kwargs(cmd)) == want


def test_bogus_code_prints_b_then_literal(utc_tz):
    jobs = [job(job_id=1), job(job_id=2)]
    assert _render(jobs, fmt="%bogus") == ["TRES_PER_NODEogus", "N/Aogus", "N/Aogus"]


def test_bad_input_accepted(utc_tz):
    jobs = [job(job_id=33, time_limit=120, reason="PartitionTimeLimit", partition="debug"),
            job(job_id=34, nodes_min=5, num_nodes=5, num_cpus=5,
                reason="PartitionNodeLimit")]
    got = _render(jobs, fmt="%.6i %.10j %.8T %.12l %.5D %q %r", sort="i")
    assert got == ref_lines("squeue_after_bad_input_accepted_jobs.txt")


def test_parse_states():
    assert fq.parse_states("pd,R") == {"PENDING", "RUNNING"}
    assert fq.parse_states("completed") == {"COMPLETED"}
    assert "TIMEOUT" in fq.parse_states("all")
    with pytest.raises(ValueError, match="bogus"):
        fq.parse_states("PD,bogus")


def test_state_codes():
    assert fq.STATE_CODES["OUT_OF_MEMORY"] == "OOM"
    assert fq.STATE_CODES["COMPLETING"] == "CG"


def test_sort_keys(utc_tz):
    got = _render(fmt="%i", noheader=True, sort="-i")
    assert got == ["49", "48_[1-6%2]", "47", "46", "45", "44", "43", "42"]
    got = _render(fmt="%i", noheader=True, sort="u,i")
    assert got[0] == "42" and got[-1] == "44"
    with pytest.raises(ValueError):
        _render(sort="W")


def test_time_left_and_used(utc_tz):
    got = _render(fmt="%i %L %M", noheader=True, sort="i")
    assert got[0] == "42 59:57 0:03"
    assert got[1] == "43 UNLIMITED 0:03"
