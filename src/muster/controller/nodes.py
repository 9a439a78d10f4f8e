"""Runtime state of the nodes, as the controller sees them.

Configured resources come from slurm.conf; what is allocated is derived from the jobs that
hold resources (``allocate``/``release`` are called by the controller only, in plan_apply and
when a job's processes are confirmed gone), so after a restart it is rebuilt from the jobs.

Node base state is derived, never stored: DOWN if marked down, else IDLE / MIXED / ALLOCATED
from the allocation. Flags: DRAIN (admin), NOT_RESPONDING (no agent connection/heartbeat),
COMPLETING (a job on it is completing).
"""

from __future__ import annotations

from muster.common.units import tres_string


class NodeRuntime:
    __slots__ = ("conf", "name", "index", "partitions", "cpus", "mem", "gpu_indices", "gpu_type",
                 "cpus_alloc", "mem_alloc", "gpus_alloc", "jobs", "drain", "down", "reason",
                 "reason_user", "reason_time", "connected", "last_heartbeat", "boot_time",
                 "agent_start", "cpu_load", "free_mem", "version", "arch", "os", "completing_jobs",
                 "registered", "down_auto")

    def __init__(self, conf, index: int, partitions: list[str]):
        self.conf = conf
        self.name = conf.name
        self.index = index
        self.partitions = partitions
        self.cpus = conf.cpus
        self.mem = conf.real_memory
        gres = [g for g in conf.gres if g.name == "gpu"]
        self.gpu_indices = tuple(i for g in gres for i in g.indices)
        self.gpu_type = next((g.type for g in gres if g.type), None)
        self.cpus_alloc = 0
        self.mem_alloc = 0
        self.gpus_alloc: set[int] = set()
        self.jobs: set[int] = set()
        self.completing_jobs: set[int] = set()
        self.drain = conf.state.upper() in ("DRAIN",)
        self.down = conf.state.upper() in ("DOWN", "FAIL")
        self.reason = conf.reason
        self.down_auto = False
        self.reason_user = None
        self.reason_time = None
        self.connected = False
        self.registered = False
        self.last_heartbeat = None
        self.boot_time = None
        self.agent_start = None
        self.cpu_load = None
        self.free_mem = None
        self.version = ""
        self.arch = ""
        self.os = ""

    # ---- allocation ----------------------------------------------------------------------
    def allocate(self, job_id: int, cpus: int, mem: int, gpus) -> None:
        self.cpus_alloc += cpus
        self.mem_alloc += mem
        self.gpus_alloc.update(gpus)
        self.jobs.add(job_id)

    def release(self, job_id: int, cpus: int, mem: int, gpus) -> None:
        if job_id not in self.jobs:
            return
        self.jobs.discard(job_id)
        self.completing_jobs.discard(job_id)
        self.cpus_alloc = max(0, self.cpus_alloc - cpus)
        self.mem_alloc = max(0, self.mem_alloc - mem)
        self.gpus_alloc.difference_update(gpus)

    # ---- views ---------------------------------------------------------------------------
    @property
    def usable(self) -> bool:
        return self.connected and self.registered and not self.drain and not self.down

    @property
    def base_state(self) -> str:
        if self.down:
            return "DOWN"
        if not self.registered and not self.jobs:
            return "UNKNOWN" if self.last_heartbeat is None else "IDLE"
        if self.cpus_alloc == 0 and not self.gpus_alloc and not self.jobs:
            return "IDLE"
        if self.cpus_alloc >= self.cpus:
            return "ALLOCATED"
        return "MIXED"

    @property
    def flags(self) -> list[str]:
        out = []
        if self.completing_jobs:
            out.append("COMPLETING")
        if self.drain:
            out.append("DRAIN")
        if not self.connected:
            out.append("NOT_RESPONDING")
        return out

    def gres_str(self, used: bool = False) -> str | None:
        if not self.gpu_indices:
            return None
        n = len(self.gpus_alloc) if used else len(self.gpu_indices)
        return f"gpu:{self.gpu_type}:{n}" if self.gpu_type else f"gpu:{n}"

    def to_record(self) -> dict:
        gres = {"gres/gpu": len(self.gpu_indices)} if self.gpu_indices else {}
        agres = {"gres/gpu": len(self.gpus_alloc)} if self.gpus_alloc else {}
        c = self.conf
        return {
            "name": self.name, "addr": c.addr, "hostname": c.hostname, "port": c.port or 6818,
            "state": self.base_state, "flags": self.flags, "cpus": self.cpus,
            "cpus_alloc": self.cpus_alloc, "sockets": c.sockets,
            "cores_per_socket": c.cores_per_socket, "threads_per_core": c.threads_per_core,
            "boards": c.boards, "real_memory": self.mem, "mem_alloc": self.mem_alloc,
            "free_mem": self.free_mem, "gres": self.gres_str(), "gres_used": self.gres_str(True)
            or "(null)", "gpus_total": len(self.gpu_indices), "gpus_alloc": sorted(self.gpus_alloc),
            "partitions": list(self.partitions), "reason": self.reason,
            "reason_user": self.reason_user, "reason_time": self.reason_time,
            "boot_time": self.boot_time, "slurmd_start_time": self.agent_start,
            "last_heartbeat": self.last_heartbeat, "weight": c.weight, "tmp_disk": c.tmp_disk,
            "features": ",".join(c.features) or None,
            "active_features": ",".join(c.active) or None, "cpu_load": self.cpu_load,
            "version": self.version, "arch": self.arch, "os": self.os,
            "cfg_tres": tres_string(self.cpus, self.mem, None, self.cpus, gres),
            "alloc_tres": tres_string(self.cpus_alloc, self.mem_alloc, None, None, agres)
            if (self.cpus_alloc or self.mem_alloc) else "",
        }

    def admin_record(self) -> dict:
        return {"drain": self.drain, "down": self.down, "down_auto": self.down_auto,
                "reason": self.reason,
                "reason_user": self.reason_user, "reason_time": self.reason_time}

    def restore_admin(self, rec: dict) -> None:
        self.drain = rec.get("drain", self.drain)
        self.down = rec.get("down", self.down)
        self.down_auto = rec.get("down_auto", False)
        self.reason = rec.get("reason", self.reason)
        self.reason_user = rec.get("reason_user")
        self.reason_time = rec.get("reason_time")
