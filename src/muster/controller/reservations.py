"""Advance reservations (``scontrol create|update|delete reservation``), durable.

A reservation holds whole nodes for ``[start, end)``. The scheduling shell hands the active
and future ones to the core as ``ReservationView``: jobs that name one (``--reservation``)
may use only its nodes inside its window; other jobs cannot use those nodes during it
(and a job whose time limit would overlap the window cannot start there).

Flags: MAINT, IGNORE_JOBS (may be created on busy nodes), OVERLAP, DAILY/WEEKLY (the window
moves on by a day/week when it ends instead of the reservation being removed), FLEX
(accepted), PURGE_COMP[=time] (removed once its jobs are done and it stayed idle that long,
default 5 minutes). A non-recurring reservation is removed when it ends.
"""

from __future__ import annotations

from muster.common.errors import RequestError
from muster.core.snapshot import ReservationView

KNOWN_FLAGS = {"MAINT", "IGNORE_JOBS", "OVERLAP", "DAILY", "WEEKLY", "WEEKDAY", "WEEKEND",
               "HOURLY", "FLEX", "MAGNETIC", "PURGE_COMP", "NO_HOLD_JOBS_AFTER", "ANY_NODES",
               "REPLACE", "REPLACE_DOWN", "STATIC_ALLOC", "TIME_FLOAT", "PART_NODES",
               "SPEC_NODES", "LICENSE_ONLY", "USER_DELETE"}
PERIOD = {"HOURLY": 3600, "DAILY": 86400, "WEEKLY": 7 * 86400}


def _err(text: str) -> RequestError:
    return RequestError(f"Error creating the reservation: {text}", "invalid_request")


def _flag_name(f: str) -> str:
    return f.split("=", 1)[0].upper()


def _canon_flag(f: str) -> str:
    """A flag as slurmctld keeps and shows it: its name in capitals (``maint`` → ``MAINT``),
    a value (``PURGE_COMP=...``) as given."""
    name, sep, value = f.partition("=")
    return name.upper() + sep + value


class Reservations:
    def __init__(self, store, cfg, state):
        self.store = store
        self.cfg = cfg
        self.state = state
        self.resv: dict[str, dict] = {r["name"]: r for r in store.load_reservations()}
        self.seq = int(store.get_meta("resv_seq", "0") or 0)
        self.generation = 0

    def get(self, name: str) -> dict | None:
        return self.resv.get(name)

    @staticmethod
    def admits(r: dict, user: str, account: str) -> bool:
        users, accts = r.get("users") or [], r.get("accounts") or []
        if any(u.startswith("-") for u in users):
            if ("-" + user) in users:
                return False
            if not accts:
                return True
        if not users and not accts:
            return True
        return user in users or account in accts

    # ---- node choice ---------------------------------------------------------------------
    def _busy_nodes(self, start: int) -> set[str]:
        out: set[str] = set()
        for j in self.state.jobs.values():
            if j.holds_resources and j.alloc:
                end = j.end_time if j.state == "RUNNING" else None
                if j.state == "RUNNING" and j.time_limit is None:
                    end = None
                if end is None or end > start:
                    out.update(a.node for a in j.alloc)
        return out

    def _overlapping(self, start: int, end: int, skip: str | None = None) -> set[str]:
        out = set()
        for r in self.resv.values():
            if r["name"] != skip and r["start"] < end and start < r["end"]:
                out.update(r["nodes"])
        return out

    def _choose(self, rec: dict, node_cnt: int | None, tres: dict, nodes_req: list[str] | None,
                skip: str | None = None) -> list[str]:
        flags = {_flag_name(f) for f in rec["flags"]}
        order = self.cfg.node_order()
        if rec.get("partition"):
            pool = list(self.cfg.partitions[rec["partition"]].nodes)
        else:
            pool = sorted(self.cfg.nodes, key=order.__getitem__)
        busy = set() if "IGNORE_JOBS" in flags else self._busy_nodes(rec["start"])
        taken = set() if flags & {"OVERLAP", "MAINT"} else self._overlapping(rec["start"], rec["end"], skip)
        if nodes_req is not None:
            if set(nodes_req) & taken:
                raise _err("Requested reservation overlaps with another reservation")
            if set(nodes_req) & busy:
                raise _err("Requested nodes are busy")
            return sorted(set(nodes_req), key=order.__getitem__)
        free = [n for n in pool if n not in busy and n not in taken
                and not self.state.nodes[n].down]
        out: list[str] = []
        gpus_need = tres.get("gres/gpu", 0)
        cpus_need = tres.get("cpu", 0)
        want = node_cnt or 0
        g = c = 0
        for n in free:
            if len(out) >= want and g >= gpus_need and c >= cpus_need:
                break
            rt = self.state.nodes[n]
            if gpus_need and not rt.gpu_indices and not want:
                continue
            out.append(n)
            g += len(rt.gpu_indices)
            c += rt.cpus
        if len(out) < want or g < gpus_need or c < cpus_need or not out:
            if self._overlapping(rec["start"], rec["end"], skip) and not taken:
                raise _err("Requested reservation overlaps with another reservation")
            raise _err("Requested nodes are busy")
        return out

    # ---- operations ---------------------------------------------------------------------
    def create(self, spec: dict, now: int) -> str:
        name = spec.get("name")
        users = [u for u in (spec.get("users") or []) if u]
        accounts = [a for a in (spec.get("accounts") or []) if a]
        if not users and not accounts:
            raise _err("Users or accounts must be specified")
        if name and name in self.resv:
            raise _err("Duplicate reservation name")
        flags = [_canon_flag(f) for f in (spec.get("flags") or []) if f]
        for f in flags:
            if _flag_name(f) not in KNOWN_FLAGS:
                raise _err(f"Invalid flag: {f}")
        start = spec.get("start")
        if start is None:
            raise _err("StartTime must be specified")
        start = max(int(start), now)
        end = spec.get("end")
        if end is None and spec.get("duration") is not None:
            d = spec["duration"]
            end = start + (365 * 86400 if d is None or d < 0 else int(d) * 60)
        if end is None:
            raise _err("Duration or EndTime must be specified")
        if end <= start:
            raise _err("Invalid reservation time window")
        part = spec.get("partition")
        if part and part not in self.cfg.partitions:
            raise _err("Invalid partition name specified")
        nodes = spec.get("nodes")
        if nodes is not None:
            if nodes == ["ALL"]:
                nodes = list(self.cfg.nodes) if not part else list(self.cfg.partitions[part].nodes)
            for n in nodes:
                if n not in self.cfg.nodes:
                    raise _err(f"Invalid node name specified: {n}")
        tres = spec.get("tres") or {}
        node_cnt = spec.get("node_cnt")
        if nodes is None and not node_cnt and not tres:
            raise _err("Nodes, NodeCnt, CoreCnt or TRES must be specified")
        if not name:
            self.seq += 1
            name = f"{(users or accounts)[0].lstrip('-')}_{self.seq}"
            while name in self.resv:
                self.seq += 1
                name = f"{(users or accounts)[0].lstrip('-')}_{self.seq}"
        rec = {"name": name, "start": start, "end": end, "users": users, "accounts": accounts,
               "flags": flags, "partition": part, "node_cnt": node_cnt,
               "tres_req": tres, "created": now, "last_used": None}
        rec["nodes"] = self._choose(rec, node_cnt, tres, nodes)
        with self.store.transaction():
            self.store.set_meta("resv_seq", str(self.seq))
            self._put(rec)
        return name

    def update(self, spec: dict, now: int) -> None:
        name = spec.get("name")
        r = self.resv.get(name) if isinstance(name, str) else None
        if r is None:
            raise RequestError("Reservation request invalid", "invalid_request")
        rec = dict(r)
        for key in ("users", "accounts", "flags"):
            op = spec.get(key + "_op")
            if spec.get(key) is not None:
                vals = [_canon_flag(v) if key == "flags" else v for v in spec[key] if v]
                if op == "+":
                    rec[key] = list(dict.fromkeys(rec[key] + vals))
                elif op == "-":
                    rec[key] = [v for v in rec[key] if v not in vals]
                else:
                    rec[key] = vals
        if spec.get("start") is not None:
            dur = rec["end"] - rec["start"]
            rec["start"] = int(spec["start"])
            if spec.get("end") is None and spec.get("duration") is None:
                rec["end"] = rec["start"] + dur
        if spec.get("end") is not None:
            rec["end"] = int(spec["end"])
        if spec.get("duration") is not None:
            rec["end"] = rec["start"] + int(spec["duration"]) * 60
        if rec["end"] <= rec["start"]:
            raise RequestError("Error updating the reservation: Invalid reservation time window",
                               "invalid_request")
        if spec.get("nodes") is not None or spec.get("node_cnt") is not None:
            nodes = spec.get("nodes")
            if nodes == ["ALL"]:
                nodes = list(self.cfg.nodes)
            try:
                rec["nodes"] = self._choose(rec, spec.get("node_cnt"), rec.get("tres_req") or {},
                                            nodes, skip=name)
            except RequestError as exc:
                raise RequestError(exc.message.replace("creating", "updating"), exc.code) from None
        self._put(rec)

    def delete(self, name: str) -> None:
        if name not in self.resv:
            raise RequestError("Reservation request invalid", "invalid_request")
        self._delete(name)

    def _put(self, rec: dict) -> None:
        self.resv[rec["name"]] = rec
        self.store.put_reservation(rec)
        self.generation += 1

    def _delete(self, name: str) -> None:
        self.resv.pop(name, None)
        self.store.delete_reservation(name)
        self.generation += 1

    def due(self, t: int) -> bool:
        """Whether :meth:`tick` has anything to do at ``t``: a reservation ended, or a started
        PURGE_COMP one is watched. A pure read."""
        return any(t >= r["end"] or (r["start"] <= t and any(
            _flag_name(f) == "PURGE_COMP" for f in r["flags"])) for r in self.resv.values())

    def tick(self, t: int, in_use: dict[str, int]) -> None:
        """The reservations' clock event, run by the controller before a scheduling pass in
        its own transaction (scheduling.advance; never while building a snapshot): end or
        roll over reservations; ``in_use`` = reservation → pending/running jobs."""
        for name, r in list(self.resv.items()):
            flags = {_flag_name(f): f for f in r["flags"]}
            if t >= r["end"]:
                period = next((PERIOD[f] for f in ("HOURLY", "DAILY", "WEEKLY") if f in flags), 0)
                if period:
                    rec = dict(r)
                    while rec["end"] <= t:
                        rec["start"] += period
                        rec["end"] += period
                    self._put(rec)
                else:
                    self._delete(name)
                continue
            if "PURGE_COMP" in flags and r["start"] <= t:
                spec = flags["PURGE_COMP"]
                wait = 300
                if "=" in spec:
                    from muster.common.timefmt import parse_time_limit
                    try:
                        wait = (parse_time_limit(spec.split("=", 1)[1]) or 5) * 60
                    except Exception:
                        wait = 300
                if in_use.get(name):
                    if r.get("last_used") != t:
                        r["last_used"] = t  # in memory; stored when it matters
                elif r.get("last_used") is not None and t - r["last_used"] >= wait:
                    self._delete(name)

    def views(self, t: int) -> tuple[ReservationView, ...]:
        out = []
        for r in self.resv.values():
            if r["end"] <= t:
                continue
            users = frozenset(u for u in r["users"] if not u.startswith("-"))
            out.append(ReservationView(name=r["name"], nodes=frozenset(r["nodes"]),
                                       start=r["start"], end=r["end"], users=users,
                                       accounts=frozenset(r["accounts"]),
                                       flags=frozenset(_flag_name(f) for f in r["flags"])))
        return tuple(sorted(out, key=lambda v: v.name))

    def records(self, t: int) -> list[dict]:
        out = []
        nodes = self.state.nodes
        for r in sorted(self.resv.values(), key=lambda x: x["name"]):
            cpus = sum(nodes[n].cpus for n in r["nodes"] if n in nodes)
            gpus = sum(len(nodes[n].gpu_indices) for n in r["nodes"] if n in nodes)
            with_gpus = gpus and r.get("tres_req", {}).get("gres/gpu")
            tres = f"cpu={cpus}" + (f",gres/gpu={gpus}" if with_gpus else "")
            out.append({
                "name": r["name"], "start_time": r["start"], "end_time": r["end"],
                "duration_s": r["end"] - r["start"],
                "nodes": self.state.node_list_of(r["nodes"]) if r["nodes"] else "",
                "node_names": list(r["nodes"]), "node_count": len(r["nodes"]), "core_count": cpus,
                "partition": r.get("partition"), "flags": list(r["flags"]), "tres": tres,
                "users": list(r["users"]), "accounts": list(r["accounts"]),
                "state": "ACTIVE" if r["start"] <= t < r["end"] else "INACTIVE",
            })
        return out
