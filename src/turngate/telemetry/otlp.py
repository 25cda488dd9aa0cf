"""OTLP exporters as the standard OTEL_* environment asks for them: gRPC when
``OTEL_EXPORTER_OTLP_PROTOCOL`` (or the signal's own ``..._TRACES_PROTOCOL`` /
``..._METRICS_PROTOCOL``) is ``grpc``, else HTTP/protobuf (OTel's default). Endpoint, headers,
timeout, certificates and compression come from the same environment, read by the exporters."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Literal

from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger(__name__)

Signal = Literal["traces", "metrics"]
GRPC = "grpc"
HTTP = "http/protobuf"


def exporter_names(signal: Signal, environ: Mapping[str, str] | None = None) -> list[str]:
    """The exporters the environment asks for a signal (``[]``: off): ``OTEL_TRACES_EXPORTER`` /
    ``OTEL_METRICS_EXPORTER``, else ``otlp`` when an OTLP endpoint (general or the signal's own)
    is set. Unlike the OTel default, nothing is exported to localhost unless asked for.
    ``OTEL_SDK_DISABLED=true`` wins over everything."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() in ("1", "true", "yes", "on"):
        return []
    names = [
        n.strip().lower() for n in env.get(f"OTEL_{signal.upper()}_EXPORTER", "").split(",") if n.strip()
    ]
    if names:
        return [] if "none" in names else names
    endpoints = ("OTEL_EXPORTER_OTLP_ENDPOINT", f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    return ["otlp"] if any(env.get(name, "").strip() for name in endpoints) else []


def otlp_protocol(signal: Signal, environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    own = env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
    chosen = (own or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or HTTP).strip()
    if chosen not in (GRPC, HTTP):
        log.warning("OTLP protocol %s is not supported (grpc, http/protobuf); using %s", chosen, HTTP)
        return HTTP
    return chosen


def otlp_span_exporter() -> SpanExporter:
    if otlp_protocol("traces") == GRPC:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans

        return GrpcSpans()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans

    return HttpSpans()


def otlp_metric_exporter() -> MetricExporter:
    if otlp_protocol("metrics") == GRPC:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics

        return GrpcMetrics()
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics

    return HttpMetrics()
