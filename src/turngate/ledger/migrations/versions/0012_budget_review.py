"""budgets: what a turn over a budget gets, DENY or a human review (docs/BUDGETS.md).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27

Four columns: ``on_exceed`` ("deny", the default every existing record keeps, or "review") and
the review spec of a "review" budget (role, deadline in seconds, four-eyes). Adding columns is
not an UPDATE of any row, so the append-only triggers stay as they are.

Self-contained on purpose (see 0001).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("budgets", sa.Column("on_exceed", sa.Text(), nullable=False, server_default="deny"))
    op.add_column("budgets", sa.Column("review_role", sa.Text(), nullable=True))
    op.add_column("budgets", sa.Column("review_deadline_s", sa.BigInteger(), nullable=True))
    op.add_column("budgets", sa.Column("review_four_eyes", sa.Boolean(), nullable=True))


def downgrade() -> None:
    # ALTER TABLE ... DROP COLUMN (SQLite 3.35+, PostgreSQL): no row is rewritten, so the
    # append-only triggers do not fire and stay in place.
    for name in ("review_four_eyes", "review_deadline_s", "review_role", "on_exceed"):
        op.execute(f"ALTER TABLE budgets DROP COLUMN {name}")
