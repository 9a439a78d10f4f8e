"""sacct: accounting records of jobs and steps, from the controller's store."""

from __future__ import annotations

import os
import sys
import time

from muster.cli.client import call, run_main
from muster.cli.getopt import REQUIRED, CliExit, GetoptParser, OptSpec

PARSER = GetoptParser("sacct", [
    OptSpec("a", ("allusers", "all-users")), OptSpec("A", ("accounts", "account"), REQUIRED),
    OptSpec("b", "brief"), OptSpec("D", "duplicates"), OptSpec("E", ("endtime", "end"), REQUIRED),
    OptSpec("e", "helpformat"), OptSpec("h", "help"),
    OptSpec("j", ("jobs", "job"), REQUIRED, action="append"),
    OptSpec("l", "long"), OptSpec("n", "noheader"), OptSpec("N", "nodelist", REQUIRED),
    OptSpec("o", "format", REQUIRED), OptSpec("p", "parsable"), OptSpec("P", "parsable2"),
    OptSpec("r", "partition", REQUIRED), OptSpec("s", "state", REQUIRED),
    OptSpec("S", ("starttime", "start"), REQUIRED), OptSpec("u", ("user", "uid"), REQUIRED),
    OptSpec(None, "name", REQUIRED), OptSpec("X", "allocations"), OptSpec(None, "delimiter", REQUIRED),
    OptSpec("V", "version"), OptSpec("v", "verbose", action="count"), OptSpec("M", "clusters", REQUIRED),
    OptSpec("L", "allclusters"), OptSpec(None, "units", REQUIRED), OptSpec(None, "json"),
    OptSpec(None, "yaml"), OptSpec("T", "truncate"), OptSpec(None, "array"),
    OptSpec("x", "associations", REQUIRED), OptSpec("q", "qos", REQUIRED),
    OptSpec(None, "noconvert"),
], exit_code=1, hint=False)

_STATE_ALIASES = {"CA": "CANCELLED", "CD": "COMPLETED", "F": "FAILED", "TO": "TIMEOUT",
                  "NF": "NODE_FAIL", "PD": "PENDING", "R": "RUNNING", "OOM": "OUT_OF_MEMORY",
                  "PR": "PREEMPTED", "RQ": "REQUEUED", "CG": "COMPLETING", "S": "SUSPENDED"}


def _parse_selector(tok: str) -> tuple[int, int | None, str | None]:
    """``-j`` item -> (job id, array task or None, step or None): ``12``, ``12_3``,
    ``12.batch``, ``12_3.0``, ``12.extern``."""
    head, dot, step = tok.partition(".")
    base, us, task = head.partition("_")
    if not base.isdigit() or (us and not task.isdigit()) or (dot and not step):
        raise CliExit([f"sacct: fatal: Bad job/step specified: {tok}"], 1)
    return int(base), (int(task) if us else None), (step if dot else None)


def _pending_tasks(ts: str | None) -> set[int]:
    out: set[int] = set()
    for part in (ts or "").split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit():
            out.update(range(int(lo), int(hi or lo) + 1) if (hi or lo).isdigit() else ())
    return out


def _select(jobs: list[dict], selectors: list) -> list[dict]:
    """Keep what ``-j`` names, as Slurm does: ``A`` is the job (or every task of array ``A``)
    with all its steps; ``A_T`` one array task; ``A.S`` only step ``S`` of the job (no job
    line; nothing at all when that step does not exist)."""
    out = []
    for j in jobs:
        whole = False
        steps: set[str] = set()
        matched = False
        for base, task, step in selectors:
            if task is None:
                hit = j["job_id"] == base or j.get("array_job_id") == base
            else:
                hit = j.get("array_job_id") == base and (
                    j.get("array_task_id") == task or (
                        j.get("array_task_id") is None
                        and task in _pending_tasks(j.get("array_task_str"))))
            if not hit:
                continue
            matched = True
            if step is None:
                whole = True
            else:
                steps.add(step)
        if not matched:
            continue
        if whole:
            out.append(j)
            continue
        keep = [st for st in j.get("steps") or [] if str(st.get("step_id")) in steps]
        if keep:
            out.append(dict(j, steps=keep, _steps_only=True))
    return out


def _main() -> int:
    opts, operands = PARSER.parse_into(sys.argv[1:])
    env = os.environ
    from muster.cli import fmt_sacct
    if opts.get("version"):
        from muster import SLURM_COMPAT_VERSION
        print(f"slurm {SLURM_COMPAT_VERSION} (muster)")
        return 0
    if opts.get("helpformat"):
        names = sorted(fmt_sacct.FIELDS)
        for i in range(0, len(names), 4):
            print("".join(f"{n:<20}" for n in names[i:i + 4]).rstrip())
        return 0
    if opts.get("help"):
        print("Usage: sacct [-abDeXPnp] [-j jobs] [-u users] [-S start] [-E end] [-s states] [-o format]")
        return 0
    if operands:
        raise CliExit([f"sacct: error: Unknown arguments: {' '.join(operands)}"], 1)
    job_ids = []
    selectors = []
    for spec in opts.get("jobs") or []:
        for tok in spec.split(","):
            if not tok:
                continue
            sel = _parse_selector(tok)
            selectors.append(sel)
            job_ids.append(sel[0])
    fmt = opts.get("format") or env.get("SACCT_FORMAT")
    if opts.get("long") and not opts.get("format"):
        fmt = fmt_sacct.LONG_FIELDS
    if opts.get("brief"):
        fmt = (",".join(fmt_sacct.BRIEF_FIELDS) if hasattr(fmt_sacct, "BRIEF_FIELDS")
               else "JobID,State,ExitCode")
    fields = None
    if fmt:
        try:
            fields = fmt_sacct.parse_fields(fmt)
            for name, _w, _l in fields:
                if name.lower() not in {k.lower() for k in fmt_sacct.FIELDS}:
                    raise ValueError(name)
        except ValueError as exc:
            raise CliExit([f'sacct: error: Invalid field requested: "{exc}"'], 1) from None
    now = int(time.time())
    msg: dict = {"op": "acct", "duplicates": bool(opts.get("duplicates"))}
    if job_ids:
        msg["job_ids"] = job_ids
    from muster.common.timefmt import parse_datetime
    from muster.common.errors import InputError
    try:
        if opts.get("starttime"):
            msg["start"] = parse_datetime(opts["starttime"], now)
        elif not job_ids and not opts.get("state"):
            lt = time.localtime(now)
            msg["start"] = int(time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, 0, 0, 0, 0, 0, -1)))
        if opts.get("endtime"):
            msg["end"] = parse_datetime(opts["endtime"], now)
    except InputError as exc:
        raise CliExit([f"sacct: error: {exc.message}"], 1) from None
    if opts.get("allusers"):
        msg["all_users"] = True
    if opts.get("user"):
        import pwd
        uids = []
        for u in opts["user"].split(","):
            try:
                uids.append(int(u) if u.isdigit() else pwd.getpwnam(u).pw_uid)
            except KeyError:
                raise CliExit([f"sacct: error: Invalid user id: {u}"], 1) from None
        msg["uids"] = uids
    reply = call(msg)
    jobs = reply["jobs"]
    if opts.get("state"):
        want = set()
        for s in opts["state"].split(","):
            s = s.upper()
            want.add(_STATE_ALIASES.get(s, s))
        jobs = [j for j in jobs if j["state"] in want]
    if opts.get("name"):
        want_names = set(opts["name"].split(","))
        jobs = [j for j in jobs if j["name"] in want_names]
    if opts.get("partition"):
        ps = set(opts["partition"].split(","))
        jobs = [j for j in jobs if set(j["partition"].split(",")) & ps]
    if opts.get("accounts"):
        accs = set(opts["accounts"].split(","))
        jobs = [j for j in jobs if j["account"] in accs]
    if selectors:
        jobs = _select(jobs, selectors)
    if opts.get("json") or opts.get("yaml"):
        from muster.common import fmt_json
        doc = fmt_json.sacct_json(jobs, reply["now"], cluster=reply.get("cluster", ""),
                                  command=["sacct", *sys.argv[1:]])
        sys.stdout.write(fmt_json.dumps(doc) if opts.get("json") else fmt_json.to_yaml(doc))
        return 0
    out = fmt_sacct.render(
        jobs, fields=fields, parsable=bool(opts.get("parsable")), parsable2=bool(opts.get("parsable2")),
        delimiter=opts.get("delimiter") or "|", noheader=bool(opts.get("noheader")),
        allocations_only=bool(opts.get("allocations")), now=reply["now"], cluster=reply.get("cluster", ""),
        units=_units(opts.get("units")), noconvert=bool(opts.get("noconvert")))
    sys.stdout.write(out)
    return 0


def _units(text: str | None) -> str | None:
    """``--units=[KMGTP]``: sizes in that unit; anything else as without the option."""
    return text[0].upper() if text and text[0].upper() in "KMGTP" else None


def main() -> None:
    run_main("sacct", _main)


if __name__ == "__main__":
    main()
