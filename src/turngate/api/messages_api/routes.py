"""``POST /v1/messages``: one call is one turn, planned by the Chat Completions planner and
answered as an Anthropic ``message`` (or its stream of events); docs/RESPONSES-AND-MESSAGES.md.
The key may come as Anthropic's ``x-api-key`` header (turngate.security.auth)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from turngate.api.dropin.answer import admission_refusal, serve_turn
from turngate.api.dropin.plan import plan_translated_call
from turngate.api.ingress import read_body
from turngate.api.messages_api.translate import MESSAGES
from turngate.api.messages_api.wire import MessageObject, MessagesWire, anthropic_error
from turngate.api.state import ApiState, api_state
from turngate.core.events import AdmissionError
from turngate.security.auth import request_principal

router = APIRouter(tags=["anthropic"])


@router.post(
    "/v1/messages",
    response_model=None,
    responses={
        200: {"model": MessageObject, "content": {"text/event-stream": {"schema": {"type": "string"}}}}
    },
)
async def create_message(request: Request, state: Annotated[ApiState, Depends(api_state)]) -> Response:
    """Anthropic Messages: one call is one turn (docs/RESPONSES-AND-MESSAGES.md)."""
    settings = state.settings
    principal = request_principal(request)
    try:
        body = await read_body(request, settings.max_body_bytes)
        planned = await plan_translated_call(
            MESSAGES,
            body,
            request.headers,
            settings,
            state.store,
            principal,
        )
    except AdmissionError as exc:
        return anthropic_error(admission_refusal(exc))
    wire = MessagesWire(planned.request, planned.turn)
    return await serve_turn(request, state, principal, planned.turn, wire, stream=bool(planned.chat.stream))
