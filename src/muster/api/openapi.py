"""The OpenAPI 3.1 document musterrestd serves at ``/openapi.json`` (and ``/openapi/v3``).

Schemas are JSON Schema 2020-12 (OpenAPI 3.1), so tests validate responses with
``jsonschema`` directly. Objects allow extra properties (Slurm adds fields between
releases); the fields Muster fills are listed and typed.
"""

from __future__ import annotations

from typing import Any

V = "v0.0.40"


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(props: dict, required: list[str] | None = None) -> dict:
    out = {"type": "object", "properties": props}
    out["required"] = list(props) if required is None else required
    return out


S = {"type": "string"}
I = {"type": "integer"}  # noqa: E741 - one-letter schema shorthands (S, I, B, N) keep tables short
B = {"type": "boolean"}
N = {"type": "number"}
SL = {"type": "array", "items": S}
NUM = _ref("Number")


def _schemas() -> dict:
    common = {"meta": _ref("Meta"), "errors": {"type": "array", "items": _ref("Error")},
              "warnings": {"type": "array", "items": _ref("Warning")}}

    def resp(**props) -> dict:
        return _obj({**props, **common})

    return {
        "Number": _obj({"set": B, "infinite": B, "number": N}),
        "ExitCode": _obj({"status": SL, "return_code": NUM,
                          "signal": _obj({"id": NUM, "name": S})}),
        "Meta": _obj({
            "plugin": _obj({"type": S, "name": S, "data_parser": {"const": "data_parser/v0.0.40"},
                            "accounting_storage": S}),
            "client": _obj({"source": S, "user": S, "group": S}),
            "command": SL,
            "slurm": _obj({"version": _obj({"major": S, "micro": S, "minor": S}),
                           "release": S, "cluster": S})}),
        "Error": _obj({"error": S, "error_number": I, "description": S, "source": S}),
        "Warning": _obj({"warning": S, "source": S}, ["warning"]),
        "ErrorResponse": _obj({"errors": {"type": "array", "items": _ref("Error"), "minItems": 1},
                               "warnings": {"type": "array"}, "meta": _ref("Meta")}),
        "Empty": resp(),
        "Job": _obj({
            "account": S, "accrue_time": NUM, "array_job_id": NUM, "array_task_id": NUM,
            "array_task_string": S, "batch_flag": B, "batch_host": S, "command": S,
            "comment": S, "cpus": NUM, "current_working_directory": S, "dependency": S,
            "derived_exit_code": _ref("ExitCode"), "eligible_time": NUM, "end_time": NUM,
            "exit_code": _ref("ExitCode"), "flags": SL, "group_id": I, "group_name": S,
            "hold": B, "job_id": I, "job_resources": {"type": "object"},
            "job_state": {**SL, "minItems": 1}, "name": S, "nice": I, "node_count": NUM,
            "nodes": S, "partition": S, "priority": NUM, "qos": S, "requeue": B,
            "restart_cnt": I, "standard_error": S, "standard_input": S,
            "standard_output": S, "start_time": NUM, "state_description": S,
            "state_reason": S, "submit_time": NUM, "tasks": NUM, "time_limit": NUM,
            "tres_alloc_str": S, "tres_per_node": S, "tres_req_str": S, "user_id": I,
            "user_name": S}),
        "JobsResponse": resp(jobs={"type": "array", "items": _ref("Job")},
                             last_backfill=NUM, last_update=NUM),
        "JobSubmitRequest": {
            "type": "object", "required": ["script"],
            "properties": {"script": S, "job": {
                "type": "object",
                "properties": {"name": S, "partition": S, "account": S, "qos": S,
                               "time_limit": {"oneOf": [I, NUM]}, "nodes": S,
                               "tasks": I, "tasks_per_node": I, "cpus_per_task": I,
                               "memory_per_node": {"oneOf": [I, NUM]},
                               "memory_per_cpu": {"oneOf": [I, NUM]},
                               "tres_per_node": S, "tres_per_job": S,
                               "current_working_directory": S,
                               "environment": {"oneOf": [SL, {"type": "object"}]},
                               "standard_output": S, "standard_error": S, "argv": SL,
                               "hold": B, "requeue": B, "dependency": S, "array": S,
                               "comment": S, "nice": I}}}},
        "JobSubmitResponse": resp(job_id=I, step_id=S, job_submit_user_msg=S),
        "JobUpdateRequest": {"type": "object",
                             "properties": {"hold": B, "name": S, "comment": S, "nice": I,
                                            "priority": {"oneOf": [I, NUM]},
                                            "time_limit": {"oneOf": [I, S, NUM]},
                                            "requeue": B}},
        "JobUpdateResponse": resp(
            results={"type": "array", "items": _obj({"job_id": I, "error_code": I,
                                                     "error": S, "why": S})},
            job_id=S, step_id=S, job_submit_user_msg=S),
        "Node": _obj({
            "name": S, "address": S, "hostname": S, "state": {**SL, "minItems": 1},
            "cpus": I, "alloc_cpus": I, "alloc_idle_cpus": I, "real_memory": I,
            "alloc_memory": I, "free_mem": NUM, "gres": S, "gres_used": S,
            "partitions": SL, "reason": S, "reason_changed_at": NUM, "reason_set_by_user": S,
            "boot_time": NUM, "slurmd_start_time": NUM, "last_busy": NUM, "tres": S,
            "tres_used": S, "sockets": I, "cores": I, "threads": I, "boards": I, "port": I,
            "weight": I, "version": S, "features": SL, "gpus_alloc": {"type": "array", "items": I}}),
        "NodesResponse": resp(nodes={"type": "array", "items": _ref("Node")}, last_update=NUM),
        "NodeUpdateRequest": {"type": "object", "required": ["state"],
                              "properties": {"state": {"oneOf": [SL, S]}, "reason": S}},
        "Partition": _obj({
            "name": S, "nodes": _obj({"allowed_allocation": S, "configured": S, "total": I}),
            "cpus": _obj({"task_binding": I, "total": I}),
            "maximums": {"type": "object", "required": ["time", "nodes"],
                         "properties": {"time": NUM, "nodes": NUM}},
            "defaults": {"type": "object", "properties": {"time": NUM}},
            "partition": _obj({"state": SL}), "priority": _obj({"job_factor": I, "tier": I}),
            "tres": _obj({"billing_weights": S, "configured": S}), "flags": SL}),
        "PartitionsResponse": resp(partitions={"type": "array", "items": _ref("Partition")},
                                   last_update=NUM),
        "FairshareResponse": resp(fairshare={"type": "array", "items": {"type": "object"}}),
        "ReservationsResponse": resp(reservations={"type": "array", "items": {"type": "object"}},
                                     last_update=NUM),
        "PingResponse": resp(pings={"type": "array", "items": _obj(
            {"hostname": S, "pinged": S, "latency": I, "mode": S})}),
        "DiagResponse": resp(statistics={
            "type": "object",
            "required": ["schedule_cycle_last", "schedule_cycle_total", "jobs_started",
                         "rpcs_by_message_type", "bf_backfilled_jobs"],
            "properties": {"schedule_cycle_last": I, "schedule_cycle_total": I,
                           "jobs_started": I, "bf_backfilled_jobs": I, "rpcs_total": I,
                           "rpcs_by_message_type": {"type": "array", "items": _obj(
                               {"message_type": S, "count": I, "total_time": I,
                                "average_time": NUM})}}}),
        "Step": _obj({"step": _obj({"id": S, "name": S}), "state": SL,
                      "exit_code": _ref("ExitCode"), "nodes": _obj({"count": I, "range": S,
                                                                     "list": SL}),
                      "time": {"type": "object", "required": ["elapsed", "start", "end"],
                               "properties": {"elapsed": I, "start": NUM, "end": NUM}},
                      "tres": {"type": "object"}}),
        "AcctJob": _obj({
            "account": S, "job_id": I, "name": S, "user": S, "group": S, "partition": S,
            "qos": S, "nodes": S, "cluster": S, "working_directory": S,
            "state": _obj({"current": {**SL, "minItems": 1}, "reason": S}),
            "exit_code": _ref("ExitCode"), "derived_exit_code": _ref("ExitCode"),
            "time": {"type": "object",
                     "required": ["elapsed", "eligible", "end", "start", "submission", "limit"],
                     "properties": {"elapsed": I, "eligible": I, "end": I, "start": I,
                                    "submission": I, "limit": NUM}},
            "tres": _obj({"allocated": {"type": "array", "items": _obj(
                {"type": S, "name": S, "id": I, "count": I})},
                "requested": {"type": "array"}}),
            "steps": {"type": "array", "items": _ref("Step")},
            "array": {"type": "object"}, "association": {"type": "object"}}),
        "AcctJobsResponse": resp(jobs={"type": "array", "items": _ref("AcctJob")}),
        "Event": _obj({"id": I, "time": I, "job_id": {"type": ["integer", "null"]},
                       "node": {"type": ["string", "null"]}, "event": S, "detail": S}),
        "EventsResponse": resp(events={"type": "array", "items": _ref("Event")}),
        "OutputResponse": resp(output=_obj({
            "job_id": I, "stream": {"enum": ["stdout", "stderr"]},
            "path": {"type": ["string", "null"]}, "size": I, "offset": I, "data": S,
            "truncated": B, "available": B, "reason": {"type": ["string", "null"]}})),
        "DashboardResponse": resp(dashboard=_obj({
            "now": I, "cluster": S,
            "nodes": _obj({"name": SL, "state": SL, "flags": SL,
                           "cpus": {"type": "array", "items": I},
                           "cpus_alloc": {"type": "array", "items": I},
                           "mem": {"type": "array", "items": I},
                           "mem_alloc": {"type": "array", "items": I},
                           "gpu_owner": {"type": "array",
                                         "items": {"type": "array", "items": I}},
                           "last_heartbeat": {"type": "array",
                                              "items": {"type": ["integer", "null"]}},
                           "reason": {"type": "array", "items": {"type": ["string", "null"]}}}),
            "job_columns": SL, "jobs": {"type": "array", "items": {"type": "array"}},
            "stats": {"type": "object"}, "fairshare": {"type": ["object", "null"]}})),
        "UsageResponse": resp(usage=_obj({
            "now": I, "start": I, "bucket": I, "times": {"type": "array", "items": I},
            "gpu_hours": {"type": "object",
                          "additionalProperties": {"type": "array", "items": N}},
            "cpu_hours": {"type": "object",
                          "additionalProperties": {"type": "array", "items": N}}})),
        "WhoamiResponse": resp(user=S, uid=I, operator=B, cluster=S),
    }


def _p(name: str, where: str = "query", schema: dict | None = None, required: bool = False,
       desc: str = "") -> dict:
    return {"name": name, "in": where, "required": required or where == "path",
            "schema": schema or S, "description": desc}


def _op(op_id: str, summary: str, ok: str, *, params=(), body: str | None = None,
        errors=(400, 401, 403, 404, 503), tag: str = "slurm", secure: bool = True) -> dict:
    out: dict[str, Any] = {"operationId": op_id, "summary": summary, "tags": [tag],
           "parameters": list(params),
           "responses": {"200": {"description": "success", "content": {
               "application/json": {"schema": _ref(ok)}}}}}
    for code in errors:
        out["responses"][str(code)] = {"description": _ERR[code], "content": {
            "application/json": {"schema": _ref("ErrorResponse")}}}
    if body:
        out["requestBody"] = {"required": True, "content": {
            "application/json": {"schema": _ref(body)}}}
    if not secure:
        out["security"] = []
    return out


_ERR = {400: "invalid request", 401: "no, expired or forged token",
        403: "not permitted (the controller's authorization)", 404: "no such object",
        409: "conflicting state", 503: "controller unreachable"}

JOB_ID = _p("job_id", "path", I)


def document() -> dict:
    s, d, m = f"/slurm/{V}", f"/slurmdb/{V}", f"/muster/{V}"
    paths = {
        f"{s}/ping": {"get": _op("slurm_ping", "ping the controller", "PingResponse")},
        f"{s}/diag": {"get": _op("slurm_diag", "scheduler and RPC statistics (sdiag)",
                                 "DiagResponse")},
        f"{s}/jobs": {"get": _op("slurm_get_jobs", "all jobs (squeue)", "JobsResponse")},
        f"{s}/job/submit": {"post": _op("slurm_post_job_submit",
                                        "submit a batch job as the token's user",
                                        "JobSubmitResponse", body="JobSubmitRequest")},
        f"{s}/job/{{job_id}}": {
            "get": _op("slurm_get_job", "one job", "JobsResponse", params=[JOB_ID]),
            "post": _op("slurm_post_job", "update a job (hold, name, time limit, ...)",
                        "JobUpdateResponse", params=[JOB_ID], body="JobUpdateRequest",
                        errors=(400, 401, 403, 404, 409, 503)),
            "delete": _op("slurm_delete_job", "cancel or signal a job (scancel)", "Empty",
                          params=[JOB_ID, _p("signal", desc="signal name or number")],
                          errors=(400, 401, 403, 404, 409, 503))},
        f"{s}/nodes": {"get": _op("slurm_get_nodes", "all nodes", "NodesResponse")},
        f"{s}/node/{{node_name}}": {
            "get": _op("slurm_get_node", "one node", "NodesResponse",
                       params=[_p("node_name", "path")]),
            "post": _op("slurm_post_node", "drain / resume / down a node (operators)",
                        "Empty", params=[_p("node_name", "path")], body="NodeUpdateRequest")},
        f"{s}/partitions": {"get": _op("slurm_get_partitions", "all partitions",
                                       "PartitionsResponse")},
        f"{s}/partition/{{partition_name}}": {
            "get": _op("slurm_get_partition", "one partition", "PartitionsResponse",
                       params=[_p("partition_name", "path")])},
        f"{s}/reservations": {"get": _op("slurm_get_reservations",
                                         "advance reservations",
                                         "ReservationsResponse")},
        f"{d}/jobs": {"get": _op(
            "slurmdb_get_jobs", "accounting records with steps (sacct)", "AcctJobsResponse",
            tag="slurmdb", params=[
                _p("users", desc="comma list of user names"), _p("account"), _p("partition"),
                _p("state"), _p("job_name"), _p("qos"), _p("job_id", desc="comma list"),
                _p("start_time", schema=I), _p("end_time", schema=I)])},
        f"{d}/job/{{job_id}}": {"get": _op("slurmdb_get_job", "one accounting record",
                                           "AcctJobsResponse", tag="slurmdb", params=[JOB_ID])},
        f"{m}/job/{{job_id}}/output": {"get": _op(
            "muster_get_job_output", "tail of the job's StdOut/StdErr (owner or operators)",
            "OutputResponse", tag="muster",
            params=[JOB_ID, _p("bytes", schema=I),
                    _p("stream", schema={"enum": ["stdout", "stderr"]})])},
        f"{m}/job/{{job_id}}/{{action}}": {"post": _op(
            "muster_post_job_action", "hold, release or requeue a job", "Empty", tag="muster",
            params=[JOB_ID, _p("action", "path", {"enum": ["hold", "release", "requeue"]}),
                    _p("hold", desc="requeue: 1 to requeue held")],
            errors=(400, 401, 403, 404, 409, 503))},
        f"{m}/events": {"get": _op(
            "muster_get_events", "audit trail: why a job is pending or why it ended",
            "EventsResponse", tag="muster",
            params=[_p("job_id", schema=I), _p("node"), _p("event"), _p("since", schema=I),
                    _p("limit", schema=I), _p("before_id", schema=I)])},
        f"{m}/dashboard": {"get": _op("muster_get_dashboard",
                                      "compact cluster snapshot (nodes, GPUs, jobs)",
                                      "DashboardResponse", tag="muster")},
        f"{m}/usage": {"get": _op("muster_get_usage", "GPU-/CPU-hours by account over time",
                                  "UsageResponse", tag="muster",
                                  params=[_p("hours", schema=I), _p("bucket", schema=I)])},
        f"{m}/fairshare": {"get": _op("muster_get_fairshare",
                                      "associations with shares, usage and fair-share factors",
                                      "FairshareResponse", tag="muster")},
        f"{m}/whoami": {"get": _op("muster_get_whoami", "the token's user", "WhoamiResponse",
                                   tag="muster")},
        "/metrics": {"get": {"operationId": "metrics", "summary": "Prometheus metrics",
                             "tags": ["muster"], "security": [],
                             "responses": {"200": {"description": "text exposition format",
                                                   "content": {"text/plain": {"schema": S}}},
                                           "503": {"description": "controller unreachable",
                                                   "content": {"text/plain": {"schema": S}}}}}},
        "/openapi.json": {"get": {"operationId": "openapi", "summary": "this document",
                                  "tags": ["muster"], "security": [],
                                  "responses": {"200": {"description": "OpenAPI 3.1",
                                                        "content": {"application/json": {
                                                            "schema": {"type": "object"}}}}}}},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "Muster REST API (slurmrestd-compatible, data_parser v0.0.40)",
                 "version": V,
                 "description": "Served by musterrestd; every request is forwarded to the "
                                "controller as the token's user. See docs/api.md."},
        "servers": [{"url": "/"}],
        "security": [{"token": []}, {"bearer": []}],
        "components": {
            "securitySchemes": {
                "token": {"type": "apiKey", "in": "header", "name": "X-SLURM-USER-TOKEN"},
                "user": {"type": "apiKey", "in": "header", "name": "X-SLURM-USER-NAME"},
                "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}},
            "schemas": _schemas()},
        "paths": paths,
    }
