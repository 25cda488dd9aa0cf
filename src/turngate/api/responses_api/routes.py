"""``POST /v1/responses``: one call is one turn, planned by the Chat Completions planner and
answered as a ``response`` (or its stream of events); docs/RESPONSES-AND-MESSAGES.md."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from turngate.api.dropin.answer import admission_refusal, serve_turn
from turngate.api.dropin.plan import plan_translated_call
from turngate.api.ingress import read_body
from turngate.api.openai_compat.wire import openai_error
from turngate.api.responses_api.translate import RESPONSES
from turngate.api.responses_api.wire import ResponseObject, ResponsesWire
from turngate.api.state import ApiState, api_state
from turngate.core.events import AdmissionError
from turngate.security.auth import request_principal

router = APIRouter(tags=["openai"])


@router.post(
    "/v1/responses",
    response_model=None,
    responses={
        200: {"model": ResponseObject, "content": {"text/event-stream": {"schema": {"type": "string"}}}}
    },
)
async def create_response(request: Request, state: Annotated[ApiState, Depends(api_state)]) -> Response:
    """OpenAI Responses: one call is one turn (docs/RESPONSES-AND-MESSAGES.md)."""
    settings = state.settings
    principal = request_principal(request)
    try:
        body = await read_body(request, settings.max_body_bytes)
        planned = await plan_translated_call(
            RESPONSES,
            body,
            request.headers,
            settings,
            state.store,
            principal,
        )
    except AdmissionError as exc:
        refusal = admission_refusal(exc)
        return openai_error(refusal.status, refusal.code, refusal.message, param=refusal.param)
    wire = ResponsesWire(planned.request, planned.turn)
    return await serve_turn(request, state, principal, planned.turn, wire, stream=bool(planned.chat.stream))
