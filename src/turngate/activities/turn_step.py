"""``turngate.call_and_record``: an allowed turn's DECISION append, provider call and EXECUTION
append in one activity (the turn's shape 2, docs/WORKFLOW.md).

Exactly once comes from the ledger: every attempt first reads what the ledger holds for the
turn. A recorded EXECUTION is returned as it is, so a retry after a lost worker (the provider
answered, the EXECUTION was appended, the result never reached Temporal) never calls the
provider again. The DECISION append returns the recorded DECISION when the ledger holds one; if
another run recorded a different one, the turn goes on from it as ``workflows/adoption.py``
says (a DENY ends it, the same request is executed, anything else ends with ``turn.redecided``).
The EXECUTION is made by the same pure functions the workflow uses
(``workflows/execution_record.py``).

Retries stay Temporal's: a retryable provider error is raised while attempts remain; on the last
attempt, and for a non-retryable error, the error is recorded as the EXECUTION. The provider
call's wall clock counts from the first attempt's scheduling (``llm.timeout`` past it). The
activity heartbeats throughout (ledger steps included), so cancellation and a lost worker are
noticed as with the plain provider call.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import Executor
from datetime import UTC, datetime
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError, TimeoutType
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

from turngate.activities.heartbeat import heartbeating
from turngate.activities.ledger import LedgerActivities
from turngate.activities.provider import ProviderActivities
from turngate.core.events import Event, EventDraft, EventKind
from turngate.core.payloads import SYSTEM_ERROR, ExecutionPayload
from turngate.core.provider_errors import NON_RETRYABLE_PROVIDER_ERRORS
from turngate.ledger import LedgerStore
from turngate.telemetry.tracing import tracer
from turngate.workflows import adoption
from turngate.workflows.execution_record import answered, call_failed, executed
from turngate.workflows.shared import AppendedEvent, AppendInput, CallAndRecordInput, CallAndRecordResult
from turngate.workflows.turn_activities import APPEND_EVENT, CALL_AND_RECORD

T = TypeVar("T")


class TurnStepActivities:
    """Composes the ledger steps and the provider call the worker already has."""

    def __init__(
        self,
        store: LedgerStore,
        ledger: LedgerActivities,
        calls: ProviderActivities,
        executor: Executor | None = None,
    ) -> None:
        self._store = store
        self._ledger = ledger
        self._calls = calls
        # The ledger steps block (SQLAlchemy, the artifact store): they run on the worker's ledger
        # thread pool, as the local ledger activities do, never on the loop's default pool,
        # which the API shares in a one-process deployment.
        self._executor = executor

    @activity.defn(name=CALL_AND_RECORD)
    async def call_and_record(self, inp: CallAndRecordInput) -> CallAndRecordResult:
        async with heartbeating():
            return await self._call_and_record(inp)

    async def _call_and_record(self, inp: CallAndRecordInput) -> CallAndRecordResult:
        recorded = await self._blocking(self._recorded, inp.decision.draft.correlation_id)
        if "EXECUTION" in recorded:  # a retry after the EXECUTION was recorded: never call twice
            return CallAndRecordResult(decision=recorded["DECISION"], execution=recorded["EXECUTION"])
        try:
            decision = await self._append(inp.decision)
        except ApplicationError as exc:
            if exc.type != "artifact.unavailable":
                raise
            # As the workflow's own DECISION step: recorded without its artifacts, a SYSTEM_ERROR
            # DENY, at once (the artifact deadline has passed already).
            draft = inp.decision.draft
            denied = draft.payload | {
                "decision": "DENY",
                "reason_codes": [SYSTEM_ERROR],
                "error": _system_error(exc),
            }
            denial = await self._append(AppendInput(draft=draft.model_copy(update={"payload": denied})))
            return CallAndRecordResult(decision=denial)
        if decision.adopted:
            step = adoption.next_step(decision.payload, inp.decision.draft.payload, executable=True)
            if step == "stop":
                return CallAndRecordResult(decision=decision)
            if step == "end":
                unexecuted = EventDraft.following(
                    inp.decision.draft,
                    EventKind.EXECUTION,
                    adoption.unexecuted(decision.payload).as_payload(),
                )
                return CallAndRecordResult(
                    decision=decision, execution=await self._append(AppendInput(draft=unexecuted))
                )
        elif decision.payload.get("decision") != "ALLOW":
            return CallAndRecordResult(decision=decision)
        payload, answer = await self._call(inp)
        made = executed(inp.execution, inp.call, answer, payload)
        draft = EventDraft.following(inp.decision.draft, EventKind.EXECUTION, made.payload.as_payload())
        if inp.defer_fault_snapshots and made.snapshots and answer is None:
            # The call failed: nothing was answered that a retry could repeat, so the EXECUTION
            # and its snapshots go to the workflow's snapshot step (shape 5). An answered call
            # with snapshots is recorded here: a retry of this step must find its EXECUTION.
            deferred = AppendInput(
                draft=draft, manifest=inp.manifest, snapshots=made.snapshots, stored_snapshots=made.stored
            )
            return CallAndRecordResult(decision=decision, deferred=deferred)
        try:
            execution = await self._append(
                AppendInput(
                    draft=draft,
                    manifest=inp.manifest,
                    snapshots=made.snapshots,
                    stored_snapshots=made.stored,
                )
            )
        except ApplicationError as exc:
            if exc.type != "artifact.unavailable":
                raise
            # The answer is had: record it without its artifacts, marked SYSTEM_ERROR.
            execution = await self._append(AppendInput(draft=_failed(draft, made.payload, exc)))
        return CallAndRecordResult(decision=decision, execution=execution)

    async def _call(self, inp: CallAndRecordInput) -> tuple[ExecutionPayload, Any]:
        """The EXECUTION payload of the provider call and its answer (None when it failed);
        raises a retryable error while attempts remain."""
        model, digest = inp.execution.model, inp.execution.context_digest
        info = activity.info()
        elapsed = (datetime.now(UTC) - info.scheduled_time).total_seconds()
        remaining = inp.wall_clock_s - max(elapsed, 0.0)
        try:
            if remaining <= 0:
                raise TimeoutError
            answer = await asyncio.wait_for(self._calls.call_provider(inp.call), remaining)
        except TimeoutError:  # asyncio's: the wall clock ran out
            return _timed_out(inp), None
        except ApplicationError as exc:
            retryable = not exc.non_retryable and exc.type not in NON_RETRYABLE_PROVIDER_ERRORS
            if retryable and info.attempt < inp.attempts:
                raise
            return call_failed(model, digest, exc), None
        return answered(model, digest, answer), answer

    def _recorded(self, correlation_id: str) -> dict[str, Event]:
        return {
            str(event.kind): event
            for event in self._store.by_correlation(correlation_id)
            if event.kind != EventKind.INTENT
        }

    async def _append(self, inp: AppendInput) -> AppendedEvent:
        # A span per ledger step, as the separate append_event activities have: the event's
        # attributes go on it (telemetry's observe_ledger_event annotates the current span).
        with tracer().start_as_current_span(f"{APPEND_EVENT} {inp.draft.kind}"):
            return await self._blocking(self._ledger.append_event, inp)

    async def _blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the ledger thread pool, in this context (the current span)."""
        call = functools.partial(contextvars.copy_context().run, fn, *args)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)


def _timed_out(inp: CallAndRecordInput) -> ExecutionPayload:
    """``llm.timeout``, recorded as the plain provider activity's timeout is."""
    cause = TemporalTimeoutError("wall clock", type=TimeoutType.START_TO_CLOSE, last_heartbeat_details=[])
    return call_failed(inp.execution.model, inp.execution.context_digest, cause)


def _system_error(exc: ApplicationError) -> dict[str, Any]:
    """The ``error`` of a step whose artifacts could not be stored (as the workflow records it)."""
    details = exc.details[0] if exc.details and isinstance(exc.details[0], dict) else {}
    return {
        "code": SYSTEM_ERROR,
        "detail": exc.message,
        "missing_pointers": details.get("missing_pointers", []),
    }


def _failed(draft: EventDraft, payload: ExecutionPayload, exc: ApplicationError) -> EventDraft:
    return draft.model_copy(update={"payload": payload.failed(_system_error(exc)).as_payload()})
