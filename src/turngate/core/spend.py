"""Governed spend: model aliases with fallback candidates, prices, budgets and the spend plan a
DECISION records. Pure arithmetic, no I/O: the workflow decides with it and ``turngate verify``
recomputes with it (docs/BUDGETS.md).

Money is integer micro-units of the price currency (``cost_micros``): the DECISION payload holds
no floats, and a price per million tokens with up to six decimals is exact. A turn's cost is
rounded up to a whole micro-unit.

Spend is accounting, not context: it is summed from recorded EXECUTION usage (and the
reservations of ALLOWed DECISIONs still waiting for theirs), never shown to the policy.

Past 500 lines on purpose: budgets, counting, admission and the plan are one calculation that
the workflow and verify must run identically; split apart, the two callers could drift.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from turngate.core.events import Event
from turngate.core.model_aliases import (
    DEFAULT_OUTPUT_RESERVE_TOKENS,
    MICROS,
    ModelsConfig,
    Price,
    SpendError,
    models_digest,
)
from turngate.core.review import ReviewSpec
from turngate.core.spend_estimate import ESTIMATE_RULE_REQUEST, intent_tokens

REASON_BUDGET_EXCEEDED = "budget.exceeded"
REASON_PRICE_UNKNOWN = "budget.price_unknown"
#: An EXECUTION ``spend`` entry's ``settled_from`` when the answer came without usage.
SETTLED_FROM_ESTIMATE = "estimate"
Period = Literal["day", "month", "window"]
PERIODS: tuple[str, ...] = ("day", "month", "window")
#: What a budget does with a turn that leaves it no candidate: DENY it (the default), or send it
#: to human review (docs/BUDGETS.md, "Review instead of DENY").
OnExceed = Literal["deny", "review"]
ON_EXCEED: tuple[str, ...] = ("deny", "review")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --------------------------------------------------------------------------- budgets


class Spend(_Frozen):
    tokens: int = 0
    cost_micros: int = 0

    def __add__(self, other: Spend) -> Spend:
        return Spend(tokens=self.tokens + other.tokens, cost_micros=self.cost_micros + other.cost_micros)


class BudgetRecord(_Frozen):
    """One record of the append-only budget table. The latest record of a scope (tenant, key)
    is in effect; a record without limits clears the scope's budget."""

    budget_id: int
    tenant_id: str
    key_id: str | None = None
    period: Period
    window_start: str | None = None  # period "window" only: ISO-8601 UTC
    window_end: str | None = None
    max_tokens: int | None = None
    max_cost_micros: int | None = None
    set_at: str
    on_exceed: OnExceed = "deny"
    review: ReviewSpec | None = None  # on_exceed "review": who may approve, by when

    @model_validator(mode="after")
    def _review_with_its_spec(self) -> BudgetRecord:
        if (self.on_exceed == "review") != (self.review is not None):
            raise ValueError("a budget that sends turns to review has a review spec, and only it")
        return self

    @model_serializer(mode="wrap")
    def _deny_as_before(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A budget that denies records exactly the bytes it did before the review option.
        dumped: dict[str, Any] = handler(self)
        if dumped.get("on_exceed") == "deny":
            dumped.pop("on_exceed", None)
            dumped.pop("review", None)
        return dumped

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> BudgetRecord:
        """A record from its table row (the review spec is kept in three columns)."""
        values = dict(row)
        role, deadline, four_eyes = (
            values.pop(f"review_{n}", None) for n in ("role", "deadline_s", "four_eyes")
        )
        values["on_exceed"] = values.get("on_exceed") or "deny"
        if values["on_exceed"] == "review":
            values["review"] = ReviewSpec(role=role, deadline_s=deadline, four_eyes=bool(four_eyes))
        return cls.model_validate(values)

    @property
    def scope(self) -> tuple[str, str | None]:
        return self.tenant_id, self.key_id

    @property
    def cleared(self) -> bool:
        return self.max_tokens is None and self.max_cost_micros is None


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_iso(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def budget_window(budget: BudgetRecord, now: datetime) -> tuple[str, str]:
    """The budget's period containing ``now`` (UTC calendar day or month, or the fixed window)."""
    now = now.astimezone(UTC)
    if budget.period == "window":
        if budget.window_start is None or budget.window_end is None:
            raise SpendError("budget.invalid", "a window budget needs its start and end")
        return iso(parse_iso(budget.window_start)), iso(parse_iso(budget.window_end))
    start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if budget.period == "day":
        return iso(start), iso(start + timedelta(days=1))
    start = start.replace(day=1)
    end = (
        start.replace(year=start.year + 1, month=1)
        if start.month == 12
        else start.replace(month=start.month + 1)
    )
    return iso(start), iso(end)


def effective_budgets(records: Iterable[BudgetRecord]) -> list[BudgetRecord]:
    """The record in effect per scope (the latest), cleared scopes left out, in scope order."""
    latest: dict[tuple[str, str], BudgetRecord] = {}
    for record in sorted(records, key=lambda r: r.budget_id):
        latest[(record.tenant_id, record.key_id or "")] = record
    return [record for _, record in sorted(latest.items()) if not record.cleared]


def budgets_for(
    records: Iterable[BudgetRecord], tenant_id: str | None, key_id: str | None
) -> list[BudgetRecord]:
    """The budgets a turn of ``tenant_id`` sent with ``key_id`` is checked against."""
    if tenant_id is None:
        return []
    return [r for r in effective_budgets(records) if r.tenant_id == tenant_id and r.key_id in (None, key_id)]


# --------------------------------------------------------------------------- counting spend


@dataclass(frozen=True, slots=True)
class SpendRow:
    """A DECISION or EXECUTION as spend counting reads it (a plain dataclass: a busy tenant's
    period has many of them, and validation is the ledger's business)."""

    index: int
    kind: str
    correlation_id: str
    tenant_id: str | None
    key_id: str | None  # from the turn's INTENT principal
    created_at: str
    payload: dict[str, Any]


def execution_tokens(payload: Mapping[str, Any]) -> int:
    usage = payload.get("usage")
    if not isinstance(usage, Mapping):
        return 0
    return sum(
        value
        for name in ("input_tokens", "output_tokens")
        if isinstance(value := usage.get(name), int) and not isinstance(value, bool)
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def recorded_spend(payload: Mapping[str, Any]) -> tuple[int, int]:
    """What one EXECUTION spent: its usage tokens and its recorded cost (0 without a price); an
    answer whose usage was not reported, what its spend entry settled at (its estimate)."""
    spend = payload.get("spend")
    if isinstance(spend, Mapping) and spend.get("settled_from") == SETTLED_FROM_ESTIMATE:
        return _int(spend.get("tokens")), _int(spend.get("cost_micros"))
    return execution_tokens(payload), _int(spend.get("cost_micros")) if isinstance(spend, Mapping) else 0


def usage_reported(usage: Mapping[str, Any]) -> bool:
    """Whether the provider reported both input and output tokens."""
    return all(
        isinstance(value := usage.get(name), int) and not isinstance(value, bool)
        for name in ("input_tokens", "output_tokens")
    )


def _reserve_of(payload: Mapping[str, Any]) -> tuple[int, int] | None:
    plan = payload.get("spend")
    if payload.get("decision") != "ALLOW" or not isinstance(plan, Mapping):
        return None
    reserve = plan.get("reserve")
    if not isinstance(reserve, Mapping):
        return None
    return _int(reserve.get("tokens")), _int(reserve.get("cost_micros"))


def count_spend(
    rows: Iterable[SpendRow], budget: BudgetRecord, window: tuple[str, str], position: int
) -> tuple[Spend, Spend]:
    """``(settled, reserved)`` for ``budget`` over the ledger before ``position``: the usage of
    the scope's EXECUTIONs recorded in the window, and the reserves of its ALLOWed DECISIONs in
    the window whose EXECUTION is not recorded before ``position``. Plain integer sums: a busy
    tenant's period has many rows."""
    # Both sides are ISO-8601 UTC with microseconds and "Z" (the ledger's own format): they
    # compare as text, in time order.
    start, end = iso(parse_iso(window[0])), iso(parse_iso(window[1]))
    tokens = cost = 0
    reserves: dict[str, tuple[int, int]] = {}
    executed: set[str] = set()
    for row in rows:
        if row.index >= position or row.tenant_id != budget.tenant_id:
            continue
        if budget.key_id is not None and row.key_id != budget.key_id:
            continue
        if row.kind == "EXECUTION":
            executed.add(row.correlation_id)
        if not start <= row.created_at < end:
            continue
        if row.kind == "EXECUTION":
            spent_tokens, spent_cost = recorded_spend(row.payload)
            tokens, cost = tokens + spent_tokens, cost + spent_cost
        elif row.kind == "DECISION" and (reserve := _reserve_of(row.payload)) is not None:
            reserves[row.correlation_id] = reserve
    held = [reserve for cid, reserve in reserves.items() if cid not in executed]
    return (
        Spend(tokens=tokens, cost_micros=cost),
        Spend(tokens=sum(r[0] for r in held), cost_micros=sum(r[1] for r in held)),
    )


# --------------------------------------------------------------------------- the plan


class BudgetCheck(_Frozen):
    """One budget as counted for a turn: up to ledger ``position`` (exclusive)."""

    budget: BudgetRecord
    window_start: str
    window_end: str
    settled: Spend
    reserved: Spend

    @property
    def spent(self) -> Spend:
        return self.settled + self.reserved


class SpendSnapshot(_Frozen):
    """What the ledger said about a turn's budgets when its INTENT was recorded."""

    position: int
    tenant_id: str | None
    key_id: str | None
    checks: tuple[BudgetCheck, ...] = ()


class CandidatePlan(_Frozen):
    candidate: str
    available: bool
    reason: str | None = None  # why it is not available or not admitted
    price: Price | None = None
    estimate: Spend
    admitted: bool
    refused_by: int | None = None  # the budget_id that refused it


class SpendEstimate(_Frozen):
    """How the input estimate was made (rule ``request.utf8/3``: everything sent, in two parts;
    :mod:`turngate.core.spend_estimate`). A plan without it used the first rule: the user
    message's characters / 3."""

    rule: Literal["request.utf8/3"] = ESTIMATE_RULE_REQUEST
    intent_tokens: int = Field(ge=0)
    context_tokens: int = Field(ge=0)

    @property
    def input_tokens(self) -> int:
        return self.intent_tokens + self.context_tokens


class SpendPlan(_Frozen):
    """The DECISION's ``spend`` entry."""

    alias: str | None
    models_digest: str | None
    tenant_id: str | None
    key_id: str | None
    position: int | None  # the ledger position budgets were counted up to (None: no budget)
    estimate_input_tokens: int
    estimate_output_tokens: int
    candidates: tuple[CandidatePlan, ...]
    budgets: tuple[BudgetCheck, ...]
    reserve: Spend
    estimate: SpendEstimate | None = None  # None: the first rule (recorded plans keep their bytes)
    #: The budget (``on_exceed: "review"``) that sent the turn to review: no candidate fitted,
    #: and the admitted ones are those within every other limit (None: no review asked).
    review_by: int | None = None

    @model_serializer(mode="wrap")
    def _without_first_rule_estimate(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        for optional in ("estimate", "review_by"):
            if dumped.get(optional) is None:
                dumped.pop(optional, None)
        return dumped

    def review_budget(self) -> BudgetRecord | None:
        """The budget that asked for review (None: none did)."""
        return next((c.budget for c in self.budgets if c.budget.budget_id == self.review_by), None)

    def admitted(self) -> list[str]:
        return [c.candidate for c in self.candidates if c.admitted]

    def price_of(self, candidate: str) -> Price | None:
        return next((c.price for c in self.candidates if c.candidate == candidate), None)


def key_of(intent: Event) -> str | None:
    """The API key id an INTENT was sent with (its recorded principal), never the secret."""
    principal = intent.payload.get("principal")
    key = principal.get("key_id") if isinstance(principal, Mapping) else None
    return key if isinstance(key, str) else None


def estimate_input_tokens(message: str) -> int:
    """The first rule's estimate (plans without ``estimate``): the user message's characters / 3,
    rounded up. It leaves out everything else that is sent; new plans use :class:`SpendEstimate`."""
    return -(-len(message) // 3)


def cost_micros(price: Price | None, input_tokens: int, output_tokens: int) -> int:
    if price is None:
        return 0
    total = input_tokens * price.input_micros_per_mtok + output_tokens * price.output_micros_per_mtok
    return math.ceil(total / MICROS)


def _refusal(check: BudgetCheck, estimate: Spend, priced: bool, lifted: bool = False) -> str | None:
    budget, spent = check.budget, check.spent
    if budget.max_cost_micros is not None and not priced:
        return REASON_PRICE_UNKNOWN
    if lifted:  # its limits are a review threshold, not a refusal (an unknown price still is)
        return None
    if budget.max_tokens is not None and spent.tokens + estimate.tokens > budget.max_tokens:
        return REASON_BUDGET_EXCEEDED
    if (
        budget.max_cost_micros is not None
        and spent.cost_micros + estimate.cost_micros > budget.max_cost_micros
    ):
        return REASON_BUDGET_EXCEEDED
    return None


def admit(
    candidate: str,
    *,
    available: bool,
    reason: str | None,
    price: Price | None,
    input_tokens: int,
    output_tokens: int,
    checks: Sequence[BudgetCheck],
    lifted: frozenset[int] = frozenset(),
) -> CandidatePlan:
    """One candidate's admission: available, and within every budget with its estimate (the
    ``lifted`` budgets' limits not counted: a turn sent to their review)."""
    estimate = Spend(
        tokens=input_tokens + output_tokens, cost_micros=cost_micros(price, input_tokens, output_tokens)
    )
    if not available:
        return CandidatePlan(
            candidate=candidate,
            available=False,
            reason=reason,
            price=price,
            estimate=estimate,
            admitted=False,
        )
    for check in checks:
        refusal = _refusal(check, estimate, price is not None, check.budget.budget_id in lifted)
        if refusal is not None:
            return CandidatePlan(
                candidate=candidate,
                available=True,
                reason=refusal,
                price=price,
                estimate=estimate,
                admitted=False,
                refused_by=check.budget.budget_id,
            )
    return CandidatePlan(candidate=candidate, available=True, price=price, estimate=estimate, admitted=True)


#: One candidate as admission reads it: (provider:model, available, why not, its price).
CandidateRow = tuple[str, bool, str | None, Price | None]


def admissions(
    rows: Sequence[CandidateRow],
    input_tokens: int,
    output_tokens: int,
    checks: Sequence[BudgetCheck],
    review_allowed: bool = True,
) -> tuple[tuple[CandidatePlan, ...], int | None]:
    """Every candidate's admission, and the budget that sends the turn to review (None: none).

    Review only replaces a DENY: when no candidate fits every budget, the budgets with
    ``on_exceed: "review"`` have their limits lifted and the candidates within all the others are
    admitted for review, by the first of those budgets that refused the first such candidate.
    ``review_allowed`` is False for a turn the policy already sent to review (one review a turn).
    """

    def planned(lifted: frozenset[int]) -> tuple[CandidatePlan, ...]:
        return tuple(
            admit(
                name,
                available=available,
                reason=reason,
                price=price,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                checks=checks,
                lifted=lifted,
            )
            for name, available, reason, price in rows
        )

    strict = planned(frozenset())
    lifted = frozenset(c.budget.budget_id for c in checks if c.budget.on_exceed == "review")
    if any(c.admitted for c in strict) or not lifted or not review_allowed:
        return strict, None
    reviewed = planned(lifted)
    first = next((i for i, c in enumerate(reviewed) if c.admitted), None)
    if first is None:
        return strict, None
    return reviewed, strict[first].refused_by


def reserve_for(candidates: Sequence[CandidatePlan]) -> Spend:
    """What a turn reserves: the largest estimate among its admitted candidates (whichever
    answers, the reservation covers it)."""
    admitted = [c.estimate for c in candidates if c.admitted]
    return Spend(
        tokens=max((e.tokens for e in admitted), default=0),
        cost_micros=max((e.cost_micros for e in admitted), default=0),
    )


def plan_spend(
    *,
    alias: str | None,
    candidates: Sequence[tuple[str, bool, str | None]],
    models: ModelsConfig | None,
    snapshot: SpendSnapshot | None,
    tenant_id: str | None,
    key_id: str | None,
    message: str,
    max_tokens: int | None,
    estimate: SpendEstimate | None = None,
    review_allowed: bool = True,
) -> SpendPlan:
    """The plan for a turn: ``candidates`` are ``(provider:model, available, reason)`` in order.
    ``estimate``: the input estimate of everything sent; without it, the first rule's.
    ``review_allowed``: a budget may send the turn to review (:func:`admissions`)."""
    input_tokens = estimate.input_tokens if estimate is not None else estimate_input_tokens(message)
    output_tokens = max_tokens or (models.output_reserve_tokens if models else DEFAULT_OUTPUT_RESERVE_TOKENS)
    rows = [
        (name, available, reason, models.prices.get(name) if models else None)
        for name, available, reason in candidates
    ]
    checks = snapshot.checks if snapshot else ()
    planned, review_by = admissions(rows, input_tokens, output_tokens, checks, review_allowed)
    return SpendPlan(
        alias=alias,
        models_digest=models_digest(models) if models else None,
        tenant_id=tenant_id,
        key_id=key_id,
        position=snapshot.position if snapshot else None,
        estimate_input_tokens=input_tokens,
        estimate_output_tokens=output_tokens,
        candidates=planned,
        budgets=checks,
        reserve=reserve_for(planned),
        estimate=estimate,
        review_by=review_by,
    )


def budget_denial(plan: SpendPlan) -> dict[str, Any] | None:
    """The DECISION's ``error`` when budgets leave no candidate (None: a candidate is admitted,
    or none was refused by a budget)."""
    if plan.admitted():
        return None
    refused = next((c for c in plan.candidates if c.refused_by is not None), None)
    if refused is None:
        return None
    check = next(c for c in plan.budgets if c.budget.budget_id == refused.refused_by)
    return {
        "code": REASON_BUDGET_EXCEEDED,
        "detail": f"budget {check.budget.budget_id} ({refused.reason}) leaves no candidate of this turn",
        "budget_id": check.budget.budget_id,
        "spent": check.spent.model_dump(mode="json"),
        "position": plan.position,
    }


def recheck_plan(
    plan: SpendPlan,
    recounted: Mapping[int, tuple[Spend, Spend]],
    message: str,
    max_tokens: int | None,
    intent_payload: Mapping[str, Any] | None = None,
    review_allowed: bool = True,
) -> list[str]:
    """Problems between a recorded plan and its recomputation: the spend of each budget
    (``recounted``: budget_id -> (settled, reserved) counted again from the ledger), the
    estimate (from the INTENT, ``intent_payload``, under the rule the plan records), each
    candidate's admission, the budget that asked for review (``review_allowed``: as for
    :func:`admissions`) and the reserve."""
    problems: list[str] = []
    for check in plan.budgets:
        again = recounted.get(check.budget.budget_id)
        if again is None:
            problems.append(f"budget_mismatch: budget {check.budget.budget_id} was not recounted")
        elif again != (check.settled, check.reserved):
            recorded = (check.settled.model_dump(), check.reserved.model_dump())
            problems.append(
                f"budget_mismatch: budget {check.budget.budget_id} recorded (settled, reserved) "
                f"{recorded}, recomputed {(again[0].model_dump(), again[1].model_dump())}"
            )
    problems += _estimate_problems(plan, message, intent_payload)
    if max_tokens is not None and plan.estimate_output_tokens != max_tokens:
        problems.append("budget_mismatch: the recorded output estimate is not the INTENT's max_tokens")
    rows = [
        (c.candidate, c.available, c.reason if not c.available else None, c.price) for c in plan.candidates
    ]
    admitted, review_by = admissions(
        rows, plan.estimate_input_tokens, plan.estimate_output_tokens, plan.budgets, review_allowed
    )
    for candidate, again_candidate in zip(plan.candidates, admitted, strict=True):
        if again_candidate != candidate:
            problems.append(f"budget_mismatch: candidate {candidate.candidate} admission does not recompute")
    if review_by != plan.review_by:
        problems.append(
            f"budget_mismatch: the plan records review by budget {plan.review_by}, recomputed {review_by}"
        )
    if reserve_for(plan.candidates) != plan.reserve:
        problems.append("budget_mismatch: the recorded reserve does not recompute")
    return problems


def _estimate_problems(plan: SpendPlan, message: str, intent_payload: Mapping[str, Any] | None) -> list[str]:
    """The input estimate under the plan's own rule: the first rule recomputes from the message;
    ``request.utf8/3`` recomputes its INTENT part and checks the sum (the part the gateway added
    was counted from configuration and stored texts)."""
    estimate = plan.estimate
    if estimate is None:
        if plan.estimate_input_tokens != estimate_input_tokens(message):
            return ["budget_mismatch: the recorded input estimate is not the INTENT's"]
        return []
    problems = []
    if intent_payload is None or estimate.intent_tokens != intent_tokens(intent_payload):
        problems.append("budget_mismatch: the recorded estimate of what the INTENT sends does not recompute")
    if plan.estimate_input_tokens != estimate.input_tokens:
        problems.append("budget_mismatch: the recorded input estimate is not the sum of its parts")
    return problems


def settle(plan: SpendPlan, candidate: str, usage: Mapping[str, Any], answered: bool) -> dict[str, Any]:
    """What an EXECUTION settles at: the usage the provider reported, priced with the DECISION's
    prices. An answer without reported usage (a compatible server that ignores the usage option)
    settles at no less than its candidate's estimate, marked ``settled_from: "estimate"``, when
    the plan estimated everything sent (plans of the first rule settle as they always did)."""
    input_tokens, output_tokens = _int(usage.get("input_tokens")), _int(usage.get("output_tokens"))
    tokens = input_tokens + output_tokens
    cost = cost_micros(plan.price_of(candidate), input_tokens, output_tokens)
    if plan.estimate is None or not answered or usage_reported(usage):
        return {"tokens": tokens, "cost_micros": cost}
    estimate = next((c.estimate for c in plan.candidates if c.candidate == candidate), Spend())
    return {
        "tokens": max(tokens, estimate.tokens),
        "cost_micros": max(cost, estimate.cost_micros),
        "settled_from": SETTLED_FROM_ESTIMATE,
    }
