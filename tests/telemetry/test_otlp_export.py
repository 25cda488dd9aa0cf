"""A turn through the real API and worker exports its spans and the GenAI metrics over OTLP/gRPC
to a local collector stand-in, configured only by the standard OTEL_* environment; Prometheus
carries the build, decision-reason and HTTP request metrics."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.stack import make_settings, running_stack
from tests.telemetry.otlp_collector import Collector, otlp_collector
from turngate import __version__
from turngate.devserver import DevServer
from turngate.telemetry import flush_tracing, shutdown_tracing, tracer
from turngate.telemetry.genai_metrics import (
    OPERATION_DURATION,
    TOKEN_USAGE,
    flush_genai_metrics,
    shutdown_genai_metrics,
)
from turngate.telemetry.logs import TraceContextFilter, json_formatter

SECRET = "aubergine-quartz-9931"


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[Collector]:
    with otlp_collector() as (collector, port):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "600000")  # exported by the flush below
        yield collector
        shutdown_genai_metrics()
        shutdown_tracing()


async def _until(check, timeout_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not check() and loop.time() < deadline:
        await asyncio.sleep(0.1)


async def test_spans_and_genai_metrics_reach_an_otlp_grpc_collector(
    collector: Collector, tmp_path: Path, temporal_server: DevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(tmp_path, temporal_server.address)
    thread = f"thread-{uuid.uuid4().hex[:8]}"
    async with running_stack(settings) as stack:
        body = {
            "interface_version": 3,
            "correlation_id": thread,
            "payload": {
                "intent_type": "chat.message",
                "payload": {"message": SECRET},
                "budget": {"max_tokens": 77},
            },
        }
        response = await stack.http.post("/ingress/intent", params={"wait": "execution"}, json=body)
        assert response.status_code == 202, response.text
        prometheus = (await stack.http.get("/metrics")).text
        await _until(lambda: "CompleteWorkflow:TurnWorkflow" in collector.spans or flush_tracing() or False)
    flush_tracing()
    flush_genai_metrics()
    await _until(lambda: TOKEN_USAGE in collector.metrics)

    assert {"POST /ingress/intent", "RunWorkflow:TurnWorkflow", "chat echo-1"} <= set(collector.spans)
    [genai] = collector.spans["chat echo-1"]
    assert genai["gen_ai.conversation.id"] == thread
    assert genai["gen_ai.request.max_tokens"] == 77
    assert genai["gen_ai.provider.name"] == "echo"
    assert genai["gen_ai.usage.output_tokens"] >= 1
    assert SECRET not in json.dumps(collector.spans, default=str)  # no content unless opted in

    assert collector.metric_units[TOKEN_USAGE] == "{token}"
    assert collector.metric_units[OPERATION_DURATION] == "s"
    token_types = {point["gen_ai.token.type"] for point in collector.metrics[TOKEN_USAGE]}
    assert token_types == {"input", "output"}
    # cumulative temporality: each export repeats the same point (the worker's exit flushes too)
    durations = collector.metrics[OPERATION_DURATION]
    assert {(p["gen_ai.operation.name"], p["gen_ai.request.model"]) for p in durations} == {
        ("chat", "echo-1")
    }

    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(prometheus)
        for s in family.samples
    }
    assert samples[("turngate_build_info", (("python", _python()), ("version", __version__)))] == 1
    reason = ("turngate_decision_reasons_total", (("decision", "ALLOW"), ("reason_code", "policy.allow_all")))
    assert samples[reason] >= 1
    ingress = (
        "turngate_http_requests_total",
        (("method", "POST"), ("route", "/ingress/intent"), ("status", "202")),
    )
    assert samples[ingress] >= 1


def _python() -> str:
    import platform

    return platform.python_version()


async def test_content_on_spans_only_when_opted_in(
    collector: Collector, tmp_path: Path, temporal_server: DevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    settings = make_settings(tmp_path, temporal_server.address)
    async with running_stack(settings) as stack:
        response = await stack.chat(SECRET, correlation_id=f"c-{uuid.uuid4().hex}")
        assert response.status_code == 202
        await _until(lambda: "chat echo-1" in collector.spans or flush_tracing() or False)
    [genai] = collector.spans["chat echo-1"]
    sent = json.loads(genai["gen_ai.input.messages"])
    assert sent[-1]["parts"][0]["content"] == SECRET
    assert SECRET in json.loads(genai["gen_ai.output.messages"])[0]["parts"][0]["content"]


def test_json_logs_carry_the_trace_id(monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from turngate.telemetry import configure_tracing

    configure_tracing("turngate-test", exporter=InMemorySpanExporter())
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(json_formatter())
    handler.addFilter(TraceContextFilter())
    log = logging.getLogger("turngate.test.json")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        with tracer().start_as_current_span("work") as span:
            log.info("inside %s", "a span")
        log.info("outside")
    finally:
        log.removeHandler(handler)
        shutdown_tracing()
    inside, outside = (json.loads(line) for line in out.getvalue().splitlines())
    assert inside["message"] == "inside a span"
    assert inside["level"] == "INFO" and inside["logger"] == "turngate.test.json"
    assert inside["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert inside["span_id"] == format(span.get_span_context().span_id, "016x")
    assert "trace_id" not in outside and "time" in outside
