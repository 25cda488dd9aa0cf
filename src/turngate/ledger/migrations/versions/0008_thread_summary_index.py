"""thread_summary: drop the all-tenants recency index.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25

Every append moves its thread's summary row in each index on ``last_index``; the all-tenants one
(``last_index``, ``thread_id``) only served an unscoped caller's thread list, which now merges
the per-tenant ranges of (``tenant_key``, ``last_index``, ``thread_id``) instead. One index
fewer to maintain per append; nothing else changes.

Self-contained on purpose (see 0001).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_index("ix_thread_summary_last_index_thread_id", table_name="thread_summary")


def downgrade() -> None:
    op.create_index("ix_thread_summary_last_index_thread_id", "thread_summary", ["last_index", "thread_id"])
