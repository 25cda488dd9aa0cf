"""A stand-in for an OpenTelemetry Collector: an OTLP/gRPC server on loopback that keeps every
span and metric it is sent, by name."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    return getattr(value, kind) if kind else None


def attributes(pairs: list[KeyValue]) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


class Collector(trace_service_pb2_grpc.TraceServiceServicer, metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: span name -> [(attributes, service.name)]
        self.spans: dict[str, list[dict[str, Any]]] = {}
        #: metric name -> [data point attributes]
        self.metrics: dict[str, list[dict[str, Any]]] = {}
        self.metric_units: dict[str, str] = {}

    def Export(self, request: Any, context: Any) -> Any:
        with self._lock:
            if isinstance(request, trace_service_pb2.ExportTraceServiceRequest):
                for resource in request.resource_spans:
                    service = attributes(list(resource.resource.attributes)).get("service.name")
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            attrs = attributes(list(span.attributes)) | {"service.name": service}
                            self.spans.setdefault(span.name, []).append(attrs)
                return trace_service_pb2.ExportTraceServiceResponse()
            for resource in request.resource_metrics:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        self.metric_units[metric.name] = metric.unit
                        data = getattr(metric, metric.WhichOneof("data"))
                        points = [attributes(list(p.attributes)) for p in data.data_points]
                        self.metrics.setdefault(metric.name, []).extend(points)
            return metrics_service_pb2.ExportMetricsServiceResponse()


@contextlib.contextmanager
def otlp_collector() -> Iterator[tuple[Collector, int]]:
    collector = Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(collector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield collector, port
    finally:
        server.stop(grace=None)
