"""The read summaries (thread summary, thread actors, stream counts) equal a full recomputation
from the events: after mixed appends, retries and conflicts, after a writer SIGKILLed mid-append,
and after the migration that backfills an existing ledger."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection

from tests.ledger.helpers import draft
from tests.ledger.summaries import all_events, mixed_ledger, recompute, stored, turn_drafts
from turngate.core.events import EventKind
from turngate.ledger import LedgerConflictError, LedgerStore
from turngate.ledger.engine import (
    migrate,
    migration_lock,
)

ROOT = Path(__file__).resolve().parents[2]


def test_an_empty_ledger_has_empty_summaries(store: LedgerStore) -> None:
    assert stored(store) == {"threads": {}, "actors": set(), "counts": {}, "search": set()}


def test_summaries_equal_a_recomputation_after_mixed_appends(store: LedgerStore) -> None:
    mixed_ledger(store)
    expected = recompute(store)
    assert stored(store) == expected
    # every case is present: tenants and none, each outcome, several actors per thread
    threads = expected["threads"]
    assert {tenant for tenant, _ in threads} == {"", "acme", "globex"}
    assert all(sum(row[name] for row in threads.values()) > 0 for name in ("allowed", "denied", "errors"))
    assert sum(row["turns"] - row["allowed"] - row["denied"] for row in threads.values()) > 0
    assert len({(t, th) for t, th, _ in expected["actors"]}) < len(expected["actors"])


def test_a_retried_append_adds_nothing(store: LedgerStore) -> None:
    turn = turn_drafts(0, thread="t-1", tenant="acme")
    store.append_many(turn)
    before = stored(store)
    store.append_many(turn)  # the whole turn again
    store.append(turn[1])  # one event again
    assert stored(store) == before == recompute(store)
    assert before["threads"][("acme", "t-1")]["events"] == 3


def test_a_refused_append_adds_nothing(store: LedgerStore) -> None:
    store.append(draft("c-1"))
    before = stored(store)
    changed = draft("c-1", payload={"message": "something else"})
    with pytest.raises(LedgerConflictError):
        store.append_many([draft("c-2"), changed])  # all or nothing: c-2 is not recorded either
    assert stored(store) == before == recompute(store)


def test_counters_move_one_by_one(store: LedgerStore) -> None:
    """Each kind of event moves exactly its own counters (a mutation of any rule fails here)."""
    key = ("", "t-1")
    store.append_many(turn_drafts(0, thread="t-1", outcome="pending"))
    first = stored(store)["threads"][key]
    assert (first["events"], first["turns"], first["allowed"], first["denied"]) == (1, 1, 0, 0)
    assert (first["first_index"], first["last_index"]) == (0, 0)
    store.append_many(turn_drafts(0, thread="t-1", outcome="error")[1:])
    row = stored(store)["threads"][key]
    assert (row["events"], row["turns"], row["allowed"], row["denied"], row["executed"], row["errors"]) == (
        3,
        1,
        1,
        0,
        1,
        1,
    )
    assert (row["first_index"], row["last_index"], row["first_at"]) == (0, 2, first["first_at"])
    assert row["last_at"] >= row["first_at"]
    store.append_many(turn_drafts(1, thread="t-1", outcome="DENY"))
    row = stored(store)["threads"][key]
    assert (row["turns"], row["allowed"], row["denied"], row["executed"], row["errors"]) == (2, 1, 1, 1, 1)
    store.append_many(turn_drafts(2, thread="t-1", outcome="ALLOW"))  # its error is a string
    row = stored(store)["threads"][key]
    assert (row["executed"], row["errors"]) == (2, 1)


_WRITER = """
import sys
from tests.ledger.summaries import turn_drafts
from turngate.ledger import LedgerStore

store = LedgerStore(sys.argv[1])
n = 0
while True:
    # one turn per transaction and one turn's INTENT with the previous turn's other events
    store.append_many(turn_drafts(n, thread=f"t-{n % 5}", tenant=("acme", None)[n % 2], outcome="ALLOW"))
    n += 1
    if n == 10:
        print("appending", flush=True)
"""


def _sigkill_a_writer(ledger_url: str, after_s: float) -> None:
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, ledger_url],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "appending"
        time.sleep(after_s)
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
    assert writer.returncode == -signal.SIGKILL


def test_a_writer_sigkilled_mid_append_leaves_summaries_exact(ledger_url: str) -> None:
    """Killed at arbitrary points of its appends (several times), then a retry of the same turns:
    the summaries always equal the recomputation, because they commit with the events or not at all."""
    LedgerStore(ledger_url).close()  # migrate first: the writers only append
    for after_s in (0.05, 0.31, 0.17):
        _sigkill_a_writer(ledger_url, after_s)
        with LedgerStore(ledger_url) as store:
            assert stored(store) == recompute(store)
            assert stored(store)["threads"]
    with LedgerStore(ledger_url) as store:
        length = store.head()[0]
        # the killed writer's next turns, retried: what was recorded is returned, the rest added
        for n in range(length // 3 + 3):
            store.append_many(
                turn_drafts(n, thread=f"t-{n % 5}", tenant=("acme", None)[n % 2], outcome="ALLOW")
            )
        assert stored(store) == recompute(store)
        assert sum(row["turns"] for row in stored(store)["threads"].values()) == length // 3 + 3


def _alembic(store: LedgerStore, action: str, revision: str) -> None:
    with store.engine.connect() as conn, migration_lock(conn):
        migrate(conn, revision, downgrade=action == "downgrade")


def test_the_migration_backfills_an_existing_ledger(ledger_url: str) -> None:
    """A ledger recorded before the summaries existed (downgraded to the revision before them)
    gets them on the next open, equal to the recomputation; appends then keep them exact."""
    with LedgerStore(ledger_url) as store:
        mixed_ledger(store)
        expected = recompute(store)
        _alembic(store, "downgrade", "0005")
    with LedgerStore(ledger_url) as store:  # migrates to head: creates and backfills
        assert stored(store) == expected
        store.append_many(turn_drafts(99, thread="t-new", tenant="acme", outcome="error"))
        store.append_many(turn_drafts(98, thread="t-1", tenant="acme", outcome="DENY"))
        assert stored(store) == recompute(store)


def test_actors_are_a_set_and_the_downgrade_recounts_them(ledger_url: str) -> None:
    """An actor's later events in a thread write no actor row; going back to the schema with a
    per-actor count recomputes that count from the events, and upgrading again drops it."""
    with LedgerStore(ledger_url) as store:
        mixed_ledger(store)
        with store.read_connection() as conn:
            assert set(conn.execute(text("SELECT * FROM thread_actors")).keys()) == {
                "tenant_key",
                "thread_id",
                "actor",
            }
        expected = {
            key: sum(1 for e in all_events(store) if (e.tenant_id or "", e.thread_id, e.actor) == key)
            for key in recompute(store)["actors"]
        }
        _alembic(store, "downgrade", "0008")
        with store.read_connection() as conn:
            rows = conn.execute(text("SELECT tenant_key, thread_id, actor, events FROM thread_actors"))
            assert {(t, th, a): n for t, th, a, n in rows} == expected
        _alembic(store, "upgrade", "head")
        assert stored(store) == recompute(store)


def test_the_backfill_reads_the_payload_like_the_store(ledger_url: str) -> None:
    """Payload shapes at the edges of each rule: a nested verdict, an error that is a string, an
    empty error object, a decision that is neither ALLOW nor DENY."""
    payloads = [
        (EventKind.DECISION, {"decision": "DENY", "nested": {"decision": "ALLOW"}}),
        (EventKind.DECISION, {"decision": "MAYBE"}),
        (EventKind.DECISION, {"result": {"decision": "ALLOW"}}),
        (EventKind.EXECUTION, {"error": {}}),
        (EventKind.EXECUTION, {"error": "timeout"}),
        (EventKind.EXECUTION, {"error": None, "output_text": '"error":{'}),
    ]
    with LedgerStore(ledger_url) as store:
        for n, (kind, payload) in enumerate(payloads):
            store.append(draft(f"c-{n}", kind, payload=payload))
        live = stored(store)
        _alembic(store, "downgrade", "0005")
    with LedgerStore(ledger_url) as store:
        assert stored(store) == live == recompute(store)
        row = live["threads"][("", "thread-a")]
        assert (row["allowed"], row["denied"], row["errors"], row["executed"]) == (0, 1, 1, 3)


def test_a_large_append_takes_the_many_statement_path(
    store: LedgerStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL writes an append's events and summaries in one statement up to a parameter
    budget, and a statement per table past it (SQLite always the latter, on the driver
    connection: traced there): same result."""
    from sqlalchemy import event

    from turngate.ledger import summary

    writes: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if statement.startswith(("INSERT", "WITH")):
            writes.append(statement.split()[0])

    def trace_sqlite(conn: Connection) -> None:  # each write transaction's driver connection
        conn.connection.driver_connection.set_trace_callback(count_sqlite)

    def count_sqlite(statement: str) -> None:  # executemany traces each row: one per table
        if statement.startswith("INSERT") and statement.split()[2] not in tables:
            tables.append(statement.split()[2])
            writes.append("INSERT")

    tables: list[str] = []
    store.append_many([d for n in range(6) for d in turn_drafts(n, thread=f"t-{n}", tenant="acme")])
    event.listen(store.engine, "before_cursor_execute", count)
    if store.dialect == "sqlite":
        event.listen(store.engine, "begin", trace_sqlite)
    one_event_params = 15 + 12 + 3 + 4  # the event, its thread, actor and stream rows
    for budget in (one_event_params - 1, one_event_params, one_event_params + 1):
        monkeypatch.setattr(summary, "PG_ONE_STATEMENT_MAX_PARAMS", budget)
        writes.clear()
        tables.clear()
        # a new actor each time: its row is written (a known one is skipped)
        store.append_many(
            turn_drafts(budget, thread="t-9", tenant="acme", actor=f"a-{budget}", outcome="pending")
        )
        one_statement = store.dialect == "postgresql" and budget >= one_event_params
        assert writes == (["WITH"] if one_statement else ["INSERT"] * 4), budget
        if store.dialect == "sqlite":
            assert tables == ["events", "thread_summary", "thread_actors", "ledger_counts"]
        assert stored(store) == recompute(store)


def test_a_failing_summary_write_fails_the_whole_append(tmp_path: Path) -> None:
    """SQLite writes the summaries on the driver connection; a driver error there surfaces as
    every other statement's does (the store's conflict retry, then ``LedgerError``), and the
    append's event is rolled back with it."""
    import sqlite3

    from turngate.ledger import LedgerError

    path = tmp_path / "ledger.db"
    with LedgerStore(f"sqlite:///{path}") as store:
        store.append(draft("c-1"))
        before = stored(store)
    with sqlite3.connect(path) as raw:  # a constraint the summary upsert trips
        raw.execute(
            "CREATE TRIGGER refuse_new_thread BEFORE INSERT ON thread_summary "
            "BEGIN SELECT RAISE(ABORT, 'summary refused'); END"
        )
    with LedgerStore(f"sqlite:///{path}") as store:
        with pytest.raises(LedgerError, match="summary refused"):
            store.append(draft("c-2"))
        assert store.head()[0] == 1
        assert stored(store) == before == recompute(store)


def test_an_actor_row_rolled_back_is_written_again(tmp_path: Path) -> None:
    """The store skips actor rows it saw committed; one whose append rolled back (here the
    stream count refuses a new stream, after the actor row was written) is not one of them: the
    next append of that actor in that thread writes it."""
    import sqlite3

    from turngate.ledger import LedgerError

    path = tmp_path / "ledger.db"
    with LedgerStore(f"sqlite:///{path}") as store:
        store.append(draft("c-1"))  # thread-a, actor "user", stream "default"
        with sqlite3.connect(path) as raw:
            raw.execute(
                "CREATE TRIGGER refuse_new_stream BEFORE INSERT ON ledger_counts "
                "BEGIN SELECT RAISE(ABORT, 'stream refused'); END"
            )
        new_actor = draft("c-2", stream_id="audit").model_copy(update={"actor": "auditor"})
        with pytest.raises(LedgerError, match="stream refused"):
            store.append(new_actor)
        assert stored(store) == recompute(store)
        with sqlite3.connect(path) as raw:
            raw.execute("DROP TRIGGER refuse_new_stream")
        store.append(new_actor)
        store.append(draft("c-3").model_copy(update={"actor": "auditor"}))  # known now: skipped
        assert ("", "thread-a", "auditor") in stored(store)["actors"]
        assert stored(store) == recompute(store)
