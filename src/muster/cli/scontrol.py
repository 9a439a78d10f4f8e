"""scontrol: show and change jobs, nodes, partitions; hostlist utilities."""

from __future__ import annotations

import os
import sys

from muster.cli.client import call, check_clusters, run_main
from muster.cli.getopt import CliExit, GetoptParser, OptSpec

PARSER = GetoptParser("scontrol", [
    OptSpec("a", "all"), OptSpec("d", "details"), OptSpec(None, "federation"),
    OptSpec("F", "future"), OptSpec("h", "help"), OptSpec(None, "hide"), OptSpec(None, "local"),
    OptSpec("M", "clusters", 1), OptSpec("o", "oneliner"), OptSpec(None, "sibling"),
    OptSpec("Q", "quiet"), OptSpec("u", "uid", 1), OptSpec(None, "usage"),
    OptSpec("v", "verbose", action="count"), OptSpec("V", "version"), OptSpec(None, "json"),
    OptSpec(None, "yaml"),
], exit_code=1, info="first")


def _err(text: str, code: int = 1) -> CliExit:
    return CliExit([text], code)


def _job_refs(tokens: list[str], prog_err: str = "Invalid job id specified") -> list[dict]:
    refs = []
    for tok in tokens:
        for part in tok.split(","):
            if not part:
                continue
            jid, _, task = part.split(".")[0].partition("_")
            if not jid.isdigit() or (task and not task.isdigit()):
                raise _err(f"Invalid job id specified for job {part}")
            refs.append({"job_id": int(jid), "task": int(task) if task else None})
    if not refs:
        raise _err("scontrol: error: No job id specified")
    return refs


def _outlive_own_job() -> None:
    """Block SIGTERM for the rest of this command (its request is one frame: done or not).

    A job that requeues itself — submitit and Lightning run ``scontrol requeue $SLURM_JOB_ID``
    in a task and check its status — gets the requeue's SIGTERM in all its processes, this
    one included, before this command has read the answer and exited: it died of it, and
    submitit took the requeue for failed. Blocked, the signal is discarded at exit and the
    caller sees the real status. (Slurm's C scontrol is usually gone before slurmd delivers
    the signal; a Python command takes longer to read the answer and exit.) SIGKILL after
    KillWait still ends a command that hangs."""
    import signal
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def _action(op: str, refs: list[dict], extra: dict | None = None, verb: str = "") -> int:
    from muster.common.errors import RequestError
    try:
        call({"op": op, "jobs": refs, **(extra or {})})
    except RequestError as exc:
        ids = ",".join(str(r["job_id"]) + (f"_{r['task']}" if r["task"] is not None else "") for r in refs)
        raise _err(f"{verb or op} error on job id {ids}: {exc.message}" if verb
                   else f"scontrol: error: {exc.message} for job {ids}") from None
    return 0


def _structured(opts: dict, doc: dict) -> int:
    from muster.common import fmt_json
    sys.stdout.write(fmt_json.dumps(doc) if opts.get("json") else fmt_json.to_yaml(doc))
    return 0


def show(what: str, arg: str | None, opts: dict) -> int:
    from muster.cli import fmt_scontrol
    one = bool(opts.get("oneliner"))
    w = what.lower()
    if w in ("job", "jobs", "jobid"):
        from muster.common.errors import InvalidJobId
        msg: dict = {"op": "jobs"}
        if arg:
            jid = arg.split("_")[0].split(".")[0]
            if not jid.isdigit():
                raise _err("scontrol_print_job error: Invalid job id specified")
            msg["job_ids"] = [int(jid)]
            msg["events"] = True
        try:
            reply = call(msg)
        except InvalidJobId:
            raise _err("slurm_load_jobs error: Invalid job id specified") from None
        jobs = reply["jobs"]
        if arg and "_" in arg:
            task = arg.split("_", 1)[1]
            jobs = [j for j in jobs if str(j.get("array_task_id")) == task]
            if not jobs:
                raise _err("slurm_load_jobs error: Invalid job id specified")
        if not jobs:
            print("No jobs in the system")
            return 0
        jobs.sort(key=lambda j: j["job_id"])
        if opts.get("json") or opts.get("yaml"):
            from muster.common import fmt_json
            return _structured(opts, fmt_json.squeue_json(jobs, reply["now"],
                                                          cluster=reply.get("cluster") or ""))
        sys.stdout.write("".join(fmt_scontrol.show_job(j, reply["now"], one_liner=one,
                                                       details=bool(opts.get("details")))
                                 for j in jobs))
        return 0
    if w in ("node", "nodes", "nodename"):
        reply = call({"op": "nodes"})
        nodes = reply["nodes"]
        if arg:
            from muster.common.hostlist import expand
            want = expand(arg)
            nodes = [n for n in nodes if n["name"] in want]
            if not nodes:
                print(f"Node {arg} not found")
                return 1
        if opts.get("json") or opts.get("yaml"):
            from muster.common import fmt_json
            return _structured(opts, fmt_json.nodes_json(nodes, reply["now"]))
        sys.stdout.write("".join(fmt_scontrol.show_node(n, reply["now"], one_liner=one)
                                 + ("" if one else "\n") for n in nodes))
        return 0
    if w in ("partition", "partitions", "partitionname"):
        parts = call({"op": "partitions"})["partitions"]
        if arg:
            parts = [p for p in parts if p["name"] == arg]
            if not parts:
                print(f"Partition {arg} not found")
                return 1
        if opts.get("json") or opts.get("yaml"):
            from muster.common import fmt_json
            return _structured(opts, fmt_json.partitions_json(parts, 0))
        sys.stdout.write("".join(fmt_scontrol.show_partition(p, one_liner=one)
                                 + ("" if one else "\n") for p in parts))
        return 0
    if w in ("reservation", "reservations", "res", "reservationname"):
        return show_reservations(arg, one)
    if w == "federation":
        return 0  # not a member of a federation: Slurm prints nothing
    if w in ("step", "steps", "stepid"):
        return show_steps(arg, one)
    if w == "topology":
        return show_topology(arg)
    if w in ("config", "configuration"):
        reply = call({"op": "config"})
        items = [(str(k), str(v)) for k, v in reply["config"]]
        sys.stdout.write(fmt_scontrol.show_config(items, reply["now"]))
        host = next((v.split("(")[0] for k, v in items if k == "SlurmctldHost[0]"), "localhost")
        print()
        print(f"Slurmctld(primary) at {host} is UP")
        return 0
    if w in ("hostnames", "hostlist", "hostlistsorted"):
        from muster.common import hostlist
        from muster.common.errors import InputError
        if arg is None:
            if w != "hostnames":
                raise _err("scontrol: error: Invalid hostlist: (null)")
            arg = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
            if not arg:
                raise _err("scontrol: error: host list is empty")
        if arg == "-":
            arg = sys.stdin.read()
        elif "/" in arg:
            try:
                with open(arg) as fh:
                    arg = fh.read()
            except OSError as exc:
                raise _err(f"scontrol: error: {arg}: {exc.strerror}") from None
        try:
            names = hostlist.expand(arg)
            if w == "hostnames":
                sys.stdout.write("".join(n + "\n" for n in names))
            elif w == "hostlist":
                print(hostlist.compress(names))
            else:
                print(hostlist.compress_sorted(names))
        except InputError:
            raise _err(f"scontrol: error: Invalid hostlist: {arg}") from None
        return 0
    raise _err(f"invalid entity: {what} for keyword: show")


def _step_ref(arg: str) -> tuple[int, int | None, str | None]:
    """``N``, ``N.S``, ``A_T.S`` → (job or array id, task, step: digits, ``batch`` or
    ``extern``; None = every step of the job). scontrol's own words for a malformed one."""
    job_s, dot, step = arg.partition(".")
    jid, _, task = job_s.partition("_")
    if not (jid.isascii() and jid.isdigit()) or (task and not (task.isascii() and task.isdigit())):
        raise _err(f'"{job_s}" does not look like a jobid')
    if dot and step not in ("batch", "extern") and not (step.isascii() and step.isdigit()):
        raise _err(f'"{step}" does not look like a stepid')
    return int(jid), int(task) if task else None, step if dot else None


def show_topology(name: str | None) -> int:
    """Slurm's layout, one line per switch (``SwitchName=s0 Level=0 LinkSpeed=1 Nodes=...``)
    or base block (``BlockName=b1 BlockIndex=0 Nodes=...``); a name picks that switch or block,
    else the leaves holding that node. Slurm reports a miss on stderr and exits 0, and so
    does this; SLURM_TOPO_LEN cuts each line."""
    reply = call({"op": "topology"})
    records, plugin = reply.get("records") or [], reply.get("plugin") or ""
    if not records:
        print("scontrol: error: No topology information available", file=sys.stderr)
        return 0
    block = plugin.endswith("block")
    if name:
        chosen = [r for r in records if r["name"] == name][:1]
        if not chosen:
            from muster.common.hostlist import expand
            from muster.common.errors import InputError
            try:
                want = set(expand(name))
            except InputError:
                want = {name}
            chosen = [r for r in records if r["nodes"] and want <= set(expand(r["nodes"]))]
        if not chosen:
            what = "block" if block else "switch"
            print(f"scontrol: error: Topology information contains no {what} or node named "
                  f"{name}", file=sys.stderr)
            return 0
        records = chosen
    cut = os.environ.get("SLURM_TOPO_LEN")
    for r in records:
        if block:
            line = f"BlockName={r['name']} BlockIndex={r['index']}" + (
                f" Nodes={r['nodes']}" if r["nodes"] else "")
        else:
            line = (f"SwitchName={r['name']} Level={r['level']} LinkSpeed={r['link_speed']}"
                    + (f" Nodes={r['nodes']}" if r["nodes"] else "")
                    + (f" Switches={r['switches']}" if r["switches"] else ""))
        print(line[:int(cut)] if cut and cut.isdigit() else line)
    return 0


def show_steps(arg: str | None, one: bool) -> int:
    """scontrol show step[s] [N[.S]]: the running steps, the batch step included, of every
    user's jobs (as PrivateData=none shows them). A job the controller does not hold is
    slurm_get_job_steps' "Invalid job id"; a held job without that step, "not found"."""
    from muster.cli import fmt_scontrol
    from muster.common.errors import InvalidJobId
    msg: dict = {"op": "steps"}
    want = None
    if arg:
        want = _step_ref(arg)
        msg["job_ids"] = [want[0]]
    try:
        steps = call(msg)["steps"]
    except InvalidJobId:
        raise _err("slurm_get_job_steps error: Invalid job id specified") from None
    if want is not None:
        jid, task, step = want
        steps = [s for s in steps
                 if ((s["job_id"] == jid or s.get("array_job_id") == jid) if task is None
                     else (s.get("array_job_id") == jid and s.get("array_task_id") == task))
                 and (step is None or str(s["step_id"]) == step)]
    if not steps:
        if want is None:
            print("No job steps in the system")
            return 0
        jid, task, step = want
        print(f"Job step {jid}{'' if task is None else f'_{task}'}.{step or '*'} not found")
        return 1
    sys.stdout.write("".join(fmt_scontrol.show_step(s, one_liner=one) for s in steps))
    return 0


# scontrol's reservation keywords, in the order it tries them: a key matches the first entry
# it is a case-insensitive prefix of, at least as long as the entry's minimum ("st=now" is
# StartTime, "r=x" ReservationName; "Node" is too short for Nodes or NodeCnt).
RESV_KEYS: tuple[tuple[str, int, str], ...] = (
    ("reservationname", 1, "name"), ("accounts", 1, "accounts"), ("starttime", 1, "start"),
    ("endtime", 1, "end"), ("duration", 1, "duration"), ("flags", 2, "flags"),
    ("nodecnt", 5, "node_cnt"), ("nodecount", 5, "node_cnt"), ("corecnt", 5, "core_cnt"),
    ("corecount", 5, "core_cnt"), ("cpucnt", 5, "core_cnt"), ("cpucount", 5, "core_cnt"),
    ("nodes", 5, "nodes"), ("partitionname", 1, "partition"), ("tres", 1, "tres"),
    ("users", 1, "users"),
)


def resv_key(key: str) -> str | None:
    """The reservation field a keyword names (any case, abbreviated as scontrol allows), or
    None. ``User``/``Account``/``Partition``/``Name`` are caught by the prefix rule too."""
    k = key.lower()
    if k in ("name", "resv"):
        return "name"  # Muster's own aliases, kept for the scripts that use them
    for full, shortest, field in RESV_KEYS:
        if len(k) >= shortest and full.startswith(k):
            return field
    return None


def parse_reservation(tokens: list[str], now: int) -> dict:
    """``ReservationName=x StartTime=now Duration=60 Users=a Nodes=... Flags=MAINT`` → spec.
    Raises ValueError(token, what): ``what`` is "parameter" for a word that is no keyword,
    else the keyword's field whose value is bad."""
    from muster.common.hostlist import expand
    from muster.common.timefmt import parse_datetime, parse_time_limit
    spec: dict = {}
    for tok in tokens:
        k, sep, v = tok.partition("=")
        opx = ""
        if k.endswith(("+", "-")):
            k, opx = k[:-1], k[-1]
        key = resv_key(k)
        if not sep or key is None:
            raise ValueError(tok, "parameter")
        try:
            if key in ("start", "end"):
                spec[key] = now if v.lower() == "now" else parse_datetime(v, now)
            elif key == "duration":
                mins = parse_time_limit(v)
                spec[key] = -1 if mins is None else mins
            elif key == "nodes":
                spec[key] = ["ALL"] if v.upper() == "ALL" else expand(v)
            elif key in ("node_cnt", "core_cnt"):
                spec[key] = int(v.split(",")[0])
            elif key in ("users", "accounts", "flags"):
                spec[key] = [x for x in v.split(",") if x]
                if opx:
                    spec[key + "_op"] = opx
            elif key == "tres":
                tres = {}
                for item in v.split(","):
                    name, s2, cnt = item.replace(":", "=", 1).rpartition("=") if "=" not in item \
                        else item.partition("=")
                    if not name or not cnt.isdigit():
                        raise ValueError(tok)
                    name = name.lower().rstrip("=")
                    tres["gres/gpu" if name in ("gpu", "gres/gpu") else name] = int(cnt)
                spec[key] = tres
            else:
                spec[key] = v
        except Exception:
            raise ValueError(tok, key) from None
    if "core_cnt" in spec:
        spec.setdefault("tres", {})["cpu"] = spec.pop("core_cnt")
    return spec


# scontrol's words for a bad value (create_res.c); other keys say "Invalid <key> <token>"
_RESV_WHAT = {"start": "start time", "end": "end time", "node_cnt": "node count",
              "core_cnt": "core count"}


def reservation_cmd(cmd: str, tokens: list[str]) -> int:
    import time as _time
    from muster.common.errors import RequestError
    if cmd == "delete":
        names = []
        for tok in tokens:
            k, sep, v = tok.partition("=")
            names.append(v if sep else tok)
        if not names:
            raise _err("scontrol: error: Reservation name is required")
        for n in names:
            try:
                call({"op": "resv_delete", "name": n})
            except RequestError as exc:
                raise _err(f"delete_reservation {n}: {exc.message}") from None
        return 0
    try:
        spec = parse_reservation(tokens, int(_time.time()))
    except ValueError as exc:
        tok, what = exc.args
        aborted = "No reservation created." if cmd == "create" else "No reservation update."
        if what == "parameter":
            raise _err(f"scontrol: error: Unknown parameter {tok}.  {aborted}") from None
        raise _err(f"scontrol: error: Invalid {_RESV_WHAT.get(what, what)} {tok}.  "
                   f"{aborted}") from None
    if cmd == "create":
        try:
            name = call({"op": "resv_create", "spec": spec})["name"]
        except RequestError as exc:
            text = exc.message
            if exc.code == "access_denied":
                text = f"Error creating the reservation: {text}"
            raise _err(text) from None
        print(f"Reservation created: {name}")
        return 0
    if not spec.get("name"):
        raise _err("scontrol: error: Reservation must be given.  No reservation update.")
    try:
        call({"op": "resv_update", "spec": spec})
    except RequestError as exc:
        raise _err(f"Error updating the reservation: {exc.message}"
                   if not exc.message.startswith("Error") else exc.message) from None
    print("Reservation updated.")
    return 0


def show_reservations(arg: str | None, one: bool) -> int:
    from muster.common.timefmt import fmt_duration_long, fmt_iso
    reply = call({"op": "reservations"})
    recs = reply["reservations"]
    if arg:
        recs = [r for r in recs if r["name"] == arg]
        if not recs:
            print(f"Reservation {arg} not found")
            return 1
    if not recs:
        print("No reservations in the system")
        return 0
    out = []
    for r in recs:
        parts = [
            [f"ReservationName={r['name']}", f"StartTime={fmt_iso(r['start_time'])}",
             f"EndTime={fmt_iso(r['end_time'])}", f"Duration={fmt_duration_long(r['duration_s'])}"],
            [f"Nodes={r['nodes'] or '(null)'}", f"NodeCnt={r['node_count']}",
             f"CoreCnt={r['core_count']}", "Features=(null)",
             f"PartitionName={r['partition'] or '(null)'}",
             f"Flags={','.join(r['flags']) if r['flags'] else '(null)'}"],
            [f"TRES={r['tres']}"],
            [f"Users={','.join(r['users']) or '(null)'}", "Groups=(null)",
             f"Accounts={','.join(r['accounts']) or '(null)'}", "Licenses=(null)",
             f"State={r['state']}", "BurstBuffer=(null)", "Watts=n/a"],
            ["MaxStartDelay=(null)"],
        ]
        if one:
            out.append(" ".join(" ".join(p) for p in parts) + "\n")
        else:
            out.append("\n".join(("   " if i else "") + " ".join(p) for i, p in enumerate(parts))
                       + "\n\n")
    sys.stdout.write("".join(out))
    return 0


def _check_nice(value: str | None) -> None:
    """scontrol's own range check of Nice= (update_job.c): the update is not sent."""
    v = (value or "").strip()
    if v[:1] in "+-" and v:
        v = v[1:] if v[0] == "+" else v
    if v.lstrip("-").isascii() and v.lstrip("-").isdigit() and v.count("-") <= 1 \
            and abs(int(v)) > 2147483645:
        raise _err("scontrol: error: Nice value out of range (+/- 2147483645). Value ignored")


_JOB_TAGS = ("job", "jobi", "jobid")  # scontrol matches JobId down to three letters


def _is_key(key: str, name: str, shortest: int) -> bool:
    """scontrol's keyword rule: any case, abbreviated down to ``shortest`` letters."""
    return len(key) >= shortest and name.lower().startswith(key.lower())


def _update_pairs(tokens: list[str]) -> list[tuple[str, str]]:
    """scontrol's reading of ``update``'s words: ``Key=value``, ``Key value`` (the next word
    is the value), and a bare ``Nice`` (= ``Nice=100``)."""
    if len(tokens) > 1 and tokens[0].lower() in ("job", "jobs") and "=" in tokens[1]:
        tokens = tokens[1:]  # "update job JobId=5 ...": the entity named first
    pairs, i = [], 0
    while i < len(tokens):
        key, sep, value = tokens[i].partition("=")
        if sep:
            pairs.append((key, value))
        elif _is_key(key, "Nice", 2):
            pairs.append(("Nice", "100"))
        elif i + 1 < len(tokens):
            i += 1
            pairs.append((key, tokens[i]))
        else:
            raise _err(f"Invalid input: {key}\nRequest aborted")
        i += 1
    return pairs


def update(tokens: list[str]) -> int:
    job = any(t.split("=", 1)[0].lower() in _JOB_TAGS + ("jobs",)
              or _is_key(t.split("=", 1)[0], "JobName", 4) for t in tokens)
    if not job and any(t.lower().startswith(("reservationname=", "reservation="))
                       for t in tokens):
        return reservation_cmd("update", tokens)
    pairs = _update_pairs(tokens)
    if any(k.lower() in _JOB_TAGS or _is_key(k, "JobName", 4) for k, _v in pairs):
        return update_job(pairs)
    from muster.common.errors import RequestError
    kv = dict(pairs)
    lower = {k.lower(): k for k in kv}
    if "nodename" in lower:
        from muster.common.hostlist import expand
        names = expand(kv.pop(lower["nodename"]))
        state = kv.pop(lower["state"], None) if "state" in lower else None
        reason = kv.pop(lower["reason"], None) if "reason" in lower else None
        if state is None:
            raise _err("slurm_update error: Invalid node state specified")
        try:
            call({"op": "update_node", "nodes": names, "state": state, "reason": reason})
        except RequestError as exc:
            raise _err(f"slurm_update error: {exc.message}") from None
        return 0
    raise _err("scontrol: error: Invalid update request (JobId= or NodeName= needed)")


def update_job(pairs: list[tuple[str, str]]) -> int:
    """scontrol update JobId=… Key=value…: every change in one request to the controller,
    which judges them (refused → nothing changed). Without JobId, JobName (and UserID)
    select the jobs, as scontrol does. A job array's running tasks that cannot take a
    change are reported one per line, and the exit code is 1."""
    from muster.common.errors import RequestError
    ids = [v for k, v in pairs if k.lower() in _JOB_TAGS]
    user = [v for k, v in pairs if _is_key(k, "UserID", 3)]
    changes = {k: v for k, v in pairs if k.lower() not in _JOB_TAGS and not _is_key(k, "UserID", 3)}
    if not changes:
        raise _err("No changes specified")
    for k, v in changes.items():
        if _is_key(k, "Nice", 2):
            _check_nice(v)
    if ids:
        refs = _job_refs(ids)
    else:
        name = next(v for k, v in pairs if _is_key(k, "JobName", 4) or _is_key(k, "Name", 2))
        refs = _refs_by_name(name, user[-1] if user else None)
    try:
        reply = call({"op": "update_job", "jobs": refs, "changes": changes})
    except RequestError as exc:
        if exc.code == "update_not_supported":
            raise _err(f"{exc.message}\nRequest aborted") from None
        raise _err(f"slurm_update error: {exc.message}") from None
    errors = reply.get("errors") or []
    if errors:
        raise CliExit([f"{e['job']}: {e['error']}" for e in errors], 1)
    return 0


def _refs_by_name(name: str, user: str | None) -> list[dict]:
    """The jobs called ``name`` (of ``user`` when given): scontrol's _job_name2id."""
    uid = None
    if user is not None:
        import pwd
        try:
            uid = int(user) if user.isdigit() else pwd.getpwnam(user).pw_uid
        except KeyError:
            raise _err(f"Invalid UserID: {user}\nRequest aborted") from None
    reply = call({"op": "jobs", "fields": ["job_id", "name", "uid", "array_job_id",
                                           "array_task_id"]})
    refs = []
    for j in reply["jobs"]:
        if j["name"] != name or (uid is not None and j["uid"] != uid):
            continue
        if j.get("array_task_id") is not None:
            refs.append({"job_id": j["array_job_id"], "task": j["array_task_id"]})
        else:
            refs.append({"job_id": j["job_id"], "task": None})
    if not refs:
        raise _err(f"scontrol: error: No jobs with name '{name}'" if uid is None else
                   f"scontrol: error: No jobs with user ID {uid} and name '{name}'")
    return refs


def reconfigure(rest: list[str], opts: dict) -> int:
    """``scontrol reconfigure``: the controller re-reads its configuration files and applies
    what changed, or refuses all of it (muster.controller.reconfig). Silent on success, as
    Slurm's; a refusal prints ``slurm_reconfigure error: <why>`` (``-Q`` keeps it quiet)."""
    if rest:
        raise _err("too many arguments for keyword:reconfigure")
    from muster.common.errors import RequestError
    try:
        reply = call({"op": "reconfigure"})
    except RequestError as exc:
        raise CliExit([] if opts.get("quiet") else
                      [f"slurm_reconfigure error: {exc.message}"], 1) from None
    if opts.get("verbose"):
        for line in reply.get("changes") or ["no change"]:
            print(f"scontrol: {line}", file=sys.stderr)
    return 0


def _parse(argv: list[str]) -> tuple[dict, list[str]]:
    """Options and operands. After ``setdebugflags`` nothing is an option: its ``-FLAG``
    argument is an operand (scontrol stops at the first operand there)."""
    if any(a.lower() == "setdebugflags" for a in argv):  # (the import costs the others)
        from muster.cli.setdebug import posix_parse
        got = posix_parse(PARSER, argv)
        if got is not None:
            return got
    return PARSER.parse_into(argv)


def _main() -> int:
    argv = sys.argv[1:]
    opts, operands = _parse(argv)
    # --federation, --local, --sibling: no federation, so every job is local and has no
    # siblings; Slurm's scontrol prints the same outside a federation
    check_clusters("scontrol", opts.get("clusters"))
    if not operands:  # scontrol would read commands from stdin; Muster prints its help
        from muster.cli.helptext import help_text
        sys.stdout.write(help_text("scontrol"))
        return 1
    cmd, rest = operands[0].lower(), operands[1:]
    if cmd == "show":
        if not rest:
            raise _err("scontrol: error: too few arguments for keyword:show")
        return show(rest[0], rest[1] if len(rest) > 1 else None, opts)
    if cmd in ("hold", "uhold"):
        return _action("hold", _job_refs(rest), {"user_hold": cmd == "uhold"})
    if cmd == "release":
        return _action("release", _job_refs(rest))
    if cmd in ("requeue", "requeuehold"):
        rest = [r for r in rest if r.lower() not in ("incomplete",) and not r.lower().startswith("state=")]
        _outlive_own_job()
        return _action("requeue", _job_refs(rest), {"hold": cmd == "requeuehold"})
    if cmd == "update":
        if rest and rest[0].lower() in ("reservation", "res", "reservations"):
            return reservation_cmd("update", rest[1:])
        return update(rest)
    if cmd in ("create", "delete"):
        if rest and rest[0].lower() in ("reservation", "res", "reservations"):
            rest = rest[1:]
        elif not (rest and rest[0].lower().startswith(("reservationname=", "reservation="))):
            raise _err(f"invalid entity: {' '.join(rest[:1]) or '(null)'} for keyword: {cmd}")
        return reservation_cmd(cmd, rest)
    if len(cmd) >= 3 and "reconfigure".startswith(cmd):
        return reconfigure(rest, opts)
    if cmd in ("ping", "takeover"):  # each SlurmctldHost (muster.cli.ctldping)
        from muster.cli import ctldping
        return ctldping.ping() if cmd == "ping" else ctldping.takeover(rest)
    if cmd == "token":
        msg: dict = {"op": "token"}
        for tok in rest:
            k, _, v = tok.partition("=")
            if k.lower() == "lifespan" and v.isdigit():
                msg["lifespan"] = int(v)
            elif k.lower() == "username" and v:
                msg["username"] = v
            else:
                raise _err(f"scontrol: error: Invalid parameter: {tok}")
        from muster.common.errors import RequestError
        try:
            print(f"SLURM_JWT={call(msg)['token']}")
        except RequestError as exc:
            raise _err(f"scontrol: error: {exc.message}") from None
        return 0
    if cmd in ("setdebug", "setdebugflags"):
        from muster.cli import setdebug
        return setdebug.setdebug(rest) if cmd == "setdebug" else setdebug.setdebugflags(rest)
    if cmd in ("version", "help"):
        from muster.cli.getopt import InfoExit
        raise InfoExit("scontrol", cmd)
    if cmd == "top":
        return 0
    raise _err(f"invalid keyword: {operands[0]}")


def main() -> None:
    run_main("scontrol", _main)


if __name__ == "__main__":
    main()
