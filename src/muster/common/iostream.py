"""Binary framing of a job step's I/O stream between srun and the step daemons (stdlib only).

Each node's step daemon opens one TCP connection to srun. A frame is::

    type (1 byte) | task id (4 bytes, big-endian) | length (4 bytes) | payload

Types: HELLO (json: job, step, node, key, tasks), STDOUT, STDERR (raw bytes), EXIT (json:
exit_code, signal), STDIN (srun → task), STDIN_EOF, SIGNAL (json: signal), DONE (json: node
finished, every task reported). Raw bytes travel as they are, so output needs no re-encoding;
srun reassembles lines per task so interleaving happens only at line boundaries.
"""

from __future__ import annotations

import struct

HEAD = struct.Struct(">BII")
HELLO, STDOUT, STDERR, EXIT, STDIN, STDIN_EOF, SIGNAL, DONE = range(1, 9)
MAX_PAYLOAD = 1 << 20


def pack(kind: int, task: int, payload: bytes = b"") -> bytes:
    return HEAD.pack(kind, task, len(payload)) + payload


class Decoder:
    """Incremental decoder: feed bytes, iterate complete frames."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        self._buf += data
        out = []
        buf = self._buf
        pos = 0
        n = len(buf)
        while n - pos >= HEAD.size:
            kind, task, length = HEAD.unpack_from(buf, pos)
            if length > MAX_PAYLOAD or not 1 <= kind <= DONE:
                raise ValueError("malformed I/O frame")
            if n - pos - HEAD.size < length:
                break
            start = pos + HEAD.size
            out.append((kind, task, bytes(buf[start:start + length])))
            pos = start + length
        del buf[:pos]
        return out
