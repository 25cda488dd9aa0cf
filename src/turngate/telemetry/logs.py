"""Process logging: text lines (default) or, with ``TURNGATE_LOG_FORMAT=json``, one JSON object
per line (python-json-logger) carrying ``trace_id`` and ``span_id`` of the current span, so a log
line and its trace can be found from each other."""

from __future__ import annotations

import logging
import os

from opentelemetry import trace
from pythonjsonlogger.json import JsonFormatter

LOG_FORMAT_ENV = "TURNGATE_LOG_FORMAT"
TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


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


def configure_logging(level: str = "INFO", log_format: str | None = None) -> None:
    """Root logging for a turngate process. ``log_format``: ``text`` or ``json`` (default: the
    ``TURNGATE_LOG_FORMAT`` environment variable, else text)."""
    chosen = (log_format or os.environ.get(LOG_FORMAT_ENV) or "text").strip().lower()
    handler = logging.StreamHandler()
    if chosen == "json":
        handler.setFormatter(json_formatter())
        handler.addFilter(TraceContextFilter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])  # no-op where handlers exist (tests)
