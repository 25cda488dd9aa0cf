"""TurnWorkflow: INTENT -> DECISION -> EXECUTION for one turn, as named steps.

1. ``begin``: record the INTENT and read what deciding needs (a local activity);
2. ``decide``: the policy and the turn's rules on recorded data, in workflow code
   (:func:`~turngate.workflows.turn_decide.decide_turn`), giving one frozen ``TurnDecision``;
3. a DENY is recorded (a local activity) and ends the turn;
4. an ALLOW: ``call_and_record`` appends the DECISION, calls the provider and appends the
   EXECUTION in one activity (shape 2, docs/WORKFLOW.md); turns recorded as shape 1, and turns
   with a spend plan (their fallback loop is workflow code), record the DECISION, call the
   provider (:func:`~turngate.workflows.turn_execute.execute_turn`) and record the EXECUTION
   as three steps.

The ledger steps are local activities (short, idempotent, on this worker: fewer history events
per turn); the provider call is a regular activity on its own task queue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError

with workflow.unsafe.imports_passed_through():
    from turngate.artifacts.deadline import MAX_ARTIFACT_DEADLINE_S
    from turngate.core.events import Event, EventDraft, EventKind, IntentEnvelope
    from turngate.core.manifest import build_manifest
    from turngate.core.payloads import SYSTEM_ERROR, DecisionPayload, ExecutionPayload
    from turngate.core.refs import ref_lookup_ids
    from turngate.workflows import adoption
    from turngate.workflows.patches import (
        TURN_SHAPE_INDEXED_STEP,
        TURN_SHAPE_ONE_STEP,
        TURN_SHAPE_SNAPSHOT_STEP,
    )
    from turngate.workflows.shared import (
        SA_DECISION,
        SA_POLICY_ID,
        AppendedEvent,
        AppendInput,
        BeginTurnInput,
        BeginTurnResult,
        Boundary,
        RecordedEvent,
        StoreSnapshotsInput,
        TurnInput,
        TurnResult,
    )
    from turngate.workflows.turn_activities import append_event, begin_turn, store_fault_snapshots
    from turngate.workflows.turn_decide import TurnDecision, decide_turn
    from turngate.workflows.turn_execute import (
        TurnExecution,
        call_and_record_activity,
        execute_turn,
        failed_execution,
    )

LEDGER_STEP_TIMEOUT = timedelta(seconds=10)
# Steps that also write artifacts: their writes end by the boundary's artifact deadline (at most
# 60 s, then SYSTEM_ERROR), the ledger work around them gets the usual step timeout on top.
ARTIFACT_STEP_TIMEOUT = LEDGER_STEP_TIMEOUT + timedelta(seconds=MAX_ARTIFACT_DEADLINE_S)
LEDGER_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=50),
    maximum_interval=timedelta(seconds=5),
    non_retryable_error_types=["ledger.conflict"],
)
#: The fault-snapshot step's retry intervals (shape 5): 0.2 s, doubling, at most 2 s.
SNAPSHOT_FIRST_RETRY_S = 0.2
SNAPSHOT_MAX_RETRY_S = 2.0
#: One snapshot-step attempt at most this long (a store that never answers is abandoned).
SNAPSHOT_ATTEMPT_TIMEOUT = timedelta(seconds=10)


def _recorded(event: Event) -> RecordedEvent:
    return RecordedEvent(kind=str(event.kind), index=event.index, digest=event.digest)


@workflow.defn(name="TurnWorkflow")
class TurnWorkflow:
    def __init__(self) -> None:
        self._boundary: Boundary | None = None  # set by the begin step
        self._recorded: dict[str, RecordedEvent] = {}
        self._indexed: tuple[str, str] | None = None  # the search attributes written: decision, policy

    @workflow.query(name="recorded")
    def recorded(self) -> dict[str, RecordedEvent]:
        """What this turn has recorded so far (no history cost)."""
        return dict(self._recorded)

    @workflow.run
    async def run(self, inp: TurnInput) -> TurnResult:
        begin = await self._begin(inp.envelope)
        if "EXECUTION" in begin.recorded:
            # The turn is complete in the ledger: never call the provider twice for it.
            return self._already_recorded(begin.intent, begin.recorded)
        decision = await decide_turn(inp.envelope, begin)
        if _one_step(begin, decision):
            return await self._call_and_record(decision, inp.envelope, begin)
        result, executing = await self._record_decision(decision)
        if executing is None:
            return result
        execution = await execute_turn(executing, inp.envelope, begin.boundary)
        return await self._record_execution(executing, execution, result)

    async def _begin(self, envelope: IntentEnvelope) -> BeginTurnResult:
        """Record the INTENT; read its ref candidates, pinned prompt, budgets and what the ledger
        already has for this turn."""
        begin = await workflow.execute_local_activity(
            begin_turn,
            BeginTurnInput(
                intent=envelope.draft(),
                ref_ids=ref_lookup_ids(list(envelope.payload.declared_refs)),
            ),
            start_to_close_timeout=ARTIFACT_STEP_TIMEOUT,
            retry_policy=LEDGER_RETRY,
        )
        self._recorded["INTENT"] = _recorded(begin.intent)
        self._boundary = begin.boundary
        return begin

    async def _call_and_record(
        self, decision: TurnDecision, envelope: IntentEnvelope, begin: BeginTurnResult
    ) -> TurnResult:
        """Shape 2: the DECISION, the provider call and the EXECUTION in one activity. If that
        activity fails as a whole, the turn still ends: what the ledger does not hold yet is
        recorded here, the EXECUTION with the step's error."""
        if begin.boundary.turn_shape >= TURN_SHAPE_INDEXED_STEP:
            # Findable as an ALLOW in the LLM stage while the step runs (/status's queue).
            record = decision.outcome.record
            self._index(record.decision, record.policy_id)
        try:
            done = await call_and_record_activity(
                decision,
                envelope,
                begin.boundary,
                self._decision_append(decision),
                self._execution_manifest(decision),
                ARTIFACT_STEP_TIMEOUT,
            )
        except (ActivityError, TimeoutError) as exc:
            return await self._end_failed_step(decision, envelope, begin, exc)
        result = self._decided(decision.intent, done.decision)
        if done.deferred is not None:  # a fault: its snapshots are the snapshot step's (shape 5)
            made = ExecutionPayload.from_payload(done.deferred.draft.payload)
            execution, _ = await self._append_with_artifacts(done.deferred, made.failed)
            return self._with_execution(result, execution)
        return result if done.execution is None else self._with_execution(result, done.execution)

    async def _end_failed_step(
        self,
        decision: TurnDecision,
        envelope: IntentEnvelope,
        begin: BeginTurnResult,
        exc: ActivityError | TimeoutError,
    ) -> TurnResult:
        recorded = (await self._begin(envelope)).recorded  # what the step recorded before it failed
        if "EXECUTION" in recorded:
            return self._with_execution(
                self._decided(decision.intent, recorded["DECISION"]), recorded["EXECUTION"]
            )
        if "DECISION" in recorded:
            event = recorded["DECISION"]
            result, executing = await self._go_on(decision, event, self._decided(decision.intent, event))
        else:
            result, executing = await self._record_decision(decision)
        if executing is None:
            return result
        return await self._record_execution(
            executing, failed_execution(executing, envelope, begin.boundary, exc), result
        )

    def _decision_append(self, decision: TurnDecision) -> AppendInput:
        return AppendInput(
            draft=_draft(decision.intent, decision.outcome.record),
            manifest=decision.manifest.model_dump(mode="json"),
            snapshots=decision.snapshots,
        )

    async def _record_decision(self, decision: TurnDecision) -> tuple[TurnResult, TurnDecision | None]:
        """Append the DECISION; the turn's result so far, and the decision to execute (None: the
        turn ends here: a DENY, a DECISION whose artifacts could not be stored, recorded as a
        SYSTEM_ERROR DENY, or another run's DECISION this run cannot execute)."""
        record = decision.outcome.record
        event, stopped = await self._record(
            decision.intent,
            record,
            manifest=decision.manifest.model_dump(mode="json"),
            snapshots=decision.snapshots,
            on_system_error=lambda error: record.denied(SYSTEM_ERROR, error),
        )
        result = self._decided(decision.intent, event)
        return await self._go_on(decision, event, result, stopped=stopped, adopted=event.adopted)

    async def _go_on(
        self,
        decision: TurnDecision,
        event: Event,
        result: TurnResult,
        *,
        stopped: bool = False,
        adopted: bool = True,
    ) -> tuple[TurnResult, TurnDecision | None]:
        """How the turn goes on from its recorded DECISION ``event``. ``adopted``: an earlier
        run of the step (a stalled or crashed worker's task) recorded it, and it is the turn's,
        whatever this run decided (workflows/adoption.py)."""
        if adopted:
            step = adoption.next_step(
                event.payload, decision.outcome.record.as_payload(), executable=decision.proceeds
            )
            if step == "end":
                return await self._unexecuted(decision.intent, event, result), None
            stopped = step == "stop"
            decision = replace(decision, plan=adoption.recorded_plan(event.payload, decision.plan))
        return result, None if stopped or not decision.proceeds else decision

    async def _unexecuted(self, intent: Event, decision: Event, result: TurnResult) -> TurnResult:
        """End a recorded ALLOW this run cannot execute with an EXECUTION that says so."""
        execution, _ = await self._record(intent, adoption.unexecuted(decision.payload))
        return self._with_execution(result, execution)

    def _decided(self, intent: Event, event: Event) -> TurnResult:
        """The turn's result once its DECISION is recorded, which makes the turn findable by it."""
        result = self._result(intent, event)
        self._index(event.payload["decision"], event.payload["policy_id"])
        return result

    def _index(self, decision: str, policy_id: str) -> None:
        """Write the turn's search attributes, unless they already say this."""
        if self._indexed == (decision, policy_id):
            return
        self._indexed = (decision, policy_id)
        workflow.upsert_search_attributes(
            [SA_DECISION.value_set(decision), SA_POLICY_ID.value_set(policy_id)]
        )

    @staticmethod
    def _execution_manifest(decision: TurnDecision) -> dict[str, Any]:
        assert decision.assembly is not None  # only an executed turn has one
        return build_manifest(
            decision.outcome,
            decision.assembly,
            intent=decision.intent,
            run_id=workflow.info().run_id,
            step_id="execution",
            external=decision.external,
            system=decision.system,
        ).model_dump(mode="json")

    async def _record_execution(
        self, decision: TurnDecision, execution: TurnExecution, result: TurnResult
    ) -> TurnResult:
        event, _ = await self._record(
            decision.intent,
            execution.payload,
            manifest=self._execution_manifest(decision),
            snapshots=execution.snapshots,
            stored_snapshots=execution.stored,
            on_system_error=execution.payload.failed,
        )
        return self._with_execution(result, event)

    def _already_recorded(self, intent: Event, recorded: dict[str, Event]) -> TurnResult:
        return self._with_execution(self._result(intent, recorded["DECISION"]), recorded["EXECUTION"])

    def _result(self, intent: Event, decision: Event) -> TurnResult:
        self._recorded["DECISION"] = _recorded(decision)
        return TurnResult(
            workflow_id=workflow.info().workflow_id,
            correlation_id=intent.correlation_id,
            decision=decision.payload["decision"],
            reason_codes=list(decision.payload["reason_codes"]),
            intent=self._recorded["INTENT"],
            decision_event=self._recorded["DECISION"],
        )

    def _with_execution(self, result: TurnResult, execution: Event) -> TurnResult:
        self._recorded["EXECUTION"] = _recorded(execution)
        error = execution.payload.get("error")
        return result.model_copy(
            update={"execution": self._recorded["EXECUTION"], "error_code": error["code"] if error else None}
        )

    async def _record(
        self,
        intent: Event,
        payload: DecisionPayload | ExecutionPayload,
        *,
        manifest: dict[str, Any] | None = None,
        snapshots: dict[str, str] | None = None,
        stored_snapshots: dict[str, dict[str, Any]] | None = None,
        on_system_error: Callable[[dict[str, Any]], DecisionPayload | ExecutionPayload] | None = None,
    ) -> tuple[AppendedEvent, bool]:
        """Append an event with its artifacts. If the artifacts cannot be stored, the event is
        recorded without them, marked SYSTEM_ERROR with the missing pointers, and the turn
        stops (returns True)."""
        inp = AppendInput(
            draft=_draft(intent, payload),
            manifest=manifest,
            snapshots=snapshots or {},
            stored_snapshots=stored_snapshots or {},
        )
        return await self._append_with_artifacts(inp, on_system_error)

    async def _append_with_artifacts(
        self,
        inp: AppendInput,
        on_system_error: Callable[[dict[str, Any]], DecisionPayload | ExecutionPayload] | None,
    ) -> tuple[AppendedEvent, bool]:
        """:meth:`_record` for a prepared append. From shape 5 on, fault snapshots are stored by
        their own step first; the append step stores only the manifest."""
        if inp.snapshots and self._snapshot_step():
            try:
                stored = await self._store_snapshots(inp)
            except (ActivityError, ApplicationError) as exc:
                if on_system_error is None:
                    raise
                return await self._system_error(inp, on_system_error, exc), True
            inp = inp.model_copy(update={"snapshots": {}, "stored_snapshots": inp.stored_snapshots | stored})
        try:
            return await self._append(inp), False
        except (ActivityError, ApplicationError) as exc:
            # A failed local activity may surface bare or wrapped in ActivityError.
            cause = exc.cause if isinstance(exc, ActivityError) else exc
            if on_system_error is None or not (
                isinstance(cause, ApplicationError) and cause.type == "artifact.unavailable"
            ):
                raise
            return await self._system_error(inp, on_system_error, cause), True

    async def _system_error(
        self,
        inp: AppendInput,
        on_system_error: Callable[[dict[str, Any]], DecisionPayload | ExecutionPayload],
        exc: BaseException,
    ) -> AppendedEvent:
        """Record ``inp``'s event without its artifacts, as SYSTEM_ERROR with the missing pointers
        (context observability stop semantics: the turn stops here)."""
        cause = exc.cause if isinstance(exc, ActivityError) and exc.cause is not None else exc
        details = (
            cause.details[0]
            if isinstance(cause, ApplicationError) and cause.details and isinstance(cause.details[0], dict)
            else {}
        )
        error = {
            "code": SYSTEM_ERROR,
            "detail": cause.message if isinstance(cause, ApplicationError) else str(cause),
            "missing_pointers": details.get("missing_pointers", sorted(inp.snapshots)),
        }
        failed = inp.draft.model_copy(update={"payload": on_system_error(error).as_payload()})
        return await self._append(AppendInput(draft=failed))

    def _snapshot_step(self) -> bool:
        return self._boundary is not None and self._boundary.turn_shape >= TURN_SHAPE_SNAPSHOT_STEP

    async def _store_snapshots(self, inp: AppendInput) -> dict[str, dict[str, Any]]:
        assert self._boundary is not None
        deadline = timedelta(seconds=self._boundary.artifact_deadline_s)
        stored = await workflow.execute_local_activity(
            store_fault_snapshots,
            StoreSnapshotsInput(correlation_id=inp.draft.correlation_id, snapshots=inp.snapshots),
            start_to_close_timeout=min(deadline, SNAPSHOT_ATTEMPT_TIMEOUT),
            schedule_to_close_timeout=deadline,
            retry_policy=snapshot_retry(self._boundary.artifact_deadline_s),
        )
        return stored.pointers

    async def _append(self, inp: AppendInput) -> AppendedEvent:
        return await workflow.execute_local_activity(
            append_event,
            inp,
            start_to_close_timeout=ARTIFACT_STEP_TIMEOUT
            if inp.manifest or inp.snapshots
            else LEDGER_STEP_TIMEOUT,
            retry_policy=LEDGER_RETRY,
        )


def snapshot_retry(deadline_s: float) -> RetryPolicy:
    """The snapshot step's own retries: as many attempts as their backoff fits in the artifact
    deadline (the schedule-to-close bound is set too, but the attempt count is what ends a store
    that keeps failing fast)."""
    attempts, waited, interval = 1, 0.0, SNAPSHOT_FIRST_RETRY_S
    while waited + interval < deadline_s:
        attempts, waited = attempts + 1, waited + interval
        interval = min(interval * 2, SNAPSHOT_MAX_RETRY_S)
    return RetryPolicy(
        initial_interval=timedelta(seconds=SNAPSHOT_FIRST_RETRY_S),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=SNAPSHOT_MAX_RETRY_S),
        maximum_attempts=attempts,
    )


def _one_step(begin: BeginTurnResult, decision: TurnDecision) -> bool:
    """Whether an allowed turn takes shape 2. A spend plan keeps shape 1: trying its candidates
    in order is workflow code between provider calls."""
    return begin.boundary.turn_shape >= TURN_SHAPE_ONE_STEP and decision.proceeds and decision.plan is None


def _draft(intent: Event, payload: DecisionPayload | ExecutionPayload) -> EventDraft:
    """The turn's DECISION or EXECUTION event: the INTENT's identity, ``payload``'s kind."""
    kind = EventKind.DECISION if isinstance(payload, DecisionPayload) else EventKind.EXECUTION
    return EventDraft.following(intent, kind, payload.as_payload())
