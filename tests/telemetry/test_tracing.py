"""configure_tracing: on only when OTEL_* (or an explicit exporter) asks; no overhead when off."""

from __future__ import annotations

import logging

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.contrib.opentelemetry import TracingInterceptor

from turngate.telemetry import (
    configure_tracing,
    flush_tracing,
    shutdown_tracing,
    temporal_interceptors,
    tracer,
    tracing_enabled,
)
from turngate.telemetry.tracing import traces_exporter_names


def test_off_without_otel_env() -> None:
    assert configure_tracing("turngate-api") is None
    assert temporal_interceptors() == []
    assert not tracing_enabled()
    with tracer().start_as_current_span("nothing") as span:
        assert not span.is_recording()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, []),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, ["otlp", "console"]),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, []),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, []),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"}, []),
    ],
)
def test_exporters_from_the_standard_env(env, expected) -> None:
    assert traces_exporter_names(env) == expected


@pytest.mark.parametrize(
    "env",
    [
        {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
        {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
    ],
)
def test_none_and_sdk_disabled_are_respected(monkeypatch, env) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert configure_tracing("turngate-worker") is None
    assert temporal_interceptors() == []


def test_sdk_disabled_wins_over_an_explicit_exporter(monkeypatch) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert configure_tracing("turngate-worker", exporter=InMemorySpanExporter()) is None
    assert not tracing_enabled()


def test_otlp_endpoint_turns_tracing_on_with_a_batch_processor(monkeypatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")  # nothing is exported
    provider = configure_tracing("turngate-worker")
    assert provider is not None
    assert provider.resource.attributes["service.name"] == "turngate-worker"
    processors = provider._active_span_processor._span_processors
    assert [type(p) for p in processors] == [BatchSpanProcessor]
    interceptors = temporal_interceptors()
    assert len(interceptors) == 1 and isinstance(interceptors[0], TracingInterceptor)
    # The first configuration of a process wins (API and worker in one process share it).
    assert configure_tracing("turngate-api") is provider
    flush_tracing()  # nothing queued: returns at once
    shutdown_tracing()
    assert temporal_interceptors() == []


def test_service_name_and_resource_from_env(monkeypatch) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "edge-gateway")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    provider = configure_tracing("turngate-api", exporter=InMemorySpanExporter())
    assert provider is not None
    assert provider.resource.attributes["service.name"] == "edge-gateway"
    assert provider.resource.attributes["deployment.environment"] == "test"


def test_unsupported_exporter_is_reported_and_off(monkeypatch, caplog) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    with caplog.at_level(logging.WARNING):
        assert configure_tracing("turngate-api") is None
    assert "zipkin" in caplog.text


def test_the_global_provider_follows_reconfiguration() -> None:
    first, second = InMemorySpanExporter(), InMemorySpanExporter()
    configure_tracing("turngate-test", exporter=first)
    outside = trace.get_tracer("some.library")  # what FastAPI and libraries use
    with outside.start_as_current_span("one"):
        pass
    configure_tracing("turngate-test", exporter=second)
    with outside.start_as_current_span("two"), tracer().start_as_current_span("three"):
        pass
    shutdown_tracing()
    with outside.start_as_current_span("four") as span:
        assert not span.is_recording()
    assert [s.name for s in first.get_finished_spans()] == ["one"]
    assert [s.name for s in second.get_finished_spans()] == ["three", "two"]
