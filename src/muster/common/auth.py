"""HMAC credentials for agents and remote clients (standard library only).

The MUNGE pattern: a credential states an identity (uid, gid) and is sealed with
HMAC-SHA256 under the cluster secret, which only root (and the cluster owner) can read.
Local clients never need one: the controller reads their uid from the Unix socket
(SO_PEERCRED), which the kernel supplies and no client can forge.

Credential (a JSON object sent as the ``cred`` field of the first frame on a TCP connection)::

    {"uid": int, "gid": int, "host": str, "ts": int (unix seconds), "nonce": hex str, "mac": hex}

``mac`` = HMAC-SHA256(secret, canonical JSON of every other field). The verifier refuses a
credential whose MAC is wrong (forged), whose ``ts`` is more than ``TTL`` seconds away from
its clock (stale), or whose nonce it has already accepted within the TTL (replayed).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
import time

TTL = 120  # seconds a credential stays valid (Slurm/MUNGE use a similar window)
KEY_BYTES = 32


class CredentialError(Exception):
    pass


def generate_key(path: str) -> None:
    """Write a new random secret, mode 0600, without ever making it readable by others."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_hex(KEY_BYTES) + "\n")


def load_key(path: str) -> bytes:
    """Read the secret; refuse one that group or others could read or write."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise CredentialError(f"{path}: cannot open key file: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CredentialError(f"{path}: key file must be a regular file")
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise CredentialError(
                f"{path}: key file must be mode 0600 (it is {oct(st.st_mode & 0o777)})")
        try:
            key = os.read(fd, 4096).decode("ascii").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise CredentialError(f"{path}: unreadable key file ({exc})") from None
    finally:
        os.close(fd)
    if len(key) < 32:
        raise CredentialError(f"{path}: key too short")
    return key.encode()


def _mac(key: bytes, fields: dict) -> str:
    body = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def mint(key: bytes, uid: int, gid: int, host: str = "", now: float | None = None) -> dict:
    fields = {
        "uid": int(uid),
        "gid": int(gid),
        "host": host,
        "ts": int(time.time() if now is None else now),
        "nonce": secrets.token_hex(16),
    }
    fields["mac"] = _mac(key, fields)
    return fields


class Verifier:
    """Checks credentials; remembers nonces for TTL seconds to refuse replays."""

    def __init__(self, key: bytes, ttl: int = TTL):
        self._key = key
        self._ttl = ttl
        self._seen: dict[str, int] = {}

    def verify(self, cred: object, now: float | None = None) -> tuple[int, int]:
        """(uid, gid) of a valid credential; CredentialError (never anything else) if not."""
        now = int(time.time() if now is None else now)
        if not isinstance(cred, dict):
            raise CredentialError("credential missing")
        try:
            fields = {k: cred[k] for k in ("uid", "gid", "host", "ts", "nonce")}
            mac = cred["mac"]
        except KeyError:
            raise CredentialError("credential incomplete") from None
        if not (_is_id(fields["uid"]) and _is_id(fields["gid"])
                and isinstance(fields["ts"], int) and not isinstance(fields["ts"], bool)
                and abs(fields["ts"]) < 2**63
                and isinstance(fields["host"], str) and len(fields["host"]) <= 1024
                and isinstance(fields["nonce"], str) and 16 <= len(fields["nonce"]) <= 128
                and isinstance(mac, str) and len(mac) == 64 and mac.isascii()):
            raise CredentialError("credential malformed")
        try:
            expected = _mac(self._key, fields)
        except (TypeError, ValueError):  # e.g. a lone surrogate in host
            raise CredentialError("credential malformed") from None
        if not hmac.compare_digest(expected, mac):
            raise CredentialError("credential forged (bad MAC)")
        if abs(now - fields["ts"]) > self._ttl:
            raise CredentialError("credential expired (timestamp outside the "
                                  f"{self._ttl}-second window)")
        if len(self._seen) > 100_000:
            self._seen = {n: t for n, t in self._seen.items() if abs(now - t) <= self._ttl}
        if fields["nonce"] in self._seen:
            raise CredentialError("credential replayed")
        self._seen[fields["nonce"]] = fields["ts"]
        return fields["uid"], fields["gid"]


def _is_id(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**32
