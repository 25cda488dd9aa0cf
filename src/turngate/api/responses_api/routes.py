"""``POST /v1/responses``: one call is one turn, planned by the Chat Completions planner and
answered as a ``response`` (or its stream of events); docs/RESPONSES-AND-MESSAGES.md."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from turngate.api.dropin.front import serve_front_door
from turngate.api.responses_api.translate import RESPONSES
from turngate.api.responses_api.wire import ResponseObject, ResponsesWire
from turngate.api.state import ApiState, api_state
from turngate.api.turn_answer.refusals import openai_refusal

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
    return await serve_front_door(request, state, RESPONSES, openai_refusal, ResponsesWire)
