"""events_notify: wake listeners when events are appended (PostgreSQL; nothing to do on SQLite).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22

A statement-level ``AFTER INSERT`` trigger issues ``NOTIFY turngate_ledger, '<index>'`` (the
highest index the statement inserted) inside the inserting transaction; PostgreSQL delivers it
to every ``LISTEN``-ing session when, and only if, that transaction commits, in commit order.
Any writer notifies, not only the store. SQLite has no notifications: its readers poll
``PRAGMA data_version`` instead.

Self-contained on purpose (see 0001).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NOTIFY_CHANNEL = "turngate_ledger"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    # --- PostgreSQL only ----------------------------------------------------------------
    op.execute(
        "CREATE OR REPLACE FUNCTION turngate_events_notify() RETURNS trigger "
        "LANGUAGE plpgsql AS $$ DECLARE last_index bigint; BEGIN "
        'SELECT max("index") INTO last_index FROM inserted; '
        "IF last_index IS NOT NULL THEN "
        f"PERFORM pg_notify('{NOTIFY_CHANNEL}', last_index::text); "
        "END IF; RETURN NULL; END $$"
    )
    op.execute(
        "CREATE TRIGGER events_notify AFTER INSERT ON events "
        "REFERENCING NEW TABLE AS inserted "
        "FOR EACH STATEMENT EXECUTE FUNCTION turngate_events_notify()"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER IF EXISTS events_notify ON events")
    op.execute("DROP FUNCTION IF EXISTS turngate_events_notify()")
