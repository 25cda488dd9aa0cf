"""GET /turns/{correlation_id}/stream: one turn's answer as SSE (the prompt-assembly pipeline).

Events:

- ``token`` ``{"text", "seq", "attempt"}`` (``id``: the token bus position, for ``Last-Event-ID``)
- ``reset`` ``{"attempt"}``: the text received so far is void (a retried provider attempt started,
  or the stream is being corrected from the ledger: then ``"source": "ledger"``)
- ``redact`` ``{"reason"}``: the EXECUTION is redacted; the client hides the answer
- ``review_pending`` ``{"correlation_id", "turn_id", "reason_codes", "role", "deadline_at", ...}``:
  the turn waits for a reviewer (docs/REVIEWS.md); the stream goes on until it is decided
- ``done``: ``{"phase_transition", "next_phase", "exchanges_count", "correlation_id",
  "execution_index", "error"}`` once the EXECUTION is recorded (``{"debrief_complete": true,
  "correlation_id", "execution_index", "error"}`` for a turn decided under a profile whose
  ``done_event`` is ``"debrief"``), or
  ``{"decision": "DENY", "reason_codes", "correlation_id"}`` for a denied turn

Tokens come from the token bus (a side channel); the end of the turn comes from the ledger (the
record). When the turn is recorded, the text this connection delivered is checked against the
EXECUTION's ``output_text``: if they differ (the bus expired, was trimmed, or a worker streamed
nowhere), a ``reset`` + one ``token`` carrying the recorded text (``"source": "ledger"``) put the
client right. So a client that connects late, or resumes after the bus expired, still ends with
exactly the recorded answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse
from sse_starlette.sse import EventSourceResponse

from turngate.api.error_responses import error_response
from turngate.api.openapi import sse
from turngate.api.state import ApiState, api_state
from turngate.api.watcher import TurnKey, turn_key
from turngate.core.events import Event
from turngate.reviews.pending import review_pending_answer, workflow_id_of
from turngate.security.auth import request_principal
from turngate.security.streams import stream_slots, too_many_streams
from turngate.streaming.base import StreamEvent, TokenSubscriber

log = logging.getLogger(__name__)
router = APIRouter()

STREAM_PING_S = 15
#: How long one ledger wait lasts before it is renewed (the SSE ping keeps the connection alive).
LEDGER_WAIT_SLICE_S = 60.0


def _sse(event: str, data: dict[str, Any], event_id: str | None = None) -> dict[str, str]:
    message = {"event": event, "data": json.dumps(data, ensure_ascii=False)}
    if event_id is not None:
        message["id"] = event_id
    return message


def _by_kind(events: list[Event]) -> dict[str, Event]:
    found: dict[str, Event] = {}
    for event in events:
        found.setdefault(str(event.kind), event)
    return found


def _finished(events: dict[str, Event]) -> bool:
    decision = events.get("DECISION")
    return "EXECUTION" in events or (decision is not None and decision.payload.get("decision") != "ALLOW")


async def find_turn(
    state: ApiState, correlation_id: str, timeout_s: float, tenant_id: str | None = None
) -> list[Event]:
    """The turn's events (ordered by index), waiting up to ``timeout_s`` for its INTENT to be
    recorded (the workflow may not have written it yet); [] when it never appears. With
    ``tenant_id``, another tenant's turn is never found (as if it did not exist)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        generation = state.watcher.generation  # read before the query: no change can slip between
        events = await asyncio.to_thread(state.store.by_correlation, correlation_id, tenant_id=tenant_id)
        if events:
            return events
        remaining = deadline - loop.time()
        if remaining <= 0:
            return []
        await state.watcher.wait_change(generation, remaining)


async def _wait_finished(state: ApiState, key: TurnKey) -> dict[str, Event]:
    while True:
        events, done = await state.watcher.wait_turn(key, _finished, LEDGER_WAIT_SLICE_S)
        if done:
            return events


async def _pump(
    bus: TokenSubscriber, correlation_id: str, after: str | None, queue: asyncio.Queue[Any]
) -> None:
    async for event in bus.subscribe(correlation_id, after=after):
        await queue.put(event)


def _terminal(correlation_id: str, events: dict[str, Event]) -> dict[str, str]:
    decision = events.get("DECISION")
    execution = events.get("EXECUTION")
    if execution is None:
        payload = decision.payload if decision is not None else {}
        return _sse(
            "done",
            {
                "decision": payload.get("decision", "DENY"),
                "reason_codes": list(payload.get("reason_codes", [])),
                "correlation_id": correlation_id,
            },
        )
    payload = execution.payload
    if payload.get("redacted"):
        return _sse("redact", {"reason": (payload.get("redaction") or {}).get("reason_code")})
    ending = {
        "correlation_id": correlation_id,
        "execution_index": execution.index,
        "error": payload.get("error"),
    }
    prompt = (decision.payload.get("prompt") if decision is not None else None) or {}
    if prompt.get("done_event") == "debrief":  # decided under a profile with done_event "debrief"
        return _sse("done", {"debrief_complete": True} | ending)
    return _sse(
        "done",
        {
            "phase_transition": payload.get("phase_transition"),
            "next_phase": payload.get("next_phase"),
            "exchanges_count": payload.get("exchanges_count"),
        }
        | ending,
    )


class _Delivery:
    """What this connection has told the client about the current attempt's text."""

    def __init__(self, resumed_from: str | None) -> None:
        self.cursor = resumed_from
        # A resuming client holds text we did not send (everything up to Last-Event-ID).
        self.prefix_unknown = resumed_from is not None
        self.text: list[str] = []
        self.sent_anything = False

    def render(self, event: StreamEvent) -> dict[str, str] | None:
        self.cursor = event.id
        if event.kind == "reset":
            self.prefix_unknown = False
            self.text.clear()
            self.sent_anything = True
            return _sse("reset", {"attempt": event.attempt}, event.id)
        if event.kind == "token":
            self.text.append(event.text)
            self.sent_anything = True
            return _sse("token", {"text": event.text, "seq": event.seq, "attempt": event.attempt}, event.id)
        return None  # finish / error: the ledger says how the turn ended

    async def client_text(self, bus: TokenSubscriber | None, correlation_id: str) -> str | None:
        """The text the client now holds for the current attempt; None when unknowable."""
        if not self.prefix_unknown:
            return "".join(self.text)
        if bus is None:
            return None
        # Resumed and no reset since: the client holds the current attempt's tokens, all of them
        # (the bus's full current attempt), if the bus still has them.
        full = await bus.read(correlation_id)
        tokens = [e for e in full if e.kind == "token"]
        return "".join(e.text for e in tokens) if tokens else None


async def stream_turn_events(
    state: ApiState,
    correlation_id: str,
    last_event_id: str | None = None,
    *,
    bus: TokenSubscriber | None = None,
    find_timeout_s: float | None = None,
    tenant_id: str | None = None,
) -> AsyncIterator[dict[str, str]]:
    """The turn's SSE messages (dicts for ``EventSourceResponse``), ending after ``done``/``redact``.

    ``bus``: where tokens come from (default: ``state.token_bus`` if the state has one; without a
    bus the answer arrives in one ``token`` once recorded). A turn that is not recorded within
    ``find_timeout_s`` (default ``settings.wait_timeout_s``) yields one ``error`` event with
    ``reason_code: turn.not_found`` (the HTTP endpoint answers 404 before streaming instead).
    ``tenant_id``: the caller's tenant (None: unscoped); another tenant's turn is not found.
    """
    if bus is None:
        bus = getattr(state, "token_bus", None)
    timeout = state.settings.wait_timeout_s if find_timeout_s is None else find_timeout_s
    found = await find_turn(state, correlation_id, timeout, tenant_id)
    if not found:
        yield _sse("error", {"reason_code": "turn.not_found", "correlation_id": correlation_id})
        return
    key = turn_key(found[0])
    cid = found[0].correlation_id
    events = _by_kind(found)

    resume = (last_event_id or "").strip() or None
    after = bus.position(resume) if bus is not None else None
    delivery = _Delivery(after)
    if resume is not None and after is None:
        # A position this bus cannot resume from: the client's text so far is void.
        delivery.sent_anything = True
        yield _sse("reset", {"attempt": 0, "source": "resume"})

    if not _finished(events):
        queue: asyncio.Queue[StreamEvent] = asyncio.Queue()
        ledger = asyncio.create_task(_wait_finished(state, key), name=f"stream-ledger-{cid}")
        pump = None
        if bus is not None:
            pump = asyncio.create_task(_pump(bus, cid, after, queue), name=f"stream-bus-{cid}")
            pump.add_done_callback(_log_pump_failure)
        getter: asyncio.Task[StreamEvent] | None = None
        # A turn without its DECISION may be waiting for a reviewer: said once (docs/REVIEWS.md).
        review = None
        if "DECISION" not in events:
            review = asyncio.create_task(_review_notice(state, found[0]), name=f"stream-review-{cid}")
        try:
            while True:
                if getter is None:
                    getter = asyncio.create_task(queue.get())
                waiting = {getter, ledger} | ({review} if review is not None else set())
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if review is not None and review in done:
                    notice, review = review.result(), None
                    if notice is not None:
                        yield _sse("review_pending", notice)
                if getter in done:
                    message = delivery.render(getter.result())
                    getter = None
                    if message is not None:
                        yield message
                    continue
                if ledger not in done:
                    continue
                events = ledger.result()
                break
        finally:
            for task in (getter, pump, ledger, review):
                if task is not None and not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task

    if "EXECUTION" not in events:  # denied: there is no answer
        yield _terminal(cid, events)
        return
    execution = events["EXECUTION"]
    if execution.payload.get("redacted"):
        yield _terminal(cid, events)
        return
    # Recorded. What the bus holds after our cursor completes the view: the activity's writes end
    # before it returns, so before its EXECUTION is recorded.
    if bus is not None:
        for event in await bus.read(cid, after=delivery.cursor):
            message = delivery.render(event)
            if message is not None:
                yield message
    recorded = str(execution.payload.get("output_text") or "")
    if await delivery.client_text(bus, cid) != recorded:
        if delivery.sent_anything or delivery.prefix_unknown:
            yield _sse("reset", {"attempt": 0, "source": "ledger"})
        if recorded:
            yield _sse("token", {"text": recorded, "seq": 0, "attempt": 0, "source": "ledger"})
    yield _terminal(cid, events)


#: When a turn without its DECISION is asked whether it waits for a reviewer (seconds into the
#: stream; then every 15 s): it reaches its review step moments after its INTENT.
REVIEW_CHECKS_S = (0.2, 0.8, 2.0, 5.0)
REVIEW_CHECK_EVERY_S = 15.0


async def _review_notice(state: ApiState, intent: Event) -> dict[str, Any] | None:
    """The ``review_pending`` event's data once the turn waits for a reviewer (this task is
    cancelled when the turn is recorded first). None when the check itself fails: the notice is
    a courtesy, and the stream's end comes from the ledger, so a failed check never ends it."""
    workflow_id = workflow_id_of(intent, state.settings.workflow_id_prefix)
    checks = iter(REVIEW_CHECKS_S)
    elapsed = 0.0
    while True:
        at = next(checks, elapsed + REVIEW_CHECK_EVERY_S)
        await asyncio.sleep(at - elapsed)
        elapsed = at
        try:
            answer = await review_pending_answer(state.client, workflow_id)
        except Exception:  # Temporal's own errors are answered {}: anything else is logged once
            log.exception("the review check of %s failed; the stream goes on without it", workflow_id)
            return None
        if answer:
            notice: dict[str, Any] = answer["review"]
            return notice


def _log_pump_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning(
            "token bus subscription failed; the answer will come from the ledger: %s", task.exception()
        )


@router.get(
    "/turns/{correlation_id}/stream",
    response_model=None,
    response_class=EventSourceResponse,
    responses=sse("`token`, `reset`, then `done` or `redact`"),
)
async def turn_stream(
    request: Request,
    correlation_id: str,
    state: Annotated[ApiState, Depends(api_state)],
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse | JSONResponse:
    """The turn's answer as SSE: live tokens, then ``done`` (or ``redact``); resumable with
    ``Last-Event-ID``; the whole answer for a client that connects late. 404 ``turn.not_found``
    at once when no such turn (of the caller's tenant) is recorded: nothing waits on an id
    nobody may ever send, so unknown ids hold neither a connection nor a stream slot."""
    principal = request_principal(request)
    tenant = principal.tenant_id
    if not await find_turn(state, correlation_id, 0, tenant):
        return error_response(
            404,
            "turn.not_found",
            f"no turn with correlation_id {correlation_id!r} is recorded (a turn is found once "
            "POST /ingress/intent has answered 202 with its index)",
        )
    streams = stream_slots(request)
    if not await streams.try_acquire_async(principal.limit_key):
        return too_many_streams(streams.per_key)
    bus: TokenSubscriber | None = getattr(request.app.state, "token_bus", None)
    messages = stream_turn_events(
        state, correlation_id, last_event_id, bus=bus, find_timeout_s=0, tenant_id=tenant
    )
    return EventSourceResponse(streams.hold(principal.limit_key, messages), ping=STREAM_PING_S)
