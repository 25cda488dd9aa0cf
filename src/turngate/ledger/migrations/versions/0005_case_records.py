"""case registry: ``case_records``, one row per completed case job.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25

A new table only; the events table and its triggers are untouched.

Self-contained on purpose (see 0001).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "case_records",
        sa.Column("seq", seq, autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=True),
        sa.Column("case_id", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("version", sa.Text(), nullable=False),
        sa.Column("pointer", sa.Text(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("key_id", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name="pk_case_records"),
        sa.UniqueConstraint("job_id", name="uq_case_records_job_id"),
    )
    op.create_index("ix_case_records_case_id_kind_seq", "case_records", ["case_id", "kind", "seq"])


def downgrade() -> None:
    op.drop_index("ix_case_records_case_id_kind_seq", table_name="case_records")
    op.drop_table("case_records")
