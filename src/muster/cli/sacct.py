"""sacct: accounting records of jobs and steps, from the controller's store."""

from __future__ import annotations

import os
import sys
import time

from muster.cli.client import call, run_main
from muster.cli.getopt import OPTIONAL, REQUIRED, CliExit, GetoptParser, OptSpec

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
    OptSpec(None, "noconvert"), OptSpec(None, "usage"),
    OptSpec("B", "batch-script"), OptSpec("c", "completion"), OptSpec(None, "env-vars"),
    OptSpec(None, "federation"), OptSpec(None, "local"), OptSpec("f", "file", REQUIRED),
    OptSpec("g", ("gid", "group"), REQUIRED), OptSpec("i", "nnodes", REQUIRED),
    OptSpec("I", "ncpus", REQUIRED), OptSpec("k", "timelimit-min", REQUIRED),
    OptSpec("K", "timelimit-max", REQUIRED), OptSpec("W", "wckeys", REQUIRED),
    OptSpec(None, "whole-hetjob", OPTIONAL),
], exit_code=1, hint=False, info="last")

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


def _names(j: dict, base: int, task: int | None) -> bool:
    """Whether ``-j base[_task]`` names record ``j``: job ``base`` or any task of array
    ``base``; with a task, that task (still pending inside its master or not)."""
    if task is None:
        return j["job_id"] == base or j.get("array_job_id") == base
    return j.get("array_job_id") == base and (
        j.get("array_task_id") == task or (
            j.get("array_task_id") is None and task in _pending_tasks(j.get("array_task_str"))))


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
            if not _names(j, base, task):
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


def _count_range(text: str, what: str) -> tuple[int, int | None]:
    """``-i``/``-I`` value: ``N`` (exactly N) or ``min-max``; ``*`` or empty: any count."""
    if text in ("", "*"):
        return 1, None
    lo, dash, hi = text.partition("-")
    if not (lo.isascii() and lo.isdigit()) or (dash and not (hi.isascii() and hi.isdigit())):
        raise CliExit([f'sacct: error: Invalid numeric value "{text}" for {what}.'], 1)
    return int(lo), int(hi) if dash else int(lo)


def _gids(text: str) -> set[int]:
    import grp
    out = set()
    for g in text.split(","):
        try:
            out.add(int(g) if g.isdigit() else grp.getgrnam(g).gr_gid)
        except KeyError:
            raise CliExit([f"sacct: error: Invalid group id: {g}"], 1) from None
    return out


def _record_filters(opts: dict):
    """The selections Slurm's sacct sends to its database, applied to the controller's job
    records: groups (-g), node and CPU counts (-i, -I), time limit (-k alone: exactly that
    limit; with -K: the range; -K alone is ignored, as by Slurm) and wckeys (-W). Each is a
    predicate on a job record; values are checked before anything is asked."""
    from muster.common.errors import InputError
    from muster.common.timefmt import parse_time_limit
    tests: list = []  # predicates on a job record
    if opts.get("gid"):
        gids = _gids(opts["gid"])
        tests.append(lambda j: j.get("gid") in gids)
    for key, field, what in (("nnodes", "num_nodes", "requested node range"),
                             ("ncpus", "num_cpus", "requested cpu range")):
        if opts.get(key) is not None:
            lo, hi = _count_range(opts[key], what)
            tests.append(lambda j, f=field, lo=lo, hi=hi: lo <= (j.get(f) or 0) <= (hi or 1 << 62))
    if opts.get("timelimit_min") is not None:
        try:
            tmin = parse_time_limit(opts["timelimit_min"])
            tmax = (parse_time_limit(opts["timelimit_max"])
                    if opts.get("timelimit_max") is not None else tmin)
        except InputError:
            raise CliExit(["sacct: fatal: Invalid time limit specification"], 1) from None
        tests.append(lambda j: j.get("time_limit") is not None and tmin is not None
                     and tmin <= j["time_limit"] <= (tmax if tmax is not None else 1 << 62))
    if opts.get("wckeys"):
        keys = set(opts["wckeys"].split(","))
        tests.append(lambda j: (j.get("wckey") or "") in keys)
    return lambda j: all(t(j) for t in tests)


_NO_JOBCOMP = "Slurm job completion is disabled"  # JobCompType=jobcomp/none: no such data


def _array_order(j: dict) -> tuple[int, int]:
    """An array's tasks by index, as sacct lists them (the master's own id is its last
    task's), other jobs by id."""
    task = j.get("array_task_id")
    return (j.get("array_job_id") or j["job_id"], -1 if task is None else task)


def _stored_text(opts: dict, selectors: list) -> str | None:
    """-B/--batch-script and --env-vars (both need -j, with Slurm's fatal message): per job
    record -j names, Slurm's title, a dashed line and the script (the environment as
    ``K=V`` lines), or NONE for a job without one (srun, salloc). The controller keeps every
    batch script and answers only the owner and operators (``job_script``); another user's
    job is left out, as slurmdbd leaves it out."""
    for opt, what, title in (("batch_script", "scripts", "Batch Script for {}"),
                             ("env_vars", "environment",
                              "Environment used for {} (must be batch to display)")):
        if not opts.get(opt):
            continue
        if not selectors:
            raise CliExit([f"sacct: fatal: When requesting job {what} you must also "
                           "request specific jobs with the '-j' option."], 1)
        from muster.cli.fmt_sacct import job_id_str
        reply = call({"op": "job_script", "job_ids": sorted({s[0] for s in selectors}),
                      "env": opt == "env_vars"})
        recs = sorted((j for j in reply["jobs"] if any(_names(j, b, t) for b, t, _ in selectors)),
                      key=_array_order)
        out = []
        for j in recs:
            body = "NONE\n" if j.get("text") is None else j["text"]
            out.append(f"{title.format(job_id_str(j))}\n{'-' * 80}\n{body}\n")
        return "".join(out)
    return None


def _check_sources(opts: dict) -> None:
    """-c and -f read the job completion plugin's data; Muster has none (JobCompType
    jobcomp/none), so both end as Slurm's sacct ends without it. --whole-hetjob takes
    yes or no (no heterogeneous jobs here: nothing else changes)."""
    wh = opts.get("whole_hetjob")
    if wh not in (None, True) and str(wh).lower() not in ("yes", "no"):
        raise CliExit([f'sacct: error: Invalid --whole-hetjob value "{wh}". '
                       "Valid values: [yes|no]."], 1)
    if opts.get("file") is not None and not os.path.isfile(opts["file"]):
        raise CliExit([f"{opts['file']} is not a valid file"], 1)
    if opts.get("completion") or opts.get("file") is not None:
        raise CliExit([_NO_JOBCOMP], 1)


def _main() -> int:
    opts, operands = PARSER.parse_into(sys.argv[1:])
    env = os.environ
    from muster.cli import fmt_sacct
    _check_sources(opts)
    if opts.get("helpformat"):
        names = sorted(fmt_sacct.FIELDS)
        for i in range(0, len(names), 4):
            print("".join(f"{n:<20}" for n in names[i:i + 4]).rstrip())
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
    stored = _stored_text(opts, selectors)
    if stored is not None:
        sys.stdout.write(stored)
        return 0
    keep = _record_filters(opts)
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
    jobs = [j for j in jobs if keep(j)]
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
