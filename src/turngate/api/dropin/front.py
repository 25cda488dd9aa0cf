"""One call through a translated front door (``/v1/responses``, ``/v1/messages``): read the body,
plan it as a Chat Completions call, answer a refusal in the API's own error shape, else serve the
turn in the API's wire format. The routes differ only in those three parts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import Response

from turngate.api.dropin.plan import FrontDoor, plan_translated_call
from turngate.api.ingress import read_body
from turngate.api.openai_compat.turn import PlannedTurn
from turngate.api.state import ApiState
from turngate.api.turn_answer.refusals import Refusal, admission_refusal
from turngate.api.turn_answer.serve import WireFormat, serve_turn
from turngate.core.events import AdmissionError
from turngate.security.auth import request_principal

R = TypeVar("R")


async def serve_front_door(
    request: Request,
    state: ApiState,
    door: FrontDoor[R],
    refuse: Callable[[Refusal], Response],
    wire: Callable[[R, PlannedTurn], WireFormat],
) -> Response:
    """Plan and answer one call of ``door``'s API (docs/RESPONSES-AND-MESSAGES.md)."""
    settings = state.settings
    principal = request_principal(request)
    try:
        body = await read_body(request, settings.max_body_bytes)
        planned: Any = await plan_translated_call(
            door, body, request.headers, settings, state.store, principal
        )
    except AdmissionError as exc:
        return refuse(admission_refusal(exc))
    answer_in = wire(planned.request, planned.turn)
    return await serve_turn(request, state, principal, planned.turn, planned.chat, answer_in)
