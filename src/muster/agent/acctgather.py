"""Usage accounting on the node (Slurm's jobacct_gather/linux), one sampler per running step.

The batch supervisor and each step daemon own a :class:`StepSampler` for the tasks they
started. Every JobAcctGatherFrequency seconds (slurm.conf ``task=N``, default 30; 0 = only at
the end) it reads, in one pass over /proc, the ``stat``, ``status`` and ``io`` of each task's
processes and folds them into per-task figures; the owner writes :meth:`StepSampler.report`
to ``usage.json`` in its spool (the agent forwards it to the controller as a live sample,
with the ids of the processes it saw, for ``sstat -i``) and, once every task is reaped, into
``status.json`` (the final figures, sent with the step's end; no process ids).

Which processes belong to a task: those of the task's cgroup when confinement is on (a
``pids_of(local_index) -> list[int]`` callable, from cgroup.py's ``procs``), otherwise those in
the task's session (every task is started with setsid, so its session id is its pid; a
process leaves only by calling setsid itself, as with Slurm's proctrack/pgid).

Per task (global task id ``task``), with Slurm's meanings:
  user_ms, sys_ms   CPU time of the task and its reaped descendants (utime+cutime, ...)
  rss, max_rss      resident memory, bytes: now (sum over its processes) and the peak
  vmem, max_vmem    virtual memory size, bytes: now and peak
  pages             major page faults (incl. reaped children)
  read, write       bytes read from / written to storage (/proc/<pid>/io read_bytes/write_bytes)
  cpu_util          % of one CPU over the last sampling interval
  gpumem            peak GPU memory of the task's processes, bytes
  gpuutil, max_gpuutil  utilisation (%) of the GPUs the task runs on: now and peak
                    (the three GPU figures only where NVML works and the step has GPUs)

Invariants: figures never decrease over a task's life (CPU, faults and I/O are cumulative;
peaks are maxima), so a lost or late sample only makes a value less fresh. The final figures
include exited children: the task's ``os.wait4`` rusage (the task and all it waited for) and
the task cgroup's CPU counters bound the sampled sums from below (CPU is taken from whichever
source saw the most, user and system together; ``ru_maxrss`` only above the forking daemon's
own size, which the kernel carries into it across fork and exec). Cost is bounded: a sample
reads /proc/<pid>/stat once per process on the node (session mode) plus status and io of at
most MAX_PIDS processes per task; nothing runs between samples.
"""

from __future__ import annotations

import json
import os
import resource
import time

PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")
MAX_PIDS = 4096  # processes of one task read per sample; beyond that the rest are skipped
DEFAULT_FREQUENCY = 30
COUNTERS = ("user_ms", "sys_ms", "pages", "read", "write")  # cumulative: never decrease
PEAKS = ("max_rss", "max_vmem")


def parse_frequency(text: str | None) -> int:
    """JobAcctGatherFrequency: ``task=N`` (other types are accepted and ignored) or the old
    single number; the task sampling interval in seconds (0 = at the end only)."""
    for item in (text or "").split(","):
        key, sep, value = item.strip().partition("=")
        if not sep:
            key, value = "task", key
        if key.strip().lower() == "task" and value.strip().isdigit():
            return int(value)
    return DEFAULT_FREQUENCY


def enabled(cfg) -> bool:
    """Accounting is on unless slurm.conf says ``JobAcctGatherType=jobacct_gather/none``
    explicitly (Muster gathers by default: sstat/seff would be empty otherwise)."""
    raw = (getattr(cfg, "raw", None) or {}).get("JobAcctGatherType", "")
    return raw.strip().lower() != "jobacct_gather/none"


class _Proc:
    """One process's figures from one read of its /proc files."""

    __slots__ = ("pid", "user", "sys", "rss", "vmem", "pages", "hwm", "peak", "read", "write")

    def __init__(self, pid: int, fields: list[bytes]):
        # fields after the comm's ")": state ppid pgrp session tty tpgid flags minflt cminflt
        # majflt cmajflt utime stime cutime cstime prio nice threads itreal start vsize rss
        self.pid = pid
        self.user = (int(fields[11]) + int(fields[13])) * 1000 // TICK
        self.sys = (int(fields[12]) + int(fields[14])) * 1000 // TICK
        self.pages = int(fields[9]) + int(fields[10])
        self.vmem = int(fields[20])
        self.rss = max(0, int(fields[21])) * PAGE
        self.hwm = self.peak = self.read = self.write = 0

    def read_extra(self) -> None:
        """Peaks from ``status`` (VmHWM/VmPeak: maxima between our samples) and storage I/O
        from ``io`` (root or the owner only; absent on kernels without task I/O accounting)."""
        try:
            with open(f"/proc/{self.pid}/status", "rb") as fh:
                for line in fh:
                    if line.startswith(b"VmHWM:"):
                        self.hwm = int(line.split()[1]) * 1024
                    elif line.startswith(b"VmPeak:"):
                        self.peak = int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        try:
            with open(f"/proc/{self.pid}/io", "rb") as fh:
                for line in fh:
                    if line.startswith(b"read_bytes:"):
                        self.read = int(line.split()[1])
                    elif line.startswith(b"write_bytes:"):
                        self.write = int(line.split()[1])
        except (OSError, ValueError, IndexError):
            pass


def _stat_fields(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields if len(fields) > 21 else None


def session_procs(sids: set[int]) -> dict[int, list[_Proc]]:
    """The processes of each session in ``sids``, from one pass over /proc (its stat
    files are the kernel's: no path a user controls)."""
    out: dict[int, list[_Proc]] = {s: [] for s in sids}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        fields = _stat_fields(int(name))
        if fields is None:
            continue
        try:
            sid = int(fields[3])
        except ValueError:
            continue
        procs = out.get(sid)
        if procs is not None and len(procs) < MAX_PIDS:
            try:
                procs.append(_Proc(int(name), fields))
            except (ValueError, IndexError):
                pass
    return out


def pid_procs(pids: list[int]) -> list[_Proc]:
    """The processes ``pids`` (a cgroup's members), those still there."""
    out = []
    for pid in pids[:MAX_PIDS]:
        fields = _stat_fields(pid)
        if fields is not None:
            try:
                out.append(_Proc(pid, fields))
            except (ValueError, IndexError):
                pass
    return out


class TaskUsage:
    """The running figures of one task (see the module docstring for the fields)."""

    __slots__ = ("task", "local", "pid", "user_ms", "sys_ms", "rss", "max_rss", "vmem",
                 "max_vmem", "pages", "read", "write", "cpu_util", "gpumem", "gpuutil",
                 "max_gpuutil", "_last")
    # set in __init__ (the counters by name, from COUNTERS and PEAKS)
    user_ms: int
    sys_ms: int
    pages: int
    read: int
    write: int
    max_rss: int
    max_vmem: int
    rss: int
    vmem: int
    cpu_util: int
    gpumem: int | None
    gpuutil: int | None
    max_gpuutil: int | None

    def __init__(self, task: int, local: int, pid: int):
        self.task, self.local, self.pid = task, local, pid
        for name in COUNTERS + PEAKS + ("rss", "vmem", "cpu_util"):
            setattr(self, name, 0)
        self.gpumem = self.gpuutil = self.max_gpuutil = None
        self._last: tuple[float, int] | None = None  # (time, cpu ms) of the previous sample

    def absorb(self, procs: list[_Proc], now: float) -> None:
        """Fold one sample of the task's processes in (each read once here)."""
        user = sys_ = pages = rss = vmem = read = write = hwm = peak = 0
        for p in procs:
            p.read_extra()
            user += p.user
            sys_ += p.sys
            pages += p.pages
            rss += p.rss
            vmem += p.vmem
            read += p.read
            write += p.write
            hwm = max(hwm, p.hwm)
            peak = max(peak, p.peak)
        self.rss, self.vmem = rss, vmem
        self.max_rss = max(self.max_rss, rss, hwm)
        self.max_vmem = max(self.max_vmem, vmem, peak)
        self._grow_cpu(user, sys_)
        self._grow(pages=pages, read=read, write=write)
        cpu = self.user_ms + self.sys_ms
        if self._last is not None and now > self._last[0]:
            self.cpu_util = round(100 * (cpu - self._last[1]) / 1000 / (now - self._last[0]))
        self._last = (now, cpu)

    def _grow(self, **values: int) -> None:
        for name, v in values.items():
            if v > getattr(self, name):
                setattr(self, name, v)

    def _grow_cpu(self, user: int, sys_: int) -> None:
        """Take a source's CPU time if its total is larger, user and system together: the
        sources (samples, rusage, cgroup) split the two differently, and a maximum taken
        per component would count more than any of them saw."""
        if user + sys_ > self.user_ms + self.sys_ms:
            self.user_ms, self.sys_ms = user, sys_

    def finish(self, ru, floor: int = 0) -> None:
        """The task was reaped with rusage ``ru`` (os.wait4): it counts the task and every
        descendant it waited for, including those that ended between samples.

        Its ``ru_maxrss`` is taken only above ``floor``, the forking daemon's own peak: the
        kernel carries a process's resident size across fork and exec into that figure, so
        any value up to the parent's size may be the parent's, not the job's."""
        if ru is not None:
            self._grow_cpu(int(ru.ru_utime * 1000), int(ru.ru_stime * 1000))
            self._grow(pages=ru.ru_majflt, read=ru.ru_inblock * 512, write=ru.ru_oublock * 512)
            if ru.ru_maxrss * 1024 > floor:
                self.max_rss = max(self.max_rss, ru.ru_maxrss * 1024)
        self.rss = self.vmem = self.cpu_util = 0

    def finish_cgroup(self, usage: dict) -> None:
        """The task's cgroup CPU counters (cgroup.py ``usage``): everything that ever ran in
        it, a process that escaped its session and was reaped by init included. Its memory
        peak is not taken: the cgroup's counts page cache too (a job that wrote a large file
        would show it as resident), which MaxRSS does not."""
        self._grow_cpu(int(usage.get("cpu_user_us") or 0) // 1000,
                       int(usage.get("cpu_sys_us") or 0) // 1000)

    def record(self) -> dict:
        rec: dict[str, int | None] = {
               "task": self.task, "user_ms": self.user_ms, "sys_ms": self.sys_ms,
               "rss": self.rss, "max_rss": self.max_rss, "vmem": self.vmem,
               "max_vmem": self.max_vmem, "pages": self.pages, "read": self.read,
               "write": self.write, "cpu_util": self.cpu_util}
        if self.gpumem is not None:
            rec.update(gpumem=self.gpumem, gpuutil=self.gpuutil, max_gpuutil=self.max_gpuutil)
        return rec


class StepSampler:
    """Samples one step's tasks on this node (see the module docstring).

    ``freq``: seconds between samples (0: none, final figures only). ``gpus``: the step's
    GPU indices on this node (NVML indices), for gres/gpumem and gres/gpuutil. ``pids_of``:
    ``local index -> pids`` of the task's cgroup, or None to follow sessions. ``cg_usage``:
    ``local index -> cgroup usage dict`` for the final figures, or None."""

    def __init__(self, freq: int, gpus: list[int] | None = None, pids_of=None, cg_usage=None,
                 clock=time.time):
        self.freq = max(0, int(freq))
        self.gpus = list(gpus or [])
        self.pids_of, self.cg_usage = pids_of, cg_usage
        self.clock = clock
        self.tasks: list[TaskUsage] = []
        self.live: set[int] = set()  # local indices of tasks not yet reaped
        self.next_due: float | None = None
        self.sampled_at: int | None = None
        self.floor: int | None = None  # our own peak RSS when the first task started
        self.pids: list[int] = []  # the tasks' processes at the latest sample (sstat -i)

    def follow_cgroup(self, step) -> None:
        """Tasks run in cgroups: ``step`` is their confine.StepCgroup (``pids(k)``,
        ``hier``, ``task_rel(k)``); a task's processes and final CPU come from task_K."""
        self.pids_of = step.pids
        self.cg_usage = lambda k: step.hier.usage(step.task_rel(k))

    def add(self, task: int, pid: int | None) -> None:
        """A task started (``pid`` None: it could not start, nothing to sample)."""
        local = len(self.tasks)
        if self.floor is None:
            self.floor = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        self.tasks.append(TaskUsage(task, local, pid or 0))
        if pid:
            self.live.add(local)
            if self.freq and self.next_due is None:
                self.next_due = self.clock() + self.freq

    def due(self, now: float | None = None) -> bool:
        return self.next_due is not None and (now or self.clock()) >= self.next_due

    def sample(self) -> None:
        """One sample of every live task, then schedule the next."""
        now = self.clock()
        live = [t for t in self.tasks if t.local in self.live]
        if self.pids_of is not None:
            by_task = {t.local: pid_procs(self.pids_of(t.local) or []) for t in live}
        else:
            sessions = session_procs({t.pid for t in live})
            by_task = {t.local: sessions.get(t.pid, []) for t in live}
        for t in live:
            t.absorb(by_task[t.local], now)
        self.pids = sorted({p.pid for procs in by_task.values() for p in procs})
        if self.gpus:
            _gpu_sample(self.gpus, live, by_task)
        self.sampled_at = int(now)
        self.next_due = now + self.freq if self.freq and self.live else None

    def exited(self, local: int, ru=None) -> None:
        """Task ``local`` was reaped (``ru``: its os.wait4 rusage)."""
        t = self.tasks[local]
        t.finish(ru, self.floor or 0)
        if self.cg_usage is not None:
            try:
                t.finish_cgroup(self.cg_usage(local) or {})
            except Exception:  # noqa: BLE001 - a vanished cgroup: the sampled figures stand
                pass
        self.live.discard(local)
        if not self.live:
            self.next_due = None
            self.pids = []

    def report(self) -> dict:
        """What the node reports for this step: one record per task. The final figures
        (status.json, stored with the step) are this; process ids are not part of them."""
        return {"time": self.sampled_at or int(self.clock()),
                "tasks": [t.record() for t in self.tasks]}

    def write(self, spool: str) -> None:
        """``usage.json`` in the spool (atomic: the agent reads the old or the new one): the
        report plus ``pids``, the processes seen by this sample — live only, since a pid
        means nothing once the step has ended (and may belong to another process by then)."""
        path = os.path.join(spool, "usage.json")
        tmp = path + ".tmp"
        try:
            with open(tmp, "w") as fh:
                json.dump({**self.report(), "pids": self.pids}, fh)
            os.replace(tmp, path)
        except OSError:
            pass


# ---- GPUs (NVML, where it exists) ---------------------------------------------------------

_NVML: dict = {}  # {"mod": pynvml} once initialised in this process; {"mod": None}: unusable


def _nvml():
    if "mod" not in _NVML:
        try:
            import pynvml
            pynvml.nvmlInit()
            _NVML["mod"] = pynvml
        except Exception:  # noqa: BLE001 - no library, no driver, no GPU: no GPU figures
            _NVML["mod"] = None
    return _NVML["mod"]


def _gpu_sample(gpus: list[int], tasks: list[TaskUsage], by_task: dict) -> None:
    """gres/gpumem: memory of each task's processes on the step's GPUs; gres/gpuutil: the
    summed utilisation of the GPUs the task has processes on (Slurm's gpu/nvml figures)."""
    nv = _nvml()
    if nv is None:
        return
    owner = {p.pid: t for t in tasks for p in by_task.get(t.local, [])}
    mem: dict[int, int] = {}
    util: dict[int, int] = {}
    for index in gpus:
        try:
            h = nv.nvmlDeviceGetHandleByIndex(index)
            procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
            rate = nv.nvmlDeviceGetUtilizationRates(h).gpu
        except Exception:  # noqa: BLE001 - a GPU that cannot be read is skipped
            continue
        users = set()
        for p in procs:
            t = owner.get(p.pid)
            if t is not None:
                mem[t.local] = mem.get(t.local, 0) + int(p.usedGpuMemory or 0)
                users.add(t.local)
        for local in users:
            util[local] = util.get(local, 0) + int(rate)
    for t in tasks:
        t.gpumem = max(t.gpumem or 0, mem.get(t.local, 0))
        t.gpuutil = util.get(t.local, 0)
        t.max_gpuutil = max(t.max_gpuutil or 0, t.gpuutil)


# ---- wiring -------------------------------------------------------------------------------

def sampler_for(L: dict, cgroup=None) -> StepSampler | None:
    """The sampler of a launch (batch or step), or None when accounting is off for it.

    The agent puts ``acct: {"freq": N}`` into launch.json (absent or null: off). GPUs are
    the step's (``SLURM_STEP_GPUS``) or the batch step's (``SLURM_JOB_GPUS``). ``cgroup``:
    the step's confine.StepCgroup when its tasks run in cgroups, else None (sessions)."""
    spec = L.get("acct")
    if not isinstance(spec, dict):
        return None
    env = L.get("env") or {}
    gpus = _indices(env.get("SLURM_STEP_GPUS") or env.get("SLURM_JOB_GPUS"))
    sampler = StepSampler(int(spec.get("freq", DEFAULT_FREQUENCY)), gpus)
    if cgroup is not None:
        sampler.follow_cgroup(cgroup)
    return sampler


def _indices(text: str | None) -> list[int]:
    return [int(x) for x in (text or "").split(",") if x.strip().isdigit()]


class UsageForwarder:
    """The agent's side: which running steps have a ``usage.json`` newer than the one last
    sent, as ``step_usage`` messages for the controller. One ``stat`` per running step per
    call; a file is read only when it changed. Forgets steps that are no longer running.
    The file's ``pids`` travel beside the figures (the message's typed ``pids`` field), not
    inside ``usage``, which keeps the shape of the final report."""

    def __init__(self):
        self.sent: dict[str, int] = {}  # spool dir -> mtime_ns of the usage.json last sent

    def collect(self, node: str, running: list[tuple[str, int, int, object]]) -> list[dict]:
        """``running``: ``(spool dir, job id, run, step id ("batch" or int))`` each."""
        out = []
        seen = set()
        for d, job_id, run, step_id in running:
            seen.add(d)
            path = os.path.join(d, "usage.json")
            try:
                mtime = os.stat(path).st_mtime_ns
                if self.sent.get(d) == mtime:
                    continue
                with open(path) as fh:
                    usage = json.load(fh)
            except (OSError, ValueError):
                continue
            self.sent[d] = mtime
            pids = usage.pop("pids", None) if isinstance(usage, dict) else None
            out.append({"op": "step_usage", "job_id": job_id, "run": run, "step_id": step_id,
                        "node": node, "usage": usage, "pids": pids or []})
        for d in [d for d in self.sent if d not in seen]:
            del self.sent[d]
        return out
