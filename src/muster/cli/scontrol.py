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
    from muster.cli import fmt_json
    sys.stdout.write(fmt_json.dumps(doc) if opts.get("json") else fmt_json.to_yaml(doc))
    return 0


def show(what: str, arg: str | None, opts: dict) -> int:
    from muster.cli import fmt_scontrol
    one = bool(opts.get("oneliner"))
    w = what.lower()
    if w in ("job", "jobs", "jobid"):
        from muster.common.errors import InvalidJobId
        msg = {"op": "jobs"}
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
            from muster.cli import fmt_json
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
            from muster.cli import fmt_json
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
            from muster.cli import fmt_json
            return _structured(opts, fmt_json.partitions_json(parts, 0))
        sys.stdout.write("".join(fmt_scontrol.show_partition(p, one_liner=one)
                                 + ("" if one else "\n") for p in parts))
        return 0
    if w in ("reservation", "reservations", "res", "reservationname"):
        return show_reservations(arg, one)
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


def update(tokens: list[str]) -> int:
    from muster.common.errors import RequestError
    if any(t.lower().startswith(("reservationname=", "reservation=")) for t in tokens):
        return reservation_cmd("update", tokens)
    kv = {}
    for tok in tokens:
        k, sep, v = tok.partition("=")
        if not sep:
            raise _err(f"scontrol: error: Invalid input: {tok}\nRequest aborted")
        kv[k] = v
    lower = {k.lower(): k for k in kv}
    if "jobid" in lower or "job" in lower:
        key = lower.get("jobid") or lower["job"]
        refs = _job_refs([kv.pop(key)])
        try:
            call({"op": "update_job", "jobs": refs, "changes": kv})
        except RequestError as exc:
            raise _err(f"slurm_update error: {exc.message}") from None
        return 0
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
        msg = {"op": "token"}
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
