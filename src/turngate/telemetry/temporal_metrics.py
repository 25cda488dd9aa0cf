"""The Temporal SDK's own metrics (slots, poll and schedule-to-start latencies, RPCs, ...).

The SDK (its Rust core) records them in a ``temporalio.runtime.Runtime``; a Client connected
with that runtime, and the Workers built from the client, report through it.
``TURNGATE_TEMPORAL_METRICS_BIND`` picks where they go:

- unset / ``off``: nowhere (the SDK's default runtime, no metrics);
- ``registry``: folded into turngate's registry through the SDK's ``MetricBuffer``, so they are
  served with turngate's metrics (API ``/metrics``, worker ``TURNGATE_WORKER_METRICS_BIND``):
  one scrape target per process. Counters get ``_total``, durations are seconds (``_seconds``);
- ``host:port``: the SDK's own Prometheus endpoint on that address (a second scrape target per
  process, the SDK's naming: durations in milliseconds, counters without ``_total``).
"""

from __future__ import annotations

import bisect
import logging
import math
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from temporalio.runtime import (
    BUFFERED_METRIC_KIND_COUNTER,
    BUFFERED_METRIC_KIND_GAUGE,
    BUFFERED_METRIC_KIND_HISTOGRAM,
    MetricBuffer,
    MetricBufferDurationFormat,
    PrometheusConfig,
    Runtime,
    TelemetryConfig,
)

from turngate.telemetry.metrics import TurngateMetrics, default_metrics, parse_bind

log = logging.getLogger(__name__)

TEMPORAL_METRICS_ENV = "TURNGATE_TEMPORAL_METRICS_BIND"
FOLD = "registry"
#: Histogram buckets for the folded SDK durations (seconds).
SDK_BUCKETS: tuple[float, ...] = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
BUFFER_SIZE = 100_000
DRAIN_EVERY_S = 1.0

_Labels = tuple[tuple[str, str], ...]


@dataclass
class _Series:
    name: str
    description: str
    kind: int
    unit: str = ""
    values: dict[_Labels, float] = field(default_factory=dict)
    buckets: dict[_Labels, list[int]] = field(default_factory=dict)
    sums: dict[_Labels, float] = field(default_factory=dict)


class TemporalSdkMetrics(Collector):
    """A prometheus Collector over a Temporal ``MetricBuffer``: drained by a daemon thread every
    second (the buffer must not fill up) and on every scrape."""

    def __init__(self, buffer: MetricBuffer, *, drain_every_s: float = DRAIN_EVERY_S) -> None:
        self._buffer = buffer
        self._series: dict[str, _Series] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._every = drain_every_s
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._drain_forever, name="turngate-sdk-metrics", daemon=True
            )
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _drain_forever(self) -> None:
        while not self._stop.wait(self._every):
            self.drain()

    def drain(self) -> None:
        try:
            updates = self._buffer.retrieve_updates()
        except Exception as exc:
            log.warning("temporal sdk metrics: draining the buffer failed: %s", exc)
            return
        with self._lock:
            for update in updates:
                metric = update.metric
                series = self._series.get(metric.name)
                if series is None:
                    unit = "seconds" if metric.unit == "s" else ""
                    series = _Series(metric.name, metric.description or metric.name, int(metric.kind), unit)
                    self._series[metric.name] = series
                labels = tuple(sorted((str(k), str(v)) for k, v in dict(update.attributes).items()))
                value = float(update.value)
                if series.kind == BUFFERED_METRIC_KIND_COUNTER:
                    series.values[labels] = series.values.get(labels, 0.0) + value
                elif series.kind == BUFFERED_METRIC_KIND_GAUGE:
                    series.values[labels] = value
                elif series.kind == BUFFERED_METRIC_KIND_HISTOGRAM:
                    counts = series.buckets.setdefault(labels, [0] * (len(SDK_BUCKETS) + 1))
                    counts[bisect.bisect_left(SDK_BUCKETS, value)] += 1
                    series.sums[labels] = series.sums.get(labels, 0.0) + value

    def collect(self) -> Iterator[Metric]:
        self.drain()
        with self._lock:
            families = [self._family(series) for series in self._series.values()]
        yield from (family for family in families if family is not None)

    @staticmethod
    def _family(series: _Series) -> Metric | None:
        keys = list(series.buckets if series.kind == BUFFERED_METRIC_KIND_HISTOGRAM else series.values)
        names = sorted({name for labels in keys for name, _ in labels})

        def label_values(labels: _Labels) -> list[str]:
            found = dict(labels)
            return [found.get(name, "") for name in names]

        if series.kind == BUFFERED_METRIC_KIND_COUNTER:
            counter = CounterMetricFamily(series.name, series.description, labels=names)
            for labels, value in series.values.items():
                counter.add_metric(label_values(labels), value)
            return counter
        if series.kind == BUFFERED_METRIC_KIND_GAUGE:
            gauge = GaugeMetricFamily(series.name, series.description, labels=names)
            for labels, value in series.values.items():
                gauge.add_metric(label_values(labels), value)
            return gauge
        if series.kind == BUFFERED_METRIC_KIND_HISTOGRAM:
            histogram = HistogramMetricFamily(series.name, series.description, labels=names, unit=series.unit)
            for labels, counts in series.buckets.items():
                cumulative, total = [], 0
                for bound, count in zip((*SDK_BUCKETS, math.inf), counts, strict=True):
                    total += count
                    cumulative.append((_bound(bound), total))
                histogram.add_metric(label_values(labels), cumulative, series.sums.get(labels, 0.0))
            return histogram
        return None


def _bound(value: float) -> str:
    return "+Inf" if math.isinf(value) else repr(float(value))


_made: dict[tuple[str, int], Runtime] = {}
_made_lock = threading.Lock()


def temporal_runtime(
    metrics_bind: str | None = None, *, metrics: TurngateMetrics | None = None
) -> Runtime | None:
    """The Runtime to connect Temporal clients with, or None (the SDK default, no metrics).

    ``metrics_bind``: ``registry``, ``host:port`` or ``off`` (default: the
    ``TURNGATE_TEMPORAL_METRICS_BIND`` env). ``metrics``: where ``registry`` folds into (default:
    :func:`~turngate.telemetry.metrics.default_metrics`). A Runtime owns threads and, for
    ``host:port``, a socket: the same arguments return the same Runtime for the process's life.
    """
    bind = (metrics_bind if metrics_bind is not None else os.environ.get(TEMPORAL_METRICS_ENV, "")).strip()
    if not bind or bind.lower() == "off":
        return None
    target = (metrics or default_metrics()) if bind == FOLD else None
    key = (bind, id(target.registry) if target is not None else 0)
    with _made_lock:
        runtime = _made.get(key)
        if runtime is not None:
            return runtime
        if target is not None:
            buffer = MetricBuffer(BUFFER_SIZE, MetricBufferDurationFormat.SECONDS)
            runtime = Runtime(telemetry=TelemetryConfig(metrics=buffer))
            collector = TemporalSdkMetrics(buffer)
            target.registry.register(collector)
            collector.start()
            log.info("temporal sdk metrics folded into turngate's registry")
        else:
            parse_bind(bind)  # a clear error for a malformed address
            runtime = Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=bind)))
            log.info("temporal sdk metrics on http://%s/metrics", bind)
        _made[key] = runtime
    return runtime
