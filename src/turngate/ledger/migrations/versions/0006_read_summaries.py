"""read summaries: ``thread_summary``, ``thread_actors``, ``ledger_counts``, backfilled.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25

The thread list and the length of a filtered /snapshot used to be grouped queries over every
event; they now read these rows, which the store keeps up to date in every append transaction.
This revision creates the tables and fills them from the events already recorded (one grouped
pass per table, inside the migration's transaction: a ledger is never seen half-summarized).
Events are only read, never rewritten, so the append-only triggers are not involved.

The definitions (what counts as a turn, an ALLOW, an error) are the store's, in
``turngate.ledger.summary``; here they are spelled in SQL, per dialect for the JSON lookups.

Self-contained on purpose (see 0001).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

IndexType = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


#: ``verdicts`` packs two counts into one sum: ALLOWs + DENYs * VERDICT_SHIFT (so the payload of
#: each DECISION is parsed once, not once per count; a thread has fewer than 2**32 events).
VERDICT_SHIFT = 2**32


def _payload_sql(dialect: str) -> tuple[str, str, str]:
    """SQL for "the payload's decision", "the payload's error is an object" and the integer
    quotient of ``verdicts`` by VERDICT_SHIFT.

    The error test first looks for ``"error":{`` in the text: the payload is canonical JSON (no
    whitespace), so an error object always contains it, and most EXECUTIONs are then never
    parsed. PostgreSQL reads the payload as ``json`` (a validating scan), not ``jsonb`` (a scan
    that also builds a binary copy): about half the time on the same ledger.
    """
    if dialect == "postgresql":
        return (
            "(payload::json ->> 'decision')",
            "strpos(payload, '\"error\":{') > 0 AND json_typeof(payload::json -> 'error') = 'object'",
            f"div(verdicts, {VERDICT_SHIFT})",
        )
    return (
        "json_extract(payload, '$.decision')",
        "instr(payload, '\"error\":{') > 0 AND json_type(payload, '$.error') = 'object'",
        f"verdicts / {VERDICT_SHIFT}",
    )


def upgrade() -> None:
    op.create_table(
        "thread_summary",
        sa.Column("tenant_key", sa.Text(), nullable=False),
        sa.Column("thread_id", sa.Text(), nullable=False),
        *(
            sa.Column(name, sa.BigInteger(), nullable=False)
            for name in ("events", "turns", "allowed", "denied", "errors", "executed")
        ),
        sa.Column("first_index", IndexType, nullable=False),
        sa.Column("last_index", IndexType, nullable=False),
        sa.Column("first_at", sa.Text(), nullable=False),
        sa.Column("last_at", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_key", "thread_id", name="pk_thread_summary"),
    )
    op.create_table(
        "thread_actors",
        sa.Column("tenant_key", sa.Text(), nullable=False),
        sa.Column("thread_id", sa.Text(), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_key", "thread_id", "actor", name="pk_thread_actors"),
    )
    op.create_table(
        "ledger_counts",
        sa.Column("tenant_key", sa.Text(), nullable=False),
        sa.Column("stream_id", sa.Text(), nullable=False),
        sa.Column("lane", sa.Text(), nullable=False),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_key", "stream_id", "lane", name="pk_ledger_counts"),
    )
    _backfill(op.get_bind().dialect.name)
    # indexes after the bulk insert (cheaper than maintaining them row by row)
    op.create_index(
        "ix_thread_summary_tenant_key_last_index_thread_id",
        "thread_summary",
        ["tenant_key", "last_index", "thread_id"],
    )
    op.create_index("ix_thread_summary_last_index_thread_id", "thread_summary", ["last_index", "thread_id"])


def _backfill(dialect: str) -> None:
    decision, error_is_object, denied = _payload_sql(dialect)
    if dialect == "postgresql":
        # --- PostgreSQL only: group in memory (the default 4 MB spills the grouping of a large
        # ledger to disk); for this transaction only
        op.execute("SET LOCAL work_mem = '256MB'")
    tenant = "coalesce(tenant_id, '')"
    op.execute(
        "INSERT INTO thread_summary (tenant_key, thread_id, events, turns, allowed, denied, errors, "
        "executed, first_index, last_index, first_at, last_at) "
        f"SELECT g.tenant_key, g.thread_id, g.events, g.turns, g.verdicts % {VERDICT_SHIFT}, {denied}, "
        "g.errors, g.executed, g.first_index, g.last_index, f.created_at, l.created_at FROM ("
        f"SELECT {tenant} AS tenant_key, thread_id, count(*) AS events, "
        "sum(CASE WHEN kind = 'INTENT' THEN 1 ELSE 0 END) AS turns, "
        f"sum(CASE WHEN kind = 'DECISION' THEN CASE {decision} WHEN 'ALLOW' THEN 1 "
        f"WHEN 'DENY' THEN {VERDICT_SHIFT} ELSE 0 END ELSE 0 END) AS verdicts, "
        f"sum(CASE WHEN kind = 'EXECUTION' AND {error_is_object} THEN 1 ELSE 0 END) AS errors, "
        "sum(CASE WHEN kind = 'EXECUTION' THEN 1 ELSE 0 END) AS executed, "
        'min("index") AS first_index, max("index") AS last_index '
        f"FROM events GROUP BY {tenant}, thread_id) AS g "
        'JOIN events AS f ON f."index" = g.first_index JOIN events AS l ON l."index" = g.last_index'
    )
    op.execute(
        "INSERT INTO thread_actors (tenant_key, thread_id, actor, events) "
        f"SELECT {tenant}, thread_id, actor, count(*) FROM events GROUP BY {tenant}, thread_id, actor"
    )
    op.execute(
        "INSERT INTO ledger_counts (tenant_key, stream_id, lane, events) "
        f"SELECT {tenant}, stream_id, lane, count(*) FROM events GROUP BY {tenant}, stream_id, lane"
    )


def downgrade() -> None:
    op.drop_table("ledger_counts")
    op.drop_table("thread_actors")
    op.drop_table("thread_summary")
