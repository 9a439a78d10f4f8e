"""A private PostgreSQL server for the tests (issue 16): Debian's initdb + pg_ctl, run as the
unprivileged ``postgres`` (or ``nobody``) user in a temporary directory, listening only on a
Unix socket in that directory with a random port number; no system service is touched.

``PgServer.new_db()`` gives each test a database of its own and returns its connection URL.
Without PostgreSQL's binaries or psycopg the tests that need them are skipped — unless
``MUSTER_REQUIRE_POSTGRES=1`` (scripts/test.sh sets it after installing both), where they fail.
"""

from __future__ import annotations

import glob
import os
import pwd
import random
import shutil
import subprocess
import tempfile
import uuid

import pytest


def _bindir() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    return os.path.dirname(found[-1]) if found else None


def unavailable(reason: str):
    if os.environ.get("MUSTER_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"PostgreSQL tests required but {reason}")
    pytest.skip(reason)


class PgServer:
    def __init__(self, fsync: bool = False) -> None:
        """``fsync``: as a production server (the benchmark); the tests need no durability
        against power loss and skip it."""
        self.bindir = _bindir()
        if self.bindir is None:
            unavailable("no /usr/lib/postgresql/*/bin/initdb (apt-get install postgresql)")
        try:
            import psycopg  # noqa: F401
        except ImportError:
            unavailable("psycopg is not installed (pip install 'muster[postgres]')")
        self.user = "postgres" if _user_exists("postgres") else "nobody"
        pw = pwd.getpwnam(self.user)
        self.base = tempfile.mkdtemp(prefix="muster-pg-", dir="/tmp")
        os.chown(self.base, pw.pw_uid, pw.pw_gid)
        os.chmod(self.base, 0o700)  # the socket is reachable by its owner and root only
        self.data = os.path.join(self.base, "data")
        self.port = random.randint(20000, 60000)
        self._as_user([f"{self.bindir}/initdb", "-D", self.data, "-U", "postgres",
                       "--auth=trust", "-E", "UTF8", "--no-sync"])
        opts = (f"-c listen_addresses='' -c unix_socket_directories={self.base} "
                f"-c port={self.port} -c fsync={'on' if fsync else 'off'} "
                "-c max_connections=200")
        self._as_user([f"{self.bindir}/pg_ctl", "-D", self.data, "-w", "-t", "60",
                       "-l", os.path.join(self.base, "server.log"), "-o", opts, "start"])

    def _as_user(self, argv: list[str]) -> None:
        r = subprocess.run(["runuser", "-u", self.user, "--", *argv], cwd=self.base,
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {r.stdout}{r.stderr}{self.log_tail()}")

    def log_tail(self) -> str:
        try:
            with open(os.path.join(self.base, "server.log")) as fh:
                return fh.read()[-3000:]
        except OSError:
            return ""

    def url(self, db: str = "postgres") -> str:
        return f"postgresql://postgres@/{db}?host={self.base}&port={self.port}"

    def admin(self):
        import psycopg
        return psycopg.connect(self.url(), autocommit=True)

    def new_db(self) -> str:
        name = "t_" + uuid.uuid4().hex[:12]
        with self.admin() as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def terminate(self, url: str) -> int:
        """Kill every server session of ``url``'s database (a lost connection); how many."""
        db = url.split("/")[3].split("?")[0]
        with self.admin() as conn:
            rows = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                "WHERE datname=%s AND pid<>pg_backend_pid()", (db,)).fetchall()
        return len(rows)

    def allow_connections(self, url: str, allow: bool) -> None:
        db = url.split("/")[3].split("?")[0]
        with self.admin() as conn:
            conn.execute(f"ALTER DATABASE {db} ALLOW_CONNECTIONS {'true' if allow else 'false'}")

    def stop(self) -> None:
        try:
            self._as_user([f"{self.bindir}/pg_ctl", "-D", self.data, "-m", "immediate", "stop"])
        finally:
            shutil.rmtree(self.base, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False
