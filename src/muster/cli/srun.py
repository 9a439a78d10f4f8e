"""srun: run a parallel job step — in a new allocation, or inside an existing one.

Standalone, srun asks the controller for an allocation on a connection it keeps open (the
allocation's lease: if srun dies, the allocation is given back), waits for it with Slurm's
messages, runs step 0 and releases the allocation with the step's exit code. Inside an
allocation (``SLURM_JOB_ID`` set, or ``--jobid``), it creates the next step of that job.

I/O: srun listens on a TCP port; every node's step daemon connects back (authenticated with a
per-step key the controller handed to both) and streams its tasks' stdout/stderr as raw
frames (muster.common.iostream). srun reassembles lines per task, so tasks interleave only at
line boundaries; ``-l`` prefixes ``N: ``. Stdin goes to task 0 (``--input=all`` to every task).

Signals: SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGUSR2 are forwarded to the tasks; a second Ctrl-C
within one second kills the step. Exit code: the highest task exit code, or 128+signal when a
task was killed by a signal.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import sys
import time

from muster.cli.getopt import NO_ARG, OPTIONAL, REQUIRED, CliExit, GetoptParser, OptSpec
from muster.common import iostream as io

PROG = "srun"

# srun-specific options; the job-request options come from sbatch's table (jobopts)
_SRUN_ONLY = [
    ("l", "label", NO_ARG), ("K", "kill-on-bad-exit", OPTIONAL), ("u", "unbuffered", NO_ARG),
    (None, "pty", NO_ARG), (None, "overlap", NO_ARG), (None, "exact", NO_ARG),
    (None, "jobid", REQUIRED), (None, "multi-prog", NO_ARG), ("W", "wait", REQUIRED),
    ("X", "disable-status", NO_ARG), ("Z", "no-allocate", NO_ARG), ("E", "preserve-env", NO_ARG),
    (None, "cpu-bind", REQUIRED), (None, "task-prolog", REQUIRED), (None, "task-epilog", REQUIRED),
    (None, "prolog", REQUIRED), (None, "epilog", REQUIRED), ("T", "threads", REQUIRED),
    (None, "accel-bind", REQUIRED), (None, "resv-ports", OPTIONAL), (None, "send-libs", OPTIONAL),
    (None, "slurmd-debug", REQUIRED), (None, "interactive", NO_ARG), (None, "external-launcher", NO_ARG),
    (None, "het-group", REQUIRED), (None, "compress", OPTIONAL), (None, "bcast", OPTIONAL),
    (None, "open-mode", REQUIRED), (None, "usage", NO_ARG), (None, "quit-on-interrupt", NO_ARG),
]
_SBATCH_ONLY = {"array", "wrap", "parsable", "test-only", "requeue", "no-requeue", "wait", "usage",
                "kill-on-invalid-dep", "open-mode", "ignore-pbs", "get-user-env", "export-file"}


def _parser():
    from muster.cli import jobopts
    specs, handlers = [], {}
    taken_short = {s for s, *_ in _SRUN_ONLY if s}
    for short, long, arg, handler in jobopts._TABLE:
        names = (long,) if isinstance(long, str) else tuple(long)
        if names[0] in _SBATCH_ONLY:
            continue
        spec = OptSpec(None if short in taken_short else short, long, arg)
        specs.append(spec)
        handlers[spec.dest] = handler
    srun_dests = set()
    for short, long, arg in _SRUN_ONLY:
        spec = OptSpec(short, long, arg)
        specs.append(spec)
        srun_dests.add(spec.dest)
    return GetoptParser(PROG, specs, stop_at_positional=True), handlers, srun_dests


def _err(text: str, code: int = 1) -> CliExit:
    return CliExit([f"srun: error: {text}"], code)


def _env_int(env, *names):
    for n in names:
        v = env.get(n)
        if v and v.split("(")[0].isdigit():
            return int(v.split("(")[0])
    return None


def _flag(cli_value, env, name: str) -> bool:
    """An on/off option: the command line wins, else the SLURM_* input variable (env.md §2)."""
    if cli_value:
        return True
    return name in env and _env_flag(env[name])


def _env_flag(value: str | None) -> bool:
    if value is None:
        return False
    v = value.strip().lower()
    return v in ("", "yes", "1") or (v.isdigit() and int(v) != 0)


class Invocation:
    def __init__(self):
        self.req: dict = {}
        self.srun: dict = {}
        self.argv: list[str] = []


def parse(argv: list[str], environ: dict, cwd: str) -> Invocation:
    from muster.cli import jobopts
    parser, handlers, srun_dests = _parser()
    occ, operands = parser.parse(argv)
    b = jobopts._Build()
    b.cwd = cwd
    b.now = int(time.time())
    b.src = "cli"
    inv = Invocation()
    for o in occ:
        d = o.spec.dest
        if d in srun_dests:
            inv.srun[d] = o.value if o.value is not None else True
        else:
            handlers[d](b, o.value, o.name)
    jobopts._finish_memory(b)
    jobopts._finish_gres(b)
    b.req["work_dir"] = os.path.normpath(os.path.join(cwd, b.chdir)) if b.chdir else cwd
    b.req["submit_dir"] = cwd
    b.req["submit_host"] = jobopts._short_hostname()
    b.req["umask"] = jobopts._current_umask()
    b.req["submit_line"] = " ".join(["srun"] + list(argv))[:4096]
    inv.req = b.req
    inv.flags = {k: getattr(b.inv, k, False) for k in ("help", "version", "verbose", "quiet")}
    inv.argv = operands
    return inv


# ---- controller connection ------------------------------------------------------------------

class Controller:
    """One persistent connection (the allocation lease lives as long as it does)."""

    def __init__(self):
        from muster.cli.client import socket_path
        from muster.common.errors import TransportError
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.connect(socket_path())
        except OSError:
            raise TransportError() from None

    def call(self, msg: dict, timeout: float | None = 60) -> dict:
        from muster.common import wire
        from muster.common.errors import TransportError, from_wire
        self.sock.settimeout(timeout)
        try:
            wire.send_frame(self.sock, msg)
            reply = wire.recv_frame(self.sock)
        except (OSError, wire.FrameError) as exc:
            raise TransportError(f"Unable to contact slurm controller ({exc})") from None
        if not reply.get("ok"):
            raise from_wire(reply)
        return reply


# ---- the step's I/O -------------------------------------------------------------------------

class StepIO:
    def __init__(self, label: bool, ntasks: int, unbuffered: bool):
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind((os.environ.get("MUSTER_SRUN_ADDR", "0.0.0.0"), 0))
        self.lsock.listen(1024)
        self.lsock.setblocking(False)
        self.port = self.lsock.getsockname()[1]
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.lsock, selectors.EVENT_READ, ("accept", None))
        self.label = label
        self.width = len(str(max(0, ntasks - 1)))
        self.unbuffered = unbuffered
        self.key = None
        self.expected_nodes: set[str] = set()
        self.conns: dict[socket.socket, dict] = {}
        self.done_nodes: set[str] = set()
        self.lost_nodes: set[str] = set()   # declared failed by the controller
        self.suspect: set[str] = set()      # stream broke; waiting for the controller's word
        self.exits: dict[int, dict] = {}
        self.partial: dict[tuple[int, int], bytearray] = {}
        self.task_node: dict[int, str] = {}
        self.stdin_node_sock = None
        self.pending_stdin: list[bytes] = []

    def _write(self, fd: int, task: int, data: bytes) -> None:
        out = sys.stdout.buffer if fd == io.STDOUT else sys.stderr.buffer
        if self.unbuffered and not self.label:
            out.write(data)
            out.flush()
            return
        buf = self.partial.setdefault((task, fd), bytearray())
        buf += data
        nl = buf.rfind(b"\n")
        if nl < 0:
            return
        lines = bytes(buf[:nl + 1])
        del buf[:nl + 1]
        if self.label:
            prefix = f"{task:>{self.width}}: ".encode()
            lines = b"".join(prefix + line for line in lines.splitlines(keepends=True))
        out.write(lines)
        out.flush()

    def _flush_task(self, task: int) -> None:
        for fd in (io.STDOUT, io.STDERR):
            buf = self.partial.pop((task, fd), None)
            if buf:
                data = bytes(buf)
                if self.label:
                    data = f"{task:>{self.width}}: ".encode() + data
                out = sys.stdout.buffer if fd == io.STDOUT else sys.stderr.buffer
                out.write(data + b"\n")
                out.flush()

    def send_all(self, data: bytes) -> None:
        for s in list(self.conns):
            try:
                s.sendall(data)
            except OSError:
                pass

    def signal_tasks(self, sig: int) -> None:
        self.send_all(io.pack(io.SIGNAL, 0, json.dumps({"signal": sig}).encode()))

    def finished(self) -> bool:
        return bool(self.expected_nodes) and (self.done_nodes | self.lost_nodes) >= self.expected_nodes

    def poll(self, timeout: float) -> None:
        for key, _ in self.sel.select(timeout):
            kind, st = key.data
            if kind == "accept":
                try:
                    conn, _ = self.lsock.accept()
                except BlockingIOError:
                    continue
                conn.setblocking(False)
                self.conns[conn] = {"dec": io.Decoder(), "node": None}
                self.sel.register(conn, selectors.EVENT_READ, ("conn", conn))
            elif kind == "stdin":
                self._read_stdin()
            else:
                self._read(st)

    def _read(self, conn) -> None:
        info = self.conns.get(conn)
        try:
            data = conn.recv(262144)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close(conn, lost=info is not None and info["node"] not in self.done_nodes)
            return
        try:
            frames = info["dec"].feed(data)
        except ValueError:
            self._close(conn, lost=True)
            return
        for kind, task, payload in frames:
            if kind == io.HELLO:
                hello = json.loads(payload)
                if hello.get("key") != self.key:
                    self._close(conn, lost=False)
                    return
                info["node"] = hello["node"]
                for t in hello.get("tasks", []):
                    self.task_node[t] = hello["node"]
                if 0 in hello.get("tasks", []) or self.stdin_all:
                    self.stdin_targets.append(conn)
                    for chunk in self.pending_stdin:
                        conn.sendall(chunk)
            elif info["node"] is None:
                self._close(conn, lost=False)
                return
            elif kind in (io.STDOUT, io.STDERR):
                self._write(kind, task, payload)
            elif kind == io.EXIT:
                self._flush_task(task)
                self.exits[task] = json.loads(payload)
                if self.on_exit:
                    self.on_exit(task, self.exits[task])
            elif kind == io.DONE:
                self.done_nodes.add(info["node"])

    def _close(self, conn, lost: bool) -> None:
        info = self.conns.pop(conn, None)
        try:
            self.sel.unregister(conn)
        except (KeyError, ValueError):
            pass
        conn.close()
        if info and info["node"] and info["node"] not in self.done_nodes and lost:
            self.suspect.add(info["node"])

    # stdin ------------------------------------------------------------------------------------
    stdin_all = False
    stdin_targets: list = []
    on_exit = None

    def attach_stdin(self, target: str) -> None:
        self.stdin_targets = []
        if target == "none":
            return
        self.stdin_all = target == "all"
        try:
            fd = sys.stdin.fileno()
            os.fstat(fd)
        except (OSError, ValueError):
            return
        self.stdin_fd = fd
        try:
            os.set_blocking(fd, False)
            self.sel.register(fd, selectors.EVENT_READ, ("stdin", None))
        except (PermissionError, OSError):
            # a regular file or /dev/null cannot be polled: it is always readable
            self.stdin_file = True

    stdin_file = False

    def pump_stdin_file(self) -> None:
        if self.stdin_file and self.stdin_targets:
            self._read_stdin()

    def _read_stdin(self) -> None:
        try:
            data = os.read(self.stdin_fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        task = 0xFFFFFFFF if self.stdin_all else 0
        frame = io.pack(io.STDIN, task, data) if data else io.pack(io.STDIN_EOF, task)
        if not data:
            if self.stdin_file:
                self.stdin_file = False
            else:
                self.sel.unregister(self.stdin_fd)
        if self.stdin_targets:
            for s in self.stdin_targets:
                try:
                    s.sendall(frame)
                except OSError:
                    pass
        else:
            self.pending_stdin.append(frame)


def _fmt_ids(ids: list[int]) -> str:
    ids = sorted(ids)
    parts, i = [], 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


def report_exits(exits: dict[int, dict], task_node: dict[int, str], ntasks: int,
                 lost_nodes: set[str]) -> int:
    """Print Slurm's per-node failure lines; return srun's exit code."""
    import signal as sigmod
    groups: dict[tuple[str, str], list[int]] = {}
    code = 0
    for t in range(ntasks):
        e = exits.get(t)
        node = task_node.get(t, "?")
        if e is None:
            continue
        if e.get("signal"):
            name = sigmod.strsignal(e["signal"]) or f"Signal {e['signal']}"
            groups.setdefault((node, name), []).append(t)
            code = max(code, 128 + e["signal"])
        elif e.get("exit_code"):
            groups.setdefault((node, f"Exited with exit code {e['exit_code']}"), []).append(t)
            code = max(code, e["exit_code"])
    for (node, what), tids in groups.items():
        word = "task" if len(tids) == 1 else "tasks"
        sys.stderr.write(f"srun: error: {node}: {word} {_fmt_ids(tids)}: {what}\n")
    if lost_nodes:
        code = max(code, 1)  # "Node failure on X" was printed when the node was lost
    missing = [t for t in range(ntasks) if t not in exits]
    if missing and not lost_nodes:
        code = max(code, 1)
    return code


def _step_request(inv: Invocation, env: dict, inside: bool) -> dict:
    r, s = inv.req, inv.srun
    gpn = None
    for g in r.get("gres") or []:
        if g.get("name") == "gpu":
            gpn = g.get("count", 1)
    step = {
        "ntasks": r.get("ntasks"), "nodes_min": r.get("nodes_min"), "nodes_max": r.get("nodes_max"),
        "ntasks_per_node": r.get("ntasks_per_node"), "cpus_per_task": r.get("cpus_per_task"),
        "gpus_per_task": (r.get("gpus_per_task") or {}).get("count"),
        "gpus_per_node": gpn, "gpus": (r.get("gpus") or {}).get("count"),
        "nodelist": r.get("nodelist"), "exclude": r.get("exclude"),
        "distribution": r.get("distribution") or env.get("SLURM_DISTRIBUTION") or "block",
        "overlap": _flag(s.get("overlap"), env, "SLURM_OVERLAP"),
        "argv": inv.argv, "cwd": r.get("work_dir"), "name": r.get("name"),
        "label": bool(s.get("label")), "open_mode": s.get("open-mode") or s.get("open_mode"),
        "output": _io_pattern(r.get("std_out")), "error": _io_pattern(r.get("std_err")),
        "input": _io_pattern(r.get("std_in")), "umask": r.get("umask"),
    }
    stdin = r.get("std_in")
    step["stdin_target"] = "all" if stdin == "all" else ("none" if stdin == "none" else
                                                         (int(stdin) if stdin and stdin.isdigit() else 0))
    if inside:
        # srun reads the allocation's geometry from the environment (env.md §2)
        if step["nodes_min"] is None and step["nodelist"] is None:
            n = _env_int(env, "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
            if n and step["ntasks"] is None:
                step["nodes_min"] = n
        if step["ntasks"] is None and step["ntasks_per_node"] is None:
            step["ntasks"] = _env_int(env, "SLURM_NTASKS", "SLURM_NPROCS")
        if step["ntasks_per_node"] is None and step["ntasks"] is None:
            step["ntasks_per_node"] = _env_int(env, "SLURM_NTASKS_PER_NODE")
        if step["cpus_per_task"] is None:
            step["cpus_per_task"] = _env_int(env, "SLURM_CPUS_PER_TASK")
        if step["gpus_per_task"] is None:
            step["gpus_per_task"] = _env_int(env, "SLURM_GPUS_PER_TASK")
    if r.get("ntasks") is not None and r.get("nodes_min") is None and r.get("nodelist") is None and inside:
        step["nodes_min"] = None  # -n alone: as many nodes as needed, up to the allocation
    return step


def _io_pattern(value: str | None) -> str | None:
    if value is None or value in ("all", "none") or value.isdigit():
        return None
    return value


def _main() -> int:
    env = dict(os.environ)
    inv = parse(sys.argv[1:], env, os.getcwd())
    if inv.flags.get("version"):
        from muster import SLURM_COMPAT_VERSION
        print(f"slurm {SLURM_COMPAT_VERSION} (muster)")
        return 0
    if inv.flags.get("help") or inv.srun.get("usage"):
        print("Usage: srun [OPTIONS(0)... [executable(0) [args(0)...]]]\n"
              "See the Slurm srun documentation; Muster accepts the same options.")
        return 0
    if not inv.argv:
        raise _err("No command given to execute.")
    quiet = bool(inv.flags.get("quiet"))
    job_id = inv.srun.get("jobid") or env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    inside = job_id is not None
    if inside:
        jid = str(job_id).split("_")[0].split(".")[0]
        if not jid.isdigit():
            raise _err(f"Invalid job id specified: {job_id}")
        job_id = int(jid)
    step_env = {k: v for k, v in env.items()}
    export = inv.req.get("export") or env.get("SLURM_EXPORT_ENV")
    if export:
        from muster.cli.jobopts import build_export_env
        step_env = build_export_env(export, env)
    ctl = Controller()
    own_allocation = False
    from muster.common.errors import RequestError
    if not inside:
        req = dict(inv.req)
        if not req.get("name"):
            req["name"] = os.path.basename(inv.argv[0])
        req["argv"] = inv.argv
        req["command"] = inv.argv[0]
        req["submit_dir"] = os.getcwd()
        try:
            job_id = ctl.call({"op": "allocate", "job": req})["job_id"]
        except RequestError as exc:
            if exc.code == "invalid_partition":
                sys.stderr.write(f"srun: error: invalid partition specified: {req.get('partition')}\n")
            raise _err(f"Unable to allocate resources: {exc.message}") from None
        own_allocation = True
        job = _wait_allocation(ctl, job_id, quiet)
        if job is None:
            return 1
    code = 1
    try:
        code = _run_step(ctl, job_id, inv, step_env, inside, quiet)
    finally:
        if own_allocation:
            try:
                ctl.call({"op": "release_alloc", "job_id": job_id, "exit_code": min(code, 255),
                          "signal": 0})
            except Exception:
                pass
    return code


def _wait_allocation(ctl, job_id: int, quiet: bool):
    queued = False
    while True:
        # a first short, silent wait: on an idle cluster the allocation comes within ms
        reply = ctl.call({"op": "wait_alloc", "job_id": job_id, "timeout": 30 if queued else 0.5},
                         timeout=None)
        job = reply["job"]
        if job["state"] == "RUNNING":
            if queued and not quiet:
                sys.stderr.write(f"srun: job {job_id} has been allocated resources\n")
            return job
        if job["state"] != "PENDING":
            sys.stderr.write(f"srun: Job allocation {job_id} has been revoked\n")
            return None
        if not queued:
            queued = True
            if not quiet:
                sys.stderr.write(f"srun: job {job_id} queued and waiting for resources\n")
                sys.stderr.flush()


def _run_step(ctl, job_id: int, inv: Invocation, step_env: dict, inside: bool, quiet: bool) -> int:
    from muster.common.errors import RequestError
    s = inv.srun
    label = _flag(s.get("label"), os.environ, "SLURM_LABELIO")
    step = _step_request(inv, os.environ if inside else {}, inside)
    step["label"] = label
    kb = s.get("kill_on_bad_exit")
    kill_bad = (kb is True or kb == "1") if kb is not None else _flag(None, os.environ, "SLURM_KILL_BAD_EXIT")
    stdin_target = step["stdin_target"]
    # strip the allocation's per-step variables from what the tasks inherit
    for k in ("SLURM_STEP_ID", "SLURM_STEPID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
              "SLURM_TASK_PID", "SLURM_GTIDS", "SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES",
              "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE", "RANK", "LOCAL_RANK",
              "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE", "GROUP_RANK",
              "NODE_RANK"):
        step_env.pop(k, None)
    step["env"] = step_env
    sio = StepIO(label, 1, bool(s.get("unbuffered")))
    step["io_port"] = sio.port
    delay = 0.05
    announced = False
    while True:
        try:
            reply = ctl.call({"op": "step_create", "job_id": job_id, "step": step})
            break
        except RequestError as exc:
            if exc.code == "busy":
                if not announced and not quiet:
                    sys.stderr.write(f"srun: Job {job_id} step creation temporarily disabled, "
                                     f"retrying ({exc.message})\n")
                    announced = True
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            if exc.code in ("invalid_job_id", "already_done"):
                raise _err(f"Unable to create step for job {job_id}: {exc.message}") from None
            raise _err(f"Unable to create step for job {job_id}: {exc.message}") from None
    if announced and not quiet:
        sys.stderr.write(f"srun: Step created for StepId={job_id}.{reply['step_id']}\n")
    ntasks = reply["ntasks"]
    sio.width = len(str(max(0, ntasks - 1)))
    sio.key = reply["key"]
    sio.expected_nodes = {n["node"] for n in reply["layout"]}
    for n in reply["layout"]:
        for t in n["tasks"]:
            sio.task_node[t] = n["node"]
    sio.attach_stdin("none" if stdin_target == "none" or step.get("input") else
                     ("all" if stdin_target == "all" else "0"))
    state = {"last_int": 0.0, "killed": False}

    def on_exit(task, e):
        if kill_bad and (e.get("exit_code") or e.get("signal")) and not state["killed"]:
            state["killed"] = True
            sio.signal_tasks(signal.SIGKILL)
    sio.on_exit = on_exit

    pending_signals: list[int] = []

    def handler(signum, frame):
        pending_signals.append(signum)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
                signal.SIGQUIT):
        signal.signal(sig, handler)
    reported_lost: set[str] = set()

    def report_lost():
        new_lost = sorted(sio.lost_nodes - reported_lost)
        if new_lost:
            # a node's step daemon vanished without its final report: like Slurm, the step
            # cannot go on without that node — say so now and stop the tasks elsewhere
            for n in new_lost:
                sys.stderr.write(f"srun: error: Node failure on {n}\n")
            sys.stderr.flush()
            reported_lost.update(new_lost)
            if not state["killed"] and not sio.finished():
                state["killed"] = True
                sio.signal_tasks(signal.SIGKILL)

    connect_deadline = time.time() + float(os.environ.get("MUSTER_STEP_CONNECT_TIMEOUT", "60"))
    next_check = 0.0
    while not sio.finished():
        sio.poll(0 if sio.stdin_file and sio.stdin_targets else 0.2)
        sio.pump_stdin_file()
        while pending_signals:
            sig = pending_signals.pop(0)
            if sig == signal.SIGINT:
                now = time.time()
                if now - state["last_int"] < 1.0:
                    sys.stderr.write("srun: forcing job termination\n")
                    state["killed"] = True
                    sio.signal_tasks(signal.SIGKILL)
                else:
                    sys.stderr.write("srun: interrupt (one more within 1 sec to abort)\n")
                    sio.signal_tasks(signal.SIGINT)
                state["last_int"] = now
            else:
                sio.signal_tasks(sig)
        connected = {i["node"] for i in sio.conns.values() if i["node"]} | sio.done_nodes | sio.suspect
        if connected < sio.expected_nodes and time.time() > connect_deadline:
            sio.suspect |= sio.expected_nodes - connected
        if sio.suspect and time.time() >= next_check:
            # a node's stream broke: only the controller decides whether the node failed
            next_check = time.time() + 0.5
            try:
                st = ctl.call({"op": "step_status", "job_id": job_id, "step_id": reply["step_id"]})
            except Exception:
                st = {"running": True, "down_nodes": []}
            for n in st.get("down_nodes", []):
                sio.lost_nodes.add(n)
            if not st.get("running"):
                sio.lost_nodes |= sio.suspect - sio.done_nodes
                break
        report_lost()
    report_lost()
    for t in list(sio.task_node):
        sio._flush_task(t)
    sys.stdout.flush()
    return report_exits(sio.exits, sio.task_node, ntasks, sio.lost_nodes)


def main() -> None:
    from muster.cli.client import run_main
    run_main("srun", _main)


if __name__ == "__main__":
    main()
