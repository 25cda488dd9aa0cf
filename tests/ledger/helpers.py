"""Helpers for the ledger tests (importable from spawned worker processes)."""

from __future__ import annotations

import multiprocessing
import sqlite3
from collections.abc import Mapping, Sequence
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from turngate.core.events import EventDraft, EventKind
from turngate.ledger import LedgerStore
from turngate.ledger.engine import (
    normalize_url,
)


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


class RawDb:
    """The database behind a store, reached without the store: to inspect it and to tamper with it.

    Statements are SQLAlchemy ``text()`` with ``:name`` parameters, the same on both backends;
    each call to :meth:`execute` is one transaction.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.backend = make_url(url).get_backend_name()
        self.engine = create_engine(normalize_url(url), poolclass=NullPool)

    def execute(self, statement: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        with self.engine.begin() as conn:
            result = conn.execute(text(statement), dict(params or {}))
            return [tuple(row) for row in result] if result.returns_rows else []

    def execute_all(self, statements: Sequence[str]) -> None:
        """Several statements in one transaction."""
        with self.engine.begin() as conn:
            for statement in statements:
                conn.execute(text(statement))

    def scalar(self, statement: str, params: Mapping[str, Any] | None = None) -> Any:
        rows = self.execute(statement, params)
        return rows[0][0] if rows else None

    def dump(self) -> list[tuple[Any, ...]]:
        return self.execute('SELECT * FROM events ORDER BY "index"')

    def drop_append_only_triggers(self) -> None:
        if self.backend == "sqlite":
            self.execute_all(
                ["DROP TRIGGER events_append_only_update", "DROP TRIGGER events_append_only_delete"]
            )
        else:
            self.execute_all(
                [
                    "DROP TRIGGER events_append_only_update_delete ON events",
                    "DROP TRIGGER events_append_only_truncate ON events",
                ]
            )

    def close(self) -> None:
        self.engine.dispose()


# ------------------------------------------------------------------ process workers


def process_context() -> BaseContext:
    """Where the multi-process tests start their processes: fresh interpreters, started fast.

    forkserver (Linux): one clean server process imports this module once, then forks a child per
    worker, so no child inherits the test process's threads or database connections, and none
    pays the import time again. Elsewhere: spawn.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["tests.ledger.helpers"])
    return context


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
