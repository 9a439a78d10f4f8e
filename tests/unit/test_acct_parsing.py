"""Parsing parts of the accounting/reservation commands (no controller needed)."""

import pytest

from muster.cli.sacctmgr import _cell, parse_command, render
from muster.cli.scontrol import parse_reservation
from muster.controller.accounts import parse_tres, tres_str


def test_sacctmgr_command_words():
    cmd = parse_command(["modify", "user", "where", "name=alice", "account=a", "set",
                         "QOS+=high", "MaxJobs=-1", "format=user"])
    assert cmd["action"] == "modify" and cmd["entity"] == "user"
    assert cmd["names"] == ["alice"]
    assert cmd["where"] == [["account", "=", "a"]]
    assert cmd["set"] == [["QOS", "+=", "high"], ["MaxJobs", "=", "-1"]]
    assert cmd["format"] == "user"
    add = parse_command(["create", "account", "research", "Fairshare=60", "Parent=root"])
    assert add["action"] == "add" and add["names"] == ["research"]
    assert add["set"] == [["Fairshare", "=", "60"], ["Parent", "=", "root"]]
    assert parse_command(["list", "associations"])["entity"] == "assoc"
    with pytest.raises(ValueError):
        parse_command(["frobnicate", "user"])
    with pytest.raises(ValueError):
        parse_command(["show", "widgets"])


def test_sacctmgr_layout():
    assert _cell("benchcluster", 10, False) == "benchclus+"
    out = render([{"cluster": "c", "account": "root"}],
                 [("Cluster", 10, "cluster", False), ("Account", 10, "account", False)],
                 True, None).splitlines()
    assert out == ["   Cluster    Account ", "---------- ---------- ", "         c       root "]
    assert render([{"a": "x"}], [("A", 5, "a", False)], True, "p") == "A|\nx|\n"
    assert render([{"a": "x"}], [("A", 5, "a", False)], False, "P") == "x\n"


def test_tres_strings():
    assert parse_tres("cpu=4,mem=2G,gres/gpu=8") == {"cpu": 4, "mem": 2048, "gres/gpu": 8}
    assert parse_tres("gres/gpu=-1") == {"gres/gpu": -1}
    assert tres_str({"gres/gpu": 2, "cpu": 4, "mem": 1024}) == "cpu=4,mem=1G,gres/gpu=2"
    with pytest.raises(ValueError):
        parse_tres("cpu")


def test_reservation_spec():
    spec = parse_reservation(["ReservationName=r", "StartTime=now", "Duration=1:00:00",
                              "Users=a,b", "NodeCnt=2", "TRES=gres/gpu:8", "Flags=MAINT"], 100)
    assert spec == {"name": "r", "start": 100, "duration": 60, "users": ["a", "b"],
                    "node_cnt": 2, "tres": {"gres/gpu": 8}, "flags": ["MAINT"]}
    assert parse_reservation(["Nodes=node[1-2]"], 0)["nodes"] == ["node1", "node2"]
    assert parse_reservation(["Flags-=MAINT"], 0)["flags_op"] == "-"
    with pytest.raises(ValueError):
        parse_reservation(["Bogus=1"], 0)
