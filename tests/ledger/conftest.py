from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ledger.helpers import sqlite_url
from turngate.ledger import LedgerStore


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "ledger.sqlite3"


@pytest.fixture
def ledger_url(ledger_path: Path) -> str:
    return sqlite_url(ledger_path)


@pytest.fixture
def store(ledger_url: str) -> Iterator[LedgerStore]:
    ledger = LedgerStore(ledger_url)
    try:
        yield ledger
    finally:
        ledger.close()
