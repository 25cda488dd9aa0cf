"""POST /ingress/intent: validate, start the turn workflow, answer once the INTENT is durable."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable
from datetime import timedelta
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette.sse import EventSourceResponse
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from turngate.api.admission import RELEASE_MARGIN_S, TurnAdmission, TurnSlots, turn_finished
from turngate.api.cpu_pool import in_cpu_process, in_cpu_thread
from turngate.api.disk_guard import LedgerDiskGuard
from turngate.api.error_responses import admission_response, error_response
from turngate.api.intent_size import check_intent_fits, fit_intent
from turngate.api.ledger_outage import LedgerOutage
from turngate.api.openapi import IntentAccepted, JobAccepted, intent_request_body, sse
from turngate.api.state import ApiState, api_state
from turngate.api.stream import stream_turn_events
from turngate.api.turn_metadata import turn_details, turn_memo, turn_summary
from turngate.api.watcher import TurnKey, TurnWait, turn_key
from turngate.artifacts import ArtifactError
from turngate.core.events import (
    AdmissionError,
    Event,
    EventKind,
    IntentEnvelope,
    IntentPrincipal,
    check_json_depth,
    parse_intent,
)
from turngate.jobs.domain.intents import is_job_intent
from turngate.jobs.routes import submit_job
from turngate.reviews.pending import review_pending_answer
from turngate.security.auth import request_principal
from turngate.security.principal import Principal
from turngate.security.streams import stream_slots
from turngate.settings import Settings
from turngate.workflows.shared import (
    SA_ACTOR,
    SA_CORRELATION_ID,
    SA_TENANT_ID,
    SA_THREAD_ID,
    SA_TURN_ID,
    TurnInput,
    legacy_turn_workflow_id,
    turn_workflow_id,
)
from turngate.workflows.turn import TurnWorkflow

log = logging.getLogger(__name__)
router = APIRouter()
T = TypeVar("T")

INTENT_ACK_TIMEOUT_S = 10.0
#: Bodies up to this size are parsed and validated on a thread, larger ones in a worker process.
PARSE_IN_THREAD_BYTES = 64 * 1024


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise AdmissionError("admission.payload_too_large", f"body exceeds {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > limit:
            raise AdmissionError("admission.payload_too_large", f"body exceeds {limit} bytes")
    return bytes(body)


def json_object(body: bytes) -> Any:
    check_json_depth(body)  # before json.loads, which recurses once per level
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise AdmissionError("admission.malformed_json", f"body is not valid JSON: {exc}") from exc


def _turn_key(envelope: IntentEnvelope) -> TurnKey:
    """The turn's identity: its tenant (none for an unscoped caller) and its ids."""
    return (envelope.tenant_id, envelope.payload.stream_id, envelope.thread_id, envelope.turn_id)


def _turn_events(state: ApiState, envelope: IntentEnvelope) -> dict[str, Event]:
    """The events of the caller's turn: its tenant's only (exactly: no tenant is a tenant too)."""
    events = state.store.turn_events(envelope.thread_id, envelope.turn_id, tenant_id=envelope.tenant_id)
    return {str(e.kind): e for e in events if turn_key(e) == _turn_key(envelope)}


#: Said for an id another tenant holds: nothing about that tenant's turn or thread.
ID_IN_USE = "is already in use; choose another (ids are unique across the gateway)"


def _id_in_use(envelope: IntentEnvelope, field: Literal["thread_id", "turn_id"]) -> AdmissionError:
    return AdmissionError(
        "admission.correlation_conflict",
        f"{field} {getattr(envelope, field)!r} {ID_IN_USE}",
        f"payload.{field}",
    )


def _check_correlation(state: ApiState, envelope: IntentEnvelope) -> bool:
    """A correlation id names one turn; reusing it for another turn is refused up front. Another
    tenant's id or thread is refused without naming anything (the rule the ledger applies again
    when the INTENT is recorded: ``ledger/thread_claims.py``; an unscoped caller's turn that is a
    tenant's is refused there, and answered by :func:`_refusal`). Returns whether this correlation
    id is already recorded for this turn (a retry)."""
    if envelope.tenant_id is not None and state.store.thread_has_other_tenant(
        envelope.thread_id, envelope.tenant_id
    ):
        raise _id_in_use(envelope, "thread_id")
    recorded = False
    for event in state.store.by_correlation(envelope.correlation_id):
        if event.tenant_id != envelope.tenant_id:
            raise AdmissionError(
                "admission.correlation_conflict",
                f"correlation_id {envelope.correlation_id!r} {ID_IN_USE}",
                "correlation_id",
            )
        same_turn = (event.stream_id, event.thread_id, event.turn_id) == (
            envelope.payload.stream_id,
            envelope.thread_id,
            envelope.turn_id,
        )
        if not same_turn:
            raise AdmissionError(
                "admission.correlation_conflict",
                f"correlation_id {envelope.correlation_id!r} already names turn "
                f"{event.turn_id!r} of thread {event.thread_id!r}",
                "correlation_id",
            )
        recorded = True
    return recorded


def _check_ids(state: ApiState, envelope: IntentEnvelope) -> bool:
    """The correlation and parent checks, in one trip to a worker thread. Returns whether the
    turn is already recorded under this correlation id (a retry)."""
    recorded = _check_correlation(state, envelope)
    _check_parent(state, envelope)
    return recorded


def _check_parent(state: ApiState, envelope: IntentEnvelope) -> None:
    """A thread's parent chain is part of its structure: ``parent_turn_id`` must name another
    turn already recorded in this thread (the caller's tenant only)."""
    parent = envelope.payload.parent_turn_id
    if parent is None:
        return
    if parent == envelope.turn_id:
        raise AdmissionError(
            "admission.invalid_parent",
            f"parent_turn_id {parent!r} is the turn itself",
            "payload.parent_turn_id",
        )
    if not state.store.turn_events(envelope.thread_id, parent, tenant_id=envelope.tenant_id):
        raise AdmissionError(
            "admission.invalid_parent",
            f"parent_turn_id missing: no turn {parent!r} is recorded in thread {envelope.thread_id!r}",
            "payload.parent_turn_id",
        )


async def _start(
    state: ApiState, envelope: IntentEnvelope, workflow_id: str, web_url: str | None = None
) -> bool:
    """Start the turn (durable once this returns); an existing turn with this id is reused.
    Returns False when the turn had already finished. Its summary, details and memo go with the
    start (what the Temporal UI shows; no history event of their own)."""
    settings = state.settings
    encrypted = settings.encryption_keys is not None or settings.encryption_keys_file is not None
    try:
        await state.client.start_workflow(
            TurnWorkflow.run,
            TurnInput(envelope=envelope),
            id=workflow_id,
            task_queue=state.settings.turns_task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            # Taken only when a worker with a free slot shares this client (turngate dev).
            request_eager_start=True,
            # bounded: a start that never answers becomes 503 temporal.unavailable, not a hung
            # request (a retry of the same turn is safe: USE_EXISTING)
            rpc_timeout=_rpc_timeout(state),
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(SA_THREAD_ID, envelope.thread_id),
                    SearchAttributePair(SA_TURN_ID, envelope.turn_id),
                    SearchAttributePair(SA_ACTOR, envelope.payload.actor),
                    SearchAttributePair(SA_CORRELATION_ID, envelope.correlation_id),
                    # /status shows a tenant's callers their own actors' queue positions
                    *([SearchAttributePair(SA_TENANT_ID, envelope.tenant_id)] if envelope.tenant_id else []),
                ]
            ),
            memo=turn_memo(envelope),
            static_summary=turn_summary(envelope, encrypted=encrypted),
            static_details=turn_details(envelope, web_url=web_url),
        )
    except WorkflowAlreadyStartedError:
        return False  # the turn finished earlier: the ledger holds its chain
    return True


def _rpc_timeout(state: ApiState) -> timedelta:
    return timedelta(seconds=state.settings.temporal_rpc_timeout_s)


#: Seconds a client should wait before retrying a turn refused because Temporal did not answer.
TEMPORAL_RETRY_AFTER_S = 2


@router.post(
    "/ingress/intent",
    status_code=202,
    responses={202: {"model": IntentAccepted | JobAccepted}, **sse("`?stream=true`: the turn's answer")},
    openapi_extra=intent_request_body(),
)
async def ingress_intent(
    request: Request,
    state: Annotated[ApiState, Depends(api_state)],
    wait: Annotated[Literal["decision", "execution"] | None, Query()] = None,
    stream: Annotated[bool, Query(description="answer with the turn's SSE stream")] = False,
) -> Response:
    """Declare an intent. 202 once its INTENT is durably recorded; `?wait=` blocks (bounded)."""
    return await admit_intent(request, state, wait=wait, stream=stream)


async def admit_intent(
    request: Request,
    state: ApiState,
    *,
    wait: Literal["decision", "execution"] | None = None,
    stream: bool = False,
    data: dict[str, Any] | None = None,
) -> Response:
    """Admit one intent, as ``POST /ingress/intent`` does: the request's JSON body, or ``data``
    (an envelope another front door built, e.g. the OpenAI-compatible endpoint) through the same
    checks, slots and start. Answers as ``POST /ingress/intent`` answers."""
    settings = state.settings
    principal = request_principal(request)
    # Refused before anything is started or recorded: a full ledger disk, or a ledger outage
    # already known (its probe ends it), which answers at once instead of each request waiting
    # out the ledger's timeout on a thread.
    disk: LedgerDiskGuard = request.app.state.ledger_disk
    if not disk.has_room():
        return disk.response()
    outage: LedgerOutage = request.app.state.ledger_outage
    if outage.down_since is not None:
        return outage.response()
    try:
        if data is None:
            body = await read_body(request, settings.max_body_bytes)
            # A large body is parsed in a worker process; a small one costs less than the trip.
            if len(body) > PARSE_IN_THREAD_BYTES:
                admissible = await in_cpu_process(
                    _admissible_body, body, settings, principal, key=principal.limit_key
                )
            else:
                admissible = await in_cpu_thread(_admissible_body, body, settings, principal)
        else:
            admissible = await in_cpu_thread(_admissible, data, settings, principal)
        if isinstance(admissible, dict):  # case.ingest / case.embed / case.index: a job, not a turn
            return await submit_job(request, state, admissible)
        envelope, offload = admissible
        recorded = await asyncio.to_thread(_check_ids, state, envelope)
    except AdmissionError as exc:
        return admission_response(exc)
    slots: TurnSlots = request.app.state.turn_slots
    admission = TurnAdmission(slots, stream_slots(request), principal.limit_key, stream=stream)
    async with admission:
        if admission.refused is not None:
            return admission.refused
        return await _run_turn(
            request, state, envelope, admission, wait=wait, stream=stream, offload=offload, recorded=recorded
        )


async def _run_turn(
    request: Request,
    state: ApiState,
    envelope: IntentEnvelope,
    admission: TurnAdmission,
    *,
    wait: Literal["decision", "execution"] | None,
    stream: bool,
    offload: bool,
    recorded: bool = False,
) -> Response:
    """Start the admitted turn and answer (an ack, a bounded wait, or the SSE stream). Its slots
    are the caller's ``admission``: every return or exception here gives them back. ``offload``:
    some field must go to the artifact store first (:func:`check_intent_fits`). ``recorded``:
    the turn is already recorded under this correlation id (it may run under the id format of an
    earlier version)."""
    settings = state.settings
    if offload:
        try:
            envelope = await fit_intent(state.artifacts, envelope, settings.artifact_deadline_s)
        except ArtifactError as exc:
            log.warning("could not store a large intent field: %s", exc)
            return error_response(503, "artifact.unavailable", "the artifact store is unreachable; retry")

    try:
        workflow_id = await _workflow_id(state, envelope, recorded)
        running = await _start(state, envelope, workflow_id, str(request.base_url))
    except RPCError as exc:
        log.warning("could not start turn %s: %s", envelope.correlation_id, exc)
        refused = error_response(
            503,
            "temporal.unavailable",
            f"the workflow service did not answer; retry after {TEMPORAL_RETRY_AFTER_S} s "
            "(the same turn is never run twice)",
        )
        refused.headers["Retry-After"] = str(TEMPORAL_RETRY_AFTER_S)
        return refused
    key = _turn_key(envelope)
    if running:
        admission.started(lambda: _until_finished(state, key))
    elif not await asyncio.to_thread(_turn_events, state, envelope):
        # Temporal finished this turn but this ledger never saw it (a wiped or different ledger).
        return error_response(
            409,
            "turn.closed_elsewhere",
            f"turn {workflow_id} already ran on this Temporal namespace but is not in this ledger; "
            "use a new turn id (or a distinct TURNGATE_WORKFLOW_ID_PREFIX per deployment)",
        )

    if stream:
        if running:  # the stream starts once the INTENT is recorded (or the ledger refused it)
            admitted = await _wait_unless_disconnected(
                request,
                state.watcher.wait_admitted(
                    key, envelope.correlation_id, lambda found: "INTENT" in found, INTENT_ACK_TIMEOUT_S
                ),
            )
            if admitted is None:
                return Response(status_code=204)
            if admitted.refused:
                admission.turn_finished()
                return await _refusal(state, envelope)
        # Prompt assembly's events: token events while the provider streams, then redact or done.
        messages = stream_turn_events(
            state,
            envelope.correlation_id,
            None,
            bus=request.app.state.token_bus,
            tenant_id=request_principal(request).tenant_id,
        )
        return EventSourceResponse(admission.stream(messages))
    wanted = {None: "INTENT", "decision": "DECISION", "execution": "EXECUTION"}[wait]
    # A ledger outage here reaches the app's handler (one 503 with Retry-After for every route);
    # the admission gives the slots back on the way out. The turn was started and runs on.
    waited = await _wait_unless_disconnected(
        request,
        state.watcher.wait_admitted(
            key,
            envelope.correlation_id,
            lambda found: _satisfied(found, wanted),
            settings.wait_timeout_s if wait else INTENT_ACK_TIMEOUT_S,
        ),
    )
    if waited is None:  # the client left: nobody reads an answer (the turn runs on)
        return Response(status_code=204)
    if waited.refused:
        # Another tenant's turn was recorded first in this thread (or under this correlation id)
        # while ours waited for a worker: ours is never recorded. Nothing of theirs is named.
        admission.turn_finished()
        return await _refusal(state, envelope)
    events, satisfied = waited.events, waited.done
    if turn_finished(events):
        admission.turn_finished()
    elif running:  # its slot comes back once the turn finishes: watched on from this wait
        admission.started(lambda: _until_finished(state, key, after=waited))
    intent = events.get("INTENT")
    response: dict[str, Any] = {
        "accepted": True,
        "stream_id": envelope.payload.stream_id,
        "thread_id": envelope.thread_id,
        "turn_id": envelope.turn_id,
        "correlation_id": intent.correlation_id if intent else envelope.correlation_id,
        "index": intent.index if intent else None,
        "queued": "EXECUTION" not in events and _still_running(events),
        "workflow_id": workflow_id,
        "deduplicated": bool(intent and intent.correlation_id != envelope.correlation_id),
    }
    if intent is None:
        response["detail"] = "accepted by Temporal; the INTENT is not recorded yet (is a worker running?)"
    if wait:
        response["wait_timed_out"] = not satisfied
        if not satisfied and "DECISION" not in events:  # waiting for a reviewer? (docs/REVIEWS.md)
            response |= await review_pending_answer(state.client, workflow_id)
        for kind in (EventKind.DECISION, EventKind.EXECUTION):
            if str(kind) in events:
                response[str(kind).lower()] = events[str(kind)].to_wire()
    return JSONResponse(response, status_code=202)


def _admissible_body(
    body: bytes, settings: Settings, principal: Principal
) -> dict[str, Any] | tuple[IntentEnvelope, bool]:
    """A body's JSON when it is a job intent, else :func:`_admissible` of it."""
    data = json_object(body)
    return data if is_job_intent(data) else _admissible(data, settings, principal)


def _admissible(data: Any, settings: Settings, principal: Principal) -> tuple[IntentEnvelope, bool]:
    """The validated envelope with its principal, and whether a field must be offloaded (CPU
    work that grows with the body: run off the event loop)."""
    envelope = parse_intent(
        data,
        max_message_bytes=settings.max_message_bytes,
        max_refs=settings.max_declared_refs,
        max_tools=settings.max_declared_tools,
    )
    envelope = _with_principal(envelope, principal)
    return envelope, check_intent_fits(envelope)


async def _workflow_id(state: ApiState, envelope: IntentEnvelope, recorded: bool) -> str:
    """The turn's workflow id (tenant included). A turn already recorded may have been started
    by an earlier version under the id without the tenant (an upgrade with turns in flight):
    while that workflow exists, a retry attaches to it instead of starting a second."""
    prefix = state.settings.workflow_id_prefix
    ids = (envelope.payload.stream_id, envelope.thread_id, envelope.turn_id)
    current = turn_workflow_id(*ids, prefix, tenant_id=envelope.tenant_id)
    if not recorded:
        return current
    legacy = legacy_turn_workflow_id(*ids, prefix)
    try:
        await state.client.get_workflow_handle(legacy).describe(rpc_timeout=_rpc_timeout(state))
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return current
        raise
    return legacy


async def _refusal(state: ApiState, envelope: IntentEnvelope) -> Response:
    """409 for a turn whose INTENT the ledger refused: the admission check, read again, names
    which id is in use (and nothing of the other turn)."""
    try:
        await asyncio.to_thread(_check_correlation, state, envelope)
    except AdmissionError as exc:
        return admission_response(exc)
    return admission_response(_id_in_use(envelope, "thread_id" if envelope.tenant_id else "turn_id"))


def _with_principal(envelope: IntentEnvelope, principal: Principal) -> IntentEnvelope:
    """The envelope with the authenticated principal (recorded in the INTENT); none without a key."""
    if principal.key_id is None:
        return envelope
    who = IntentPrincipal(tenant_id=principal.tenant_id, key_id=principal.key_id)
    return envelope.model_copy(update={"principal": who})


#: How often a ``?wait=`` request checks that its client is still there.
DISCONNECT_POLL_S = 0.5


async def _wait_unless_disconnected(request: Request, waiting: Awaitable[T]) -> T | None:
    """``await waiting``, or ``None`` as soon as the client has gone (the wait is cancelled)."""
    task = asyncio.ensure_future(waiting)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                return task.result()
            if await request.is_disconnected():
                return None
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def _until_finished(state: ApiState, key: TurnKey, *, after: TurnWait | None = None) -> None:
    """Until the turn is finished in the ledger (bounded: its slot must come back). ``after``:
    the request's own wait for the turn, which this one goes on from."""
    timeout_s = state.settings.llm_wall_clock_s + RELEASE_MARGIN_S
    await state.watcher.wait_turn(key, turn_finished, timeout_s, after=after)


def _satisfied(events: dict[str, Event], wanted: str) -> bool:
    if wanted in events:
        return True
    decision = events.get("DECISION")
    # A denied turn has no EXECUTION to wait for.
    return wanted == "EXECUTION" and decision is not None and decision.payload.get("decision") != "ALLOW"


def _still_running(events: dict[str, Event]) -> bool:
    decision = events.get("DECISION")
    return decision is None or decision.payload.get("decision") == "ALLOW"


async def read_json_body(request: Request, limit: int) -> Any:
    """The request's body as JSON, under the body limit (``AdmissionError`` otherwise): the same
    reading every front door does. The parse (up to the body limit) runs off the event loop."""
    return await in_cpu_thread(json_object, await read_body(request, limit))
