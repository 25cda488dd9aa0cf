"""``turngate verify`` for governed spend: every DECISION that records a spend plan has its
budget check recomputed from the ledger up to the recorded position (docs/BUDGETS.md).

Recomputed: each budget record against the budget table, each budget's window, the spend
counted before the position (the same :func:`turngate.ledger.budgets.recount` the worker ran),
the estimate from the INTENT under the rule the plan records, each candidate's admission, the
reserve, the decision the plan implies, and the EXECUTION's candidate and what it settled at.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Connection, select

from turngate.core.events import Event
from turngate.core.model_aliases import (
    SpendError,
    split_candidate,
)
from turngate.core.review import REASON_BUDGET_REVIEW, REVIEW_KEY, ReviewSpec, budget_request
from turngate.core.spend import (
    SETTLED_FROM_ESTIMATE,
    BudgetRecord,
    SpendPlan,
    budget_denial,
    budget_window,
    key_of,
    parse_iso,
    recheck_plan,
    settle,
    usage_reported,
)
from turngate.ledger.budgets import recount
from turngate.ledger.schema import budgets, events


def verify_spend(
    conn: Connection, payload: Mapping[str, Any], intent: Event, decision_index: int
) -> list[str]:
    """Problems with one DECISION's spend plan (none when it records no plan)."""
    raw = payload.get("spend")
    if raw is None:
        return []
    try:
        plan = SpendPlan.model_validate(raw)
    except ValidationError as exc:
        return [f"budget_malformed: the spend plan does not parse: {exc.errors()[0]['msg']}"]
    problems = _scope_problems(plan, intent, decision_index)
    for check in plan.budgets:
        stored = _stored_budget(conn, check.budget.budget_id)
        if stored != check.budget:
            problems.append(f"budget_mismatch: budget {check.budget.budget_id} is not the stored record")
        if _window_problem(check.budget, check.window_start, check.window_end):
            problems.append(f"budget_mismatch: budget {check.budget.budget_id} has a window not its period's")
    if problems:
        return problems
    recounted = (
        recount(
            conn,
            [(c.budget, c.window_start, c.window_end) for c in plan.budgets],
            plan.tenant_id,
            plan.position,
        )
        if plan.tenant_id is not None and plan.position is not None
        else {}
    )
    body = intent.payload.get("payload") or {}
    budget = intent.payload.get("budget") or {}
    # One review a turn: a turn the policy sent to review was planned without a budget's.
    policy_review = REVIEW_KEY in payload and budget_request(payload) is None
    problems += recheck_plan(
        plan,
        recounted,
        str(body.get("message", "")),
        budget.get("max_tokens"),
        intent.payload,
        review_allowed=not policy_review,
    )
    problems += _decision_problems(plan, payload)
    problems += _execution_problems(conn, plan, intent.correlation_id)
    return problems


def _scope_problems(plan: SpendPlan, intent: Event, decision_index: int) -> list[str]:
    problems = []
    if (plan.tenant_id, plan.key_id) != (intent.tenant_id, key_of(intent)):
        problems.append("budget_mismatch: the plan's tenant or key is not the INTENT's")
    if plan.position is not None and not intent.index < plan.position <= decision_index:
        problems.append(
            f"budget_mismatch: position {plan.position} is not between the INTENT and the DECISION"
        )
    if plan.budgets and plan.position is None:
        problems.append("budget_mismatch: budgets counted without a position")
    return problems


def _stored_budget(conn: Connection, budget_id: int) -> BudgetRecord | None:
    row = conn.execute(select(budgets).where(budgets.c.budget_id == budget_id)).first()
    return BudgetRecord.from_row(dict(row._mapping)) if row is not None else None


def _window_problem(budget: BudgetRecord, start: str, end: str) -> bool:
    try:
        return budget_window(budget, parse_iso(start)) != (start, end)
    except (SpendError, ValueError):
        return True


def _review_problems(plan: SpendPlan, payload: Mapping[str, Any]) -> list[str]:
    """A plan whose budget asked for review has that budget's review block, and only it (the
    verdict and the decision it gives are the review check's, core/review.py)."""
    request = budget_request(payload)
    reviewer = plan.review_budget()
    if reviewer is None or reviewer.review is None:
        if request is not None or plan.review_by is not None:
            return ["budget_mismatch: a review by a budget the plan does not send the turn to"]
        return []
    if request is None or request.budget_id != reviewer.budget_id:
        return [
            f"budget_mismatch: budget {reviewer.budget_id} asks for review, the DECISION records none by it"
        ]
    spec = ReviewSpec(role=request.role, deadline_s=request.deadline_s, four_eyes=request.four_eyes)
    if spec != reviewer.review or request.reason_codes[-1] != REASON_BUDGET_REVIEW:
        return [f"budget_mismatch: the review request is not budget {reviewer.budget_id}'s review spec"]
    return []


def _decision_problems(plan: SpendPlan, payload: Mapping[str, Any]) -> list[str]:
    review = _review_problems(plan, payload)
    if review:
        return review
    denial = budget_denial(plan)
    if denial is not None:
        if payload.get("decision") != "DENY" or payload.get("error") != denial:
            return ["budget_mismatch: the plan leaves no candidate but the DECISION is not its DENY"]
        return []
    if payload.get("decision") == "ALLOW":
        provider, model = split_candidate(plan.admitted()[0])
        if (payload.get("provider"), payload.get("resolved_model_id")) != (provider, model):
            return ["budget_mismatch: the DECISION does not start on the first admitted candidate"]
    return []


def _execution_problems(conn: Connection, plan: SpendPlan, correlation_id: str) -> list[str]:
    row = conn.execute(
        select(events.c.payload).where(
            events.c.correlation_id == correlation_id, events.c.kind == "EXECUTION"
        )
    ).first()
    if row is None:
        return []
    execution = json.loads(row.payload)
    spend = execution.get("spend")
    if not isinstance(spend, Mapping):
        return ["budget_mismatch: the EXECUTION of a planned turn records no spend"]
    candidate = spend.get("candidate")
    if candidate not in plan.admitted():
        return [f"budget_mismatch: the EXECUTION ran on {candidate!r}, which the DECISION did not admit"]
    usage = execution.get("usage") if isinstance(execution.get("usage"), Mapping) else {}
    from_estimate = spend.get("settled_from") == SETTLED_FROM_ESTIMATE
    if from_estimate and (plan.estimate is None or usage_reported(usage)):
        return ["budget_mismatch: the EXECUTION settled at its estimate though usage was reported"]
    again = settle(plan, str(candidate), usage, answered=from_estimate)
    recorded = {key: spend.get(key) for key in again}
    if recorded != again:
        return [f"budget_mismatch: the EXECUTION's settlement {recorded} recomputes to {again}"]
    return []
