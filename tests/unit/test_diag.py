"""Pure logic of the operations tools (issue 16): Slurm's debug levels and flags
(muster.common.logsetup), the reopening log handler, sdiag's counters (muster.controller.diag)
and their cost on the request path. The daemons themselves: tests/e2e/test_operations.py."""

from __future__ import annotations

import logging
import os
import time
from types import SimpleNamespace

import pytest

from muster.common import logsetup
from muster.controller import ops  # noqa: F401 - registers the operations diag looks up
from muster.controller.diag import Diag


@pytest.mark.parametrize("text,level", [
    ("quiet", 0), ("FATAL", 1), ("error", 2), ("info", 3), ("Verbose", 4), ("debug", 5),
    ("debug2", 6), ("debug5", 9), ("0", 0), ("9", 9), (" 7 ", 7),
    ("10", None), ("debug6", None), ("-1", None), ("", None), ("deb", None),
])
def test_levels_are_slurms(text, level):
    assert logsetup.parse_level(text) == level


def test_python_levels_keep_slurms_order():
    py = [logsetup.py_level(n) for n in range(10)]
    assert py == sorted(py, reverse=True) and len(set(py)) == 10
    assert py[3] == logging.INFO and py[5] == logging.DEBUG and py[0] > logging.CRITICAL
    assert [logsetup.level_name(p) for p in py] == list(logsetup.LEVEL_NAMES)
    assert logging.getLevelName(py[6]) == "DEBUG2"


def test_flags_are_case_insensitive_and_canonical():
    assert logsetup.flag_name("backfill") == "Backfill"
    assert logsetup.flag_name("TRACEJOBS") == "TraceJobs"
    assert logsetup.flag_name("Bogus") is None and logsetup.flag_name("+Steps") is None
    assert logsetup.parse_flags("steps,Bogus,PROTOCOL,steps") == ["Steps", "Protocol"]


def test_log_control_sets_only_its_daemons_loggers():
    root_before = logging.getLogger().level
    lc = logsetup.LogControl("musterunit", level=2, flags=["Backfill"])
    try:
        assert logging.getLogger("musterunit").level == logging.ERROR
        bf, pr = lc.logger("Backfill"), lc.logger("Priority")
        assert bf.isEnabledFor(logsetup.py_level(9))  # a flag lets all of it through
        assert not pr.isEnabledFor(logging.INFO)  # the others follow the daemon's level
        lc.change_flags(["Priority"], ["Backfill"])
        assert lc.flags == ["Priority"] and lc.flags_text() == "Priority"
        assert pr.isEnabledFor(logging.DEBUG) and not bf.isEnabledFor(logging.INFO)
        lc.set_level(5)
        assert bf.isEnabledFor(logging.DEBUG) and lc.level_text() == "debug"
        lc.set_flags([])
        assert lc.flags_text() == "(null)"
        assert logging.getLogger().level == root_before  # the root logger is left alone
    finally:
        lc.set_flags([])
        logging.getLogger("musterunit").setLevel(logging.NOTSET)


def _handler(path: str) -> tuple[logging.Logger, logsetup.ReopeningFileHandler]:
    h = logsetup.ReopeningFileHandler(path)
    h.setFormatter(logging.Formatter("%(message)s"))
    lg = logging.getLogger(f"reopen-test-{path}")
    lg.propagate = False
    lg.setLevel(logging.INFO)
    lg.addHandler(h)
    return lg, h


def test_reopen_after_rename_splits_the_records(tmp_path):
    path = str(tmp_path / "d.log")
    lg, h = _handler(path)
    try:
        lg.info("one")
        os.rename(path, path + ".1")
        lg.info("two")  # still the renamed file: nothing asked for a reopen yet
        h.request_reopen()
        lg.info("three")
        assert open(path + ".1").read() == "one\ntwo\n"
        assert open(path).read() == "three\n"
    finally:
        h.close()


def test_a_reopen_requested_inside_a_write_waits_for_it(tmp_path):
    """The signal may arrive while a record is being written (here: from its formatter, as
    a signal handler would run mid-emit). The record goes whole to the old file; the reopen
    happens right after it."""
    path = str(tmp_path / "d.log")
    lg, h = _handler(path)

    class Interrupting(logging.Formatter):
        def format(self, record):
            if record.getMessage() == "interrupted":
                os.rename(path, path + ".1")
                h.request_reopen()
                lg.info("nested")  # the signal handler's own record
            return super().format(record)

    h.setFormatter(Interrupting("%(message)s"))
    try:
        lg.info("before")
        lg.info("interrupted")
        lg.info("after")
        assert open(path + ".1").read() == "before\nnested\ninterrupted\n"
        assert open(path).read() == "after\n"
    finally:
        h.close()


def _diag() -> Diag:
    ctl = SimpleNamespace(cfg=SimpleNamespace(raw={"SlurmctldDebug": "info"}), owner_uid=0)
    return Diag(ctl)


def test_rpcs_are_counted_by_type_and_user_and_unknown_ops_stay_bounded():
    d = _diag()
    d.rpc("submit", 1000, 0.002)
    d.rpc("submit", 1001, 0.004)
    d.rpc("jobs", 1000, 0.001)
    for junk in ("no_such_op", ["a"], {"x": 1}, None, "x" * 10_000):
        d.rpc(junk, 1002, 0.0)
    rep = d.report()
    types = {r[0]: r[1:] for r in rep["rpc_types"]}
    assert types["REQUEST_SUBMIT_BATCH_JOB"] == [4003, 2, 6000]
    assert types["REQUEST_JOB_INFO"] == [2003, 1, 1000]
    assert types["MUSTER_UNKNOWN"] == [0, 5, 0]
    assert sorted(rep["rpc_users"]) == [[1000, 2, 3000], [1001, 1, 4000], [1002, 5, 0]]
    assert len(d.by_op) == 3


def test_cycles_and_reset():
    d = _diag()
    start = SimpleNamespace(scheduler="Backfill")
    plan = SimpleNamespace(starts=(start, SimpleNamespace(scheduler="Main")), priorities={},
                           expected_start={})
    d.cycle(0.001, 3, plan, True, 100)
    d.cycle(0.003, 1, plan, False, 101)
    assert d.main == [3000, 3000, 2, 4000, 4, 1]
    assert d.bf[:4] == [1, 1, 100, 1000] and d.bf_since_start == 1
    d.jobs["submitted"] = 5
    d.reset(200)
    assert d.main == [0] * 6 and d.bf == [0] * 8 and d.jobs["submitted"] == 0
    assert d.bf_since_start == 1  # "since last slurm start" outlives a reset
    assert d.since == 200 and d.by_op == {} and d.by_uid == {}


def test_counting_an_rpc_costs_well_under_a_microsecond_or_so():
    """The request path pays for sdiag on every RPC. Measured on the 2-core CI machine:
    about 0.2-0.3 us per call; the bound is loose (a busy machine), it catches a regression
    such as a log call or an allocation per request, not noise."""
    d = _diag()
    n = 50_000
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            d.rpc("jobs", 1000, 0.0001, None)
        best = min(best, (time.perf_counter() - t0) / n)
    assert best < 3e-6, f"{best * 1e9:.0f} ns per RPC"
