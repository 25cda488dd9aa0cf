"""``POST /v1/messages``: one call is one turn, planned by the Chat Completions planner and
answered as an Anthropic ``message`` (or its stream of events); docs/RESPONSES-AND-MESSAGES.md.
The key may come as Anthropic's ``x-api-key`` header (turngate.security.auth)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from turngate.api.dropin.front import serve_front_door
from turngate.api.messages_api.translate import MESSAGES
from turngate.api.messages_api.wire import MessageObject, MessagesWire, anthropic_error
from turngate.api.state import ApiState, api_state

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
    return await serve_front_door(request, state, MESSAGES, anthropic_error, MessagesWire)
