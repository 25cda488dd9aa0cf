"""The ledger's tables, as SQLAlchemy Core metadata.

This module describes the schema that the migrations in ``ledger/migrations/versions`` build;
the store queries through it. A test compares the two (alembic's autogenerate diff must be
empty), so a change here without a migration fails CI.

``index`` is the global position of an event: it starts at 0, has no gaps and equals the
event's position in the log. On SQLite it is an ``INTEGER PRIMARY KEY`` (an alias of the rowid,
so lookups and range scans by index are b-tree searches); elsewhere a ``BIGINT`` primary key.
The payload is stored as canonical JSON text (RFC 8785), including its ``_obs`` part; timestamps
(``created_at``) are observational and outside every digest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import RowMapping

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "pk": "pk_%(table_name)s",
}

#: A stored row: as a query's ``.mappings()`` yields it (its keys typed wider than ``str``) or
#: built as a plain mapping (tests, rows re-read from a cache).
StoredRow: TypeAlias = Mapping[str, Any] | RowMapping

metadata = MetaData(naming_convention=NAMING_CONVENTION)

#: BIGINT everywhere, INTEGER on SQLite (only ``INTEGER PRIMARY KEY`` aliases the rowid there).
IndexType = BigInteger().with_variant(Integer(), "sqlite")

APPEND_ONLY_MESSAGE = "turngate ledger is append-only"

events = Table(
    "events",
    metadata,
    Column("index", IndexType, primary_key=True, autoincrement=False),
    Column("kind", Text, nullable=False),
    Column("thread_id", Text, nullable=False),
    Column("turn_id", Text, nullable=False),
    Column("parent_turn_id", Text, nullable=True),
    Column("correlation_id", Text, nullable=False),
    Column("stream_id", Text, nullable=False),
    Column("lane", Text, nullable=False),
    Column("actor", Text, nullable=False),
    Column("intent_type", Text, nullable=False),
    Column("payload", Text, nullable=False),
    Column("digest", Text, nullable=False),
    Column("prev_event_digest", Text, nullable=True),
    Column("created_at", Text, nullable=False),
    # The tenant whose INTENT started the turn (NULL: recorded without authentication, e.g.
    # `turngate dev` or before migration 0003). Every read surface filters on it.
    Column("tenant_id", Text, nullable=True),
    UniqueConstraint("correlation_id", "kind", name="uq_events_correlation_id_kind"),
    Index("ix_events_thread_id_index", "thread_id", "index"),
    Index("ix_events_correlation_id", "correlation_id"),
    Index("ix_events_thread_id_turn_id", "thread_id", "turn_id"),
    # Cross-thread lookups by turn_id (fetch_ref_candidates reports CROSS_THREAD_REF).
    Index("ix_events_turn_id", "turn_id"),
    Index("ix_events_digest", "digest"),
    Index("ix_events_stream_id_lane_index", "stream_id", "lane", "index"),
    Index("ix_events_tenant_id_index", "tenant_id", "index"),
    Index("ix_events_thread_id_tenant_id", "thread_id", "tenant_id"),
)

#: API keys (docs/SECURITY.md): only the sha256 of each secret is stored, never the secret.
api_keys = Table(
    "api_keys",
    metadata,
    Column("key_id", Text, primary_key=True),
    Column("secret_sha256", Text, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("roles", Text, nullable=False),  # comma-separated, sorted
    Column("name", Text, nullable=True),
    Column("created_at", Text, nullable=False),
    Column("revoked_at", Text, nullable=True),
    UniqueConstraint("secret_sha256", name="uq_api_keys_secret_sha256"),
)

#: The case registry (docs/JOBS.md): one row per completed case job, what it produced. Appended
#: by the job activities, read by ingress (a job's default inputs) and by the turn's case_query
#: resolution (a case's latest or declared index version, within the tenant). Never updated.
case_records = Table(
    "case_records",
    metadata,
    Column("seq", IndexType, primary_key=True, autoincrement=True),
    Column("tenant_id", Text, nullable=True),  # NULL: recorded without authentication
    Column("case_id", Text, nullable=False),
    Column("kind", Text, nullable=False),  # chunks | embeddings | index
    Column("job_id", Text, nullable=False),
    Column("version", Text, nullable=False),  # sha256 of the output, index_version for an index
    Column("pointer", Text, nullable=False),  # the output's artifact pointer (JSON)
    Column("detail", Text, nullable=False),  # counts, embedder, inputs (JSON)
    Column("key_id", Text, nullable=True),  # who submitted the job (never a secret)
    Column("created_at", Text, nullable=False),
    UniqueConstraint("job_id", name="uq_case_records_job_id"),
    Index("ix_case_records_case_id_kind_seq", "case_id", "kind", "seq"),
)

#: Budgets (docs/BUDGETS.md): append-only records; the latest of a (tenant, key) scope is in
#: effect, one without limits clears it. Triggers refuse UPDATE and DELETE (migration 0007).
budgets = Table(
    "budgets",
    metadata,
    Column("budget_id", IndexType, primary_key=True, autoincrement=True),
    Column("tenant_id", Text, nullable=False),
    Column("key_id", Text, nullable=True),  # NULL: the tenant's budget
    Column("period", Text, nullable=False),  # day | month | window
    Column("window_start", Text, nullable=True),
    Column("window_end", Text, nullable=True),
    Column("max_tokens", BigInteger, nullable=True),
    Column("max_cost_micros", BigInteger, nullable=True),
    Column("set_at", Text, nullable=False),
    # What a turn over the budget gets (migration 0012): "deny", or "review" by the spec below.
    Column("on_exceed", Text, nullable=False, server_default="deny"),
    Column("review_role", Text, nullable=True),
    Column("review_deadline_s", BigInteger, nullable=True),
    Column("review_four_eyes", Boolean, nullable=True),
    Index("ix_budgets_tenant_id_budget_id", "tenant_id", "budget_id"),
)

#: The tenant of a summary row: the events' ``tenant_id``, or ``NO_TENANT`` for events recorded
#: without one (a key column cannot be NULL; tenant ids are never empty, so "" is free).
NO_TENANT = ""

#: Counters whose "> 0" the thread list can filter on through a partial index of its own.
SPARSE_FILTER_COUNTERS = ("denied", "errors")

#: One row per (tenant, thread), maintained by every append in the append's own transaction, so
#: it is exactly what a grouped query over the thread's events would say (tests recompute it).
#: ``first_at`` / ``last_at`` are the times of the events at ``first_index`` / ``last_index``.
thread_summary = Table(
    "thread_summary",
    metadata,
    Column("tenant_key", Text, primary_key=True),
    Column("thread_id", Text, primary_key=True),
    Column("events", BigInteger, nullable=False),
    Column("turns", BigInteger, nullable=False),  # INTENTs
    Column("allowed", BigInteger, nullable=False),  # DECISIONs that ALLOW
    Column("denied", BigInteger, nullable=False),  # DECISIONs that DENY
    Column("errors", BigInteger, nullable=False),  # EXECUTIONs with an error
    Column("executed", BigInteger, nullable=False),  # EXECUTIONs
    Column("first_index", IndexType, nullable=False),
    Column("last_index", IndexType, nullable=False),
    Column("first_at", Text, nullable=False),
    Column("last_at", Text, nullable=False),
    # most recently active first, per tenant (keyset pages; an unscoped list merges the
    # tenants' ranges: one index fewer for every append to move); thread_id in the index so a
    # thread-id search filters index entries, not table rows
    Index("ix_thread_summary_tenant_key_last_index_thread_id", "tenant_key", "last_index", "thread_id"),
    # the same order for the threads a sparse, lasting filter selects (one DENY, one error): the
    # thread list's walk reads only those; an append moves a thread's entry here only once the
    # thread is in (ALLOW is too common to need one; "pending" is too short-lived to keep one)
    *(
        Index(
            f"ix_thread_summary_{name}",
            "tenant_key",
            "last_index",
            "thread_id",
            sqlite_where=text(f"{name} > 0"),
            postgresql_where=text(f"{name} > 0"),
        )
        for name in SPARSE_FILTER_COUNTERS
    ),
)

#: Who took part in a thread: one row per (tenant, thread, actor), written by the actor's first
#: event there and never updated (a later event of the same actor dirties no page).
thread_actors = Table(
    "thread_actors",
    metadata,
    Column("tenant_key", Text, primary_key=True),
    Column("thread_id", Text, primary_key=True),
    Column("actor", Text, primary_key=True),
)

#: Events per (tenant, stream, lane): the length of a filtered /snapshot without counting rows.
ledger_counts = Table(
    "ledger_counts",
    metadata,
    Column("tenant_key", Text, primary_key=True),
    Column("stream_id", Text, primary_key=True),
    Column("lane", Text, primary_key=True),
    Column("events", BigInteger, nullable=False),
)

#: Every thread id once (per tenant), for the thread-id search: a trigram index finds the
#: threads whose id contains a string without reading every summary row. Migration 0010 builds
#: it per backend (SQLite: an FTS5 table with the ``trigram`` tokenizer; PostgreSQL: a table
#: with a ``pg_trgm`` GIN index when the extension is available), and a trigger on
#: ``thread_summary`` adds a row when a thread's summary row is first inserted (an append to a
#: known thread writes nothing here). Outside ``metadata``: the schema diff cannot describe a
#: virtual table, so ``outside_metadata`` names what it leaves out.
SEARCH_TABLE = "thread_search"
thread_search = Table(
    SEARCH_TABLE,
    MetaData(),
    Column("tenant_key", Text, primary_key=True),
    Column("thread_id", Text, primary_key=True),
)


def outside_metadata(name: str | None) -> bool:
    """True for the objects the migrations build by hand (the search table, its index, its
    trigger and, on SQLite, the FTS5 shadow tables), which a schema diff must skip."""
    return name is not None and name.startswith(SEARCH_TABLE)


def in_schema_diff(name: str | None, _type: str, _parents: object) -> bool:
    """alembic's ``include_name`` hook: everything but what :func:`outside_metadata` names."""
    return not outside_metadata(name)


#: ``events.c["index"]`` (``index`` is also a method name on column collections).
index_column = events.c["index"]

#: Column names of ``events`` in table order.
EVENT_COLUMNS: tuple[str, ...] = tuple(column.name for column in events.columns)
