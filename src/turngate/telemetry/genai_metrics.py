"""The OTel GenAI client metrics, ``gen_ai.client.token.usage`` and
``gen_ai.client.operation.duration``, exported over OTLP.

On when the OTEL_* environment asks for metrics (``OTEL_METRICS_EXPORTER`` other than ``none``,
or an ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``) or when a caller
passes a reader (tests); ``OTEL_SDK_DISABLED=true`` turns it off. The export interval is
``OTEL_METRIC_EXPORT_INTERVAL`` (ms, default 60000). Prometheus's ``/metrics`` carries the same
calls as ``turngate_provider_*`` (turngate.telemetry.metrics); this is the OTel-native view.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import SERVICE_NAME, Resource

from turngate import __version__
from turngate.telemetry.otlp import exporter_names, otlp_metric_exporter

log = logging.getLogger(__name__)

TOKEN_USAGE = "gen_ai.client.token.usage"
OPERATION_DURATION = "gen_ai.client.operation.duration"
#: Bucket boundaries the GenAI conventions recommend for each histogram.
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)


class GenAiMetrics:
    def __init__(self, provider: MeterProvider) -> None:
        self.provider = provider
        meter = provider.get_meter("turngate", __version__)
        self.tokens = meter.create_histogram(
            TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=list(TOKEN_BUCKETS),
        )
        self.duration = meter.create_histogram(
            OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )


_lock = threading.Lock()
_current: GenAiMetrics | None = None


def _readers(names: list[str]) -> list[MetricReader]:
    readers: list[MetricReader] = []
    for name in names:
        if name == "otlp":
            readers.append(PeriodicExportingMetricReader(otlp_metric_exporter()))
        elif name == "console":
            readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter()))
        else:
            log.warning("OTEL_METRICS_EXPORTER=%s is not supported by turngate (otlp, console, none)", name)
    return readers


def configure_genai_metrics(service_name: str, *, reader: MetricReader | None = None) -> bool:
    """Start exporting the GenAI metrics of this process; False when the environment does not
    ask for it. A later call replaces the earlier configuration (tests)."""
    global _current
    readers = [reader] if reader is not None else _readers(exporter_names("metrics"))
    if not readers:
        return False
    name = os.environ.get("OTEL_SERVICE_NAME", "").strip() or service_name
    resource = Resource.create({SERVICE_NAME: name, "service.version": __version__})
    with _lock:
        previous, _current = _current, GenAiMetrics(MeterProvider(resource=resource, metric_readers=readers))
    if previous is not None:
        previous.provider.shutdown()
    return True


def flush_genai_metrics(timeout_millis: int = 5000) -> None:
    current = _current
    if current is not None:
        current.provider.force_flush(timeout_millis)


def shutdown_genai_metrics() -> None:
    global _current
    with _lock:
        current, _current = _current, None
    if current is not None:
        current.provider.shutdown()


def record_genai_call(
    attributes: Mapping[str, Any], *, seconds: float, input_tokens: int | None, output_tokens: int | None
) -> None:
    """One provider call: its duration and, when the provider reported them, its tokens."""
    current = _current
    if current is None:
        return
    current.duration.record(seconds, dict(attributes))
    for kind, count in (("input", input_tokens), ("output", output_tokens)):
        if count is not None:
            current.tokens.record(count, {**attributes, "gen_ai.token.type": kind})
