"""Migrations, connection settings, the append-only triggers and (PostgreSQL) permissions."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import exc, inspect, text

from tests.ledger.helpers import RawDb, draft, raw, sqlite_url
from turngate.ledger import LedgerStore, LedgerUnavailableError, verify_ledger
from turngate.ledger.engine import (
    MIGRATIONS_DIR,
    normalize_url,
)
from turngate.ledger.schema import in_schema_diff, metadata


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


def test_a_fresh_ledger_is_migrated_to_head(ledger_url: str, db: RawDb) -> None:
    with LedgerStore(ledger_url) as store:
        assert store.append(draft("c-1")).index == 0
    assert db.execute("SELECT version_num FROM alembic_version") == [(_head_revision(),)]


def test_migrations_run_twice_safely(ledger_url: str, db: RawDb) -> None:
    with LedgerStore(ledger_url) as store:
        first = store.append(draft("c-1"))
    with LedgerStore(ledger_url) as store, LedgerStore(ledger_url) as other:
        assert store.get(0) == first
        assert other.append(draft("c-2")).prev_event_digest == first.digest
        assert verify_ledger(store).ok
    assert db.scalar("SELECT count(*) FROM alembic_version") == 1


def test_migrated_schema_matches_the_table_definitions(store: LedgerStore) -> None:
    with store.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"include_name": in_schema_diff})
        diff = compare_metadata(context, metadata)
    assert diff == []


def test_expected_indexes_and_unique_key_exist(store: LedgerStore, db: RawDb, backend: str) -> None:
    inspector = inspect(db.engine)
    indexed = [index["column_names"] for index in inspector.get_indexes("events")]
    indexed += [unique["column_names"] for unique in inspector.get_unique_constraints("events")]
    for expected in (
        ["thread_id", "index"],
        ["correlation_id"],
        ["thread_id", "turn_id"],
        ["turn_id"],
        ["digest"],
        ["stream_id", "lane", "index"],
        ["correlation_id", "kind"],
    ):
        assert expected in indexed
    assert inspector.get_pk_constraint("events")["constrained_columns"] == ["index"]
    if backend == "sqlite":
        # INTEGER PRIMARY KEY: the index is the rowid (no separate primary-key index).
        table_sql = db.scalar("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'events'")
        assert '"index" INTEGER NOT NULL' in table_sql
        assert "PRIMARY KEY" in table_sql
    else:
        column_type = db.scalar(
            "SELECT data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = 'events' AND column_name = 'index'"
        )
        assert column_type == "bigint"


@pytest.mark.backends("sqlite", reason="SQLite pragmas; the PostgreSQL twin checks session settings")
def test_connections_use_wal_full_sync_busy_timeout_and_foreign_keys(store: LedgerStore) -> None:
    with store.read_connection() as conn:
        pragma = {
            name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()
            for name in ("journal_mode", "synchronous", "busy_timeout", "foreign_keys")
        }
    assert pragma == {"journal_mode": "wal", "synchronous": 2, "busy_timeout": 30000, "foreign_keys": 1}


@pytest.mark.backends("postgresql")
def test_postgres_reads_are_read_only_snapshots_and_writes_time_out_on_locks(ledger_url: str) -> None:
    with LedgerStore(ledger_url, busy_timeout_ms=1234) as store:
        with store.read_connection() as conn:
            settings = {
                name: conn.exec_driver_sql(f"SHOW {name}").scalar()
                for name in ("transaction_isolation", "transaction_read_only", "lock_timeout")
            }
        assert settings == {
            "transaction_isolation": "repeatable read",
            "transaction_read_only": "on",
            "lock_timeout": "1234ms",
        }
        with store.engine.connect() as conn:  # what writers get
            assert conn.exec_driver_sql("SHOW transaction_isolation").scalar() == "read committed"
        # (Reported as "unavailable": the same error is what a write gets from a demoted primary.)
        with (
            pytest.raises(LedgerUnavailableError, match="read-only transaction"),
            store.read_connection() as conn,
        ):
            conn.exec_driver_sql("CREATE TABLE nope (x int)")


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE events SET payload = '{}' WHERE \"index\" = 0",
        "UPDATE events SET created_at = 'now'",
        'DELETE FROM events WHERE "index" = 1',
        "DELETE FROM events",
    ],
)
def test_triggers_refuse_update_and_delete(store: LedgerStore, db: RawDb, statement: str) -> None:
    store.append_many([draft("c-1"), draft("c-2")])
    with pytest.raises(exc.DatabaseError, match="turngate ledger is append-only"):
        db.execute(statement)
    assert store.head()[0] == 2
    assert verify_ledger(store).ok


@pytest.mark.backends("sqlite", reason="raw sqlite3 driver; the engine variant below runs on both")
def test_triggers_refuse_update_and_delete_through_the_sqlite3_driver(
    store: LedgerStore, ledger_path: Path
) -> None:
    import sqlite3

    store.append(draft("c-1"))
    with (
        raw(ledger_path) as conn,
        pytest.raises(sqlite3.DatabaseError, match="turngate ledger is append-only"),
    ):
        conn.execute("DELETE FROM events")


@pytest.mark.backends("postgresql")
@pytest.mark.parametrize("statement", ["TRUNCATE events", "TRUNCATE ONLY events RESTART IDENTITY CASCADE"])
def test_postgres_triggers_refuse_truncate(store: LedgerStore, db: RawDb, statement: str) -> None:
    store.append_many([draft("c-1"), draft("c-2")])
    with pytest.raises(exc.IntegrityError, match="turngate ledger is append-only"):
        db.execute(statement)
    assert store.head()[0] == 2


def test_triggers_also_refuse_writes_through_the_engine(store: LedgerStore) -> None:
    store.append(draft("c-1"))
    with pytest.raises(exc.DatabaseError, match="append-only"), store.engine.begin() as conn:
        conn.execute(text("DELETE FROM events"))
    assert store.head()[0] == 1


@pytest.mark.backends("postgresql")
def test_a_least_privilege_role_can_append_and_read_but_not_rewrite(
    ledger_url: str, db: RawDb, app_role: str
) -> None:
    """Runtime role with SELECT + INSERT only: the store works, rewriting history does not.

    (The triggers hold against the table owner too, but an owner could drop them; a role that
    does not own the table cannot.)
    """
    with LedgerStore(ledger_url) as owner_store:  # the owner migrates
        owner_store.append(draft("c-1"))
    schema = db.scalar("SELECT current_schema()")
    db.execute_all(
        [
            f'GRANT USAGE ON SCHEMA "{schema}" TO "{app_role}"',
            f'GRANT SELECT, INSERT ON events TO "{app_role}"',
            f'GRANT SELECT ON alembic_version TO "{app_role}"',
            f'GRANT SELECT, INSERT, UPDATE ON thread_summary, thread_actors, ledger_counts TO "{app_role}"',
            f'GRANT SELECT, INSERT ON thread_search TO "{app_role}"',
        ]
    )
    app_url = normalize_url(ledger_url).set(username=app_role, password=None)
    app_db = RawDb(app_url.render_as_string(hide_password=False))
    try:
        with LedgerStore(app_url.render_as_string(hide_password=False)) as store:
            assert store.append(draft("c-2")).index == 1
            assert store.append(draft("c-3", thread_id="a-new-thread")).index == 2  # searchable
            assert verify_ledger(store).ok
        for statement in (
            "UPDATE events SET payload = '{}'",
            "DELETE FROM events",
            "TRUNCATE events",
            "ALTER TABLE events DISABLE TRIGGER USER",
            "DROP TRIGGER events_append_only_update_delete ON events",
        ):
            with pytest.raises(exc.ProgrammingError, match=r"permission denied|must be owner"):
                app_db.execute(statement)
    finally:
        app_db.close()
        db.execute_all([f'DROP OWNED BY "{app_role}"'])
    assert db.scalar("SELECT count(*) FROM events") == 3
