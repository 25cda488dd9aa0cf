"""The read-side summaries kept beside the log: per thread, per thread actor, per stream and lane.

Every append adds its new events to them inside the append's own transaction (so a crash or a
rollback leaves both or neither, and an idempotent retry that records nothing adds nothing).
Readers then answer "which threads, how many turns, how long is this filtered log" from rows
whose number grows with threads and streams, never from a scan of the events.

The counts are defined on the events alone, so they can always be recomputed (the migration
that created the tables does that once for an existing ledger):

- ``turns``: INTENTs; ``allowed`` / ``denied``: DECISIONs whose payload ``decision`` is ALLOW /
  DENY; ``executed``: EXECUTIONs; ``errors``: EXECUTIONs whose payload ``error`` is an object.
- ``first_index`` / ``last_index`` and the times of those two events.
- the actors of a thread: a set (a row per actor, written once: later events of a known actor
  change no row, so they dirty no page).

Append cost matters here (every turn pays it), hence the single-event fast path in
:meth:`SummaryRows.of` and SQLite statements run on the driver connection (see
:func:`_execute_rows`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from sqlalchemy import Table
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection

from turngate.core.events import Event
from turngate.ledger.schema import NO_TENANT, events, ledger_counts, thread_actors, thread_summary

#: PostgreSQL takes at most 65,535 parameters per statement; larger appends use one per table.
PG_ONE_STATEMENT_MAX_PARAMS = 30_000

_COUNTERS = ("events", "turns", "allowed", "denied", "errors", "executed")
#: Overwritten by a later append (the others are added up).
_REPLACED = ("last_index", "last_at")
_THREAD_COLUMNS = tuple(column.name for column in thread_summary.columns)


def tenant_key(tenant_id: str | None) -> str:
    """The summary tables' tenant key of an event's ``tenant_id``."""
    return NO_TENANT if tenant_id is None else tenant_id


def _counts(event: Event) -> tuple[int, int, int, int, int]:
    """What ``event`` adds to (turns, allowed, denied, errors, executed): the one definition."""
    kind = str(event.kind)
    if kind == "INTENT":
        return 1, 0, 0, 0, 0
    if kind == "DECISION":
        verdict = event.payload.get("decision")
        return 0, int(verdict == "ALLOW"), int(verdict == "DENY"), 0, 0
    if kind == "EXECUTION":
        return 0, 0, 0, int(isinstance(event.payload.get("error"), dict)), 1
    return 0, 0, 0, 0, 0


@dataclass
class ThreadTally:
    """What a run of events adds to one thread's summary row."""

    tenant_key: str
    thread_id: str
    first_index: int
    first_at: str
    last_index: int = -1
    last_at: str = ""
    events: int = 0
    turns: int = 0
    allowed: int = 0
    denied: int = 0
    errors: int = 0
    executed: int = 0

    def add(self, event: Event) -> None:
        self.events += 1
        self.last_index, self.last_at = event.index, event.created_at or ""
        turns, allowed, denied, errors, executed = _counts(event)
        self.turns += turns
        self.allowed += allowed
        self.denied += denied
        self.errors += errors
        self.executed += executed

    def values(self) -> tuple[Any, ...]:
        """The summary row, in ``thread_summary`` column order."""
        return tuple(getattr(self, name) for name in _THREAD_COLUMNS)


def tally(
    recorded: Iterable[Event],
) -> tuple[list[ThreadTally], dict[tuple[str, str, str], None], dict[tuple[str, str, str], int]]:
    """Per thread, per (tenant, thread, actor) and per (tenant, stream, lane): what ``recorded``
    (events in index order) adds to the summaries (the actors: an ordered set)."""
    threads: dict[tuple[str, str], ThreadTally] = {}
    actors: dict[tuple[str, str, str], None] = {}
    streams: dict[tuple[str, str, str], int] = {}
    for event in recorded:
        tenant = tenant_key(event.tenant_id)
        key = (tenant, event.thread_id)
        thread = threads.get(key)
        if thread is None:
            thread = threads[key] = ThreadTally(tenant, event.thread_id, event.index, event.created_at or "")
        thread.add(event)
        actors[(tenant, event.thread_id, event.actor)] = None
        stream_key = (tenant, event.stream_id, event.lane)
        streams[stream_key] = streams.get(stream_key, 0) + 1
    return list(threads.values()), actors, streams


@lru_cache(maxsize=512)
def _insert_sql(table: Table, rows: int, mark: str) -> str:
    """INSERT of ``rows`` rows into every column of ``table``; ``mark`` is the driver's
    positional placeholder (``?`` sqlite3, ``%s`` psycopg)."""
    columns = [column.name for column in table.columns]
    one_row = "(" + ", ".join([mark] * len(columns)) + ")"
    quoted = ", ".join(f'"{name}"' for name in columns)
    return f"INSERT INTO {table.name} ({quoted}) VALUES {', '.join([one_row] * rows)}"


@lru_cache(maxsize=512)
def _upsert_sql(table: Table, rows: int, mark: str) -> str:
    """:func:`_insert_sql` ... ON CONFLICT (the table's key) DO UPDATE: the counters summed, the
    latest event's index and time overwritten; DO NOTHING for a table of keys only (a set: a
    known row is left untouched). Both backends spell it the same way."""
    keys = [column.name for column in table.primary_key.columns]
    adds = [name for name in _COUNTERS if name in table.c]
    updates = [f"{name} = {table.name}.{name} + excluded.{name}" for name in adds]
    updates += [f"{name} = excluded.{name}" for name in _REPLACED if name in table.c]
    action = f"DO UPDATE SET {', '.join(updates)}" if updates else "DO NOTHING"
    return f"{_insert_sql(table, rows, mark)} ON CONFLICT ({', '.join(keys)}) {action}"


def _mark(conn: Connection) -> str:
    return "?" if conn.dialect.name == "sqlite" else "%s"


Row = tuple[Any, ...]


@dataclass(frozen=True)
class SummaryRows:
    """What a run of events adds to each summary table: positional rows, table column order."""

    threads: list[Row]
    actors: list[Row]
    counts: list[Row]

    @classmethod
    def of(cls, recorded: Sequence[Event]) -> SummaryRows:
        if len(recorded) == 1:  # a turn's events are appended one by one: the common case
            return cls.of_one(recorded[0])
        threads, actors, streams = tally(recorded)
        return cls(
            threads=[thread.values() for thread in threads],
            actors=list(actors),
            counts=[(*key, n) for key, n in streams.items()],
        )

    @classmethod
    def of_one(cls, event: Event) -> SummaryRows:
        """:meth:`of` for one event, without the per-thread accumulators (same rows)."""
        tenant = tenant_key(event.tenant_id)
        at = event.created_at or ""
        # thread_summary column order: keys, events, counters, first/last index, first/last time
        thread = (tenant, event.thread_id, 1, *_counts(event), event.index, event.index, at, at)
        return cls(
            threads=[thread],
            actors=[(tenant, event.thread_id, event.actor)],
            counts=[(tenant, event.stream_id, event.lane, 1)],
        )

    def by_table(self) -> tuple[tuple[Table, Sequence[Row]], ...]:
        return ((thread_summary, self.threads), (thread_actors, self.actors), (ledger_counts, self.counts))


def _execute_rows(conn: Connection, sql: str, rows: Sequence[Row]) -> None:
    """``sql`` (one row's statement) for each of ``rows``: one execute, or the driver's
    executemany (a prepared statement reused on SQLite, one pipelined batch on psycopg).

    SQLite: on the driver connection itself (same connection, same transaction), since the
    toolkit's per-statement bookkeeping (~7 us) costs more than SQLite's work for a one-row
    upsert; driver errors are raised as the toolkit's, as every other statement's are.
    """
    if not rows:
        return
    if conn.dialect.name != "sqlite":
        conn.exec_driver_sql(sql, rows[0] if len(rows) == 1 else list(rows))
        return
    driver = conn.connection.driver_connection
    assert driver is not None
    try:
        if len(rows) == 1:
            driver.execute(sql, rows[0])
        else:
            driver.executemany(sql, rows)
    except conn.dialect.loaded_dbapi.Error as exc:
        raise sa_exc.DBAPIError.instance(sql, rows, exc, conn.dialect.loaded_dbapi.Error) from exc


def insert_events(conn: Connection, event_rows: Sequence[Row]) -> None:
    """Only the events, no summaries (``event_rows`` positional, in ``events`` column order)."""
    _execute_rows(conn, _insert_sql(events, 1, _mark(conn)), event_rows)


def write_appended(
    conn: Connection,
    event_rows: Sequence[Row],
    recorded: Sequence[Event],
    known_actors: KnownActors | None = None,
) -> None:
    """Insert an append's new events (``event_rows``: ``recorded`` as positional rows in
    ``events`` column order) and add them to the summaries, in ``conn``'s transaction, in as
    few statements as the backend allows. Actor rows in ``known_actors`` (committed earlier)
    are not written again.

    PostgreSQL: one statement (the event insert and the upserts as data-modifying CTEs ahead of
    the stream count's upsert), so the summaries cost no round trip of their own; an append of thousands
    of events or threads (past ``PG_ONE_STATEMENT_MAX_PARAMS``) takes a statement per table.
    SQLite: a statement per table (in-process calls). Every statement is prebuilt SQL in the
    driver's placeholders, executed as is: the toolkit would otherwise spend longer building a
    statement's cache key than SQLite spends executing it.
    """
    summary_rows = SummaryRows.of(recorded)
    if known_actors is not None:
        summary_rows = known_actors.left_out(summary_rows)
    parts = ((events, event_rows), *summary_rows.by_table())
    if conn.dialect.name == "postgresql":
        # --- PostgreSQL only -------------------------------------------------------------------
        params = sum(len(rows) * len(table.columns) for table, rows in parts)
        if params <= PG_ONE_STATEMENT_MAX_PARAMS:
            shape = tuple(len(rows) for _table, rows in parts)
            values = tuple(value for _table, rows in parts for row in rows for value in row)
            conn.exec_driver_sql(_pg_one_statement(*shape), values)
            return
    mark = _mark(conn)
    _execute_rows(conn, _insert_sql(events, 1, mark), event_rows)
    for table, rows in summary_rows.by_table():
        _execute_rows(conn, _upsert_sql(table, 1, mark), rows)


@lru_cache(maxsize=256)
def _pg_one_statement(new_events: int, threads: int, actors: int, counts: int) -> str:
    """PostgreSQL only: the event insert and the upserts as one statement. Each table is
    touched once and no key repeats within a VALUES list (``tally`` sums per key), as such a
    statement requires; no actor rows (all known): no actors part. Built once per shape (one
    event per append, with or without its actor row, are the common ones)."""
    parts = [
        f"new_events AS ({_insert_sql(events, new_events, '%s')})",
        f"summary_threads AS ({_upsert_sql(thread_summary, threads, '%s')})",
    ]
    if actors:
        parts.append(f"summary_actors AS ({_upsert_sql(thread_actors, actors, '%s')})")
    return f"WITH {', '.join(parts)} {_upsert_sql(ledger_counts, counts, '%s')}"


class KnownActors:
    """Actor rows a store has seen committed, so its appends need not write them again.

    ``thread_actors`` rows are never updated or deleted (a set: see the module doc), so a row
    once committed stays; an unknown key is simply written (``ON CONFLICT DO NOTHING``), as by
    another process or after a restart. Keys are added only after their append commits, and the
    set is emptied when it reaches ``limit`` (a bound on memory, not a correctness matter).
    """

    def __init__(self, limit: int = 4096) -> None:
        self._keys: set[tuple[str, str, str]] = set()
        self._limit = limit

    def left_out(self, rows: SummaryRows) -> SummaryRows:
        """``rows`` without the actor rows already known."""
        if not rows.actors or not self._keys:
            return rows
        unknown = [row for row in rows.actors if row not in self._keys]
        return rows if len(unknown) == len(rows.actors) else replace(rows, actors=unknown)

    def committed(self, recorded: Iterable[Event]) -> None:
        """Remember the actor rows of ``recorded`` (events of a committed append, or found
        already recorded by it)."""
        keys = {(tenant_key(e.tenant_id), e.thread_id, e.actor) for e in recorded}
        if len(self._keys) + len(keys) > self._limit:
            self._keys.clear()
        self._keys.update(keys)
