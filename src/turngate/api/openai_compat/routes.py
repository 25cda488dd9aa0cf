"""``POST /v1/chat/completions`` and ``GET /v1/models``: the OpenAI SDK's calls, as turns.

A call is admitted like ``POST /ingress/intent`` (same checks, limits, slots, workflow), then
answered from the ledger: the recorded EXECUTION becomes the ``chat.completion`` (or the stream
of ``chat.completion.chunk`` frames), a DENY a 403 error whose ``code`` is the reason code, a
provider failure 429/500/503. Headers name the turn: ``X-Turngate-Thread``, ``-Turn``,
``-Correlation-Id``, ``-Decision`` (ids percent-encoded UTF-8: docs/OPENAI.md).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from turngate.api.ingress import read_body
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
    tool_calls_of,
    usage_of,
)
from turngate.api.openapi import ChatCompletion, ModelList, chat_request_body
from turngate.api.state import ApiState, api_state
from turngate.api.turn_answer.refusals import Refusal, admission_refusal, openai_refusal
from turngate.api.turn_answer.run import Interrupted, Piece, Text
from turngate.api.turn_answer.serve import serve_turn
from turngate.core.events import AdmissionError, Event
from turngate.security.auth import request_principal

router = APIRouter(tags=["openai"])


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
        return openai_refusal(admission_refusal(exc))
    return await serve_turn(request, state, principal, turn, chat, ChatCompletionsWire(chat, turn))


class ChatCompletionsWire:
    """Renders one call's answer in Chat Completions' format (``chat`` as sent, ``turn`` as
    planned)."""

    def __init__(self, chat: ChatCompletionRequest, turn: PlannedTurn) -> None:
        self.chat = chat
        self.turn = turn

    def error(self, refusal: Refusal) -> Response:
        return openai_refusal(refusal)

    def answer(self, execution: Event, headers: dict[str, str]) -> Response:
        return JSONResponse(completion_body(execution, self.chat.model), headers=headers)

    async def frames(self, pieces: AsyncIterator[Piece]) -> AsyncIterator[str]:
        """The turn's tokens as ``chat.completion.chunk`` frames; the end (tool calls, finish
        reason, usage) from the recorded EXECUTION. What cannot be taken back in this format (a
        provider attempt retried after text was sent, refused tool calls) ends the stream with an
        error frame."""
        cid, created, model = self.turn.correlation_id, int(time.time()), self.chat.model
        yield chunk_frame(cid, model, created, {"role": "assistant", "content": ""})
        async for piece in pieces:
            if isinstance(piece, Text):
                yield chunk_frame(cid, model, created, {"content": piece.text})
                continue
            if isinstance(piece, Interrupted):
                yield error_frame(piece.status, piece.code, piece.message)
                return
            execution = piece.execution
            model = model_of(execution, self.chat.model)
            calls = tool_calls_of(execution)
            if calls:
                delta = {"tool_calls": [{"index": i} | c for i, c in enumerate(calls)]}
                yield chunk_frame(cid, model, created, delta)
            yield chunk_frame(cid, model, created, {}, finish=finish_reason(execution))
            if self.chat.include_usage:
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
