"""thread_summary: partial recency indexes for the DENY and error filters.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27

The thread list filtered on "had a DENY" or "had an error" walked every summary row newest
first until it had counted 1,001 matches: for a filter that few threads pass, that read most of
the summary. A partial index of the same order ((tenant_key, last_index, thread_id), only the
rows whose counter is above zero) lets the walk read the matches alone. Both filters are sparse
and lasting (a thread stays in once in), so an append moves a thread's entry in them only for
threads that are in.

Self-contained on purpose (see 0001).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COUNTERS = ("denied", "errors")


def upgrade() -> None:
    for name in _COUNTERS:
        where = sa.text(f"{name} > 0")
        op.create_index(
            f"ix_thread_summary_{name}",
            "thread_summary",
            ["tenant_key", "last_index", "thread_id"],
            sqlite_where=where,
            postgresql_where=where,
        )


def downgrade() -> None:
    for name in _COUNTERS:
        op.drop_index(f"ix_thread_summary_{name}", table_name="thread_summary")
