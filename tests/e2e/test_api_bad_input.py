"""REST API bad input: malformed JSON, wrong types, oversized bodies → 4xx with a clear message,
and the service (and every earlier job) is unharmed."""

import urllib.error
import urllib.request

import pytest

from api_helpers import call, restd_info, token

pytest.importorskip("jwt")

S = "/slurm/v0.0.40"


def raw_post(cluster, path, data: bytes, tok, content_type="application/json"):
    req = urllib.request.Request(restd_info(cluster)["url"] + path, data=data, method="POST",
                                 headers={"Content-Type": content_type, "X-SLURM-USER-TOKEN": tok})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


GOOD = {"script": "#!/bin/sh\ntrue\n", "job": {"name": "ok", "current_working_directory": "/tmp"}}


@pytest.mark.parametrize("body,needle", [
    (b"{not json", "must be JSON"),
    (b"[1, 2, 3]", "must be a JSON object"),
    (b'{"script": 5, "job": {}}', "script"),
    (b'{"script": "#!/bin/sh\\n", "job": {"tasks": "four"}}', "tasks must be an integer"),
    (b'{"script": "#!/bin/sh\\n", "job": {"name": ["x"]}}', "name must be a string"),
    (b'{"script": "#!/bin/sh\\n", "job": {"hold": "yes"}}', "hold must be true or false"),
    (b'{"script": "#!/bin/sh\\n", "job": {"nodes": "two"}}', "Invalid nodes"),
    (b'{"script": "#!/bin/sh\\n", "job": {"environment": 7}}', "environment"),
    (b'{"script": "no shebang", "job": {}}', "does not look like a batch script"),
    (b'{"script": "#!/bin/sh\\n", "job": {"partition": "nosuch"}}', "Invalid partition"),
    (b'{"script": "#!/bin/sh\\n", "job": {"current_working_directory": "relative"}}', "absolute"),
    (b'{"script": "#!/bin/sh\\n", "job": {"tres_per_node": "gres/gpu:99"}}',
     "Requested node configuration is not available"),
])
def test_bad_submissions_are_4xx_with_a_clear_message(cluster, body, needle):
    tok = token(cluster)
    status, text = raw_post(cluster, f"{S}/job/submit", body, tok)
    assert 400 <= status < 500, (status, text)
    assert needle in text, text
    assert "Traceback" not in text


def test_oversized_body_is_413_and_service_survives(cluster):
    tok = token(cluster)
    before_status, before = call(cluster, "POST", f"{S}/job/submit", tok, GOOD)
    assert before_status == 200, before
    # declare a 17 MiB body and start sending it: the answer comes before it is read
    import socket
    import urllib.parse
    url = urllib.parse.urlparse(restd_info(cluster)["url"])
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        sock.sendall((f"POST {S}/job/submit HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      f"X-SLURM-USER-TOKEN: {tok}\r\nContent-Length: {17 * 1024 * 1024}\r\n\r\n"
                      ).encode() + b'{"script": "' + b"x" * 65536)
        reply = b""
        while b"\r\n\r\n" not in reply or b"too large" not in reply:
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b"too large" in reply
    # still answering, and the earlier job is intact
    s, b = call(cluster, "GET", f"{S}/job/{before['job_id']}", tok)
    assert s == 200 and b["jobs"][0]["job_id"] == before["job_id"]
    assert call(cluster, "GET", f"{S}/ping", tok)[0] == 200
