"""budgets: the append-only budget records (docs/BUDGETS.md).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25

A new table only. A change of budget is a new record (the latest record of a tenant/key scope is
in effect), so the table gets the same append-only triggers as ``events``.

Self-contained on purpose (see 0001).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APPEND_ONLY_MESSAGE = "turngate budgets are append-only"


def upgrade() -> None:
    seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "budgets",
        sa.Column("budget_id", seq, autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("key_id", sa.Text(), nullable=True),
        sa.Column("period", sa.Text(), nullable=False),
        sa.Column("window_start", sa.Text(), nullable=True),
        sa.Column("window_end", sa.Text(), nullable=True),
        sa.Column("max_tokens", sa.BigInteger(), nullable=True),
        sa.Column("max_cost_micros", sa.BigInteger(), nullable=True),
        sa.Column("set_at", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("budget_id", name="pk_budgets"),
    )
    op.create_index("ix_budgets_tenant_id_budget_id", "budgets", ["tenant_id", "budget_id"])
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        # --- SQLite only ------------------------------------------------------------------
        for operation in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER budgets_append_only_{operation.lower()} "
                f"BEFORE {operation} ON budgets "
                f"BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY_MESSAGE}'); END"
            )
    elif dialect == "postgresql":
        # --- PostgreSQL only --------------------------------------------------------------
        op.execute(
            "CREATE OR REPLACE FUNCTION turngate_budgets_append_only() RETURNS trigger "
            "LANGUAGE plpgsql AS $$ BEGIN "
            f"RAISE EXCEPTION '{APPEND_ONLY_MESSAGE}' USING ERRCODE = 'restrict_violation'; "
            "END $$"
        )
        op.execute(
            "CREATE TRIGGER budgets_append_only_update_delete BEFORE UPDATE OR DELETE ON budgets "
            "FOR EACH ROW EXECUTE FUNCTION turngate_budgets_append_only()"
        )
        op.execute(
            "CREATE TRIGGER budgets_append_only_truncate BEFORE TRUNCATE ON budgets "
            "FOR EACH STATEMENT EXECUTE FUNCTION turngate_budgets_append_only()"
        )


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS budgets_append_only_update")
        op.execute("DROP TRIGGER IF EXISTS budgets_append_only_delete")
    elif dialect == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS budgets_append_only_update_delete ON budgets")
        op.execute("DROP TRIGGER IF EXISTS budgets_append_only_truncate ON budgets")
        op.execute("DROP FUNCTION IF EXISTS turngate_budgets_append_only()")
    op.drop_index("ix_budgets_tenant_id_budget_id", table_name="budgets")
    op.drop_table("budgets")
