"""Fixtures: a real SQLite ledger for planning, and the fake vendor servers of tests/fakes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.llm_servers import anthropic_server, ollama_server, openai_server
from turngate.ledger import LedgerStore

__all__ = ["anthropic_server", "ollama_server", "openai_server"]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LedgerStore]:
    with LedgerStore(f"sqlite:///{tmp_path / 'ledger.sqlite3'}") as ledger:
        yield ledger
