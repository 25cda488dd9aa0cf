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
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from sqlalchemy import Insert, Table, TextClause, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from turngate.core.events import Event
from turngate.ledger.schema import NO_TENANT, ledger_counts, thread_actors, thread_summary

#: PostgreSQL takes at most 65,535 parameters per statement; larger appends use three statements.
PG_ONE_STATEMENT_MAX_PARAMS = 30_000

_COUNTERS = ("events", "turns", "allowed", "denied", "errors", "executed")


def tenant_key(tenant_id: str | None) -> str:
    """The summary tables' tenant key of an event's ``tenant_id``."""
    return NO_TENANT if tenant_id is None else tenant_id


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
        kind = str(event.kind)
        if kind == "INTENT":
            self.turns += 1
        elif kind == "DECISION":
            verdict = event.payload.get("decision")
            self.allowed += verdict == "ALLOW"
            self.denied += verdict == "DENY"
        elif kind == "EXECUTION":
            self.executed += 1
            self.errors += isinstance(event.payload.get("error"), dict)

    def row(self) -> dict[str, Any]:
        return {
            "tenant_key": self.tenant_key,
            "thread_id": self.thread_id,
            "first_index": self.first_index,
            "first_at": self.first_at,
            "last_index": self.last_index,
            "last_at": self.last_at,
            **{name: getattr(self, name) for name in _COUNTERS},
        }


def tally(
    recorded: Iterable[Event],
) -> tuple[list[ThreadTally], dict[tuple[str, str, str], int], dict[tuple[str, str, str], int]]:
    """Per thread, per (tenant, thread, actor) and per (tenant, stream, lane): what ``recorded``
    (events in index order) adds to the summaries."""
    threads: dict[tuple[str, str], ThreadTally] = {}
    actors: dict[tuple[str, str, str], int] = {}
    streams: dict[tuple[str, str, str], int] = {}
    for event in recorded:
        tenant = tenant_key(event.tenant_id)
        key = (tenant, event.thread_id)
        thread = threads.get(key)
        if thread is None:
            thread = threads[key] = ThreadTally(tenant, event.thread_id, event.index, event.created_at or "")
        thread.add(event)
        actor_key = (tenant, event.thread_id, event.actor)
        actors[actor_key] = actors.get(actor_key, 0) + 1
        stream_key = (tenant, event.stream_id, event.lane)
        streams[stream_key] = streams.get(stream_key, 0) + 1
    return list(threads.values()), actors, streams


def _upsert(
    dialect: str, table: Table, keys: Sequence[str], adds: Sequence[str], replaces: Sequence[str] = ()
) -> Insert:
    """INSERT ... ON CONFLICT (keys) DO UPDATE: ``adds`` summed, ``replaces`` overwritten (both
    backends spell it the same way through their own dialect's ``insert``)."""
    dialect_insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = dialect_insert(table)
    updates: dict[str, Any] = {name: table.c[name] + statement.excluded[name] for name in adds}
    updates |= {name: statement.excluded[name] for name in replaces}
    return statement.on_conflict_do_update(index_elements=list(keys), set_=updates)


@cache
def _statements(dialect: str) -> tuple[Insert, Insert, Insert]:
    """The three upserts of :func:`record`, built once per dialect."""
    return (
        _upsert(dialect, thread_summary, ("tenant_key", "thread_id"), _COUNTERS, ("last_index", "last_at")),
        _upsert(dialect, thread_actors, ("tenant_key", "thread_id", "actor"), ("events",)),
        _upsert(dialect, ledger_counts, ("tenant_key", "stream_id", "lane"), ("events",)),
    )


def record(conn: Connection, recorded: Sequence[Event]) -> None:
    """Add ``recorded`` (the events an append just inserted, in index order) to the summaries,
    in ``conn``'s transaction. SQLite: three statements (in-process calls); PostgreSQL: one
    (see :func:`_pg_one_statement`), three for an append of thousands of threads."""
    if not recorded:
        return
    threads, actors, streams = tally(recorded)
    thread_rows = [thread.row() for thread in threads]
    actor_rows = [
        {"tenant_key": t, "thread_id": th, "actor": a, "events": n} for (t, th, a), n in actors.items()
    ]
    count_rows = [
        {"tenant_key": t, "stream_id": s, "lane": lane, "events": n} for (t, s, lane), n in streams.items()
    ]
    one_statement_params = sum(len(rows) * len(rows[0]) for rows in (thread_rows, actor_rows, count_rows))
    if conn.dialect.name == "postgresql" and one_statement_params <= PG_ONE_STATEMENT_MAX_PARAMS:
        # --- PostgreSQL only -------------------------------------------------------------------
        statement = _pg_one_statement(len(thread_rows), len(actor_rows), len(count_rows))
        params: dict[str, Any] = {}
        for prefix, rows in (("t", thread_rows), ("a", actor_rows), ("c", count_rows)):
            for i, row in enumerate(rows):
                params |= {f"{prefix}{i}_{name}": value for name, value in row.items()}
        conn.execute(statement, params)
        return
    upsert_thread, upsert_actor, upsert_count = _statements(conn.dialect.name)
    conn.execute(upsert_thread, thread_rows)
    conn.execute(upsert_actor, actor_rows)
    conn.execute(upsert_count, count_rows)


def _pg_upsert_sql(
    table: Table,
    prefix: str,
    rows: int,
    keys: Sequence[str],
    adds: Sequence[str],
    replaces: Sequence[str] = (),
) -> str:
    columns = [column.name for column in table.columns]
    values = ", ".join("(" + ", ".join(f":{prefix}{i}_{name}" for name in columns) + ")" for i in range(rows))
    updates = [f"{name} = {table.name}.{name} + excluded.{name}" for name in adds]
    updates += [f"{name} = excluded.{name}" for name in replaces]
    return (
        f"INSERT INTO {table.name} ({', '.join(columns)}) VALUES {values} "
        f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {', '.join(updates)}"
    )


@lru_cache(maxsize=256)
def _pg_one_statement(threads: int, actors: int, counts: int) -> TextClause:
    """PostgreSQL only: the three upserts as one statement (the first two as data-modifying
    CTEs), so the summaries cost one round trip per append. Each table is touched once and no
    key repeats within a VALUES list (``tally`` sums per key), as such a statement requires.
    Built once per shape (one event per append is the common one)."""
    by_thread = _pg_upsert_sql(
        thread_summary, "t", threads, ("tenant_key", "thread_id"), _COUNTERS, ("last_index", "last_at")
    )
    by_actor = _pg_upsert_sql(thread_actors, "a", actors, ("tenant_key", "thread_id", "actor"), ("events",))
    by_count = _pg_upsert_sql(ledger_counts, "c", counts, ("tenant_key", "stream_id", "lane"), ("events",))
    return text(f"WITH summary_threads AS ({by_thread}), summary_actors AS ({by_actor}) {by_count}")
