"""The table of client operations: ``OPS`` (name -> handler) and the ``op`` decorator that fills
it, behind the field-type check of ``REQUEST_FIELDS``.

Below every module that defines operations (handlers, api_ops, acct_ops, usage, diag, ...), so
none of them imports another to register; muster.controller.ops imports them all and is what the
server dispatches through. A name registered twice raises at import.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

from muster.common.errors import RequestError

OPS: dict[str, Callable] = {}

# ---- request field types -----------------------------------------------------------------
# A spec is a (description, predicate) pair, a dict (an object whose listed keys have those
# specs; other keys are ignored) or a one-element list (a list of that spec). ``None`` stands
# for an absent field everywhere except inside lists.

MAX_LIST = 100_000


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


INT = ("an integer", lambda v: _is_int(v) and -2**63 <= v < 2**63)  # SQLite's INTEGER
ID = ("a non-negative integer", lambda v: _is_int(v) and 0 <= v <= 2**53)
NUM = ("a number", lambda v: (_is_int(v) or isinstance(v, float)) and abs(v) <= 2**53)
STR = ("a string", lambda v: isinstance(v, str))
BOOL = ("true or false", lambda v: isinstance(v, bool))
OBJ = ("an object", lambda v: isinstance(v, dict))
PORT = ("a port number", lambda v: _is_int(v) and 0 < v < 65536)
MODE = ("a file mode", lambda v: _is_int(v) and 0 <= v <= 0o7777)
STDIN = ("'all', 'none' or a task id",
         lambda v: v in ("all", "none") or (_is_int(v) and 0 <= v < 2**32))

JOB_REF = {"job_id": ID, "task": ID}
STEP_REF = {"job_id": ID, "task": ID, "step_id": ID}  # scancel J[_T].S (controller.stepkill)
FILTERS = {"uid": INT, "name": STR, "partition": STR, "account": STR, "qos": STR,
           "states": [STR], "nodes": [STR]}
STEP = {"argv": [STR], "env": OBJ, "name": STR, "cwd": STR, "io_port": PORT,
        "stdin_target": STDIN, "output": STR, "error": STR, "input": STR, "open_mode": STR,
        "umask": MODE, "distribution": STR, "label": BOOL, "overlap": BOOL,
        "gpus_explicit": BOOL, "nodelist": STR, "exclude": STR, "srun_pid": ID, "srun_host": STR,
        "gpu_bind": STR, "pty": BOOL, "task_argv": [[STR]], "task_prolog": STR,
        "task_epilog": STR, "propagate": STR, "rlimits": OBJ, "output_task": ID,
        "error_task": ID}
RESV = {"name": STR, "users": [STR], "accounts": [STR], "flags": [STR], "nodes": [STR],
        "partition": STR, "start": INT, "end": INT, "duration": INT, "node_cnt": INT,
        "tres": OBJ}

REQUEST_FIELDS: dict[str, dict] = {
    "ping": {}, "nodes": {}, "config": {}, "dash": {}, "diag": {}, "sprio": {}, "sshare": {},
    "reconfigure": {}, "topology": {},
    "submit": {"job": OBJ, "script": STR, "env": OBJ},
    "allocate": {"job": OBJ, "lease": BOOL, "immediate": BOOL},
    "jobs": {"job_ids": [ID], "uids": [INT], "states": [STR], "fields": [STR], "rows": BOOL,
             "events": BOOL, "hide": BOOL, "encoded": BOOL},
    "partitions": {"name": STR},
    "acct": {"job_ids": [ID], "uids": [INT], "all_users": BOOL, "start": INT, "end": INT,
             "duplicates": BOOL},
    "job_script": {"job_ids": [ID], "env": BOOL},
    "cancel": {"jobs": [JOB_REF], "steps": [STEP_REF], "filters": FILTERS, "signal": INT,
               "scope": STR},
    "hold": {"jobs": [JOB_REF], "user_hold": BOOL},
    "release": {"jobs": [JOB_REF]},
    "requeue": {"jobs": [JOB_REF], "hold": BOOL},
    "update_job": {"jobs": [JOB_REF], "changes": OBJ},
    "update_node": {"nodes": [STR], "state": STR, "reason": STR},
    "wait_alloc": {"job_id": ID, "timeout": NUM},
    "release_alloc": {"job_id": ID, "exit_code": INT, "signal": INT},
    "lease": {"job_id": ID},
    "step_create": {"job_id": ID, "step": STEP},
    "step_signal": {"job_id": ID, "signal": INT, "step_id": ID},
    "step_status": {"job_id": ID, "step_id": ID},
    "steps": {"job_ids": [ID]},
    "token": {"lifespan": INT, "username": STR},
    "job_output": {"job_id": ID, "bytes": INT, "stream": STR},
    "events": {"job_id": ID, "node": STR, "event": STR, "since": ID, "before_id": ID,
               "limit": INT},
    "usage": {"hours": INT, "bucket": INT},
    "metrics": {"detail": BOOL},
    "sacctmgr": {"action": STR, "entity": STR, "names": [STR], "where": [[STR]], "set": [[STR]]},
    "reservations": {"name": STR},
    "resv_create": {"spec": RESV},
    "resv_update": {"spec": RESV},
    "resv_delete": {"name": STR},
    "diag_reset": {}, "setdebug": {"level": INT}, "setdebugflags": {"add": [STR], "remove": [STR]},
}


def check_fields(msg: dict, spec: dict, path: str = "") -> None:
    """Raise ``invalid_request`` naming the first field of ``msg`` whose type is not the one
    ``spec`` declares (see REQUEST_FIELDS)."""
    for key, sub in spec.items():
        v = msg.get(key)
        if v is not None:
            _check_value(v, sub, f"{path}{key}")


def _check_value(v, spec, path: str) -> None:
    if isinstance(spec, dict):
        if not isinstance(v, dict):
            raise _type_error(path, "an object")
        check_fields(v, spec, path + ".")
    elif isinstance(spec, list):
        if not isinstance(v, list) or len(v) > MAX_LIST:
            raise _type_error(path, f"a list (of at most {MAX_LIST} items)")
        for i, item in enumerate(v):
            if item is None:
                raise _type_error(f"{path}[{i}]", "a value, not null")
            _check_value(item, spec[0], f"{path}[{i}]")
    elif not spec[1](v):
        raise _type_error(path, spec[0])


def _type_error(path: str, what: str) -> RequestError:
    return RequestError(f"Invalid request: {path[:64]} must be {what}", "invalid_request")


def op(name):
    """Register ``fn`` as operation ``name``, behind the field check of REQUEST_FIELDS."""
    spec = REQUEST_FIELDS[name]

    def deco(fn):
        if asyncio.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def checked(ctl, msg, uid, gid):
                check_fields(msg, spec)
                return await fn(ctl, msg, uid, gid)
        else:
            @functools.wraps(fn)
            def checked(ctl, msg, uid, gid):
                check_fields(msg, spec)
                return fn(ctl, msg, uid, gid)
        if name in OPS:  # two handlers for one name would silently replace each other
            raise RuntimeError(f"operation {name!r} is registered twice")
        OPS[name] = checked
        return fn
    return deco


def _int(v, what="job id") -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v > 2**53:
        raise RequestError(f"Invalid {what}", "invalid_request")
    return v
