"""TurnWorkflow's branches with fake activities registered under the real activity names, on a
local Temporal dev server (the `temporal` CLI beside the venv's python; nothing is downloaded).

The fakes keep a small in-memory ledger, so each test reads what the turn recorded and how many
times the provider was called.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.stack import envelope
from turngate.core.context import ContextConfig, context_config_digest
from turngate.core.events import Event, EventDraft, EventKind, parse_intent, seal
from turngate.core.model_resolution import ProviderCatalog, ProviderEntry
from turngate.devserver import find_temporal_cli, free_port
from turngate.workflows.execution_record import answered, executed
from turngate.workflows.shared import (
    SEARCH_ATTRIBUTES,
    AppendInput,
    BeginTurnInput,
    BeginTurnResult,
    Boundary,
    CallAndRecordInput,
    CallAndRecordResult,
    ProviderCallInput,
    ProviderCallResult,
    StoredSnapshots,
    StoreSnapshotsInput,
    TurnInput,
    TurnResult,
)
from turngate.workflows.turn import TurnWorkflow
from turngate.workflows.turn_activities import (
    APPEND_EVENT,
    BEGIN_TURN,
    CALL_AND_RECORD,
    CALL_PROVIDER,
    STORE_FAULT_SNAPSHOTS,
)

CATALOG = ProviderCatalog(
    providers=(ProviderEntry(name="echo", models=("echo-1",), configured=True, offline=True),),
    default_provider="echo",
)


@pytest.fixture(scope="module")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    async with await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(find_temporal_cli()),
        data_converter=pydantic_data_converter,
        ip="127.0.0.1",
        port=free_port(),
        ui=False,
        search_attributes=SEARCH_ATTRIBUTES,
    ) as started:
        yield started


def _boundary(
    task_queue: str,
    policy: str = "turngate.policies.allow_all",
    shape: int = 1,
    provider_activity: str = "regular",
) -> Boundary:
    return Boundary(
        turn_shape=shape,
        provider_activity=provider_activity,
        policy_module=policy,
        policy_object="POLICY",
        context_config=ContextConfig(),
        context_config_digest=context_config_digest(ContextConfig()),
        provider_catalog=CATALOG,
        llm_task_queue=task_queue,
        llm_wall_clock_s=10,
    )


Answer = Callable[[ProviderCallInput, int], ProviderCallResult]


def _echo(inp: ProviderCallInput, attempt: int) -> ProviderCallResult:
    return ProviderCallResult(
        provider=inp.provider, model=inp.model, output_text=f"echo: {inp.messages[-1].content}"
    )


@dataclass
class FakeTurnActivities:
    """begin_turn / append_event / call_provider over an in-memory ledger."""

    boundary: Boundary
    answer: Answer = _echo
    fail_appends_of: set[str] = field(default_factory=set)  # kinds whose artifacts cannot be stored
    events: list[Event] = field(default_factory=list)
    calls: list[ProviderCallInput] = field(default_factory=list)
    steps: int = 0  # call_and_record attempts
    history_events: int = 0  # of the last turn run
    history_types: list[int] = field(default_factory=list)
    lose_step_after: str | None = None  # call_and_record fails after appending this kind
    snapshot_store_down: bool = False  # store_fault_snapshots fails every attempt
    snapshot_attempts: int = 0
    appended_inputs: list[AppendInput] = field(default_factory=list)

    def _append(self, draft: EventDraft) -> Event:
        for event in self.events:
            if event.correlation_id == draft.correlation_id and event.kind == draft.kind:
                return event  # idempotent by (correlation_id, kind), as the ledger is
        prev = self.events[-1].digest if self.events else None
        event = seal(draft, len(self.events), prev)
        self.events.append(event)
        return event

    def kinds(self, correlation_id: str) -> list[str]:
        return [str(e.kind) for e in self.events if e.correlation_id == correlation_id]

    def recorded(self, correlation_id: str, kind: str) -> Event:
        return next(e for e in self.events if e.correlation_id == correlation_id and str(e.kind) == kind)

    @activity.defn(name=BEGIN_TURN)
    async def begin_turn(self, inp: BeginTurnInput) -> BeginTurnResult:
        intent = self._append(inp.intent)
        later = {
            str(e.kind): e
            for e in self.events
            if e.correlation_id == intent.correlation_id and e.kind != EventKind.INTENT
        }
        return BeginTurnResult(intent=intent, candidates=[], boundary=self.boundary, recorded=later)

    @activity.defn(name=STORE_FAULT_SNAPSHOTS)
    async def store_fault_snapshots(self, inp: StoreSnapshotsInput) -> StoredSnapshots:
        self.snapshot_attempts += 1
        if self.snapshot_store_down:
            raise ApplicationError(
                "fault snapshots could not be stored: HTTP 503",
                {"missing_pointers": sorted(inp.snapshots)},
                type="artifact.unavailable",
            )
        return StoredSnapshots(pointers={name: {"artifact_id": f"sha256:{name}"} for name in inp.snapshots})

    @activity.defn(name=APPEND_EVENT)
    async def append_event(self, inp: AppendInput) -> Event:
        self.appended_inputs.append(inp)
        if str(inp.draft.kind) in self.fail_appends_of and (inp.manifest is not None or inp.snapshots):
            raise ApplicationError(
                "the artifact store failed: disk full",
                {"missing_pointers": ["manifest"]},
                type="artifact.unavailable",
                non_retryable=True,
            )
        return self._append(inp.draft)

    @activity.defn(name=CALL_PROVIDER)
    async def call_provider(self, inp: ProviderCallInput) -> ProviderCallResult:
        self.calls.append(inp)
        return self.answer(inp, activity.info().attempt)

    @activity.defn(name=CALL_AND_RECORD)
    async def call_and_record(self, inp: CallAndRecordInput) -> CallAndRecordResult:
        self.steps += 1
        decision = self._append(inp.decision.draft)
        self._lose_after("DECISION")
        try:
            answer = await self.call_provider(inp.call)
        except ApplicationError as exc:
            if not inp.defer_fault_snapshots:
                raise
            # A failed call (shape 5): the EXECUTION goes back unrecorded for the snapshot step.
            payload = answered(inp.execution.model, None, _echo(inp.call, 1)).failed(
                {"code": exc.type, "detail": exc.message}
            )
            failed = executed(inp.execution, inp.call, None, payload)
            draft = EventDraft.following(inp.decision.draft, EventKind.EXECUTION, failed.payload.as_payload())
            deferred = AppendInput(draft=draft, manifest=inp.manifest, snapshots=failed.snapshots)
            return CallAndRecordResult(decision=decision, deferred=deferred)
        made = executed(inp.execution, inp.call, answer, answered(inp.execution.model, None, answer))
        execution = self._append(
            EventDraft.following(inp.decision.draft, EventKind.EXECUTION, made.payload.as_payload())
        )
        self._lose_after("EXECUTION")
        return CallAndRecordResult(decision=decision, execution=execution)

    def _lose_after(self, kind: str) -> None:
        if self.lose_step_after == kind:  # what a step that dies past this point looks like
            raise ApplicationError("the step was lost", type="ledger.conflict", non_retryable=True)


async def _run(
    env: WorkflowEnvironment,
    fakes: FakeTurnActivities,
    body: dict[str, Any],
    task_queue: str,
) -> TurnResult:
    async with Worker(
        env.client,
        task_queue=task_queue,
        workflows=[TurnWorkflow],
        activities=[
            fakes.begin_turn,
            fakes.append_event,
            fakes.store_fault_snapshots,
            fakes.call_provider,
            fakes.call_and_record,
        ],
    ):
        workflow_id = f"turn-{uuid.uuid4()}"
        result = await env.client.execute_workflow(
            TurnWorkflow.run,
            TurnInput(envelope=parse_intent(body)),
            id=workflow_id,
            task_queue=task_queue,
            execution_timeout=timedelta(seconds=60),
        )
        history = await env.client.get_workflow_handle(workflow_id).fetch_history()
        fakes.history_events = len(history.events)
        fakes.history_types = [event.event_type for event in history.events]
        return result


def _setup(
    policy: str = "turngate.policies.allow_all",
    shape: int = 1,
    provider_activity: str = "regular",
    **kwargs: Any,
) -> tuple[FakeTurnActivities, str, str]:
    task_queue = f"turns-{uuid.uuid4()}"
    boundary = _boundary(task_queue, policy, shape, provider_activity)
    return FakeTurnActivities(boundary, **kwargs), task_queue, f"c-{uuid.uuid4()}"


async def test_an_allowed_turn_records_decision_then_execution(env) -> None:
    fakes, queue, cid = _setup()
    result = await _run(env, fakes, envelope("hello", correlation_id=cid), queue)
    assert (result.decision, result.error_code) == ("ALLOW", None)
    assert fakes.kinds(cid) == ["INTENT", "DECISION", "EXECUTION"]
    assert result.execution is not None and result.execution.digest == fakes.recorded(cid, "EXECUTION").digest
    assert len(fakes.calls) == 1
    assert fakes.recorded(cid, "EXECUTION").payload["output_text"] == "echo: hello"


async def test_a_policy_deny_never_calls_the_provider(env) -> None:
    fakes, queue, cid = _setup("turngate.policies.deny_all")
    result = await _run(env, fakes, envelope("hello", correlation_id=cid), queue)
    assert result.decision == "DENY" and result.execution is None
    assert fakes.kinds(cid) == ["INTENT", "DECISION"] and fakes.calls == []


async def test_an_unknown_model_is_denied_at_decision_time(env) -> None:
    fakes, queue, cid = _setup()
    body = envelope("hello", correlation_id=cid, requested_model_id="nope:some-model")
    result = await _run(env, fakes, body, queue)
    assert (result.decision, result.reason_codes) == ("DENY", ["model.unavailable"])
    assert fakes.calls == []


async def test_a_malformed_client_context_is_denied(env) -> None:
    fakes, queue, cid = _setup()
    body = envelope("hello", correlation_id=cid, inputs={"client_context": {"messages": "not a list"}})
    result = await _run(env, fakes, body, queue)
    assert (result.decision, result.reason_codes) == ("DENY", ["intent.invalid_client_context"])
    assert fakes.calls == []


async def test_a_malformed_provider_response_is_not_retried(env) -> None:
    def malformed(inp: ProviderCallInput, attempt: int) -> ProviderCallResult:
        # Raised retryable on purpose: the workflow's retry policy alone must stop it.
        raise ApplicationError("echo: malformed response", type="provider.invalid_response")

    fakes, queue, cid = _setup(answer=malformed)
    result = await _run(env, fakes, envelope("hello", correlation_id=cid), queue)
    assert (result.decision, result.error_code) == ("ALLOW", "provider.invalid_response")
    assert len(fakes.calls) == 1
    assert fakes.kinds(cid) == ["INTENT", "DECISION", "EXECUTION"]


async def test_a_retryable_provider_error_is_retried_then_answers(env) -> None:
    def flaky(inp: ProviderCallInput, attempt: int) -> ProviderCallResult:
        if attempt == 1:
            raise ApplicationError("echo: HTTP 503", type="provider.overloaded")
        return _echo(inp, attempt)

    fakes, queue, cid = _setup(answer=flaky)
    result = await _run(env, fakes, envelope("hello", correlation_id=cid), queue)
    assert (result.decision, result.error_code) == ("ALLOW", None)
    assert len(fakes.calls) == 2


async def test_a_turn_complete_in_the_ledger_calls_nothing(env) -> None:
    fakes, queue, cid = _setup()
    body = envelope("only once", correlation_id=cid)
    first = await _run(env, fakes, body, queue)
    again = await _run(env, fakes, body, queue)
    assert again.execution == first.execution and again.decision_event == first.decision_event
    assert len(fakes.calls) == 1 and fakes.kinds(cid) == ["INTENT", "DECISION", "EXECUTION"]


async def test_a_decision_whose_artifacts_fail_is_a_system_error_deny(env) -> None:
    fakes, queue, cid = _setup(fail_appends_of={"DECISION"})
    result = await _run(env, fakes, envelope("hello", correlation_id=cid), queue)
    assert (result.decision, result.reason_codes) == ("DENY", ["SYSTEM_ERROR"])
    assert fakes.calls == [] and fakes.kinds(cid) == ["INTENT", "DECISION"]
    assert fakes.recorded(cid, "DECISION").payload["error"]["missing_pointers"] == ["manifest"]


async def test_shape_one_records_each_step_apart(env) -> None:
    fakes, queue, cid = _setup()
    await _run(env, fakes, envelope("hello", correlation_id=cid), queue)
    # 15, and the exchanges-count-always patch's marker and change-version search attribute
    assert fakes.steps == 0 and fakes.history_events == 17


@pytest.mark.parametrize("shape", [2, 3])
@pytest.mark.parametrize(("provider_activity", "events"), [("regular", 13), ("local", 8)])
async def test_shape_two_decides_calls_and_records_in_one_step(env, provider_activity, events, shape) -> None:
    fakes, queue, cid = _setup(shape=shape, provider_activity=provider_activity)
    result = await _run(env, fakes, envelope("hello", correlation_id=cid), queue)
    assert (result.decision, result.error_code) == ("ALLOW", None)
    assert fakes.kinds(cid) == ["INTENT", "DECISION", "EXECUTION"]
    assert result.execution is not None and result.execution.digest == fakes.recorded(cid, "EXECUTION").digest
    assert (fakes.steps, len(fakes.calls), fakes.history_events) == (1, 1, events)


async def test_shape_two_denies_as_shape_one(env) -> None:
    fakes, queue, cid = _setup("turngate.policies.deny_all", shape=3)
    result = await _run(env, fakes, envelope("hello", correlation_id=cid), queue)
    assert result.decision == "DENY" and fakes.steps == 0 and fakes.kinds(cid) == ["INTENT", "DECISION"]


async def test_a_step_lost_after_its_decision_still_ends_the_turn(env) -> None:
    fakes, queue, cid = _setup(shape=3, lose_step_after="DECISION")
    result = await _run(env, fakes, envelope("hello", correlation_id=cid), queue)
    assert (result.decision, result.error_code) == ("ALLOW", "ledger.conflict")
    assert fakes.kinds(cid) == ["INTENT", "DECISION", "EXECUTION"] and fakes.calls == []


async def test_a_step_lost_after_its_execution_keeps_the_recorded_answer(env) -> None:
    fakes, queue, cid = _setup(shape=3, lose_step_after="EXECUTION")
    result = await _run(env, fakes, envelope("hello", correlation_id=cid), queue)
    assert (result.decision, result.error_code) == ("ALLOW", None)
    assert result.execution is not None and result.execution.digest == fakes.recorded(cid, "EXECUTION").digest
    assert fakes.kinds(cid) == ["INTENT", "DECISION", "EXECUTION"] and len(fakes.calls) == 1


@pytest.mark.parametrize(("shape", "before_the_step"), [(2, False), (3, True)])
async def test_shape_three_is_findable_as_an_allow_while_its_step_runs(env, shape, before_the_step) -> None:
    fakes, queue, cid = _setup(shape=shape)
    await _run(env, fakes, envelope("hello", correlation_id=cid), queue)
    types = fakes.history_types
    upsert = types.index(EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES)
    assert types.count(EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES) == 1
    assert (upsert < types.index(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)) is before_the_step


RAISING_POLICY = "tests.workflows.raising_policy"


@pytest.mark.parametrize("shape", [4, 5])
async def test_a_policy_that_raises_is_a_fault_with_a_prompt_snapshot(env, shape) -> None:
    fakes, queue, cid = _setup(RAISING_POLICY, shape=shape)
    result = await _run(env, fakes, envelope("hello", correlation_id=cid), queue)
    assert (result.decision, result.reason_codes) == ("DENY", ["policy.evaluation_error"])
    decision_append = fakes.appended_inputs[-1]
    if shape == 4:  # stored inside the append step
        assert set(decision_append.snapshots) == {"prompt_snapshot"} and fakes.snapshot_attempts == 0
    else:  # stored by the snapshot step first; the append step only points at them
        assert fakes.snapshot_attempts == 1 and decision_append.snapshots == {}
        assert set(decision_append.stored_snapshots) == {"prompt_snapshot"}


async def test_a_snapshot_store_that_stays_down_ends_the_turn_with_a_system_error(env) -> None:
    fakes, queue, cid = _setup(RAISING_POLICY, shape=5, snapshot_store_down=True)
    fakes.boundary = fakes.boundary.model_copy(update={"artifact_deadline_s": 2.0})
    result = await _run(env, fakes, envelope("hello", correlation_id=cid), queue)
    assert (result.decision, result.reason_codes) == ("DENY", ["SYSTEM_ERROR"])
    error = fakes.recorded(cid, "DECISION").payload["error"]
    assert error["missing_pointers"] == ["prompt_snapshot"] and "503" in error["detail"]
    # Its own retries, within the boundary's artifact deadline (2 s here): more than one attempt.
    assert fakes.snapshot_attempts > 1
    assert fakes.appended_inputs[-1].snapshots == {} and fakes.appended_inputs[-1].manifest is None


async def test_a_failed_call_hands_its_execution_to_the_snapshot_step(env) -> None:
    def refused(inp: ProviderCallInput, attempt: int) -> ProviderCallResult:
        raise ApplicationError("echo: HTTP 400", type="provider.bad_request", non_retryable=True)

    fakes, queue, cid = _setup(shape=5, answer=refused)
    result = await _run(env, fakes, envelope("hello", correlation_id=cid), queue)
    assert (result.decision, result.error_code) == ("ALLOW", "provider.bad_request")
    assert fakes.kinds(cid) == ["INTENT", "DECISION", "EXECUTION"] and fakes.snapshot_attempts == 1
    execution_append = fakes.appended_inputs[-1]
    assert set(execution_append.stored_snapshots) == {"prompt_snapshot", "provider_output_snapshot"}
    types = fakes.history_types
    # one more marker than shape 4 (the snapshot step), on the workflow task after the call
    assert types.count(EventType.EVENT_TYPE_MARKER_RECORDED) == 3
