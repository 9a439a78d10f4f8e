"""squeue: view the queue."""

from __future__ import annotations

import os
import sys
import time

from muster.cli.client import call, run_main
from muster.cli.getopt import OPTIONAL, REQUIRED, CliExit, GetoptParser, OptSpec

# what the built-in formats (default, -l, --start) and the default sort read
LIGHT_FIELDS = ["job_id", "array_job_id", "array_task_id", "array_task_str", "array_max_tasks",
                "partition", "name", "user", "state", "reason", "reason_desc", "start_time",
                "end_time", "time_limit", "num_nodes", "node_list", "priority", "sched_nodes"]

# -o codes → the record fields their getters read (fmt_squeue._CODES); a format using any code
# not listed here fetches whole records
_ARR = ("job_id", "array_job_id", "array_task_id", "array_task_str", "array_max_tasks")
_TIMES = ("start_time", "end_time", "time_limit", "submit_time")
CODE_FIELDS = {
    "i": _ARR, "A": _ARR, "F": _ARR, "K": _ARR, "j": ("name",), "u": ("user", "uid"),
    "U": ("uid",), "g": ("group", "gid"), "G": ("gid",), "a": ("account",), "q": ("qos",),
    "P": ("partition",), "t": (), "T": (), "M": _TIMES, "l": ("time_limit",), "L": _TIMES,
    "D": ("num_nodes",), "C": ("num_cpus",), "c": ("cpus_per_task", "min_cpus_node"),
    "R": ("reason", "reason_desc", "node_list"), "r": ("reason",), "N": ("node_list",),
    "S": _TIMES, "e": _TIMES, "V": ("submit_time",), "p": ("priority",), "Q": ("priority",),
    "E": ("dependency",), "k": ("comment",), "Z": ("work_dir",), "o": ("command",),
    "b": ("tres_per_node",), "Y": ("sched_nodes",), "y": ("nice",), "B": ("batch_host",),
    "n": ("req_nodes",), "x": ("exc_nodes",), "h": ("exclusive",), "O": ("contiguous",),
    "w": ("wckey",),
}


def fields_for_format(fmt: str) -> list[str] | None:
    """The record fields a ``-o`` format needs (plus what sorting and display always read),
    or None when it uses a code this table does not know."""
    from muster.cli.fmt_common import parse_format
    try:
        codes, _tail = parse_format(fmt)
    except ValueError:
        return None
    out = dict.fromkeys(_ARR + ("state", "completing", "partition", "priority"))
    for f in codes:
        extra = CODE_FIELDS.get(f.code)
        if extra is None:
            return None
        out.update(dict.fromkeys(extra))
    return list(out)


DEFAULT_STATES = {"PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "STAGE_OUT"}

PARSER = GetoptParser("squeue", [
    OptSpec("A", "account", REQUIRED), OptSpec("a", "all"), OptSpec("r", "array"),
    OptSpec("h", "noheader"), OptSpec(None, "help"), OptSpec(None, "usage"),
    OptSpec("i", "iterate", REQUIRED), OptSpec("j", "jobs", REQUIRED, action="append"),
    OptSpec("l", "long"), OptSpec(None, "me"), OptSpec("n", "name", REQUIRED),
    OptSpec("o", "format", REQUIRED), OptSpec("O", "Format", REQUIRED),
    OptSpec("p", "partition", REQUIRED), OptSpec("q", "qos", REQUIRED),
    OptSpec("R", "reservation", REQUIRED), OptSpec("s", "steps", OPTIONAL),
    OptSpec("S", "sort", REQUIRED), OptSpec(None, "start"), OptSpec("t", ("states", "state"), REQUIRED),
    OptSpec("u", ("user", "users"), REQUIRED), OptSpec("v", "verbose", action="count"),
    OptSpec("V", "version"), OptSpec("w", ("nodelist", "nodes"), REQUIRED),
    OptSpec("M", "clusters", REQUIRED), OptSpec(None, "json"), OptSpec(None, "yaml"),
    OptSpec(None, "local"), OptSpec(None, "sibling"), OptSpec(None, "federation"),
    OptSpec("L", "licenses", REQUIRED), OptSpec("P", "priority"),
    OptSpec(None, "hide", dest="all", const=False), OptSpec(None, "noconvert"), OptSpec(None, "array-unique"),
], exit_code=1, info="first")


def _split(v: str | None) -> list[str]:
    return [x for x in (v or "").split(",") if x]


def _main() -> int:
    opts, operands = PARSER.parse_into(sys.argv[1:])
    env = os.environ
    if opts.get("noconvert"):
        from muster.cli import fmt_squeue
        fmt_squeue.CONVERT_UNITS = False
    if opts.get("steps") is True and operands:
        opts["steps"] = operands.pop(0)  # squeue reads "-s LIST" as "-s=LIST" too
    if operands:
        raise CliExit([f"squeue: error: Unrecognized option: {operands[0]}",
                       'Try "squeue --help" for more information'], 1)
    if opts.get("steps"):
        return _steps(opts)
    from muster.cli import fmt_squeue
    msg: dict = {"op": "jobs"}
    job_ids = []
    for spec in opts.get("jobs") or []:
        for tok in _split(spec):
            base = tok.split("_")[0].split(".")[0]
            if not base.isdigit():
                raise CliExit([f"squeue: error: Invalid job id: {tok}"], 1)
            job_ids.append(int(base))
    if job_ids:
        msg["job_ids"] = job_ids
    states = None
    st_arg = opts.get("states") or env.get("SQUEUE_STATES")
    if st_arg:
        try:
            states = fmt_squeue.parse_states(st_arg)
        except ValueError as exc:
            raise CliExit([f"squeue: error: Invalid job state specified: {exc}"], 1) from None
    users = _split(opts.get("user") or env.get("SQUEUE_USERS"))
    uids = set()
    bad_user = False
    if opts.get("me"):
        uids.add(os.getuid())
    if users:
        import pwd
        for u in users:
            if u.isdigit():
                uids.add(int(u))
                continue
            try:
                uids.add(pwd.getpwnam(u).pw_uid)
            except KeyError:
                sys.stderr.write(f"squeue: error: Invalid user: {u}\n")
                bad_user = True
    if states is None:
        msg["states"] = sorted(DEFAULT_STATES)
    elif "ALL" not in states:
        msg["states"] = sorted(states)
    if uids:
        msg["uids"] = sorted(uids)  # filtered on the controller
    if not (opts["all"] if "all" in opts else env.get("SQUEUE_ALL")):
        msg["hide"] = True  # jobs of hidden partitions and of those closed to the user's groups
    custom = (opts.get("format") or opts.get("Format") or env.get("SQUEUE_FORMAT")
              or env.get("SQUEUE_FORMAT2") or opts.get("sort") or env.get("SQUEUE_SORT"))
    structured = opts.get("json") or opts.get("yaml")
    if not custom and not structured:
        # the plain default format reads neither the time limit nor SchedNodes (-l, --start do)
        msg["fields"] = LIGHT_FIELDS if (opts.get("long") or opts.get("start")) else [
            f for f in LIGHT_FIELDS if f not in ("time_limit", "sched_nodes")]
        msg["rows"] = True
    elif not structured and not (opts.get("Format") or env.get("SQUEUE_FORMAT2") or
                                 opts.get("sort") or env.get("SQUEUE_SORT")):
        wanted = fields_for_format(opts.get("format") or env.get("SQUEUE_FORMAT") or "")
        if wanted is not None:
            msg["fields"] = wanted
            msg["rows"] = True
    if "fields" in msg:
        # the filters applied here read these fields too
        need = [f for f, used in (("name", opts.get("name") or env.get("SQUEUE_NAMES")),
                                  ("partition", opts.get("partition") or env.get("SQUEUE_PARTITION")),
                                  ("account", opts.get("account") or env.get("SQUEUE_ACCOUNT")),
                                  ("qos", opts.get("qos") or env.get("SQUEUE_QOS")),
                                  ("node_list", opts.get("nodelist"))) if used]
        msg["fields"] = list(dict.fromkeys(msg["fields"] + need))
    iterate = opts.get("iterate")
    from muster.common.errors import InvalidJobId
    if opts.get("json"):
        return _print_json(msg, opts, states, uids, bad_user)
    while True:
        try:
            reply = call(msg)
        except InvalidJobId:
            raise CliExit(["slurm_load_jobs error: Invalid job id specified"], 1) from None
        if "rows" in reply:
            names = reply["fields"]
            jobs = [dict(zip(names, row)) for row in reply["rows"]]
        else:
            jobs = reply["jobs"]
        jobs = _filter(jobs, opts, states, uids, bad_user)
        if structured:
            from muster.common import fmt_json
            doc = fmt_json.squeue_json(jobs, reply["now"], cluster=reply.get("cluster") or "",
                                       command=["squeue", *sys.argv[1:]])
            sys.stdout.write(fmt_json.to_yaml(doc))
            return 0
        try:
            out = fmt_squeue.render(
                jobs, fmt=opts.get("format") or (None if opts.get("Format") else env.get("SQUEUE_FORMAT")),
                fmt_long=opts.get("Format") or env.get("SQUEUE_FORMAT2"), long=bool(opts.get("long")),
                start=bool(opts.get("start")), noheader=bool(opts.get("noheader")),
                array_expand=bool(opts.get("array") or opts.get("array_unique")
                                  or env.get("SQUEUE_ARRAY")), now=reply["now"],
                sort=opts.get("sort") or env.get("SQUEUE_SORT"))
        except ValueError as exc:
            raise CliExit([f"squeue: error: Invalid field or sort key: {exc}"], 1) from None
        sys.stdout.write(out)
        if not iterate:
            return 0
        sys.stdout.flush()
        try:
            time.sleep(max(1, int(iterate)))
        except ValueError:
            raise CliExit([f"squeue: error: Invalid iterate value: {iterate}"], 1) from None
        sys.stdout.write("\n")


def _filter_fields(opts: dict, states: set[str] | None) -> list[str]:
    """The record fields :func:`_filter` reads beyond what the controller filters on."""
    env = os.environ
    need = [f for f, used in (("partition", opts.get("partition") or env.get("SQUEUE_PARTITION")),
                              ("name", opts.get("name") or env.get("SQUEUE_NAMES")),
                              ("account", opts.get("account") or env.get("SQUEUE_ACCOUNT")),
                              ("qos", opts.get("qos") or env.get("SQUEUE_QOS")),
                              ("node_list", opts.get("nodelist"))) if used]
    if states is not None and "ALL" not in states:
        need.append("state")  # the shown state: COMPLETING for a job with the completing flag
    return need


def _filter(jobs: list[dict], opts: dict, states: set[str] | None, uids: set[int],
            bad_user: bool) -> list[dict]:
    """The jobs squeue shows of those the controller sent (state as shown, -p, -n, -A, -q,
    -w and their SQUEUE_* variables), in their order."""
    env = os.environ
    if states is None:
        jobs = [j for j in jobs if j["state"] in DEFAULT_STATES]
    elif "ALL" not in states:
        jobs = [j for j in jobs if j["state"] in states]
    if bad_user and not uids:
        jobs = []  # only unknown users named: Slurm prints the header and nothing else
    parts = set(_split(opts.get("partition") or env.get("SQUEUE_PARTITION")))
    if parts:
        jobs = [j for j in jobs if parts & set(j["partition"].split(","))]
    names = set(_split(opts.get("name") or env.get("SQUEUE_NAMES")))
    if names:
        jobs = [j for j in jobs if j["name"] in names]
    accts = set(_split(opts.get("account") or env.get("SQUEUE_ACCOUNT")))
    if accts:
        jobs = [j for j in jobs if j["account"] in accts]
    qos = set(_split(opts.get("qos") or env.get("SQUEUE_QOS")))
    if qos:
        jobs = [j for j in jobs if j["qos"] in qos]
    if opts.get("nodelist"):
        from muster.common.hostlist import expand
        want = set(expand(opts["nodelist"]))
        jobs = [j for j in jobs if j.get("node_list") and want & set(expand(j["node_list"]))]
    return jobs


def _print_json(msg: dict, opts: dict, states: set[str] | None, uids: set[int],
                bad_user: bool) -> int:
    """squeue --json: the controller's cached v0.0.40 records (muster.controller.jobjson),
    written through as the text it sends: never decoded nor encoded again here. When the
    command's own filters apply, the columns they read come along (``rows``, the same jobs
    in the same order) and only the records of the jobs they keep are written."""
    from muster.common import fmt_json
    from muster.common.errors import InvalidJobId
    msg = {**msg, "encoded": True}
    need = _filter_fields(opts, states)
    if need:
        msg["fields"] = need
    try:
        reply = call(msg, raw="records")
    except InvalidJobId:
        raise CliExit(["slurm_load_jobs error: Invalid job id specified"], 1) from None
    records = reply["records"]  # a memoryview of the reply's UTF-8 bytes
    if need or (bad_user and not uids):
        jobs = [dict(zip(reply["fields"], row)) for row in reply["rows"]] if need else []
        keep = {id(j) for j in _filter(jobs, opts, states, uids, bad_user)}
        items = fmt_json.list_items(str(records, "utf-8")) if keep else []
        records = fmt_json.list_text([t for j, t in zip(jobs, items) if id(j) in keep])
    doc = fmt_json.squeue_json(fmt_json.Encoded(records), reply["now"],
                               cluster=reply.get("cluster") or "",
                               command=["squeue", *sys.argv[1:]])
    fmt_json.write(doc, _emitter(sys.stdout))
    return 0


def _emitter(out):
    """``out.write`` for text, and for UTF-8 bytes (the records as the controller sent them):
    straight to the binary stream beneath when ``out`` writes UTF-8 (what it would have
    written for their text), else as their text."""
    enc = (getattr(out, "encoding", None) or "").lower().replace("-", "").replace("_", "")
    binary = getattr(out, "buffer", None) if enc == "utf8" else None

    def emit(piece) -> None:
        if isinstance(piece, str):
            out.write(piece)
        elif binary is not None:
            out.flush()
            binary.write(piece)
        else:
            out.write(str(piece, "utf-8"))
    return emit


def _step_list(arg) -> list[tuple[str, str]]:
    """``-s``'s list: ``job[_task].step`` each (step: a number, ``batch`` or ``extern``) →
    (job id as squeue prints it, step). A word without a step, or whose job id is not a
    number, is squeue's "Invalid job_step id" (exit 1)."""
    out = []
    for tok in _split(arg if isinstance(arg, str) else ""):
        job, dot, step = tok.partition(".")
        base, _, task = job.partition("_")
        if not dot:
            raise CliExit([f"squeue: error: Invalid job_step id: {tok}.??"], 1)
        if not (base.isascii() and base.isdigit()) or (task and not (task.isascii() and task.isdigit())):
            raise CliExit([f"squeue: error: Invalid job_step id: {tok}"], 1)
        out.append((job, step))
    return out


def _step_uids(opts: dict) -> set[int] | None:
    """-u/--me as uids (None: no user filter); an unknown user is reported and matches none."""
    users = _split(opts.get("user") or os.environ.get("SQUEUE_USERS"))
    if not users and not opts.get("me"):
        return None
    import pwd
    uids = {os.getuid()} if opts.get("me") else set()
    for u in users:
        try:
            uids.add(int(u) if u.isdigit() else pwd.getpwnam(u).pw_uid)
        except KeyError:
            sys.stderr.write(f"squeue: error: Invalid user: {u}\n")
    return uids


def _steps(opts: dict) -> int:
    """squeue -s[LIST]: the running steps of every user's jobs (batch steps included),
    narrowed by -s's ``job.step`` list, -j, -u/--me, -p, -n (the job's name, as squeue
    matches it) and -w; -o/-O/-S/-h as squeue's step formats read them."""
    from muster.cli import fmt_squeue
    from muster.cli.fmt_scontrol import step_id_str
    want = _step_list(opts["steps"])
    reply = call({"op": "steps"})
    now, steps = reply["now"], reply["steps"]
    if want:
        steps = [s for s in steps if any(
            step == str(s["step_id"]) and job in (str(s["job_id"]), step_id_str(s).split(".")[0])
            for job, step in want)]
    jobs = {t.split(".")[0] for spec in opts.get("jobs") or [] for t in _split(spec)}
    if jobs:
        steps = [s for s in steps if str(s["job_id"]) in jobs or str(s.get("array_job_id")) in jobs
                 or step_id_str(s).split(".")[0] in jobs]
    uids = _step_uids(opts)
    if uids is not None:
        steps = [s for s in steps if s["uid"] in uids]
    parts = set(_split(opts.get("partition") or os.environ.get("SQUEUE_PARTITION")))
    if parts:
        steps = [s for s in steps if s["partition"] in parts]
    if opts.get("nodelist"):
        from muster.common.hostlist import expand
        nodes = set(expand(opts["nodelist"]))
        steps = [s for s in steps if nodes & set(expand(s.get("node_list") or ""))]
    errors: list[str] = []
    fmt_long = opts.get("Format") or os.environ.get("SQUEUE_FORMAT2")
    try:
        out = fmt_squeue.render_steps(
            steps, fmt=opts.get("format") or (None if fmt_long else os.environ.get("SQUEUE_FORMAT")),
            fmt_long=fmt_long,
            noheader=bool(opts.get("noheader")), now=now,
            sort=opts.get("sort") or os.environ.get("SQUEUE_SORT"), errors=errors)
    except ValueError as exc:
        raise CliExit([f"squeue: error: Invalid sort specification: {exc}"], 1) from None
    sys.stderr.write("".join(f"squeue: error: Invalid job step format specification: {e}\n"
                             for e in errors))
    if opts.get("long") and not opts.get("noheader"):
        from muster.common.timefmt import fmt_ctime
        out = fmt_ctime(now) + "\n" + out
    sys.stdout.write(out)
    return 0


def main() -> None:
    run_main("squeue", _main)


if __name__ == "__main__":
    main()
