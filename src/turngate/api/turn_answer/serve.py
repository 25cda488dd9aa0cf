"""Serve a planned turn in a front door's wire format: a :class:`WireFormat` renders the
wire-neutral outcome of :mod:`~turngate.api.turn_answer.run`; :func:`serve_turn` holds one of
the key's stream slots while a stream is open."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from turngate.api.openai_compat.turn import PlannedTurn
from turngate.api.openai_compat.wire import ChatCompletionRequest
from turngate.api.state import ApiState
from turngate.api.turn_answer.refusals import Refusal, answer_headers, too_many_streams, turn_headers
from turngate.api.turn_answer.run import Piece, run_turn, turn_pieces
from turngate.core.events import Event
from turngate.security.principal import Principal
from turngate.security.streams import stream_slots


class WireFormat(Protocol):
    def error(self, refusal: Refusal) -> Response: ...

    def answer(self, execution: Event, headers: dict[str, str]) -> Response: ...

    def frames(self, pieces: AsyncIterator[Piece]) -> AsyncIterator[str]: ...


async def serve_turn(
    request: Request,
    state: ApiState,
    principal: Principal,
    turn: PlannedTurn,
    chat: ChatCompletionRequest,
    wire: WireFormat,
) -> Response:
    """Run ``turn`` (planned from ``chat``) and answer it in ``wire``'s format. One way out for
    the stream slot: the stream response takes it over, every other answer (an exception
    included) gives it back."""
    stream = chat.streamed
    streams = stream_slots(request)
    if stream and not await streams.try_acquire_async(principal.limit_key):
        return wire.error(too_many_streams(streams.per_key))
    try:
        outcome = await run_turn(request, state, turn, chat, stream=stream)
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
        return wire.answer(outcome, answer_headers(turn, outcome))
    frames = wire.frames(turn_pieces(request, state, turn, chat, principal.tenant_id))
    return StreamingResponse(
        streams.hold(principal.limit_key, frames),
        media_type="text/event-stream",
        headers=turn_headers(turn, "ALLOW") | {"Cache-Control": "no-cache"},
    )
