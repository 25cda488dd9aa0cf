"""1-in-N sampling of successful turns: which turns, what they store, what the manifest says."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError

from turngate.core.messages import ChatMessage
from turngate.core.model_resolution import ModelResolution
from turngate.core.sampling import MAX_SAMPLE_N, sampled
from turngate.settings import load_settings
from turngate.workflows.execution_record import answered, call_failed, executed
from turngate.workflows.shared import ExecutionContext, ProviderCallInput, ProviderCallResult

MODEL = ModelResolution(provider="echo", requested_model_id=None, resolved_model_id="echo-1", ok=True)


def _call(correlation_id: str) -> ProviderCallInput:
    return ProviderCallInput(
        correlation_id=correlation_id,
        provider="echo",
        model="echo-1",
        messages=[ChatMessage(role="user", content="hello")],
    )


def _context(one_in: int) -> ExecutionContext:
    return ExecutionContext(model=MODEL, context_digest=None, snapshot_sample_n=one_in)


def test_one_in_n_is_a_pure_function_of_the_correlation_id() -> None:
    ids = [f"c-{i}" for i in range(4000)]
    chosen = [cid for cid in ids if sampled(cid, 4)]
    assert 850 < len(chosen) < 1150  # about a quarter
    assert chosen == [cid for cid in ids if sampled(cid, 4)]  # the same every time
    assert all(sampled(cid, 1) for cid in ids[:50])
    assert not any(sampled(cid, 0) for cid in ids[:50])


def test_a_sampled_successful_turn_stores_what_a_fault_would() -> None:
    cid = next(f"c-{i}" for i in range(100) if sampled(f"c-{i}", 3))
    answer = ProviderCallResult(provider="echo", model="echo-1", output_text="echo: hello")
    made = executed(_context(3), _call(cid), answer, answered(MODEL, None, answer))
    assert set(made.snapshots) == {"prompt_snapshot", "provider_output_snapshot"}
    assert json.loads(made.snapshots["provider_output_snapshot"])["fault_triggers"] == ["sampled"]
    unsampled = next(f"c-{i}" for i in range(100) if not sampled(f"c-{i}", 3))
    assert executed(_context(3), _call(unsampled), answer, answered(MODEL, None, answer)).snapshots == {}
    assert executed(_context(0), _call(cid), answer, answered(MODEL, None, answer)).snapshots == {}


def test_a_failed_turn_is_a_fault_not_a_sample() -> None:
    cid = next(f"c-{i}" for i in range(100) if sampled(f"c-{i}", 2))
    payload = call_failed(MODEL, None, ApplicationError("echo: HTTP 500", type="provider.server_error"))
    made = executed(_context(2), _call(cid), None, payload)
    assert json.loads(made.snapshots["provider_output_snapshot"])["fault_triggers"] == ["provider_error"]


@pytest.mark.parametrize(
    ("value", "ok"), [(0, True), (1, True), (MAX_SAMPLE_N, True), (-1, False), (MAX_SAMPLE_N + 1, False)]
)
def test_the_setting_is_bounded(value: int, ok: bool) -> None:
    if ok:
        assert load_settings(snapshot_sample_n=value).snapshot_sample_n == value
    else:
        with pytest.raises(ValidationError):
            load_settings(snapshot_sample_n=value)


JSON_OBJECT = {"client_context": {"request_options": {"response_format": {"type": "json_object"}}}}


@pytest.mark.parametrize(
    ("text", "output_faults", "triggers"),
    [
        ('{"sky": "clear"}', True, None),  # valid: no fault
        ("not json at all", True, ["schema_validation_failed"]),
        ("not json at all", False, None),  # a turn of an earlier shape: recorded, no snapshot
    ],
)
def test_an_answer_that_fails_the_asked_schema_is_a_fault(
    text: str, output_faults: bool, triggers: list[str] | None
) -> None:
    context = ExecutionContext(
        model=MODEL, context_digest=None, inputs=JSON_OBJECT, output_faults=output_faults
    )
    answer = ProviderCallResult(provider="echo", model="echo-1", output_text=text)
    made = executed(context, _call("c-schema"), answer, answered(MODEL, None, answer))
    assert made.payload.output_check is not None  # the verdict is recorded either way
    if triggers is None:
        assert made.snapshots == {}
    else:
        assert made.payload.output_check["valid"] is False
        assert json.loads(made.snapshots["provider_output_snapshot"])["fault_triggers"] == triggers


def test_a_rejected_tool_call_is_a_fault() -> None:
    context = ExecutionContext(model=MODEL, context_digest=None, output_faults=True)
    call = {"id": "call_1", "name": "nobody_offered_this", "arguments": {}}
    answer = ProviderCallResult(provider="echo", model="echo-1", output_text="", tool_calls=[call])
    made = executed(context, _call("c-tool"), answer, answered(MODEL, None, answer))
    assert made.payload.tool_calls_rejected
    assert json.loads(made.snapshots["provider_output_snapshot"])["fault_triggers"] == ["tool_call_rejected"]
