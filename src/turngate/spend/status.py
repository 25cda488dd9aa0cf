"""Budgets in effect with their spend and what is left this period: `turngate budgets show`,
``/status`` and the web UI print the same (docs/BUDGETS.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import func, select

from turngate.core.model_aliases import (
    MICROS,
)
from turngate.core.spend import (
    budget_window,
    effective_budgets,
)
from turngate.ledger import LedgerStore
from turngate.ledger.budgets import BudgetStore, recount
from turngate.ledger.schema import events


def money(micros: int | None) -> str | None:
    """Micro-units as a plain decimal string (``1500000`` -> ``"1.5"``)."""
    if micros is None:
        return None
    return format((Decimal(micros) / MICROS).normalize(), "f")


def budget_status(
    store: LedgerStore, tenant_id: str | None = None, now: datetime | None = None
) -> dict[str, Any]:
    """Every budget in effect (of ``tenant_id`` only, when given), counted up to the ledger head."""
    now = now or datetime.now(UTC)
    records = effective_budgets(BudgetStore(store).history(tenant_id))
    entries: list[dict[str, Any]] = []
    with store.read_connection("budget status") as conn:
        last = conn.execute(select(func.max(events.c.index))).scalar()
        position = 0 if last is None else int(last) + 1
        for tenant in sorted({r.tenant_id for r in records}):
            mine = [(r, *budget_window(r, now)) for r in records if r.tenant_id == tenant]
            counted = recount(conn, mine, tenant, position)
            for budget, start, end in mine:
                settled, reserved = counted[budget.budget_id]
                spent = settled + reserved
                left_tokens = None if budget.max_tokens is None else max(0, budget.max_tokens - spent.tokens)
                left_cost = (
                    None
                    if budget.max_cost_micros is None
                    else max(0, budget.max_cost_micros - spent.cost_micros)
                )
                entries.append(
                    {
                        "budget": budget.model_dump(mode="json"),
                        "window_start": start,
                        "window_end": end,
                        "settled": settled.model_dump(),
                        "reserved": reserved.model_dump(),
                        "spent": spent.model_dump(),
                        "remaining": {"tokens": left_tokens, "cost_micros": left_cost},
                        "spent_cost": money(spent.cost_micros),
                        "max_cost": money(budget.max_cost_micros),
                        "remaining_cost": money(left_cost),
                    }
                )
    return {"position": position, "budgets": entries}
