"""The CLI client rides through a controller restart (issue 16): it retries a refused or
dropped connection within its budget, tries each controller socket in turn, and sends a
changing request with the same request id every time. A plain socket server stands in for
the controller (the wire is the real framing)."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from muster.cli import client
from muster.common import wire
from muster.common.errors import TransportError


class FlakyServer:
    """Serves ``path``: the first ``drop`` connections read the request and close without a
    reply (a controller killed mid-request); later ones answer ``{"ok": true, "n": k}``."""

    def __init__(self, path: str, drop: int):
        self.path, self.drop = path, drop
        self.seen: list[dict] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(16)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                msg = wire.recv_frame(conn)
                self.seen.append(msg)
                if len(self.seen) > self.drop:
                    wire.send_frame(conn, {"ok": True, "n": len(self.seen)})

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def sockdir(tmp_path, monkeypatch):
    monkeypatch.setenv("MUSTER_CLIENT_RETRY", "10")
    return tmp_path


def test_dropped_request_is_resent_with_the_same_id(sockdir, monkeypatch):
    path = str(sockdir / "ctl.sock")
    srv = FlakyServer(path, drop=2)
    monkeypatch.setenv("MUSTER_SOCKET", path)
    try:
        reply = client.call({"op": "cancel", "jobs": [{"job_id": 1}]})
    finally:
        srv.close()
    assert reply["n"] == 3
    rids = {m.get("rid") for m in srv.seen}
    assert len(srv.seen) == 3 and len(rids) == 1 and None not in rids


def test_reads_carry_no_request_id(sockdir, monkeypatch):
    path = str(sockdir / "ctl.sock")
    srv = FlakyServer(path, drop=1)
    monkeypatch.setenv("MUSTER_SOCKET", path)
    try:
        assert client.call({"op": "jobs"})["n"] == 2
    finally:
        srv.close()
    assert all("rid" not in m for m in srv.seen)


def test_controller_that_comes_back_later_is_reached(sockdir, monkeypatch):
    path = str(sockdir / "ctl.sock")
    monkeypatch.setenv("MUSTER_SOCKET", path)
    started: list[FlakyServer] = []
    timer = threading.Timer(0.6, lambda: started.append(FlakyServer(path, drop=0)))
    timer.start()  # nothing listens for 0.6 s: the restart
    t0 = time.monotonic()
    try:
        reply = client.call({"op": "submit", "job": {}})
    finally:
        timer.join()
        for s in started:
            s.close()
    assert reply["ok"] and time.monotonic() - t0 >= 0.5


def test_second_controller_socket_is_tried(sockdir, monkeypatch):
    dead, live = str(sockdir / "a.sock"), str(sockdir / "b.sock")
    srv = FlakyServer(live, drop=0)
    monkeypatch.setenv("MUSTER_SOCKET", os.pathsep.join([dead, live]))
    try:
        assert client.call({"op": "jobs"})["ok"]
    finally:
        srv.close()


def test_gives_up_after_the_budget_with_slurms_error(sockdir, monkeypatch):
    monkeypatch.setenv("MUSTER_SOCKET", str(sockdir / "none.sock"))
    monkeypatch.setenv("MUSTER_CLIENT_RETRY", "0.5")
    t0 = time.monotonic()
    with pytest.raises(TransportError) as err:
        client.call({"op": "jobs"})
    took = time.monotonic() - t0
    assert 0.3 <= took < 3
    assert err.value.message == "Unable to contact slurm controller (connect failure)"


def test_ping_is_a_single_probe(sockdir, monkeypatch):
    monkeypatch.setenv("MUSTER_SOCKET", str(sockdir / "none.sock"))
    t0 = time.monotonic()
    with pytest.raises(TransportError):
        client.call({"op": "ping"})
    assert time.monotonic() - t0 < 0.5


def test_budget_from_config_and_environment(tmp_path, monkeypatch):
    conf = tmp_path / "slurm.conf"
    conf.write_text("SlurmctldHost=x\nMusterClientRetry=7  # seconds\n")
    monkeypatch.setenv("MUSTER_CONF", str(conf))
    monkeypatch.delenv("MUSTER_CLIENT_RETRY", raising=False)
    assert client.retry_budget() == 7
    monkeypatch.setenv("MUSTER_CLIENT_RETRY", "2.5")
    assert client.retry_budget() == 2.5
    monkeypatch.setenv("MUSTER_CLIENT_RETRY", "soon")
    assert client.retry_budget() == client.RETRY_DEFAULT
