"""scancel: cancel or signal jobs."""

from __future__ import annotations

import os
import sys

from muster.cli.client import call, run_main
from muster.cli.getopt import REQUIRED, CliExit, GetoptParser, OptSpec

PARSER = GetoptParser("scancel", [
    OptSpec("A", "account", REQUIRED), OptSpec("b", "batch"), OptSpec("f", "full"),
    OptSpec("h", "help"), OptSpec("i", "interactive"), OptSpec("M", "clusters", REQUIRED),
    OptSpec("n", ("name", "jobname"), REQUIRED), OptSpec(None, "me"),
    OptSpec("p", "partition", REQUIRED), OptSpec("q", "qos", REQUIRED), OptSpec("Q", "quiet"),
    OptSpec("R", "reservation", REQUIRED), OptSpec("s", "signal", REQUIRED),
    OptSpec("t", "state", REQUIRED), OptSpec("u", "user", REQUIRED), OptSpec(None, "usage"),
    OptSpec("v", "verbose", action="count"), OptSpec("V", "version"),
    OptSpec("w", "nodelist", REQUIRED), OptSpec(None, "wckey", REQUIRED),
    OptSpec("H", "hurry"), OptSpec(None, "sibling", REQUIRED),
], exit_code=1, info="first")

_STATES = {"PD": "PENDING", "PENDING": "PENDING", "R": "RUNNING", "RUNNING": "RUNNING",
           "S": "SUSPENDED", "SUSPENDED": "SUSPENDED"}


def parse_signal(s: str) -> int:
    import signal as sigmod
    t = s.upper()
    if t.isdigit():
        n = int(t)
        if 0 < n < 65:
            return n
    else:
        name = t if t.startswith("SIG") else "SIG" + t
        num = getattr(sigmod, name, None)
        if num is not None and (isinstance(num, int) or hasattr(num, "value")):
            return int(num)
    raise CliExit([f"scancel: error: Invalid job signal: {s}"], 1)


# Slurm's error numbers (slurm_errno.h) of the refusals scancel reports: it keeps the largest
# it met and exit()s with it, so the shell sees the low 8 bits (ESLURM_ACCESS_DENIED 2002 →
# 210, ESLURM_INVALID_JOB_ID 2017 → 225); its own "no such job" check counts 1.
_ERRNO = {"access_denied": 2002, "invalid_user": 2010, "invalid_job_id": 2017,
          "already_done": 2021}
_MAX_ID = 2**32 - 1
_NOT_FEDERATED = 2239  # ESLURM_NOT_FED: --sibling names a job that is no federated job


def _no_sibling(jobs: list[dict], steps: list[dict]) -> int:
    """``--sibling=cluster``: remove a federated job's sibling. Muster has no federation, so
    no job has siblings: each named job is refused as Slurm refuses a job of a cluster that
    is in no federation (nothing is cancelled)."""
    for ref in jobs + steps:
        sys.stderr.write(f"scancel: error: Kill job error on job id {ref['job_id']}: "
                         "Not a valid federated job\n")
    return _NOT_FEDERATED


def _num(text: str) -> bool:
    return text.isascii() and text.isdigit()


def parse_ids(operands: list[str]) -> tuple[list[dict], list[dict]]:
    """``job[_task][.step]`` operands (comma or space separated) → (jobs, steps): each a
    ``{"job_id", "task"}`` reference, steps with ``"step_id"`` too."""
    jobs, steps = [], []
    for tok in operands:
        for part in tok.replace(" ", ",").split(","):
            if not part:
                continue
            base, dot, step = part.partition(".")
            jid, _, task = base.partition("_")
            if not _num(jid) or (task and not _num(task)) or (dot and not (
                    _num(step) and max(int(jid), int(task or 0), int(step)) <= _MAX_ID)):
                raise CliExit([f"scancel: error: Invalid job id {part}"], 1)
            ref = {"job_id": int(jid), "task": int(task) if task else None}
            if dot:
                steps.append({**ref, "step_id": int(step)})
            else:
                jobs.append(ref)
    return jobs, steps


def _filters(opts: dict, env) -> dict:
    filters: dict = {}
    user = opts.get("user") or env.get("SCANCEL_USER")
    if opts.get("me"):
        filters["uid"] = os.getuid()
    elif user:
        import pwd
        try:
            filters["uid"] = int(user) if user.isdigit() else pwd.getpwnam(user).pw_uid
        except KeyError:
            raise CliExit([f"scancel: error: Invalid user name: {user}"], 1) from None
    for key, opt, envk in (("name", "name", "SCANCEL_NAME"), ("partition", "partition", "SCANCEL_PARTITION"),
                           ("account", "account", "SCANCEL_ACCOUNT"), ("qos", "qos", "SCANCEL_QOS")):
        v = opts.get(opt) or env.get(envk)
        if v:
            filters[key] = v
    st = opts.get("state") or env.get("SCANCEL_STATE")
    if st:
        states = []
        for s in st.split(","):
            if s.upper() not in _STATES:
                raise CliExit([f"scancel: error: Invalid job state specified: {s}"], 1)
            states.append(_STATES[s.upper()])
        filters["states"] = states
    if opts.get("nodelist"):
        from muster.common.hostlist import expand
        filters["nodes"] = expand(opts["nodelist"])
    return filters


def _cancel_steps(steps: list[dict], sig: int | None, filters: dict, verbose, quiet) -> int:
    """``J[_T].S``: those steps alone (``-b``/``-f`` are not sent: they never widen a step id
    to its job). Messages and exit codes as Slurm's scancel (controller.stepkill): a job it
    cannot find is its own check (exit 1, silent with ``-Q``); the controller's refusals
    exit with Slurm's error number; a step already ending counts only for a signal."""
    msg: dict = {"op": "cancel", "signal": sig, "steps": steps}
    if filters:
        msg["filters"] = filters
    reply = call(msg)
    rc = 0
    for err in reply.get("errors", []):
        code = err["code"]
        line = f"scancel: error: Kill job error on job step id {err['step']}: {err['error']}\n"
        if code == "invalid_job_id" and not err.get("job_found"):
            rc = max(rc, 1)
            if quiet:
                continue
        elif code == "already_done":
            rc = rc if sig in (None, 9) else max(rc, _ERRNO[code])
            if not verbose:
                continue
        else:
            rc = max(rc, _ERRNO.get(code, 1))
        sys.stderr.write(line)
    return rc


def _cancel_jobs(jobs: list[dict], sig: int | None, filters: dict, opts: dict, env) -> int:
    scope = "full" if opts.get("full") or env.get("SCANCEL_FULL") else (
        "batch" if opts.get("batch") or env.get("SCANCEL_BATCH") else None)
    msg: dict = {"op": "cancel", "signal": sig, "scope": scope}
    if jobs:
        msg["jobs"] = jobs
    if filters:
        msg["filters"] = filters
    verbose = opts.get("verbose") or env.get("SCANCEL_VERBOSE")
    from muster.common.errors import InvalidJobId
    code = 0
    try:
        reply = call(msg)
    except InvalidJobId as exc:
        if verbose or sig is not None:
            sys.stderr.write(f"scancel: error: Kill job error on job id: {exc.message}\n")
            return 1 if sig is not None else 0
        # Slurm: unknown or finished job ids are silently ignored; retry without them
        if len(jobs) > 1:
            for j in jobs:
                try:
                    call({**msg, "jobs": [j]})
                except InvalidJobId:
                    pass
        return 0
    for err in reply.get("errors", []):
        if err["code"] == "access_denied":
            sys.stderr.write(f"scancel: error: Kill job error on job id {err['job']}: {err['error']}\n")
            code = max(code, _ERRNO["access_denied"])
        elif verbose or sig is not None:
            sys.stderr.write(f"scancel: error: Kill job error on job id {err['job']}: {err['error']}\n")
            code = code or 1
    if filters and not jobs and not reply.get("done") and not reply.get("errors") and not opts.get("quiet"):
        desc = ", ".join(f"{k}={v}" for k, v in filters.items())
        sys.stderr.write(f"scancel: error: No active jobs match ALL job filters, including: {desc}\n")
    return code


def _main() -> int:
    opts, operands = PARSER.parse_into(sys.argv[1:])
    env = os.environ
    jobs, steps = parse_ids(operands)
    filters = _filters(opts, env)
    if not jobs and not steps and not filters:
        raise CliExit(["scancel: error: No job identification provided"], 1)
    if opts.get("sibling"):
        if not jobs and not steps:
            raise CliExit(["scancel: error: No job identification provided"], 1)
        return _no_sibling(jobs, steps) & 0xFF
    sig = parse_signal(opts["signal"]) if opts.get("signal") else None
    rc = 0
    if steps:
        rc = _cancel_steps(steps, sig, filters, opts.get("verbose") or env.get("SCANCEL_VERBOSE"),
                           opts.get("quiet"))
    if jobs or not steps:  # filters alone select jobs; with step ids they only narrow them
        rc = max(rc, _cancel_jobs(jobs, sig, filters, opts, env))
    return rc & 0xFF


def main() -> None:
    run_main("scancel", _main)


if __name__ == "__main__":
    main()
