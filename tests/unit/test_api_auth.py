"""JWT minting (controller, stdlib) and verification (musterrestd, PyJWT); request
translation; the OpenAPI document against the routes."""

import os
import pwd
import time

import pytest

jwt = pytest.importorskip("jwt")
pytest.importorskip("starlette")

from muster.api.app import ApiError, Api, build_app, translate_job  # noqa: E402
from muster.api.jwtauth import AuthFailure, Identity, JwtVerifier  # noqa: E402
from muster.api.openapi import document  # noqa: E402
from muster.controller.api_ops import load_or_create_jwt_key, sign_hs256  # noqa: E402


@pytest.fixture
def keyfile(tmp_path):
    path = str(tmp_path / "jwt.key")
    load_or_create_jwt_key(path)
    return path


def test_key_created_0600_and_reused(keyfile):
    st = os.stat(keyfile)
    assert st.st_mode & 0o777 == 0o600 and st.st_size == 32
    assert load_or_create_jwt_key(keyfile) == open(keyfile, "rb").read()


def test_stdlib_tokens_verify_with_pyjwt(keyfile):
    key = open(keyfile, "rb").read()
    t = int(time.time())
    tok = sign_hs256({"iat": t, "exp": t + 60, "sun": "root"}, key)
    claims = jwt.decode(tok, key, algorithms=["HS256"])
    assert claims == {"iat": t, "exp": t + 60, "sun": "root"}
    who = JwtVerifier(keyfile).verify(tok)
    assert (who.user, who.uid) == ("root", 0)


def test_expired_forged_and_malformed_tokens_are_refused(keyfile):
    key = open(keyfile, "rb").read()
    v = JwtVerifier(keyfile)
    t = int(time.time())
    with pytest.raises(AuthFailure, match="expired"):
        v.verify(sign_hs256({"iat": t - 100, "exp": t - 10, "sun": "root"}, key))
    with pytest.raises(AuthFailure, match="invalid"):
        v.verify(sign_hs256({"iat": t, "exp": t + 60, "sun": "root"}, b"x" * 32))
    with pytest.raises(AuthFailure):
        v.verify("not.a.token")
    with pytest.raises(AuthFailure):
        v.verify(None)
    with pytest.raises(AuthFailure):  # no exp
        v.verify(sign_hs256({"iat": t, "sun": "root"}, key))
    # "alg": "none" must never be accepted
    import base64
    import json

    def b64(d):
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()
    with pytest.raises(AuthFailure):
        v.verify(b64({"alg": "none", "typ": "JWT"}) + "." + b64({"exp": t + 60, "sun": "root"}) + ".")


def test_user_header_must_match_unless_root(keyfile):
    key = open(keyfile, "rb").read()
    t = int(time.time())
    users = [p.pw_name for p in pwd.getpwall() if p.pw_uid not in (0,)][:2]
    if len(users) < 2:
        pytest.skip("needs two non-root users")
    v = JwtVerifier(keyfile)
    tok = sign_hs256({"iat": t, "exp": t + 60, "sun": users[0]}, key)
    with pytest.raises(AuthFailure, match="does not match"):
        v.verify(tok, users[1])
    root = sign_hs256({"iat": t, "exp": t + 60, "sun": "root"}, key)
    assert v.verify(root, users[1]).user == users[1]


def test_key_with_loose_permissions_is_refused(keyfile):
    os.chmod(keyfile, 0o644)
    with pytest.raises(AuthFailure, match="permissions"):
        JwtVerifier(keyfile).key()


def test_translate_job_desc():
    who = Identity("root", 0, 0)
    req, env, warns = translate_job({
        "name": "x", "partition": "gpu", "time_limit": {"set": True, "infinite": False, "number": 5},
        "nodes": "2-3", "tasks": 4, "tres_per_node": "gres/gpu:2", "memory_per_node": 1000,
        "current_working_directory": "/tmp", "environment": ["A=1", "B=2"], "hold": True,
        "unknown_field": 1}, who)
    assert req["name"] == "x" and req["time_limit"] == 5 and req["nodes_min"] == 2
    assert req["nodes_max"] == 3 and req["ntasks"] == 4 and req["mem_per_node"] == 1000
    assert req["gres"] == [{"name": "gpu", "type": None, "count": 2}]
    assert req["work_dir"] == "/tmp" and req["hold"] is True
    assert env["A"] == "1" and "PATH" in env
    assert warns and "unknown_field" in warns[0]["warning"]
    req, _, _ = translate_job({"time_limit": {"set": True, "infinite": True, "number": 0},
                               "tres_per_node": "gres:gpu:a100:1"}, who)
    assert req["time_limit"] == -1 and req["gres"] == [{"name": "gpu", "type": "a100", "count": 1}]
    with pytest.raises(ApiError):
        translate_job({"tasks": "four"}, who)
    with pytest.raises(ApiError):
        translate_job({"current_working_directory": "relative"}, who)


def test_openapi_document_covers_every_route_and_is_valid():
    import jsonschema
    doc = document()
    assert doc["openapi"].startswith("3.1")
    jsonschema.Draft202012Validator.check_schema({"$defs": doc["components"]["schemas"]})
    app = build_app(Api(client=None, verifier=None, cluster="c"))
    routes = set()
    for r in app.routes:
        for m in getattr(r, "methods", None) or ():
            if m != "HEAD" and r.path not in ("/", "/openapi/v3"):
                routes.add((r.path, m.lower()))
    documented = {(p, m) for p, ops in doc["paths"].items() for m in ops}
    assert routes == documented
    ids = [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))
