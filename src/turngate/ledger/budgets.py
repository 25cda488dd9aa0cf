"""Budgets in the ledger database, and the spend a turn is checked against (docs/BUDGETS.md).

Budget records are append-only (triggers refuse UPDATE and DELETE): setting a budget adds a
record, and the latest record of a (tenant, key) scope is in effect. Spend is read from the
ledger's own events, in one read snapshot, up to a position that the DECISION records, so that
``turngate verify`` can count the same events again (:func:`spend_rows`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from sqlalchemy import Connection, bindparam, func, insert, select

from turngate.core.model_aliases import (
    MICROS,
    SpendError,
)
from turngate.core.review import ReviewSpec
from turngate.core.spend import (
    PERIODS,
    BudgetCheck,
    BudgetRecord,
    Spend,
    SpendRow,
    SpendSnapshot,
    budget_window,
    budgets_for,
    count_spend,
    iso,
    parse_iso,
)
from turngate.ledger.rows import (
    utc_now_iso,
)
from turngate.ledger.schema import budgets, events
from turngate.ledger.store import (
    LedgerStore,
)

_SPEND_KINDS = ("DECISION", "EXECUTION")


def parse_cost(text: str | None) -> int | None:
    """A cost limit as given on the command line (``12.5``) in micro-units."""
    if text is None:
        return None
    try:
        amount = Decimal(text) * MICROS
    except InvalidOperation as exc:
        raise SpendError("budget.invalid_cost", f"--max-cost {text!r} is not a number") from exc
    if not amount.is_finite() or amount < 0 or amount != amount.to_integral_value():
        raise SpendError("budget.invalid_cost", f"--max-cost {text!r} must be >= 0 with at most six decimals")
    return int(amount)


def _record(row: object) -> BudgetRecord:
    return BudgetRecord.from_row(row._mapping)  # type: ignore[attr-defined]


class BudgetStore:
    """The budget records of one ledger."""

    def __init__(self, store: LedgerStore) -> None:
        self._store = store

    def set(
        self,
        tenant_id: str,
        *,
        key_id: str | None = None,
        period: str = "day",
        max_tokens: int | None = None,
        max_cost_micros: int | None = None,
        window_start: str | None = None,
        window_end: str | None = None,
        review: ReviewSpec | None = None,
    ) -> BudgetRecord:
        """Append a budget record (no limits: the scope's budget is cleared). With ``review``, a
        turn the budget leaves no candidate goes to that review instead of being denied."""
        tenant = tenant_id.strip()
        if not tenant:
            raise SpendError("budget.invalid_scope", "a tenant is needed")
        if key_id is not None and not key_id.strip():
            raise SpendError("budget.invalid_scope", "an empty key id")
        if period not in PERIODS:
            raise SpendError("budget.invalid_period", f"period {period!r} is not one of {', '.join(PERIODS)}")
        for name, value in (("max-tokens", max_tokens), ("max-cost", max_cost_micros)):
            if value is not None and value < 0:
                raise SpendError("budget.invalid_limit", f"--{name} must be >= 0")
        start, end = _window(period, window_start, window_end)
        if review is not None and max_tokens is None and max_cost_micros is None:
            raise SpendError("budget.invalid_review", "a review option needs a limit to review over")
        values: dict[str, Any] = {
            "tenant_id": tenant,
            "key_id": key_id,
            "period": period,
            "window_start": start,
            "window_end": end,
            "max_tokens": max_tokens,
            "max_cost_micros": max_cost_micros,
            "set_at": utc_now_iso(),
        }
        columns: dict[str, Any] = {"on_exceed": "deny"}
        if review is not None:
            columns = {
                "on_exceed": "review",
                "review_role": review.role,
                "review_deadline_s": review.deadline_s,
                "review_four_eyes": review.four_eyes,
            }
        with self._store.engine.begin() as conn:
            inserted = conn.execute(insert(budgets).values(**values, **columns)).inserted_primary_key
        extra: dict[str, Any] = {"on_exceed": "review", "review": review} if review is not None else {}
        return BudgetRecord(budget_id=int(inserted[0]), **values, **extra)  # type: ignore[index]

    def history(self, tenant_id: str | None = None) -> list[BudgetRecord]:
        """Every record, oldest first (of one tenant when given)."""
        query = select(budgets).order_by(budgets.c.budget_id)
        if tenant_id is not None:
            query = query.where(budgets.c.tenant_id == tenant_id)
        with self._store.read_connection("budgets") as conn:
            return [_record(row) for row in conn.execute(query)]

    def get(self, budget_id: int) -> BudgetRecord | None:
        with self._store.read_connection("budgets") as conn:
            row = conn.execute(select(budgets).where(budgets.c.budget_id == budget_id)).first()
        return _record(row) if row is not None else None


def _window(period: str, start: str | None, end: str | None) -> tuple[str | None, str | None]:
    if period != "window":
        if start is not None or end is not None:
            raise SpendError("budget.invalid_window", "--from/--until belong to --period window")
        return None, None
    if start is None or end is None:
        raise SpendError("budget.invalid_window", "--period window needs --from and --until")
    try:
        begins, ends = parse_iso(start), parse_iso(end)
    except ValueError as exc:
        raise SpendError("budget.invalid_window", f"not an ISO-8601 time: {exc}") from exc
    if begins >= ends:
        raise SpendError("budget.invalid_window", "--from must be before --until")
    return iso(begins), iso(ends)


def spend_rows(
    conn: Connection, tenant_id: str, position: int, since: str, *, with_keys: bool = True
) -> list[SpendRow]:
    """The tenant's DECISIONs and EXECUTIONs before ``position`` recorded at ``since`` or later,
    each with the key id of its turn's INTENT (``with_keys``; else None: no key budget asks)."""
    found = conn.execute(
        select(
            events.c.index,
            events.c.kind,
            events.c.correlation_id,
            events.c.tenant_id,
            events.c.created_at,
            events.c.payload,
        )
        .where(
            events.c.tenant_id == tenant_id,
            events.c.index < position,
            events.c.kind.in_(_SPEND_KINDS),
            events.c.created_at >= since,
        )
        .order_by(events.c.index)
    ).all()
    keys = _intent_keys(conn, sorted({row.correlation_id for row in found})) if with_keys else {}
    return [
        SpendRow(
            index=int(row._mapping["index"]),
            kind=row._mapping["kind"],
            correlation_id=row.correlation_id,
            tenant_id=row.tenant_id,
            key_id=keys.get(row.correlation_id),
            created_at=row.created_at,
            payload=json.loads(row.payload),
        )
        for row in found
    ]


def _intent_keys(conn: Connection, correlation_ids: Sequence[str]) -> dict[str, str | None]:
    keys: dict[str, str | None] = {}
    for start in range(0, len(correlation_ids), 500):
        chunk = correlation_ids[start : start + 500]
        for row in conn.execute(
            select(events.c.correlation_id, events.c.payload).where(
                events.c.kind == "INTENT", events.c.correlation_id.in_(chunk)
            )
        ):
            principal = json.loads(row.payload).get("principal") or {}
            keys[row.correlation_id] = principal.get("key_id") if isinstance(principal, dict) else None
    return keys


def recount(
    conn: Connection, checks: Iterable[tuple[BudgetRecord, str, str]], tenant_id: str, position: int
) -> dict[int, tuple[Spend, Spend]]:
    """``budget_id -> (settled, reserved)`` counted from the ledger before ``position``."""
    checks = list(checks)
    if not checks:
        return {}
    with_keys = any(budget.key_id is not None for budget, _, _ in checks)
    rows = spend_rows(conn, tenant_id, position, min(start for _, start, _ in checks), with_keys=with_keys)
    return {
        budget.budget_id: count_spend(rows, budget, (start, end), position) for budget, start, end in checks
    }


#: A tenant's budgets (built once: every turn of a tenant asks).
_TENANT_BUDGETS = select(budgets).where(budgets.c.tenant_id == bindparam("tenant_id"))


def spend_snapshot(
    store: LedgerStore, tenant_id: str | None, key_id: str | None, now: datetime
) -> SpendSnapshot | None:
    """The budgets of a turn and what they have spent, read in one snapshot; None when no
    budget applies (the turn then records no budget check)."""
    if tenant_id is None:
        return None
    # Most turns have no budget: one statement built once, without a transaction, tells.
    with store.read_connection("budget check", one_statement=True) as conn:
        found = [_record(row) for row in conn.execute(_TENANT_BUDGETS, {"tenant_id": tenant_id})]
    if not budgets_for(found, tenant_id, key_id):
        return None
    with store.read_connection("budget check") as conn:  # budgets and spend in one snapshot
        records = [_record(row) for row in conn.execute(_TENANT_BUDGETS, {"tenant_id": tenant_id})]
        applying = budgets_for(records, tenant_id, key_id)
        if not applying:
            return None
        last = conn.execute(select(func.max(events.c.index))).scalar()
        position = 0 if last is None else int(last) + 1
        windows = [(budget, *budget_window(budget, now)) for budget in applying]
        counted = recount(conn, windows, tenant_id, position)
    checks = tuple(
        BudgetCheck(
            budget=budget,
            window_start=start,
            window_end=end,
            settled=counted[budget.budget_id][0],
            reserved=counted[budget.budget_id][1],
        )
        for budget, start, end in windows
    )
    return SpendSnapshot(position=position, tenant_id=tenant_id, key_id=key_id, checks=checks)
