"""events: the append-only, hash-chained ledger table.

Revision ID: 0001
Revises:
Create Date: 2026-11-01

Self-contained on purpose (it does not import ``turngate.ledger.schema``): a released migration
must keep building the same schema however the current models change.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APPEND_ONLY_MESSAGE = "turngate ledger is append-only"


def upgrade() -> None:
    index_type = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "events",
        sa.Column("index", index_type, primary_key=True, autoincrement=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("thread_id", sa.Text(), nullable=False),
        sa.Column("turn_id", sa.Text(), nullable=False),
        sa.Column("parent_turn_id", sa.Text(), nullable=True),
        sa.Column("correlation_id", sa.Text(), nullable=False),
        sa.Column("stream_id", sa.Text(), nullable=False),
        sa.Column("lane", sa.Text(), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("intent_type", sa.Text(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("digest", sa.Text(), nullable=False),
        sa.Column("prev_event_digest", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("index", name="pk_events"),
        sa.UniqueConstraint("correlation_id", "kind", name="uq_events_correlation_id_kind"),
    )
    op.create_index("ix_events_thread_id_index", "events", ["thread_id", "index"])
    op.create_index("ix_events_correlation_id", "events", ["correlation_id"])
    op.create_index("ix_events_thread_id_turn_id", "events", ["thread_id", "turn_id"])
    op.create_index("ix_events_turn_id", "events", ["turn_id"])
    op.create_index("ix_events_digest", "events", ["digest"])
    op.create_index("ix_events_stream_id_lane_index", "events", ["stream_id", "lane", "index"])

    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        # --- SQLite only ------------------------------------------------------------------
        for operation in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER events_append_only_{operation.lower()} "
                f"BEFORE {operation} ON events "
                f"BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY_MESSAGE}'); END"
            )
    elif dialect == "postgresql":
        # --- PostgreSQL only --------------------------------------------------------------
        op.execute(
            "CREATE OR REPLACE FUNCTION turngate_events_append_only() RETURNS trigger "
            "LANGUAGE plpgsql AS $$ BEGIN "
            f"RAISE EXCEPTION '{APPEND_ONLY_MESSAGE}' USING ERRCODE = 'restrict_violation'; "
            "END $$"
        )
        op.execute(
            "CREATE TRIGGER events_append_only_update_delete BEFORE UPDATE OR DELETE ON events "
            "FOR EACH ROW EXECUTE FUNCTION turngate_events_append_only()"
        )
        op.execute(
            "CREATE TRIGGER events_append_only_truncate BEFORE TRUNCATE ON events "
            "FOR EACH STATEMENT EXECUTE FUNCTION turngate_events_append_only()"
        )
    else:
        raise NotImplementedError(
            f"turngate ledger: no append-only triggers for dialect {dialect!r}; "
            "add a branch here before using it"
        )


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS events_append_only_update")
        op.execute("DROP TRIGGER IF EXISTS events_append_only_delete")
    elif dialect == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS events_append_only_update_delete ON events")
        op.execute("DROP TRIGGER IF EXISTS events_append_only_truncate ON events")
        op.execute("DROP FUNCTION IF EXISTS turngate_events_append_only()")
    op.drop_table("events")
