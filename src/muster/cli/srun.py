"""srun: run a parallel job step — in a new allocation, or inside an existing one.

Standalone, srun asks the controller for an allocation on a connection it keeps open (the
allocation's lease: if srun dies, the allocation is given back), waits for it with Slurm's
messages, runs step 0 and releases the allocation with the step's exit code. Inside an
allocation (``SLURM_JOB_ID`` set, or ``--jobid``), it creates the next step of that job.

I/O: srun listens on a TCP port of the address the step daemons will connect to (loopback
for a local controller; never every interface unless ``MUSTER_SRUN_ADDR`` says so); every
node's step daemon connects back, and the two prove to each other that they hold the per-step
key the controller handed to both (the key itself never crosses this connection), then every
frame is sealed (muster.common.iostream). srun reassembles lines per task, so tasks interleave
only at line boundaries; ``-l`` prefixes ``N: ``. Stdin goes to task 0 (``--input=all`` to
every task).

``--pty`` (stdin must be a terminal, else Slurm's "Not using a pseudo-terminal" and the step
runs without one): task 0 runs on a pseudo-terminal on its node, the other tasks' stdio is
/dev/null. srun puts its terminal in raw mode (output processing kept, as Slurm) for the run and
restores it — and stdin's blocking flag — however the run ends; every byte typed, ^C and ^Z
included, goes to the remote line discipline, which turns them into the remote foreground
job's signals. The size travels in SLURM_PTY_WIN_ROW/COL at launch and in WINSIZE frames on
SIGWINCH (and once on connecting, for a change made before); output is written unbuffered.

Signals: SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGUSR2 are forwarded to the tasks; a second Ctrl-C
within one second kills the step. Exit code: the highest task exit code, or 128+signal when a
task was killed by a signal.
"""

from __future__ import annotations

import errno
import json
import os
import selectors
import signal
import socket
import sys
import time

from muster.cli.getopt import NO_ARG, OPTIONAL, REQUIRED, CliExit, GetoptParser, OptSpec
from muster.common import iostream as io
from muster.common.hostlist import int_ranges
from muster.common.linkauth import HANDSHAKE_TIMEOUT, LinkAuthError, Responder

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from muster.common.linkauth import Sealer

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
    ("I", "immediate", OPTIONAL),  # srun and salloc only: Slurm 22.05's sbatch has no -I
    ("r", "relative", REQUIRED), (None, "bcast-exclude", REQUIRED),
]
# salloc's own options; in Slurm's salloc -K is --kill-command (srun's -K is
# --kill-on-bad-exit, which salloc keeps by its long name only)
_SALLOC_ONLY = [("K", "kill-command", OPTIONAL), (None, "bell", NO_ARG),
                (None, "no-bell", NO_ARG), (None, "get-user-env", OPTIONAL)]
_SBATCH_ONLY = {"array", "wrap", "parsable", "test-only", "requeue", "no-requeue", "wait", "usage",
                "kill-on-invalid-dep", "open-mode", "ignore-pbs", "get-user-env", "export-file"}


def _parser(prog: str = PROG):
    from muster.cli import jobopts
    specs, handlers = [], {}
    own = _SRUN_ONLY + (_SALLOC_ONLY if prog == "salloc" else [])
    own_longs = {long for _, long, _ in own}
    taken_short = {s for s, *_ in own if s}
    for short, long, arg, handler in jobopts._TABLE:
        names = (long,) if isinstance(long, str) else tuple(long)
        if names[0] in _SBATCH_ONLY or names[0] in own_longs:
            continue
        spec = OptSpec(None if short in taken_short else short, long, arg)
        specs.append(spec)
        handlers[spec.dest] = handler
    srun_dests = set()
    salloc_shorts = {s for s, *_ in own[len(_SRUN_ONLY):] if s}
    for short, long, arg in own:
        if short in salloc_shorts and (short, long, arg) in _SRUN_ONLY:
            short = None
        spec = OptSpec(short, long, arg)
        specs.append(spec)
        srun_dests.add(spec.dest)
    return (GetoptParser(prog, specs, stop_at_positional=True, info="first"), handlers,
            srun_dests)


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
        self.flags: dict = {}  # help, version, verbose, quiet
        self.given: list[tuple[str, str | None]] = []  # (long name, value) as on the line
        self.env_extra: dict[str, str] = {}  # --container*: common.containerspec's variable
        from muster.cli.srunlog import LaunchLog
        self.log = LaunchLog(0)  # -v's lines (level set by _main)


def parse(argv: list[str], environ: dict, cwd: str, prog: str = PROG) -> Invocation:
    """srun's (and salloc's, ``prog``) command line → the job request and srun's own flags.
    Options Muster refuses stop here; those it warns about are reported on stderr
    (muster.cli.optstatus)."""
    from muster.cli import jobopts, optstatus
    parser, handlers, srun_dests = _parser(prog)
    occ, operands = parser.parse(argv)
    b = jobopts._Build()
    b.prog = prog
    b.cwd = cwd
    b.now = int(time.time())
    b.src = "cli"
    inv = Invocation()
    try:
        for o in occ:
            d = o.spec.dest
            if d in srun_dests:
                inv.srun[d] = o.value if o.value is not None else True
            else:
                handlers[d](b, o.value, o.name)
        jobopts._finish_memory(b)
        jobopts._finish_gres(b)
        jobopts.finish_container(b)
    except CliExit as exc:
        raise _as_prog(exc, prog) from None
    b.req["work_dir"] = os.path.normpath(os.path.join(cwd, b.chdir)) if b.chdir else cwd
    b.req["submit_dir"] = cwd
    b.req["submit_host"] = jobopts._short_hostname()
    b.req["umask"] = jobopts._current_umask()
    b.req["submit_line"] = " ".join(["srun"] + list(argv))[:4096]
    inv.req = b.req
    inv.env_extra = dict(b.extra_env)  # the container request, for the tasks' environment
    for line in b.inv.warnings + optstatus.check(prog, [o.spec.long or o.spec.short for o in occ]):
        sys.stderr.write(line + "\n")
    if prog == PROG:
        _check_cpu_bind(inv.srun.get("cpu_bind") or environ.get("SLURM_CPU_BIND"))
    inv.flags = {k: getattr(b.inv, k, False) for k in ("help", "version", "verbose", "quiet")}
    inv.argv = operands
    inv.given = [(o.spec.long or o.spec.short or "", o.value) for o in occ]
    return inv


def _as_prog(exc: CliExit, prog: str) -> CliExit:
    """The job options' handlers are sbatch's (muster.cli.jobopts): their messages name this
    command instead, as Slurm's shared option code does."""
    exc.lines = [f"{prog}: " + ln[len("sbatch: "):] if ln.startswith("sbatch: ") else ln
                 for ln in exc.lines]
    return exc


CPU_BIND_HELP = """--cpu-bind=[quiet|verbose,]TYPE  (applied with TaskPlugin=task/affinity)
  quiet | verbose     bind silently (default), or report each task's mask on its stderr
  none                leave the tasks unbound
  cores | threads     each task gets cpus-per-task CPUs of the step, in rank order
  rank                task k gets the step's k-th CPU
  map_cpu:ID,...      task k gets CPU ID number k (the list repeats; ID*N repeats N times)
  mask_cpu:MASK,...   task k gets the CPUs of hex mask number k
  sockets | ldoms | boards, rank_ldom, map_ldom:, mask_ldom:
                      all of the step's CPUs on the node (Muster knows no topology)
  help                this text"""


def _check_cpu_bind(spec: str | None) -> None:
    """--cpu-bind (else SLURM_CPU_BIND) is refused here, before any allocation, when
    invalid; ``help`` prints the types and exits 0, as srun does."""
    if spec is None:
        return
    if spec.strip().lower() == "help":
        print(CPU_BIND_HELP)
        raise CliExit([], 0)
    from muster.common import cpubind
    try:
        cpubind.parse(spec)
    except ValueError as exc:
        raise _err(str(exc)) from None


# ---- controller connection ------------------------------------------------------------------

class Controller:
    """One persistent connection; the allocation's lease lives on it (``job_id``: the
    allocation srun or salloc made on it, or was told to hold). When it breaks — the
    controller restarted or failed over — muster.cli.lease reconnects, re-attaches the lease
    and re-sends the request, each changing request with its request id (a retry is answered,
    never executed twice)."""

    job_id: int | None = None

    def __init__(self):
        from muster.cli.client import socket_path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.connect(socket_path())
        except OSError:  # no controller this instant (a restart): retry, each controller
            self.sock.close()
            from muster.cli import lease
            self.sock = lease.connect()

    def exchange(self, msg: dict, timeout: float | None) -> dict:
        """One request on the current connection; the reply as the controller sent it.
        client._Retry when the connection ended first or reached a standby."""
        from muster.cli.client import round_trip
        from muster.common import wire
        self.sock.settimeout(timeout)
        return round_trip(self.sock, lambda: wire.send_frame(self.sock, msg))

    def call(self, msg: dict, timeout: float | None = 60, retry: float | None = None) -> dict:
        """The reply, or the MusterError it carries. ``retry``: seconds to ride out a broken
        connection (default: the client retry budget)."""
        from muster.cli.client import _Retry
        from muster.common import requestid
        from muster.common.errors import from_wire
        if "rid" not in msg and requestid.changes_state(msg):
            msg = {**msg, "rid": requestid.new_rid()}
        try:
            reply = self.exchange(msg, timeout)
        except _Retry:
            from muster.cli import lease
            reply = lease.resume(self, msg, timeout, retry)
        if msg.get("op") == "allocate" and reply.get("ok") and msg.get("lease") is not False:
            self.job_id = reply.get("job_id")
        if not reply.get("ok"):
            err = from_wire(reply)
            if isinstance(reply.get("detail"), str):
                err.detail = reply["detail"]  # Slurm's extra line ("CPU count per node ...")
            raise err
        return reply

    def keep_lease(self) -> None:
        """srun's step loop, about twice a second: a lease whose connection broke while idle
        (the controller restarted) is re-attached now, not at the next request, for the new
        controller ends an allocation nobody re-attaches within MusterLeaseGrace. One quick
        try per call (cli.lease.try_attach): the step's I/O is never held up for long."""
        if self.job_id is None or not self._broken():
            return
        from muster.cli import lease
        lease.try_attach(self)

    def _broken(self) -> bool:
        """Whether the idle connection has ended (the controller sends nothing unasked)."""
        try:
            self.sock.setblocking(False)  # (with a timeout, recv would first wait that long)
            return self.sock.recv(1, socket.MSG_PEEK) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True


# ---- the step's I/O -------------------------------------------------------------------------

MAX_UNPROVEN = 128  # connections still in their handshake, on top of one per node of the step
ACCEPT_BURST = 64   # connections accepted per readiness event of the listener
STDIN_BACKLOG = 4 << 20  # stdin bytes queued for a step daemon before srun stops reading stdin
UNPROVEN_READ = 16384  # bytes read at a time from an unproven connection (its frames: <= 64 KiB)


def _io_address(ctl_sock: socket.socket) -> str:
    """The address srun's I/O listener binds: the one the step daemons will connect to. The
    controller sends them to the address it sees srun's request come from — over its Unix
    socket, the loopback address; through a node's relay, the address the relay's link
    leaves from (muster.agent.relay) — so srun never listens on every interface unless
    ``MUSTER_SRUN_ADDR`` says so."""
    override = os.environ.get("MUSTER_SRUN_ADDR")
    if override:
        return override
    if ctl_sock.family in (socket.AF_INET, socket.AF_INET6):
        return ctl_sock.getsockname()[0]
    from muster.cli.client import relay_address
    return relay_address(ctl_sock) or "127.0.0.1"


class _Peer:
    """One connection to srun's I/O port. ``node`` is None until the handshake is complete
    (``hs`` holds it after a valid hello); then ``sealer`` seals what srun sends it and ``dec``
    checks every frame it sends. ``out``: sealed bytes the socket has not taken yet."""

    __slots__ = ("sock", "dec", "hs", "node", "sealer", "out", "deadline")
    hs: Responder | None
    node: str | None
    sealer: Sealer | None

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock, self.deadline = sock, deadline
        self.dec = io.Decoder()
        self.hs = self.node = self.sealer = None
        self.out = bytearray()


class StepIO:
    """srun's end of the step's I/O stream (muster.common.iostream): the listener, one
    authenticated connection per node, line reassembly, stdin and signal forwarding.

    Invariants: nothing a connection sends is acted on before its proof has checked out and its
    claims match the step's layout (job, step, a node not seen before, that node's tasks);
    after that each of its frames has passed its MAC check, and a frame that fails closes it
    like a lost node connection. An unproven connection holds at most one pre-auth frame of
    memory, HANDSHAKE_TIMEOUT of time and one of MAX_UNPROVEN (+1 per node) slots — when they
    run out, the oldest that has not even sent a valid hello goes first — so hostile
    connections may slow srun down but cannot lock the step daemons out."""

    winsize: bytes | None = None  # --pty: the terminal's size as a WINSIZE payload
    wake_r: int | None = None      # --pty: signal wake-up pipe (signals are handled at once)

    def __init__(self, label: bool, ntasks: int, unbuffered: bool, addr: str = "127.0.0.1"):
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        self.lsock = socket.socket(family, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind((addr, 0))
        self.lsock.listen(1024)
        self.lsock.setblocking(False)
        self.port = self.lsock.getsockname()[1]
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.lsock, selectors.EVENT_READ, ("accept", None))
        self.label = label
        self.width = len(str(max(0, ntasks - 1)))
        self.unbuffered = unbuffered
        self.key: bytes | None = None       # K; no hello is answered before the step exists
        self.job_id: int | None = None
        self.step_id: int | None = None
        self.layout: dict[str, list[int]] = {}
        self.expected_nodes: set[str] = set()
        self.peers: dict[socket.socket, _Peer] = {}
        self.unproven: dict[socket.socket, _Peer] = {}  # in accept order
        self.claimed: set[str] = set()      # nodes whose daemon has authenticated (once each)
        self.done_nodes: set[str] = set()
        self.lost_nodes: set[str] = set()   # declared failed by the controller
        self.suspect: set[str] = set()      # stream broke; waiting for the controller's word
        self.exits: dict[int, dict] = {}
        self.partial: dict[tuple[int, int], bytearray] = {}
        self.task_node: dict[int, str] = {}
        self.stdin_targets: list[_Peer] = []
        self.pending_stdin: list[tuple[int, int, bytes]] = []
        self.pending_bytes = 0
        self.stdin_paused = False
        self.on_exit: Callable[[int, dict], None] | None = None
        self.on_start: Callable[[str, int], None] | None = None  # a node's daemon has proved itself

    def set_step(self, job_id: int, reply: dict) -> None:
        """The controller's answer to step_create: the key and who may connect."""
        self.key = io.step_key(reply["key"])
        self.job_id, self.step_id = job_id, reply["step_id"]
        self.layout = {n["node"]: list(n["tasks"]) for n in reply["layout"]}
        self.expected_nodes = set(self.layout)
        for node, tasks in self.layout.items():
            for t in tasks:
                self.task_node[t] = node

    def _write(self, fd: int, task: int, data: bytes) -> None:
        """Write a task's output in whole lines; its unfinished last line waits in ``partial``.
        Without labels the frame's complete lines are written as they are (not copied)."""
        out = sys.stdout.buffer if fd == io.STDOUT else sys.stderr.buffer
        if self.unbuffered and not self.label:
            out.write(data)
            out.flush()
            return
        nl = data.rfind(b"\n")
        if nl < 0:
            self.partial.setdefault((task, fd), bytearray()).extend(data)
            return
        head = self.partial.pop((task, fd), None)
        if self.label:
            lines = bytes(head or b"") + data[:nl + 1]
            prefix = f"{task:>{self.width}}: ".encode()
            out.write(b"".join(prefix + line for line in lines.splitlines(keepends=True)))
        else:
            if head:
                out.write(head)
            out.write(memoryview(data)[:nl + 1])
        if nl + 1 < len(data):
            self.partial[(task, fd)] = bytearray(data[nl + 1:])
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

    def signal_tasks(self, sig: int, abort: bool = False) -> None:
        """``sig`` to every task; ``abort`` (with SIGKILL): the step daemons kill at once,
        without the SIGTERM and KillWait of a cancel (srun -W, as Slurm's step abort)."""
        payload = json.dumps({"signal": sig, **({"abort": True} if abort else {})}).encode()
        for peer in [p for p in self.peers.values() if p.node]:
            self._send(peer, io.SIGNAL, 0, payload)

    def finished(self) -> bool:
        return bool(self.expected_nodes) and (self.done_nodes | self.lost_nodes) >= self.expected_nodes

    def poll(self, timeout: float) -> None:
        for key, mask in self.sel.select(timeout):
            kind, peer = key.data
            if kind == "accept":
                self._accept()
            elif kind == "stdin":
                self._read_stdin()
            elif kind == "wake":
                self._drain_wake()
            elif peer is not None and self._open(peer):  # not closed earlier in this round
                if mask & selectors.EVENT_WRITE:
                    self._flush(peer)
                if mask & selectors.EVENT_READ and self._open(peer):
                    self._read(peer)
        self._expire()

    def _open(self, peer: _Peer) -> bool:
        return self.peers.get(peer.sock) is peer

    # connections ------------------------------------------------------------------------------
    def _accept(self) -> None:
        for _ in range(ACCEPT_BURST):
            try:
                conn, _ = self.lsock.accept()
            except BlockingIOError:
                return
            except OSError as exc:  # out of descriptors: make room; anything else: next time
                if exc.errno in (errno.EMFILE, errno.ENFILE) and self._drop_unproven():
                    continue
                return
            conn.setblocking(False)
            peer = _Peer(conn, time.monotonic() + HANDSHAKE_TIMEOUT)
            self.peers[conn] = self.unproven[conn] = peer
            self.sel.register(conn, selectors.EVENT_READ, ("peer", peer))
            if len(self.unproven) > MAX_UNPROVEN + len(self.expected_nodes):
                self._drop_unproven()

    def _drop_unproven(self) -> bool:
        """Close the oldest unproven connection that has not sent a valid hello, else the
        oldest one; False when there is none."""
        if not self.unproven:
            return False
        victim = next((p for p in self.unproven.values() if p.hs is None), None)
        self._close(victim or next(iter(self.unproven.values())), lost=False)
        return True

    def _expire(self) -> None:
        now = time.monotonic()
        while self.unproven:
            peer = next(iter(self.unproven.values()))  # the oldest: deadlines come in order
            if peer.deadline > now:
                return
            self._close(peer, lost=False)

    def _read(self, peer: _Peer) -> None:
        try:
            n = peer.dec.recv_into(peer.sock, 262144 if peer.node else UNPROVEN_READ)
        except BlockingIOError:
            return
        except OSError:
            n = 0
        if not n:
            self._close(peer, lost=True)
            return
        try:
            for kind, task, payload in peer.dec.frames():
                if peer.node is None:
                    if not self._handshake(peer, kind, payload):
                        self._close(peer, lost=False)
                        return
                elif not self._frame(peer, kind, task, payload):
                    raise ValueError("unexpected frame")
        except (ValueError, LinkAuthError) as exc:
            if peer.node:
                what = ("failed its integrity check" if isinstance(exc, LinkAuthError)
                        else "sent a malformed frame")
                sys.stderr.write(f"srun: error: {peer.node}: I/O stream {what}; "
                                 f"connection closed\n")
            self._close(peer, lost=True)

    def _handshake(self, peer: _Peer, kind: int, payload: bytes) -> bool:
        """One handshake message from an unproven peer (iostream): False closes it."""
        if kind != io.HELLO or self.key is None:
            return False
        try:
            msg = io.message(payload)
            if peer.hs is None:
                hs = Responder([self.key], (io.ROLE,))
                challenge = hs.challenge(msg)
                peer.hs = hs
                self._queue(peer, io.hello(challenge))
                return True
            claims = peer.hs.verify(msg)
        except (ValueError, LinkAuthError):
            return False
        node = self._claimed_node(claims)
        if node is None:
            return False
        peer.sealer, peer.dec.opener = peer.hs.pair()
        peer.dec.limit = io.MAX_PAYLOAD
        peer.node, peer.hs = node, None
        self.claimed.add(node)
        if self.on_start:
            self.on_start(node, len(self.layout[node]))
        del self.unproven[peer.sock]
        if self.stdin_all or self.stdin_task in self.layout[node]:
            self.stdin_targets.append(peer)
            if self.winsize:  # before any typed byte: a resize made while it connected
                self._send(peer, io.WINSIZE, 0, self.winsize)
            for frame in self.pending_stdin:
                self._send(peer, *frame)
            self._resume_stdin()
        return True

    def _claimed_node(self, claims: dict) -> str | None:
        """The node a proven peer speaks for: one of the step's, not claimed before, with
        that node's tasks."""
        node = claims.get("node")
        if (not isinstance(node, str) or node not in self.layout or node in self.claimed
                or claims.get("job") != self.job_id or claims.get("step") != self.step_id
                or claims.get("tasks") != self.layout[node]):
            return None
        return node

    def _frame(self, peer: _Peer, kind: int, task: int, payload: bytes) -> bool:
        """One authenticated frame; False: not one a step daemon sends for its own tasks."""
        assert peer.node is not None  # frames are read only once the handshake is done
        if kind == io.DONE:
            self.done_nodes.add(peer.node)
            return True
        if self.task_node.get(task) != peer.node:
            return False
        if kind == io.STDOUT or kind == io.STDERR:
            self._write(kind, task, payload)
        elif kind == io.EXIT:
            e = json.loads(payload)
            if not isinstance(e, dict):
                return False
            self._flush_task(task)
            self.exits[task] = e
            if self.on_exit:
                self.on_exit(task, e)
        else:
            return False
        return True

    def _close(self, peer: _Peer, lost: bool) -> None:
        if self.peers.pop(peer.sock, None) is None:
            return
        self.unproven.pop(peer.sock, None)
        try:
            self.sel.unregister(peer.sock)
        except (KeyError, ValueError):
            pass
        peer.sock.close()
        if peer in self.stdin_targets:
            self.stdin_targets.remove(peer)
        if lost and peer.node and peer.node not in self.done_nodes:
            self.suspect.add(peer.node)

    def _send(self, peer: _Peer, kind: int, task: int, payload: bytes = b"") -> None:
        assert peer.sealer is not None  # set with the handshake, before anything is sent
        self._queue(peer, io.seal(peer.sealer, kind, task, payload))

    def _queue(self, peer: _Peer, data: bytes) -> None:
        """Write ``data`` to the peer without ever blocking srun; what the socket does not
        take now waits in ``peer.out`` (written when the socket is writable, in order)."""
        if peer.out:
            peer.out += data
            return
        try:
            n = peer.sock.send(data)
        except BlockingIOError:
            n = 0
        except OSError:
            self._close(peer, lost=True)
            return
        if n < len(data):
            peer.out += data[n:]
            self.sel.modify(peer.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, ("peer", peer))

    def _flush(self, peer: _Peer) -> None:
        try:
            n = peer.sock.send(peer.out)
        except BlockingIOError:
            return
        except OSError:
            self._close(peer, lost=True)
            return
        del peer.out[:n]
        if not peer.out:
            self.sel.modify(peer.sock, selectors.EVENT_READ, ("peer", peer))
            self._resume_stdin()

    # --pty --------------------------------------------------------------------------------------
    def wake_on_signals(self) -> None:
        """Make a signal end :meth:`poll`'s wait (signal.set_wakeup_fd): a resize or an
        interrupt is acted on at once, not at the next timeout."""
        self.wake_r, w = os.pipe()
        for fd in (self.wake_r, w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(w)
        self.sel.register(self.wake_r, selectors.EVENT_READ, ("wake", None))

    def _drain_wake(self) -> None:
        assert self.wake_r is not None  # registered only once the pipe exists
        try:
            os.read(self.wake_r, 4096)
        except OSError:
            pass

    def send_winsize(self, rows: int, cols: int) -> None:
        """The terminal's new size, to task 0's node (kept for a node still connecting)."""
        self.winsize = io.winsize(rows, cols)
        for peer in self.stdin_targets:
            self._send(peer, io.WINSIZE, 0, self.winsize)

    # stdin ------------------------------------------------------------------------------------
    stdin_all = False
    stdin_task = 0  # the task stdin goes to (-i N), unless stdin_all
    stdin_file = False
    stdin_fd: int | None = None

    def attach_stdin(self, target: str) -> None:
        self.stdin_targets = []
        if target == "none":
            return
        self.stdin_all = target == "all"
        self.stdin_task = int(target) if target.isdigit() else 0
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

    def _stdin_backlogged(self) -> bool:
        """Too much stdin is waiting for the step daemons: stop reading it for now."""
        if not self.stdin_targets:
            return self.pending_bytes > STDIN_BACKLOG
        return any(len(p.out) > STDIN_BACKLOG for p in self.stdin_targets)

    def stdin_ready(self) -> bool:
        """A stdin file is to be read without waiting (it cannot be polled)."""
        return self.stdin_file and bool(self.stdin_targets) and not self._stdin_backlogged()

    def pump_stdin_file(self) -> None:
        if self.stdin_ready():
            self._read_stdin()

    def _resume_stdin(self) -> None:
        if self.stdin_paused and not self._stdin_backlogged():
            assert self.stdin_fd is not None  # paused only once attached
            self.stdin_paused = False
            self.sel.register(self.stdin_fd, selectors.EVENT_READ, ("stdin", None))

    def _read_stdin(self) -> None:
        assert self.stdin_fd is not None  # called only once attached
        if self._stdin_backlogged():
            if not self.stdin_file:
                self.stdin_paused = True
                self.sel.unregister(self.stdin_fd)
            return
        try:
            data = os.read(self.stdin_fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        frame = (io.STDIN if data else io.STDIN_EOF, io.ALL_TASKS if self.stdin_all else self.stdin_task,
                 data)
        if not data:
            if self.stdin_file:
                self.stdin_file = False
            else:
                self.sel.unregister(self.stdin_fd)
        if self.stdin_targets:
            for peer in list(self.stdin_targets):
                self._send(peer, *frame)
        else:
            self.pending_stdin.append(frame)
            self.pending_bytes += len(data)


def report_exits(exits: dict[int, dict], task_node: dict[int, str], ntasks: int,
                 lost_nodes: set[str], printed: set[int] | None = None) -> int:
    """Print Slurm's per-node failure lines (not those of the tasks in ``printed``: already
    reported); return srun's exit code."""
    import signal as sigmod
    groups: dict[tuple[str, str], list[int]] = {}
    code = 0
    for t in range(ntasks):
        e = exits.get(t)
        node = task_node.get(t, "?")
        if e is None:
            continue
        if isinstance(e.get("launch_error"), str):  # never ran: its container did not start
            if not printed or t not in printed:
                sys.stderr.write(f"srun: error: task {t} launch failed: {e['launch_error']}\n")
            code = max(code, e.get("exit_code") or 1)
        elif e.get("oom"):  # the OOM killer struck in the task's cgroup (Slurm's SIG_OOM)
            groups.setdefault((node, "Out Of Memory"), []).append(t)
            code = max(code, e.get("exit_code") or 128 + (e.get("signal") or 9))
        elif e.get("signal"):
            name = sigmod.strsignal(e["signal"]) or f"Signal {e['signal']}"
            groups.setdefault((node, name), []).append(t)
            code = max(code, 128 + e["signal"])
        elif e.get("exit_code"):
            groups.setdefault((node, f"Exited with exit code {e['exit_code']}"), []).append(t)
            code = max(code, e["exit_code"])
    for (node, what), tids in groups.items():
        tids = [t for t in tids if not printed or t not in printed]
        if not tids:
            continue
        word = "task" if len(tids) == 1 else "tasks"
        sys.stderr.write(f"srun: error: {node}: {word} {int_ranges(tids)}: {what}\n")
    if lost_nodes:
        code = max(code, 1)  # "Node failure on X" was printed when the node was lost
    missing = [t for t in range(ntasks) if t not in exits]
    if missing and not lost_nodes:
        code = max(code, 1)
    return code


def wait_secs(value, env: Mapping[str, str]) -> int | None:
    """``-W/--wait=N``, else SLURM_WAIT: the seconds the step may go on once its first task
    has exited (None or 0: until every task has exited). Slurm's message for a bad value."""
    if value is None:
        value = env.get("SLURM_WAIT")
        if value is None:
            return None
    text = str(value).strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 9:
        raise _err(f'Invalid numeric value "{value}" for --wait.')
    return int(text) or None


def _task_states(exits: dict[int, dict], ntasks: int) -> list[tuple[str, list[int]]]:
    """Each task's state as srun reports it when it gives up on a step, in Slurm's order:
    still running, exited abnormally (a non-zero code or a signal), exited."""
    groups: dict[str, list[int]] = {"running": [], "exited abnormally": [], "exited": []}
    for t in range(ntasks):
        e = exits.get(t)
        if e is None:
            groups["running"].append(t)
        elif e.get("exit_code") or e.get("signal") or e.get("oom"):
            groups["exited abnormally"].append(t)
        else:
            groups["exited"].append(t)
    return [(what, tids) for what, tids in groups.items() if tids]


class _FirstExitWait:
    """``srun -W N``: N seconds after the step's first task exits, the tasks still running
    are killed, with Slurm's lines: how long ago, each task's state, the termination and
    how long srun waits for the step to end (KillWait + 2, as Slurm says it). The failures of
    the tasks that had already exited are printed then (Slurm prints them as they happen),
    so the final report leaves out the ``reported`` ones' lines (not their exit codes)."""

    def __init__(self, secs: int | None, kill_wait: int):
        self.secs, self.kill_wait = secs, kill_wait
        self.first: float | None = None
        self.reported: set[int] = set()

    def task_exited(self) -> None:
        if self.first is None:
            self.first = time.monotonic()

    def due(self) -> bool:
        return (self.secs is not None and self.first is not None
                and time.monotonic() - self.first >= self.secs)

    def terminate(self, sio: StepIO, step: str, ntasks: int) -> None:
        exits = dict(sio.exits)
        for t in exits:
            sio._flush_task(t)
        report_exits(exits, sio.task_node, ntasks, set())  # (its code: the final report's)
        self.reported = set(exits)
        lines = [f"srun: First task exited {self.secs}s ago"]
        for what, tids in _task_states(exits, ntasks):
            word = "task" if len(tids) == 1 else "tasks"
            lines.append(f"srun: {step} {word} {int_ranges(tids)}: {what}")
        lines += [f"srun: launch/slurm: _step_signal: Terminating {step}",
                  f"srun: Job step aborted: Waiting up to {self.kill_wait + 2} seconds for "
                  "job step to finish."]
        sys.stderr.write("".join(ln + "\n" for ln in lines))
        sys.stderr.flush()
        sio.signal_tasks(signal.SIGKILL, abort=True)


def _open_mode(value) -> str | None:
    """``--open-mode``, else SLURM_OPEN_MODE (``a``/``t``: what sbatch's --open-mode exports
    to its job, so a checkpointing job's step logs are appended to across requeues, as with
    Slurm), as the step daemon's ``append``/``truncate``."""
    v = str(value or "").lower()
    return "append" if v in ("a", "append") else ("truncate" if v in ("t", "truncate") else None)


def _step_request(inv: Invocation, env: Mapping[str, str], inside: bool) -> dict:
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
        # -O, else the allocation's SLURM_OVERCOMMIT: more tasks than CPUs (steplayout)
        "overcommit": _flag(r.get("overcommit"), env, "SLURM_OVERCOMMIT"),
        "gpu_bind": r.get("gpu_bind") or env.get("SLURM_GPU_BIND"),
        "cpu_bind": s.get("cpu_bind") or os.environ.get("SLURM_CPU_BIND"),
        "argv": inv.argv, "cwd": r.get("work_dir"), "name": r.get("name"),
        "label": bool(s.get("label")),
        "open_mode": _open_mode(s.get("open-mode") or s.get("open_mode") or env.get("SLURM_OPEN_MODE")),
        "umask": r.get("umask"),
        "relative": s.get("relative"),  # an int by now: _check_relative
    }
    stdin = _io_streams(step, r, os.environ)
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


def _check_relative(inv: Invocation, env: Mapping[str, str], inside: bool) -> None:
    """``-r/--relative=N``: the step's nodes start at node N of the allocation. Checked as
    Slurm's srun does, with its messages: a number; only for a step of an existing
    allocation; not with -w/-x; N plus the step's node count (-N, else the allocation's,
    as srun reads it from SLURM_JOB_NUM_NODES) within the allocation. ``inv.srun["relative"]``
    becomes the int the controller lays the step out from (muster.core.steplayout)."""
    value = inv.srun.get("relative")
    if value is None:
        return
    text = str(value).strip()
    if not (text.isascii() and text.isdigit()) or int(text) > 1 << 20:
        raise _err(f'Invalid numeric value "{value}" for --relative.')
    if not inside:
        raise CliExit(["srun: fatal: --relative option invalid for job allocation request"], 1)
    if inv.req.get("nodelist") or inv.req.get("exclude"):
        raise _err("-r,--relative not allowed with -w,--nodelist or -x,--exclude.")
    rel = int(text)
    alloc = _env_int(env, "SLURM_JOB_NUM_NODES", "SLURM_NNODES")
    nodes, source = inv.req.get("nodes_min"), "--nodes"
    if nodes is None:
        nodes, source = alloc, "SLURM_JOB_NUM_NODES"
    if alloc is not None and nodes is not None and rel + nodes > alloc:
        raise _err(f"--relative and {source} option incompatible with count of allocated "
                   f"nodes ({rel}+{nodes}>{alloc})")
    inv.srun["relative"] = rel


def _prepare_launch(inv: Invocation, env: Mapping[str, str], inside: bool) -> None:
    """What the launch needs from srun's side, checked before any allocation is asked for:
    ``--propagate``'s names (Slurm's two error lines, exit 1), srun's soft limits, and
    ``--multi-prog``'s file — read here, as the user, and checked against the step's task
    count (-n, else SLURM_NTASKS inside an allocation, else the file's highest task id + 1,
    which then becomes the request's -n). Results go into ``inv.srun``."""
    from muster.common import rlimits
    given = dict(inv.given)
    if "propagate" in given:
        spec = given["propagate"]
        try:
            rlimits.parse_list(spec)
        except ValueError as exc:
            raise CliExit([f"srun: error: {exc}", f"srun: error: --propagate={spec} is not "
                                                 "valid."], 1) from None
        inv.srun["propagate"] = spec or "ALL"
    limits = rlimits.capture()
    inv.srun["rlimits"] = limits
    inv.log.propagating(limits, 0, inv.req.get("umask") or 0)
    if inv.srun.get("multi_prog"):
        from muster.cli import multiprog
        try:
            text = multiprog.read(inv.argv[0])
            ntasks = (inv.req.get("ntasks") or (_env_int(env, "SLURM_NTASKS", "SLURM_NPROCS")
                                                if inside else None)
                      or multiprog.task_count(text))
            inv.srun["task_argv"] = multiprog.parse(text, inv.argv[0], ntasks)
        except multiprog.MultiProgError as exc:
            raise CliExit([f"srun: error: {ln}" for ln in str(exc).split("\n")], 1) from None
        inv.req["ntasks"] = ntasks


def _launch_extras(step: dict, inv: Invocation) -> None:
    """The step request's launch-side fields: each task's argv (--multi-prog), the user's
    --task-prolog/--task-epilog (run as the user by the step daemon), the soft limits and
    --propagate's choice (None: slurm.conf's, applied by the controller)."""
    s = inv.srun
    if s.get("task_argv"):
        step["task_argv"] = [s["task_argv"][t] for t in range(len(s["task_argv"]))]
        step["ntasks"] = len(s["task_argv"])
    for key in ("task_prolog", "task_epilog"):
        if isinstance(s.get(key), str):
            step[key] = s[key]
    step["rlimits"] = s.get("rlimits") or {}
    step["propagate"] = s.get("propagate")


def _terminal_size(fd: int) -> tuple[int, int] | None:
    """(rows, cols) of the terminal on ``fd``; None, after Slurm's error line, when it is not
    one."""
    import fcntl
    import struct
    import termios
    try:
        rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, bytes(8)))
    except OSError as exc:
        sys.stderr.write(f"srun: error: ioctl(TIOCGWINSZ): {os.strerror(exc.errno or 0)}\n")
        return None
    return rows, cols


class _Terminal:
    """srun --pty's local terminal: :meth:`raw` for the run, :meth:`restore` after it (modes
    and the blocking flag stdin had when this was made; safe to call twice or without raw).
    Raw is cfmakeraw's with output processing kept, as Slurm: srun's own messages still end
    their lines. ``active``: the one in raw mode, which _main's ``finally`` restores however
    the step ends (an exception, a broken pipe)."""

    active: _Terminal | None = None

    def __init__(self, fd: int):
        import termios
        self.fd = fd
        self.saved = termios.tcgetattr(fd)
        self.blocking = os.get_blocking(fd)
        self.is_raw = False

    def raw(self) -> None:
        import termios as T
        attrs = T.tcgetattr(self.fd)
        attrs[0] &= ~(T.IGNBRK | T.BRKINT | T.PARMRK | T.ISTRIP | T.INLCR | T.IGNCR | T.ICRNL | T.IXON)
        attrs[1] |= T.OPOST
        attrs[2] = (attrs[2] & ~(T.CSIZE | T.PARENB)) | T.CS8
        attrs[3] &= ~(T.ECHO | T.ECHONL | T.ICANON | T.ISIG | T.IEXTEN)
        attrs[6][T.VMIN], attrs[6][T.VTIME] = 1, 0
        _Terminal.active = self
        T.tcsetattr(self.fd, T.TCSANOW, attrs)
        self.is_raw = True

    def restore(self) -> None:
        import termios
        try:
            if self.is_raw:
                termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)
            os.set_blocking(self.fd, self.blocking)
        except (OSError, termios.error):
            pass
        self.is_raw = False
        _Terminal.active = None


def _setup_pty(step: dict, step_env: dict):
    """--pty: (the terminal, its (rows, cols)) and the step request and environment set for
    it — task 0's stdin, no -i/-o/-e files (Slurm forces them to task 0), the initial size in
    SLURM_PTY_WIN_ROW/COL; (None, None) when stdin is not a terminal."""
    import termios
    size = _terminal_size(0)
    try:
        term = _Terminal(0) if size else None
    except termios.error:
        term = None
    if term is None or size is None:  # (no size: no terminal)
        sys.stderr.write("srun: error: Not using a pseudo-terminal, disregarding --pty option\n")
        return None, None
    step.update(pty=True, stdin_target=0, output=None, error=None, input=None, output_task=None,
                error_task=None)
    step_env["SLURM_PTY_WIN_ROW"], step_env["SLURM_PTY_WIN_COL"] = map(str, size)
    return term, size


def _io_pattern(value: str | None) -> str | None:
    """A -o/-e/-i value as a file pattern for the step daemon: ``none`` is /dev/null (for
    -o/-e; -i none is no stdin at all), ``all`` and task ids are srun's own routing."""
    if value == "none":
        return "/dev/null"
    if value is None or value == "all" or value.isdigit():
        return None
    return value


def _io_streams(step: dict, r: dict, env: Mapping[str, str]) -> str | None:
    """Fill the step's -o/-e/-i from the options, else srun's input variables
    SLURM_STDOUTMODE/SLURM_STDERRMODE/SLURM_STDINMODE. A task id for -o/-e sends only that
    task's stream to srun (the others' to /dev/null), as Slurm; returns -i's value."""
    out = r.get("std_out") or env.get("SLURM_STDOUTMODE") or None
    err = r.get("std_err") or env.get("SLURM_STDERRMODE") or None
    stdin = r.get("std_in") or env.get("SLURM_STDINMODE") or None
    step["output"], step["error"] = _io_pattern(out), _io_pattern(err)
    step["input"] = None if stdin == "none" else _io_pattern(stdin)
    for key, value in (("output_task", out), ("error_task", err)):
        if value is not None and value.isdigit():
            step[key] = int(value)
    return stdin


def _main() -> int:
    env = dict(os.environ)
    inv = parse(sys.argv[1:], env, os.getcwd())
    if not inv.argv:
        raise _err("No command given to execute.")
    quiet = bool(inv.flags.get("quiet"))
    given = inv.srun.get("jobid") or env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    inside = given is not None
    inv.log.level = 0 if quiet else int(inv.flags.get("verbose") or 0)
    inv.log.options(inv.given)
    _prepare_launch(inv, env, inside)
    _check_relative(inv, env, inside)
    job_id = 0  # the allocation's id: given (inside one), else allocated below
    if inside:
        jid = str(given).split("_")[0].split(".")[0]
        if not jid.isdigit():
            raise _err(f"Invalid job id specified: {given}")
        job_id = int(jid)
    step_env = {k: v for k, v in env.items()}
    # --export, else SRUN_EXPORT_ENV, else SLURM_EXPORT_ENV (set in a batch job by sbatch's
    # --export, so that steps follow it unless SRUN_EXPORT_ENV says otherwise: env.md §2)
    export = inv.req.get("export") or env.get("SRUN_EXPORT_ENV") or env.get("SLURM_EXPORT_ENV")
    if export:
        from muster.cli.jobopts import build_export_env
        step_env = build_export_env(export, env)
    step_env["SRUN_DEBUG"] = str(3 + inv.log.level - quiet)  # srun's log level, as Slurm's tasks see it
    ctl = Controller()
    own_allocation = False
    from muster.common.errors import RequestError
    if not inside:
        if inv.req.get("ntasks") is None:  # srun's input variables for -n (env.md §2)
            inv.req["ntasks"] = _env_int(env, "SLURM_NTASKS", "SLURM_NPROCS")
        inv.req["overcommit"] = _flag(inv.req.get("overcommit"), env, "SLURM_OVERCOMMIT")
        req = dict(inv.req)
        if not req.get("name"):
            req["name"] = os.path.basename(inv.argv[0])
        req["argv"] = inv.argv
        req["command"] = inv.argv[0]
        req["submit_dir"] = os.getcwd()
        immediate = immediate_secs(inv.srun.get("immediate"), PROG)
        try:
            reply = ctl.call(allocate_msg(req, immediate))
        except RequestError as exc:
            if exc.code == "invalid_partition":
                sys.stderr.write(f"srun: error: invalid partition specified: {req.get('partition')}\n")
            if exc.detail:
                sys.stderr.write(f"srun: error: {exc.detail}\n")
            raise _err(f"Unable to allocate resources: {exc.message}") from None
        job_id = reply["job_id"]
        if reply.get("busy"):  # --immediate: the controller could not start it (job FAILED)
            raise _err(f"Unable to allocate resources: {reply['busy']}")
        own_allocation = True
        job = _wait_allocation(ctl, job_id, quiet, immediate)
        if job is None:
            return 1
    code = 1
    try:
        code = _run_step(ctl, job_id, inv, step_env, inside, quiet)
    finally:
        if _Terminal.active is not None:
            _Terminal.active.restore()
        if own_allocation:
            try:
                ctl.call({"op": "release_alloc", "job_id": job_id, "exit_code": min(code, 255),
                          "signal": 0})
            except Exception:
                pass
    return code


def immediate_secs(value, prog: str) -> int | None:
    """``-I/--immediate[=secs]`` → None (not asked, or 0), 0 (bare: start now or never), or
    the seconds to wait pending before giving up. Slurm's message for a bad value."""
    if value is None or value is True:
        return None if value is None else 0
    text = str(value).strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 9:
        raise CliExit([f'{prog}: error: Invalid numeric value "{value}" for immediate.'], 1)
    return int(text) or None


def allocate_msg(req: dict, immediate: int | None) -> dict:
    """The allocate request; a bare --immediate asks the controller to start it at once or
    end it (muster.controller.handlers._start_at_once)."""
    msg: dict[str, object] = {"op": "allocate", "job": req}
    if immediate == 0:
        msg["immediate"] = True
    return msg


def give_up_pending(ctl, job_id: int) -> None:
    """--immediate=N ran out: cancel the still pending allocation (CANCELLED by its user,
    as Slurm records it) so that nothing is left in the queue."""
    try:
        ctl.call({"op": "release_alloc", "job_id": job_id, "exit_code": 0, "signal": 0})
    except Exception:
        pass  # the lease ends with this connection anyway


def _wait_allocation(ctl, job_id: int, quiet: bool, immediate: int | None = None):
    """Wait for the allocation to start; with ``immediate`` seconds, give it up (cancelled)
    when it is still pending then, with Slurm's "Requested nodes are busy"."""
    queued = False
    give_up = time.monotonic() + immediate if immediate else None
    while True:
        # a first short, silent wait: on an idle cluster the allocation comes within ms
        wait = 30.0 if queued else 0.5
        if give_up is not None:
            wait = max(0.0, min(wait, give_up - time.monotonic()))
        reply = ctl.call({"op": "wait_alloc", "job_id": job_id, "timeout": wait}, timeout=None)
        job = reply["job"]
        if job["state"] == "PENDING" and give_up is not None and time.monotonic() >= give_up:
            give_up_pending(ctl, job_id)
            raise _err("Unable to allocate resources: Requested nodes are busy")
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
    term, size = _setup_pty(step, step_env) if s.get("pty") else (None, None)
    kb = s.get("kill_on_bad_exit")
    kill_bad = (kb is True or kb == "1") if kb is not None else _flag(None, os.environ, "SLURM_KILL_BAD_EXIT")
    stdin_target = step["stdin_target"]
    # strip the allocation's per-step variables from what the tasks inherit. PyTorch's
    # (MASTER_ADDR, RANK...) are sent as they are: the controller keeps the user's and
    # replaces only those an outer step of Muster set (common.torchenv.user_env_for_step)
    for k in ("SLURM_STEP_ID", "SLURM_STEPID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
              "SLURM_TASK_PID", "SLURM_GTIDS", "SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES",
              "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE"):
        step_env.pop(k, None)
    step_env.update(inv.env_extra)  # --container*: this step's container, not the job's
    step["env"] = step_env
    _launch_extras(step, inv)
    sio = StepIO(label, 1, bool(s.get("unbuffered")) or term is not None, _io_address(ctl.sock))
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
    if reply.get("job_cpus"):
        inv.log.allocated(job_id, reply["job_nodes"], reply["job_cpus"])
    inv.log.launching(job_id, reply["step_id"], reply["layout"], step.get("cpu_bind"))
    sio.width = len(str(max(0, ntasks - 1)))
    sio.set_step(job_id, reply)
    sio.attach_stdin("none" if stdin_target == "none" or step.get("input") else
                     ("all" if stdin_target == "all" else str(stdin_target)))
    state = {"last_int": 0.0, "killed": False}

    watch = _FirstExitWait(wait_secs(s.get("wait"), os.environ), reply.get("kill_wait") or 30)

    def on_exit(task, e):
        inv.log.exited(f"{job_id}.{reply['step_id']}", sio.task_node.get(task, "?"), task, e)
        watch.task_exited()
        if kill_bad and (e.get("exit_code") or e.get("signal")) and not state["killed"]:
            state["killed"] = True
            sio.signal_tasks(signal.SIGKILL)
    sio.on_exit = on_exit
    sio.on_start = inv.log.started

    pending_signals: list[int] = []

    def handler(signum, frame):
        pending_signals.append(signum)
    for trapped in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
                    signal.SIGQUIT):
        signal.signal(trapped, handler)
    if term is not None and size is not None:  # (a terminal always has a size)
        sio.winsize = io.winsize(*size)
        signal.signal(signal.SIGWINCH, handler)
        sio.wake_on_signals()
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
    quiet_check_after = time.time() + 2.0  # a launch normally connects well within this
    next_check = next_lease_check = 0.0
    if term is not None:
        term.raw()  # restored below, or by _main's finally whatever happens
    while not sio.finished():
        sio.poll(0 if sio.stdin_ready() else 0.2)
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
            elif sig == signal.SIGWINCH:
                now_size = _terminal_size(0)
                if now_size:
                    sio.send_winsize(*now_size)
            else:
                sio.signal_tasks(sig)
        connected = sio.claimed | sio.done_nodes | sio.suspect
        unconnected = sio.expected_nodes - connected
        if unconnected and time.time() > connect_deadline:
            sio.suspect |= unconnected
            unconnected = set()
        if (sio.suspect or (unconnected and time.time() >= quiet_check_after)) \
                and time.time() >= next_check:
            # a node's stream broke, or has not come yet (its daemon may have died with the
            # node before it connected): only the controller decides whether the node failed
            next_check = time.time() + (0.5 if sio.suspect else 1.0)
            try:  # (no riding out a restart here: the loop must go on; keep_lease does)
                st = ctl.call({"op": "step_status", "job_id": job_id, "step_id": reply["step_id"]},
                              retry=0)
            except Exception:
                st = {"running": True, "down_nodes": []}
            for n in st.get("down_nodes", []):
                sio.lost_nodes.add(n)
            if not st.get("running"):
                sio.lost_nodes |= (sio.suspect | unconnected) - sio.done_nodes
                break
        report_lost()
        if time.time() >= next_lease_check:
            next_lease_check = time.time() + 0.5
            ctl.keep_lease()
        if watch.due() and not state["killed"] and not sio.finished():
            state["killed"] = True
            watch.terminate(sio, f"StepId={job_id}.{reply['step_id']}", ntasks)
    report_lost()
    for t in list(sio.task_node):
        sio._flush_task(t)
    sys.stdout.flush()
    if term is not None:
        term.restore()
    return report_exits(sio.exits, sio.task_node, ntasks, sio.lost_nodes, watch.reported)


def main() -> None:
    from muster.cli.client import run_main
    run_main("srun", _main)


if __name__ == "__main__":
    main()
