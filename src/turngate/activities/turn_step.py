"""One activity for an allowed turn's ledger and provider work: append the DECISION, call the
provider, append the EXECUTION. Two activity round trips per turn (begin, this) instead of four.

Exactly once: the DECISION append is idempotent (the same DECISION returns the recorded event),
the provider is called only when the ledger has no EXECUTION for the turn (a retry after a lost
worker returns the recorded one), and the EXECUTION is appended here only when the answer needs
no workflow-side rule (no tool calls to admit). Anything else is left to the workflow as before:
a provider error or timeout propagates (retries, then the workflow records the error), and an
EXECUTION whose artifacts cannot be stored is recorded by the workflow's own step (which records
the SYSTEM_ERROR if they fail again).
"""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.exceptions import ApplicationError

from turngate.activities.ledger import LedgerActivities
from turngate.activities.provider import ProviderActivities
from turngate.core.events import Event, EventKind
from turngate.telemetry import tracer
from turngate.workflows.execution_record import answered, finish_execution
from turngate.workflows.shared import (
    AppendInput,
    DecideAndCallInput,
    DecideAndCallResult,
    ExecutionStep,
    ProviderCallInput,
    ProviderCallResult,
)
from turngate.workflows.turn_activities import DECIDE_AND_CALL

ARTIFACT_UNAVAILABLE = "artifact.unavailable"


class TurnStepActivities:
    def __init__(self, ledger: LedgerActivities, provider: ProviderActivities) -> None:
        self._ledger = ledger
        self._provider = provider

    @activity.defn(name=DECIDE_AND_CALL)
    async def decide_and_call(self, inp: DecideAndCallInput) -> DecideAndCallResult:
        try:
            decision = await asyncio.to_thread(self._append, inp.decision)
        except ApplicationError as exc:
            if exc.type != ARTIFACT_UNAVAILABLE:
                raise
            details = exc.details[0] if exc.details and isinstance(exc.details[0], dict) else {}
            failure = {"detail": exc.message, "missing_pointers": details.get("missing_pointers", [])}
            return DecideAndCallResult(decision_failure=failure)
        done = await asyncio.to_thread(self._ledger.recorded, decision.correlation_id, EventKind.EXECUTION)
        if done is not None:  # a retry after the EXECUTION was recorded: never call twice
            return DecideAndCallResult(decision=decision, execution=done)
        answer = await self._provider.call_provider(inp.call)
        if inp.execution is None or answer.tool_calls:
            return DecideAndCallResult(decision=decision, answer=answer)
        execution = await asyncio.to_thread(self._record_execution, inp.call, inp.execution, answer)
        return DecideAndCallResult(decision=decision, answer=answer, execution=execution)

    def _append(self, inp: AppendInput) -> Event:
        # A span per event (the ledger steps' attributes: kind, index, digest, the decision), so
        # each event's trace is found by its digest as when each append was its own activity.
        with tracer().start_as_current_span(f"AppendEvent:{inp.draft.kind}"):
            return self._ledger.record(inp)

    def _record_execution(
        self, call: ProviderCallInput, step: ExecutionStep, answer: ProviderCallResult
    ) -> Event | None:
        """The EXECUTION as the workflow would record it; None when its artifacts could not be
        stored (the workflow's step then tries again and records a SYSTEM_ERROR if need be)."""
        payload, snapshots, stored = finish_execution(
            answered(step.model, step.context_digest, answer),
            answer,
            call=call,
            external=step.external,
            debug=step.debug_snapshot,
            exchanges_count=step.exchanges_count,
        )
        draft = step.draft.model_copy(update={"payload": payload.as_payload()})
        inp = AppendInput(draft=draft, manifest=step.manifest, snapshots=snapshots, stored_snapshots=stored)
        try:
            return self._append(inp)
        except ApplicationError as exc:
            if exc.type == ARTIFACT_UNAVAILABLE:
                return None
            raise
