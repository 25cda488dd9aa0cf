"""Process logging, set up first by every `turngate` command: text lines (default) or, with
``TURNGATE_LOG_FORMAT=json``, one JSON object per line carrying the current span's ``trace_id``
and ``span_id`` (turngate.telemetry.logs). Telemetry is imported for the JSON format only: loading
it would cost a client command such as `turngate chat` most of its start-up."""

from __future__ import annotations

import logging
import os

LOG_LEVEL_ENV = "TURNGATE_LOG_LEVEL"
LOG_FORMAT_ENV = "TURNGATE_LOG_FORMAT"
TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def log_level_from_env() -> str:
    """``TURNGATE_LOG_LEVEL`` (default INFO), read before any command's settings are."""
    return (os.environ.get(LOG_LEVEL_ENV) or "INFO").strip().upper()


def configure_logging(level: str = "INFO", log_format: str | None = None) -> None:
    """Root logging for a turngate process. ``log_format``: ``text`` or ``json`` (default: the
    ``TURNGATE_LOG_FORMAT`` environment variable, else text)."""
    chosen = (log_format or os.environ.get(LOG_FORMAT_ENV) or "text").strip().lower()
    handler = logging.StreamHandler()
    if chosen == "json":
        from turngate.telemetry.logs import TraceContextFilter, json_formatter

        handler.setFormatter(json_formatter())
        handler.addFilter(TraceContextFilter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])  # no-op where handlers exist (tests)
