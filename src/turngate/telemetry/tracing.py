"""OpenTelemetry tracing for a turngate process: one TracerProvider, Temporal's interceptor.

Tracing is on when the standard OTEL_* environment asks for it (``OTEL_TRACES_EXPORTER`` other
than ``none``, or an ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``)
or when a caller passes an exporter (tests: ``InMemorySpanExporter``). ``OTEL_SDK_DISABLED=true``
turns it off whatever else is set. Off means: :func:`configure_tracing` returns None, no
provider is created, :func:`temporal_interceptors` is empty and the HTTP middleware passes
requests straight through.

The global provider is a thin facade over the provider turngate configured (set once: the
OpenTelemetry API allows one global per process). Everything that traces through the global
(FastAPI's native request spans, libraries) and turngate's own :func:`tracer` follow the current
configuration, so a later :func:`configure_tracing` with an explicit exporter (tests) or
:func:`shutdown_tracing` takes effect everywhere.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from temporalio.contrib.opentelemetry import TracingInterceptor

from turngate import __version__
from turngate.telemetry.otlp import exporter_names, otlp_span_exporter

log = logging.getLogger(__name__)

TRACER_NAME = "turngate"
API_SERVICE = "turngate-api"
WORKER_SERVICE = "turngate-worker"

_lock = threading.Lock()
_provider: TracerProvider | None = None
_global_set = False
_NOOP = trace.NoOpTracer()


class _FacadeTracer(trace.Tracer):
    """A tracer that starts its spans with the current turngate provider (no-op while off)."""

    def __init__(self, name: str, version: str | None, schema_url: str | None, attributes: Any) -> None:
        self._args = (name, version, schema_url, attributes)
        self._cached: tuple[TracerProvider | None, trace.Tracer] = (None, _NOOP)

    def _current(self) -> trace.Tracer:
        provider = _provider
        if provider is None:
            return _NOOP
        cached_provider, cached = self._cached
        if cached_provider is not provider:
            cached = provider.get_tracer(*self._args)
            self._cached = (provider, cached)
        return cached

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return self._current().start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        # The delegate's own context manager (also usable as a sync or async decorator).
        return self._current().start_as_current_span(*args, **kwargs)


class _FacadeTracerProvider(trace.TracerProvider):
    """The global provider turngate installs: tracers that follow :func:`configure_tracing`."""

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Any = None,
    ) -> trace.Tracer:
        return _FacadeTracer(instrumenting_module_name, instrumenting_library_version, schema_url, attributes)


_FACADE = _FacadeTracerProvider()


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def traces_exporter_names(environ: Mapping[str, str] | None = None) -> list[str]:
    """The span exporters the environment asks for (``[]``: tracing off)."""
    return exporter_names("traces", environ)


def _env_exporters(names: list[str]) -> list[SpanExporter]:
    exporters: list[SpanExporter] = []
    for name in names:
        if name == "otlp":
            exporters.append(otlp_span_exporter())  # protocol, endpoint, headers: from OTEL_* env
        elif name == "console":
            exporters.append(ConsoleSpanExporter())
        else:
            log.warning("OTEL_TRACES_EXPORTER=%s is not supported by turngate (otlp, console, none)", name)
    return exporters


def configure_tracing(service_name: str, *, exporter: SpanExporter | None = None) -> TracerProvider | None:
    """Set up tracing for this process when it is wanted; None (and nothing set up) otherwise.

    ``service_name``: ``turngate-api`` / ``turngate-worker`` (``OTEL_SERVICE_NAME`` wins when set;
    ``OTEL_RESOURCE_ATTRIBUTES`` are merged in). ``exporter``: export to it with a
    SimpleSpanProcessor (tests), replacing any provider configured before. Without it, the
    first configuration in a process wins: API and worker sharing a process (``turngate dev``)
    share one provider, and a second call returns it unchanged.
    """
    global _provider, _global_set
    if _flag(os.environ.get("OTEL_SDK_DISABLED")):
        return None
    with _lock:
        if exporter is None and _provider is not None:
            return _provider
        names = [] if exporter is not None else traces_exporter_names()
        if exporter is None and not names:
            return None
        exporters = [exporter] if exporter is not None else _env_exporters(names)
        if not exporters:
            return None
        name = os.environ.get("OTEL_SERVICE_NAME", "").strip() or service_name
        resource = Resource.create({SERVICE_NAME: name, "service.version": __version__})
        provider = TracerProvider(resource=resource)  # sampler and limits: from OTEL_* env
        for item in exporters:
            processor = SimpleSpanProcessor(item) if exporter is not None else BatchSpanProcessor(item)
            provider.add_span_processor(processor)
        previous, _provider = _provider, provider
        if not _global_set:
            trace.set_tracer_provider(_FACADE)  # logs a warning if someone else set one first
            _global_set = True
    if previous is not None:
        previous.shutdown()
    log.info("tracing on: service.name=%s exporters=%s", name, names or [type(exporter).__name__])
    return provider


def shutdown_tracing() -> None:
    """Flush and drop turngate's provider (process exit, tests): tracing is off afterwards."""
    global _provider
    with _lock:
        provider, _provider = _provider, None
    if provider is not None:
        provider.shutdown()


def flush_tracing(timeout_millis: int = 5000) -> None:
    """Export the spans still queued (end of a lifespan or worker run: the CLI leaves with
    ``os._exit``, which skips atexit handlers). Tracing stays on."""
    provider = _provider
    if provider is not None:
        provider.force_flush(timeout_millis)


def tracing_enabled() -> bool:
    return _provider is not None


@functools.cache
def tracer(name: str = TRACER_NAME) -> trace.Tracer:
    """A tracer that follows turngate's configuration (no-op spans while tracing is off)."""
    return _FACADE.get_tracer(name, __version__)


def temporal_interceptors() -> list[TracingInterceptor]:
    """``[TracingInterceptor]`` when tracing is on, else ``[]``.

    Pass it to ``Client.connect(..., interceptors=...)``: the interceptor is both a client and a
    worker interceptor, and a ``Worker`` built from that client inherits it, so StartWorkflow
    (API), RunWorkflow / StartActivity (workflow) and RunActivity (worker) spans join one trace
    through the ``_tracer-data`` header. Do not also pass it to ``Worker(...)``: that would
    trace every step twice.
    """
    if _provider is None:
        return []
    return [TracingInterceptor(tracer("temporalio.contrib.opentelemetry"))]
