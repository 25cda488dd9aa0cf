"""The turn's review step: a turn the policy sent to review waits for a person's verdict.

Runs between the decide and the execute steps, and only for a DECISION with a pending review
(:func:`turngate.core.review.pending_request`): every other turn's history is exactly what it
was. The wait is durable and holds nothing: ``workflow.wait_condition`` with the review's
deadline as its timeout is a timer in the turn's history, so the worker may be restarted (or the
workflow evicted from its cache) any number of times while a turn waits for days. The verdict
arrives as the ``review`` update (:class:`ReviewWait` holds what the handler and its validator
need); an update the validator refuses (a second verdict, a reviewer without the role, the
intent's own caller under four-eyes) never enters the history. The decision then becomes the
recorded ALLOW or DENY with its ``review`` block (:func:`turngate.core.review.decided_block`).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from turngate.core.events import Event
    from turngate.core.manifest import build_denied_manifest, build_manifest
    from turngate.core.review import (
        REVIEW_KEY,
        IntentCaller,
        ReviewBlock,
        ReviewRequest,
        ReviewVerdict,
        caller_of,
        decided_block,
        final_outcome,
        pending_request,
        verdict_refusal,
    )
    from turngate.workflows.shared import SA_DECISION, BeginTurnResult, Boundary, ReviewRequested
    from turngate.workflows.turn_activities import notify_review
    from turngate.workflows.turn_decide import TurnDecision

#: The update a verdict is sent as, and the query that shows the pending review.
REVIEW_UPDATE = "review"
REVIEW_QUERY = "pending_review"
#: The memo key of a waiting turn's :class:`PendingReview` (read by GET /reviews).
REVIEW_MEMO = "review"
#: What TurngateDecision says while a turn waits for its verdict (GET /reviews lists these).
PENDING = "REVIEW"
#: The review webhook's delivery: a few attempts within the first minutes of the wait.
WEBHOOK_TIMEOUT = timedelta(seconds=15)
WEBHOOK_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30), maximum_attempts=5
)
#: ``ApplicationError.type`` of a refused verdict (the API's reason codes, docs/ERRORS.md).
NOT_PENDING = "review.not_pending"
ALREADY_DECIDED = "review.already_decided"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class PendingReview(_Model):
    """What a reviewer needs to decide (the ``pending_review`` query's answer)."""

    correlation_id: str
    thread_id: str
    turn_id: str
    tenant_id: str | None
    actor: str
    intent_type: str
    request: ReviewRequest
    requested_at: datetime
    deadline_at: datetime
    context_digest: str | None
    resolved_refs: list[dict[str, Any]]
    provider: str | None
    model: str | None
    manifest: dict[str, Any]  # the DECISION's context manifest as it would be recorded


class ReviewAnswer(_Model):
    """The ``review`` update's answer: the verdict taken (the DECISION follows)."""

    correlation_id: str
    verdict: str


@dataclass
class ReviewWait:
    """The turn's review state, held by TurnWorkflow for its update and query handlers."""

    pending: PendingReview | None = None
    caller: IntentCaller | None = None
    verdict: ReviewVerdict | None = None
    closed: bool = False  # the verdict came or the deadline passed: no other verdict is taken
    notice: asyncio.Task[None] | None = None  # the review webhook's delivery, when configured

    def check(self, verdict: ReviewVerdict) -> None:
        """The update's validator: refuse a verdict that may not be taken (not in history)."""
        if self.verdict is not None or self.closed:
            raise ApplicationError("this review is already decided", type=ALREADY_DECIDED)
        if self.pending is None or self.caller is None:
            raise ApplicationError("this turn is not waiting for a review", type=NOT_PENDING)
        refusal = verdict_refusal(self.pending.request, verdict.approver, self.caller)
        if refusal is not None:
            raise ApplicationError(refusal[1], type=refusal[0])

    def take(self, verdict: ReviewVerdict) -> ReviewAnswer:
        self.check(verdict)  # a second update accepted in the same task is refused here
        self.verdict = verdict
        assert self.pending is not None
        return ReviewAnswer(correlation_id=self.pending.correlation_id, verdict=verdict.verdict)


async def review_turn(decision: TurnDecision, begin: BeginTurnResult, wait: ReviewWait) -> TurnDecision:
    """``decision`` as the verdict settles it; unchanged when it waits for no review."""
    request = pending_request(decision.outcome.record.as_payload())
    if request is None:
        return decision
    verdict = _recorded_verdict(begin.recorded.get("DECISION"), request)
    if verdict is None:
        verdict = await _wait_for_verdict(decision, request, wait, begin.boundary)
    return _decided(decision, request, verdict)


def _recorded_verdict(recorded: Event | None, request: ReviewRequest) -> ReviewVerdict | str | None:
    """The verdict the ledger already holds for this review (a rerun of a turn whose DECISION was
    recorded): never ask twice. ``"timed_out"`` for a recorded expiry."""
    block_json = recorded.payload.get(REVIEW_KEY) if recorded is not None else None
    if block_json is None:
        return None
    block = ReviewBlock.from_payload(block_json)
    if block.request != request or block.verdict is None:
        return None
    if block.verdict == "timed_out" or block.approver is None:
        return "timed_out"
    return ReviewVerdict(verdict=block.verdict, approver=block.approver, comment=block.comment)


async def _notify(pending: PendingReview) -> None:
    """Tell the review webhook; a delivery that keeps failing is logged, the turn waits on."""
    try:
        await workflow.execute_activity(
            notify_review,
            _requested(pending),
            start_to_close_timeout=WEBHOOK_TIMEOUT,
            retry_policy=WEBHOOK_RETRY,
        )
    except ActivityError as exc:
        workflow.logger.warning("the review webhook was not told about %s: %s", pending.correlation_id, exc)


def _requested(pending: PendingReview) -> ReviewRequested:
    return ReviewRequested(
        correlation_id=pending.correlation_id,
        thread_id=pending.thread_id,
        turn_id=pending.turn_id,
        tenant_id=pending.tenant_id,
        actor=pending.actor,
        reason_codes=list(pending.request.reason_codes),
        role=pending.request.role,
        four_eyes=pending.request.four_eyes,
        requested_at=pending.requested_at.isoformat(),
        deadline_at=pending.deadline_at.isoformat(),
    )


async def _wait_for_verdict(
    decision: TurnDecision, request: ReviewRequest, wait: ReviewWait, boundary: Boundary
) -> ReviewVerdict | str:
    intent = decision.intent
    now = workflow.now()
    record = decision.outcome.record
    wait.caller = caller_of(intent.payload, intent.actor, intent.tenant_id)
    wait.pending = PendingReview(
        correlation_id=intent.correlation_id,
        thread_id=intent.thread_id,
        turn_id=intent.turn_id,
        tenant_id=intent.tenant_id,
        actor=intent.actor,
        intent_type=intent.intent_type,
        request=request,
        requested_at=now,
        deadline_at=now + timedelta(seconds=request.deadline_s),
        context_digest=record.context_digest,
        resolved_refs=list(record.resolved_refs),
        provider=decision.model.provider,
        model=decision.model.resolved_model_id,
        manifest=decision.manifest.model_dump(mode="json"),
    )
    # Listed by a visibility query, its details in the memo: no worker needed to list it.
    workflow.upsert_memo({REVIEW_MEMO: wait.pending.model_dump(mode="json")})
    workflow.upsert_search_attributes([SA_DECISION.value_set(PENDING)])
    if boundary.review_webhook:  # a notice beside the wait, which never depends on it
        wait.notice = asyncio.create_task(_notify(wait.pending))
    with contextlib.suppress(TimeoutError):  # the deadline passed: no verdict
        await workflow.wait_condition(
            lambda: wait.verdict is not None, timeout=timedelta(seconds=request.deadline_s)
        )
    wait.closed = True
    return wait.verdict if wait.verdict is not None else "timed_out"


def _decided(decision: TurnDecision, request: ReviewRequest, verdict: ReviewVerdict | str) -> TurnDecision:
    """The decision once reviewed: an approved turn goes on as assembled; any other ends."""
    block = decided_block(request, verdict if isinstance(verdict, ReviewVerdict) else None)
    assert block.verdict is not None
    final, codes = final_outcome(request, block.verdict)
    record = decision.outcome.record.model_copy(
        update={"decision": final, "reason_codes": codes, REVIEW_KEY: block.as_payload()}
    )
    outcome = decision.outcome.recording(record)
    common: dict[str, Any] = {
        "intent": decision.intent,
        "run_id": workflow.info().run_id,
        "step_id": "decision",
        "external": decision.external,
    }
    if final == "ALLOW" and decision.assembly is not None:
        manifest = build_manifest(outcome, decision.assembly, system=decision.system, **common)
        return replace(decision, outcome=outcome, manifest=manifest)
    return replace(
        decision, outcome=outcome, manifest=build_denied_manifest(outcome, **common), assembly=None, call=None
    )
