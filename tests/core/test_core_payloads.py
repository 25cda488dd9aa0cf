"""DECISION and EXECUTION payloads: the typed models write exactly the bytes recorded before.

``payload_shapes.json`` holds the canonical bytes of every payload shape as the gateway wrote
them when payloads were plain dicts (generated from that code, never regenerated). Each test
builds the same shape from the same inputs with the typed models: a difference would change the
digests of new events and break the equality of old and new turns' records.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ActivityError, ApplicationError, RetryState, TimeoutError, TimeoutType

from turngate.core.canonical import canonical_bytes
from turngate.core.context import CONTEXT_SPEC_SCHEMA_V2, ContextConfig
from turngate.core.decision import DecisionOutcome, decide
from turngate.core.external import ExternalContext, ExternalError
from turngate.core.model_resolution import ModelResolution
from turngate.core.payloads import (
    SYSTEM_ERROR,
    DecisionPayload,
    ExecutionPayload,
    ExecutionPlan,
    PromptRecord,
    TokenBudget,
)
from turngate.core.policy import clear_policy_cache, load_policy
from turngate.core.safety import MaxLengthRule, SafetyRules
from turngate.core.shadow import with_shadows
from turngate.core.tools import ToolSpec
from turngate.workflows.context_scope import with_external
from turngate.workflows.decision_record import client_context_or_deny
from turngate.workflows.execution_record import answered, call_failed, with_tool_calls
from turngate.workflows.redaction import apply_checked_safety, apply_output_safety
from turngate.workflows.shared import ProviderCallResult

GOLDEN: dict[str, str] = json.loads((Path(__file__).parent / "payload_shapes.json").read_text())
PLAN = ExecutionPlan(
    token_budget=TokenBudget(tokens=1000, estimator="chars/3"),
    provider="echo",
    requested_model_id=None,
    resolved_model_id="echo-1",
)
PROMPT = PromptRecord(
    snapshot_digest="sha256:" + "a" * 64,
    profile_digest="sha256:" + "b" * 64,
    system_prompt_sha256="c" * 64,
    task_id="task-1",
    provider="echo",
    profile="student",
    done_event=None,
    snapshot_artifact={"artifact_id": "x"},
    pinned_by_index=3,
    redaction_context=None,
    layers=[{"name": "base"}],
    skipped_layers=[],
)
SYSTEM_ERROR_RECORD = {"code": SYSTEM_ERROR, "detail": "store down", "missing_pointers": ["manifest"]}
MODEL = ModelResolution(requested_model_id=None, resolved_model_id="echo-1", provider="echo", ok=True)
POINTER = {"artifact_id": "art-1", "sha256": "d" * 64, "size": 20000}
CASE_RECORD: dict[str, Any] = {
    "ref_type": "case_query",
    "case_id": "c1",
    "index_version": "sha256:" + "9" * 64,
    "retrieval_query": "lighthouse",
    "top_k": 2,
    "min_score": 0.0,
    "ranking_method": "hybrid-linear",
    "ranking_version": "1",
    "candidate_chunk_ids": ["a"],
    "selected_chunk_ids": ["a"],
    "reason_code": None,
    "index": 0,
}
TOOL = ToolSpec(
    name="signal_done",
    description="done",
    parameters={
        "type": "object",
        "properties": {"signal": {"type": "string", "enum": ["done"]}},
        "required": ["signal"],
    },
    signals={"done": "finish"},
)
CALLS = [
    {"id": "1", "name": "signal_done", "arguments": {"signal": "done"}},
    {"id": "2", "name": "nope", "arguments": {}},
]


def same_bytes(name: str, payload: DecisionPayload | ExecutionPayload | DecisionOutcome) -> None:
    written = payload.payload if isinstance(payload, DecisionOutcome) else payload.as_payload()
    assert canonical_bytes(written).decode() == GOLDEN[name]


@pytest.fixture
def turn(new_chain):
    clear_policy_cache()
    chain = new_chain()
    chain.turn("T", "1", "What is 2+2?", "4")
    refs = [{"ref_type": "event", "ref_id": "1"}, {"ref_type": "execution", "ref_id": "1"}]
    current = chain.intent("T", "2", "more", parent="1", refs=refs)
    yield chain, current
    clear_policy_cache()


def decided(turn, plan: ExecutionPlan | None = PLAN, policy: str | None = "turngate.policies.allow_all"):
    chain, current = turn
    pinned = plan.prompt.pinned() if plan is not None and plan.prompt is not None else None
    return decide(
        current,
        chain.candidates_for(current),
        ContextConfig(),
        load_policy(policy),
        execution=plan,
        prompt=pinned,
    )


def test_decision_shapes(turn) -> None:
    allowed = decided(turn)
    same_bytes("decision.allow", allowed)
    same_bytes("decision.bare", decided(turn, plan=None))
    same_bytes("decision.observer", decided(turn, policy=None))
    prompt = PROMPT.model_copy(update={"tools_offered": ["signal_done"]})
    same_bytes("decision.prompt", decided(turn, plan=PLAN.model_copy(update={"prompt": prompt})))
    error = {"code": "prompt.builder_error", "detail": "boom", "cause": "ValueError"}
    same_bytes("decision.prompt_error", allowed.denied("prompt.builder_error", error))
    same_bytes("decision.model_unavailable", allowed.denied("model.unknown"))
    same_bytes("decision.system_error", allowed.record.denied(SYSTEM_ERROR, SYSTEM_ERROR_RECORD))
    client, invalid = client_context_or_deny({"client_context": "nope"}, allowed)
    assert client is None
    same_bytes("decision.client_context", invalid)
    shadows = [load_policy(None), load_policy("turngate.policies.deny_all")]
    same_bytes("decision.shadow", with_shadows(allowed, shadows))
    down = ExternalContext(error=ExternalError(code="external_refs.unavailable", detail="down", ref_index=-1))
    same_bytes("decision.external_v1_error", with_external(allowed, down))


def test_decision_ref_error_and_external_refs(turn) -> None:
    chain, _ = turn
    policy = load_policy("turngate.policies.allow_all")
    bad = chain.intent("T", "3", "x", refs=[{"ref_type": "event", "ref_id": "nope"}])
    same_bytes("decision.ref_error", decide(bad, [], ContextConfig(), policy, execution=PLAN))
    case = chain.intent(
        "T", "4", "q", refs=[{"ref_type": "case_query", "case_id": "c1", "query": "lighthouse", "top_k": 2}]
    )
    outcome = decide(case, [], ContextConfig(), policy, execution=PLAN, schema_version=CONTEXT_SPEC_SCHEMA_V2)
    same_bytes("decision.external", with_external(outcome, ExternalContext(records=(CASE_RECORD,))))
    refused = ExternalError(code="case.not_found", detail="no case", ref_index=0)
    same_bytes(
        "decision.external_error",
        with_external(outcome, ExternalContext(records=(CASE_RECORD,), error=refused)),
    )


def answer(text: str = "four", **fields: Any) -> ProviderCallResult:
    return ProviderCallResult(
        provider="echo",
        model="echo-1",
        output_text=text,
        usage={"input_tokens": 5, "output_tokens": 1},
        duration_ms=12,
        **fields,
    )


def activity_error(cause: BaseException) -> ActivityError:
    error = ActivityError(
        "activity error",
        scheduled_event_id=1,
        started_event_id=2,
        identity="w",
        activity_type="turngate.call_provider",
        activity_id="1",
        retry_state=RetryState.NON_RETRYABLE_FAILURE,
    )
    error.__cause__ = cause
    return error


DIGEST = "sha256:5ac157c0d66ec2630da232d71b92d73055d9b271fcfb368eaa67e6649aa25b6c"


def ok(result: ProviderCallResult) -> ExecutionPayload:
    return answered(MODEL, DIGEST, result)


def failed(exc: ActivityError | TimeoutError) -> ExecutionPayload:
    return call_failed(MODEL, DIGEST, exc)


def test_execution_answers() -> None:
    same_bytes("execution.ok", ok(answer()))
    same_bytes("execution.no_usage", ok(ProviderCallResult(provider="echo", model="echo-1", output_text="x")))
    same_bytes("execution.offloaded", ok(answer("p" * 10, output_artifact=POINTER, output_truncated=True)))
    same_bytes("execution.system_error", ok(answer()).failed(SYSTEM_ERROR_RECORD))


def test_execution_errors() -> None:
    auth = ApplicationError("bad key", {"status_code": 401, "code": "provider.auth"}, type="provider.auth")
    same_bytes("execution.provider_error", failed(activity_error(auth)))
    same_bytes("execution.provider_error_nodetails", failed(activity_error(ApplicationError("weird"))))
    timeout = TimeoutError("t", type=TimeoutType.START_TO_CLOSE, last_heartbeat_details=[])
    same_bytes("execution.timeout", failed(activity_error(timeout)))
    replayed = TimeoutError("t", type=TimeoutType.SCHEDULE_TO_CLOSE, last_heartbeat_details=[])
    same_bytes("execution.bare_timeout", failed(replayed))
    same_bytes("execution.other_error", failed(activity_error(RuntimeError("x"))))
    auth = ApplicationError("bad key", {"status_code": 401}, type="provider.auth")
    same_bytes("execution.system_error_after_error", failed(activity_error(auth)).failed(SYSTEM_ERROR_RECORD))


def test_execution_tool_calls() -> None:
    transitions = {"task": {"ai_transitions": {"finish": "debrief"}}}
    admitted = with_tool_calls(ok(answer(tool_calls=CALLS)), CALLS, [TOOL], transitions)
    same_bytes("execution.tools", admitted.model_copy(update={"exchanges_count": 2}))
    same_bytes("execution.tools_no_phase", with_tool_calls(ok(answer(tool_calls=CALLS)), CALLS, [TOOL], {}))
    same_bytes("execution.tools_all_rejected", with_tool_calls(ok(answer()), CALLS[1:], [TOOL], {}))


def test_execution_output_safety() -> None:
    verdict = {"ok": False, "rule_id": "r1", "reason_code": "safety.blocklist", "detail": "no"}
    checked = answer("", safety=verdict, redacted_output=POINTER)
    withheld, stored = apply_checked_safety(ok(checked), checked)
    assert stored == {"redacted_output": POINTER}
    same_bytes("execution.redacted", withheld.model_copy(update={"exchanges_count": 1}))
    passed = answer(safety={"ok": True, "rule_id": None, "reason_code": None, "detail": None})
    assert apply_checked_safety(ok(passed), passed) == (ok(passed), {})
    same_bytes("execution.safety_ok", ok(passed))
    rules = SafetyRules(rules=(MaxLengthRule(id="len", type="max_length", max_chars=3),))
    legacy, snapshots = apply_output_safety(ok(answer()), answer(), rules)
    assert snapshots == {"redacted_output": "four"}
    same_bytes("execution.legacy_redacted", legacy)


def test_every_shape_is_checked() -> None:
    source = Path(__file__).read_text()
    assert all(f'"{name}"' in source for name in GOLDEN)
