"""The typed models the workflow and its activities exchange read every payload the recorded
histories hold, and the current workflow schedules the provider call with the same input a
recorded turn did (JSON-equal): an activity scheduled before an upgrade still runs after it, and
a rerun sends the provider what the recorded turn sent."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import (
    Interceptor,
    Replayer,
    StartActivityInput,
    StartLocalActivityInput,
    UnsandboxedWorkflowRunner,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)
from temporalio.workflow import ActivityHandle

from tests.replay.test_replay import COMPATIBLE, HISTORIES, _history
from turngate.core.events import Event
from turngate.core.external import ExternalContext
from turngate.workflows.shared import (
    BeginTurnResult,
    CallAndRecordInput,
    CallAndRecordResult,
    ExternalRefsInput,
    ProviderCallInput,
    ProviderCallResult,
    StoredSnapshots,
)
from turngate.workflows.turn import TurnWorkflow
from turngate.workflows.turn_activities import (
    APPEND_EVENT,
    BEGIN_TURN,
    CALL_AND_RECORD,
    CALL_PROVIDER,
    RESOLVE_EXTERNAL_REFS,
    STORE_FAULT_SNAPSHOTS,
)

INPUTS: dict[str, type[BaseModel]] = {
    CALL_PROVIDER: ProviderCallInput,
    RESOLVE_EXTERNAL_REFS: ExternalRefsInput,
    CALL_AND_RECORD: CallAndRecordInput,
}
RESULTS: dict[str, type[BaseModel]] = {
    BEGIN_TURN: BeginTurnResult,
    APPEND_EVENT: Event,
    CALL_PROVIDER: ProviderCallResult,
    RESOLVE_EXTERNAL_REFS: ExternalContext,
    CALL_AND_RECORD: CallAndRecordResult,
    STORE_FAULT_SNAPSHOTS: StoredSnapshots,
}


def _json(payload: dict[str, Any]) -> Any:
    return json.loads(base64.b64decode(payload["data"]))


def _events(name: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = json.loads((HISTORIES / f"{name}.json").read_text())["events"]
    return events


def _recorded_payloads(name: str) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """(activity type, input JSON) of each scheduled activity; (type, result JSON) of each result."""
    inputs: list[tuple[str, Any]] = []
    results: list[tuple[str, Any]] = []
    scheduled: dict[str, str] = {}
    for event in _events(name):
        kind = event["eventType"]
        if kind == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED":
            attrs = event["activityTaskScheduledEventAttributes"]
            scheduled[event["eventId"]] = attrs["activityType"]["name"]
            inputs.append((attrs["activityType"]["name"], _json(attrs["input"]["payloads"][0])))
        elif kind == "EVENT_TYPE_ACTIVITY_TASK_COMPLETED":
            attrs = event["activityTaskCompletedEventAttributes"]
            results.append((scheduled[attrs["scheduledEventId"]], _json(attrs["result"]["payloads"][0])))
        elif kind == "EVENT_TYPE_MARKER_RECORDED":
            attrs = event["markerRecordedEventAttributes"]
            if attrs["markerName"] == "core_local_activity" and "result" in attrs["details"]:
                data = _json(attrs["details"]["data"]["payloads"][0])
                results.append((data["activity_type"], _json(attrs["details"]["result"]["payloads"][0])))
    return inputs, results


@pytest.mark.parametrize("name", COMPATIBLE)
def test_recorded_activity_payloads_validate_into_the_typed_models(name: str) -> None:
    inputs, results = _recorded_payloads(name)
    assert results, "every history has activity results"
    for activity_type, data in inputs:
        dumped = json.loads(INPUTS[activity_type].model_validate(data).model_dump_json())
        # Fields added since the history was recorded take their defaults; the rest is unchanged.
        assert {key: dumped[key] for key in data} == data, f"{activity_type} input changes on a round trip"
    for activity_type, data in results:
        RESULTS[activity_type].model_validate(data)


_scheduled: list[tuple[str, Any]] = []


class _Outbound(WorkflowOutboundInterceptor):
    def start_activity(self, input: StartActivityInput) -> ActivityHandle[Any]:
        _scheduled.append((input.activity, input.args[0]))
        return super().start_activity(input)

    def start_local_activity(self, input: StartLocalActivityInput) -> ActivityHandle[Any]:
        _scheduled.append((input.activity, input.args[0]))
        return super().start_local_activity(input)


class _Inbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_Outbound(outbound))


class _Capture(Interceptor):
    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        return _Inbound


@pytest.mark.parametrize("name", COMPATIBLE)
async def test_replay_schedules_the_recorded_provider_input(name: str) -> None:
    _scheduled.clear()
    replayer = Replayer(
        workflows=[TurnWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=UnsandboxedWorkflowRunner(),
        interceptors=[_Capture()],
    )
    result = await replayer.replay_workflow(_history(name), raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
    provider_steps = {CALL_PROVIDER, CALL_AND_RECORD}
    recorded = [data for activity, data in _recorded_payloads(name)[0] if activity in provider_steps]
    sent = [json.loads(arg.model_dump_json()) for activity, arg in _scheduled if activity in provider_steps]
    if recorded:  # a regular provider activity: its input is in the history
        assert [{key: call[key] for key in old} for call, old in zip(sent, recorded, strict=True)] == recorded
    assert next(activity for activity, _ in _scheduled) == BEGIN_TURN
