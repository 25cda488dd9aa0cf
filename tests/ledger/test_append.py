from __future__ import annotations

import itertools
import json
import re
import socket
from pathlib import Path

import pytest
import sqlalchemy

from tests.ledger.helpers import RawDb, draft, raw
from tests.ledger.postgres import PostgresServer, admin_connection
from turngate.core.canonical import canonical_bytes
from turngate.core.events import EventKind, event_digest
from turngate.ledger import (
    LedgerConflictError,
    LedgerError,
    LedgerStore,
    LedgerUnavailableError,
    verify_ledger,
)
from turngate.ledger.engine import (
    PG_WRITE_LOCK_KEY,
    normalize_url,
)


def test_first_event_has_index_zero_and_no_prev(store: LedgerStore) -> None:
    event = store.append(draft("c-0"))
    assert event.index == 0
    assert event.prev_event_digest is None
    assert event.digest == event_digest(draft("c-0"), 0, None)
    assert store.head() == (1, event.digest)


def test_indexes_have_no_gaps_and_equal_position(store: LedgerStore) -> None:
    appended = [store.append(draft(f"c-{i}")) for i in range(25)]
    assert [e.index for e in appended] == list(range(25))
    total, page = store.snapshot(limit=1000)
    assert total == 25
    assert [e.index for e in page] == list(range(25))
    for position, event in enumerate(page):
        assert event.index == position


def test_hash_chain_links_every_event_to_the_previous(store: LedgerStore) -> None:
    appended = [store.append(draft(f"c-{i}", kind)) for i in range(5) for kind in EventKind]
    for previous, current in itertools.pairwise(appended):
        assert current.prev_event_digest == previous.digest
        assert current.digest == event_digest(current, current.index, previous.digest)
    assert verify_ledger(store).ok


def test_get_returns_what_append_returned(store: LedgerStore) -> None:
    event = store.append(draft("c-1", payload={"message": "hi", "n": 1.5, "_obs": {"ms": 3}}))
    assert store.get(0) == event
    assert store.get(1) is None
    assert store.get(-1) is None


def test_payload_is_stored_as_canonical_json_and_created_at_is_utc(store: LedgerStore, db: RawDb) -> None:
    payload = {"z": 1, "a": {"y": [3, 2], "b": "é"}, "_obs": {"latency_ms": 12}}
    store.append(draft("c-1", payload=payload))
    [(stored, created_at)] = db.execute("SELECT payload, created_at FROM events")
    assert stored == canonical_bytes(payload).decode("utf-8")
    assert json.loads(stored) == payload
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", created_at)


def test_retry_returns_the_existing_event(store: LedgerStore) -> None:
    first = store.append(draft("c-1"))
    store.append(draft("c-2"))
    again = store.append(draft("c-1"))
    assert again == first
    assert store.head()[0] == 2


def test_retry_with_different_obs_is_the_same_event(store: LedgerStore) -> None:
    first = store.append(draft("c-1", payload={"message": "x", "_obs": {"attempt": 1}}))
    again = store.append(draft("c-1", payload={"message": "x", "_obs": {"attempt": 2}}))
    assert again == first
    assert again.payload["_obs"] == {"attempt": 1}
    assert store.head()[0] == 1


def test_same_correlation_other_kind_is_a_new_event(store: LedgerStore) -> None:
    intent = store.append(draft("c-1", EventKind.INTENT))
    decision = store.append(draft("c-1", EventKind.DECISION, payload={"decision": "ALLOW"}))
    assert (intent.index, decision.index) == (0, 1)
    assert [e.kind for e in store.by_correlation("c-1")] == [EventKind.INTENT, EventKind.DECISION]


@pytest.mark.parametrize(
    "changed",
    [
        {"payload": {"message": "something else"}},
        {"thread_id": "thread-b"},
        {"turn_id": "another-turn"},
        {"lane": "other_lane"},
        {"stream_id": "other"},
    ],
)
def test_a_different_event_under_the_same_key_is_a_conflict(
    store: LedgerStore, changed: dict[str, object]
) -> None:
    original = store.append(draft("c-1"))
    conflicting = draft("c-1").model_copy(update=changed)
    with pytest.raises(LedgerConflictError) as info:
        store.append(conflicting)
    assert info.value.existing_index == original.index
    assert info.value.correlation_id == "c-1"
    assert store.head() == (1, original.digest)


def test_append_many_is_all_or_nothing(store: LedgerStore) -> None:
    store.append(draft("c-1"))
    with pytest.raises(LedgerConflictError):
        store.append_many([draft("c-2"), draft("c-3"), draft("c-1", payload={"message": "no"})])
    assert store.head()[0] == 1
    events = store.append_many([draft("c-2"), draft("c-1"), draft("c-3"), draft("c-2")])
    assert [e.index for e in events] == [1, 0, 2, 1]
    assert store.head()[0] == 3
    assert store.append_many([]) == []


def test_turn_events_and_by_correlation_are_ordered_by_index(store: LedgerStore) -> None:
    store.append(draft("c-1", EventKind.INTENT, turn_id="t-1"))
    store.append(draft("c-2", EventKind.INTENT, turn_id="t-2"))
    store.append(draft("c-1", EventKind.DECISION, turn_id="t-1", payload={"d": 1}))
    store.append(draft("c-1", EventKind.EXECUTION, turn_id="t-1", payload={"o": 2}))
    assert [e.index for e in store.turn_events("thread-a", "t-1")] == [0, 2, 3]
    assert store.turn_events("thread-b", "t-1") == []
    assert [e.index for e in store.by_correlation("c-1")] == [0, 2, 3]
    assert store.by_correlation("missing") == []


@pytest.mark.backends("sqlite", reason="BEGIN IMMEDIATE; the PostgreSQL twin holds the advisory lock")
def test_writers_take_the_write_lock_up_front(ledger_path: Path, ledger_url: str) -> None:
    store = LedgerStore(ledger_url, busy_timeout_ms=200)
    try:
        store.append(draft("c-0"))
        blocker = raw(ledger_path)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            # Readers are not blocked by a writer (WAL) ...
            assert store.get(0) is not None
            assert store.head()[0] == 1
            # ... writers are, and a timeout is reported as "unavailable", not a crash.
            with pytest.raises(LedgerUnavailableError, match="locked"):
                store.append(draft("c-1"))
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert store.append(draft("c-1")).index == 1
    finally:
        store.close()


@pytest.mark.backends("postgresql")
@pytest.mark.own_database  # advisory locks are per database
def test_writers_wait_for_the_advisory_lock_then_give_up(ledger_url: str) -> None:
    """A writer that cannot get the write lock within busy_timeout_ms is "unavailable"."""
    store = LedgerStore(ledger_url, busy_timeout_ms=200)
    try:
        store.append(draft("c-0"))
        with admin_connection(normalize_url(ledger_url)) as blocker:
            blocker.execute("SELECT pg_advisory_lock(%s)", (PG_WRITE_LOCK_KEY,))
            # Readers do not take the lock ...
            assert store.get(0) is not None
            assert store.head()[0] == 1
            # ... writers do, and lock_timeout (= busy_timeout_ms) turns the wait into an error.
            with pytest.raises(LedgerUnavailableError, match="lock timeout"):
                store.append(draft("c-1"))
            blocker.execute("SELECT pg_advisory_unlock(%s)", (PG_WRITE_LOCK_KEY,))
        assert store.append(draft("c-1")).index == 1
    finally:
        store.close()


def test_unreachable_postgres_server_is_unavailable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(LedgerUnavailableError, match="open of") as info:
            LedgerStore(f"postgresql+psycopg://postgres:s3cret-pw@127.0.0.1:{port}/turngate")
    assert "s3cret-pw" not in str(info.value)
    assert "postgres:***@127.0.0.1" in str(info.value)


def test_missing_postgres_database_is_unavailable(postgres_server: PostgresServer) -> None:
    url = postgres_server.admin_url.set(database="tg_test_does_not_exist")
    with pytest.raises(LedgerUnavailableError, match="does not exist"):
        LedgerStore(url.render_as_string(hide_password=False))


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///x/ledger.sqlite3", "sqlite:///x/ledger.sqlite3"),
        ("postgresql://u:pw@h:5432/db", "postgresql+psycopg://u:pw@h:5432/db"),
        ("postgres://u@h/db", "postgresql+psycopg://u@h/db"),
        ("postgresql+psycopg://u@h/db?sslmode=require", "postgresql+psycopg://u@h/db?sslmode=require"),
    ],
)
def test_urls_are_normalized(url: str, expected: str) -> None:
    assert normalize_url(url).render_as_string(hide_password=False) == expected


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u@h/db", "unsupported ledger backend 'mysql'"),
        ("postgresql+asyncpg://u@h/db", "unsupported PostgreSQL driver 'asyncpg'"),
        ("sqlite+pysqlcipher:///x.db", "unsupported SQLite driver"),
    ],
)
def test_unsupported_urls_are_refused(url: str, message: str) -> None:
    with pytest.raises(LedgerError, match=message):
        LedgerStore(url)


def test_unopenable_database_is_unavailable(tmp_path: Path) -> None:
    target = tmp_path / "a-directory.sqlite3"
    target.mkdir()
    with pytest.raises(LedgerUnavailableError):
        LedgerStore(f"sqlite:///{target}")


def test_a_file_that_is_not_a_database_is_unavailable(tmp_path: Path) -> None:
    target = tmp_path / "garbage.sqlite3"
    target.write_bytes(b"this is not a sqlite database" * 100)
    with pytest.raises(LedgerUnavailableError, match="not a database"):
        LedgerStore(f"sqlite:///{target}")


def test_a_closed_store_refuses_work(ledger_url: str) -> None:
    store = LedgerStore(ledger_url)
    store.close()
    store.close()
    with pytest.raises(LedgerError, match="closed"):
        store.append(draft("c-1"))


def test_in_memory_store_works(tmp_path: Path) -> None:
    with LedgerStore("sqlite://") as store:
        store.append(draft("c-1"))
        store.append(draft("c-2"))
        assert store.head()[0] == 2
        assert verify_ledger(store).ok
        marker = store.change_marker()
        store.append(draft("c-3"))
        assert store.change_marker() != marker


def test_store_has_no_update_or_delete_methods() -> None:
    names = {name for name in dir(LedgerStore) if not name.startswith("_")}
    assert not {n for n in names if any(w in n for w in ("update", "delete", "remove", "set_"))}


@pytest.mark.backends("sqlite", reason="SQLite's BEGIN; PostgreSQL reads run in the driver's transaction")
def test_a_lone_read_statement_sends_no_begin_and_a_write_still_does(store: LedgerStore) -> None:
    sent: list[str] = []
    listen = sqlalchemy.event.listen
    listen(store.engine, "before_cursor_execute", lambda *args: sent.append(str(args[2]).split()[0]))
    store.append(draft("c-1"))
    assert sent[0] == "BEGIN" and len(sent) > 1  # the write: BEGIN IMMEDIATE, then its statements
    sent.clear()
    assert [e.index for e in store.by_correlation("c-1")] == [0]
    assert store.head()[0] == 1
    assert sent == ["SELECT", "SELECT"]
    sent.clear()
    with store.read_connection() as conn:  # several statements: one snapshot, so a BEGIN
        conn.execute(sqlalchemy.text("SELECT 1"))
    assert sent == ["BEGIN", "SELECT"]
