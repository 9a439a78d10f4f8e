"""sinfo output formatting: node/partition records (docs/records.md) -> Slurm's text.

Rows: for every partition (controller order) the nodes are grouped by the values of the
printed *per-node* fields (state, CPUs, memory, GRES, ...); counting/aggregate fields
(%D %C %F %A %N %n %o %e %O) are computed over each group.  Groups are ordered by
partition, then state name descending (sinfo's default ``#P,-t``), then first node.
``-N``: one row per node and partition, in node order; with the built-in ``-N`` formats the
partitions of a node are in name order (as captured), with a user format in partition
order.  A partition with no node left after ``-n`` shows one ``n/a`` row with 0 nodes.
"""
from __future__ import annotations

from muster.cli.fmt_common import parse_format, parse_format_long, render_table
from muster.common.hostlist import compress, expand
from muster.common.timefmt import fmt_ctime, fmt_iso, fmt_limit

__all__ = ["DEFAULT_FORMAT", "LONG_FORMAT", "NODE_FORMAT", "NODE_LONG_FORMAT",
           "SUMMARIZE_FORMAT", "REASONS_FORMAT", "node_state_short", "node_state_long",
           "node_state_complete", "render"]

DEFAULT_FORMAT = "%#P %.5a %.10l %.6D %.6t %N"
SUMMARIZE_FORMAT = "%#P %.5a %.10l %.16F %N"
LONG_FORMAT = "%#P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N"
NODE_FORMAT = "%#N %.6D %.#P %6t"
NODE_LONG_FORMAT = "%#N %.6D %.#P %.11T %4c %.8z %.6m %.8d %.6w %.8f %20E"
REASONS_FORMAT = "%20E %9u %19H %N"

_BUSY = ("MIXED", "ALLOCATED")


def _flags(n):
    return set(n.get("flags") or [])


def _busy(n):
    return n.get("state") in _BUSY or (n.get("cpus_alloc") or 0) > 0


def _suffix(n):
    f = _flags(n)
    if "MAINTENANCE" in f:
        return "$"
    if "REBOOT_ISSUED" in f:
        return "^"
    if "REBOOT_REQUESTED" in f:
        return "@"
    if "POWERING_UP" in f:
        return "#"
    if "POWERING_DOWN" in f:
        return "%"
    if "POWERED_DOWN" in f:
        return "~"
    if "POWER_DOWN" in f:
        return "!"
    if "NOT_RESPONDING" in f:
        return "*"
    if "PLANNED" in f:
        return "-"
    return ""


def _state_pair(n):
    base = n.get("state", "UNKNOWN")
    f = _flags(n)
    if base == "DOWN":
        return "down", "down"
    if "DRAIN" in f:
        if _busy(n) or "COMPLETING" in f:
            return "drng", "draining"
        return "drain", "drained"
    if "FAIL" in f:
        return ("failg", "failing") if _busy(n) else ("fail", "fail")
    if base == "ALLOCATED":
        return ("alloc+", "allocated+") if "COMPLETING" in f else ("alloc", "allocated")
    if base == "MIXED":
        return "mix", "mixed"
    if "COMPLETING" in f:
        return "comp", "completing"
    if "RESERVED" in f and base == "IDLE":
        return "resv", "reserved"
    if base == "IDLE":
        return "idle", "idle"
    if base == "FUTURE":
        return "futr", "future"
    return "unk", "unknown"


def node_state_short(n: dict) -> str:
    return _state_pair(n)[0] + _suffix(n)


def node_state_long(n: dict) -> str:
    return _state_pair(n)[1] + _suffix(n)


def node_state_complete(n: dict) -> str:
    """``StateComplete``: ``idle+drain`` style."""
    parts = [n.get("state", "UNKNOWN").lower()]
    parts += [f.lower() for f in (n.get("flags") or [])]
    return "+".join(parts)


def _avail(p):
    return {"UP": "up", "DOWN": "down", "DRAIN": "drain", "INACTIVE": "inact"}.get(
        (p or {}).get("state", "UP"), "unk") if p else "n/a"


def _cpu_counts(n):
    tot = n.get("cpus", 0)
    if n.get("state") == "DOWN" or _flags(n) & {"DRAIN", "FAIL"}:
        return 0, 0, tot, tot
    a = n.get("cpus_alloc", 0)
    return a, tot - a, 0, tot


def _node_counts(n):
    if n.get("state") == "DOWN" or _flags(n) & {"DRAIN", "FAIL"}:
        return 0, 0, 1, 1
    if _busy(n):
        return 1, 0, 0, 1
    return 0, 1, 0, 1


def _range(vals, fmt=str):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "N/A"
    lo, hi = min(vals), max(vals)
    return fmt(lo) if lo == hi else f"{fmt(lo)}-{fmt(hi)}"


def _sum4(rows):
    return "/".join(str(sum(r[i] for r in rows)) for i in range(4))


def _job_size(p):
    lo = max(1, p.get("min_nodes") or 0)
    hi = p.get("max_nodes")
    return f"{lo}-{'infinite' if hi is None else hi}"


def _uniq(it):
    return list(dict.fromkeys(it))


def _reason(n):
    return n.get("reason") or "none"


# code -> (header, kind, fn).  kind "n": per node value (grouping key);
# "a": aggregate over the group's nodes; "p": partition value.
def _active(n):
    """ActiveFeatures (older records carry only ``features``: the same list)."""
    return n.get("active_features", n.get("features"))


def _pname(p, default_mark=True):
    if p is None:
        return ""
    return p["name"] + ("*" if default_mark and p.get("default") else "")


_CODES = {
    "P": ("PARTITION", "p", lambda p: _pname(p)),
    "R": ("PARTITION", "p", lambda p: _pname(p, False)),
    "a": ("AVAIL", "p", _avail),
    "l": ("TIMELIMIT", "p", lambda p: fmt_limit(p.get("max_time"), unlimited="infinite") if p else "n/a"),
    "L": ("DEFAULTTIME", "p", lambda p: fmt_limit(p.get("default_time"), unlimited="n/a") if p else "n/a"),
    "s": ("JOB_SIZE", "p", lambda p: _job_size(p) if p else "n/a"),
    "r": ("ROOT", "p", lambda p: "no"),
    "h": ("OVERSUBSCRIBE", "p", lambda p: (p.get("over_subscribe") or "NO") if p else "n/a"),
    "g": ("GROUPS", "p", lambda p: "all" if not p or p.get("allow_groups", "ALL") == "ALL"
          else p["allow_groups"]),
    "p": ("PRIO_TIER", "p", lambda p: str(p.get("priority_tier", 1)) if p else "n/a"),
    "I": ("PRIO_JOB_FACTOR", "p", lambda p: str(p.get("priority_job_factor", 1)) if p else "n/a"),
    "t": ("STATE", "n", node_state_short),
    "T": ("STATE", "n", node_state_long),
    "c": ("CPUS", "n", lambda n: str(n.get("cpus", 0))),
    "m": ("MEMORY", "n", lambda n: str(n.get("real_memory", 0))),
    "G": ("GRES", "n", lambda n: n.get("gres") or "(null)"),
    "f": ("AVAIL_FEATURES", "n", lambda n: n.get("features") or "(null)"),
    "b": ("ACTIVE_FEATURES", "n", lambda n: _active(n) or "(null)"),
    "E": ("REASON", "n", _reason),
    "u": ("USER", "n", lambda n: n.get("reason_user") or "Unknown"),
    "U": ("USER", "n", lambda n: f"{n.get('reason_user') or 'Unknown'}({n.get('reason_uid', 0)})"),
    "H": ("TIMESTAMP", "n", lambda n: fmt_iso(n.get("reason_time"))),
    "w": ("WEIGHT", "n", lambda n: str(n.get("weight", 1))),
    "z": ("S:C:T", "n", lambda n: f"{n.get('sockets', 1)}:{n.get('cores_per_socket', 1)}:"
                                  f"{n.get('threads_per_core', 1)}"),
    "X": ("SOCKETS", "n", lambda n: str(n.get("sockets", 1))),
    "Y": ("CORES", "n", lambda n: str(n.get("cores_per_socket", 1))),
    "Z": ("THREADS", "n", lambda n: str(n.get("threads_per_core", 1))),
    "d": ("TMP_DISK", "n", lambda n: str(n.get("tmp_disk", 0))),
    "v": ("VERSION", "n", lambda n: n.get("version") or "N/A"),
    # aggregates
    "D": ("NODES", "a", lambda ns: str(len(ns))),
    "N": ("NODELIST", "a", lambda ns: compress([n["name"] for n in ns])),
    "n": ("HOSTNAMES", "a", lambda ns: compress(_uniq(n.get("hostname") or n["name"] for n in ns))),
    "o": ("NODE_ADDR", "a", lambda ns: compress(_uniq(n.get("addr") or n["name"] for n in ns))),
    "C": ("CPUS(A/I/O/T)", "a", lambda ns: _sum4([_cpu_counts(n) for n in ns])),
    "F": ("NODES(A/I/O/T)", "a", lambda ns: _sum4([_node_counts(n) for n in ns])),
    "A": ("NODES(A/I)", "a", lambda ns: "/".join(_sum4([_node_counts(n) for n in ns]).split("/")[:2])),
    "e": ("FREE_MEM", "a", lambda ns: _range([n.get("free_mem") for n in ns])),
    "O": ("CPU_LOAD", "a", lambda ns: _range([n.get("cpu_load") for n in ns], lambda v: "%.2f" % v)),
}

_LONG = {
    "partition": ("PARTITION", "P"), "partitionname": ("PARTITION", "R"),
    "available": ("AVAIL", "a"), "time": ("TIMELIMIT", "l"),
    "defaulttime": ("DEFAULTTIME", "L"), "size": ("JOB_SIZE", "s"), "root": ("ROOT", "r"),
    "oversubscribe": ("OVERSUBSCRIBE", "h"), "groups": ("GROUPS", "g"),
    "prioritytier": ("PRIO_TIER", "p"), "priorityjobfactor": ("PRIO_JOB_FACTOR", "I"),
    "nodes": ("NODES", "D"), "statecompact": ("STATE", "t"), "statelong": ("STATE", "T"),
    "statecomplete": ("STATECOMPLETE", "_sc"), "nodelist": ("NODELIST", "N"),
    "nodehost": ("HOSTNAMES", "n"), "nodeaddr": ("NODE_ADDR", "o"),
    "cpus": ("CPUS", "c"), "cpusstate": ("CPUS(A/I/O/T)", "C"),
    "nodeai": ("NODES(A/I)", "A"), "nodeaiot": ("NODES(A/I/O/T)", "F"),
    "memory": ("MEMORY", "m"), "allocmem": ("ALLOCMEM", "_am"), "freemem": ("FREE_MEM", "e"),
    "cpusload": ("CPU_LOAD", "O"), "gres": ("GRES", "G"), "gresused": ("GRES_USED", "_gu"),
    "features": ("AVAIL_FEATURES", "f"), "featuresact": ("ACTIVE_FEATURES", "b"),
    "reason": ("REASON", "E"), "user": ("USER", "u"), "userlong": ("USER", "U"),
    "timestamp": ("TIMESTAMP", "H"), "weight": ("WEIGHT", "w"),
    "socketcorethread": ("S:C:T", "z"), "sockets": ("SOCKETS", "X"),
    "cores": ("CORES", "Y"), "threads": ("THREADS", "Z"), "disk": ("TMP_DISK", "d"),
    "version": ("VERSION", "v"), "port": ("PORT", "_port"),
}
_EXTRA = {
    "_sc": ("n", node_state_complete),
    "_am": ("n", lambda n: str(n.get("mem_alloc", 0))),
    "_gu": ("n", lambda n: n.get("gres_used") or "(null)"),
    "_port": ("n", lambda n: str(n.get("port", 0))),
}


def _spec(code):
    """(kind, fn) for a field code; unknown -> per-partition empty string."""
    if code in _CODES:
        return _CODES[code][1:]
    if code in _EXTRA:
        return _EXTRA[code]
    return "p", lambda p: ""


def _fields(fmt, fmt_long):
    if fmt_long is not None:
        names = {k: k for k in _LONG}
        fields = parse_format_long(fmt_long, names)
        titles = [_LONG[f.code][0] for f in fields]
        for f in fields:
            f.code = _LONG[f.code][1]
        return fields, "", titles
    fields, tail = parse_format(fmt)
    return fields, tail, [_CODES[f.code][0] if f.code in _CODES else "" for f in fields]


def _row(fields, part, nodes):
    vals = []
    for f in fields:
        kind, fn = _spec(f.code)
        if kind == "p":
            vals.append(fn(part))
        elif kind == "a":
            vals.append(fn(nodes))
        else:
            vals.append(fn(nodes[0]) if nodes else "n/a")
    return vals


def _na_row(fields, part):
    vals = []
    for f in fields:
        kind, fn = _spec(f.code)
        if kind == "p":
            vals.append(fn(part))
        elif f.code in ("D",):
            vals.append("0")
        elif f.code in ("N", "n", "o"):
            vals.append("")
        elif f.code in ("C", "F"):
            vals.append("0/0/0/0")
        else:
            vals.append("n/a")
    return vals


def render(partitions: list[dict], nodes: list[dict], *, fmt: str | None = None,
           fmt_long: str | None = None, node_oriented: bool = False, long: bool = False,
           summarize: bool = False, reasons: bool = False, noheader: bool = False,
           now: int = 0, partition_filter=None, node_filter=None,
           state_filter=None, hidden: bool = False) -> str:
    """Return sinfo's output.  ``hidden`` (-a; --hide, the default, clears it): hidden
    partitions are shown too.  ``partition_filter``: iterable of partition names;
    ``node_filter``: hostlist string or iterable of node names; ``state_filter``: iterable
    of lower-case state names (short or long, with or without the ``*``-style suffix) or
    a callable(node) -> bool.  Unknown ``-O`` name -> ValueError(name)."""
    user_fmt = fmt is not None or fmt_long is not None
    if not user_fmt:
        if reasons:
            fmt = REASONS_FORMAT
        elif summarize:
            fmt = SUMMARIZE_FORMAT
        elif node_oriented:
            fmt = NODE_LONG_FORMAT if long else NODE_FORMAT
        else:
            fmt = LONG_FORMAT if long else DEFAULT_FORMAT
    fields, tail, titles = _fields(fmt, fmt_long)

    parts = [p for p in partitions if hidden or not p.get("hidden")]
    if partition_filter is not None:
        pf = set(partition_filter)
        parts = [p for p in partitions if p["name"] in pf]
    by_name = {n["name"]: n for n in nodes}
    order = {n["name"]: i for i, n in enumerate(nodes)}
    sel = list(nodes)
    if node_filter is not None:
        names = expand(node_filter) if isinstance(node_filter, str) else list(node_filter)
        wanted = set(names)
        sel = [n for n in nodes if n["name"] in wanted]
    if state_filter is not None:
        if callable(state_filter):
            ok = state_filter
        else:
            sf = {s.lower() for s in state_filter}

            def ok(n):
                cands = {node_state_short(n), node_state_long(n), *_state_pair(n),
                         n.get("state", "").lower(), *[f.lower() for f in _flags(n)]}
                return bool(cands & sf)
        sel = [n for n in sel if ok(n)]
    sel_names = {n["name"] for n in sel}

    rows: list[list[str]] = []
    if reasons:
        # one row per (reason, user, time) group of nodes that are down/drained/failed
        groups: dict = {}
        for n in sel:
            if not (n.get("reason") or n.get("state") == "DOWN" or _flags(n) & {"DRAIN", "FAIL"}):
                continue
            key = tuple(_row(fields, None, [n])[i] for i, f in enumerate(fields)
                        if _spec(f.code)[0] == "n")
            groups.setdefault(key, []).append(n)
        for ns in groups.values():
            rows.append(_row(fields, None, ns))
    elif node_oriented:
        for n in sel:
            pnames = [p for p in parts if p["name"] in (n.get("partitions") or [])]
            if not user_fmt:
                pnames.sort(key=lambda p: p["name"])
            for p in pnames:
                rows.append(_row(fields, p, [n]))
    else:
        state_idx = [i for i, f in enumerate(fields) if f.code in ("t", "T")]
        per_part = any(_spec(f.code)[0] == "p" for f in fields)
        if per_part:
            buckets = [(p, [by_name[x] for x in p.get("node_names") or [] if x in by_name])
                       for p in parts]
        else:
            # no partition column: nodes of all shown partitions, each node once
            seen: dict = {}
            for p in parts:
                for x in p.get("node_names") or []:
                    if x in by_name:
                        seen.setdefault(x, by_name[x])
            buckets = [(parts[0] if parts else {}, list(seen.values()))]
        for p, members in buckets:
            members = [n for n in members if n["name"] in sel_names]
            if not members:
                if state_filter is None and per_part:
                    rows.append(_na_row(fields, p))
                continue
            groups = {}
            for n in sorted(members, key=lambda n: order[n["name"]]):
                key = tuple(_row(fields, p, [n])[i] for i, f in enumerate(fields)
                            if _spec(f.code)[0] == "n")
                groups.setdefault(key, []).append(n)
            grows = [_row(fields, p, ns) for ns in groups.values()]
            if state_idx:
                si = state_idx[0]
                grows.sort(key=lambda r: r[si], reverse=True)
            rows.extend(grows)

    lines = []
    if long and not noheader:
        lines.append(fmt_ctime(now))
    lines.extend(render_table(fields, tail, titles, rows, show_header=not noheader,
                              min_max_width={"N": len(compress([n["name"] for n in nodes]))}))
    return "".join(line + "\n" for line in lines)
