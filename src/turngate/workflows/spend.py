"""Governed spend inside the turn workflow: which candidates a turn may run on (recorded in the
DECISION's ``spend`` entry), and the fallback loop that tries them in order (recorded in the
EXECUTION's ``spend`` entry). The arithmetic is :mod:`turngate.core.spend`; docs/BUDGETS.md.

A turn that names no alias and has no budget gets neither entry and runs exactly as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from turngate.core.assembly import Assembly
    from turngate.core.decision import DecisionOutcome
    from turngate.core.events import IntentEnvelope
    from turngate.core.model_aliases import (
        ModelsConfig,
        split_candidate,
    )
    from turngate.core.model_resolution import (
        PROVIDER_MISSING_CREDENTIALS,
        PROVIDER_UNKNOWN,
        ModelResolution,
        ProviderCatalog,
        resolve_model,
    )
    from turngate.core.payloads import ExecutionPayload
    from turngate.core.provider_errors import FALLBACK_CODES
    from turngate.core.review import budget_block
    from turngate.core.spend import (
        REASON_BUDGET_EXCEEDED,
        SpendEstimate,
        SpendPlan,
        budget_denial,
        key_of,
        plan_spend,
        settle,
    )
    from turngate.core.spend_estimate import intent_tokens, sent_tokens
    from turngate.workflows.decision_record import message_artifact
    from turngate.workflows.patches import GOVERNED_SPEND, SPEND_COUNTS_REQUEST
    from turngate.workflows.shared import BeginTurnResult, Boundary, ProviderCallInput, ProviderCallResult

#: Provider attempts of the last candidate (Temporal retries); earlier ones get one attempt each,
#: since the next candidate is their retry.
LAST_CANDIDATE_ATTEMPTS = 3

Candidate = tuple[str, bool, str | None]
#: One provider attempt on one candidate: the answer (None when the call failed) and its EXECUTION.
Attempt = tuple[ProviderCallResult | None, ExecutionPayload]
RunCandidate = Callable[[ProviderCallInput, ModelResolution, int], Awaitable[Attempt]]


@dataclass(frozen=True)
class Route:
    """What the requested model id names: an alias of the models file, or one model."""

    alias: str | None
    candidates: tuple[Candidate, ...]


def models_of(boundary: Boundary) -> ModelsConfig | None:
    return ModelsConfig.model_validate(boundary.models) if boundary.models else None


def _candidate(candidate: str, catalog: ProviderCatalog) -> Candidate:
    provider, _ = split_candidate(candidate)
    entry = catalog.get(provider)
    if entry is None:
        return candidate, False, PROVIDER_UNKNOWN
    return candidate, entry.configured, None if entry.configured else PROVIDER_MISSING_CREDENTIALS


def resolve_route(requested: str | None, boundary: Boundary) -> tuple[ModelResolution, Route]:
    """The model a turn starts on and its candidates. An alias resolves to its first available
    candidate; anything else resolves exactly as :func:`resolve_model`."""
    catalog = ProviderCatalog.model_validate(boundary.provider_catalog)
    models = models_of(boundary)
    name = requested.strip() if requested else ""
    if models is None or name not in models.aliases:
        model = resolve_model(requested, catalog)
        single = (
            ((f"{model.provider}:{model.resolved_model_id}", model.ok, model.reason_code),)
            if model.provider and model.resolved_model_id
            else ()
        )
        return model, Route(alias=None, candidates=single)
    candidates = tuple(_candidate(c, catalog) for c in models.aliases[name])
    return _model_for(requested, candidates), Route(alias=name, candidates=candidates)


def _model_for(requested: str | None, candidates: tuple[Candidate, ...]) -> ModelResolution:
    chosen = next((c for c in candidates if c[1]), None)
    if chosen is None:
        provider, model = split_candidate(candidates[0][0])
        return ModelResolution(
            provider=provider,
            requested_model_id=requested,
            resolved_model_id=model,
            reason_code=candidates[0][2],
            ok=False,
        )
    provider, model = split_candidate(chosen[0])
    return ModelResolution(provider=provider, requested_model_id=requested, resolved_model_id=model, ok=True)


def _governed(outcome: DecisionOutcome, route: Route, begin: BeginTurnResult) -> bool:
    return outcome.allowed and (begin.spend is not None or route.alias is not None)


def govern(
    outcome: DecisionOutcome,
    model: ModelResolution,
    route: Route,
    begin: BeginTurnResult,
    envelope: IntentEnvelope,
) -> tuple[DecisionOutcome, ModelResolution, SpendPlan | None]:
    """The spend plan of a turn recorded before everything sent was counted: its estimate is the
    user message alone. A turn recorded since is planned after assembly, by :func:`govern_request`
    (no plan here)."""
    if not _governed(outcome, route, begin) or not workflow.patched(GOVERNED_SPEND):
        return outcome, model, None
    if workflow.patched(SPEND_COUNTS_REQUEST):
        return outcome, model, None
    return _planned(outcome, model, route, begin, envelope, None)


def govern_request(
    outcome: DecisionOutcome,
    model: ModelResolution,
    route: Route,
    begin: BeginTurnResult,
    envelope: IntentEnvelope,
    assembly: Assembly,
    tools: list[dict[str, Any]],
) -> tuple[DecisionOutcome, ModelResolution, SpendPlan | None]:
    """The spend plan of an ALLOWed turn with an alias or a budget, its input estimate counted
    over the assembled request (``tools``: the definitions offered), recorded in the DECISION
    under ``spend``; DENY ``budget.exceeded`` when budgets leave no candidate, before anything is
    sent, or, for a budget with ``on_exceed: "review"``, a pending review (the DECISION's
    ``review`` block names the budget). The turn then starts on its first admitted candidate."""
    if not _governed(outcome, route, begin) or not workflow.patched(SPEND_COUNTS_REQUEST):
        return outcome, model, None
    own = intent_tokens(begin.intent.payload)
    sent = sent_tokens(assembly, tools, message_artifact(envelope))
    estimate = SpendEstimate(intent_tokens=own, context_tokens=max(sent - own, 0))
    return _planned(outcome, model, route, begin, envelope, estimate)


def _planned(
    outcome: DecisionOutcome,
    model: ModelResolution,
    route: Route,
    begin: BeginTurnResult,
    envelope: IntentEnvelope,
    estimate: SpendEstimate | None,
) -> tuple[DecisionOutcome, ModelResolution, SpendPlan]:
    intent = begin.intent
    # One review a turn: a turn the policy sent to review is denied by a budget it passes.
    policy_review = outcome.record.review is not None
    plan = plan_spend(
        alias=route.alias,
        candidates=route.candidates,
        models=models_of(begin.boundary),
        snapshot=begin.spend,
        tenant_id=intent.tenant_id,
        key_id=key_of(intent),
        message=envelope.message,
        max_tokens=envelope.payload.budget.max_tokens if envelope.payload.budget else None,
        estimate=estimate,
        review_allowed=not policy_review,
    )
    record = outcome.record.model_copy(update={"spend": plan.model_dump(mode="json")})
    reviewer = plan.review_budget()
    if reviewer is not None and reviewer.review is not None:  # waits for a person (turn_review.py)
        block = budget_block(tuple(record.reason_codes), reviewer.review, reviewer.budget_id)
        record = record.model_copy(update={"review": block})
    denial = budget_denial(plan)
    if denial is not None:
        return outcome.recording(record.denied(REASON_BUDGET_EXCEEDED, denial)), model, plan
    provider, name = split_candidate(plan.admitted()[0])
    model = model.model_copy(update={"provider": provider, "resolved_model_id": name})
    if record.plan is not None:  # the DECISION names the candidate the turn starts on
        record = record.model_copy(
            update={"plan": record.plan.model_copy(update={"provider": provider, "resolved_model_id": name})}
        )
    return outcome.recording(record), model, plan


async def execute_plan(
    plan: SpendPlan, call: ProviderCallInput, model: ModelResolution, run: RunCandidate
) -> Attempt:
    """Try the admitted candidates in order; move on only after a retryable error or timeout.
    The EXECUTION's ``spend`` names the candidate that answered, why each earlier one failed,
    and what it settles at (:func:`turngate.core.spend.settle`)."""
    admitted = plan.admitted()
    failed: list[dict[str, Any]] = []
    attempt: Attempt | None = None
    candidate = admitted[0]
    for position, candidate in enumerate(admitted):
        provider, name = split_candidate(candidate)
        last = position == len(admitted) - 1
        attempt = await run(
            call.model_copy(update={"provider": provider, "model": name}),
            model.model_copy(update={"provider": provider, "resolved_model_id": name}),
            LAST_CANDIDATE_ATTEMPTS if last else 1,
        )
        error = attempt[1].error
        if error and not last and error.get("code") in FALLBACK_CODES:
            failed.append(
                {"candidate": candidate, "code": error["code"], "status_code": error.get("status_code")}
            )
            continue
        break
    assert attempt is not None  # a plan admits at least one candidate (else the turn was denied)
    answer, payload = attempt
    spend = {"alias": plan.alias, "candidate": candidate, "failed": failed}
    spend |= settle(plan, candidate, payload.usage or {}, answered=answer is not None)
    return answer, payload.model_copy(update={"spend": spend})
