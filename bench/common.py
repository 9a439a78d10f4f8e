"""Shared helpers for the Muster benchmarks: clusters, timing, statistics, the Slurm reference.

Every benchmark gets a *target*: a ``MusterCluster`` (a fresh local cluster started with
``muster up`` in a temporary state directory and stopped with ``muster down``) or, where a real
Slurm is installed and its controller answers, a ``SlurmTarget`` (the same commands from
/usr/bin with SLURM_CONF set).  Both expose ``env`` (for subprocesses) and ``cmd(name)``.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB_NAME = "musterbench"  # every benchmark job carries this name (-J), so Slurm runs can be filtered


def venv_bin() -> str:
    """The bin directory holding the Muster console scripts (this interpreter's, else .venv)."""
    here = os.path.dirname(os.path.abspath(sys.executable))
    if os.path.exists(os.path.join(here, "muster")):
        return here
    cand = os.path.join(REPO, ".venv", "bin")
    if os.path.exists(os.path.join(cand, "muster")):
        return cand
    raise SystemExit("bench: cannot find the `muster` console script; run with .venv/bin/python")


BIN = venv_bin()
PYTHON = os.path.join(BIN, "python")

# Real Slurm 22.05.8 on a 2-core machine, 4 virtual nodes (from the performance issue).
SLURM_REF = {
    "cli_call_s": 0.005,           # sbatch / squeue per call
    "python_pass_s": 0.018,        # python -c pass on that machine
    "submit_to_running_s": 1.9,
    "seq_1000_submit_s": 11.3,
    "par8_1000_submit_s": 5.8,
    "complete_1000_s": 33.0,
    "squeue_5000_pending_s": 0.064,
    "ctld_rss_idle_kib": 8 * 1024,
    "ctld_rss_5000_kib": 32 * 1024,
}
SLURM_REF_NOTE = ("recorded reference figures for real Slurm 22.05.8 on a 2-core machine "
                  "(from the issue); Slurm is not installed/reachable here")


# ---- statistics ------------------------------------------------------------------------------
def stats(values: list[float]) -> dict:
    if not values:
        return {"n": 0, "median": None, "min": None, "max": None}
    return {"n": len(values), "median": statistics.median(values), "min": min(values),
            "max": max(values)}


def fmt_s(v: float | None) -> str:
    if v is None:
        return "n/a"
    if v < 1.0:
        return f"{v * 1000:.1f} ms"
    return f"{v:.2f} s"


def fmt_stats(st: dict, unit=fmt_s) -> str:
    if not st.get("n"):
        return "n/a"
    if st["n"] == 1:
        return unit(st["median"])
    return f"{unit(st['median'])} ({unit(st['min'])}–{unit(st['max'])}, n={st['n']})"


def row(metric: str, muster: dict | float | None, compare: float | None, compare_src: str,
        goal: str, met: bool | None, ratio: float | None = None, unit: str = "s",
        note: str = "") -> dict:
    """One result line. ``muster`` is a stats dict or a single value; ratio = muster / compare."""
    med = muster["median"] if isinstance(muster, dict) else muster
    if ratio is None and med is not None and compare:
        ratio = med / compare
    return {"metric": metric, "muster": muster, "compare": compare, "compare_src": compare_src,
            "ratio": ratio, "goal": goal, "met": met, "unit": unit, "note": note}


def print_rows(name: str, rows: list[dict]) -> None:
    print(f"\n== {name} ==")
    for r in rows:
        m = r["muster"]
        unit = r["unit"]
        if unit == "s":
            ms = fmt_stats(m) if isinstance(m, dict) else fmt_s(m)
            cmp_ = fmt_s(r["compare"]) if r["compare"] is not None else "-"
        else:
            def fm(v, unit=unit):
                return f"{v:.1f} {unit}"
            ms = (fmt_stats(m, fm) if isinstance(m, dict) else
                  (fm(m) if m is not None else "n/a"))
            cmp_ = fm(r["compare"]) if r["compare"] is not None else "-"
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"
        met = {True: "MET", False: "NOT MET", None: ""}[r["met"]]
        print(f"  {r['metric']:<46} {ms:<38} vs {cmp_:<10} [{r['compare_src']}] "
              f"ratio {ratio:<7} goal {r['goal']} {met}")
        if r.get("note"):
            print(f"      note: {r['note']}")


# ---- processes -------------------------------------------------------------------------------
def run(argv: list[str], env: dict, check: bool = True, timeout: float = 120,
        input: str | None = None) -> subprocess.CompletedProcess:
    cp = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, input=input)
    if check and cp.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} -> rc {cp.returncode}: {cp.stderr.strip()[:500]}")
    return cp


def time_call(argv: list[str], env: dict) -> float:
    """Wall time of one call (fork+exec+run+exit), output discarded."""
    t0 = time.perf_counter()
    cp = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t0
    if cp.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} -> rc {cp.returncode}: {cp.stderr.decode()[:300]}")
    return dt


def measured_call(argv: list[str], env: dict) -> tuple[float, int, int]:
    """(wall seconds, bytes written to stdout, peak RSS in KiB) of one call: the child's own
    rusage (os.wait4), not the sum over every child this process ever had."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    size = 0
    while chunk := proc.stdout.read(1 << 16):
        size += len(chunk)
    _, status, usage = os.wait4(proc.pid, 0)
    dt = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} -> rc {proc.returncode}")
    return dt, size, usage.ru_maxrss


def rss_kib(pid: int) -> dict:
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0])
    return out


def cpu_seconds(pid: int) -> float:
    """user+system CPU time a process has used so far."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(") ", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tck


def _pids_mentioning(text: str) -> list[int]:
    me = os.getpid()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                cmd = fh.read()
            with open(f"/proc/{d}/stat") as fh:
                st = fh.read().rsplit(") ", 1)[1][0]
        except OSError:
            continue
        if st != "Z" and text.encode() in cmd:
            out.append(int(d))
    return out


# ---- targets ---------------------------------------------------------------------------------
def _clean_env() -> dict:
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SACCT_", "SINFO_", "SCANCEL_", "MUSTER_")):
            del env[k]
    return env


_REMOVE_AT_EXIT: list[str] = []


def remove_at_exit(path: str) -> None:
    """Delete ``path`` when the benchmark process ends, not now. A cluster's state directory
    holds thousands of files (a spool directory per job); deleted between two benchmarks,
    they made the next one's file creations several times dearer on this machine's ext4
    (without a journal it skips inodes freed in the last ~30 s, reading each one's inode
    block: measured, ``--array=1-1000`` 5.4 s → 7.8 s right after 6,000 files were
    deleted). What one benchmark leaves must not be charged to the next."""
    if not _REMOVE_AT_EXIT:
        atexit.register(_remove_all)
    _REMOVE_AT_EXIT.append(path)


def _remove_all() -> None:
    while _REMOVE_AT_EXIT:
        shutil.rmtree(_REMOVE_AT_EXIT.pop(), ignore_errors=True)


class MusterCluster:
    """``with MusterCluster() as c:`` — a fresh 4-node cluster, always stopped on exit."""

    kind = "muster"

    def __init__(self, nodes: int = 4, gpus: int = 8, extra: tuple[str, ...] = ()):
        self.nodes = nodes
        self.extra = extra
        self.dir = tempfile.mkdtemp(prefix="musterbench-")
        os.chmod(self.dir, 0o755)
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.env = _clean_env()
        self.env["PATH"] = BIN + os.pathsep + self.env.get("PATH", "/usr/bin:/bin")
        self.env["MUSTER_CONF"] = self.conf
        # keep `muster up` from re-pointing the invoking user's ~/.config/muster/slurm.conf
        # (as root it still rewrites /etc/muster/slurm.conf; MUSTER_CONF makes that irrelevant)
        self.env["XDG_CONFIG_HOME"] = os.path.join(self.dir, "xdg")
        self.gpus = gpus
        self.work = os.path.join(self.dir, "work")
        os.makedirs(self.work, mode=0o1777)
        os.chmod(self.work, 0o1777)
        self.leftovers: list[int] = []

    def cmd(self, name: str) -> str:
        return os.path.join(BIN, name)

    def __enter__(self) -> MusterCluster:
        try:
            run([self.cmd("muster"), "up", "--state-dir", self.dir, "--nodes", str(self.nodes),
                 "--gpus-per-node", str(self.gpus), *self.extra], self.env, timeout=180)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def daemon_pids(self) -> dict[str, int]:
        """{"musterctld": pid, "musterd node1": pid, ...} from `muster status --json`."""
        st = json.loads(run([self.cmd("muster"), "status", "--json", "--state-dir", self.dir],
                            self.env).stdout)
        return {d["name"]: d["pid"] for d in st["daemons"]}

    def controller_pid(self) -> int:
        return self.daemon_pids()["musterctld"]

    def cpu_snapshot(self) -> dict[str, float]:
        """CPU seconds used so far by the controller and by all agents together."""
        pids = self.daemon_pids()
        out = {"controller": 0.0, "agents": 0.0}
        for name, pid in pids.items():
            try:
                out["controller" if name == "musterctld" else "agents"] += cpu_seconds(pid)
            except OSError:
                pass
        return out

    def __exit__(self, *exc) -> None:
        try:
            if os.path.exists(os.path.join(self.dir, "muster.pids")):
                run([self.cmd("muster"), "down", "--state-dir", self.dir], self.env, check=False,
                    timeout=60)
        finally:
            # anything still running that was started for this state dir is ours: stop it
            deadline = time.time() + 5
            left = _pids_mentioning(self.dir)
            while left and time.time() < deadline:
                time.sleep(0.1)
                left = _pids_mentioning(self.dir)
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.leftovers = left
            if left:
                print(f"  warning: killed {len(left)} leftover process(es) of {self.dir}: {left}",
                      file=sys.stderr)
            remove_at_exit(self.dir)

    def cleanup_jobs(self) -> None:
        pass  # the whole cluster goes away


class SlurmTarget:
    """A running real Slurm (only used when /usr/bin/sbatch exists and its controller answers)."""

    kind = "slurm"

    def __init__(self, conf: str):
        self.conf = conf
        self.env = _clean_env()
        self.env["PATH"] = "/usr/bin:/bin:/usr/sbin:/sbin"
        self.env["SLURM_CONF"] = conf
        self.dir = tempfile.mkdtemp(prefix="slurmbench-")
        self.work = os.path.join(self.dir, "work")
        os.makedirs(self.work, mode=0o1777)
        os.chmod(self.work, 0o1777)

    def cmd(self, name: str) -> str:
        return os.path.join("/usr/bin", name)

    def __enter__(self) -> SlurmTarget:
        return self

    def __exit__(self, *exc) -> None:
        self.cleanup_jobs()
        shutil.rmtree(self.dir, ignore_errors=True)

    def cleanup_jobs(self) -> None:
        run([self.cmd("scancel"), "-n", JOB_NAME, "-u", str(os.getuid())], self.env, check=False)

    def controller_pid(self) -> int | None:
        for path in ("/var/lib/slurm-bench/run/slurmctld.pid", "/var/lib/slurm-ref/run/slurmctld.pid",
                     "/run/slurmctld.pid", "/var/run/slurmctld.pid"):
            try:
                with open(path) as fh:
                    pid = int(fh.read())
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if self.conf.encode() in fh.read() or "slurm-bench" not in path:
                        return pid
            except (OSError, ValueError):
                continue
        return None


def detect_slurm() -> SlurmTarget | None:
    """Real Slurm: /usr/bin/sbatch present and a slurmctld that answers ``scontrol ping``.

    The benchmark instance (/etc/slurm-bench) is preferred, then the shared one (/etc/slurm).
    Nothing is installed or started here.
    """
    if not os.access("/usr/bin/sbatch", os.X_OK):
        return None
    for conf in ("/etc/slurm-bench/slurm.conf", "/etc/slurm/slurm.conf"):
        if not os.path.exists(conf):
            continue
        env = _clean_env()
        env["SLURM_CONF"] = conf
        try:
            cp = subprocess.run(["/usr/bin/scontrol", "ping"], env=env, capture_output=True,
                                text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if cp.returncode == 0 and " UP" in cp.stdout:
            return SlurmTarget(conf)
    return None


# ---- job helpers -----------------------------------------------------------------------------
def sbatch(target, *args: str, cwd: str | None = None) -> int:
    cp = subprocess.run([target.cmd("sbatch"), "--parsable", "-J", JOB_NAME, *args],
                        env=target.env, capture_output=True, text=True, cwd=cwd or target.work)
    if cp.returncode != 0:
        raise RuntimeError(f"sbatch failed: {cp.stderr.strip()}")
    return int(cp.stdout.strip().split(";")[0])


def parallel(n_workers: int, n_items: int, fn) -> list:
    """Call fn(i) for i in range(n_items) from n_workers threads; return results in order."""
    out: list = [None] * n_items
    errors: list = []
    lock = threading.Lock()
    nxt = [0]

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= n_items or errors:
                return
            try:
                out[i] = fn(i)
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)
                return

    threads = [threading.Thread(target=worker) for _ in range(n_workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out


def active_count(target) -> int:
    """Jobs still pending/running/completing (one `squeue -h -o %i` call)."""
    cp = run([target.cmd("squeue"), "-h", "-o", "%i", "-n", JOB_NAME], target.env)
    return len([x for x in cp.stdout.split() if x])


def wait_drained(target, timeout: float, interval: float = 0.5) -> float | None:
    """Poll squeue sparingly until none of our jobs is active; return the perf_counter time."""
    deadline = time.perf_counter() + timeout
    while True:
        now = time.perf_counter()
        if active_count(target) == 0:
            return now
        if now > deadline:
            return None
        time.sleep(interval)


def acct_states(target, since_epoch: int) -> dict[str, int]:
    """Count of our jobs per state in accounting (each array task counts once)."""
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since_epoch - 1))
    cp = run([target.cmd("sacct"), "-X", "-n", "-P", "--name", JOB_NAME, "-S", start, "-o",
              "JobIDRaw,State"], target.env)
    counts: dict[str, int] = {}
    for line in cp.stdout.splitlines():
        if "|" not in line:
            continue
        state = line.split("|")[1].split()[0]
        counts[state] = counts.get(state, 0) + 1
    return counts


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    with open("/proc/stat") as fh:
        vals = [int(x) for x in fh.readline().split()[1:]]
    tck = os.sysconf("SC_CLK_TCK")
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    total = sum(vals[:8])
    return (total - idle) / tck, total / tck


class CpuMeter:
    """Where the CPU went during a phase: controller, agents, whole machine (busy cores)."""

    def __init__(self, target):
        self.target = target

    def __enter__(self):
        self.t0 = time.perf_counter()
        self.m0 = machine_cpu()
        self.d0 = self.target.cpu_snapshot() if hasattr(self.target, "cpu_snapshot") else None
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t0
        m1 = machine_cpu()
        self.machine_busy_s = m1[0] - self.m0[0]
        self.daemons = None
        if self.d0 is not None:
            try:
                d1 = self.target.cpu_snapshot()
                self.daemons = {k: d1[k] - self.d0[k] for k in d1}
            except Exception:  # noqa: BLE001 - informational only
                pass

    def summary(self) -> dict:
        out = {"wall_s": round(self.wall, 3), "machine_busy_cpu_s": round(self.machine_busy_s, 2),
               "avg_busy_cores": round(self.machine_busy_s / self.wall, 2) if self.wall else None}
        if self.daemons:
            out.update({f"{k}_cpu_s": round(v, 2) for k, v in self.daemons.items()})
        return out
