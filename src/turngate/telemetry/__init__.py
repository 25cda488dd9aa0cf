"""Telemetry: OpenTelemetry tracing (API -> workflow -> activities, GenAI attributes) and
Prometheus metrics (turngate's own registry, plus the Temporal SDK's). See docs/TELEMETRY.md."""

from turngate.telemetry.genai import (
    CONTENT_ENV,
    ProviderCall,
    annotate_decision,
    annotate_event,
    content_capture_enabled,
    decision_attributes,
    error_type,
    provider_span,
)
from turngate.telemetry.hooks import observe_ledger_event
from turngate.telemetry.http import (
    TracingMiddleware,
    current_trace_id,
    fastapi_telemetry_options,
    instrument_app,
)
from turngate.telemetry.metrics import (
    WORKER_METRICS_ENV,
    MetricsServer,
    TurngateMetrics,
    default_metrics,
    metrics_router,
    serve_worker_metrics,
    turn_queue_source,
)
from turngate.telemetry.temporal_metrics import TEMPORAL_METRICS_ENV, TemporalSdkMetrics, temporal_runtime
from turngate.telemetry.tracing import (
    API_SERVICE,
    WORKER_SERVICE,
    configure_tracing,
    flush_tracing,
    shutdown_tracing,
    temporal_interceptors,
    tracer,
    tracing_enabled,
)

__all__ = [
    "API_SERVICE",
    "CONTENT_ENV",
    "TEMPORAL_METRICS_ENV",
    "WORKER_METRICS_ENV",
    "WORKER_SERVICE",
    "MetricsServer",
    "ProviderCall",
    "TemporalSdkMetrics",
    "TracingMiddleware",
    "TurngateMetrics",
    "annotate_decision",
    "annotate_event",
    "configure_tracing",
    "content_capture_enabled",
    "current_trace_id",
    "decision_attributes",
    "default_metrics",
    "error_type",
    "fastapi_telemetry_options",
    "flush_tracing",
    "instrument_app",
    "metrics_router",
    "observe_ledger_event",
    "provider_span",
    "serve_worker_metrics",
    "shutdown_tracing",
    "temporal_interceptors",
    "temporal_runtime",
    "tracer",
    "tracing_enabled",
    "turn_queue_source",
]
