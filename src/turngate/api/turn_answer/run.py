"""Run a planned turn: admit it through the same path as ``POST /ingress/intent`` and wait for
it on the ledger. What comes out is wire-neutral: a :class:`Refusal`, the recorded EXECUTION, or
(streaming) :class:`Text` pieces and how the turn ended.

A turn the policy sent to human review answers 423 ``review.pending`` once
``TURNGATE_WAIT_TIMEOUT_S`` has passed with no verdict (docs/REVIEWS.md); tool calls of the
client's the gateway refused answer 422, or end a stream with an error (docs/OPENAI.md).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import Response

from turngate.api.admission import RELEASE_MARGIN_S, turn_finished
from turngate.api.ingress import admit_intent
from turngate.api.openai_compat.turn import PlannedTurn
from turngate.api.openai_compat.wire import ChatCompletionRequest
from turngate.api.state import ApiState
from turngate.api.stream import stream_turn_events
from turngate.api.turn_answer.outcomes import (
    REJECTED_TOOL_CALLS_STATUS,
    failure_of,
    rejected_calls,
    rejected_message,
)
from turngate.api.turn_answer.refusals import (
    Refusal,
    denied,
    failed,
    native_refusal,
    review_pending,
    tool_calls_refused,
    wait_timed_out,
)
from turngate.core.events import Event
from turngate.reviews.pending import review_pending_answer


@dataclass(frozen=True)
class Text:
    """Streamed answer text, as the provider sent it."""

    text: str


@dataclass(frozen=True)
class Interrupted:
    """The stream cannot go on (a retried provider call after text was sent, a failed turn,
    refused tool calls)."""

    status: int
    code: str
    message: str


@dataclass(frozen=True)
class Finished:
    """The turn's recorded answer: the stream ends with its tool calls and finish."""

    execution: Event


Piece = Text | Interrupted | Finished


def _decided(events: dict[str, Event]) -> bool:
    return "DECISION" in events


async def run_turn(
    request: Request, state: ApiState, turn: PlannedTurn, chat: ChatCompletionRequest, *, stream: bool
) -> Refusal | Response | Event | None:
    """Admit the turn and wait for it: its EXECUTION, a refusal, None when an allowed stream may
    start, or the bare answer of a client that left while it was admitted."""
    settings = state.settings
    admitted = await admit_intent(request, state, data=turn.envelope)
    if admitted.status_code == 204:  # the client left while the turn was admitted: nobody reads
        return admitted
    if admitted.status_code != 202:
        return native_refusal(admitted)
    deadline = settings.llm_wall_clock_s + RELEASE_MARGIN_S
    ready = _decided if stream else turn_finished
    # Undecided after the wait timeout: a turn waiting for a reviewer answers review.pending.
    first = min(settings.wait_timeout_s, deadline)
    events, done = await state.watcher.wait_turn(turn.key, ready, first)
    if not done and "DECISION" not in events:
        review = await review_pending_answer(state.client, json.loads(bytes(admitted.body))["workflow_id"])
        if review:
            return review_pending(turn, review["review"])
    if not done:
        events, _ = await state.watcher.wait_turn(turn.key, ready, max(deadline - first, 0.0))
    decision = events.get("DECISION")
    if decision is None:
        return wait_timed_out(turn, None)
    if decision.payload.get("decision") != "ALLOW":
        return denied(turn, decision)
    if stream:
        return None
    execution = events.get("EXECUTION")
    if execution is None:
        return wait_timed_out(turn, "ALLOW")
    if execution.payload.get("error"):
        return failed(turn, execution)
    rejected = rejected_calls(execution, chat)
    if rejected:
        return tool_calls_refused(turn, rejected)
    return execution


async def turn_pieces(
    request: Request, state: ApiState, turn: PlannedTurn, chat: ChatCompletionRequest, tenant_id: str | None
) -> AsyncIterator[Piece]:
    """The allowed turn's text as it streams, then how it ended, from the recorded EXECUTION. A
    provider call retried after text was sent cannot be taken back: the stream ends
    (``stream.reset``); so does one whose tool calls were refused (422, as unstreamed)."""
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
        return
    if execution.payload.get("error"):
        yield Interrupted(*failure_of(execution))
        return
    rejected = rejected_calls(execution, chat)
    if rejected:
        yield Interrupted(REJECTED_TOOL_CALLS_STATUS, *rejected_message(rejected))
        return
    yield Finished(execution)
