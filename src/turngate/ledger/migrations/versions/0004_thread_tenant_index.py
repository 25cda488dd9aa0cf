"""index (thread_id, tenant_id): "does this thread hold another tenant's events?" in O(log n).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24

Ingress asks it for every tenant-scoped intent; without this index the answer walks every event
of the thread, a cost that grows with the thread. An index adds no row and touches no trigger.

Self-contained on purpose (see 0001).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_events_thread_id_tenant_id", "events", ["thread_id", "tenant_id"])


def downgrade() -> None:
    op.drop_index("ix_events_thread_id_tenant_id", table_name="events")
