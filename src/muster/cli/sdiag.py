"""sdiag: the controller's statistics in Slurm's sdiag layout.

Sections as Slurm 22.05 prints them (tests/data/slurm-ref/sdiag.txt): thread and agent
counts, job counters since the last reset, the main scheduler's and backfill's cycles (in
microseconds), RPCs by message type and by user. What Muster has no counterpart for reads 0
(DBD agent queue: accounting is written in the controller's own commit; agent threads: the
controller has one event loop). ``Server thread count`` is the connection handlers running,
``Agent queue size`` the messages waiting for nodes whose agent is away.

``-r/--reset`` zeroes the counters (root and SlurmUser). ``-a`` changes nothing: every section
is always printed. ``-i``/``-t``/``-T`` sort the RPC tables by id, total time, average time
(default: count).
"""

from __future__ import annotations

import sys

from muster.cli.client import call, run_main
from muster.cli.getopt import CliExit, GetoptParser, OptSpec

PARSER = GetoptParser("sdiag", [
    OptSpec("a", "all"), OptSpec(None, "help"), OptSpec("i", "sort-by-id"),
    OptSpec("M", "cluster", 1), OptSpec("r", "reset"), OptSpec("t", "sort-by-time"),
    OptSpec("T", "sort-by-time2"), OptSpec(None, "usage"), OptSpec("V", "version"),
], exit_code=1, info="first")

STARS = "*" * 55


def _when(ts: int) -> str:
    from muster.common.timefmt import fmt_ctime
    return f"{fmt_ctime(ts)} ({ts})"


def _user(uid: int) -> str:
    import pwd
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _sorted(rows: list, key: str) -> list:
    """RPC rows [name, id, count, total_us, ...] in sdiag's order for ``key`` (ties: name,
    so the order is stable)."""
    def ave(r):
        return r[3] // r[2] if r[2] else 0
    keys = {"id": lambda r: (r[1], r[0]), "time": lambda r: (-r[3], r[0]),
            "time2": lambda r: (-ave(r), r[0])}
    return sorted(rows, key=keys.get(key, lambda r: (-r[2], r[0])))


def _header(r: dict, d: dict, t: int) -> list[str]:
    js = r["job_states"]
    j = d["jobs"]
    return [
        STARS, f"sdiag output at {_when(t)}", f"Data since      {_when(d['since'])}", STARS,
        f"Server thread count:  {r.get('connections', 0)}",
        f"Agent queue size:     {r.get('agent_queue', 0)}",
        f"Agent count:          {r.get('agents_connected', 0)}",
        "Agent thread count:   0", "DBD Agent queue size: 0", "",
        f"Jobs submitted: {j['submitted']}", f"Jobs started:   {j['started']}",
        f"Jobs completed: {j['completed']}", f"Jobs canceled:  {j['canceled']}",
        f"Jobs failed:    {j['failed']}", "",
        f"Job states ts:  {_when(t)}", f"Jobs pending:   {js.get('PENDING', 0)}",
        f"Jobs running:   {js.get('RUNNING', 0)}",
    ]


def _main_sched(d: dict, t: int) -> list[str]:
    last, mx, n, total, depth, queue = d["main"]
    out = ["", "Main schedule statistics (microseconds):", f"\tLast cycle:   {last}",
           f"\tMax cycle:    {mx}", f"\tTotal cycles: {n}"]
    if n:
        out += [f"\tMean cycle:   {total // n}", f"\tMean depth cycle:  {depth // n}"]
    if t - d["since"] > 60:
        out.append(f"\tCycles per minute: {n // ((t - d['since']) // 60)}")
    out.append(f"\tLast queue length: {queue}")
    return out


def _backfill(d: dict) -> list[str]:
    jobs, n, when, last, mx, total, depth, depth_sum = d["backfill"]
    out = ["", "Backfilling stats",
           f"\tTotal backfilled jobs (since last slurm start): {d['backfilled_since_start']}",
           f"\tTotal backfilled jobs (since last stats cycle start): {jobs}",
           "\tTotal backfilled heterogeneous job components: 0", f"\tTotal cycles: {n}",
           f"\tLast cycle when: {_when(when) if when else 'N/A'}", f"\tLast cycle: {last}",
           f"\tMax cycle:  {mx}"]
    if n:
        out.append(f"\tMean cycle: {total // n}")
    # Muster's backfill tries every job it looks at: "try sched" depth is the same depth
    out += [f"\tLast depth cycle: {depth}", f"\tLast depth cycle (try sched): {depth}"]
    if n:
        out += [f"\tDepth Mean: {depth_sum // n}", f"\tDepth Mean (try depth): {depth_sum // n}"]
    out.append(f"\tLast queue length: {depth}")
    if n:
        out.append(f"\tQueue length mean: {depth_sum // n}")
    out.append("\tLast table size: 0")
    if n:
        out.append("\tMean table size: 0")
    return out


def _rpcs(d: dict, sort: str) -> list[str]:
    out = ["", "Remote Procedure Call statistics by message type"]
    for name, num, count, total, *_ in _sorted(d["rpc_types"], sort):
        ave = total // count if count else 0
        out.append(f"\t{name:<40}({num:5}) count:{count:<6} ave_time:{ave:<6} "
                   f"total_time:{total}")
    out += ["", "Remote Procedure Call statistics by user"]
    users = [[_user(uid), uid, count, total] for uid, count, total in d["rpc_users"]]
    for name, uid, count, total in _sorted(users, sort):
        ave = total // count if count else 0
        out.append(f"\t{name:<16}({uid:8}) count:{count:<6} ave_time:{ave:<6} "
                   f"total_time:{total}")
    out += ["", "Pending RPC statistics", "\tNo pending RPCs"]
    return out


def render(reply: dict, sort: str = "count") -> str:
    """sdiag's text for one ``diag`` reply. The clock-latency line is the controller's own
    measure: 1,000 reads of its clock, timed when it answered."""
    d = reply["sdiag"]
    t = reply["now"]
    clock = ["", f"Latency for 1000 calls to gettimeofday(): {d.get('clock_latency_us', 0)} "
             "microseconds"]
    lines = (_header(reply, d, t) + _main_sched(d, t) + _backfill(d) + clock
             + _rpcs(d, sort))
    return "\n".join(lines) + "\n"


def _main() -> int:
    opts, operands = PARSER.parse_into(sys.argv[1:])
    if operands:
        raise CliExit([f"sdiag: error: Unknown argument: {operands[0]}"], 1)
    if opts.get("reset"):
        from muster.common.errors import RequestError
        try:
            call({"op": "diag_reset"})
        except RequestError as exc:
            # slurm_perror's form; sdiag exits with SLURM_ERROR (-1)
            raise CliExit([f"slurm_reset_statistics: {exc.message}"], 255) from None
        print("Reset scheduling statistics")
        return 0
    sort = ("id" if opts.get("sort_by_id") else "time" if opts.get("sort_by_time")
            else "time2" if opts.get("sort_by_time2") else "count")
    reply = call({"op": "diag"})
    if opts.get("cluster") and opts["cluster"] != reply.get("cluster"):
        raise CliExit([f"sdiag: error: unknown cluster {opts['cluster']!r}: this is "
                       f"{reply.get('cluster')!r}"], 1)
    sys.stdout.write(render(reply, sort))
    return 0


def main() -> None:
    run_main("sdiag", _main)


if __name__ == "__main__":
    main()
