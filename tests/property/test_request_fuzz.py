"""Fuzzing every request the daemons accept, against one real cluster (hypothesis).

* Controller: every operation in ``ops.OPS`` (enumerated from the code, not by hand) is
  sent over the Unix socket as root and as a plain user. Each message mixes fields of the
  types ``opspec.REQUEST_FIELDS`` declares (with valid values: real job ids, node and
  partition names, users) with fields of random JSON types and values, and random extra keys.
* REST daemon: every route of musterrestd's application (enumerated from ``build_app``) with
  random path parameters, query strings and JSON bodies, anonymously, as a plain user and as
  root.

After every request the daemon still answers; it never answers "internal" (controller) or a
5xx (REST); and when the reply is a refusal, no job was lost, created or changed: the jobs
that cannot change on their own (held or finished ones) have the same records as before. Jobs
that a *successful* request changes are of course not compared.
"""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.parse

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import wire  # noqa: E402
from cluster import TEST_USER, private_cluster, user_exists  # noqa: E402
from muster.controller import ops, opspec  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "e2e"))  # api_helpers

SCRIPT = "#!/bin/sh\ntrue\n"
OPS = sorted(ops.OPS)
# Fields that change whenever the scheduler looks at a pending job: not the request's doing.
VOLATILE = {"last_sched_eval", "sched_nodes", "reason", "reason_desc", "eligible_time"}
# Bounded: about 20 s for the controller and 10 s for the REST daemon (plus the cluster start).
WIRE_SETTINGS = settings(max_examples=60, deadline=None, database=None,
                         suppress_health_check=list(HealthCheck))
REST_SETTINGS = settings(max_examples=30, deadline=None, database=None,
                         suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def c():
    if os.getuid() != 0 or not user_exists(TEST_USER):
        pytest.skip("needs root and the test user")
    with private_cluster("muster-fuzz-", nodes=2, gpus=2, cpus=4,
                         partitions="gpu,debug:1:00:00") as cl:
        yield cl


@pytest.fixture(scope="module")
def baseline(c):
    """Targets worth hitting with valid ids: held jobs and arrays of both users, a finished
    job, a running one and a running interactive allocation (no lease)."""
    ids = [c.sbatch("-H", "-J", "fz-held", "--wrap", "true", cwd=c.workdir),
           c.sbatch("-H", "--array=0-5", "--wrap", "true", user=TEST_USER, cwd=c.workdir),
           c.sbatch("-H", "-J", "fz-mine", "--wrap", "true", user=TEST_USER, cwd=c.workdir)]
    done = c.sbatch("--wrap", "true", cwd=c.workdir)
    assert c.wait_done(done) == "COMPLETED"
    running = c.sbatch("--wrap", "sleep 600", user=TEST_USER, cwd=c.workdir)
    c.wait_state(running, "RUNNING")
    alloc = wire.call(c, {"op": "allocate", "lease": False,
                          "job": {"work_dir": c.workdir, "time_limit": 30}}, user=TEST_USER)
    assert alloc["ok"], alloc
    log = os.path.join(c.state_dir, "log", "musterctld.log")
    return {"ids": ids + [done, running, alloc["job_id"]], "log": log,
            "log_offset": os.path.getsize(log)}


# ---- value strategies -------------------------------------------------------------------------

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=24)
SCALAR = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
          | st.floats(allow_nan=False, allow_infinity=False) | TEXT)
JSON = st.recursive(SCALAR, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(TEXT, inner, max_size=4), max_leaves=12)

# valid-looking words for string fields, from the domain of each field
WORDS = {
    "state": ["DRAIN", "RESUME", "DOWN", "IDLE", "UNDRAIN", "drain"],
    "scope": ["all", "batch", "full", "steps"],
    "stream": ["stdout", "stderr"],
    "action": ["show", "add", "modify", "delete"],
    "entity": ["account", "user", "qos", "assoc", "cluster"],
    "event": ["submitted", "held", "token_issued", "node_drain"],
    "username": [TEST_USER, "root", "nosuchuser"],
    "reason": ["fuzz", ""],
    "nodes": ["node1", "node2"], "node": ["node1", "node2"], "partition": ["gpu", "debug"],
    "names": ["fz", "normal", TEST_USER, "root"], "name": ["fz", "gpu", "normal"],
    "users": [TEST_USER, "root"], "accounts": ["root", "default", "fz"],
    "flags": ["MAINT", "IGNORE_JOBS", "bogus"],
}
STRINGS = ["node1", "node2", "node[1-2]", "gpu", "debug", "normal", "root", TEST_USER, "",
           "PENDING", "RUNNING", "x" * 300, "0", "-1", "1-3", "UNLIMITED", "\x00", "a\x00b",
           "../../etc/passwd", "%n%s", "\u00e9\u6f22", " ", "9" * 30]
CHANGES = ["TimeLimit", "Nice", "Comment", "Name", "NumNodes", "Priority", "Requeue",
           "Partition", "bogus"]
CHANGE_VALUES = ["5", "-3", "0", "1-2", "3-1", "UNLIMITED", "1:00:00", "yes", "no", "x",
                 "-2147483646", "99999999999999999999"]
# sacctmgr's "where"/"set" items: [option, operator, value]
SACCT_OPTS = ["name", "account", "user", "parent", "MaxJobs", "MaxSubmitJobs", "MaxJobsPerUser",
              "Priority", "Flags", "GrpTRES", "MaxTRESPerUser", "MaxWall", "UsageFactor",
              "QOS", "DefaultQOS", "fairshare", "GraceTime", "Preempt", "PreemptMode"]
SACCT_VALUES = ["fz", "root", TEST_USER, "normal", "-1", "0", "5", "cpu=4,gres/gpu=1",
                "1:00:00", "nan", "inf", "1e308", "DenyOnLimit", "REQUEUE", "parent", "x"]
JOB_FIELDS = {"nodes_min": "int", "nodes_max": "int", "ntasks": "int", "cpus_per_task": "int",
              "time_limit": "int", "nice": "int", "priority": "int", "mem_per_node": "int",
              "name": "str", "partition": "str", "account": "str", "qos": "str",
              "array": "str", "dependency": "str", "nodelist": "str", "comment": "str",
              "hold": "bool", "requeue": "bool", "uid": "id", "gid": "id", "gres": "any",
              "gpus": "any", "signal": "any", "argv": "any", "work_dir": "str"}


def ints(ids: list[int]):
    return st.sampled_from(ids + [0, 1, 2**31, 2**53]) | st.integers(-5, 2**40)


def strings(field: str):
    """The field's own words most of the time, else other words or any text."""
    anything = st.sampled_from(STRINGS) | TEXT
    if field not in WORDS:
        return anything
    own = st.sampled_from(WORDS[field])
    return st.one_of(own, own, anything)


def for_spec(spec, field: str, ids: list[int], wild: bool):
    """Values of the declared type (mostly meaningful ones); ``wild``: or anything at all."""
    if isinstance(spec, dict):
        typed = st.fixed_dictionaries({}, optional={k: for_spec(v, k, ids, wild)
                                                    for k, v in spec.items()})
    elif isinstance(spec, list) and field in ("where", "set"):
        typed = st.lists(st.tuples(st.sampled_from(SACCT_OPTS) | TEXT,
                                   st.sampled_from(["=", "+=", "-="]),
                                   st.sampled_from(SACCT_VALUES) | TEXT).map(list), max_size=3)
    elif isinstance(spec, list):
        typed = st.lists(for_spec(spec[0], field, ids, wild), max_size=4)
    elif spec in (opspec.ID, opspec.INT, opspec.PORT, opspec.MODE):
        typed = ints(ids)
    elif spec is opspec.NUM:
        typed = st.floats(0, 1) | st.integers(-1, 1)
    elif spec is opspec.BOOL:
        typed = st.booleans()
    elif spec is opspec.STR:
        typed = strings(field)
    elif spec is opspec.OBJ:
        typed = objects(field, ids, wild)
    else:
        typed = JSON
    return st.one_of(typed, typed, JSON) if wild else typed


def objects(field: str, ids: list[int], wild: bool = True):
    if field in ("job",):
        kinds = {"int": ints(ids), "str": strings("x"), "bool": st.booleans(), "id": ints(ids),
                 "any": JSON}
        return st.fixed_dictionaries({}, optional={
            k: st.one_of(kinds[v], JSON) if wild else kinds[v] for k, v in JOB_FIELDS.items()
        }).map(lambda d: {"work_dir": "/tmp", **d})
    if field == "changes":
        values = st.sampled_from(CHANGE_VALUES) | strings("x")
        return st.dictionaries(st.sampled_from(CHANGES) | TEXT, values if not wild else
                               values | JSON, max_size=3)
    if field == "env":
        return st.dictionaries(TEXT, TEXT | JSON, max_size=3)
    return st.dictionaries(TEXT, JSON, max_size=4)


def messages(op: str, ids: list[int]):
    """Half the messages are well-typed throughout (they reach the handlers' own checks and
    actions), the other half mix in fields of any type; both may carry unknown keys."""
    spec = opspec.REQUEST_FIELDS[op]

    def fields(wild):
        return st.fixed_dictionaries({}, optional={k: for_spec(v, k, ids, wild)
                                                   for k, v in spec.items()})
    extra = st.dictionaries(TEXT.filter(lambda k: k not in spec and k != "op"), JSON, max_size=2)

    def build(parts):
        f, x = parts
        msg = {**x, **f, "op": op}
        if op == "submit" and "script" not in f:
            msg["script"] = SCRIPT
        t = msg.get("timeout")
        if op == "wait_alloc" and (t is None or isinstance(t, (int, float))) \
                and not isinstance(t, bool):
            msg["timeout"] = 0.2  # a valid wait is a wait, not a hang: keep it short
        return msg
    return st.tuples(fields(False) | fields(True), extra).map(build)


# ---- checks -------------------------------------------------------------------------------

def stable(jobs: dict[int, dict]) -> dict[int, dict]:
    """Jobs nothing but a request can change: held pending jobs and finished ones."""
    return {i: {k: v for k, v in j.items() if k not in VOLATILE} for i, j in jobs.items()
            if (j["state"] == "PENDING" and j.get("hold")) or
            (j["state"] not in ("PENDING", "RUNNING", "COMPLETING") and not j.get("completing"))}


def unchanged_after_refusal(before: dict[int, dict], after: dict[int, dict], what) -> None:
    lost = before.keys() - after.keys()
    assert not lost, f"{what}: refused, yet jobs {sorted(lost)} are gone"
    arrays = {j.get("array_job_id") for j in before.values()} | before.keys()
    new = [i for i in after.keys() - before.keys() if after[i].get("array_job_id") not in arrays]
    assert not new, f"{what}: refused, yet jobs {new} were created"
    was, now = stable(before), stable(after)
    changed = [i for i in was if i in now and was[i] != now[i]] + \
        [i for i in was if i not in now and after[i]["state"] == "PENDING"
         and before[i].get("hold") and not after[i].get("hold")]
    assert not changed, (f"{what}: refused, yet changed "
                         + json.dumps({i: [was[i], now.get(i, after[i])] for i in changed})[:3000])


def alive(c) -> None:
    reply = wire.call(c, {"op": "ping"})
    assert reply["ok"] and reply["uid"] == 0, reply


# ---- controller ---------------------------------------------------------------------------------

@pytest.mark.parametrize("user", [None, TEST_USER], ids=["root", "user"])
@pytest.mark.parametrize("op", OPS)
def test_every_operation_survives_random_requests(c, baseline, op, user):
    ids = baseline["ids"]

    @WIRE_SETTINGS
    @given(msg=messages(op, ids))
    def run(msg):
        before = wire.jobs(c)
        reply = wire.call(c, msg, user=user, timeout=20)
        assert reply.get("code") != "internal", (msg, reply)
        assert "Traceback" not in json.dumps(reply)
        if reply["ok"] is False:
            assert reply.get("code") and reply.get("error"), reply
            unchanged_after_refusal(before, wire.jobs(c), f"{op} {msg!r:.300}")
        alive(c)
    run()


@pytest.mark.parametrize("op", OPS)
def test_null_fields_mean_absent(c, baseline, op):
    """JSON null in every declared field is the same as leaving them out: a reply, never a
    crash (``msg.get(key, default)`` would hand the handler a None)."""
    msg = {"op": op, **{k: None for k in opspec.REQUEST_FIELDS[op]}}
    reply = wire.call(c, msg, user=TEST_USER, timeout=20)
    assert reply.get("code") != "internal", (msg, reply)
    alive(c)


def test_no_internal_errors_logged(c, baseline):
    """Every refusal above was on purpose: no handler raised, nothing was logged as failed."""
    with open(baseline["log"], errors="replace") as fh:
        fh.seek(baseline["log_offset"])
        text = fh.read()
    for bad in ("Traceback", "handler ", "Unexpected controller error", "failed:"):
        assert bad not in text, text[max(0, text.index(bad) - 2000):text.index(bad) + 2000]


# ---- REST daemon --------------------------------------------------------------------------------

def _routes() -> list[tuple[str, str]]:
    """(method, path template) of every route of musterrestd's app, read from the app."""
    try:
        from starlette.routing import Mount, Route
    except ImportError:  # no api extra: no REST daemon to fuzz
        return []

    from muster.api.app import Api, build_app
    out = []
    for r in build_app(Api(None, None, "fuzz")).routes:
        if isinstance(r, Route):
            out += [(m, r.path) for m in sorted(r.methods - {"HEAD"})]
        elif isinstance(r, Mount):
            out.append(("GET", r.path + "/{path}"))
    return out


ROUTES = _routes()
QUERY_KEYS = ["job_id", "jobs", "users", "start_time", "end_time", "account", "partition",
              "state", "qos", "job_name", "signal", "hold", "bytes", "stream", "since", "limit",
              "before_id", "node", "event", "hours", "bucket"]


def path_values(ids: list[int]):
    return (st.sampled_from([str(i) for i in ids] + ["node1", "gpu", "hold", "release",
                                                     "requeue", "0", "-1", "..", "index.html"])
            | TEXT.filter(bool))


def rest_job_descs(ids: list[int]):
    """v0.0.40 job descriptions: every field musterrestd's translate_job knows (read from
    the module), with values of the right shape or of any JSON type."""
    from muster.api import app
    ints_, strs = ints(ids), strings("x")
    shaped = {**{k: strs for k in app._SIMPLE}, **{k: ints_ for k in app._INTS},
              **{k: st.booleans() for k in app._BOOLS},
              "nodes": st.sampled_from(["1", "1-2", "2-1", "0", "x"]),
              "environment": st.lists(strs) | st.dictionaries(TEXT, strs),
              "argv": st.lists(strs, max_size=3), "required_nodes": st.lists(strs, max_size=2),
              "excluded_nodes": strs, "current_working_directory": st.just("/tmp") | strs,
              "tres_per_node": st.sampled_from(["gres/gpu:1", "gres:gpu:x:2", ""]) | strs}
    keys = set(shaped) | app._IGNORED
    return st.fixed_dictionaries({}, optional={k: st.one_of(shaped.get(k, JSON), JSON)
                                               for k in sorted(keys)})


def rest_requests(template: str, ids: list[int]):
    names = re.findall(r"{(\w+)}", template)
    params = st.fixed_dictionaries({n: path_values(ids) for n in names})
    query = st.dictionaries(st.sampled_from(QUERY_KEYS) | TEXT.filter(bool),
                            path_values(ids), max_size=3)
    body = st.one_of(st.none(), JSON, st.fixed_dictionaries({}, optional={
        "script": st.sampled_from([SCRIPT]) | JSON, "job": rest_job_descs(ids) | JSON,
        "state": JSON, "reason": JSON, "hold": JSON, "name": JSON, "nice": JSON,
        "time_limit": JSON, "priority": JSON, "requeue": JSON, "comment": JSON}))
    return st.tuples(params, query, body, st.sampled_from(["root", "user", "anon"]))


@pytest.fixture(scope="module")
def tokens(c):
    pytest.importorskip("jwt")
    from api_helpers import token
    return {"anon": None, "user": token(c, TEST_USER), "root": token(c)}


@pytest.mark.parametrize("method,template", ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
def test_every_rest_route_survives_random_requests(c, baseline, tokens, method, template):
    from api_helpers import call
    ids = baseline["ids"]

    @REST_SETTINGS
    @given(req=rest_requests(template, ids))
    def run(req):
        params, query, body, who = req
        path = template
        for k, v in params.items():
            path = path.replace("{" + k + "}", urllib.parse.quote(v, safe=""))
        if query:
            path += "?" + urllib.parse.urlencode(query)
        before = wire.jobs(c)
        status, reply = call(c, method, path, tokens[who],
                             body if method in ("POST", "PUT") else None, raw=True)
        assert status < 500, (method, path, body, status, reply[:2000])
        assert "Traceback" not in reply
        if status >= 400:
            unchanged_after_refusal(before, wire.jobs(c), f"{method} {path} {body!r:.300}")
        assert call(c, "GET", "/slurm/v0.0.40/ping", tokens["root"])[0] == 200
        alive(c)
    run()
