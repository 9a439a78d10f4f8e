"""Conformance: every path and method of musterrestd's OpenAPI document is called on a live
cluster and each response is validated against the document's schema for its status.

(A hand-written equivalent of schemathesis: it walks ``/openapi.json``, so a route added to
the document without a sample here fails, and a route missing from the document is caught by
tests/unit/test_api_auth.py.)"""

import pytest

from api_helpers import call, token, wait_api_state

jsonschema = pytest.importorskip("jsonschema")


@pytest.fixture(scope="module")
def doc(cluster):
    s, d = call(cluster, "GET", "/openapi.json")
    assert s == 200
    return d


def validate(doc, op, status, body):
    responses = op["responses"]
    assert str(status) in responses, f"{op['operationId']}: undocumented status {status}: {body}"
    content = responses[str(status)]["content"]
    if "application/json" in content:
        schema = dict(content["application/json"]["schema"])
        root = {"components": doc["components"], **schema}
        jsonschema.Draft202012Validator(root).validate(body)
    else:
        assert isinstance(body, str)


def test_every_operation_conforms(cluster, doc, workdir):
    root = token(cluster)
    submit = {"script": "#!/bin/sh\necho conformance\n",
              "job": {"current_working_directory": workdir, "name": "conf"}}
    s, b = call(cluster, "POST", "/slurm/v0.0.40/job/submit", root, submit)
    done = b["job_id"]
    wait_api_state(cluster, root, done, ("COMPLETED",))
    s, b = call(cluster, "POST", "/slurm/v0.0.40/job/submit", root,
                dict(submit, job=dict(submit["job"], hold=True)))
    held = b["job_id"]
    s, b = call(cluster, "POST", "/slurm/v0.0.40/job/submit", root,
                dict(submit, job=dict(submit["job"], hold=True)))
    to_cancel = b["job_id"]

    # operationId -> (path parameters, query string, body)
    samples = {
        "slurm_ping": ({}, "", None), "slurm_diag": ({}, "", None),
        "slurm_get_jobs": ({}, "", None),
        "slurm_post_job_submit": ({}, "", submit),
        "slurm_get_job": ({"job_id": done}, "", None),
        "slurm_post_job": ({"job_id": held}, "", {"comment": "conformance", "nice": 5}),
        "slurm_delete_job": ({"job_id": to_cancel}, "", None),
        "slurm_get_nodes": ({}, "", None),
        "slurm_get_node": ({"node_name": "node1"}, "", None),
        "slurm_post_node": ({"node_name": "node3"}, "", {"state": ["RESUME"]}),
        "slurm_get_partitions": ({}, "", None),
        "slurm_get_partition": ({"partition_name": "gpu"}, "", None),
        "slurm_get_reservations": ({}, "", None),
        "slurmdb_get_jobs": ({}, "?users=root&state=COMPLETED", None),
        "slurmdb_get_job": ({"job_id": done}, "", None),
        "muster_get_job_output": ({"job_id": done}, "?bytes=1000", None),
        "muster_post_job_action": ({"job_id": held, "action": "release"}, "", None),
        "muster_get_events": ({}, f"?job_id={done}&limit=50", None),
        "muster_get_dashboard": ({}, "", None),
        "muster_get_usage": ({}, "?hours=2", None),
        "muster_get_fairshare": ({}, "", None),
        "muster_get_whoami": ({}, "", None),
        "metrics": ({}, "", None), "openapi": ({}, "", None),
    }
    seen = set()
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            oid = op["operationId"]
            assert oid in samples, f"no conformance sample for {oid}"
            params, query, body = samples[oid]
            url = path.format(**params) + query
            secured = op.get("security", doc["security"]) != []
            status, resp = call(cluster, method.upper(), url, root if secured else None, body,
                                raw=oid == "metrics")
            assert status == 200, (oid, status, resp)
            validate(doc, op, status, resp)
            if secured:  # and without a token: 401, documented, ErrorResponse
                status, resp = call(cluster, method.upper(), url, None, body)
                assert status == 401, (oid, status)
                validate(doc, op, status, resp)
            seen.add(oid)
    assert seen == set(samples)
    # error responses conform too
    for method, url, path, want in (
            ("GET", "/slurm/v0.0.40/job/999999", "/slurm/v0.0.40/job/{job_id}", 404),
            ("GET", "/slurm/v0.0.40/partition/nosuch", "/slurm/v0.0.40/partition/{partition_name}", 404),
            ("GET", "/muster/v0.0.40/events?limit=0", "/muster/v0.0.40/events", 400),
            ("DELETE", f"/slurm/v0.0.40/job/{done}?signal=BOGUS", "/slurm/v0.0.40/job/{job_id}", 400)):
        status, resp = call(cluster, method, url, root)
        assert status == want, (url, status, resp)
        validate(doc, doc["paths"][path][method.lower()], status, resp)
