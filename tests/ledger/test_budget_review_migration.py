"""Migration 0012 (a budget's ``on_exceed`` and review spec) on SQLite and PostgreSQL: records
written before it read back as denying budgets, a review budget round-trips, and it downgrades
with the append-only triggers still in place."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DatabaseError

from turngate.core.review import ReviewSpec
from turngate.ledger import LedgerStore
from turngate.ledger.budgets import BudgetStore
from turngate.ledger.engine import migrate, migration_lock


def _alembic(store: LedgerStore, revision: str, *, downgrade: bool) -> None:
    with store.engine.connect() as conn, migration_lock(conn):
        migrate(conn, revision, downgrade=downgrade)


def test_old_records_deny_a_review_budget_round_trips_and_it_downgrades(ledger_url: str) -> None:
    with LedgerStore(ledger_url) as store:
        _alembic(store, "0011", downgrade=True)
        with store.engine.begin() as conn:  # a record written by the schema before 0012
            conn.execute(
                text(
                    "INSERT INTO budgets (tenant_id, period, max_tokens, set_at) "
                    "VALUES ('acme', 'day', 10, '2026-11-25T00:00:00.000000Z')"
                )
            )
    with LedgerStore(ledger_url) as store:  # opening migrates to head
        budgets = BudgetStore(store)
        [old] = budgets.history()
        assert (old.on_exceed, old.review) == ("deny", None) and "on_exceed" not in old.model_dump()
        spec = ReviewSpec(role="finance", deadline_s=600, four_eyes=True)
        made = budgets.set("acme", max_tokens=20, review=spec)
        assert budgets.get(made.budget_id) == made and made.review == spec
        with pytest.raises(DatabaseError, match="append-only"), store.engine.begin() as conn:
            conn.execute(text("UPDATE budgets SET on_exceed = 'deny'"))
        _alembic(store, "0011", downgrade=True)
        with pytest.raises(DatabaseError, match="append-only"), store.engine.begin() as conn:
            conn.execute(text("DELETE FROM budgets"))
    with LedgerStore(ledger_url) as store:
        assert [r.on_exceed for r in BudgetStore(store).history()] == ["deny", "deny"]
