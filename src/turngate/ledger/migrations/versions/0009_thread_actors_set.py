"""thread_actors: a set of actors per thread, without a per-actor event count.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27

Nothing read the per-actor count, and keeping it meant every append rewrote its actor's row:
one more page written per commit on the hottest write path. Without it an actor's row is
inserted once (``ON CONFLICT DO NOTHING``) and later events of that actor in the thread write
nothing there. The rows (which actors took part in which thread) are unchanged.

Self-contained on purpose (see 0001).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # a plain DROP COLUMN on both backends (SQLite >= 3.35 has it): no table rebuild
    op.drop_column("thread_actors", "events")


def downgrade() -> None:
    # the count is derived data: recomputed from the events in one grouped pass
    op.add_column("thread_actors", sa.Column("events", sa.BigInteger(), nullable=False, server_default="0"))
    op.execute(
        "UPDATE thread_actors SET events = g.n FROM (SELECT coalesce(tenant_id, '') AS tenant_key, "
        "thread_id, actor, count(*) AS n FROM events GROUP BY coalesce(tenant_id, ''), thread_id, actor) "
        "AS g WHERE g.tenant_key = thread_actors.tenant_key AND g.thread_id = thread_actors.thread_id "
        "AND g.actor = thread_actors.actor"
    )
