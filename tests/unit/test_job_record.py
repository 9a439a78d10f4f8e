"""The job record (muster.model.job.Job): a typed, slotted dataclass whose class body is the
field list. These tests pin what the store and the wire rely on: the field order and
defaults, the public/internal split, the store round trip, identity semantics."""

import dataclasses
import re
from pathlib import Path

import pytest

from muster.model import job as jobmod
from muster.model.alloc import NodeAlloc
from muster.model.job import ALL_FIELDS, INTERNAL_FIELDS, PUBLIC_FIELDS, PUBLIC_NAMES, Job

DOCS = Path(__file__).resolve().parents[2] / "docs" / "records.md"


def test_field_list_is_the_class_body_public_first():
    names = [f.name for f in dataclasses.fields(Job)]
    assert [n for n, _ in ALL_FIELDS] == names
    assert PUBLIC_FIELDS + INTERNAL_FIELDS == ALL_FIELDS
    assert INTERNAL_FIELDS[0][0] == "script_id"
    assert "script_id" not in PUBLIC_NAMES and "job_id" in PUBLIC_NAMES
    assert Job.__slots__ == tuple(names)  # no per-job __dict__


def test_public_fields_are_the_documented_wire_record():
    text = DOCS.read_text()
    job_table = text.split("## Job", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"`([a-z_][a-z0-9_]*)`", job_table))
    missing = [n for n in PUBLIC_NAMES if n not in documented]
    assert not missing, f"public Job fields not in docs/records.md: {missing}"


def test_defaults_are_immutable_and_not_shared():
    for name, default in ALL_FIELDS:
        assert not isinstance(default, (list, dict, set)), name
    a, b = Job(), Job()
    a.alloc = (NodeAlloc("n1", 1, 0),)
    assert b.alloc == ()


def test_store_round_trip_keeps_every_field():
    j = Job(job_id=7, user="alice", alloc=(NodeAlloc("n1", 2, 10),),
            groups=[5, 6], argv=["a", "b"], pending_tasks=[1, 2], dep_terms=[["after", 3, None, 0]])
    rec = j.to_store()
    assert list(rec) == [n for n, _ in ALL_FIELDS]
    assert rec["alloc"] == [{"node": "n1", "cpus": 2, "mem": 10, "gpus": [], "tasks": 1}]
    back = Job.from_store({**rec, "not_a_field": 1})  # unknown stored keys are ignored
    assert back.to_store() == rec
    assert back.alloc == (NodeAlloc("n1", 2, 10),)
    assert isinstance(back.alloc, tuple) and back.groups == (5, 6) and back.argv == ("a", "b")
    # a row stored before the typed allocation (no "tasks", GPUs as a list) still reads
    old = Job.from_store({**rec, "alloc": [{"node": "n1", "cpus": 2, "mem": 10, "gpus": [3]}]})
    assert old.alloc == (NodeAlloc("n1", 2, 10, (3,), 1),)


def test_strings_are_interned_and_patterns_tupled():
    a = Job(user="".join(["bo", "b"]), io_patterns=["o", None, "i"])
    b = Job(user="".join(["b", "ob"]))
    assert a.user is b.user
    assert a.io_patterns == ("o", None, "i")


def test_jobs_compare_by_identity_and_hash():
    a = Job(job_id=1)
    b = a.copy()
    assert a is not b and a != b and len({a, b}) == 2
    assert b.to_store() == a.to_store()


def test_copy_is_every_field_with_the_changes_interned():
    a = Job(job_id=1, name="train", user="alice", alloc=(NodeAlloc("n1", 2, 10, (3,), 1),),
            argv=("a", "b"), io_patterns=("o", None, "i"), priority=7)
    b = a.copy()
    assert all(getattr(b, n) is getattr(a, n) for n in jobmod._NAMES)
    c = a.copy(job_id=2, array_task_id=5, name="".join(["ev", "al"]))
    assert (c.job_id, c.array_task_id, c.name) == (2, 5, "eval")
    assert c.name is Job(name="eval").name  # interned, as construction does
    assert (a.job_id, a.array_task_id, a.name) == (1, None, "train")  # the original unchanged
    assert c.to_store() == {**a.to_store(), "job_id": 2, "array_task_id": 5, "name": "eval"}
    with pytest.raises(AttributeError):
        a.copy(no_such_field=1)


def test_unknown_field_is_refused():
    with pytest.raises(TypeError):
        Job(no_such_field=1)


def test_record_projection_and_expected_start():
    j = Job(job_id=3, pending_tasks=[4, 5, 6], array_job_id=3, expected_start=99)
    rec = j.to_record(["job_id", "array_task_str", "start_time"])
    assert rec == {"job_id": 3, "array_task_str": "4-6", "start_time": 99}
    assert jobmod.Job(state=jobmod.RUNNING).holds_resources
