"""Mutual authentication and per-frame integrity for Muster's TCP links (standard library only).

Every TCP link — agent ↔ controller, REST daemon ↔ controller, remote client ↔ controller, step
daemon ↔ srun — starts with a three-message handshake on a shared secret ``K`` (the cluster key,
or a per-step key for srun's I/O), then seals every later frame with a MAC under a session key.

Handshake (the *initiator* connects, the *responder* listens)::

    I → R   hello:  nonce_i (fresh, 128 bits), role, key id(s)        nothing secret
    R → I   nonce_r (fresh), proof_r = MAC(K, "R" | role | nonce_i | nonce_r)
    I → R   proof_i = MAC(K, "I" | role | nonce_i | nonce_r | claims)

* The responder proves itself first, over the initiator's fresh nonce: an impostor squatting the
  responder's port cannot answer, so the initiator sends it nothing else (no credential, no
  state) and runs nothing it says.
* The initiator's proof covers the responder's fresh nonce (no replay of an old handshake) and
  its ``claims`` (uid, gid, node, …: canonical JSON), so they cannot be altered.
* The labels "R"/"I" differ, so a proof of one side is never valid for the other (no
  reflection); an attacker relaying between the two learns nothing (it never holds the session
  key).

Session: ``session_key(K, nonce_i, nonce_r, role)``; each direction has its own implicit
sequence number, starting at 0, and each frame carries ``MAC(session, direction | seq | body)``
(:class:`Sealer`, :class:`Opener`). A frame that is forged, replayed, reordered, dropped or
injected fails its MAC, and the link is closed: the sequence numbers are never sent, so the
receiver always checks against the number it expects next.

A key rotation accepts two keys for a while: the initiator names the ids of the keys it has
(:func:`key_id`), the responder answers with one it shares (:func:`choose_key`).
"""

from __future__ import annotations

import json
import os
from _operator import _compare_digest as compare_digest  # what hmac.compare_digest is

try:  # the builtin SHA-256 (hashlib would load OpenSSL: ~3 ms on every srun's start-up)
    from _sha256 import sha256 as _sha256
except ImportError:  # Python 3.12+
    from _sha2 import sha256 as _sha256

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs CLI start-up time
if TYPE_CHECKING:
    from typing import TypeGuard

TAG_BYTES = 32  # HMAC-SHA256, untruncated
NONCE_HEX = 32  # 128-bit nonces, hex
HANDSHAKE_TIMEOUT = 5.0  # seconds a peer has to complete the handshake
PRE_AUTH_MAX_FRAME = 64 * 1024  # the largest frame accepted before the peer is authenticated
DIR_I2R = b"i>r"  # initiator → responder
DIR_R2I = b"r>i"


class LinkAuthError(Exception):
    """The peer failed to authenticate, or a frame failed its integrity check."""


_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))


class Hmac256:
    """HMAC-SHA256 (RFC 2104) with the key's inner and outer states computed once, so each MAC
    costs two state copies and two finishes. The same construction as the standard library's
    ``hmac`` (tests check it against ``hmac.new`` and RFC 4231), built on the builtin SHA-256
    so that the CLI (srun) does not load OpenSSL."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes):
        if len(key) > 64:
            key = _sha256(key).digest()
        key = key.ljust(64, b"\0")
        self._inner, self._outer = _sha256(key.translate(_IPAD)), _sha256(key.translate(_OPAD))

    def digest(self, *parts: bytes | memoryview) -> bytes:
        inner = self._inner.copy()
        for p in parts:
            inner.update(p)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()


def new_nonce() -> str:
    return os.urandom(NONCE_HEX // 2).hex()  # os, not secrets: secrets costs the CLI ~1 ms of imports


def key_id(key: bytes) -> str:
    """A public 16-hex-digit name of a key (reveals nothing about it)."""
    return Hmac256(key).digest(b"muster key id").hex()[:16]


def choose_key(keys: list[bytes], offered: object) -> bytes | None:
    """The first of our keys whose id the peer offered (None: no key in common)."""
    if not isinstance(offered, list):
        return None
    ids = {o for o in offered if isinstance(o, str)}
    for k in keys:
        if key_id(k) in ids:
            return k
    return None


def valid_nonce(n: object) -> TypeGuard[str]:
    return isinstance(n, str) and len(n) == NONCE_HEX and all(c in "0123456789abcdef" for c in n)


def _canon(claims: dict) -> bytes:
    return json.dumps(claims, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _mac(key: bytes, *parts: bytes) -> str:
    # length-prefixed: no two different part lists give the same byte string
    framed = [b"muster-link-1"]
    for p in parts:
        framed += (len(p).to_bytes(4, "big"), p)
    return Hmac256(key).digest(*framed).hex()


def responder_proof(key: bytes, role: str, nonce_i: str, nonce_r: str) -> str:
    return _mac(key, b"R", role.encode(), nonce_i.encode(), nonce_r.encode())


def initiator_proof(key: bytes, role: str, nonce_i: str, nonce_r: str, claims: dict) -> str:
    return _mac(key, b"I", role.encode(), nonce_i.encode(), nonce_r.encode(), _canon(claims))


def check(expected: str, got: object) -> bool:
    """Constant-time comparison of a proof; anything that is not a string fails."""
    return isinstance(got, str) and len(got) == len(expected) and got.isascii() \
        and compare_digest(expected, got)


def session_key(key: bytes, role: str, nonce_i: str, nonce_r: str) -> bytes:
    return bytes.fromhex(_mac(key, b"S", role.encode(), nonce_i.encode(), nonce_r.encode()))


class Sealer:
    """Appends ``MAC(session, direction | seq | body)`` to each outgoing frame body."""

    __slots__ = ("_mac", "_dir", "seq")

    def __init__(self, session: bytes, direction: bytes):
        self._mac, self._dir, self.seq = Hmac256(session), direction, 0

    def tag(self, body: bytes | memoryview) -> bytes:
        t = self._mac.digest(self._dir, self.seq.to_bytes(8, "big"), body)
        self.seq += 1
        return t

    def seal(self, body: bytes) -> bytes:
        return body + self.tag(body)


class Opener:
    """Checks and strips the tag of each incoming frame, in order; any failure is final."""

    __slots__ = ("_mac", "_dir", "seq")

    def __init__(self, session: bytes, direction: bytes):
        self._mac, self._dir, self.seq = Hmac256(session), direction, 0

    def open(self, data: bytes) -> bytes:
        if len(data) < TAG_BYTES:
            raise LinkAuthError("frame too short for its MAC")
        body, tag = data[:-TAG_BYTES], data[-TAG_BYTES:]
        if not compare_digest(self._mac.digest(self._dir, self.seq.to_bytes(8, "big"), body),
                              tag):
            raise LinkAuthError("frame failed its integrity check (forged, replayed, reordered "
                                "or injected)")
        self.seq += 1
        return body


def pair(session: bytes, initiator: bool) -> tuple[Sealer, Opener]:
    """(sealer for what we send, opener for what we receive) on one side of a link."""
    if initiator:
        return Sealer(session, DIR_I2R), Opener(session, DIR_R2I)
    return Sealer(session, DIR_R2I), Opener(session, DIR_I2R)


# ---- the handshake as two small state machines (pure: the caller moves the frames) ----------
#
# Wire form of the three handshake messages (plain frames, at most PRE_AUTH_MAX_FRAME bytes):
#
#     I → R  {"op": "hello", "v": 1, "nonce": nonce_i, "role": role, "keys": [key id, ...]}
#     R → I  {"ok": true, "op": "challenge", "nonce": nonce_r, "key": key id, "proof": proof_r}
#     I → R  {"op": "auth", "claims": {...}, "proof": proof_i}
#
# A refusal is a plain ``{"ok": false, "code": "auth", "error": ...}`` frame, then the close.
# Once the initiator has checked proof_r it may send its first sealed frame right behind
# "auth" (no extra round trip); the responder's first frame back is sealed too, unless it
# refused the proof, in which case it is the plain refusal (see :func:`refusal`).

PROTOCOL = 1
MAX_CLAIMS = 32  # claims are a few small fields (uid, gid, host, node)


def _ours(keys: list[bytes], kid: object) -> bytes | None:
    return next((k for k in keys if key_id(k) == kid), None) if isinstance(kid, str) else None


class Initiator:
    """The connecting side. It sends nothing but :meth:`hello` (a nonce, its role and the ids
    of its keys: nothing secret) until the responder has proved it holds a shared key."""

    def __init__(self, keys: list[bytes], role: str, claims: dict):
        if not keys:
            raise ValueError("no key")
        self.keys, self.role, self.claims = list(keys), role, dict(claims)
        self.nonce = new_nonce()
        self.session: bytes | None = None

    def hello(self) -> dict:
        return {"op": "hello", "v": PROTOCOL, "nonce": self.nonce, "role": self.role,
                "keys": [key_id(k) for k in self.keys]}

    def answer(self, challenge: object) -> dict:
        """Check the responder's proof and return our own (the "auth" message).
        LinkAuthError when the responder refused or failed to prove itself."""
        if not isinstance(challenge, dict):
            raise LinkAuthError("the peer's answer is not a handshake message")
        if challenge.get("ok") is False:
            raise LinkAuthError(f"refused by the peer: {str(challenge.get('error'))[:200]}")
        key = _ours(self.keys, challenge.get("key"))
        nonce_r = challenge.get("nonce")
        if (challenge.get("op") != "challenge" or key is None or not valid_nonce(nonce_r)
                or nonce_r == self.nonce
                or not check(responder_proof(key, self.role, self.nonce, nonce_r),
                             challenge.get("proof"))):
            raise LinkAuthError("the peer did not prove it holds the cluster key")
        self.session = session_key(key, self.role, self.nonce, nonce_r)
        return {"op": "auth", "claims": self.claims,
                "proof": initiator_proof(key, self.role, self.nonce, nonce_r, self.claims)}

    def pair(self) -> tuple[Sealer, Opener]:
        assert self.session is not None, "answer() first"
        return pair(self.session, initiator=True)


class Responder:
    """The listening side. It answers a hello with its proof (which reveals nothing about the
    key) and accepts nothing else until :meth:`verify` has checked the initiator's proof."""

    def __init__(self, keys: list[bytes], roles):
        if not keys:
            raise ValueError("no key")
        self.keys, self.roles = list(keys), frozenset(roles)
        self.nonce = new_nonce()
        self.role: str | None = None
        self.key: bytes | None = None
        self._nonce_i: str | None = None

    def challenge(self, hello: object) -> dict:
        """The answer to the initiator's hello; LinkAuthError for a bad hello or no key in
        common (the caller sends :func:`refusal` and closes)."""
        if not isinstance(hello, dict) or hello.get("op") != "hello" or \
                hello.get("v") != PROTOCOL:
            raise LinkAuthError("expected a link handshake (hello)")
        role, nonce_i = hello.get("role"), hello.get("nonce")
        if (not isinstance(role, str) or role not in self.roles or not valid_nonce(nonce_i)
                or nonce_i == self.nonce):
            raise LinkAuthError("malformed hello")
        key = choose_key(self.keys, hello.get("keys"))
        if key is None:
            raise LinkAuthError("no cluster key in common")
        self.role, self.key, self._nonce_i = role, key, nonce_i
        return {"ok": True, "op": "challenge", "nonce": self.nonce, "key": key_id(key),
                "proof": responder_proof(key, role, nonce_i, self.nonce)}

    def verify(self, auth: object) -> dict:
        """The initiator's claims once its proof checks out; LinkAuthError otherwise."""
        if self.key is None or self.role is None or self._nonce_i is None:
            raise LinkAuthError("no hello")  # challenge() sets all three together
        if not isinstance(auth, dict) or auth.get("op") != "auth":
            raise LinkAuthError("expected the initiator's proof")
        claims = auth.get("claims")
        if not isinstance(claims, dict) or len(claims) > MAX_CLAIMS:
            raise LinkAuthError("expected the initiator's proof")
        try:
            expected = initiator_proof(self.key, self.role, self._nonce_i, self.nonce, claims)
        except (TypeError, ValueError):  # claims that JSON cannot encode canonically
            raise LinkAuthError("malformed claims") from None
        if not check(expected, auth.get("proof")):
            raise LinkAuthError("bad proof (wrong key, or the handshake was tampered with)")
        return claims

    def pair(self) -> tuple[Sealer, Opener]:
        assert self.key is not None and self.role is not None and self._nonce_i is not None
        return pair(session_key(self.key, self.role, self._nonce_i, self.nonce), initiator=False)


def refusal(reason: str) -> dict:
    """The plain frame a responder sends before closing a link it will not authenticate."""
    return {"ok": False, "code": "auth", "error": f"Authentication failure: {reason}"}
