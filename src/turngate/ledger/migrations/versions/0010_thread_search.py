"""thread_search: every thread id once, under a trigram index, for the thread-id search.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27

The thread list's search (thread id contains a string) used to read the thread id of every
summary row of the tenant: a cost that grows with the number of threads. A trigram index finds
the candidates directly. Thread ids never change, so the index only needs a row per thread: a
trigger on ``thread_summary`` adds it when the thread's summary row is first inserted (an
upsert that updates an existing row fires no INSERT trigger, so appends to known threads pay
nothing). Filled here from the summary rows already there.

- SQLite: an FTS5 virtual table with the ``trigram`` tokenizer (SQLite >= 3.34).
- PostgreSQL: a plain table with a GIN ``gin_trgm_ops`` index. ``pg_trgm`` ships with
  PostgreSQL (contrib) and is a trusted extension (PostgreSQL >= 13): the ledger's owner can
  create it. Where it is missing the table is built without the index, the search still answers
  the same (by reading the table), and a warning says so.

Self-contained on purpose (see 0001).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_log = logging.getLogger("turngate.ledger")


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        # --- SQLite only -------------------------------------------------------------------
        op.execute(
            "CREATE VIRTUAL TABLE thread_search USING "
            "fts5(thread_id, tenant_key UNINDEXED, tokenize = 'trigram')"
        )
        op.execute(
            "INSERT INTO thread_search (thread_id, tenant_key) "
            "SELECT thread_id, tenant_key FROM thread_summary"
        )
        op.execute(
            "CREATE TRIGGER thread_search_on_new_thread AFTER INSERT ON thread_summary BEGIN "
            "INSERT INTO thread_search (thread_id, tenant_key) VALUES (NEW.thread_id, NEW.tenant_key); END"
        )
        return
    # --- PostgreSQL only -----------------------------------------------------------------------
    op.create_table(
        "thread_search",
        sa.Column("tenant_key", sa.Text(), nullable=False),
        sa.Column("thread_id", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_key", "thread_id", name="thread_search_pkey"),
    )
    op.execute(
        "INSERT INTO thread_search (tenant_key, thread_id) SELECT tenant_key, thread_id FROM thread_summary"
    )
    trigram_schema = _pg_trgm()
    if trigram_schema is not None:  # the operator class named where the extension lives
        op.execute(
            "CREATE INDEX thread_search_trigrams ON thread_search "
            f'USING gin (thread_id "{trigram_schema}".gin_trgm_ops)'
        )
    op.execute(
        "CREATE FUNCTION thread_search_on_new_thread() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN INSERT INTO thread_search (tenant_key, thread_id) VALUES (NEW.tenant_key, NEW.thread_id); "
        "RETURN NULL; END $$"
    )
    op.execute(
        "CREATE TRIGGER thread_search_on_new_thread AFTER INSERT ON thread_summary "
        "FOR EACH ROW EXECUTE FUNCTION thread_search_on_new_thread()"
    )


def _pg_trgm() -> str | None:
    """PostgreSQL only: the schema of the ``pg_trgm`` extension, created here (in the current
    schema) when it is not installed yet; None, with a warning, when the server does not ship it
    or this role may not create it."""
    conn = op.get_bind()
    installed = "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'pg_trgm'"
    schema = conn.execute(sa.text(installed)).scalar()
    if schema is not None:
        return str(schema).strip('"')
    if not conn.execute(sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'")).first():
        reason = "the server does not ship it (PostgreSQL's contrib package)"
    else:
        try:
            with conn.begin_nested():
                conn.execute(sa.text("CREATE EXTENSION pg_trgm"))
            return str(conn.execute(sa.text(installed)).scalar()).strip('"')
        except sa.exc.DBAPIError as exc:
            reason = f"it could not be created: {str(exc.orig).strip()}"
    _log.warning(
        "pg_trgm is not available (%s): the thread-id search reads every thread id instead of an "
        "index; to add the index later: CREATE EXTENSION pg_trgm; CREATE INDEX "
        "thread_search_trigrams ON thread_search USING gin (thread_id gin_trgm_ops)",
        reason,
    )
    return None


def downgrade() -> None:
    op.execute("DROP TRIGGER thread_search_on_new_thread" + ("" if _sqlite() else " ON thread_summary"))
    if not _sqlite():
        op.execute("DROP FUNCTION thread_search_on_new_thread()")
    op.execute("DROP TABLE thread_search")


def _sqlite() -> bool:
    return op.get_bind().dialect.name == "sqlite"
