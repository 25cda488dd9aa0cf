"""JSON log lines (``TURNGATE_LOG_FORMAT=json``, set up by turngate.log_setup): one object per
line (python-json-logger) carrying ``trace_id`` and ``span_id`` of the current span, so a log line
and its trace can be found from each other."""

from __future__ import annotations

import logging

from opentelemetry import trace
from pythonjsonlogger.json import JsonFormatter


class TraceContextFilter(logging.Filter):
    """Adds ``trace_id`` / ``span_id`` (hex, as OTel shows them) when a span is current."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.trace_id = format(context.trace_id, "032x")
            record.span_id = format(context.span_id, "016x")
        return True


def json_formatter() -> logging.Formatter:
    return JsonFormatter(
        "%(levelname)s %(name)s %(message)s",
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp="time",  # ISO 8601, UTC
    )
