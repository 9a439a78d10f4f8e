"""The cluster key, and job credentials (standard library only).

**The cluster key** (``muster.key``, hex text) is the secret every daemon shares: the TCP links
to the controller authenticate with it (:mod:`muster.common.linkauth`) and job credentials are
signed with a key derived from it. Like MUNGE's key it must be a regular file owned by the
daemon's effective uid (or root) that neither group nor others may access: a key that anyone
else could read or replace is refused at start-up with a one-line error. During a key rotation
the daemons also load ``<key>.old`` (same checks) and accept either key (:func:`load_keys`).
Local clients never need the key: the controller reads their uid from the Unix socket
(SO_PEERCRED), which the kernel supplies and no client can forge.

**Job credentials** (Slurm's job credential). Every message that makes an agent run, signal or
kill something carries ``cred``, signed by the controller with :func:`cred_key` (a key derived
from the cluster key for this purpose only) over the operation, job, step, run, supplementary
groups, node, uid, gid and an expiry :data:`CRED_TTL` seconds after it was minted::

    "cred": {"node": str, "uid": int|null, "gid": int|null, "exp": int, "mac": hex}

The operation, job (the job list for ``kill_list``), step, run and groups are read from the
message itself, so they cannot be changed without breaking the MAC. The agent checks the MAC,
that ``node`` is its own name, that ``exp`` has not passed and that uid/gid are the launch's
(:func:`verify_job_cred`), and runs nothing otherwise. The controller mints the credential when
the frame is written (not when the message is queued), so a message that waited in an outbox
for an agent that was away leaves with a fresh one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
import time

KEY_BYTES = 32
CRED_TTL = 300  # seconds a job credential stays valid after it is minted
CRED_OPS = frozenset({"launch", "launch_step", "terminate", "signal", "signal_step",
                      "update_limit", "kill_list", "prolog", "epilog"})


class CredentialError(Exception):
    pass


# ---- the cluster key --------------------------------------------------------------------------

def generate_key(path: str) -> None:
    """Write a new random secret, mode 0600, without ever making it readable by others."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_hex(KEY_BYTES) + "\n")


def load_key(path: str) -> bytes:
    """Read the secret. Refused (CredentialError, one line): not a regular file (symlinks are
    not followed), owned by someone other than our effective uid or root, accessible to group
    or others in any way, unreadable or too short."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise CredentialError(f"{path}: cannot open key file: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CredentialError(f"{path}: key file must be a regular file")
        if st.st_uid not in (os.geteuid(), 0):
            raise CredentialError(f"{path}: key file must be owned by uid {os.geteuid()} or "
                                  f"root (it is owned by uid {st.st_uid})")
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise CredentialError(f"{path}: key file must be mode 0600, not accessible by "
                                  f"group or others (it is {oct(st.st_mode & 0o777)})")
        try:
            key = os.read(fd, 4096).decode("ascii").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise CredentialError(f"{path}: unreadable key file ({exc})") from None
    finally:
        os.close(fd)
    if len(key) < 32:
        raise CredentialError(f"{path}: key too short")
    return key.encode()


def load_keys(path: str) -> list[bytes]:
    """The key, then ``<path>.old`` when it exists (a rotation in progress); both checked."""
    keys = [load_key(path)]
    if os.path.lexists(path + ".old"):
        old = load_key(path + ".old")
        if old != keys[0]:
            keys.append(old)
    return keys


# ---- job credentials ----------------------------------------------------------------------

def cred_key(cluster_key: bytes) -> bytes:
    """The job-credential key: derived, so a credential is never valid as anything else."""
    return hmac.new(cluster_key, b"muster job credential v1", hashlib.sha256).digest()


def _subject(msg: dict) -> dict:
    op = msg.get("op")
    return {"op": op, "job": msg.get("jobs") if op == "kill_list" else msg.get("job_id"),
            "step": msg.get("step_id"), "run": msg.get("run", 0), "groups": msg.get("groups")}


def _cred_mac(ckey: bytes, msg: dict, node: object, uid: object, gid: object,
              exp: object) -> str:
    fields = {**_subject(msg), "node": node, "uid": uid, "gid": gid, "exp": exp}
    body = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hmac.new(ckey, body.encode(), hashlib.sha256).hexdigest()


def mint_job_cred(ckey: bytes, msg: dict, node: str, uid: int | None, gid: int | None,
                  now: float | None = None) -> dict:
    """The credential for ``msg`` (an op of CRED_OPS) sent to ``node`` for a job of uid/gid."""
    exp = int(time.time() if now is None else now) + CRED_TTL
    return {"node": node, "uid": uid, "gid": gid, "exp": exp,
            "mac": _cred_mac(ckey, msg, node, uid, gid, exp)}


def verify_job_cred(ckeys: list[bytes], msg: dict, node: str, ids: tuple | None = None,
                    now: float | None = None) -> None:
    """Check ``msg["cred"]`` for this node and, when ``ids`` is given, for this (uid, gid):
    the launch's. CredentialError (never anything else) if it is missing, forged, expired, or
    for another node or user."""
    cred = msg.get("cred")
    if not isinstance(cred, dict):
        raise CredentialError("job credential missing")
    c_node, c_uid, c_gid, exp, mac = (cred.get(k) for k in ("node", "uid", "gid", "exp", "mac"))
    if not (isinstance(c_node, str) and _is_id_or_none(c_uid) and _is_id_or_none(c_gid)
            and isinstance(exp, int) and not isinstance(exp, bool)
            and isinstance(mac, str) and len(mac) == 64 and mac.isascii()):
        raise CredentialError("job credential malformed")
    try:
        good = any(hmac.compare_digest(_cred_mac(k, msg, c_node, c_uid, c_gid, exp), mac)
                   for k in ckeys)
    except (TypeError, ValueError):  # a message JSON cannot encode canonically
        raise CredentialError("job credential malformed") from None
    if not good:
        raise CredentialError("job credential forged (bad MAC)")
    if exp < int(time.time() if now is None else now):
        raise CredentialError("job credential expired (check the clocks of controller and node)")
    if c_node != node:
        raise CredentialError(f"job credential is for node {c_node[:64]!r}, not {node!r}")
    if ids is not None and (c_uid, c_gid) != tuple(ids):
        raise CredentialError(f"job credential is for uid/gid {c_uid}/{c_gid}, "
                              f"the job runs as {ids[0]}/{ids[1]}")


def _is_id_or_none(v: object) -> bool:
    return v is None or (isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**32)
