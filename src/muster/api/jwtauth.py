"""JWT (HS256) verification for musterrestd, with the key the controller creates.

Tokens come from ``scontrol token`` (controller op ``token``): claims ``sun`` (user name),
``iat``, ``exp``, signed with ``<StateSaveLocation>/jwt.key`` (mode 0600). Clients send them
as slurmrestd expects (``X-SLURM-USER-TOKEN``, optionally ``X-SLURM-USER-NAME``) or as
``Authorization: Bearer``. A token for root may name another user in ``X-SLURM-USER-NAME``
(as Slurm allows for SlurmUser/root tokens); any other mismatch is refused.
"""

from __future__ import annotations

import os
import pwd
import stat

import jwt


class AuthFailure(Exception):
    pass


class Identity:
    __slots__ = ("user", "uid", "gid")

    def __init__(self, user: str, uid: int, gid: int):
        self.user, self.uid, self.gid = user, uid, gid


class JwtVerifier:
    def __init__(self, key_path: str):
        self.key_path = key_path
        self._key: bytes | None = None
        self._stamp: tuple[int, int, int] | None = None

    def key(self) -> bytes:
        """The key, re-read when the file changes; created by the controller on first use."""
        try:
            st = os.stat(self.key_path)
        except FileNotFoundError:
            raise AuthFailure("no token has been issued yet (run `scontrol token`)") from None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._key is None or stamp != self._stamp:
            if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077:
                raise AuthFailure("JWT key file has unsafe permissions")
            with open(self.key_path, "rb") as fh:
                self._key = fh.read()
            self._stamp = stamp
        return self._key

    def verify(self, token: str | None, user_header: str | None = None) -> Identity:
        if not token:
            raise AuthFailure("authentication required: send X-SLURM-USER-TOKEN")
        try:
            claims = jwt.decode(token, self.key(), algorithms=["HS256"],
                                options={"require": ["exp", "sun"]}, leeway=0)
        except jwt.ExpiredSignatureError:
            raise AuthFailure("token expired") from None
        except jwt.InvalidTokenError as exc:
            raise AuthFailure(f"invalid token ({exc})") from None
        user = claims.get("sun")
        if not isinstance(user, str) or not user:
            raise AuthFailure("invalid token (no user)")
        if user_header and user_header != user:
            if _uid_of(user) != 0:
                raise AuthFailure("X-SLURM-USER-NAME does not match the token")
            user = user_header
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            raise AuthFailure(f"unknown user {user!r}") from None
        return Identity(pw.pw_name, pw.pw_uid, pw.pw_gid)


def _uid_of(user: str) -> int | None:
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return None
