"""sacct -j selection: job, array task and step ids select exactly what Slurm prints
(Snakemake's slurm executor asks `sacct -j ID.STEP --format=Reason` for steps 0-9)."""
import pytest

from muster.cli import fmt_sacct
from muster.cli.getopt import CliExit
from muster.cli.sacct import _parse_selector, _select


def _job(job_id, array_job_id=None, task=None, task_str=None, steps=("batch",)):
    return {"job_id": job_id, "array_job_id": array_job_id, "array_task_id": task,
            "array_task_str": task_str, "array_max_tasks": 0, "state": "COMPLETED",
            "exit_code": 0, "exit_signal": 0,
            "steps": [{"job_id": job_id, "step_id": s, "state": "COMPLETED", "exit_code": 0,
                       "exit_signal": 0} for s in steps]}


JOBS = [_job(6, steps=("batch", 0)), _job(7, 7, 2), _job(8, 7, 0), _job(9, 7, None, "3-5")]


def ids(selection):
    out = fmt_sacct.render(_select(JOBS, [_parse_selector(t) for t in selection.split(",")]),
                           fields="JobID", parsable2=True, noheader=True)
    return out.split()


def test_parse_selector():
    assert _parse_selector("12") == (12, None, None)
    assert _parse_selector("12_3.batch") == (12, 3, "batch")
    assert _parse_selector("12.0") == (12, None, "0")
    for bad in ("x", "12_", "12.", "_3", "12_x"):
        with pytest.raises(CliExit):
            _parse_selector(bad)


def test_select_job_steps_and_tasks():
    assert ids("6") == ["6", "6.batch", "6.0"]
    assert ids("6.0") == ["6.0"]
    assert ids("6.batch") == ["6.batch"]
    assert ids("6.1") == []
    assert ids("6.1,6") == ["6", "6.batch", "6.0"]
    assert ids("7") == ["7_2", "7_2.batch", "7_0", "7_0.batch", "7_[3-5]", "7_[3-5].batch"]
    assert ids("7_0") == ["7_0", "7_0.batch"]
    assert ids("8") == ["7_0", "7_0.batch"]
    assert ids("7_4.batch") == ["7_[3-5].batch"]
    assert ids("7_9") == []
