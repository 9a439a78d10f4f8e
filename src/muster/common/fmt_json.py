"""``--json`` / ``--yaml`` output of squeue, sinfo, sacct and scontrol (standard library only).

Pinned shape: Slurm 23.11's ``data_parser/v0.0.40`` (what ``squeue --json`` etc. print in
23.11 by default). Differences from the 22.05 (``openapi/v0.0.38``) captures in
shared/reference: numbers that may be unset or infinite are ``{"set", "infinite", "number"}``
objects; states and flags are lists (``"job_state": ["RUNNING"]``); exit codes are
``{"status": [...], "return_code": {...}, "signal": {"id": {...}, "name": str}}``; the
top-level ``meta`` carries ``plugin.data_parser``, ``client``, ``command`` and
``slurm.version`` with string members; ``sinfo --json`` prints ``sinfo`` groups (one per
partition and node state) rather than a flat node list.

The same builders serve the REST API (muster.api), so the CLI and slurmrestd-style answers
agree field for field; that is why the module lives in ``common`` (the API may not import the
CLI package, tests/unit/test_layering.py).
"""

from __future__ import annotations

import os

DATA_PARSER = "data_parser/v0.0.40"
SLURM_VERSION = {"major": "23", "micro": "0", "minor": "11"}
SLURM_RELEASE = "23.11.0"

__all__ = ["squeue_json", "sinfo_json", "sacct_json", "job_json", "node_json",
           "partition_json", "nodes_json", "partitions_json", "to_yaml", "meta", "dumps", "write",
           "Encoded", "list_text", "list_items", "LIST_OPEN", "LIST_SEP", "LIST_CLOSE"]


# ---- scalar helpers ----------------------------------------------------------------------------

def num(v, infinite: bool = False) -> dict:
    """uint32/uint64/float "no_val" struct: unset (None) → set false."""
    if infinite:
        return {"set": True, "infinite": True, "number": 0}
    return {"set": v is not None, "infinite": False, "number": 0 if v is None else v}


def limit(v) -> dict:
    """Time limits: ``None`` means UNLIMITED (infinite)."""
    return num(None, infinite=True) if v is None else num(v)


def _signame(sig: int) -> str:
    import signal  # here, not at the top: it imports enum (~2 ms of every --json command)
    try:
        return signal.Signals(sig).name
    except ValueError:
        return ""


def exit_code(code, sig, *, ended: bool = True) -> dict:
    code = code or 0
    sig = sig or 0
    if not ended:
        status = ["PENDING"]
    elif sig:
        status = ["SIGNALED"]
    elif code:
        status = ["ERROR"]
    else:
        status = ["SUCCESS"]
    return {"status": status, "return_code": num(code if ended else None),
            "signal": {"id": num(sig if sig else None), "name": _signame(sig) if sig else ""}}


def _s(v) -> str:
    return "" if v is None else str(v)


def _whoami() -> tuple[str, str]:
    import grp
    import pwd
    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        user = str(os.getuid())
    try:
        group = grp.getgrgid(os.getgid()).gr_name
    except KeyError:
        group = str(os.getgid())
    return user, group


def meta(command: list[str] | None = None, plugin: str = "openapi/slurmctld",
         cluster: str = "", client: dict | None = None) -> dict:
    if client is None:
        user, group = _whoami()
        client = {"source": "", "user": user, "group": group}
    return {"plugin": {"type": plugin, "name": "Slurm OpenAPI slurmctld" if "ctld" in plugin
                       else "Slurm OpenAPI slurmdbd", "data_parser": DATA_PARSER,
                       "accounting_storage": "accounting_storage/muster"},
            "client": client, "command": list(command or []),
            "slurm": {"version": dict(SLURM_VERSION), "release": SLURM_RELEASE,
                      "cluster": cluster}}


def _doc(key: str, items, command, plugin, cluster, now, extra=None) -> dict:
    out = {key: items}
    if extra:
        out.update(extra)
    out.update({"meta": meta(command, plugin, cluster), "errors": [], "warnings": []})
    return out


# ---- TRES ----------------------------------------------------------------------------------------

_TRES_IDS = {"cpu": 1, "mem": 2, "energy": 3, "node": 4, "billing": 5, "fs/disk": 6,
             "vmem": 7, "pages": 8}
_MEM = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024, "P": 1024 ** 3}


def tres_list(s: str | None) -> list[dict]:
    """``cpu=2,mem=1G,node=1,billing=2,gres/gpu=2`` → v0.0.40 TRES list (mem in MB)."""
    out: list[dict] = []
    for item in (s or "").split(","):
        k, sep, v = item.partition("=")
        if not sep:
            continue
        if k == "mem":
            unit = v[-1:].upper()
            try:
                count = int(round(float(v[:-1]) * _MEM[unit])) if unit in _MEM else int(float(v))
            except ValueError:
                count = 0
        else:
            try:
                count = int(float(v))
            except ValueError:
                count = 0
        if "/" in k and k != "fs/disk":
            typ, _, name = k.partition("/")
            out.append({"type": typ, "name": name, "id": 1000 + len(out) + 1, "count": count})
        else:
            out.append({"type": k, "name": "", "id": _TRES_IDS.get(k, 0), "count": count})
    return out


# ---- jobs (squeue / scontrol show job) -------------------------------------------------------------

def _job_states(job: dict) -> list[str]:
    st = [job.get("state") or "PENDING"]
    if st[0] == "COMPLETING":
        return ["COMPLETING"]
    if job.get("completing"):
        st.append("COMPLETING")
    if job.get("requeue_pending"):
        st.append("REQUEUED")
    return st


def job_json(job: dict, now: int | None = None, cluster: str = "") -> dict:
    """One job record (docs/records.md) in the v0.0.40 ``job_info`` shape."""
    j = job
    state = j.get("state") or "PENDING"
    running = state in ("RUNNING", "COMPLETING")
    ended = state not in ("PENDING", "RUNNING", "COMPLETING")
    cpus = j.get("num_cpus") or 0
    nnodes = j.get("num_nodes") or 0
    alloc = j.get("alloc") or []
    resources = {}
    if alloc:
        resources = {
            "nodes": {"count": len(alloc), "select_type": ["AVAILABLE"], "list": j.get("node_list") or "",
                      "whole": bool(j.get("exclusive")),
                      "allocation": [{"index": i, "name": a["node"],
                                      "cpus": {"count": a.get("cpus", 0), "used": a.get("cpus", 0)},
                                      "memory": {"used": a.get("mem", 0), "allocated": a.get("mem", 0)},
                                      "sockets": [], "gpus": list(a.get("gpus") or [])}
                                     for i, a in enumerate(alloc)]},
            "cpus": cpus, "threads_per_core": num(1),
            "select_type": ["CR_CORE_MEMORY"]}
    arr_id = j.get("array_job_id")
    task = j.get("array_task_id")
    return {
        "account": _s(j.get("account")),
        "accrue_time": num(j.get("eligible_time")),
        "admin_comment": "",
        "allocating_node": _s(j.get("submit_host")),
        "array_job_id": num(arr_id or 0),
        "array_task_id": num(task),
        "array_max_tasks": num(j.get("array_max_tasks") or 0),
        "array_task_string": _s(j.get("array_task_str")),
        "association_id": 0,
        "batch_features": "",
        "batch_flag": bool(j.get("batch", True)),
        "batch_host": _s(j.get("batch_host")),
        "flags": [],
        "burst_buffer": "",
        "burst_buffer_state": "",
        "cluster": cluster,
        "cluster_features": "",
        "command": _s(j.get("command")),
        "comment": _s(j.get("comment")),
        "container": "",
        "container_id": "",
        "contiguous": bool(j.get("contiguous")),
        "core_spec": 0,
        "thread_spec": 0,
        "cores_per_socket": num(None),
        "billable_tres": num(float(cpus)),
        "cpus_per_task": num(j.get("cpus_per_task") or 1),
        "cpu_frequency_minimum": num(None),
        "cpu_frequency_maximum": num(None),
        "cpu_frequency_governor": num(None),
        "cpus_per_tres": "",
        "cron": "",
        "deadline": num(0),
        "delay_boot": num(0),
        "dependency": _s(j.get("dependency")),
        "derived_exit_code": exit_code(j.get("derived_exit_code"), j.get("derived_exit_signal"),
                                       ended=ended),
        "eligible_time": num(j.get("eligible_time") or 0),
        "end_time": num(j.get("end_time") or 0),
        "excluded_nodes": _s(j.get("exc_nodes")),
        "exit_code": exit_code(j.get("exit_code"), j.get("exit_signal"), ended=ended),
        "extra": "",
        "failed_node": "",
        "features": "",
        "federation_origin": "",
        "federation_siblings_active": "",
        "federation_siblings_viable": "",
        "gres_detail": [f"gpu:{len(a.get('gpus') or [])}"
                        f"(IDX:{','.join(map(str, a.get('gpus') or [])) or 'N/A'})"
                        for a in alloc if a.get("gpus")],
        "group_id": j.get("gid", 0),
        "group_name": _s(j.get("group")),
        "het_job_id": num(0),
        "het_job_id_set": "",
        "het_job_offset": num(0),
        "job_id": j.get("job_id", 0),
        "job_resources": resources,
        "job_size_str": [],
        "job_state": _job_states(j),
        "last_sched_evaluation": num(j.get("last_sched_eval") or 0),
        "licenses": "",
        "mail_type": [],
        "mail_user": _s(j.get("user")),
        "max_cpus": num(0),
        "max_nodes": num(j.get("nodes_max") or 0),
        "mcs_label": "",
        "memory_per_tres": f"gres/gpu:{j['mem_per_gpu']}" if j.get("mem_per_gpu") else "",
        "name": _s(j.get("name")),
        "network": "",
        "nodes": _s(j.get("node_list")),
        "nice": j.get("nice") or 0,
        "tasks_per_core": num(None),
        "tasks_per_tres": num(0),
        "tasks_per_socket": num(None),
        "tasks_per_board": num(0),
        "cpus": num(cpus),
        "node_count": num(nnodes),
        "tasks": num(j.get("num_tasks") or 1),
        "partition": _s(j.get("partition")),
        "prefer": "",
        "memory_per_cpu": num(j.get("mem_per_cpu")),
        "memory_per_node": num(j.get("mem_per_node")),
        "minimum_cpus_per_node": num(max(j.get("cpus_per_task") or 1,
                                         j.get("min_cpus_node") or 0)),
        "minimum_tmp_disk_per_node": num(0),
        "power": {"flags": []},
        "preempt_time": num(0),
        "preemptable_time": num(0),
        "pre_sus_time": num(0),
        "hold": bool(j.get("hold")),
        "priority": num(j.get("priority") or 0),
        "profile": ["NOT_SET"],
        "qos": _s(j.get("qos")),
        "reboot": False,
        "required_nodes": _s(j.get("req_nodes")),
        "minimum_switches": 0,
        "requeue": bool(j.get("requeue")),
        "resize_time": num(0),
        "restart_cnt": j.get("restarts") or 0,
        "resv_name": "",
        "scheduled_nodes": _s(j.get("sched_nodes")),
        "selinux_context": "",
        "shared": [],
        "exclusive": ["true"] if j.get("exclusive") else [],
        "oversubscribe": not j.get("exclusive"),
        "show_flags": ["SHOW_ALL", "SHOW_DETAIL", "SHOW_LOCAL"],
        "sockets_per_board": 0,
        "sockets_per_node": num(None),
        "start_time": num(j.get("start_time") or 0),
        "state_description": _s(j.get("reason_desc")),
        "state_reason": _s(j.get("reason") or "None"),
        "standard_error": _s(j.get("std_err")),
        "standard_input": _s(j.get("std_in")),
        "standard_output": _s(j.get("std_out")),
        "submit_time": num(j.get("submit_time") or 0),
        "suspend_time": num(0),
        "system_comment": _s(j.get("system_comment")),
        "time_limit": limit(j.get("time_limit")),
        "time_minimum": num(j.get("time_min") or 0),
        "threads_per_core": num(None),
        "tres_bind": "",
        "tres_freq": "",
        "tres_per_job": f"gres/gpu:{j['gpus']}" if j.get("gpus") else "",
        "tres_per_node": _s(j.get("tres_per_node")),
        "tres_per_socket": "",
        "tres_per_task": f"gres/gpu:{j['gpus_per_task']}" if j.get("gpus_per_task") else "",
        "tres_req_str": _s(j.get("tres_req")),
        "tres_alloc_str": _s(j.get("tres_alloc")) if (running or ended) else "",
        "user_id": j.get("uid", 0),
        "user_name": _s(j.get("user")),
        "maximum_switch_wait_time": 0,
        "wckey": _s(j.get("wckey")),
        "current_working_directory": _s(j.get("work_dir")),
    }


def squeue_json(jobs, now: int, *, cluster: str = "",
                command: list[str] | None = None, lazy: bool = False) -> dict:
    """``squeue --json`` (also ``scontrol show job --json`` and GET /slurm/v0.0.40/jobs).
    ``lazy``: the jobs are a generator, converted as :func:`write` streams them. ``jobs``
    may also be :class:`Encoded`: the ``jobs`` list already laid out (the controller's
    cached records, muster.controller.jobjson), which :func:`write` emits as it is."""
    converted: object
    if isinstance(jobs, Encoded):
        converted = jobs
    elif lazy:
        converted = (job_json(j, now, cluster) for j in jobs)
    else:
        converted = [job_json(j, now, cluster) for j in jobs]
    return _doc("jobs", converted,
                command if command is not None else ["squeue", "--json"],
                "openapi/slurmctld", cluster, now,
                {"last_backfill": num(None), "last_update": num(now)})


# ---- nodes and partitions ------------------------------------------------------------------------

def node_states(n: dict) -> list[str]:
    return [n.get("state") or "UNKNOWN"] + [f for f in (n.get("flags") or [])]


def node_json(n: dict, now: int | None = None, cluster: str = "") -> dict:
    cores = (n.get("cores_per_socket") or 1) * (n.get("sockets") or 1)
    return {
        "architecture": _s(n.get("arch")),
        "burstbuffer_network_address": "",
        "boards": n.get("boards") or 1,
        "boot_time": num(n.get("boot_time") or 0),
        "cluster_name": cluster,
        "cores": n.get("cores_per_socket") or cores,
        "specialized_cores": 0,
        "cpu_binding": 0,
        "cpu_load": int(round((n.get("cpu_load") or 0) * 100)),
        "free_mem": num(n.get("free_mem")),
        "cpus": n.get("cpus") or 0,
        "effective_cpus": n.get("cpus") or 0,
        "specialized_cpus": "",
        "energy": {"average_watts": 0, "base_consumed_energy": 0, "consumed_energy": 0,
                   "current_watts": num(None), "previous_consumed_energy": 0,
                   "last_collected": 0},
        "external_sensors": {},
        "extra": "",
        "power": {},
        "features": [f for f in (n.get("features") or "").split(",") if f],
        "active_features": [f for f in (n.get("active_features", n.get("features")) or "")
                            .split(",") if f],
        "gres": _s(n.get("gres")),
        "gres_drained": "N/A",
        "gres_used": _s(n.get("gres_used")),
        "instance_id": "",
        "instance_type": "",
        "last_busy": num(n.get("last_heartbeat") or 0),
        "mcs_label": "",
        "specialized_memory": 0,
        "name": n["name"],
        "next_state_after_reboot": ["INVALID"],
        "address": _s(n.get("addr")),
        "hostname": _s(n.get("hostname")),
        "state": node_states(n),
        "operating_system": _s(n.get("os")),
        "owner": "",
        "partitions": list(n.get("partitions") or []),
        "port": n.get("port") or 6818,
        "real_memory": n.get("real_memory") or 0,
        "comment": "",
        "reason": _s(n.get("reason")),
        "reason_changed_at": num(n.get("reason_time") or 0),
        "reason_set_by_user": _s(n.get("reason_user")),
        "resume_after": num(0),
        "reservation": "",
        "alloc_memory": n.get("mem_alloc") or 0,
        "alloc_cpus": n.get("cpus_alloc") or 0,
        "alloc_idle_cpus": max(0, (n.get("cpus") or 0) - (n.get("cpus_alloc") or 0)),
        "tres_used": _s(n.get("alloc_tres")),
        "tres_weighted": float(n.get("cpus_alloc") or 0),
        "slurmd_start_time": num(n.get("slurmd_start_time") or 0),
        "sockets": n.get("sockets") or 1,
        "threads": n.get("threads_per_core") or 1,
        "temporary_disk": n.get("tmp_disk") or 0,
        "weight": n.get("weight") or 1,
        "tres": _s(n.get("cfg_tres")),
        "version": _s(n.get("version")),
        # Muster extension: the GPU indices in use (dashboards need per-GPU state)
        "gpus_alloc": list(n.get("gpus_alloc") or []),
    }


def nodes_json(nodes: list[dict], now: int, *, cluster: str = "",
               command: list[str] | None = None) -> dict:
    """``scontrol show node --json`` / GET /slurm/v0.0.40/nodes."""
    return _doc("nodes", [node_json(n, now, cluster) for n in nodes],
                command if command is not None else ["scontrol", "show", "node", "--json"],
                "openapi/slurmctld", cluster, now, {"last_update": num(now)})


def partition_json(p: dict, cluster: str = "") -> dict:
    return {
        "nodes": {"allowed_allocation": "", "configured": _s(p.get("nodes")),
                  "total": p.get("total_nodes") or 0},
        "accounts": {"allowed": "" if p.get("allow_accounts") in (None, "ALL") else p["allow_accounts"],
                     "deny": ""},
        "groups": {"allowed": "" if p.get("allow_groups") in (None, "ALL") else p["allow_groups"]},
        "qos": {"allowed": "" if p.get("allow_qos") in (None, "ALL") else p["allow_qos"],
                "deny": "", "assigned": ""},
        "alternate": "",
        "tres": {"billing_weights": "", "configured": _s(p.get("tres"))},
        "cluster": cluster,
        "cpus": {"task_binding": 0, "total": p.get("total_cpus") or 0},
        "defaults": {"memory_per_cpu": 0, "partition_memory_per_cpu": num(None),
                     "partition_memory_per_node": num(None),
                     "time": limit(p.get("default_time")) if p.get("default_time") is not None
                     else num(None), "job": ""},
        "grace_time": p.get("grace_time") or 0,
        "maximums": {"cpus_per_node": num(None, infinite=True),
                     "cpus_per_socket": num(None, infinite=True),
                     "memory_per_cpu": 0, "partition_memory_per_cpu": num(None),
                     "partition_memory_per_node": num(None),
                     "nodes": limit(p.get("max_nodes")), "shares": 1,
                     "oversubscribe": {"jobs": 1, "flags": []},
                     "time": limit(p.get("max_time")), "over_time_limit": num(None)},
        "minimums": {"nodes": p.get("min_nodes") or 0},
        "name": p["name"],
        "node_sets": "",
        "priority": {"job_factor": p.get("priority_job_factor") or 1,
                     "tier": p.get("priority_tier") or 1},
        "timeouts": {"resume": num(None), "suspend": num(None)},
        "partition": {"state": [p.get("state") or "UP"]},
        "suspend_time": num(None),
        # v0.0.40 reports the default partition through flags
        "flags": ["DEFAULT"] if p.get("default") else [],
    }


def partitions_json(partitions: list[dict], now: int, *, cluster: str = "",
                    command: list[str] | None = None) -> dict:
    return _doc("partitions", [partition_json(p, cluster) for p in partitions],
                command if command is not None else ["scontrol", "show", "partition", "--json"],
                "openapi/slurmctld", cluster, now, {"last_update": num(now)})


def _mm(values) -> dict:
    values = list(values) or [0]
    return {"minimum": min(values), "maximum": max(values)}


def sinfo_json(partitions: list[dict], nodes: list[dict], now: int, *, cluster: str = "",
               command: list[str] | None = None) -> dict:
    """``sinfo --json``: one ``sinfo`` entry per partition and node state, as sinfo groups."""
    by_name = {n["name"]: n for n in nodes}
    groups = []
    for p in partitions:
        members = [by_name[n] for n in p.get("node_names") or [] if n in by_name]
        bucket: dict[tuple, list[dict]] = {}
        for n in members:
            bucket.setdefault(tuple(node_states(n)), []).append(n)
        for states, ns in bucket.items():
            cpus_total = sum(n.get("cpus") or 0 for n in ns)
            cpus_alloc = sum(n.get("cpus_alloc") or 0 for n in ns)
            down = states[0] == "DOWN" or "DRAIN" in states
            free = [n["free_mem"] for n in ns if n.get("free_mem") is not None]
            groups.append({
                "port": ns[0].get("port") or 6818,
                "node": {"state": list(states)},
                "nodes": {"allocated": sum(1 for n in ns if n.get("cpus_alloc")),
                          "idle": sum(1 for n in ns if not n.get("cpus_alloc") and not down),
                          "other": sum(1 for n in ns if down),
                          "total": len(ns),
                          "hostnames": [_s(n.get("hostname")) for n in ns],
                          "addresses": [_s(n.get("addr")) for n in ns],
                          "nodes": [n["name"] for n in ns]},
                "cpus": {"allocated": cpus_alloc,
                         "idle": 0 if down else cpus_total - cpus_alloc,
                         "other": cpus_total if down else 0, "total": cpus_total,
                         "minimum": min(n.get("cpus") or 0 for n in ns),
                         "maximum": max(n.get("cpus") or 0 for n in ns),
                         "load": {"minimum": min(int((n.get("cpu_load") or 0) * 100) for n in ns),
                                  "maximum": max(int((n.get("cpu_load") or 0) * 100) for n in ns)},
                         "per_node": {"max": num(None, infinite=True)}},
                "sockets": _mm(n.get("sockets") or 1 for n in ns),
                "cores": _mm(n.get("cores_per_socket") or 1 for n in ns),
                "threads": _mm(n.get("threads_per_core") or 1 for n in ns),
                "disk": _mm(n.get("tmp_disk") or 0 for n in ns),
                "memory": {**_mm(n.get("real_memory") or 0 for n in ns),
                           "free": {"minimum": num(min(free) if free else None),
                                    "maximum": num(max(free) if free else None)},
                           "allocated": sum(n.get("mem_alloc") or 0 for n in ns)},
                "weight": _mm(n.get("weight") or 1 for n in ns),
                "features": {"total": _s(ns[0].get("features")),
                             "active": _s(ns[0].get("active_features", ns[0].get("features")))},
                "gres": {"total": _s(ns[0].get("gres")), "used": _s(ns[0].get("gres_used"))},
                "cluster": cluster, "comment": "", "extra": "",
                "reason": {"description": _s(ns[0].get("reason")),
                           "time": num(ns[0].get("reason_time") or 0),
                           "user": _s(ns[0].get("reason_user"))},
                "reservation": "",
                "partition": partition_json(p, cluster),
            })
    return _doc("sinfo", groups, command if command is not None else ["sinfo", "--json"],
                "openapi/slurmctld", cluster, now)


# ---- accounting (sacct) ----------------------------------------------------------------------

def _step_json(job: dict, s: dict, now: int) -> dict:
    sid = s.get("step_id")
    start, end = s.get("start_time") or 0, s.get("end_time")
    elapsed = max(0, (end or now) - start) if start else 0
    state = s.get("state") or "RUNNING"
    nodes = s.get("node_list") or ""
    from muster.common.hostlist import expand
    try:
        node_names = expand(nodes) if nodes else []
    except Exception:
        node_names = [nodes]
    u = s.get("usage") or {}
    return {
        "time": {"elapsed": elapsed, "end": num(end or 0), "start": num(start),
                 "suspended": 0, "system": _cpu_time(u.get("sys_ms", 0)),
                 "limit": limit(job.get("time_limit")),
                 "total": _cpu_time(u.get("user_ms", 0) + u.get("sys_ms", 0)),
                 "user": _cpu_time(u.get("user_ms", 0))},
        "exit_code": exit_code(s.get("exit_code"), s.get("exit_signal"),
                               ended=state not in ("RUNNING", "PENDING")),
        "nodes": {"count": s.get("num_nodes") or len(node_names), "range": nodes,
                  "list": node_names},
        "tasks": {"count": s.get("num_tasks") or 1},
        "pid": "",
        "CPU": {"requested_frequency": {"min": num(None), "max": num(None)}, "governor": ""},
        "kill_request_user": "",
        "state": [state],
        "statistics": {"CPU": {"actual_frequency": 0}, "energy": {"consumed": num(None)}},
        "step": {"id": f"{job.get('job_id')}.{sid}", "name": _s(s.get("name") or sid)},
        "task": {"distribution": ""},
        "tres": {"requested": _usage_tres(u.get("in")), "consumed": _usage_tres(u.get("out")),
                 "allocated": tres_list(s.get("tres_alloc"))},
    }


def _cpu_time(ms: int) -> dict:
    return {"seconds": int(ms) // 1000, "microseconds": int(ms) % 1000 * 1000}


def _usage_tres(side: dict | None) -> dict:
    """Usage statistics (controller.usage: TRESUsageIn/Out) as v0.0.40 lists: ``requested``
    is what the tasks used (In), ``consumed`` what they wrote out (Out), as slurmrestd has it."""
    side = side or {}
    out = {}
    for key, kind in (("max", "max"), ("min", "min"), ("average", "ave"), ("total", "tot")):
        items: list[dict] = []
        for name in sorted(side.get(kind) or {}):
            typ, _, sub = name.partition("/") if name.startswith("gres/") else (name, "", "")
            item = {"type": typ, "name": sub, "id": _TRES_IDS.get(name, 1000 + len(items)),
                    "count": int(side[kind][name])}
            if kind in ("max", "min"):
                item["node"] = str(side.get(kind + "_node", {}).get(name, ""))
                item["task"] = int(side.get(kind + "_task", {}).get(name, 0))
            items.append(item)
        out[key] = items
    return out


def _acct_job(j: dict, now: int, cluster: str) -> dict:
    state = j.get("state") or "PENDING"
    ended = state not in ("PENDING", "RUNNING", "COMPLETING")
    start = j.get("start_time") or 0
    end = j.get("end_time") if ended else None
    elapsed = max(0, (end or now) - start) if start and state != "PENDING" else 0
    return {
        "account": _s(j.get("account")),
        "comment": {"administrator": "", "job": _s(j.get("comment")), "system": ""},
        "allocation_nodes": j.get("num_nodes") or 0,
        "array": {"job_id": j.get("array_job_id") or 0,
                  "limits": {"max": {"running": {"tasks": j.get("array_max_tasks") or 0}}},
                  "task_id": num(j.get("array_task_id")),
                  "task": _s(j.get("array_task_str"))},
        "association": {"account": _s(j.get("account")), "cluster": cluster,
                        "partition": _s(j.get("partition")), "user": _s(j.get("user")),
                        "id": 0},
        "block": "",
        "cluster": cluster,
        "constraints": "",
        "container": "",
        "derived_exit_code": exit_code(j.get("derived_exit_code"), j.get("derived_exit_signal"),
                                       ended=ended),
        "time": {"elapsed": elapsed, "eligible": j.get("eligible_time") or 0,
                 "end": end or 0, "planned": num(max(0, (start or now) - (j.get("submit_time") or now))),
                 "start": start, "submission": j.get("submit_time") or 0, "suspended": 0,
                 "system": {"seconds": 0, "microseconds": 0},
                 "limit": limit(j.get("time_limit")),
                 "total": {"seconds": 0, "microseconds": 0},
                 "user": {"seconds": 0, "microseconds": 0}},
        "exit_code": exit_code(j.get("exit_code"), j.get("exit_signal"), ended=ended),
        "extra": "",
        "failed_node": "",
        "flags": ["STARTED_ON_SCHEDULE"] if start else [],
        "group": _s(j.get("group")),
        "het": {"job_id": 0, "job_offset": num(None)},
        "job_id": j.get("job_id", 0),
        "name": _s(j.get("name")),
        "licenses": "",
        "mcs": {"label": ""},
        "nodes": _s(j.get("node_list")) or "None assigned",
        "partition": _s(j.get("partition")),
        "hold": bool(j.get("hold")),
        "priority": num(j.get("priority") or 0),
        "qos": _s(j.get("qos")),
        "required": {"CPUs": j.get("num_cpus") or 0,
                     "memory_per_cpu": num(j.get("mem_per_cpu")),
                     "memory_per_node": num(j.get("mem_per_node"))},
        "kill_request_user": "" if j.get("cancelled_by") is None else str(j["cancelled_by"]),
        "reservation": {"id": 0, "name": ""},
        "script": "",
        "state": {"current": [state], "reason": _s(j.get("reason") or "None")},
        "steps": [_step_json(j, s, now) for s in j.get("steps") or []],
        "submit_line": "",
        "tres": {"allocated": tres_list(j.get("tres_alloc")),
                 "requested": tres_list(j.get("tres_req"))},
        "used_gres": "",
        "user": _s(j.get("user")),
        "wckey": {"wckey": _s(j.get("wckey")), "flags": []},
        "working_directory": _s(j.get("work_dir")),
    }


def sacct_json(jobs: list[dict], now: int, *, cluster: str = "",
               command: list[str] | None = None) -> dict:
    """``sacct --json`` / GET /slurmdb/v0.0.40/jobs: acct records with their ``steps``."""
    return _doc("jobs", [_acct_job(j, now, cluster) for j in jobs],
                command if command is not None else ["sacct", "--json"],
                "openapi/slurmdbd", cluster, now)


# ---- serialisation ---------------------------------------------------------------------------------

def dumps(obj) -> str:
    parts: list[str] = []
    write(obj, parts.append)
    return "".join(parts)


# How :func:`write` lays out a top-level list of n > 0 items: OPEN, the items joined by SEP,
# CLOSE ("[]" when empty). Items are compact JSON, so none holds a raw newline: SEP occurs
# only between items. The controller lays out squeue --json's cached records with the same
# constants (muster.controller.jobjson), so its text drops into the output unchanged.
LIST_OPEN = "[\n    "
LIST_SEP = ",\n    "
LIST_CLOSE = "\n  ]"


class Encoded:
    """A top-level list already encoded as :func:`write` lays it out (``text``: a str, or
    its UTF-8 bytes, which :func:`write` passes to ``emit`` as they are)."""

    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text


def list_text(items: list[str]) -> str:
    """Encoded items (compact JSON each) laid out as :func:`write` lays out a list."""
    return LIST_OPEN + LIST_SEP.join(items) + LIST_CLOSE if items else "[]"


def list_items(text: str) -> list[str]:
    """The encoded items of a list laid out by :func:`list_text` (its inverse)."""
    if text == "[]":
        return []
    if not (text.startswith(LIST_OPEN) and text.endswith(LIST_CLOSE)):
        raise ValueError("not a list laid out one item per line")
    return text[len(LIST_OPEN):-len(LIST_CLOSE)].split(LIST_SEP)


def write(obj, emit) -> None:
    """JSON with one top-level key per line and one record per line inside top-level lists.

    Slurm indents every level (its 5,000-job ``squeue --json`` is 18 MB and takes ~0.9 s);
    Python's indenting encoder is pure Python and ~50x slower than its C encoder. Records are
    therefore encoded compactly by the C encoder, one per line: the same JSON value, still
    line-oriented for grep/jq, and lists given as iterators are streamed (``emit`` is called
    per record), so memory stays flat however many jobs there are."""
    from muster.common.litejson import dumps as compact
    if not isinstance(obj, dict):
        emit(compact(obj) + "\n")
        return
    emit("{\n")
    items = list(obj.items())
    for i, (key, value) in enumerate(items):
        emit(f"  {compact(key)}: ")
        if isinstance(value, Encoded):
            emit(value.text)
        elif isinstance(value, list) or (hasattr(value, "__next__") and hasattr(value, "__iter__")):
            first = True
            for item in value:
                emit((LIST_OPEN if first else LIST_SEP) + compact(item))
                first = False
            emit("[]" if first else LIST_CLOSE)
        else:
            emit(compact(value))
        emit(",\n" if i < len(items) - 1 else "\n")
    emit("}\n")


_PLAIN_BAD = set(":#{}[],&*?|<>=!%@`'\"\\\n\t")
_RESERVED = {"", "~", "null", "Null", "NULL", "true", "True", "TRUE", "false", "False",
             "FALSE", "yes", "no", "on", "off", "Yes", "No", "On", "Off", "YES", "NO", "ON", "OFF"}


def _yscalar(v) -> str:
    import json  # YAML only: json imports re and enum (~7 ms of a --json command's start)
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, (int, float)):
        return json.dumps(v)
    s = str(v)
    if (s in _RESERVED or s != s.strip() or s[0] in "-?!&*#|>%@`" or any(c in _PLAIN_BAD for c in s)
            or _looks_numeric(s)):
        return json.dumps(s)  # a JSON string is a valid YAML double-quoted scalar
    return s


def _looks_numeric(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return s.lower() in (".inf", "-.inf", ".nan")


def to_yaml(obj) -> str:
    """Block-style YAML 1.2 (a ``---`` document, as Slurm's ``--yaml``). Standard library."""
    lines = ["---"]
    _yemit(obj, 0, lines)
    return "\n".join(lines) + "\n"


def _yemit(obj, indent: int, lines: list[str]) -> None:
    pad = " " * indent
    if isinstance(obj, dict):
        if not obj:
            lines.append(pad + "{}")
            return
        for k, v in obj.items():
            key = _yscalar(str(k))
            if isinstance(v, dict) and v:
                lines.append(f"{pad}{key}:")
                _yemit(v, indent + 2, lines)
            elif isinstance(v, list) and v:
                lines.append(f"{pad}{key}:")
                _yemit(v, indent, lines)
            else:
                lines.append(f"{pad}{key}: {_yinline(v)}")
    elif isinstance(obj, list):
        if not obj:
            lines.append(pad + "[]")
            return
        for v in obj:
            if isinstance(v, (dict, list)) and v:
                sub: list[str] = []
                _yemit(v, indent + 2, sub)
                first = sub[0]
                lines.append(f"{pad}- {first[indent + 2:]}")
                lines.extend(sub[1:])
            else:
                lines.append(f"{pad}- {_yinline(v)}")
    else:
        lines.append(pad + _yscalar(obj))


def _yinline(v) -> str:
    if isinstance(v, dict):
        return "{}"
    if isinstance(v, list):
        return "[]"
    return _yscalar(v)
