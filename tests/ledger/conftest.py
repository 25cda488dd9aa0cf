"""The ledger suite runs on both backends.

Every test that uses the ``backend`` fixture (directly, or through ``ledger_url`` / ``store`` /
``db``) runs twice: ``[sqlite]`` on a fresh file, ``[postgresql]`` on a fresh schema (or, with
``@pytest.mark.own_database``, a fresh database) of the server that :mod:`tests.ledger.postgres`
finds or starts. ``@pytest.mark.backends("sqlite")`` limits a test to the backends named (the
marker's ``reason=`` says why).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ledger import postgres
from tests.ledger.helpers import RawDb, sqlite_url
from turngate.ledger import LedgerStore

BACKENDS = ("sqlite", "postgresql")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "backends(*names, reason): run a ledger test only on these backends (default: sqlite and postgresql)",
    )
    config.addinivalue_line(
        "markers",
        "own_database: on PostgreSQL, give the test a database of its own instead of a schema "
        "(for what is per database: NOTIFY channels, advisory locks)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("backends")
    names = marker.args if marker is not None else BACKENDS
    unknown = set(names) - set(BACKENDS)
    if unknown:
        raise pytest.UsageError(f"unknown ledger backends {sorted(unknown)} in {metafunc.definition.nodeid}")
    # Module scope: module-scoped fixtures (a big ledger) can depend on the backend, and pytest
    # groups each module's tests by backend.
    metafunc.parametrize("backend", names, scope="module")


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    """Where a SQLite ledger goes (the ``sqlite`` backend's ``ledger_url`` points here)."""
    return tmp_path / "data" / "ledger.sqlite3"


@pytest.fixture
def ledger_url(backend: str, ledger_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A URL to a fresh, empty (not yet migrated) ledger on ``backend``."""
    if backend == "sqlite":
        yield sqlite_url(ledger_path)
        return
    server: postgres.PostgresServer = request.getfixturevalue("postgres_server")
    if request.node.get_closest_marker("own_database") is not None:
        with server.fresh_database() as url:
            yield url
    else:
        with server.fresh_schema() as url:
            yield url


@pytest.fixture
def store(ledger_url: str) -> Iterator[LedgerStore]:
    ledger = LedgerStore(ledger_url)
    try:
        yield ledger
    finally:
        ledger.close()


@pytest.fixture
def db(ledger_url: str) -> Iterator[RawDb]:
    """The database behind ``ledger_url``, reached without the store."""
    raw_db = RawDb(ledger_url)
    try:
        yield raw_db
    finally:
        raw_db.close()


@pytest.fixture
def app_role(postgres_server: postgres.PostgresServer) -> Iterator[str]:
    """A login role with no privileges of its own (dropped afterwards)."""
    role = f"tg_app_{uuid.uuid4().hex[:10]}"
    with postgres.admin_connection(postgres_server.admin_url) as conn:
        try:
            conn.execute(f'CREATE ROLE "{role}" LOGIN')
        except Exception as error:  # not a superuser / no CREATEROLE on the user's server
            pytest.skip(f"cannot create a role on {postgres_server.description}: {error}")
    try:
        yield role
    finally:
        with postgres.admin_connection(postgres_server.admin_url) as conn:
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')
