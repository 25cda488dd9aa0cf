"""provider_span (GenAI conventions, content only on request) and the decision annotations."""

from __future__ import annotations

import asyncio
import json

import pytest
from opentelemetry.trace import SpanKind, StatusCode
from temporalio.exceptions import ApplicationError

from turngate.core.events import Event, EventKind
from turngate.telemetry import (
    TurngateMetrics,
    annotate_decision,
    annotate_event,
    observe_ledger_event,
    provider_span,
    tracer,
)

PROMPT = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "my secret plan"}]
DECISION = {
    "decision": "DENY",
    "reason_codes": ["REF_NOT_FOUND"],
    "policy_id": "acme.policy",
    "policy_version": "3",
    "context_digest": "sha256:" + "ab" * 32,
    "context_spec": {"big": "structure"},
    "boundary": {"context_config_digest": "sha256:" + "cd" * 32},
    "resolved_refs": [],
}


def event(kind: EventKind, index: int, payload: dict) -> Event:
    return Event(
        kind=kind,
        thread_id="t-1",
        turn_id="u-1",
        correlation_id="c-1",
        intent_type="chat.message",
        payload=payload,
        index=index,
        digest=f"sha256:{index:064x}",
    )


def the_span(spans, name: str):
    (span,) = [s for s in spans.get_finished_spans() if s.name == name]
    return span


def test_provider_span_has_genai_attributes_and_no_content(spans) -> None:
    metrics = TurngateMetrics()
    with provider_span("openai", "gpt-4o-mini", metrics=metrics) as call:
        call.record_input(PROMPT)
        call.record_usage({"input_tokens": 12, "output_tokens": 5})
        call.record_response(model="gpt-4o-mini-2024-07-18", finish_reason="stop")
        call.record_output("the secret answer")
    span = the_span(spans, "chat gpt-4o-mini")
    assert span.kind == SpanKind.CLIENT
    assert dict(span.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 5,
    }
    assert span.events == ()
    value = metrics.registry.get_sample_value
    assert (
        value(
            "turngate_provider_latency_seconds_count",
            {"provider": "openai", "model": "gpt-4o-mini", "outcome": "ok"},
        )
        == 1
    )
    assert value("turngate_provider_tokens_total", {"provider": "openai", "direction": "input"}) == 12
    assert value("turngate_provider_tokens_total", {"provider": "openai", "direction": "output"}) == 5


@pytest.mark.parametrize(
    "switch", ["TURNGATE_TRACE_CONTENT", "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"]
)
def test_content_only_when_opted_in(spans, monkeypatch, switch: str) -> None:
    with provider_span("anthropic", "claude-x", operation="chat") as call:
        call.record_input(PROMPT)
        call.record_output("the secret answer")
    assert "secret" not in json.dumps(dict(the_span(spans, "chat claude-x").attributes))
    spans.clear()
    monkeypatch.setenv(switch, "true")
    with provider_span("anthropic", "claude-x", operation="chat") as call:
        call.record_input(PROMPT)
        call.record_output("the secret answer")
    span = the_span(spans, "chat claude-x")
    assert span.events == ()  # the conventions' opt-in attributes, not events
    sent = json.loads(span.attributes["gen_ai.input.messages"])
    assert sent[1] == {"role": "user", "parts": [{"type": "text", "content": "my secret plan"}]}
    answer = json.loads(span.attributes["gen_ai.output.messages"])
    assert answer[0]["parts"][0]["content"] == "the secret answer"


def test_conversation_response_server_and_max_tokens(spans) -> None:
    with provider_span(
        "openai",
        "gpt-4o-mini",
        conversation_id="thread-1",
        max_tokens=64,
        server_url="https://api.openai.com/v1",
    ) as call:
        call.record_response_id("chatcmpl-123")
    attrs = the_span(spans, "chat gpt-4o-mini").attributes
    assert attrs["gen_ai.conversation.id"] == "thread-1"
    assert attrs["gen_ai.request.max_tokens"] == 64
    assert attrs["gen_ai.response.id"] == "chatcmpl-123"
    assert (attrs["server.address"], attrs["server.port"]) == ("api.openai.com", 443)
    with provider_span("ollama", "llama", server_url="http://127.0.0.1:11434"):
        pass
    attrs = the_span(spans, "chat llama").attributes
    assert (attrs["server.address"], attrs["server.port"]) == ("127.0.0.1", 11434)
    with provider_span("echo", "echo-1", server_url=None):
        pass
    assert "server.address" not in the_span(spans, "chat echo-1").attributes


def test_errors_carry_their_type_not_their_message(spans) -> None:
    metrics = TurngateMetrics()
    with pytest.raises(ApplicationError), provider_span("openai", "m", metrics=metrics):
        raise ApplicationError("quota exceeded for prompt 'my secret plan'", type="provider.rate_limited")
    span = the_span(spans, "chat m")
    assert span.attributes["error.type"] == "provider.rate_limited"
    assert span.status.status_code == StatusCode.ERROR
    assert "secret" not in str(span.status.description) and span.events == ()
    labels = {"provider": "openai", "model": "m", "outcome": "error"}
    assert metrics.registry.get_sample_value("turngate_provider_latency_seconds_count", labels) == 1


async def test_cancellation_is_its_own_outcome(spans) -> None:
    metrics = TurngateMetrics()

    async def call() -> None:
        with provider_span("ollama", "llama3", metrics=metrics):
            await asyncio.sleep(10)

    task = asyncio.create_task(call())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert the_span(spans, "chat llama3").attributes["error.type"] == "activity.cancelled"
    labels = {"provider": "ollama", "model": "llama3", "outcome": "cancelled"}
    assert metrics.registry.get_sample_value("turngate_provider_latency_seconds_count", labels) == 1


def test_metrics_are_recorded_with_tracing_off() -> None:
    metrics = TurngateMetrics()
    with provider_span("echo", "echo-1", metrics=metrics) as call:
        call.record_usage({"input_tokens": 3, "output_tokens": None})
        assert not call.span.is_recording()
    assert (
        metrics.registry.get_sample_value(
            "turngate_provider_tokens_total", {"provider": "echo", "direction": "input"}
        )
        == 3
    )
    assert (
        metrics.registry.get_sample_value(
            "turngate_provider_tokens_total", {"provider": "echo", "direction": "output"}
        )
        is None
    )


def test_annotate_decision_on_a_given_or_the_current_span(spans) -> None:
    with tracer().start_as_current_span("given") as given:
        annotate_decision(given, DECISION, thread_id="t-1", turn_id="u-1", correlation_id="c-1")
    with tracer().start_as_current_span("current"):
        annotate_decision(None, DECISION | {"context_digest": None})
    attrs = the_span(spans, "given").attributes
    assert dict(attrs) == {
        "turngate.decision": "DENY",
        "turngate.reason_codes": ("REF_NOT_FOUND",),
        "turngate.policy_id": "acme.policy",
        "turngate.policy_version": "3",
        "turngate.context_digest": "sha256:" + "ab" * 32,
        "turngate.context_config_digest": "sha256:" + "cd" * 32,
        "turngate.thread_id": "t-1",
        "turngate.turn_id": "u-1",
        "turngate.correlation_id": "c-1",
    }
    current = the_span(spans, "current").attributes
    assert current["turngate.decision"] == "DENY" and "turngate.context_digest" not in current
    annotate_decision(None, DECISION)  # no current span: nothing happens


def test_ledger_event_hook_annotates_and_counts(spans) -> None:
    metrics = TurngateMetrics()
    with tracer().start_as_current_span("RunActivity:turngate.append_event"):
        observe_ledger_event(event(EventKind.DECISION, 7, DECISION), metrics)
    with tracer().start_as_current_span("RunActivity:turngate.begin_turn"):
        annotate_event(None, event(EventKind.INTENT, 6, {"payload": {"message": "my secret plan"}}))
    decision = the_span(spans, "RunActivity:turngate.append_event").attributes
    assert decision["turngate.event.kind"] == "DECISION" and decision["turngate.event.index"] == 7
    assert decision["turngate.decision"] == "DENY"
    intent = the_span(spans, "RunActivity:turngate.begin_turn").attributes
    assert "secret" not in str(dict(intent))
    assert metrics.registry.get_sample_value("turngate_turns_total", {"decision": "DENY"}) == 1
    assert metrics.registry.get_sample_value("turngate_ledger_events") == 8
