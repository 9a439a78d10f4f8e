"""srun's I/O stream is authenticated both ways and sealed frame by frame (real daemons).

The step daemon and srun prove to each other that they hold the step's key (srun first), then
every frame carries a MAC with implicit sequence numbers (muster.common.iostream). Shown here
against a real srun and real step daemons, attackers being the unprivileged ``mustertest2``
against steps of ``mustertest``:

* hostile connections to srun's port (wrong key, replayed bytes, unsealed frames, garbage, a
  flood of idle connections) get nothing, inject nothing, and do not stop the step's daemon
  from connecting, authenticating and streaming; srun listens on loopback, not 0.0.0.0;
* a man in the middle of a real srun ↔ step daemon connection that forges, replays, reorders
  or injects a frame gets the connection closed by srun and the frame has no effect; bytes it
  captured, replayed on a new connection, are refused;
* a peer that knows the key (the test: it issues its own step request) and completes the
  handshake as srun, then sends a bad STDIN/SIGNAL frame, has the connection closed by the
  step daemon: the frame is never delivered to the task;
* a fake srun squatting a port named in a step request gets nothing but the daemon's hello.

A step whose srun is "busy" (the allocation's CPUs are held by another step) has its port open
before any step daemon connects: that is the window the tests use to attack or to put a proxy
in front of srun (``MUSTER_SRUN_ADDR`` moves srun to 127.0.0.2; the proxy takes 127.0.0.1).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import selectors
import socket
import subprocess
import sys
import threading
import time

import pytest

import wire
from cluster import TEST_USER, TEST_USER2, private_cluster, user_exists, wait_for
from muster.common import iostream as io
from muster.common import linkauth

HEAD = io.HEAD
TAG = linkauth.TAG_BYTES
NODE = "node1"


@pytest.fixture(scope="module")
def c():
    if os.getuid() != 0 or not (user_exists(TEST_USER) and user_exists(TEST_USER2)):
        pytest.skip("needs root and both test users")
    # KillWait=1: a task that ignores SIGTERM outlives its step daemon's loss of srun by a
    # second, so a frame wrongly delivered just before the loss would leave its trace
    with private_cluster("muster-srunio-", nodes=1, gpus=0, cpus=4, partitions="debug",
                         extra_conf="KillWait=1\n") as cl:
        yield cl


@pytest.fixture(scope="module")
def job(c):
    """A one-CPU allocation of TEST_USER (a batch job that only waits): every step runs in it."""
    jid = c.sbatch("-n1", "--time=30", "-o", "/dev/null", "--wrap", "sleep 1200",
                   user=TEST_USER, cwd=c.workdir)
    c.wait_state(jid, "RUNNING")
    yield jid
    c.run(["scancel", str(jid)])


# ---- helpers: processes, sockets, frames -----------------------------------------------------

def popen(c, argv, user, env=None, **kw):
    pw = pwd.getpwnam(user)
    e = dict(c.env, HOME=pw.pw_dir, USER=user, LOGNAME=user, **(env or {}))
    return subprocess.Popen(argv, env=e, cwd=c.workdir, user=pw.pw_uid, group=pw.pw_gid,
                            extra_groups=[], **kw)


def read(path: str) -> str:
    with open(path, errors="replace") as fh:
        return fh.read()


def listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket ``pid`` listens on, from /proc (what any user sees
    in /proc/net/tcp, matched to the process by root)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as fh:
            for line in list(fh)[1:]:
                f = line.split()
                if f[3] == "0A" and f[9] in inodes:  # LISTEN
                    addr, port = f[1].split(":")
                    raw = bytes.fromhex(addr)
                    if len(raw) == 4:
                        ip = socket.inet_ntop(socket.AF_INET, raw[::-1])
                    else:
                        ip = socket.inet_ntop(socket.AF_INET6, b"".join(
                            raw[i:i + 4][::-1] for i in range(0, 16, 4)))
                    found.append((ip, int(port, 16)))
    return found


def split_plain(data: bytes) -> list[tuple[int, int, bytes]]:
    """Plain frames in ``data`` (what a peer that never authenticated may receive)."""
    out, pos = [], 0
    while len(data) - pos >= HEAD.size:
        kind, task, n = HEAD.unpack_from(data, pos)
        out.append((kind, task, data[pos + HEAD.size:pos + HEAD.size + n]))
        pos += HEAD.size + n
    return out


def recv_until_closed(s: socket.socket, timeout: float) -> tuple[bytes, bool]:
    """Everything the peer sends until it closes (True) or ``timeout`` passes (False)."""
    got, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            return got, True
        if not chunk:
            return got, True
        got += chunk
    return got, False


class Srun:
    """A real srun as TEST_USER inside ``job``, stdin a pipe, stdout/stderr in files."""

    def __init__(self, c, jid, script: str, tag: str, env=None):
        self.out = os.path.join(c.workdir, f"{tag}.out")
        self.err = os.path.join(c.workdir, f"{tag}.err")
        with open(self.out, "wb") as o, open(self.err, "wb") as e:
            self.p = popen(c, ["srun", f"--jobid={jid}", "-n1", "sh", "-c", script], TEST_USER,
                           env=env, stdin=subprocess.PIPE, stdout=o, stderr=e)

    def say(self, line: str) -> None:
        self.p.stdin.write(line.encode() + b"\n")
        self.p.stdin.flush()

    def wait_out(self, text: str, timeout: float = 20) -> None:
        wait_for(lambda: text in read(self.out), timeout, what=f"{text!r} from srun "
                 f"(stderr so far: {read(self.err)!r})")

    def finish(self, timeout: float = 60) -> int:
        with contextlib.suppress(BrokenPipeError):
            self.p.stdin.close()
        return self.p.wait(timeout)


@contextlib.contextmanager
def blocked_srun(c, jid, script: str, tag: str, env=None):
    """A srun whose step cannot start yet (a holder step has the allocation's CPU): its port is
    open and no step daemon has connected. Yields (srun, release); release() lets it start."""
    holder = Srun(c, jid, "echo HOLD; read x", f"{tag}-holder")
    holder.wait_out("HOLD")
    srun = Srun(c, jid, script, tag, env=env)
    try:
        wait_for(lambda: "temporarily disabled" in read(srun.err) and listening(srun.p.pid),
                 what="srun retrying its busy step, port open")
        yield srun, holder.finish
    finally:
        for p in (holder.p, srun.p):
            if p.poll() is None:
                p.kill()
                p.wait()


def run_attacker(c, code: str, *args: str, stdin=None) -> subprocess.Popen:
    """A Python snippet as the hostile user TEST_USER2 (its stdout: a pipe)."""
    return popen(c, [sys.executable, "-c", code, *args], TEST_USER2, stdin=stdin,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def own_step(c, jid, port: int, script: str) -> dict:
    """A step request of the job's user naming our own listener as srun: the reply holds the
    step's key (what srun would get)."""
    reply = wire.call(c, {"op": "step_create", "job_id": jid, "step": {
        "ntasks": 1, "overlap": True, "argv": ["sh", "-c", script], "cwd": c.workdir,
        "env": {"PATH": "/usr/bin:/bin"}, "io_port": port, "stdin_target": 0}}, user=TEST_USER)
    assert reply.get("ok"), reply
    return reply


def step_over(c, jid: int, step_id: int) -> None:
    wait_for(lambda: not wire.call(c, {"op": "step_status", "job_id": jid,
                                       "step_id": step_id})["running"],
             what=f"step {jid}.{step_id} over")


@contextlib.contextmanager
def listener(addr=("127.0.0.1", 0)):
    ls = socket.socket()
    ls.bind(addr)
    ls.listen(8)
    ls.settimeout(20)
    try:
        yield ls
    finally:
        ls.close()


def answer_as_srun(conn: socket.socket, key: bytes, jid: int, reply: dict):
    """Complete the handshake as srun (responder) with ``key``; (sealer, opener)."""
    dec = io.Decoder()
    conn.settimeout(10)
    hs = linkauth.Responder([key], (io.ROLE,))
    hello = next_plain(conn, dec)
    conn.sendall(io.hello(hs.challenge(io.message(hello))))
    claims = hs.verify(io.message(next_plain(conn, dec)))
    assert claims == {"job": jid, "step": reply["step_id"], "node": NODE, "tasks": [0]}
    sealer, dec.opener = hs.pair()
    dec.limit = io.MAX_PAYLOAD
    return sealer, dec


def next_plain(conn, dec) -> bytes:
    while (f := dec.next_frame()) is None:
        data = conn.recv(65536)
        assert data, "peer closed during the handshake"
        dec.feed(data)
    assert f[0] == io.HELLO, f
    return f[2]


# ---- hostile connections to a real srun ---------------------------------------------------

ATTACKER = r'''
import json, os, socket, struct, sys, time
port, replay = int(sys.argv[1]), bytes.fromhex(sys.argv[2])
H = struct.Struct(">BII")
def frame(kind, task, payload): return H.pack(kind, task, len(payload)) + payload
def hello(keys): return frame(1, 0, json.dumps({"op": "hello", "v": 1, "role": "step-io",
                              "nonce": os.urandom(16).hex(), "keys": keys}).encode())
ATTACKS = {
    "wrong-key hello": hello([os.urandom(8).hex()]),
    "no-key hello": hello([]),
    "old-style hello with a guessed key": frame(1, 0, json.dumps({"job": 1, "step": 0,
        "node": "node1", "key": os.urandom(32).hex(), "tasks": [0]}).encode()),
    "replayed hello captured from another step": replay,
    "unsealed STDIN": frame(5, 0, b"INJECTED-STDIN\n") + os.urandom(32),
    "unsealed STDOUT": frame(2, 0, b"INJECTED-STDOUT\n") + os.urandom(32),
    "unsealed EXIT": frame(4, 0, b'{"exit_code": 7, "signal": 0}'),
    "unsealed SIGNAL": frame(7, 0, b'{"signal": 9}'),
    "garbage": os.urandom(4096),
    "oversized frame": H.pack(1, 0, 1 << 30) + b"x" * 1000,
    "half a frame": H.pack(1, 0, 100) + b"x" * 10,
    "silent": b"",
}
def volley(tag, flood):
    conns = []
    for name, data in ATTACKS.items():
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(data)
        conns.append((f"{tag}: {name}", s))
    for i in range(flood):
        conns.append((f"{tag}: idle flood", socket.create_connection(("127.0.0.1", port))))
    return conns
conns = volley("before the step", 300)
print("ready", flush=True)
sys.stdin.readline()
conns += volley("while it streams", 150)
result, deadline = {}, time.monotonic() + 15
for name, s in conns:
    got, closed = b"", False
    while time.monotonic() < deadline:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            closed = True
            break
        got += chunk
    r = result.setdefault(name, {"received": 0, "open": 0})
    r["received"] += len(got)
    r["open"] += not closed
print(json.dumps(result), flush=True)
'''


def captured_hello(c, jid) -> bytes:
    """The bytes a real step daemon sends first (its hello), captured by a listener that
    names itself in a step request of its own: what an eavesdropper could replay."""
    with listener() as ls:
        reply = own_step(c, jid, ls.getsockname()[1], "true")
        conn, _ = ls.accept()
        with conn:
            conn.settimeout(10)
            data = conn.recv(65536)
    step_over(c, jid, reply["step_id"])
    assert split_plain(data)[0][0] == io.HELLO
    return data


def test_hostile_connections_get_nothing_and_do_not_disturb_the_step(c, job):
    replay = captured_hello(c, job)
    script = 'echo START; while read l; do echo "got:$l"; done; echo END'
    with blocked_srun(c, job, script, "hostile") as (srun, release):
        (addr, port), = listening(srun.p.pid)
        assert addr == "127.0.0.1"  # where the step daemons connect; not 0.0.0.0
        attacker = run_attacker(c, ATTACKER, str(port), replay.hex(), stdin=subprocess.PIPE)
        assert attacker.stdout.readline().strip() == "ready", attacker.stderr.read()
        release()  # the step starts; its daemon connects behind ~300 hostile connections
        srun.wait_out("START")
        srun.say("hello1")
        srun.wait_out("got:hello1")
        attacker.stdin.write("go\n")
        attacker.stdin.close()  # second volley, while the step streams
        result = json.loads(attacker.stdout.readline())
        assert attacker.wait(10) == 0
        srun.say("hello2")
        assert srun.finish() == 0, read(srun.err)
    assert read(srun.out) == "START\ngot:hello1\ngot:hello2\nEND\n"
    assert "error" not in read(srun.err), read(srun.err)
    assert len(result) == 2 * 13  # 12 attacks and the flood, in each volley
    for name, r in result.items():
        assert r == {"received": 0, "open": 0}, (name, r)  # nothing back, closed by srun


# ---- a man in the middle of a real srun ↔ step daemon connection ---------------------------

class Proxy(threading.Thread):
    """Forwards one step daemon's connection to srun, tampering with the first sealed frame
    from the daemon that mentions ``:one`` (``mode``); records what the daemon sent, and when
    srun closed its side."""

    def __init__(self, ls: socket.socket, target: tuple[str, int], mode: str):
        super().__init__(daemon=True)
        self.ls, self.target, self.mode = ls, target, mode
        self.captured = bytearray()  # daemon → srun, as sent by the daemon
        self.captured_down = bytearray()  # srun → daemon
        self.srun_closed = threading.Event()
        self.tampered = threading.Event()
        self.error: BaseException | None = None

    def run(self):
        try:
            self._run()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _run(self):
        down, _ = self.ls.accept()
        up = socket.create_connection(self.target)
        sel = selectors.DefaultSelector()
        sel.register(down, selectors.EVENT_READ, "down")
        sel.register(up, selectors.EVENT_READ, "up")
        buf, plain_left, held = bytearray(), 2, None
        while not self.srun_closed.is_set():
            for key, _ in sel.select(30):
                src = down if key.data == "down" else up
                try:
                    data = src.recv(262144)
                except ConnectionResetError:  # closed with our bytes unread: a close too
                    data = b""
                if key.data == "up":
                    if not data:
                        self.srun_closed.set()
                        break
                    self.captured_down += data
                    down.sendall(data)
                    continue
                if not data:
                    return
                self.captured += data
                buf += data
                while len(buf) >= HEAD.size:
                    _, _, n = HEAD.unpack_from(buf)
                    size = HEAD.size + n + (0 if plain_left else TAG)
                    if len(buf) < size:
                        break
                    frame = bytes(buf[:size])
                    del buf[:size]
                    if plain_left:
                        plain_left -= 1
                        self._up(up, frame)
                    elif held is not None:  # reordered: the later frame goes first
                        self._up(up, frame, held)
                        held = None
                        self.tampered.set()
                    elif b":one" in frame and not self.tampered.is_set():
                        held = self._tamper(up, frame)
                    else:
                        self._up(up, frame)
        down.close()
        up.close()

    def _up(self, up, *frames):
        for f in frames:
            try:
                up.sendall(f)
            except (BrokenPipeError, ConnectionResetError):  # srun closed on the frame before
                self.srun_closed.set()
                return

    def _tamper(self, up, frame: bytes):
        if self.mode == "reordered":
            return frame
        if self.mode == "forged":
            self._up(up, frame.replace(b":one", b":ONE"))
        elif self.mode == "replayed":
            self._up(up, frame, frame)
        elif self.mode == "injected":
            self._up(up, io.pack(io.STDOUT, 0, b"INJECTED\n") + os.urandom(TAG), frame)
        self.tampered.set()
        return None


REPLAYER = r'''
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
s.sendall(bytes.fromhex(sys.stdin.read().strip()))
s.settimeout(10)
got = b""
while True:
    try:
        chunk = s.recv(65536)
    except socket.timeout:
        break
    except ConnectionResetError:
        chunk = b""
    if not chunk:
        print("closed")
        break
    got += chunk
print(got.hex())
'''


@pytest.mark.parametrize("mode", ["forged", "replayed", "reordered", "injected"])
def test_tampering_in_the_middle_closes_the_link(c, job, mode):
    script = 'echo START; read l; echo "got:$l"; echo "err:$l" >&2; read l; echo "got:$l"'
    env = {"MUSTER_SRUN_ADDR": "127.0.0.2"}
    with blocked_srun(c, job, script, f"mitm-{mode}", env=env) as (srun, release):
        (addr, port), = listening(srun.p.pid)
        assert addr == "127.0.0.2"
        with listener(("127.0.0.1", port)) as ls:  # where the step daemon will connect
            proxy = Proxy(ls, (addr, port), mode)
            proxy.start()
            release()
            srun.wait_out("START")
            key = launch_key(c, job)
            # an eavesdropper replays what the daemon sent so far on a connection of its own
            replayer = run_attacker(c, REPLAYER, addr, str(port), stdin=subprocess.PIPE)
            out, err = replayer.communicate(bytes(proxy.captured).hex(), timeout=30)
            assert out.splitlines()[0] == "closed", (out, err)
            back = split_plain(bytes.fromhex(out.splitlines()[1]))
            assert [k for k, _, _ in back] in ([], [io.HELLO]), back  # at most a challenge
            srun.say("one")
            assert proxy.srun_closed.wait(20), ("srun kept the tampered connection open", proxy.error)
            assert proxy.error is None, proxy.error
            rc = srun.finish()
        proxy.join(10)
    out, err = read(srun.out), read(srun.err)
    assert rc != 0
    assert f"srun: error: {NODE}: I/O stream failed its integrity check; connection closed" \
        in err, err
    assert "Traceback" not in err
    assert out.count("START") == 1
    assert "INJECTED" not in out and ":ONE" not in out + err
    seen = out.count("got:one") + err.count("err:one")
    # replayed: the original passed, its replay did not; otherwise the tampered frame was the
    # first of the two, and nothing after it passed
    assert seen == (1 if mode == "replayed" else 0), (out, err)
    # the key itself never crossed the connection, either way
    assert key.encode() not in proxy.captured + proxy.captured_down
    assert bytes.fromhex(key) not in proxy.captured + proxy.captured_down


def launch_key(c, jid) -> str:
    """The key of the job's latest running step, from the agent's private spool (root only)."""
    spool = os.path.join(c.state_dir, "spool")
    found = []
    for root, _dirs, files in os.walk(spool):
        if "launch.json" in files and os.path.basename(root).startswith(f"step{jid}."):
            with open(os.path.join(root, "launch.json")) as fh:
                found.append((os.path.getmtime(fh.name), json.load(fh)["io"]["key"]))
    assert found, "no launch.json of the running step"
    return max(found)[1]


# ---- a peer that knows the key, playing srun, sends bad frames to a real step daemon ---------

# both ignore SIGTERM: killed only KillWait after their daemon lost "srun" (see the fixture)
STDIN_TASK = """trap '' TERM; while read l; do echo "in:$l" >> {f}; done"""
SIGNAL_TASK = ("trap '' TERM; trap 'echo sig >> {f}' USR1; echo ready >> {f}; "
               "while :; do sleep 0.05; done")


def _attack_frames(sealer, kind: int, payload: bytes, good: bytes, mode: str) -> bytes:
    if mode == "forged":  # a sealed frame whose payload was swapped for another, as long
        f = io.seal(sealer, kind, 0, payload.replace(b"evil", b"fine").replace(b"10", b"12"))
        return f[:HEAD.size] + payload + f[-TAG:]
    if mode == "replayed":
        return good
    if mode == "reordered":
        io.seal(sealer, kind, 0, payload)  # sequence number 1, never sent
        return io.seal(sealer, kind, 0, payload)
    return io.pack(kind, 0, payload) + os.urandom(TAG)  # injected


@pytest.mark.parametrize("what", ["stdin", "signal"])
@pytest.mark.parametrize("mode", ["forged", "replayed", "reordered", "injected"])
def test_bad_frames_from_srun_are_never_delivered(c, job, mode, what):
    f = os.path.join(c.workdir, f"task-{mode}-{what}.log")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(f)
    with listener() as ls:
        task = (STDIN_TASK if what == "stdin" else SIGNAL_TASK).format(f=f)
        reply = own_step(c, job, ls.getsockname()[1], task)
        conn, _ = ls.accept()
        with conn:
            sealer, _ = answer_as_srun(conn, io.step_key(reply["key"]), job, reply)
            if what == "stdin":
                kind, good_payload, bad_payload = io.STDIN, b"good\n", b"evil\n"
                expect = "in:good\n"
            else:
                wait_for(lambda: os.path.exists(f) and "ready" in read(f), what="task ready")
                kind, good_payload = io.SIGNAL, json.dumps({"signal": 10}).encode()
                bad_payload, expect = good_payload, "ready\nsig\n"
            good = io.seal(sealer, kind, 0, good_payload)
            conn.sendall(good)  # a sealed frame is delivered ...
            wait_for(lambda: os.path.exists(f) and read(f) == expect, what="good frame delivered")
            conn.sendall(_attack_frames(sealer, kind, bad_payload, good, mode))
            _, closed = recv_until_closed(conn, 15)  # ... a bad one closes the connection
            assert closed
    step_over(c, job, reply["step_id"])
    assert read(f) == expect  # and was not acted on


# ---- a fake srun squatting the port gets nothing ---------------------------------------------

@pytest.mark.parametrize("fake", ["wrong key", "silent"])
def test_fake_srun_receives_no_output(c, job, fake):
    secret = "SECRET-OUTPUT-" + os.urandom(4).hex()
    mark = os.path.join(c.workdir, f"fake-{secret}")
    with listener() as ls:
        reply = own_step(c, job, ls.getsockname()[1],
                         f"echo {secret}; echo {secret} >&2; touch {mark}")
        conn, _ = ls.accept()
        with conn:
            conn.settimeout(10)
            dec = io.Decoder()
            hello = io.message(next_plain(conn, dec))
            wait_for(lambda: os.path.exists(mark), what="task output written")
            if fake == "wrong key":  # names the daemon's key id, proves with another key
                nonce = linkauth.new_nonce()
                conn.sendall(io.hello({
                    "ok": True, "op": "challenge", "nonce": nonce, "key": hello["keys"][0],
                    "proof": linkauth.responder_proof(os.urandom(32), io.ROLE, hello["nonce"],
                                                      nonce)}))
            rest, closed = recv_until_closed(conn, linkauth.HANDSHAKE_TIMEOUT + 10)
    assert closed, "the step daemon kept talking to a peer that did not prove itself"
    assert rest == b""  # nothing after its hello: no proof, no output
    assert set(hello) == {"op", "v", "nonce", "role", "keys"}  # nothing secret in the hello
    assert reply["key"] not in json.dumps(hello)
    step_over(c, job, reply["step_id"])
