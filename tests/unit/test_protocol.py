"""The wire records defined once (issue 15, muster.protocol): the CLI's stdlib field lists
equal the Structs, the CLI formatters read no key outside them, docs/records.md documents
exactly the Structs' fields, the model's public job fields are the wire Job, and the agent
message decoder takes what musterd sends and refuses what does not fit."""

from __future__ import annotations

import ast
import pathlib
import re

import msgspec
import pytest
from msgspec.structs import fields as struct_fields

from muster.model.alloc import NodeAlloc
from muster.model.job import PUBLIC_NAMES, Job
from muster.protocol import agentmsg, fields, records

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = ROOT / "src" / "muster" / "cli"

PAIRS = [(records.Job, fields.JOB), (records.AcctJob, fields.ACCT_JOB),
         (records.Step, fields.STEP), (records.StepInfo, fields.STEP_INFO),
         (records.Node, fields.NODE), (records.Partition, fields.PARTITION),
         (records.AllocEntry, fields.ALLOC), (records.JobEvent, fields.JOB_EVENT)]


def names(struct: type) -> tuple[str, ...]:
    return tuple(f.name for f in struct_fields(struct))


@pytest.mark.parametrize("struct,names_", PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_stdlib_field_lists_equal_the_structs(struct, names_):
    assert names(struct) == names_


def test_model_public_fields_are_the_wire_job():
    assert (*PUBLIC_NAMES, "events") == fields.JOB


def test_fields_module_is_stdlib_only():
    tree = ast.parse((ROOT / "src/muster/protocol/fields.py").read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"__future__"}, imported
    init = ast.parse((ROOT / "src/muster/protocol/__init__.py").read_text())
    assert [type(n) for n in init.body] == [ast.Expr]  # its docstring alone: imports nothing


# ---- the CLI formatters read only defined fields ---------------------------------------------

# What each record variable of the formatters holds (their naming convention); a key read
# from any other name must still be a field of some record.
VAR_FIELDS = {"j": set(fields.ACCT_JOB), "n": set(fields.NODE), "p": set(fields.PARTITION),
              "a": set(fields.ALLOC), "st": set(fields.STEP),
              "s": set(fields.STEP_INFO) | set(fields.STEP)}
ANY_RECORD = set().union(*VAR_FIELDS.values(), fields.JOB_EVENT)
NOT_RECORDS = {"c", "ctx", "opts"}  # formatter context, not records


def is_table(var: str) -> bool:
    """Module-level code tables (``_CODES["A"]``) are indexed by format letters, not fields."""
    return var.startswith("_") or var.isupper()


def record_reads(path: pathlib.Path) -> list[tuple[str, str, int]]:
    """(variable, key, line) of every ``v["key"]`` and ``v.get("key")`` in the file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            var, key = node.value, node.slice.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "get" and node.args
              and isinstance(node.args[0], ast.Constant)):
            var, key = node.func.value, node.args[0].value
        else:
            continue
        if isinstance(key, str):
            out.append((var.id if isinstance(var, ast.Name) else "", key, node.lineno))
    return out


def test_cli_formatters_read_only_protocol_fields():
    allowed_extra = fields.NOT_SENT | fields.CLIENT_SIDE
    bad = []
    files = sorted(CLI.glob("fmt_*.py"))
    assert len(files) >= 5
    for path in files:
        for var, key, line in record_reads(path):
            if var in NOT_RECORDS or is_table(var) or key in allowed_extra:
                continue
            known = VAR_FIELDS.get(var, ANY_RECORD | {"usage"})
            if key not in known and not (path.name == "fmt_usage.py"):
                bad.append(f"{path.name}:{line}: {var or '?'}[{key!r}]")
    assert not bad, "formatters read keys outside muster.protocol.fields:\n  " + "\n  ".join(bad)


def test_the_scan_catches_an_undefined_field(tmp_path):
    f = tmp_path / "fmt_x.py"
    f.write_text('def row(j, n):\n    return j["job_id"], j.get("jobid"), n["cpus"]\n')
    reads = record_reads(f)
    assert [(v, k) for v, k, _ in reads if k not in VAR_FIELDS[v]] == [("j", "jobid")]


# ---- docs/records.md documents exactly the Structs ------------------------------------------

DOC = (ROOT / "docs" / "records.md").read_text()


def section(title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\b[^\n]*\n(.*?)(?=^## |\Z)", DOC, re.M | re.S)
    assert m, f"docs/records.md has no section {title!r}"
    return m.group(1)


def table_fields(body: str) -> list[str]:
    """Backticked names of the first column of the section's field table."""
    out = []
    for line in body.splitlines():
        cells = line.split("|")
        if len(cells) > 2 and line.startswith("|") and "`" in cells[1]:
            out += re.findall(r"`(\w+)`", cells[1])
    return out


def brace_fields(body: str) -> list[str]:
    """The keys of the section's first ``{"a", "b": type, ...}`` record."""
    start = body.index('`{"')
    rec = body[start:body.index("}`", start)]
    return re.findall(r'[{,]\s*"(\w+)"', rec)


@pytest.mark.parametrize("title,struct,parse", [
    ("Job", records.Job, table_fields), ("Node", records.Node, table_fields),
    ("Submit request", records.SubmitRequest, table_fields),
    ("Partition", records.Partition, brace_fields), ("Step info", records.StepInfo, brace_fields),
    ("Step", records.Step, brace_fields)])
def test_records_md_documents_exactly_the_struct_fields(title, struct, parse):
    documented = parse(section(title))
    assert len(documented) == len(set(documented)), "a field documented twice"
    assert set(documented) == set(names(struct)), (
        f"only in docs: {sorted(set(documented) - set(names(struct)))}; "
        f"only in {struct.__name__}: {sorted(set(names(struct)) - set(documented))}")


def test_alloc_entry_documented():
    body = section("Job")
    row = next(line for line in body.splitlines() if line.startswith("| `alloc`"))
    assert set(re.findall(r'"(\w+)":', row)) == set(fields.ALLOC)


# ---- records that exist convert -------------------------------------------------------------

def test_a_model_job_record_is_a_wire_job():
    job = Job(job_id=7, name="x", alloc=(NodeAlloc("n1", 2, 100, (0,)),),
              partitions_req=["a", "b"])
    wire = msgspec.convert(job.to_record(), records.Job)
    assert wire.alloc == [records.AllocEntry(node="n1", cpus=2, mem=100, gpus=[0], tasks=1)]
    assert msgspec.json.decode(msgspec.json.encode(wire)) == {
        **job.to_record(), "alloc": [{"node": "n1", "cpus": 2, "mem": 100, "gpus": [0],
                                      "tasks": 1}]}
    with pytest.raises(msgspec.ValidationError, match="uid"):
        msgspec.convert({**job.to_record(), "uid": "0"}, records.Job)
    rec = job.to_record()
    del rec["state"]
    with pytest.raises(msgspec.ValidationError, match="state"):
        msgspec.convert(rec, records.Job)


def test_sbatch_requests_are_submit_requests(tmp_path):
    from muster.cli import jobopts
    assert set(jobopts._empty_request()) == set(names(records.SubmitRequest))
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH -N 2-3 --gres=gpu:a100:2 --signal=B:USR1@30\ntrue\n")
    argv = ["-J", "t", "-p", "a,b", "-t", "10", "-n", "4", "--mem=1G", "--gpus=2",
            "--array=0-3%2", "-d", "afterok:1", "--requeue", "--open-mode=append",
            "--begin=now+60", "--exclusive", "--nice=5", "-C", "x", "--mail-type=END",
            "--mincpus=2", "--contiguous", "--wckey=w", "--deadline=now+1hour", str(script)]
    inv = jobopts.parse_sbatch(argv, {}, None, str(tmp_path), 1_800_000_000)
    req = msgspec.convert(inv.request, records.SubmitRequest)
    assert req.gres == [records.GresRequest(name="gpu", type="a100", count=2)]
    assert req.signal is not None and req.signal.batch and req.nodes_min == 2


# ---- agent messages ---------------------------------------------------------------------------

def test_what_musterd_reports_decodes():
    from muster.agent import daemon
    failed = agentmsg.from_agent({"op": "job_ended", **daemon._launch_failure(5, 1)})
    assert isinstance(failed, agentmsg.JobEnded) and failed.launch_failed and failed.run == 1
    step = agentmsg.from_agent({"op": "step_ended", **daemon._step_failure((5, 2, 0), "n1", [0, 1])})
    assert isinstance(step, agentmsg.StepEnded)
    assert [t.exit_code for t in step.tasks] == [1, 1] and step.node == "n1"
    reg = agentmsg.registration({"op": "agent_register", "node": "n1", "running": [5],
                                 "finished": [daemon._launch_failure(6, 0)],
                                 "steps_running": [[5, 0, 0]], "version": "1"})
    assert reg.finished[0].job_id == 6 and reg.steps_running == [[5, 0, 0]]
    assert isinstance(agentmsg.from_agent({"op": "heartbeat", "load": None, "free_mem": 1}),
                      agentmsg.Heartbeat)
    done = agentmsg.from_agent({"op": "epilog_done", "job_id": 5, "run": 0, "ok": False,
                                "exit_code": 1, "signal": 0, "timed_out": False, "detail": "x"})
    assert isinstance(done, agentmsg.EpilogDone) and msgspec.to_builtins(done)["op"] == "epilog_done"


@pytest.mark.parametrize("msg", [
    {"op": "job_ended", "job_id": "5"}, {"op": "job_ended", "job_id": True},
    {"op": "job_ended"}, {"op": "no_such_op"}, {"job_id": 5}, [1, 2], None,
    {"op": "step_ended", "job_id": 5, "step_id": 1, "tasks": [{"task": 0}]},
    {"op": "health", "ok": "yes"}, {"op": "heartbeat", "load": "high"}])
def test_malformed_agent_messages_are_refused(msg):
    with pytest.raises(agentmsg.Malformed):
        agentmsg.from_agent(msg)


@pytest.mark.parametrize("reg", [
    {"op": "agent_register"}, {"op": "heartbeat", "node": "n1"}, "agent_register",
    {"op": "agent_register", "node": "n1", "running": ["5"]}])
def test_malformed_registrations_are_refused(reg):
    with pytest.raises(agentmsg.Malformed):
        agentmsg.registration(reg)
