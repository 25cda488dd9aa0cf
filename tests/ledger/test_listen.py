"""change_listener(): readers are woken by appends from other connections and processes."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.ledger.helpers import RawDb, append_worker, draft, process_context
from tests.ledger.postgres import admin_connection
from turngate.ledger import NOTIFY_CHANNEL, LedgerError, LedgerStore, LedgerUnavailableError
from turngate.ledger.engine import (
    normalize_url,
)
from turngate.ledger.listen import PollingChangeListener, PostgresChangeListener

# NOTIFY channels are per database: a database of its own keeps other tests' appends out.
pytestmark = pytest.mark.own_database


@pytest.fixture
def writer(ledger_url: str, store: LedgerStore) -> Iterator[LedgerStore]:
    """A second store on the same ledger (its own connections), opened after ``store`` migrated."""
    other = LedgerStore(ledger_url)
    try:
        yield other
    finally:
        other.close()


def _append_later(
    store: LedgerStore, correlation_id: str, delay_s: float
) -> tuple[threading.Thread, list[float]]:
    """Append from a thread after ``delay_s``; the list receives the time append() returned."""
    committed: list[float] = []

    def run() -> None:
        time.sleep(delay_s)
        store.append(draft(correlation_id))
        committed.append(time.perf_counter())

    thread = threading.Thread(target=run)
    thread.start()
    return thread, committed


async def test_first_wait_reports_a_change_then_times_out(store: LedgerStore) -> None:
    async with store.change_listener() as listener:
        assert await listener.wait(5)  # listening from now on: re-read what exists
        started = time.perf_counter()
        assert not await listener.wait(0.1)
        assert 0.09 < time.perf_counter() - started < 10  # waited its 0.1 s; then no hang
        assert not await listener.wait(0)


async def test_wakes_on_each_append_from_another_connection(store: LedgerStore, writer: LedgerStore) -> None:
    """Each append wakes the waiting reader, and the reader then sees it (how soon is measured by
    bench/ledger_signals.py)."""
    async with store.change_listener() as listener:
        assert await listener.wait(5)
        for round_ in range(5):
            thread, committed = _append_later(writer, f"c-{round_}", delay_s=0.05)
            assert await listener.wait(5)
            await asyncio.to_thread(thread.join)
            assert committed and store.head()[0] == round_ + 1


async def test_wakes_on_an_append_from_another_process(store: LedgerStore, ledger_url: str) -> None:
    context = process_context()
    async with store.change_listener() as listener:
        assert await listener.wait(5)
        process = context.Process(target=append_worker, args=(ledger_url, 7, 1, 0))
        process.start()
        try:
            assert await listener.wait(60)
            assert [e.correlation_id for e in store.since(-1)] == ["w7-0"]
        finally:
            await asyncio.to_thread(process.join, 60)
    assert process.exitcode == 0


async def test_changes_while_nobody_waits_are_coalesced_not_lost(
    store: LedgerStore, writer: LedgerStore
) -> None:
    async with store.change_listener() as listener:
        assert await listener.wait(5)
        for i in range(10):
            await asyncio.to_thread(writer.append, draft(f"c-{i}"))
        await asyncio.sleep(0.1)  # every notification has arrived
        assert await listener.wait(0)  # at once: the changes happened before the call
        assert not await listener.wait(0.1)  # ... and were reported once
        assert store.head()[0] == 10


async def test_idempotent_retries_and_reads_do_not_wake(store: LedgerStore, writer: LedgerStore) -> None:
    writer.append(draft("c-1"))
    async with store.change_listener() as listener:
        assert await listener.wait(5)
        await asyncio.to_thread(writer.append, draft("c-1"))  # a retry: nothing is written
        await asyncio.to_thread(writer.snapshot)
        assert not await listener.wait(0.2)


async def test_a_closed_listener_refuses_to_wait(store: LedgerStore) -> None:
    listener = store.change_listener()
    assert await listener.wait(5)
    await listener.aclose()
    await listener.aclose()
    with pytest.raises(LedgerError, match="closed"):
        await listener.wait(0)


# ------------------------------------------------------------------ PostgreSQL: LISTEN/NOTIFY


@pytest.mark.backends("postgresql")
async def test_each_insert_statement_notifies_its_highest_index_on_commit(
    store: LedgerStore, ledger_url: str, db: RawDb
) -> None:
    with psycopg.connect(ledger_url.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        store.append(draft("c-0"))
        store.append_many([draft("c-1"), draft("c-2"), draft("c-3")])
        store.append(draft("c-1"))  # a retry writes nothing, so it notifies nothing
        # Any writer notifies (it is a trigger), once per INSERT statement with the statement's
        # highest index, and only on commit: a rolled-back insert is silent. The store writes an
        # append's events in one statement, so the three-event append notifies once.
        copy_rows = (
            'INSERT INTO events SELECT "index" + {shift}, kind, thread_id, turn_id, parent_turn_id, '
            "'raw-' || \"index\", stream_id, lane, actor, intent_type, payload, digest, "
            'prev_event_digest, created_at FROM events WHERE "index" IN (1, 2)'
        )
        with pytest.raises(RuntimeError), db.engine.begin() as raw_conn:
            raw_conn.exec_driver_sql(copy_rows.format(shift=50))
            raise RuntimeError("roll back")
        db.execute(copy_rows.format(shift=100))
        payloads = [n.payload for n in conn.notifies(timeout=0.5)]
    assert payloads == ["0", "3", "102"]


@pytest.mark.backends("postgresql")
async def test_the_listener_reconnects_and_reports_a_change(store: LedgerStore, writer: LedgerStore) -> None:
    async with store.change_listener() as listener:
        assert isinstance(listener, PostgresChangeListener)
        assert await listener.wait(5)
        first_pid = listener.backend_pid
        assert first_pid is not None
        with admin_connection(normalize_url(store.engine.url)) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (first_pid,))
        # It cannot know what was committed while it was gone: the reconnect is a change.
        assert await listener.wait(10)
        assert listener.backend_pid not in (None, first_pid)
        assert not await listener.wait(0.1)
        thread, _ = _append_later(writer, "after-reconnect", delay_s=0.05)
        assert await listener.wait(5)
        await asyncio.to_thread(thread.join)


async def test_postgres_listener_survives_an_unreachable_server() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        listener = PostgresChangeListener(
            {"host": "127.0.0.1", "port": port, "dbname": "x", "user": "x", "connect_timeout": 2}
        )
        try:
            assert not await listener.wait(0.3)  # logged, retried in the background, never raised
            assert listener.backend_pid is None
        finally:
            await listener.aclose()


# ------------------------------------------------------------------ the polling listener (SQLite)


async def test_polling_listener_reports_outages_as_a_change_once_it_can_read_again() -> None:
    values: list[int | Exception] = [1, LedgerUnavailableError("locked"), 1, 1]

    def marker() -> int:
        value = values.pop(0) if len(values) > 1 else values[0]
        if isinstance(value, Exception):
            raise value
        return value

    listener = PollingChangeListener(marker, poll_interval_s=0.001)
    assert await listener.wait(1)  # first call
    # Unavailable (logged, not raised), then readable with the same marker: reported as a change,
    # because commits may have happened in between.
    assert await listener.wait(5)
    assert not await listener.wait(0.02)
    with pytest.raises(ValueError, match="positive"):
        PollingChangeListener(marker, poll_interval_s=0)


async def test_polling_listener_hops_to_a_thread_once_per_wait_not_per_poll() -> None:
    reads: list[int] = []

    def marker() -> int:
        reads.append(1)
        return 7  # never changes after the first read

    loop = asyncio.get_running_loop()
    hops: list[object] = []
    run_in_executor = loop.run_in_executor

    def counting(executor: Any, func: Any, *args: Any) -> Any:
        hops.append(func)
        return run_in_executor(executor, func, *args)

    listener = PollingChangeListener(marker, poll_interval_s=0.002)
    try:
        assert await listener.wait(1)
        loop.run_in_executor = counting  # type: ignore[method-assign]
        try:
            assert not await listener.wait(0.2)
        finally:
            del loop.run_in_executor  # type: ignore[method-assign]
    finally:
        await listener.aclose()
    assert len(reads) > 5  # it polled all along ...
    assert len(hops) == 1  # ... from one hop to its thread (and one wake of the loop when done)


async def test_a_cancelled_polling_wait_loses_no_change() -> None:
    values = [1]
    listener = PollingChangeListener(lambda: values[0], poll_interval_s=0.001)
    try:
        assert await listener.wait(1)
        values[0] = 2
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(listener.wait(5), 0)  # cancelled before it could report
        assert await listener.wait(1)  # the change is still reported
        assert not await listener.wait(0.01)
    finally:
        await listener.aclose()
