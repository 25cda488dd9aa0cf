"""The bounds of docs/RELIABILITY.md as configuration: what reaches libpq, what the URL overrides,
what the settings accept, and the API's disk floor (no servers: quick)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pydantic import ValidationError
from sqlalchemy.engine import make_url

from turngate.api.disk_guard import LedgerDiskGuard, sqlite_ledger_dir
from turngate.ledger.engine import postgres_connect_args
from turngate.settings import load_settings

PG = "postgresql+psycopg://u@127.0.0.1:5432/db"


def test_every_postgres_connection_carries_the_bounds() -> None:
    args = postgres_connect_args(make_url(PG), busy_timeout_ms=30_000, timeout_s=1.5)
    assert args["connect_timeout"] == 2  # libpq's minimum
    assert args["tcp_user_timeout"] == 1500
    assert args["keepalives"] == 1
    options = args["options"]
    assert "-c lock_timeout=30000" in options
    assert "-c statement_timeout=1500" in options
    assert "-c idle_in_transaction_session_timeout=1500" in options
    assert postgres_connect_args(make_url(PG), busy_timeout_ms=1, timeout_s=45)["connect_timeout"] == 45


def test_bounds_given_in_the_url_win() -> None:
    url = make_url(f"{PG}?connect_timeout=7&tcp_user_timeout=9000&options=-c%20statement_timeout%3D0")
    args = postgres_connect_args(url, busy_timeout_ms=30_000, timeout_s=1.5)
    assert "connect_timeout" not in args and "tcp_user_timeout" not in args
    assert "statement_timeout=1500" not in args["options"]
    assert args["options"].startswith("-c statement_timeout=0")


@pytest.mark.parametrize(
    ("name", "under", "at", "over"),
    [
        ("ledger_timeout_s", 0.4, 0.5, 601),
        ("temporal_rpc_timeout_s", 0.1, 0.2, 121),
        ("ledger_wait_s", -1, 0, 3601),
        ("ledger_min_free_bytes", -1, 0, None),
    ],
)
def test_the_bounds_are_settings_with_limits(name: str, under: float, at: float, over: float | None) -> None:
    assert getattr(load_settings(**{name: at}), name) == at
    for bad in (under, over):
        if bad is not None:
            with pytest.raises(ValidationError, match=name):
                load_settings(**{name: bad})


def test_the_disk_guard_watches_file_backed_sqlite_only(tmp_path: Path) -> None:
    assert sqlite_ledger_dir(f"sqlite:///{tmp_path}/l.sqlite3") == tmp_path
    assert sqlite_ledger_dir("sqlite://") is None
    assert sqlite_ledger_dir("sqlite:///:memory:") is None
    assert sqlite_ledger_dir(PG) is None
    assert LedgerDiskGuard(None, 1 << 60).has_room()
    assert LedgerDiskGuard(tmp_path, 0).has_room()


def test_the_disk_guard_logs_once_per_outage(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="turngate.api.disk_guard")
    guard = LedgerDiskGuard(tmp_path, 1 << 60)  # more than any disk has: full
    assert not guard.has_room() and not guard.has_room()
    response = guard.response()
    assert response.status_code == 503 and response.headers["retry-after"] == "2"
    guard._min_free = 1  # space is back
    assert guard.has_room() and guard.has_room()
    messages = [r.getMessage().split(":")[0] for r in caplog.records]
    assert messages == ["ledger disk full", "ledger disk has room again"]
