"""`GET /reviews`, `GET /reviews/{correlation_id}`, `POST /reviews/{correlation_id}/approve|deny`.

The turns waiting for a person's verdict (docs/REVIEWS.md), for keys with the ``review`` role
(or admin). A key scoped to a tenant sees and decides its own tenant's turns only: another
tenant's turn is 404, as if it did not exist. The waiting turn itself is the source of truth:
what it waits for is in its memo (read without a worker, :mod:`turngate.reviews.pending`), and
it takes a verdict through the ``review`` update, whose validator refuses a second verdict
(409), a reviewer without the spec's role or, under four-eyes, the intent's own caller (403).
Nothing is decided here that the workflow did not accept, and a refused verdict leaves no trace
in the turn's history.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from turngate.api.error_responses import error_response
from turngate.api.state import ApiState, api_state
from turngate.artifacts.store import aput
from turngate.core.events import Event, EventKind
from turngate.core.review import (
    FORBIDDEN_ROLE,
    FOUR_EYES,
    MAX_COMMENT_CHARS,
    WRONG_TENANT,
    Approver,
    ReviewVerdict,
)
from turngate.reviews.pending import pending_review, pending_reviews, workflow_id_of
from turngate.security.auth import request_principal
from turngate.security.principal import Principal
from turngate.workflows.turn import TurnWorkflow
from turngate.workflows.turn_review import (
    ALREADY_DECIDED,
    NOT_PENDING,
    PendingReview,
)

log = logging.getLogger(__name__)
router = APIRouter()

#: A verdict's update, which a worker must take (after a worker crash, once the dead worker's
#: sticky queue timed out: 10 s): 503 past it.
UPDATE_TIMEOUT = timedelta(seconds=30)
COMMENT_KIND = "review_comment"

#: HTTP status of each refusal the workflow's validator gives (docs/ERRORS.md).
REFUSAL_STATUS = {
    WRONG_TENANT: 404,
    FORBIDDEN_ROLE: 403,
    FOUR_EYES: 403,
    ALREADY_DECIDED: 409,
    NOT_PENDING: 409,
}


class VerdictBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    comment: str | None = Field(None, max_length=MAX_COMMENT_CHARS)


def _intent(state: ApiState, correlation_id: str, tenant_id: str | None) -> Event | None:
    found = state.store.by_correlation(correlation_id, tenant_id=tenant_id)
    return next((event for event in found if event.kind == EventKind.INTENT), None)


def _turn_events(state: ApiState, correlation_id: str, tenant_id: str | None) -> dict[str, Event]:
    return {str(e.kind): e for e in state.store.by_correlation(correlation_id, tenant_id=tenant_id)}


def _workflow_id(state: ApiState, intent: Event) -> str:
    return workflow_id_of(intent, state.settings.workflow_id_prefix)


def _view(review: PendingReview, intent: Event | None) -> dict[str, Any]:
    """A pending review as the API shows it: the request, the turn and the INTENT's message."""
    body = review.model_dump(mode="json")
    now = datetime.now(UTC)
    body["age_s"] = max(0, round((now - review.requested_at).total_seconds()))
    body["state"] = "pending"
    body["message"] = _message(intent)
    return body


def _message(intent: Event | None) -> str | None:
    inner = intent.payload.get("payload") if intent is not None else None
    message = inner.get("message") if isinstance(inner, dict) else None
    return message if isinstance(message, str) else None


def _not_found(correlation_id: str) -> JSONResponse:
    return error_response(404, "review.not_found", f"no review of turn {correlation_id!r} in your tenant")


class ReviewListBody(BaseModel):
    """``GET /reviews``: the pending turns (each as ``GET /reviews/{correlation_id}`` shows it)."""

    model_config = ConfigDict(extra="allow")
    reviews: list[dict[str, Any]]


class ReviewBody(BaseModel):
    """One turn's review: ``state`` pending (what it waits for: the message, the review spec, the
    resolved refs, the manifest) or decided (the DECISION's review block); after a verdict, the
    recorded outcome. docs/REVIEWS.md lists every field."""

    model_config = ConfigDict(extra="allow")
    correlation_id: str
    state: str | None = None


@router.get("/reviews", response_model=None, responses={200: {"model": ReviewListBody}})
async def list_reviews(request: Request, state: Annotated[ApiState, Depends(api_state)]) -> dict[str, Any]:
    """The turns of the caller's tenant waiting for a verdict, oldest first, with each turn's
    message, the review it waits for, its resolved refs and its context manifest."""
    tenant = request_principal(request).tenant_id
    reviews = await pending_reviews(state.client, state.settings.workflow_id_prefix, tenant)
    intents = await asyncio.gather(
        *(asyncio.to_thread(_intent, state, review.correlation_id, tenant) for review in reviews)
    )
    return {"reviews": [_view(review, intent) for review, intent in zip(reviews, intents, strict=True)]}


@router.get("/reviews/{correlation_id}", response_model=None, responses={200: {"model": ReviewBody}})
async def show_review(
    correlation_id: Annotated[str, Path(max_length=200)],
    request: Request,
    state: Annotated[ApiState, Depends(api_state)],
) -> dict[str, Any] | JSONResponse:
    """One turn's review: pending (what it waits for), or decided (its DECISION's review block)."""
    tenant = request_principal(request).tenant_id
    events = await asyncio.to_thread(_turn_events, state, correlation_id, tenant)
    intent = events.get("INTENT")
    if intent is None:
        return _not_found(correlation_id)
    decision = events.get("DECISION")
    if decision is not None:
        if "review" not in decision.payload:
            return _not_found(correlation_id)
        return {
            "state": "decided",
            "correlation_id": correlation_id,
            "message": _message(intent),
            "decision": decision.payload.get("decision"),
            "reason_codes": decision.payload.get("reason_codes"),
            "review": decision.payload["review"],
            "decision_index": decision.index,
        }
    try:
        review = await pending_review(state.client, _workflow_id(state, intent))
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return _not_found(correlation_id)
        return _unavailable(exc)
    if review is None:
        return _not_found(correlation_id)
    return _view(review, intent)


@router.post("/reviews/{correlation_id}/approve", response_model=None, responses={200: {"model": ReviewBody}})
async def approve_review(
    correlation_id: Annotated[str, Path(max_length=200)],
    body: VerdictBody,
    request: Request,
    state: Annotated[ApiState, Depends(api_state)],
) -> dict[str, Any] | JSONResponse:
    """Approve the turn: it is recorded as ALLOW with this review and goes on to its model."""
    return await _decide(state, request, correlation_id, "approve", body.comment)


@router.post("/reviews/{correlation_id}/deny", response_model=None, responses={200: {"model": ReviewBody}})
async def deny_review(
    correlation_id: Annotated[str, Path(max_length=200)],
    body: VerdictBody,
    request: Request,
    state: Annotated[ApiState, Depends(api_state)],
) -> dict[str, Any] | JSONResponse:
    """Deny the turn: it is recorded as DENY ``review.denied`` and never reaches a model."""
    return await _decide(state, request, correlation_id, "deny", body.comment)


def approver_of(principal: Principal) -> Approver:
    return Approver(
        key_id=principal.key_id, tenant_id=principal.tenant_id, roles=tuple(sorted(principal.roles))
    )


async def _decide(
    state: ApiState,
    request: Request,
    correlation_id: str,
    verdict: Literal["approve", "deny"],
    comment: str | None,
) -> dict[str, Any] | JSONResponse:
    principal = request_principal(request)
    events = await asyncio.to_thread(_turn_events, state, correlation_id, principal.tenant_id)
    intent = events.get("INTENT")
    if intent is None:
        return _not_found(correlation_id)
    if "DECISION" in events:
        return _decided(events["DECISION"], correlation_id)
    pointer = None
    if comment:
        stored = await aput(
            state.artifacts, comment.encode(), kind=COMMENT_KIND, media_type="text/plain; charset=utf-8"
        )
        pointer = stored.recorded()
    handle = state.client.get_workflow_handle(_workflow_id(state, intent))
    taken = ReviewVerdict(verdict=verdict, approver=approver_of(principal), comment=pointer)
    try:
        answer = await handle.execute_update(TurnWorkflow.review, taken, rpc_timeout=UPDATE_TIMEOUT)
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        code = cause.type if isinstance(cause, ApplicationError) and cause.type else NOT_PENDING
        status = REFUSAL_STATUS.get(code, 409)
        detail = cause.message if isinstance(cause, ApplicationError) else str(exc)
        if status == 404:
            return _not_found(correlation_id)
        return error_response(status, code, detail)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:  # the turn ended meanwhile (or never waited)
            events = await asyncio.to_thread(_turn_events, state, correlation_id, principal.tenant_id)
            if "DECISION" in events:
                return _decided(events["DECISION"], correlation_id)
            return _not_found(correlation_id)
        return _unavailable(exc)
    return {
        "ok": True,
        "correlation_id": answer.correlation_id,
        "verdict": answer.verdict,
        "comment": pointer,
    }


def _decided(decision: Event, correlation_id: str) -> JSONResponse:
    if "review" not in decision.payload:
        return error_response(409, NOT_PENDING, f"turn {correlation_id!r} was decided without a review")
    return error_response(
        409,
        ALREADY_DECIDED,
        f"turn {correlation_id!r} is already decided: {decision.payload.get('decision')} "
        f"({decision.payload['review'].get('verdict')})",
    )


def _unavailable(exc: RPCError) -> JSONResponse:
    log.warning("review: the workflow service did not answer: %s", exc)
    return error_response(
        503, "temporal.unavailable", "the turn's workflow did not answer (is a worker running?); retry"
    )
