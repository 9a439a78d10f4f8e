"""Helpers for the REST API and dashboard tests: musterrestd's URL, tokens, HTTP calls."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request

import pytest

TOKEN_CODE = ("import json,sys; from muster.cli import client; "
              "msg={'op':'token'}; msg.update(json.loads(sys.argv[1])); "
              "print(client.call(msg)['token'])")


def restd_info(cluster) -> dict:
    path = os.path.join(cluster.state_dir, "musterrestd.json")
    if not os.path.exists(path):
        pytest.fail("musterrestd did not start with `muster up` (api extra missing? "
                    "run scripts/install-browser.sh)")
    with open(path) as fh:
        return json.load(fh)


def token(cluster, user: str | None = None, **kw) -> str:
    """A token minted by the controller for the calling user (as `scontrol token` does)."""
    r = cluster.run([sys.executable, "-c", TOKEN_CODE, json.dumps(kw)], user=user)
    assert r.rc == 0, r
    return r.out.strip()


def call(cluster, method: str, path: str, tok: str | None = None, body=None,
         headers: dict | None = None, raw: bool = False):
    url = restd_info(cluster)["url"] + path
    h = {"Content-Type": "application/json"}
    if tok:
        h["X-SLURM-USER-TOKEN"] = tok
    h.update(headers or {})
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, payload, ctype = r.status, r.read(), r.headers.get("content-type", "")
    except urllib.error.HTTPError as e:
        status, payload, ctype = e.code, e.read(), e.headers.get("content-type", "")
    if raw or not ctype.startswith("application/json"):
        return status, payload.decode()
    return status, json.loads(payload)


def wait_api_state(cluster, tok, jid, states, timeout=30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        s, b = call(cluster, "GET", f"/slurmdb/v0.0.40/job/{jid}", tok)
        if s == 200 and b["jobs"] and b["jobs"][0]["state"]["current"][0] in states:
            return b["jobs"][0]
        if time.monotonic() > deadline:
            raise AssertionError(f"job {jid} not in {states}: {s} {b}")
        time.sleep(0.2)
