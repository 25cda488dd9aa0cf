"""The thread list: threads most recently active first, from the thread summary.

Reads ``thread_summary`` (one row per tenant and thread, see :mod:`turngate.ledger.summary`)
walking ``(tenant_key, last_index)`` backwards, so a page costs its own rows whatever the
ledger's size. Pages are keyset pages: ``before`` (a ``last_index`` from the previous page) seeks
straight to the next one; ``offset`` skips rows after that (kept for the web UI's page links).
``total`` counts the tenant's summary rows that pass the filters, up to ``COUNT_CAP``: past it
the answer says ``total_exact: false`` (a count of every match would read every summary row of
the tenant, a cost that grows with the number of threads).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import ColumnElement, and_, exists, func, literal, or_, select
from sqlalchemy.engine import Connection

from turngate.ledger.schema import thread_actors, thread_summary
from turngate.ledger.summary import tenant_key

#: Actors named per thread (``actor_count`` says how many there are).
ACTORS_SHOWN = 8
#: Matches counted at most; more: ``total`` is this and ``total_exact`` False.
COUNT_CAP = 1_000
DECISION_FILTERS = ("ALLOW", "DENY", "error", "pending")


@dataclass(frozen=True)
class ThreadFilter:
    """What the caller asked for; ``tenant_id`` None: every tenant (an unscoped caller)."""

    tenant_id: str | None
    q: str | None = None  # thread id contains
    actor: str | None = None  # took part in the thread
    decision: str | None = None  # one of DECISION_FILTERS occurred (pending: a turn undecided)
    since: str | None = None  # active at or after (ISO-8601 UTC, as stored)
    until: str | None = None  # active at or before


@dataclass
class ThreadRow:
    tenant_id: str | None
    thread_id: str
    events: int
    turns: int
    allowed: int
    denied: int
    errors: int
    executed: int
    first_index: int
    last_index: int
    first_at: str
    last_at: str
    actors: list[str] = field(default_factory=list)
    actor_count: int = 0

    @property
    def pending(self) -> int:
        return max(0, self.turns - self.allowed - self.denied)


@dataclass
class ThreadPage:
    total: int
    total_exact: bool
    threads: list[ThreadRow]
    #: ``before`` for the next page (None: this page is the last).
    next_before: int | None


def _conditions(wanted: ThreadFilter) -> list[ColumnElement[bool]]:
    s = thread_summary.c
    conditions: list[ColumnElement[bool]] = []
    if wanted.tenant_id is not None:
        conditions.append(s.tenant_key == tenant_key(wanted.tenant_id))
    if wanted.q:
        conditions.append(s.thread_id.contains(wanted.q, autoescape=True))
    if wanted.actor:
        a = thread_actors.c
        conditions.append(
            exists().where(a.tenant_key == s.tenant_key, a.thread_id == s.thread_id, a.actor == wanted.actor)
        )
    if wanted.decision == "ALLOW":
        conditions.append(s.allowed > 0)
    elif wanted.decision == "DENY":
        conditions.append(s.denied > 0)
    elif wanted.decision == "error":
        conditions.append(s.errors > 0)
    elif wanted.decision == "pending":
        conditions.append(s.turns > s.allowed + s.denied)
    if wanted.since:
        conditions.append(s.last_at >= wanted.since)
    if wanted.until:
        conditions.append(s.first_at <= wanted.until)
    return conditions


def list_threads(
    conn: Connection, wanted: ThreadFilter, *, limit: int, offset: int = 0, before: int | None = None
) -> ThreadPage:
    """One page of threads, most recently active first (see the module doc)."""
    conditions = _conditions(wanted)
    s = thread_summary.c
    seek = [s.last_index < before] if before is not None else []
    page_query = (
        select(thread_summary)
        .where(*conditions, *seek)
        .order_by(s.last_index.desc())
        .offset(offset)
        .limit(limit)
    )
    matches = (
        select(literal(1)).select_from(thread_summary).where(*conditions).limit(COUNT_CAP + 1).subquery()
    )
    counted = int(conn.execute(select(func.count()).select_from(matches)).scalar_one())
    rows = [
        ThreadRow(
            tenant_id=None if not row["tenant_key"] else str(row["tenant_key"]),
            **{name: row[name] for name in ThreadRow.__dataclass_fields__ if name not in _NOT_COLUMNS},
        )
        for row in conn.execute(page_query).mappings()
    ]
    _add_actors(conn, rows)
    next_before = rows[-1].last_index if len(rows) == limit else None
    return ThreadPage(
        total=min(counted, COUNT_CAP), total_exact=counted <= COUNT_CAP, threads=rows, next_before=next_before
    )


_NOT_COLUMNS = frozenset({"tenant_id", "actors", "actor_count"})


def _add_actors(conn: Connection, rows: Sequence[ThreadRow]) -> None:
    """Each row's actors (the first ``ACTORS_SHOWN`` by name) and their number: one query over
    the page's (tenant, thread) keys, each an index range of ``thread_actors``."""
    if not rows:
        return
    a = thread_actors.c
    by_key = {(tenant_key(row.tenant_id), row.thread_id): row for row in rows}
    keys = or_(*(and_(a.tenant_key == tenant, a.thread_id == thread) for tenant, thread in by_key))
    query = (
        select(a.tenant_key, a.thread_id, a.actor).where(keys).order_by(a.tenant_key, a.thread_id, a.actor)
    )
    for tenant, thread, actor in conn.execute(query):
        row = by_key[(tenant, thread)]
        row.actor_count += 1
        if len(row.actors) < ACTORS_SHOWN:
            row.actors.append(actor)
