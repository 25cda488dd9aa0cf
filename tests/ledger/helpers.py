"""Helpers for the ledger tests (importable from spawned worker processes)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from turngate.core.events import EventDraft, EventKind
from turngate.ledger import LedgerStore


def draft(
    correlation_id: str,
    kind: EventKind = EventKind.INTENT,
    *,
    thread_id: str = "thread-a",
    turn_id: str | None = None,
    stream_id: str = "default",
    lane: str = "user_chat",
    payload: dict[str, Any] | None = None,
) -> EventDraft:
    return EventDraft(
        kind=kind,
        thread_id=thread_id,
        turn_id=turn_id or correlation_id,
        correlation_id=correlation_id,
        stream_id=stream_id,
        lane=lane,
        payload={"message": f"hello {correlation_id}"} if payload is None else payload,
    )


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def raw(path: Path) -> sqlite3.Connection:
    """A plain sqlite3 connection (autocommit) for tampering with the file behind the store."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 10000")
    return conn


def drop_append_only_triggers(path: Path) -> None:
    with raw(path) as conn:
        conn.execute("DROP TRIGGER events_append_only_update")
        conn.execute("DROP TRIGGER events_append_only_delete")


# ------------------------------------------------------------------ process workers (spawn)


def append_worker(url: str, worker: int, count: int, shared: int) -> list[tuple[str, int]]:
    """Append ``count`` own events plus ``shared`` events every worker also appends."""
    results: list[tuple[str, int]] = []
    store = LedgerStore(url)
    try:
        for i in range(count):
            own = store.append(draft(f"w{worker}-{i}", thread_id=f"thread-{worker}"))
            results.append((own.correlation_id, own.index))
            if i < shared:
                common = store.append(draft(f"shared-{i}", thread_id="thread-shared"))
                results.append((common.correlation_id, common.index))
    finally:
        store.close()
    return results


def open_worker(url: str) -> tuple[int, str | None]:
    store = LedgerStore(url)
    try:
        store.append(draft("opened-by-many"))
        return store.head()
    finally:
        store.close()
