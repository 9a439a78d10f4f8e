"""The controller's durable state: ``open_store`` picks the backend (muster.store.base)."""

from __future__ import annotations

from muster.store.base import Store

PG_PREFIXES = ("postgresql://", "postgres://")


def is_postgres(url_or_path: str) -> bool:
    return url_or_path.startswith(PG_PREFIXES)


def open_store(url_or_path: str, migrate: bool = True, claim: str | None = None,
               shared: bool = False) -> Store:
    """The store at ``url_or_path``: a ``postgresql://`` (or ``postgres://``) URL — any libpq
    connection URI, multi-host ones included — opens PostgreSQL (psycopg is imported only
    then); anything else is the path of an SQLite file (``:memory:`` for the simulator).
    ``claim``: make the caller the one writer (musterctld, ``muster restore``); ``shared``:
    a claim shared by the controllers of an active/standby pair (muster.store.lease). Raises
    SchemaTooNew, StoreInUse or a MusterError that says what is wrong."""
    if is_postgres(url_or_path):
        try:
            from muster.store.postgres import PostgresStore
        except ImportError:
            from muster.common.errors import MusterError
            raise MusterError("MusterStateStore names PostgreSQL but psycopg is not installed "
                              "(pip install 'muster[postgres]')", "invalid_request") from None
        return PostgresStore(url_or_path, migrate=migrate, claim=claim, shared=shared)
    from muster.store.sqlite import SqliteStore
    return SqliteStore(url_or_path, migrate=migrate, claim=claim, shared=shared)
