"""sbatch: submit a batch script."""

from __future__ import annotations

import os
import sys
import time

from muster.cli.client import call, exit_error, run_main
from muster.cli.getopt import CliExit

# controller refusal code -> (client-side pre-check line or None)
_PRELINES = {"invalid_partition": "invalid partition specified: {partition}"}
_BARE = {"invalid_gres"}  # Slurm checks GRES names client-side: no "submission failed" prefix
# Refusals sbatch waits out (sbatch.c): the controller is full (MaxJobCount, EAGAIN). The
# first retry is announced, the next ones are silent; sleep 1, 2, ... 15 s, then give up.
_RETRY = {"eagain": "Slurm temporarily unable to accept job, sleeping and retrying"}
MAX_RETRIES = 15


def submit_with_retries(call, msg: dict, warn, sleep=time.sleep) -> dict:
    """``call(msg)`` until it is not refused with a retryable code, as sbatch does: at most
    MAX_RETRIES retries, waiting 1, 2, ... seconds; the last refusal is raised."""
    from muster.common.errors import RequestError
    retries = 0
    while True:
        try:
            return call(msg)
        except RequestError as exc:
            text = _RETRY.get(exc.code)
            if text is None or retries >= MAX_RETRIES:
                raise
            if retries == 0:
                warn(f"sbatch: error: {text}")
            retries += 1
            sleep(retries)


def _main() -> int:
    from muster.cli.jobopts import parse_sbatch
    from muster.common.errors import RequestError
    inv = parse_sbatch(sys.argv[1:], dict(os.environ), sys.stdin.buffer, os.getcwd(),
                       int(time.time()))
    for w in inv.warnings:
        sys.stderr.write(w + "\n")
    try:
        reply = submit_with_retries(
            call, {"op": "submit", "job": inv.request, "script": inv.script, "env": inv.env},
            lambda line: (sys.stderr.write(line + "\n"), sys.stderr.flush()))
    except RequestError as exc:
        lines = []
        pre = _PRELINES.get(exc.code)
        if pre:
            lines.append("sbatch: error: " + pre.format(**{k: v or "" for k, v in inv.request.items()
                                                           if isinstance(v, (str, type(None)))}))
        detail = getattr(exc, "detail", None)
        if detail:
            lines.append(f"sbatch: error: {detail}")
        if exc.code in _BARE:
            lines.append(f"sbatch: error: {exc.message}")
        else:
            lines.append(f"sbatch: error: Batch job submission failed: {exc.message}")
        raise CliExit(lines, exit_error()) from None
    job_id = reply["job_id"]
    if inv.parsable:
        print(job_id)
    elif not inv.quiet:
        print(f"Submitted batch job {job_id}")
    sys.stdout.flush()
    if inv.wait:
        return _wait(job_id)
    return 0


def _wait(job_id: int) -> int:
    """-W: block until the job (every task of an array) ends; exit with its exit code."""
    delay = 0.05
    while True:
        recs = call({"op": "acct", "job_ids": [job_id], "all_users": True})["jobs"]
        if recs and all(r["state"] not in ("PENDING", "RUNNING") and not r.get("completing")
                        for r in recs) and not any(r.get("array_task_str") and r["state"] == "PENDING"
                                                   for r in recs):
            code = 0
            for r in recs:
                if r.get("exit_signal"):
                    code = max(code, 1)
                else:
                    code = max(code, r.get("exit_code") or 0)
                if r["state"] in ("CANCELLED", "NODE_FAIL", "TIMEOUT") and not code:
                    code = 1 if r["state"] != "TIMEOUT" else 0
            return code
        time.sleep(delay)
        delay = min(delay * 1.5, 1.0)


def main() -> None:
    run_main("sbatch", _main)


if __name__ == "__main__":
    main()
