"""The thread list: threads most recently active first, from the thread summary.

Reads ``thread_summary`` (one row per tenant and thread, see :mod:`turngate.ledger.summary`)
walking ``(tenant_key, last_index)`` backwards, so a page costs its own rows whatever the
ledger's size. Pages are keyset pages: ``before`` (a ``last_index`` from the previous page) seeks
straight to the next one; ``offset`` skips rows after that (kept for the web UI's page links).
``total`` counts the tenant's summary rows that pass the filters, up to ``COUNT_CAP``: past it
the answer says ``total_exact: false`` (a count of every match would read every summary row of
the tenant, a cost that grows with the number of threads).

A thread-id search (``q``) of at least three characters first asks the trigram index of
``thread_search`` for the candidates; when there are at most ``SEARCH_CANDIDATES_MAX`` (a
selective search) only their summary rows are read and sorted. A shorter or more common string
walks the recency index as the other filters do: its matches are many, so the newest of them are
near the start of the walk. Either way the exact condition (thread id contains ``q``) decides;
the index only narrows what is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    CTE,
    ColumnElement,
    Select,
    Subquery,
    and_,
    column,
    exists,
    false,
    func,
    literal_column,
    or_,
    select,
    union_all,
    values,
)
from sqlalchemy.engine import Connection
from sqlalchemy.sql import FromClause
from sqlalchemy.types import Text

from turngate.ledger.schema import ledger_counts, thread_actors, thread_search, thread_summary
from turngate.ledger.summary import tenant_key

#: Actors named per thread (``actor_count`` says how many there are).
ACTORS_SHOWN = 8
#: Matches counted at most; more: ``total`` is this and ``total_exact`` False.
COUNT_CAP = 1_000
#: An unscoped caller's list merges the tenants' ranges up to this many tenants; past it, it
#: reads the summary as one (every row, then the newest first).
MERGED_TENANTS_MAX = 64
#: The trigram index narrows a search of at least this many characters (shorter strings hold no
#: trigram).
SEARCH_INDEX_MIN_CHARS = 3
#: A search with more candidates than this walks the recency index instead (see the module doc).
SEARCH_CANDIDATES_MAX = 2_000
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
    # "> 0" spelled as SQL, not a bound parameter: a plan made for any value (PostgreSQL's
    # generic plan of a prepared statement) can then still use the partial index for DENY and
    # error (schema.SPARSE_FILTER_COUNTERS)
    above_zero: ColumnElement[int] = literal_column("0")
    if wanted.decision == "ALLOW":
        conditions.append(s.allowed > above_zero)
    elif wanted.decision == "DENY":
        conditions.append(s.denied > above_zero)
    elif wanted.decision == "error":
        conditions.append(s.errors > above_zero)
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
    tenants = _tenant_keys(conn, wanted)
    candidates = _search_candidates(conn, wanted)
    s = thread_summary.c
    # One statement: the newest COUNT_CAP + 1 matches give the count and (nearly always) the
    # page, so the matching index entries are read once (a thread-id search reads each entry
    # of the summary once, not once to count and once more to page).
    newest = _newest(tenants, conditions, [], 0, COUNT_CAP + 1, candidates).cte("newest")
    seek = [newest.c.last_index < before] if before is not None else []
    page = select(newest).where(*seek).order_by(newest.c.last_index.desc()).offset(offset).limit(limit)
    found = (
        conn.execute(_with_rows(page.subquery(), select(func.count()).select_from(newest))).mappings().all()
    )
    matched = int(found[0]["matched"]) if found else _count(conn, newest)
    if matched > COUNT_CAP and (before is not None or offset + limit > matched):
        # a page beyond the newest matches: seek to it
        seek = [s.last_index < before] if before is not None else []
        found = (
            conn.execute(_with_rows(_newest(tenants, conditions, seek, offset, limit, candidates).subquery()))
            .mappings()
            .all()
        )
    rows = [
        ThreadRow(
            tenant_id=None if not row["tenant_key"] else str(row["tenant_key"]),
            **{name: row[name] for name in ThreadRow.__dataclass_fields__ if name not in _NOT_COLUMNS},
        )
        for row in found
    ]
    _add_actors(conn, rows)
    next_before = rows[-1].last_index if len(rows) == limit else None
    return ThreadPage(
        total=min(matched, COUNT_CAP), total_exact=matched <= COUNT_CAP, threads=rows, next_before=next_before
    )


def _with_rows(keys: Subquery, count: Select[Any] | None = None) -> Select[Any]:
    """The summary rows of ``keys`` (primary-key lookups), most recently active first; with
    ``count``'s answer as ``matched`` on every row."""
    s = thread_summary.c
    columns = [count.scalar_subquery().label("matched")] if count is not None else []
    return (
        select(*columns, thread_summary)
        .join_from(
            thread_summary, keys, and_(s.tenant_key == keys.c.tenant_key, s.thread_id == keys.c.thread_id)
        )
        .order_by(s.last_index.desc())
    )


def _count(conn: Connection, newest: CTE) -> int:
    """The number of matches (up to COUNT_CAP + 1) when the page itself is empty."""
    return int(conn.execute(select(func.count()).select_from(newest)).scalar_one())


def _tenant_keys(conn: Connection, wanted: ThreadFilter) -> list[str] | None:
    """The tenant keys to walk: the caller's; for an unscoped caller every tenant's (the stream
    counts hold each tenant key that has an event, in a handful of rows), or None (walk the
    summary as one) when there are more than ``MERGED_TENANTS_MAX``."""
    if wanted.tenant_id is not None:
        return [tenant_key(wanted.tenant_id)]
    keys = list(conn.execute(select(ledger_counts.c.tenant_key).distinct()).scalars())
    return keys if len(keys) <= MERGED_TENANTS_MAX else None


def _search_candidates(conn: Connection, wanted: ThreadFilter) -> FromClause | None:
    """The keys the trigram index gives for ``wanted.q`` (a superset of the matches), as a
    VALUES list, when the index narrows the search: ``q`` long enough for it and at most
    ``SEARCH_CANDIDATES_MAX`` candidates (read up to one more). None: walk the recency index
    instead. The index is read once per list: the keys travel with the statements that follow
    (a trigram present in every thread id makes each read of the index cost a pass over its
    entries for that trigram)."""
    q = wanted.q
    if not q or len(q) < SEARCH_INDEX_MIN_CHARS:
        return None
    c = thread_search.c
    if conn.dialect.name == "sqlite":
        # --- SQLite only: an FTS5 phrase is a substring for the trigram tokenizer (case folded,
        # so a superset of LIKE's matches)
        phrase = '"' + q.replace('"', '""') + '"'
        found: ColumnElement[bool] = literal_column(thread_search.name).op("MATCH")(phrase)
    else:
        found = c.thread_id.contains(q, autoescape=True)
    keys = select(c.tenant_key, c.thread_id).where(found)
    if wanted.tenant_id is not None:
        keys = keys.where(c.tenant_key == tenant_key(wanted.tenant_id))
    found_keys = conn.execute(keys.limit(SEARCH_CANDIDATES_MAX + 1)).all()
    if len(found_keys) > SEARCH_CANDIDATES_MAX:
        return None
    if not found_keys:  # no thread id contains q (and a VALUES list cannot be empty)
        return select(c.tenant_key, c.thread_id).where(false()).subquery("candidates")
    listed = [(str(tenant), str(thread)) for tenant, thread in found_keys]
    return values(column("tenant_key", Text), column("thread_id", Text), name="candidates").data(listed).cte()


def _newest(
    tenants: list[str] | None,
    conditions: list[ColumnElement[bool]],
    seek: list[ColumnElement[bool]],
    offset: int,
    limit: int,
    candidates: FromClause | None = None,
) -> Select[Any]:
    """Keys of matching summary rows, most recently active first, ``offset`` / ``limit``.

    Each tenant's rows are a range of the (tenant_key, last_index) index read backwards; for
    several tenants the ranges are merged (each contributes at most ``offset + limit``). With
    ``candidates`` (a narrowing search), only their rows: primary-key lookups, then a sort."""
    s = thread_summary.c
    if candidates is not None:  # the conditions hold the caller's tenant, if any
        on_key = and_(s.tenant_key == candidates.c.tenant_key, s.thread_id == candidates.c.thread_id)
        return (
            select(s.tenant_key, s.thread_id, s.last_index)
            .select_from(candidates.join(thread_summary, on_key))
            .where(*conditions, *seek)
            .order_by(s.last_index.desc())
            .offset(offset)
            .limit(limit)
        )

    def walk(extra: list[ColumnElement[bool]], skip: int, take: int) -> Select[Any]:
        return (
            select(s.tenant_key, s.thread_id, s.last_index)
            .where(*extra, *conditions, *seek)
            .order_by(s.last_index.desc())
            .offset(skip)
            .limit(take)
        )

    if tenants is None:
        return walk([], offset, limit)
    if not tenants:  # a ledger with no threads yet: nothing to merge
        return walk([false()], offset, limit)
    if len(tenants) == 1:
        return walk([s.tenant_key == tenants[0]], offset, limit)
    merged = union_all(
        *(select(walk([s.tenant_key == key], 0, offset + limit).subquery()) for key in tenants)
    ).subquery()
    return select(merged).order_by(merged.c.last_index.desc()).offset(offset).limit(limit)


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
