"""scontrol: show and change jobs, nodes, partitions; hostlist utilities."""

from __future__ import annotations

import os
import sys

from muster.cli.client import call, run_main
from muster.cli.getopt import CliExit, GetoptParser, OptSpec

PARSER = GetoptParser("scontrol", [
    OptSpec("a", "all"), OptSpec("d", "details"), OptSpec("F", "future"), OptSpec("h", "help"),
    OptSpec(None, "hide"), OptSpec("M", "clusters", 1), OptSpec("o", "oneliner"),
    OptSpec("Q", "quiet"), OptSpec("u", "uid", 1), OptSpec(None, "usage"),
    OptSpec("v", "verbose", action="count"), OptSpec("V", "version"), OptSpec(None, "json"),
    OptSpec(None, "yaml"),
], exit_code=1)


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
            return _structured(opts, fmt_json.squeue_json(jobs, reply["now"]))
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
    if w in ("step", "steps", "stepid"):
        return show_steps(arg, one)
    if w in ("config", "configuration"):
        reply = call({"op": "config"})
        sys.stdout.write(fmt_scontrol.show_config([tuple(x) for x in reply["config"]], reply["now"]))
        print()
        print("Slurmctld(primary) at localhost is UP")
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


def show_steps(arg: str | None, one: bool) -> int:
    """scontrol show step[s] [N[.S]]: the running steps, the batch step included."""
    from muster.cli import fmt_scontrol
    msg: dict = {"op": "steps"}
    want = None
    if arg:
        want = _step_ref(arg)
        msg["job_ids"] = [want[0]]
    steps = call(msg)["steps"]
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


RESV_KEYS = {"reservationname": "name", "reservation": "name", "resv": "name", "name": "name",
             "starttime": "start", "endtime": "end", "duration": "duration", "nodes": "nodes",
             "nodecnt": "node_cnt", "nodecount": "node_cnt", "users": "users", "user": "users",
             "accounts": "accounts", "account": "accounts", "flags": "flags", "tres": "tres",
             "partitionname": "partition", "partition": "partition", "corecnt": "core_cnt"}


def parse_reservation(tokens: list[str], now: int) -> dict:
    """``ReservationName=x StartTime=now Duration=60 Users=a Nodes=... Flags=MAINT`` → spec.
    Raises ValueError with the offending token."""
    from muster.common.hostlist import expand
    from muster.common.timefmt import parse_datetime, parse_time_limit
    spec: dict = {}
    for tok in tokens:
        k, sep, v = tok.partition("=")
        opx = ""
        if k.endswith(("+", "-")):
            k, opx = k[:-1], k[-1]
        key = RESV_KEYS.get(k.lower())
        if not sep or key is None:
            raise ValueError(tok)
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
        except ValueError:
            raise ValueError(tok) from None
        except Exception:
            raise ValueError(tok) from None
    if "core_cnt" in spec:
        spec.setdefault("tres", {})["cpu"] = spec.pop("core_cnt")
    return spec


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
        raise _err(f"scontrol: error: Invalid input: {exc}\nRequest aborted") from None
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


def _main() -> int:
    argv = sys.argv[1:]
    opts, operands = PARSER.parse_into(argv)
    if opts.get("version"):
        from muster import SLURM_COMPAT_VERSION
        print(f"slurm {SLURM_COMPAT_VERSION} (muster)")
        return 0
    if opts.get("help") or opts.get("usage") or not operands:
        print("Usage: scontrol [-adhoQv] COMMAND ...\n  show job|node|partition|config|hostnames|"
              "hostlist|hostlistsorted [ID]\n  hold|uhold|release|requeue|requeuehold JOBID\n"
              "  update JobId=ID Key=Value... | NodeName=NODES State=DRAIN|RESUME Reason=...\n  ping")
        return 0 if operands or opts.get("help") or opts.get("usage") else 1
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
    if cmd == "ping":
        try:
            call({"op": "ping"})
            print("Slurmctld(primary) at localhost is UP")
            return 0
        except Exception:
            print("Slurmctld(primary) at localhost is DOWN")
            return 1
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
    if cmd == "version":
        from muster import SLURM_COMPAT_VERSION
        print(f"slurm {SLURM_COMPAT_VERSION} (muster)")
        return 0
    if cmd == "top":
        return 0
    raise _err(f"invalid keyword: {operands[0]}")


def main() -> None:
    run_main("scontrol", _main)


if __name__ == "__main__":
    main()
