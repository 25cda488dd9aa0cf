"""Run a planned turn and answer it, in any front door's wire format.

The turn is admitted through the same path as ``POST /ingress/intent`` (and
``/v1/chat/completions``) and waited for on the ledger, as the Chat Completions route does. What
comes out is wire-neutral: a :class:`Refusal` (the HTTP status, turngate's reason code, a
message, headers), the recorded EXECUTION, or (streaming) :class:`Text` pieces and how the turn
ended. A :class:`WireFormat` renders them; :func:`serve_turn` holds the key's stream slot while a
stream is open, as the Chat Completions route does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from turngate.api.admission import RELEASE_MARGIN_S, turn_finished
from turngate.api.error_responses import ADMISSION_STATUS
from turngate.api.ingress import admit_intent
from turngate.api.openai_compat.routes import (
    NO_RETRY,
    OUTPUT_CHECK_HEADER,
    REASON_HEADER,
    RETRY_AFTER_S,
    execution_error_status,
)
from turngate.api.openai_compat.turn import PlannedTurn
from turngate.api.state import ApiState
from turngate.api.stream import stream_turn_events
from turngate.core.events import AdmissionError, Event
from turngate.core.header_values import encode_header_id
from turngate.security.principal import Principal
from turngate.security.streams import stream_slots


@dataclass(frozen=True)
class Refusal:
    """An error answer, before any wire format: HTTP status, reason code, message."""

    status: int
    code: str
    message: str
    param: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Text:
    """Streamed answer text, as the provider sent it."""

    text: str


@dataclass(frozen=True)
class Interrupted:
    """The stream cannot go on (a retried provider call after text was sent, a failed turn)."""

    status: int
    code: str
    message: str


@dataclass(frozen=True)
class Finished:
    """The turn's recorded answer: the stream ends with its tool calls and finish."""

    execution: Event


Piece = Text | Interrupted | Finished


class WireFormat(Protocol):
    def error(self, refusal: Refusal) -> Response: ...

    def answer(self, execution: Event, headers: dict[str, str]) -> Response: ...

    def frames(self, pieces: AsyncIterator[Piece]) -> AsyncIterator[str]: ...


def turn_headers(turn: PlannedTurn, decision: str | None) -> dict[str, str]:
    """The headers that name the turn (ids percent-encoded, as on ``/v1/chat/completions``)."""
    headers = {
        "X-Turngate-Thread": encode_header_id(turn.thread_id),
        "X-Turngate-Turn": encode_header_id(turn.correlation_id),
        "X-Turngate-Correlation-Id": encode_header_id(turn.correlation_id),
    }
    if decision:
        headers["X-Turngate-Decision"] = decision
    return headers


def admission_refusal(exc: AdmissionError) -> Refusal:
    """A malformed request: 400 (413 and 409 as on ingress)."""
    return Refusal(ADMISSION_STATUS.get(exc.reason_code, 400), exc.reason_code, exc.detail, exc.field)


def _native_refusal(response: Response) -> Refusal:
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


def _denied(turn: PlannedTurn, decision: Event) -> Refusal:
    codes = [str(code) for code in decision.payload.get("reason_codes") or []] or ["policy.denied"]
    detail = (decision.payload.get("error") or {}).get("detail")
    message = f"turngate denied this turn: {', '.join(codes)}" + (f" ({detail})" if detail else "")
    return Refusal(403, codes[0], message, headers=_recorded_outcome(turn, "DENY", codes[0]))


def failure_of(execution: Event) -> tuple[int, str, str]:
    """A failed EXECUTION's HTTP status, reason code and message (as on /v1/chat/completions)."""
    error = execution.payload.get("error") or {}
    code = str(error.get("code") or "provider.error")
    return execution_error_status(code), code, str(error.get("message") or error.get("detail") or code)


def _recorded_outcome(turn: PlannedTurn, decision: str, code: str) -> dict[str, str]:
    """The headers of an error that is the turn's recorded outcome: a retry (the same request,
    the same turn) would get it again, so the SDKs are told not to retry (as on
    ``/v1/chat/completions``)."""
    return turn_headers(turn, decision) | {REASON_HEADER: code} | NO_RETRY


def _answer_headers(turn: PlannedTurn, execution: Event) -> dict[str, str]:
    headers = turn_headers(turn, "ALLOW")
    check = execution.payload.get("output_check")
    if isinstance(check, dict):
        headers[OUTPUT_CHECK_HEADER] = "valid" if check.get("valid") else "invalid"
    return headers


def _failed(turn: PlannedTurn, execution: Event) -> Refusal:
    status, code, message = failure_of(execution)
    headers = _recorded_outcome(turn, "ALLOW", code)
    if status in (429, 503):
        headers["Retry-After"] = RETRY_AFTER_S
    return Refusal(status, code, message, headers=headers)


def _decided(events: dict[str, Event]) -> bool:
    return "DECISION" in events


async def run_turn(
    request: Request, state: ApiState, turn: PlannedTurn, *, stream: bool
) -> Refusal | Response | Event | None:
    """Admit the turn and wait for it: its EXECUTION, a refusal, None when an allowed stream may
    start, or the bare answer of a client that left while it was admitted."""
    admitted = await admit_intent(request, state, data=turn.envelope)
    if admitted.status_code == 204:  # the client left: nobody reads the answer
        return admitted
    if admitted.status_code != 202:
        return _native_refusal(admitted)
    deadline = state.settings.llm_wall_clock_s + RELEASE_MARGIN_S
    events, _ = await state.watcher.wait_turn(turn.key, _decided if stream else turn_finished, deadline)
    decision = events.get("DECISION")
    if decision is None:
        message = "the turn was admitted but not decided in time"
        return Refusal(504, "turn.wait_timed_out", message, headers=turn_headers(turn, None))
    if decision.payload.get("decision") != "ALLOW":
        return _denied(turn, decision)
    if stream:
        return None
    execution = events.get("EXECUTION")
    if execution is None:
        message = "the turn did not finish in time"
        return Refusal(504, "turn.wait_timed_out", message, headers=turn_headers(turn, "ALLOW"))
    if execution.payload.get("error"):
        return _failed(turn, execution)
    return execution


async def turn_pieces(
    request: Request, state: ApiState, turn: PlannedTurn, tenant_id: str | None
) -> AsyncIterator[Piece]:
    """The allowed turn's text as it streams, then how it ended (as /v1/chat/completions streams:
    a provider call retried after text was sent cannot be taken back, so the stream ends)."""
    cid, sent = turn.correlation_id, False
    async for message in stream_turn_events(
        state, cid, None, bus=request.app.state.token_bus, tenant_id=tenant_id
    ):
        kind, data = message.get("event"), json.loads(message.get("data") or "{}")
        if kind == "token" and data.get("text"):
            sent = True
            yield Text(data["text"])
        elif kind == "reset" and sent:
            yield Interrupted(503, "stream.reset", "the provider call was retried after text was sent; retry")
            return
        elif kind == "error":
            yield Interrupted(500, str(data.get("reason_code")), "the turn could not be streamed")
            return
    recorded = {
        str(e.kind): e for e in await asyncio.to_thread(state.store.by_correlation, cid, tenant_id=tenant_id)
    }
    execution = recorded.get("EXECUTION")
    if execution is None:
        yield Interrupted(500, "turn.not_found", "the turn has no recorded answer")
    elif execution.payload.get("error"):
        yield Interrupted(*failure_of(execution))
    else:
        yield Finished(execution)


def too_many_streams(per_key: int) -> Refusal:
    message = f"{per_key} streams are open for this key; close one first"
    return Refusal(429, "rate.too_many_streams", message, headers={"Retry-After": RETRY_AFTER_S})


async def serve_turn(
    request: Request,
    state: ApiState,
    principal: Principal,
    turn: PlannedTurn,
    wire: WireFormat,
    *,
    stream: bool,
) -> Response:
    """Run ``turn`` and answer it in ``wire``'s format (a stream holds one of the key's stream
    slots until it ends; every other answer, an exception included, gives it back)."""
    streams = stream_slots(request)
    if stream and not await streams.try_acquire_async(principal.limit_key):
        return wire.error(too_many_streams(streams.per_key))
    try:
        outcome = await run_turn(request, state, turn, stream=stream)
    except BaseException:
        if stream:
            streams.release_nowait(principal.limit_key)
        raise
    if outcome is not None and stream:
        streams.release_nowait(principal.limit_key)
    if isinstance(outcome, Response):
        return outcome
    if isinstance(outcome, Refusal):
        return wire.error(outcome)
    if isinstance(outcome, Event):
        return wire.answer(outcome, _answer_headers(turn, outcome))
    frames = wire.frames(turn_pieces(request, state, turn, principal.tenant_id))
    return StreamingResponse(
        streams.hold(principal.limit_key, frames),
        media_type="text/event-stream",
        headers=turn_headers(turn, "ALLOW") | {"Cache-Control": "no-cache"},
    )


def sse_frame(event: str, data: dict[str, Any]) -> str:
    """One named Server-Sent Event (both APIs name their events)."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
