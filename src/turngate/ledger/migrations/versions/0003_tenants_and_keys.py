"""tenants and API keys: ``events.tenant_id`` (+ index) and the ``api_keys`` table.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24

``events.tenant_id`` is nullable: events recorded before this revision, or without
authentication (``turngate dev``), have no tenant. Adding a nullable column rewrites no row, so
the append-only triggers of 0001 are not involved (no batch mode: on SQLite that would copy the
table and drop its triggers). ``api_keys`` holds only the sha256 of each secret.

Self-contained on purpose (see 0001).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("events", sa.Column("tenant_id", sa.Text(), nullable=True))
    op.create_index("ix_events_tenant_id_index", "events", ["tenant_id", "index"])
    op.create_table(
        "api_keys",
        sa.Column("key_id", sa.Text(), nullable=False),
        sa.Column("secret_sha256", sa.Text(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("roles", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.Column("revoked_at", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("key_id", name="pk_api_keys"),
        sa.UniqueConstraint("secret_sha256", name="uq_api_keys_secret_sha256"),
    )


def downgrade() -> None:
    op.drop_table("api_keys")
    op.drop_index("ix_events_tenant_id_index", table_name="events")
    if op.get_bind().dialect.name == "postgresql":
        op.drop_column("events", "tenant_id")
    # SQLite: the column stays (dropping it would copy the table and lose its triggers); the
    # code of 0002 ignores it.
