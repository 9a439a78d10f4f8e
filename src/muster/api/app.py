"""musterrestd's HTTP application (Starlette): slurmrestd-style REST API (data_parser
v0.0.40), Prometheus metrics, the OpenAPI document and the web dashboard.

Every API request is authenticated with a JWT and forwarded to the controller *as the
token's user* (muster.api.ctlclient), so authorization is the controller's, exactly as for the
CLI. Paths under ``/slurm/v0.0.40`` and ``/slurmdb/v0.0.40`` follow slurmrestd; Muster
additions live under ``/muster/v0.0.40``.
"""

from __future__ import annotations

import os
import pwd
import signal as _signal
import time

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from muster.api.ctlclient import ControllerClient
from muster.api.jwtauth import AuthFailure, Identity, JwtVerifier
from muster.common import fmt_json
from muster.common.errors import CODES, TransportError
from muster.common.gresspec import parse_gres

V = "v0.0.40"
STATIC = os.path.join(os.path.dirname(__file__), "static")
DASH_TTL = 1.0  # seconds the dashboard snapshot is shared between viewers


class ApiError(Exception):
    def __init__(self, status: int, message: str, code: str = "error", source: str = ""):
        super().__init__(message)
        self.status, self.message, self.code, self.source = status, message, code, source


def _errnum(code: str) -> int:
    keys = list(CODES)
    return 2000 + keys.index(code) if code in keys else 1


class Api:
    def __init__(self, client: ControllerClient, verifier: JwtVerifier, cluster: str):
        self.client = client
        self.verifier = verifier
        self.cluster = cluster
        self._dash: tuple[float, dict] | None = None
        self._me = Identity(_name(os.getuid()), os.getuid(), os.getgid())

    # ---- plumbing ------------------------------------------------------------------------
    def ident(self, request: Request) -> Identity:
        token = _token_of(request)
        try:
            return self.verifier.verify(token, request.headers.get("x-slurm-user-name"))
        except AuthFailure as exc:
            raise ApiError(401, f"Authentication failure: {exc}", "auth") from None

    async def ctl(self, who: Identity, msg: dict) -> dict:
        try:
            reply = await self.client.call(msg, who.uid, who.gid)
        except TransportError as exc:
            raise ApiError(503, exc.message, "connect", msg.get("op", "")) from None
        if not reply.get("ok"):
            code = reply.get("code") or "internal"
            status = CODES.get(code, ("", 500))[1]
            raise ApiError(status, reply.get("error") or CODES.get(code, (code,))[0], code,
                           msg.get("op", ""))
        return reply

    def meta(self, who: Identity | None, request: Request) -> dict:
        client = {"source": request.client.host if request.client else "",
                  "user": who.user if who else "", "group": _group(who.gid) if who else ""}
        return fmt_json.meta([request.method, request.url.path], "openapi/slurmctld",
                             self.cluster, client)

    def ok(self, request: Request, who: Identity | None, body: dict, status: int = 200):
        body = dict(body)
        body["meta"] = self.meta(who, request)
        body.setdefault("errors", [])
        body.setdefault("warnings", [])
        return JSONResponse(body, status_code=status)

    # ---- slurm: jobs ---------------------------------------------------------------------
    async def jobs(self, request: Request):
        who = self.ident(request)
        r = await self.ctl(who, {"op": "jobs"})
        doc = fmt_json.squeue_json(r["jobs"], r["now"], cluster=self.cluster)
        return self.ok(request, who, {k: doc[k] for k in ("jobs", "last_backfill", "last_update")})

    async def job(self, request: Request):
        who = self.ident(request)
        jid = _path_int(request, "job_id")
        r = await self.ctl(who, {"op": "jobs", "job_ids": [jid], "events": True})
        doc = fmt_json.squeue_json(r["jobs"], r["now"], cluster=self.cluster)
        return self.ok(request, who, {k: doc[k] for k in ("jobs", "last_backfill", "last_update")})

    async def submit(self, request: Request):
        who = self.ident(request)
        body = await _json_body(request)
        script = body.get("script")
        desc = body.get("job")
        if desc is None:
            desc = {}
        if not isinstance(desc, dict):
            raise ApiError(400, "job must be an object", "invalid_request")
        if script is None:
            script = desc.get("script")
        if not isinstance(script, str):
            raise ApiError(400, "script is required (a string starting with #!)", "invalid_request")
        req, env, warnings = translate_job(desc, who)
        r = await self.ctl(who, {"op": "submit", "job": req, "script": script, "env": env})
        return self.ok(request, who, {"job_id": r["job_id"], "step_id": "batch",
                                      "job_submit_user_msg": "", "warnings": warnings})

    async def job_update(self, request: Request):
        who = self.ident(request)
        jid = _path_int(request, "job_id")
        body = await _json_body(request)
        ref = {"jobs": [{"job_id": jid}]}
        changes = {}
        for key, field in (("name", "name"), ("comment", "comment"), ("nice", "nice"),
                           ("priority", "priority"), ("time_limit", "timelimit"),
                           ("requeue", "requeue"), ("dependency", "dependency")):
            if key in body:
                v = _unnum(body[key])
                if key == "requeue":
                    v = "1" if v else "0"
                changes[field] = str(v)
        if "hold" in body:  # in the same request: refused as a whole, or applied as a whole
            changes["hold"] = "1" if body["hold"] else "0"
        if changes:
            await self.ctl(who, {"op": "update_job", **ref, "changes": changes})
        return self.ok(request, who, {"results": [{"job_id": jid, "error_code": 0, "error": "",
                                                   "why": ""}],
                                      "job_id": str(jid), "step_id": "", "job_submit_user_msg": ""})

    async def job_cancel(self, request: Request):
        who = self.ident(request)
        jid = _path_int(request, "job_id")
        msg: dict = {"op": "cancel", "jobs": [{"job_id": jid}]}
        sig = request.query_params.get("signal")
        if sig:
            msg["signal"] = _parse_signal(sig)
        r = await self.ctl(who, msg)
        errs = r.get("errors") or []
        if errs:
            e = errs[0]
            code = e.get("code", "internal")
            raise ApiError(CODES.get(code, ("", 500))[1], e.get("error", ""), code, "cancel")
        return self.ok(request, who, {})

    async def job_action(self, request: Request):
        who = self.ident(request)
        jid = _path_int(request, "job_id")
        action = request.path_params["action"]
        msg: dict = {"jobs": [{"job_id": jid}]}
        if action == "hold":
            msg.update(op="hold", user_hold=True)
        elif action == "release":
            msg.update(op="release")
        elif action == "requeue":
            msg.update(op="requeue", hold=request.query_params.get("hold") in ("1", "true"))
        else:
            raise ApiError(404, f"unknown action {action}", "invalid_request")
        await self.ctl(who, msg)
        return self.ok(request, who, {})

    # ---- slurm: nodes, partitions, reservations, diag ------------------------------------
    async def nodes(self, request: Request):
        who = self.ident(request)
        r = await self.ctl(who, {"op": "nodes"})
        doc = fmt_json.nodes_json(r["nodes"], r["now"], cluster=self.cluster)
        return self.ok(request, who, {"nodes": doc["nodes"], "last_update": doc["last_update"]})

    async def node(self, request: Request):
        who = self.ident(request)
        name = request.path_params["node_name"]
        r = await self.ctl(who, {"op": "nodes"})
        found = [n for n in r["nodes"] if n["name"] == name]
        if not found:
            raise ApiError(404, f"Invalid node name specified: {name}", "invalid_nodelist")
        doc = fmt_json.nodes_json(found, r["now"], cluster=self.cluster)
        return self.ok(request, who, {"nodes": doc["nodes"], "last_update": doc["last_update"]})

    async def node_update(self, request: Request):
        who = self.ident(request)
        name = request.path_params["node_name"]
        body = await _json_body(request)
        states = body.get("state")
        if isinstance(states, str):
            states = [states]
        if not isinstance(states, list) or len(states) != 1 or not isinstance(states[0], str):
            raise ApiError(400, "state must be a list with one of DRAIN, RESUME, DOWN, IDLE",
                           "invalid_request")
        await self.ctl(who, {"op": "update_node", "nodes": [name], "state": states[0],
                             "reason": body.get("reason")})
        return self.ok(request, who, {})

    async def partitions(self, request: Request):
        who = self.ident(request)
        msg = {"op": "partitions"}
        name = request.path_params.get("partition_name")
        if name:
            msg["name"] = name
        r = await self.ctl(who, msg)
        if name and not r["partitions"]:
            raise ApiError(404, "Invalid partition name specified", "invalid_partition")
        doc = fmt_json.partitions_json(r["partitions"], r["now"], cluster=self.cluster)
        return self.ok(request, who, {"partitions": doc["partitions"],
                                      "last_update": doc["last_update"]})

    async def reservations(self, request: Request):
        who = self.ident(request)
        r = await self.ctl(who, {"op": "reservations"})
        out = [{"name": x["name"], "node_list": x["nodes"], "node_count": x["node_count"],
                "core_count": x["core_count"], "partition": x.get("partition") or "",
                "start_time": fmt_json.num(x["start_time"]), "end_time": fmt_json.num(x["end_time"]),
                "flags": x["flags"], "users": ",".join(x["users"]),
                "accounts": ",".join(x["accounts"]), "tres": x["tres"]}
               for x in r["reservations"]]
        return self.ok(request, who, {"reservations": out,
                                      "last_update": fmt_json.num(r["now"])})

    async def ping(self, request: Request):
        who = self.ident(request)
        t0 = time.perf_counter()
        r = await self.ctl(who, {"op": "ping"})
        lat = int((time.perf_counter() - t0) * 1e6)
        return self.ok(request, who, {"pings": [{"hostname": r.get("cluster", ""), "pinged": "UP",
                                                 "latency": lat, "mode": "primary"}]})

    async def diag(self, request: Request):
        who = self.ident(request)
        r = await self.ctl(who, {"op": "diag"})
        st = r["stats"]
        js = r["job_states"]
        sd = r["sdiag"]  # counters since the last reset (muster.controller.diag)
        stats = {
            "parts_packed": 1, "req_time": fmt_json.num(r["now"]),
            "req_time_start": fmt_json.num(sd["since"]),
            "server_thread_count": r["connections"], "agent_queue_size": r["agent_queue"],
            "agent_count": r["agents_connected"],
            "dbd_agent_queue_size": 0,
            "schedule_cycle_last": int(st.get("last_cycle_ms", 0) * 1000),
            "schedule_cycle_total": st.get("cycles", 0),
            "jobs_submitted": sd["jobs"]["submitted"], "jobs_started": sd["jobs"]["started"],
            "jobs_completed": sd["jobs"]["completed"], "jobs_canceled": sd["jobs"]["canceled"],
            "jobs_failed": sd["jobs"]["failed"], "jobs_pending": js.get("PENDING", 0),
            "jobs_running": js.get("RUNNING", 0),
            "bf_backfilled_jobs": sd["backfilled_since_start"], "bf_active": False,
            "rpcs_by_message_type": [{"message_type": k, "count": v["count"],
                                      "total_time": int(v["total_time_s"] * 1e6),
                                      "average_time": fmt_json.num(
                                          int(v["total_time_s"] * 1e6 / max(1, v["count"])))}
                                     for k, v in r["rpc"].items()],
            "rpcs_total": st.get("rpcs", 0),
            "job_requeues": r["events"].get("requeues", 0),
            "node_failures": r["events"].get("node_failures", 0),
        }
        return self.ok(request, who, {"statistics": stats})

    # ---- slurmdb: accounting ---------------------------------------------------------------
    async def acct_jobs(self, request: Request):
        who = self.ident(request)
        q = request.query_params
        msg: dict = {"op": "acct", "all_users": True}
        jobs_filter = q.get("job_id") or q.get("jobs")
        if jobs_filter:
            msg["job_ids"] = [_int_param(x, "job_id") for x in jobs_filter.split(",") if x]
        if q.get("users"):
            uids = []
            for u in q["users"].split(","):
                try:
                    uids.append(pwd.getpwnam(u).pw_uid)
                except KeyError:
                    uids.append(-1)
            msg["uids"] = uids
        if q.get("start_time"):
            msg["start"] = _int_param(q["start_time"], "start_time")
        if q.get("end_time"):
            msg["end"] = _int_param(q["end_time"], "end_time")
        r = await self.ctl(who, msg)
        recs = r["jobs"]
        for key, field in (("account", "account"), ("partition", "partition"),
                           ("job_name", "name"), ("state", "state"), ("qos", "qos")):
            if q.get(key):
                wanted = set(q[key].split(","))
                if key == "state":
                    wanted = {w.upper() for w in wanted}
                recs = [j for j in recs if j.get(field) in wanted]
        doc = fmt_json.sacct_json(recs, r["now"], cluster=r.get("cluster") or self.cluster)
        return self.ok(request, who, {"jobs": doc["jobs"]})

    async def acct_job(self, request: Request):
        who = self.ident(request)
        jid = _path_int(request, "job_id")
        r = await self.ctl(who, {"op": "acct", "job_ids": [jid], "all_users": True})
        if not r["jobs"]:
            raise ApiError(404, "Invalid job id specified", "invalid_job_id")
        doc = fmt_json.sacct_json(r["jobs"], r["now"], cluster=r.get("cluster") or self.cluster)
        return self.ok(request, who, {"jobs": doc["jobs"]})

    # ---- muster extensions ------------------------------------------------------------------
    async def events(self, request: Request):
        who = self.ident(request)
        q = request.query_params
        msg: dict = {"op": "events"}
        for key in ("job_id", "since", "limit", "before_id"):
            if q.get(key):
                msg[key] = _int_param(q[key], key)
        for key in ("node", "event"):
            if q.get(key):
                msg[key] = q[key]
        r = await self.ctl(who, msg)
        return self.ok(request, who, {"events": r["events"]})

    async def job_output(self, request: Request):
        who = self.ident(request)
        jid = _path_int(request, "job_id")
        msg: dict = {"op": "job_output", "job_id": jid}
        if request.query_params.get("bytes"):
            msg["bytes"] = _int_param(request.query_params["bytes"], "bytes")
        if request.query_params.get("stream"):
            msg["stream"] = request.query_params["stream"]
        r = await self.ctl(who, msg)
        r.pop("ok", None)
        return self.ok(request, who, {"output": r})

    async def dashboard_data(self, request: Request):
        who = self.ident(request)
        t = time.monotonic()
        if self._dash is None or t - self._dash[0] > DASH_TTL:
            r = await self.ctl(who, {"op": "dash"})
            r.pop("ok", None)
            self._dash = (time.monotonic(), r)
        return self.ok(request, who, {"dashboard": self._dash[1]})

    async def usage(self, request: Request):
        who = self.ident(request)
        msg: dict = {"op": "usage"}
        for key in ("hours", "bucket"):
            if request.query_params.get(key):
                msg[key] = _int_param(request.query_params[key], key)
        r = await self.ctl(who, msg)
        r.pop("ok", None)
        return self.ok(request, who, {"usage": r})

    async def fairshare(self, request: Request):
        """The association tree with shares, usage and fair-share factors (what ``sshare -a``
        shows)."""
        who = self.ident(request)
        r = await self.ctl(who, {"op": "sshare"})
        return self.ok(request, who, {"fairshare": r["rows"]})

    async def whoami(self, request: Request):
        who = self.ident(request)
        r = await self.ctl(who, {"op": "ping"})
        return self.ok(request, who, {"user": who.user, "uid": who.uid,
                                      "operator": bool(r.get("admin")),
                                      "cluster": r.get("cluster", "")})

    # ---- unauthenticated ---------------------------------------------------------------------
    async def metrics(self, request: Request):
        """Aggregate metrics for anyone (Prometheus scrapers have no token); a scrape with an
        operator's token adds per-user job counts. A token that is sent must be valid (401)."""
        from muster.api.metrics import render
        who = self.ident(request) if _token_of(request) else None
        try:
            r = await self.ctl(who or self._me, {"op": "metrics", "detail": who is not None})
        except ApiError as exc:
            return Response(f"# controller unavailable: {exc.message}\nmuster_up 0\n",
                            status_code=503, media_type="text/plain; version=0.0.4")
        body, ctype = render(r)
        return Response(body, media_type=ctype)

    async def openapi(self, request: Request):
        from muster.api.openapi import document
        return JSONResponse(document())


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group(gid: int) -> str:
    import grp
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _token_of(request: Request) -> str | None:
    token = request.headers.get("x-slurm-user-token")
    if not token:
        authz = request.headers.get("authorization", "")
        if authz.lower().startswith("bearer "):
            token = authz[7:].strip()
    return token or None


def _path_int(request: Request, key: str) -> int:
    return _int_param(request.path_params[key], key)


def _int_param(v: str, key: str) -> int:
    try:
        n = int(v)
    except (TypeError, ValueError):
        raise ApiError(400, f"Invalid {key}: {v!r}", "invalid_request") from None
    if n < 0 or n > 2**53:
        raise ApiError(400, f"Invalid {key}: {v!r}", "invalid_request")
    return n


def _parse_signal(s: str) -> int:
    if s.isdigit():
        n = int(s)
    else:
        name = s.upper()
        name = name if name.startswith("SIG") else "SIG" + name
        try:
            n = int(_signal.Signals[name])
        except KeyError:
            raise ApiError(400, f"Invalid signal {s!r}", "invalid_request") from None
    if not 0 < n < 65:
        raise ApiError(400, f"Invalid signal {s!r}", "invalid_request")
    return n


MAX_BODY = 16 * 1024 * 1024  # the controller refuses larger frames anyway


async def _json_body(request: Request) -> dict:
    """The request's JSON object. Oversized bodies are refused (413) without reading them past
    the limit; malformed JSON and non-objects are 400 with a clear message."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY):
        raise ApiError(413, f"request body too large (limit {MAX_BODY} bytes)", "too_large")
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise ApiError(413, f"request body too large (limit {MAX_BODY} bytes)", "too_large")
    try:
        import json as _json
        body = _json.loads(bytes(raw))
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, f"request body must be JSON: {exc}", "invalid_request") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object", "invalid_request")
    return body


def _unnum(v):
    """v0.0.40 numbers may come as {"set": true, "infinite": false, "number": N}."""
    if isinstance(v, dict) and "number" in v:
        if v.get("infinite"):
            return "UNLIMITED"
        return v["number"] if v.get("set", True) else None
    return v


_SIMPLE = {"name": "name", "partition": "partition", "account": "account", "qos": "qos",
           "comment": "comment", "dependency": "dependency", "array": "array",
           "standard_output": "std_out", "standard_error": "std_err",
           "standard_input": "std_in", "reservation": "reservation"}
_INTS = {"tasks": "ntasks", "tasks_per_node": "ntasks_per_node", "cpus_per_task": "cpus_per_task",
         "memory_per_node": "mem_per_node", "memory_per_cpu": "mem_per_cpu",
         "minimum_nodes": "nodes_min", "maximum_nodes": "nodes_max", "nice": "nice",
         "time_limit": "time_limit", "time_minimum": "time_min", "begin_time": "begin",
         "priority": "priority", "cpus_per_gpu": "cpus_per_gpu", "memory_per_gpu": "mem_per_gpu"}
_BOOLS = {"hold": "hold", "requeue": "requeue"}
_IGNORED = {"script", "environment", "current_working_directory", "nodes", "tres_per_node",
            "tres_per_job", "tres_per_task", "argv", "exclusive", "required_nodes",
            "excluded_nodes"}


def translate_job(desc: dict, who: Identity) -> tuple[dict, dict, list[dict]]:
    """A v0.0.40 ``job_desc_msg`` → Muster's submit request (docs/records.md) + environment.
    The controller validates everything again; unknown fields become warnings."""
    req: dict = {}
    warnings = []
    for k, v in desc.items():
        if k in _SIMPLE:
            if v is not None:
                if not isinstance(v, str):
                    raise ApiError(400, f"{k} must be a string", "invalid_request")
                req[_SIMPLE[k]] = v
        elif k in _INTS:
            v = _unnum(v)
            if v == "UNLIMITED" and k == "time_limit":
                v = -1
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, int):
                    raise ApiError(400, f"{k} must be an integer", "invalid_request")
                req[_INTS[k]] = v
        elif k in _BOOLS:
            if not isinstance(v, bool):
                raise ApiError(400, f"{k} must be true or false", "invalid_request")
            req[_BOOLS[k]] = v
        elif k not in _IGNORED:
            warnings.append({"warning": f"field {k!r} is not supported and was ignored",
                             "source": "job"})
    nodes = desc.get("nodes")
    if nodes is not None:
        lo, _, hi = str(nodes).partition("-")
        try:
            req["nodes_min"] = int(lo)
            if hi:
                req["nodes_max"] = int(hi)
        except ValueError:
            raise ApiError(400, f"Invalid nodes: {nodes!r}", "invalid_request") from None
    try:  # gres/gpu:2, gres:gpu:a100:2, gpu:2 (muster.common.gresspec, as --gres reads them)
        if desc.get("tres_per_node"):
            req["gres"] = parse_gres(desc["tres_per_node"])
        if desc.get("tres_per_job"):
            g = parse_gres(desc["tres_per_job"])[0]
            req["gpus"] = {"type": g["type"], "count": g["count"]}
        if desc.get("tres_per_task"):
            g = parse_gres(desc["tres_per_task"])[0]
            req["gpus_per_task"] = {"type": g["type"], "count": g["count"]}
    except (AttributeError, ValueError, IndexError):  # GresSpecError is a ValueError
        raise ApiError(400, "Invalid generic resource (gres) specification", "invalid_gres") from None
    excl = desc.get("exclusive")
    if excl:
        req["exclusive"] = True
    for k, field in (("required_nodes", "nodelist"), ("excluded_nodes", "exclude")):
        v = desc.get(k)
        if v:
            if isinstance(v, list) and all(isinstance(x, str) for x in v):
                v = ",".join(v)
            if not isinstance(v, str):
                raise ApiError(400, f"{k} must be a node list (a string or a list of names)",
                               "invalid_request")
            req[field] = v
    argv = desc.get("argv")
    if argv is not None:
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise ApiError(400, "argv must be a list of strings", "invalid_request")
        req["argv"] = argv[1:] if argv else []
    try:
        home = pwd.getpwnam(who.user).pw_dir
    except KeyError:
        home = "/"
    cwd = desc.get("current_working_directory") or home or "/"
    if not isinstance(cwd, str) or not cwd.startswith("/"):
        raise ApiError(400, "current_working_directory must be an absolute path", "invalid_request")
    req["work_dir"] = req["submit_dir"] = cwd
    req["submit_host"] = "musterrestd"
    req["submit_line"] = "POST /slurm/v0.0.40/job/submit"
    env_in = desc.get("environment")
    env: dict[str, str] = {}
    if isinstance(env_in, dict):
        env = {str(k): str(v) for k, v in env_in.items()}
    elif isinstance(env_in, list):
        for item in env_in:
            if isinstance(item, str) and "=" in item:
                k, _, v = item.partition("=")
                env[k] = v
    elif env_in is not None:
        raise ApiError(400, "environment must be a list of NAME=value strings", "invalid_request")
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return req, env, warnings


def build_app(api: Api) -> Starlette:
    s, d, m = f"/slurm/{V}", f"/slurmdb/{V}", f"/muster/{V}"
    routes = [
        Route(f"{s}/ping", api.ping, methods=["GET"]),
        Route(f"{s}/diag", api.diag, methods=["GET"]),
        Route(f"{s}/jobs", api.jobs, methods=["GET"]),
        Route(f"{s}/job/submit", api.submit, methods=["POST"]),
        Route(f"{s}/job/{{job_id}}", api.job, methods=["GET"]),
        Route(f"{s}/job/{{job_id}}", api.job_update, methods=["POST"]),
        Route(f"{s}/job/{{job_id}}", api.job_cancel, methods=["DELETE"]),
        Route(f"{s}/nodes", api.nodes, methods=["GET"]),
        Route(f"{s}/node/{{node_name}}", api.node, methods=["GET"]),
        Route(f"{s}/node/{{node_name}}", api.node_update, methods=["POST"]),
        Route(f"{s}/partitions", api.partitions, methods=["GET"]),
        Route(f"{s}/partition/{{partition_name}}", api.partitions, methods=["GET"]),
        Route(f"{s}/reservations", api.reservations, methods=["GET"]),
        Route(f"{d}/jobs", api.acct_jobs, methods=["GET"]),
        Route(f"{d}/job/{{job_id}}", api.acct_job, methods=["GET"]),
        Route(f"{m}/job/{{job_id}}/output", api.job_output, methods=["GET"]),
        Route(f"{m}/job/{{job_id}}/{{action}}", api.job_action, methods=["POST"]),
        Route(f"{m}/events", api.events, methods=["GET"]),
        Route(f"{m}/dashboard", api.dashboard_data, methods=["GET"]),
        Route(f"{m}/usage", api.usage, methods=["GET"]),
        Route(f"{m}/fairshare", api.fairshare, methods=["GET"]),
        Route(f"{m}/whoami", api.whoami, methods=["GET"]),
        Route("/metrics", api.metrics, methods=["GET"]),
        Route("/openapi.json", api.openapi, methods=["GET"]),
        Route("/openapi/v3", api.openapi, methods=["GET"]),
        Route("/", lambda r: RedirectResponse("/dashboard/"), methods=["GET"]),
        Mount("/dashboard", app=StaticFiles(directory=STATIC, html=True), name="dashboard"),
    ]

    async def api_error(request: Request, exc: Exception):
        assert isinstance(exc, ApiError)  # registered for ApiError only
        body = {"errors": [{"error": exc.message, "error_number": _errnum(exc.code),
                            "description": exc.code, "source": exc.source}],
                "warnings": [], "meta": fmt_json.meta([request.method, request.url.path],
                                                      "openapi/slurmctld", api.cluster,
                                                      {"source": "", "user": "", "group": ""})}
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse(body, status_code=exc.status, headers=headers)

    return Starlette(routes=routes, exception_handlers={ApiError: api_error})
