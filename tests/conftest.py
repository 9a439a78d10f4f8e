import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from cluster import TEST_USER, private_cluster, user_exists  # noqa: E402


@pytest.fixture(scope="session")
def cluster():
    """One 4-node, 32-GPU cluster shared by the e2e tests (each test uses its own jobs)."""
    with private_cluster("muster-e2e-") as c:
        yield c


@pytest.fixture
def workdir(cluster, request):
    d = os.path.join(cluster.workdir, request.node.name.replace("/", "_")[:60])
    os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o1777)
    return d


@pytest.fixture
def test_user():
    if os.getuid() != 0:
        pytest.fail("these tests prove per-user identity and must run as root (as CI does)")
    if not user_exists(TEST_USER):
        pytest.fail(f"test user {TEST_USER} missing: run .ci/run (it creates it) or `useradd {TEST_USER}`")
    return TEST_USER


@pytest.fixture(scope="session")
def pg_server():
    """A private PostgreSQL server for the whole session (tests/pg.py); skipped when
    PostgreSQL or psycopg is missing, unless MUSTER_REQUIRE_POSTGRES=1."""
    from pg import PgServer
    srv = PgServer()
    try:
        yield srv
    finally:
        srv.stop()
