"""The embedded token bus: one SQLite file (``stream.sqlite3``, never the ledger), shared by the
worker (writes) and the API (reads), no extra server.

Writes: the publisher batches entries (at most one transaction per ``flush_interval_s``, plus one
on ``finish``), so 200 tokens are a few dozen commits, not 200. ``synchronous=NORMAL`` in WAL
mode: a power loss may drop the last commits, which is fine for an ephemeral stream (the
EXECUTION event in the ledger is the record).

Reads: one poller per bus object, running only while somebody is subscribed, checks
``PRAGMA data_version`` every ``poll_interval_s``; on a change it reads the new rows once and
hands them to the subscribers of those correlation ids (one query per change, not one per
subscriber). Catch-up reads (``read`` / the start of ``subscribe``) are one indexed query.

Expiry: each stream has an ``expires_at`` refreshed on every write (``ttl_s`` after the last
one); expired streams are invisible at once and deleted by the publisher every ``gc_interval_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from turngate.streaming.base import DEFAULT_TTL_S, Batcher, BusBase, Entry, StreamPosition

log = logging.getLogger(__name__)

DEFAULT_FLUSH_INTERVAL_S = 0.005
DEFAULT_POLL_INTERVAL_S = 0.003
DEFAULT_GC_INTERVAL_S = 60.0
BUSY_TIMEOUT_S = 10.0
DISPATCH_BATCH = 2000

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS stream_entries (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        correlation_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        text TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS stream_entries_by_correlation ON stream_entries (correlation_id, id)",
    """CREATE TABLE IF NOT EXISTS streams (
        correlation_id TEXT PRIMARY KEY,
        expires_at REAL NOT NULL
    ) WITHOUT ROWID""",
)
_INSERT = "INSERT INTO stream_entries (correlation_id, kind, attempt, seq, text) VALUES (?, ?, ?, ?, ?)"
_DROP_EXPIRED_ONE = (
    "DELETE FROM stream_entries WHERE correlation_id = ? AND EXISTS "
    "(SELECT 1 FROM streams WHERE correlation_id = ? AND expires_at <= ?)"
)
_TOUCH = (
    "INSERT INTO streams (correlation_id, expires_at) VALUES (?, ?) "
    "ON CONFLICT (correlation_id) DO UPDATE SET expires_at = excluded.expires_at"
)
_RANGE = (
    "SELECT e.id, e.correlation_id, e.kind, e.attempt, e.seq, e.text FROM stream_entries e "
    "JOIN streams s ON s.correlation_id = e.correlation_id "
    "WHERE e.correlation_id = ? AND e.id > ? AND s.expires_at > ? ORDER BY e.id"
)
_SINCE = (
    "SELECT id, correlation_id, kind, attempt, seq, text FROM stream_entries WHERE id > ? ORDER BY id LIMIT ?"
)
_GC_ENTRIES = """DELETE FROM stream_entries
    WHERE correlation_id IN (SELECT correlation_id FROM streams WHERE expires_at <= ?)"""
_GC_STREAMS = "DELETE FROM streams WHERE expires_at <= ?"


def _entry(row: tuple[Any, ...]) -> Entry:
    return Entry(id=str(row[0]), correlation_id=row[1], kind=row[2], attempt=row[3], seq=row[4], text=row[5])


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_S)
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    return conn


def _enable_wal(conn: sqlite3.Connection) -> None:
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            if str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower() == "wal":
                return
        except sqlite3.OperationalError as exc:  # another process holds a lock: retry
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise sqlite3.OperationalError(f"could not switch {conn} to WAL mode")
        time.sleep(0.01)


class SqliteTokenBus(BusBase):
    def __init__(
        self,
        path: str | Path,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        gc_interval_s: float = DEFAULT_GC_INTERVAL_S,
    ) -> None:
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._ttl = ttl_s
        self._poll = poll_interval_s
        self._gc_interval = gc_interval_s
        self._last_gc = time.time()
        init = _connect(self.path)
        try:
            _enable_wal(init)
            for statement in _SCHEMA:
                init.execute(statement)
        finally:
            init.close()
        self._write_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._poll_lock = threading.Lock()
        self._writer: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        self._poller_conn: sqlite3.Connection | None = None
        self._batcher = Batcher(self._write_batch, interval_s=flush_interval_s)
        # subscriber side
        self._feeds: dict[str, set[_SqliteFeed]] = {}
        self._interest = 0
        self._cursor = 0
        self._prime_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._poller: asyncio.Task[None] | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"SqliteTokenBus({self.path.as_posix()!r})"

    # ----------------------------------------------------------------- publisher

    async def start(self, correlation_id: str, attempt: int) -> None:
        self._batcher.add(Entry(correlation_id, "start", attempt))

    async def publish(self, correlation_id: str, attempt: int, seq: int, text: str) -> None:
        self._batcher.add(Entry(correlation_id, "token", attempt, seq, text))

    async def finish(self, correlation_id: str, attempt: int, *, error: str | None = None) -> None:
        if error is None:
            self._batcher.add(Entry(correlation_id, "finish", attempt))
        else:
            self._batcher.add(Entry(correlation_id, "error", attempt, 0, error))
        await self._batcher.flush()

    async def _write_batch(self, batch: list[Entry]) -> None:
        await asyncio.to_thread(self._write_batch_sync, batch)
        self._wake.set()  # local subscribers need not wait for the next poll

    def _write_batch_sync(self, batch: list[Entry]) -> None:
        now = time.time()
        touched = list(dict.fromkeys(e.correlation_id for e in batch))
        with self._write_lock:
            if self._writer is None:
                self._writer = _connect(self.path)
                self._writer.execute("PRAGMA synchronous = NORMAL")
            conn = self._writer
            conn.execute("BEGIN IMMEDIATE")
            try:
                for cid in touched:  # an expired stream written again starts empty
                    conn.execute(_DROP_EXPIRED_ONE, (cid, cid, now))
                conn.executemany(
                    _INSERT, [(e.correlation_id, e.kind, e.attempt, e.seq, e.text) for e in batch]
                )
                conn.executemany(_TOUCH, [(cid, now + self._ttl) for cid in touched])
                if now - self._last_gc >= self._gc_interval:
                    self._last_gc = now
                    self._gc(conn, now)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    @staticmethod
    def _gc(conn: sqlite3.Connection, now: float) -> int:
        removed = conn.execute(_GC_ENTRIES, (now,)).rowcount
        conn.execute(_GC_STREAMS, (now,))
        return int(removed)

    async def purge_expired(self) -> int:
        """Delete expired streams now; returns the number of entries removed."""

        def purge() -> int:
            with self._write_lock:
                conn = self._writer = self._writer or _connect(self.path)
                conn.execute("BEGIN IMMEDIATE")
                try:
                    removed = self._gc(conn, time.time())
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                return removed

        return await asyncio.to_thread(purge)

    # ----------------------------------------------------------------- subscriber primitives

    def position(self, raw: str | None) -> StreamPosition | None:
        if raw is None or not raw.strip().isdigit():
            return None
        return str(int(raw))

    async def _range(self, correlation_id: str, after: str | None) -> list[Entry]:
        def query() -> list[Entry]:
            with self._read_lock:
                if self._reader is None:
                    self._reader = _connect(self.path)
                rows = self._reader.execute(_RANGE, (correlation_id, int(after or 0), time.time())).fetchall()
            return [_entry(row) for row in rows]

        return await asyncio.to_thread(query)

    @contextlib.asynccontextmanager
    async def _feed(self, correlation_id: str) -> AsyncIterator[_SqliteFeed]:
        feed = _SqliteFeed()
        async with self._prime_lock:
            if self._interest == 0:
                # Rows up to here are caught up by the subscriber's own read; the poller takes over after.
                self._cursor = await asyncio.to_thread(self._max_id)
            self._interest += 1
            self._feeds.setdefault(correlation_id, set()).add(feed)
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll_forever(), name="token-bus-poller")
        self._wake.set()
        try:
            yield feed
        finally:
            self._interest -= 1
            feeds = self._feeds.get(correlation_id)
            if feeds is not None:
                feeds.discard(feed)
                if not feeds:
                    del self._feeds[correlation_id]

    def _max_id(self) -> int:
        with self._poller_connection() as conn:
            row = conn.execute("SELECT max(id) FROM stream_entries").fetchone()
        return int(row[0] or 0)

    @contextlib.contextmanager
    def _poller_connection(self) -> Iterator[sqlite3.Connection]:
        # Never writes: its data_version moves on every commit made through another connection.
        with self._poll_lock:
            if self._poller_conn is None:
                self._poller_conn = _connect(self.path)
            yield self._poller_conn

    def _check(self, cursor: int, version: int | None) -> tuple[int, list[Entry]]:
        """(data_version, new rows after ``cursor``); no rows when the version did not move."""
        with self._poller_connection() as conn:
            # data_version moves whenever another connection (this process or another) commits.
            current = int(conn.execute("PRAGMA data_version").fetchone()[0])
            if current == version:
                return current, []
            rows = conn.execute(_SINCE, (cursor, DISPATCH_BATCH)).fetchall()
        return current, [_entry(row) for row in rows]

    async def _poll_forever(self) -> None:
        version: int | None = None
        while not self._closed:
            if self._interest == 0:
                self._wake.clear()
                await self._wake.wait()
                continue
            if not self._wake.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self._poll)
            self._wake.clear()
            try:
                version, entries = await asyncio.to_thread(self._check, self._cursor, version)
                while entries:
                    self._cursor = max(self._cursor, int(entries[-1].id))
                    for entry in entries:
                        for feed in self._feeds.get(entry.correlation_id, ()):
                            feed.push(entry)
                    if len(entries) < DISPATCH_BATCH:
                        break
                    _, entries = await asyncio.to_thread(self._check, self._cursor, None)
            except sqlite3.Error:  # a transient error must not kill the poller
                log.exception("token bus poll failed; retrying")
                version = None
                await asyncio.sleep(0.5)

    # ----------------------------------------------------------------- lifecycle

    async def aclose(self) -> None:
        await self._batcher.aclose()
        self._closed = True
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        for lock, name in (
            (self._write_lock, "_writer"),
            (self._read_lock, "_reader"),
            (self._poll_lock, "_poller_conn"),
        ):
            with lock:
                conn = getattr(self, name)
                if conn is not None:
                    conn.close()
                    setattr(self, name, None)


class _SqliteFeed:
    def __init__(self) -> None:
        self._entries: list[Entry] = []
        self._ready = asyncio.Event()

    def push(self, entry: Entry) -> None:
        self._entries.append(entry)
        self._ready.set()

    async def next_batch(self, cursor: str | None) -> list[Entry]:
        floor = int(cursor or 0)
        while True:
            await self._ready.wait()
            self._ready.clear()
            batch = [e for e in self._entries if int(e.id) > floor]  # the catch-up read may overlap
            self._entries.clear()
            if batch:
                return batch
