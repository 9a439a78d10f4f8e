"""``--nice`` orders jobs under Slurm 23.11's default priority (multifactor, every weight 0).

There every job's priority is 1 (``0 − nice`` floored at 1), so Slurm itself would run A, B,
C in submission order whatever B's nice; Muster breaks the priority tie by nice
(docs/design.md, "Priority and nice"). On a one-CPU node kept busy, A, then B with nice
100, then C are queued; they run A, C, B — set at submission or by ``scontrol update``.
Each job appends its name to a file when it runs, so the order is the processes' own.
"""

import os
import time

import pytest

from cluster import private_cluster, wait_for


@pytest.fixture(scope="module")
def c():
    with private_cluster("muster-nice-", nodes=1, gpus=0, cpus=1) as cl:
        yield cl


def field(c, jid: int, fmt: str) -> str:
    return c.run(["squeue", "-h", "-j", str(jid), "-o", fmt]).out.strip()


def _busy(c, d: str) -> int:
    """A job holding the only CPU until ``d/go`` exists."""
    jid = c.sbatch("-J", "busy", "-t", "1", "--wrap",
                   f"while [ ! -e {d}/go ]; do sleep 0.1; done", cwd=d)
    c.wait_state(jid, "RUNNING", timeout=60)
    return jid


def _queue(c, d: str, nice_b: bool) -> dict[str, int]:
    jobs = {}
    for name in "ABC":
        opts = ["--nice=100"] if nice_b and name == "B" else []
        jobs[name] = c.sbatch("-J", name, "-t", "1", *opts, "--wrap",
                              f"echo {name} >> {d}/order", cwd=d)
    wait_for(lambda: all(field(c, j, "%t") == "PD" for j in jobs.values()), timeout=60,
             what="A, B, C pending")
    return jobs


def _run_and_read_order(c, d: str, busy: int, jobs: dict[str, int]) -> list[str]:
    """Free the CPU; the names in the order the jobs ran."""
    open(os.path.join(d, "go"), "w").close()
    assert c.wait_done(busy, timeout=60) == "COMPLETED"
    for j in jobs.values():
        assert c.wait_done(j, timeout=90) == "COMPLETED"
    with open(os.path.join(d, "order")) as fh:
        return fh.read().split()


def _expected_starts(c, jobs: dict[str, int]) -> dict[str, str]:
    """squeue --start's expected start of each pending job (backfill plans them all)."""
    def got():
        s = {n: field(c, j, "%S") for n, j in jobs.items()}
        return s if all(v not in ("", "N/A") for v in s.values()) else None
    return wait_for(got, timeout=60, what="expected starts of A, B, C")


def _in_order(s: dict[str, str]) -> bool:
    return s["A"] < s["C"] < s["B"]


def _settled_starts(c, jobs: dict[str, int], timeout: float = 30) -> dict[str, str]:
    """The expected starts once in the order A, C, B (a scheduler pass after a change
    re-plans them), or the last seen when ``timeout`` passes first."""
    deadline = time.monotonic() + timeout
    while True:
        s = _expected_starts(c, jobs)
        if _in_order(s) or time.monotonic() > deadline:
            return s
        time.sleep(0.2)


def test_nice_at_submission_orders_the_queue(c):
    d = os.path.join(c.workdir, "submit")
    os.makedirs(d)
    busy = _busy(c, d)
    try:
        jobs = _queue(c, d, nice_b=True)
        # the displayed priority stays Slurm's: 1 for all three (the floor swallows the nice)
        assert {n: field(c, j, "%Q") for n, j in jobs.items()} == {"A": "1", "B": "1", "C": "1"}
        assert field(c, jobs["B"], "%y") == "100"
        starts = _settled_starts(c, jobs)
    finally:
        open(os.path.join(d, "go"), "w").close()
    assert _run_and_read_order(c, d, busy, jobs) == ["A", "C", "B"]
    assert _in_order(starts), starts  # squeue --start followed the same order


def test_nice_set_by_scontrol_update_orders_the_queue(c):
    d = os.path.join(c.workdir, "update")
    os.makedirs(d)
    busy = _busy(c, d)
    try:
        jobs = _queue(c, d, nice_b=False)
        c.ok("scontrol", "update", f"jobid={jobs['B']}", "Nice=100")
        wait_for(lambda: field(c, jobs["B"], "%y") == "100", timeout=30, what="B's nice is 100")
        starts = _settled_starts(c, jobs)
    finally:
        open(os.path.join(d, "go"), "w").close()
    assert _run_and_read_order(c, d, busy, jobs) == ["A", "C", "B"]
    assert _in_order(starts), starts
