"""``POST /v1/chat/completions`` and ``GET /v1/models``: the OpenAI SDK's calls, as turns.

A call is admitted like ``POST /ingress/intent`` (same checks, limits, slots, workflow), then
answered from the ledger: the recorded EXECUTION becomes the ``chat.completion`` (or the stream
of ``chat.completion.chunk`` frames), a DENY a 403 error whose ``code`` is the reason code, a
provider failure 429/500/503. Headers name the turn: ``X-Turngate-Thread``, ``-Turn``,
``-Correlation-Id``, ``-Decision`` (ids percent-encoded UTF-8: docs/OPENAI.md).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from turngate.api.admission import RELEASE_MARGIN_S, turn_finished
from turngate.api.error_responses import ADMISSION_STATUS
from turngate.api.ingress import admit_intent, read_body
from turngate.api.openai_compat.plan import plan_call
from turngate.api.openai_compat.turn import PlannedTurn
from turngate.api.openai_compat.wire import (
    DONE_FRAME,
    ChatCompletionRequest,
    chunk_frame,
    completion_body,
    error_frame,
    finish_reason,
    model_of,
    openai_error,
    tool_calls_of,
    usage_of,
)
from turngate.api.openapi import ChatCompletion, ModelList, chat_request_body
from turngate.api.state import ApiState, api_state
from turngate.api.stream import stream_turn_events
from turngate.core.events import AdmissionError, Event
from turngate.core.header_values import encode_header_id
from turngate.reviews.pending import review_pending_answer
from turngate.security.auth import request_principal
from turngate.security.streams import stream_slots

router = APIRouter(tags=["openai"])

#: Provider error codes answered 429 / 503 (with Retry-After); the vendor's other refusals keep
#: their 4xx status; anything else is our own fault, a 500 (docs/OPENAI.md, "Errors").
RATE_LIMITED = frozenset({"provider.rate_limited"})
UNAVAILABLE = frozenset(
    {
        "llm.timeout",
        "provider.timeout",
        "provider.overloaded",
        "provider.connection",
        "SYSTEM_ERROR",
    }
)
#: The vendor refused the request as malformed: the client's request, answered with the status.
CLIENT_FAULTS = {
    "provider.bad_request": 400,
    "provider.unsupported_parameter": 400,
    "provider.not_found": 404,
    "provider.request_too_large": 413,
    "provider.unprocessable": 422,
    "provider.client_error": 400,
}
#: The vendor failed, or refused the gateway's own credentials: not the client's fault.
BAD_GATEWAY = frozenset(
    {"provider.server_error", "provider.auth", "provider.missing_credentials", "provider.invalid_response"}
)
RETRY_AFTER_S = "1"
#: The model made tool calls the gateway did not admit (docs/OPENAI.md, "Tool calls").
REJECTED_TOOL_CALLS_STATUS = 422
REASON_HEADER = "X-Turngate-Reason-Code"
#: On a recorded outcome (a DENY, a failed call, refused tool calls): a retry of the same
#: request finds the same recorded turn, so the OpenAI SDK is told not to retry (it honours
#: ``x-should-retry``); a turn still running (504) is worth a retry, which waits for it.
NO_RETRY = {"x-should-retry": "false"}
OUTPUT_CHECK_HEADER = "X-Turngate-Output-Check"


def execution_error_status(code: str) -> int:
    if code in RATE_LIMITED:
        return 429
    if code in UNAVAILABLE:
        return 503
    if code in CLIENT_FAULTS:
        return CLIENT_FAULTS[code]
    if code in BAD_GATEWAY:
        return 502
    return 500


def rejected_calls(execution: Event, chat: ChatCompletionRequest) -> list[dict[str, Any]]:
    """The model's calls the gateway refused to forward that the client must hear of (never
    dropped silently: the answer becomes a 422 naming them): calls to the client's own tools, and
    calls to tools nobody offered. A prompt pack's tool called badly is the pack's business
    (recorded, as on every endpoint)."""
    rejected = execution.payload.get("tool_calls_rejected")
    if not isinstance(rejected, list):
        return []
    client_tools = {tool.function.name for tool in chat.tools or ()}
    return [
        call
        for call in rejected
        if isinstance(call, dict)
        and (call.get("name") in client_tools or call.get("reason_code") == "tool.not_offered")
    ]


def rejected_message(rejected: list[dict[str, Any]]) -> tuple[str, str]:
    """(code, message) of an answer whose tool calls were refused."""
    code = str(rejected[0].get("reason_code") or "tool.invalid_arguments")
    parts = [f"{call.get('name')!r} ({call.get('reason_code')}: {call.get('detail')})" for call in rejected]
    return code, "the model's tool calls were not admitted: " + "; ".join(parts)


def _turn_headers(turn: PlannedTurn, decision: str | None) -> dict[str, str]:
    # Ids are percent-encoded: any id the API accepts fits in a header (a header that cannot be
    # encoded would turn a recorded turn into a 500, which the SDK retries as a new call).
    headers = {
        "X-Turngate-Thread": encode_header_id(turn.thread_id),
        "X-Turngate-Turn": encode_header_id(turn.correlation_id),
        "X-Turngate-Correlation-Id": encode_header_id(turn.correlation_id),
    }
    if decision:
        headers["X-Turngate-Decision"] = decision
    return headers


def _admission_error(exc: AdmissionError) -> JSONResponse:
    # Malformed requests are 400 for OpenAI clients (the native API says 422 for some of them).
    status = ADMISSION_STATUS.get(exc.reason_code, 400)
    return openai_error(status, exc.reason_code, exc.detail, param=exc.field)


def _from_native_error(response: Response) -> JSONResponse:
    """A refusal of the native admission path, in OpenAI's error shape (same status and code)."""
    body = json.loads(bytes(response.body))
    headers = {"Retry-After": response.headers["retry-after"]} if "retry-after" in response.headers else None
    return openai_error(
        response.status_code,
        str(body.get("reason_code") or "admission.refused"),
        str(body.get("detail") or "refused"),
        param=body.get("field"),
        headers=headers,
    )


def _decided(events: dict[str, Event]) -> bool:
    return "DECISION" in events


def _denied(turn: PlannedTurn, decision: Event) -> JSONResponse:
    codes = [str(code) for code in decision.payload.get("reason_codes") or []] or ["policy.denied"]
    detail = (decision.payload.get("error") or {}).get("detail")
    message = f"turngate denied this turn: {', '.join(codes)}" + (f" ({detail})" if detail else "")
    headers = _turn_headers(turn, "DENY") | {REASON_HEADER: codes[0]} | NO_RETRY
    return openai_error(403, codes[0], message, headers=headers)


def _failed(turn: PlannedTurn, execution: Event) -> JSONResponse:
    error = execution.payload.get("error") or {}
    code = str(error.get("code") or "provider.error")
    status = execution_error_status(code)
    headers = _turn_headers(turn, "ALLOW") | {REASON_HEADER: code} | NO_RETRY
    if status in (429, 503):
        headers["Retry-After"] = RETRY_AFTER_S
    return openai_error(
        status, code, str(error.get("message") or error.get("detail") or code), headers=headers
    )


@router.post(
    "/v1/chat/completions",
    response_model=None,
    responses={
        200: {"model": ChatCompletion, "content": {"text/event-stream": {"schema": {"type": "string"}}}}
    },
    openapi_extra=chat_request_body(),
)
async def chat_completions(request: Request, state: Annotated[ApiState, Depends(api_state)]) -> Response:
    """OpenAI Chat Completions: one call is one turn (docs/OPENAI.md)."""
    settings = state.settings
    principal = request_principal(request)
    try:
        body = await read_body(request, settings.max_body_bytes)
        chat, turn = await plan_call(body, request.headers, settings, state.store, principal)
    except AdmissionError as exc:
        return _admission_error(exc)
    streams = stream_slots(request)
    if chat.stream and not await streams.try_acquire_async(principal.limit_key):
        return openai_error(
            429,
            "rate.too_many_streams",
            f"{streams.per_key} streams are open for this key; close one first",
            headers={"Retry-After": RETRY_AFTER_S},
        )
    # One way out for the stream slot: the stream response takes it over, every other answer
    # (an exception included) gives it back.
    try:
        answer = await _answer(request, state, turn, chat)
    except BaseException:
        if chat.stream:
            streams.release_nowait(principal.limit_key)
        raise
    if isinstance(answer, Response):
        if chat.stream:
            streams.release_nowait(principal.limit_key)
        return answer
    frames = _completion_stream(request, state, turn, chat, principal.tenant_id)
    return StreamingResponse(
        streams.hold(principal.limit_key, frames),
        media_type="text/event-stream",
        headers=_turn_headers(turn, "ALLOW") | {"Cache-Control": "no-cache"},
    )


async def _answer(
    request: Request, state: ApiState, turn: PlannedTurn, chat: ChatCompletionRequest
) -> Response | None:
    """Admit the turn and wait for it: the answer, or None when an allowed stream may start."""
    settings = state.settings
    admitted = await admit_intent(request, state, data=turn.envelope)
    if admitted.status_code == 204:  # the client left while the turn was admitted: nobody reads
        return admitted
    if admitted.status_code != 202:
        return _from_native_error(admitted)
    deadline = settings.llm_wall_clock_s + RELEASE_MARGIN_S
    ready = _decided if chat.stream else turn_finished
    # A turn waiting for a reviewer answers review.pending after the wait timeout (docs/REVIEWS.md)
    first = min(settings.wait_timeout_s, deadline)
    events, done = await state.watcher.wait_turn(turn.key, ready, first)
    if not done and "DECISION" not in events:
        review = await review_pending_answer(state.client, json.loads(bytes(admitted.body))["workflow_id"])
        if review:
            return _review_pending(turn, review["review"])
    if not done:
        events, _ = await state.watcher.wait_turn(turn.key, ready, max(deadline - first, 0.0))
    decision = events.get("DECISION")
    denied = decision is not None and decision.payload.get("decision") != "ALLOW"
    if decision is None:
        return openai_error(
            504,
            "turn.wait_timed_out",
            "the turn was admitted but not decided in time",
            headers=_turn_headers(turn, None),
        )
    if denied:
        return _denied(turn, decision)
    if chat.stream:
        return None
    execution = events.get("EXECUTION")
    if execution is None:
        return openai_error(
            504,
            "turn.wait_timed_out",
            "the turn did not finish in time",
            headers=_turn_headers(turn, "ALLOW"),
        )
    if execution.payload.get("error"):
        return _failed(turn, execution)
    rejected = rejected_calls(execution, chat)
    if rejected:
        code, message = rejected_message(rejected)
        headers = _turn_headers(turn, "ALLOW") | {REASON_HEADER: code} | NO_RETRY
        return openai_error(REJECTED_TOOL_CALLS_STATUS, code, message, headers=headers)
    return JSONResponse(completion_body(execution, chat.model), headers=_answer_headers(turn, execution))


def _answer_headers(turn: PlannedTurn, execution: Event) -> dict[str, str]:
    headers = _turn_headers(turn, "ALLOW")
    check = execution.payload.get("output_check")
    if isinstance(check, dict):
        headers[OUTPUT_CHECK_HEADER] = "valid" if check.get("valid") else "invalid"
    return headers


def _review_pending(turn: PlannedTurn, review: dict[str, Any]) -> JSONResponse:
    """423 ``review.pending``: the turn waits for a reviewer; the same call again (the same
    ``Idempotency-Key``) answers with the turn's result once it is decided."""
    # 423, not 409: OpenAI's SDKs retry a 409 on their own, each retry waiting again.
    return openai_error(
        423,
        "review.pending",
        f"turn {turn.correlation_id} waits for a reviewer (until {review['deadline_at']}); send the same "
        "request with the same Idempotency-Key again to get its answer once it is decided",
        headers=_turn_headers(turn, None),
    )


async def _completion_stream(
    request: Request, state: ApiState, turn: PlannedTurn, chat: ChatCompletionRequest, tenant_id: str | None
) -> AsyncIterator[str]:
    """The turn's tokens as ``chat.completion.chunk`` frames; the end (tool calls, finish reason,
    usage) from the recorded EXECUTION. A retried provider attempt after text was sent cannot be
    taken back in this format: the stream then ends with an error frame (``stream.reset``)."""
    cid, created, model = turn.correlation_id, int(time.time()), chat.model
    yield chunk_frame(cid, model, created, {"role": "assistant", "content": ""})
    sent = False
    async for message in stream_turn_events(
        state, cid, None, bus=request.app.state.token_bus, tenant_id=tenant_id
    ):
        kind, data = message.get("event"), json.loads(message.get("data") or "{}")
        if kind == "token" and data.get("text"):
            sent = True
            yield chunk_frame(cid, model, created, {"content": data["text"]})
        elif kind == "reset" and sent:
            yield error_frame(503, "stream.reset", "the provider call was retried after text was sent; retry")
            return
        elif kind == "error":
            yield error_frame(500, str(data.get("reason_code")), "the turn could not be streamed")
            return
    recorded = {
        str(e.kind): e for e in await asyncio.to_thread(state.store.by_correlation, cid, tenant_id=tenant_id)
    }
    execution = recorded.get("EXECUTION")
    if execution is None:
        yield error_frame(500, "turn.not_found", "the turn has no recorded answer")
        return
    error = execution.payload.get("error")
    if error:
        code = str(error.get("code") or "provider.error")
        yield error_frame(execution_error_status(code), code, str(error.get("message") or code))
        return
    rejected = rejected_calls(execution, chat)
    if rejected:
        yield error_frame(REJECTED_TOOL_CALLS_STATUS, *rejected_message(rejected))
        return
    model = model_of(execution, chat.model)
    calls = tool_calls_of(execution)
    if calls:
        yield chunk_frame(
            cid, model, created, {"tool_calls": [{"index": i} | c for i, c in enumerate(calls)]}
        )
    yield chunk_frame(cid, model, created, {}, finish=finish_reason(execution))
    if chat.include_usage:
        yield chunk_frame(cid, model, created, None, usage=usage_of(execution))
    yield DONE_FRAME


@router.get("/v1/models", response_model=None, responses={200: {"model": ModelList}})
def list_models(state: Annotated[ApiState, Depends(api_state)]) -> dict[str, Any]:
    """The models this gateway offers (the configured providers of ``/capabilities``)."""
    catalog = state.boundary.provider_catalog
    data = [
        {"id": model, "object": "model", "created": 0, "owned_by": provider.name}
        for provider in catalog.providers
        if provider.configured
        for model in provider.models
    ]
    # Model aliases of the models file, each tried over its candidates (docs/BUDGETS.md).
    aliases = state.boundary.models.aliases if state.boundary.models else {}
    data += [
        {"id": alias, "object": "model", "created": 0, "owned_by": "turngate"} for alias in sorted(aliases)
    ]
    return {"object": "list", "data": data}
