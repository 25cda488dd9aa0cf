"""The error answers of a turn, before any wire format: a :class:`Refusal` holds the HTTP
status, turngate's reason code, a message and the headers; each front door renders it in its
API's error shape (OpenAI's ``{"error": {...}}``, Anthropic's ``{"type": "error", ...}``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from fastapi.responses import JSONResponse, Response

from turngate.api.error_responses import ADMISSION_STATUS
from turngate.api.openai_compat.turn import PlannedTurn
from turngate.api.openai_compat.wire import openai_error
from turngate.api.turn_answer.outcomes import (
    NO_RETRY,
    OUTPUT_CHECK_HEADER,
    REASON_HEADER,
    REJECTED_TOOL_CALLS_STATUS,
    RETRY_AFTER_S,
    REVIEW_PENDING_STATUS,
    failure_of,
    rejected_message,
)
from turngate.core.events import AdmissionError, Event
from turngate.core.header_values import encode_header_id


@dataclass(frozen=True)
class Refusal:
    """An error answer, before any wire format: HTTP status, reason code, message."""

    status: int
    code: str
    message: str
    param: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


def openai_refusal(refusal: Refusal) -> JSONResponse:
    """``refusal`` in OpenAI's error shape (Chat Completions and Responses)."""
    return openai_error(
        refusal.status, refusal.code, refusal.message, param=refusal.param, headers=refusal.headers or None
    )


def turn_headers(turn: PlannedTurn, decision: str | None) -> dict[str, str]:
    """The headers that name the turn. Ids are percent-encoded: any id the API accepts fits in a
    header (a header that cannot be encoded would turn a recorded turn into a 500, which the SDKs
    retry as a new call)."""
    headers = {
        "X-Turngate-Thread": encode_header_id(turn.thread_id),
        "X-Turngate-Turn": encode_header_id(turn.correlation_id),
        "X-Turngate-Correlation-Id": encode_header_id(turn.correlation_id),
    }
    if decision:
        headers["X-Turngate-Decision"] = decision
    return headers


def answer_headers(turn: PlannedTurn, execution: Event) -> dict[str, str]:
    """The headers of an answered turn (with the structured-output check, when there was one)."""
    headers = turn_headers(turn, "ALLOW")
    check = execution.payload.get("output_check")
    if isinstance(check, dict):
        headers[OUTPUT_CHECK_HEADER] = "valid" if check.get("valid") else "invalid"
    return headers


def _recorded_outcome(turn: PlannedTurn, decision: str, code: str) -> dict[str, str]:
    """The headers of an error that is the turn's recorded outcome: a retry (the same request,
    the same turn) would get it again, so the SDKs are told not to retry."""
    return turn_headers(turn, decision) | {REASON_HEADER: code} | NO_RETRY


def admission_refusal(exc: AdmissionError) -> Refusal:
    """A malformed request: 400 for these clients (413 and 409 as on ingress; the native API
    says 422 for some of them)."""
    return Refusal(ADMISSION_STATUS.get(exc.reason_code, 400), exc.reason_code, exc.detail, exc.field)


def native_refusal(response: Response) -> Refusal:
    """A refusal of the native admission path (its status and reason code)."""
    body = json.loads(bytes(response.body))
    retry = response.headers.get("retry-after")
    return Refusal(
        response.status_code,
        str(body.get("reason_code") or "admission.refused"),
        str(body.get("detail") or "refused"),
        body.get("field"),
        {"Retry-After": retry} if retry else {},
    )


def denied(turn: PlannedTurn, decision: Event) -> Refusal:
    codes = [str(code) for code in decision.payload.get("reason_codes") or []] or ["policy.denied"]
    detail = (decision.payload.get("error") or {}).get("detail")
    message = f"turngate denied this turn: {', '.join(codes)}" + (f" ({detail})" if detail else "")
    return Refusal(403, codes[0], message, headers=_recorded_outcome(turn, "DENY", codes[0]))


def failed(turn: PlannedTurn, execution: Event) -> Refusal:
    status, code, message = failure_of(execution)
    headers = _recorded_outcome(turn, "ALLOW", code)
    if status in (429, 503):
        headers["Retry-After"] = RETRY_AFTER_S
    return Refusal(status, code, message, headers=headers)


def tool_calls_refused(turn: PlannedTurn, rejected: list[dict[str, Any]]) -> Refusal:
    """422: the model's tool calls were not admitted (recorded in the EXECUTION's
    ``tool_calls_rejected``; never dropped silently)."""
    code, message = rejected_message(rejected)
    return Refusal(REJECTED_TOOL_CALLS_STATUS, code, message, headers=_recorded_outcome(turn, "ALLOW", code))


def review_pending(turn: PlannedTurn, review: dict[str, Any]) -> Refusal:
    """423 ``review.pending``: the turn waits for a reviewer; the same call again (the same
    ``Idempotency-Key``) answers with the turn's result once it is decided."""
    message = (
        f"turn {turn.correlation_id} waits for a reviewer (until {review['deadline_at']}); send the same "
        "request with the same Idempotency-Key again to get its answer once it is decided"
    )
    return Refusal(REVIEW_PENDING_STATUS, "review.pending", message, headers=turn_headers(turn, None))


def wait_timed_out(turn: PlannedTurn, decision: str | None) -> Refusal:
    """504: the turn is still running (a retry waits for it)."""
    if decision:
        message = "the turn did not finish in time"
    else:
        message = "the turn was admitted but not decided in time"
    return Refusal(504, "turn.wait_timed_out", message, headers=turn_headers(turn, decision))


def too_many_streams(per_key: int) -> Refusal:
    message = f"{per_key} streams are open for this key; close one first"
    return Refusal(429, "rate.too_many_streams", message, headers={"Retry-After": RETRY_AFTER_S})
