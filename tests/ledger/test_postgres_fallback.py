"""What the suite does when no PostgreSQL server answers: a throwaway cluster, or a loud skip."""

from __future__ import annotations

import socket

import pytest

from tests import conftest
from tests.ledger import postgres
from tests.ledger.helpers import draft
from tests.ledger.postgres import ENV_BIN, ENV_URL, find_binaries
from turngate.ledger import LedgerStore, verify_ledger


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Reporter:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def write_sep(self, _sep: str, title: str, **_markup: bool) -> None:
        self.lines.append(title)

    def write_line(self, line: str, **_markup: bool) -> None:
        self.lines.append(line)


def test_no_server_and_no_binaries_skips_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process: acquire() gives the skip reason, and the terminal summary shouts it."""
    url = f"postgresql+psycopg://postgres:pw@127.0.0.1:{_closed_port()}/test"
    monkeypatch.setenv(ENV_URL, url)
    monkeypatch.setenv(ENV_BIN, "/nonexistent/turngate-test-bin")
    monkeypatch.setattr(postgres, "STATUS", postgres.Status())
    reason = postgres.acquire()
    assert isinstance(reason, str)
    assert reason.startswith(
        "PostgreSQL tests skipped: no server at postgresql+psycopg://postgres:***@127.0.0.1"
    )
    assert "Connection refused" in reason or "connection failed" in reason
    assert "no initdb/pg_ctl (looked in TURNGATE_TEST_POSTGRES_BIN=/nonexistent/turngate-test-bin)" in reason
    assert reason.endswith(f"install postgresql or set {ENV_URL}")
    reporter = _Reporter()
    conftest.pytest_terminal_summary(reporter)  # type: ignore[arg-type]
    assert reporter.lines[:2] == ["ledger: PostgreSQL backend NOT TESTED", reason]
    assert ENV_URL in reporter.lines[2]


def test_no_server_starts_a_throwaway_cluster_and_stops_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process: nothing answers, so initdb + pg_ctl start a cluster; close() removes it."""
    if find_binaries()[0] is None:
        pytest.skip("no initdb/pg_ctl on this machine: the throwaway-cluster path cannot run here")
    monkeypatch.setenv(ENV_URL, f"postgresql+psycopg://postgres@127.0.0.1:{_closed_port()}/test")
    monkeypatch.delenv(ENV_BIN, raising=False)
    monkeypatch.setattr(postgres, "STATUS", postgres.Status())
    server = postgres.acquire()
    assert isinstance(server, postgres.PostgresServer), server
    try:
        assert server.cluster is not None and server.cluster.port is not None
        assert "a throwaway cluster" in (postgres.STATUS.description or "")
        with server.fresh_database() as url, LedgerStore(url) as store:
            store.append_many([draft("c-1"), draft("c-2")])
            assert verify_ledger(store).checked == 2
    finally:
        server.close()
    assert not server.cluster.root.exists()
    with socket.socket() as sock, pytest.raises(OSError):
        sock.connect(("127.0.0.1", server.cluster.port))
