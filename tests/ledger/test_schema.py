"""Migrations, pragmas and the append-only triggers."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from tests.ledger.helpers import draft, raw, sqlite_url
from turngate.ledger import LedgerStore, verify_ledger
from turngate.ledger.schema import metadata
from turngate.ledger.store import MIGRATIONS_DIR


def _head_revision() -> str:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None
    return head


def test_fresh_directory_is_created_and_migrated(tmp_path: Path) -> None:
    path = tmp_path / "does" / "not" / "exist" / "ledger.sqlite3"
    with LedgerStore(sqlite_url(path)) as store:
        assert store.append(draft("c-1")).index == 0
    assert path.is_file()
    with raw(path) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(_head_revision(),)]


def test_migrations_run_twice_safely(ledger_url: str, ledger_path: Path) -> None:
    with LedgerStore(ledger_url) as store:
        first = store.append(draft("c-1"))
    with LedgerStore(ledger_url) as store, LedgerStore(ledger_url) as other:
        assert store.get(0) == first
        assert other.append(draft("c-2")).prev_event_digest == first.digest
        assert verify_ledger(store).ok
    with raw(ledger_path) as conn:
        assert conn.execute("SELECT count(*) FROM alembic_version").fetchone() == (1,)


def test_migrated_schema_matches_the_table_definitions(store: LedgerStore) -> None:
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == []


def test_expected_indexes_and_unique_key_exist(ledger_path: Path, store: LedgerStore) -> None:
    with raw(ledger_path) as conn:
        indexes = {
            name: [col for _, _, col in conn.execute(f"PRAGMA index_info('{name}')")]
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events'"
            )
        }
        table_sql = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'events'"
        ).fetchone()[0]
    columns = sorted(indexes.values())
    for expected in (
        ["thread_id", "index"],
        ["correlation_id"],
        ["thread_id", "turn_id"],
        ["digest"],
        ["stream_id", "lane", "index"],
        ["correlation_id", "kind"],
    ):
        assert expected in columns
    # INTEGER PRIMARY KEY: the index is the rowid (no separate primary-key index).
    assert '"index" INTEGER NOT NULL' in table_sql
    assert "PRIMARY KEY" in table_sql


def test_connections_use_wal_full_sync_busy_timeout_and_foreign_keys(
    store: LedgerStore, ledger_path: Path
) -> None:
    with store.read_connection() as conn:
        pragma = {
            name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()
            for name in ("journal_mode", "synchronous", "busy_timeout", "foreign_keys")
        }
    assert pragma == {"journal_mode": "wal", "synchronous": 2, "busy_timeout": 30000, "foreign_keys": 1}


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE events SET payload = '{}' WHERE \"index\" = 0",
        "UPDATE events SET created_at = 'now'",
        'DELETE FROM events WHERE "index" = 1',
        "DELETE FROM events",
    ],
)
def test_triggers_refuse_update_and_delete(store: LedgerStore, ledger_path: Path, statement: str) -> None:
    store.append_many([draft("c-1"), draft("c-2")])
    with (
        raw(ledger_path) as conn,
        pytest.raises(sqlite3.DatabaseError, match="turngate ledger is append-only"),
    ):
        conn.execute(statement)
    assert store.head()[0] == 2
    assert verify_ledger(store).ok


def test_triggers_also_refuse_writes_through_the_engine(store: LedgerStore) -> None:
    from sqlalchemy import exc, text

    store.append(draft("c-1"))
    with pytest.raises(exc.DatabaseError, match="append-only"), store.engine.begin() as conn:
        conn.execute(text("DELETE FROM events"))
    assert store.head()[0] == 1
