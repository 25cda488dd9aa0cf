"""Spans for the provider call (OTel GenAI conventions) and turngate's decision attributes.

What goes on spans: provider, model, operation, conversation (thread) id, response id, server
address, max tokens, token counts, error type, and turngate's decision, reason codes, digests and
ids. Never message content, unless ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``
(or ``TURNGATE_TRACE_CONTENT=true``): then the prompt messages and the answer are added as the
conventions' opt-in attributes ``gen_ai.input.messages`` / ``gen_ai.output.messages``. That is
SENSITIVE: whoever can read the traces can read the conversations.

Nothing here touches workflow code: workflow spans come from Temporal's interceptor, and these
helpers run in activities (outside the workflow sandbox), where wall-clock spans are fine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from turngate.telemetry.genai_metrics import record_genai_call
from turngate.telemetry.tracing import tracer

if TYPE_CHECKING:
    from turngate.telemetry.metrics import TurngateMetrics

CONTENT_ENV = "TURNGATE_TRACE_CONTENT"
#: The OTel GenAI instrumentations' own switch for the same thing.
OTEL_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


def content_capture_enabled() -> bool:
    """Message text goes on provider spans (sensitive) when either switch is on."""
    return any(
        os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
        for name in (OTEL_CONTENT_ENV, CONTENT_ENV)
    )


def server_attributes(url: str | None) -> dict[str, Any]:
    """``server.address`` / ``server.port`` of a provider's base URL (none for in-process echo)."""
    if not url:
        return {}
    parts = urlsplit(url)
    if not parts.hostname:
        return {}
    attrs: dict[str, Any] = {"server.address": parts.hostname}
    port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    if port:
        attrs["server.port"] = port
    return attrs


def error_type(exc: BaseException) -> str:
    """A short, content-free error class: an ApplicationError's or ProviderError's ``type``
    (``provider.rate_limited``), ``activity.cancelled`` for a cancellation, else the class name."""
    if isinstance(exc, asyncio.CancelledError):
        return "activity.cancelled"
    kind = getattr(exc, "type", None)
    if isinstance(kind, str) and kind:
        return kind
    return type(exc).__qualname__


def _message_dict(message: Any) -> dict[str, Any]:
    if hasattr(message, "model_dump"):
        message = message.model_dump()
    if not isinstance(message, Mapping):
        return {"role": "user", "parts": [{"type": "text", "content": str(message)}]}
    return {
        "role": message.get("role", "user"),
        "parts": [{"type": "text", "content": message.get("content", "")}],
    }


class ProviderCall:
    """What :func:`provider_span` yields: record the outcome of the call on its span."""

    def __init__(self, span: Span, provider: str, model: str) -> None:
        self.span = span
        self.provider = provider
        self.model = model
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.response_model: str | None = None
        self._capture = content_capture_enabled()

    def record_usage(self, usage: Mapping[str, Any] | None) -> None:
        """``{input_tokens, output_tokens}`` as the providers report them (None: unknown)."""
        if not usage:
            return
        for key in ("input_tokens", "output_tokens"):
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(self, key, value)
                self.span.set_attribute(f"gen_ai.usage.{key}", value)

    def record_response(self, *, model: str | None = None, finish_reason: str | None = None) -> None:
        self.response_model = model or self.model
        self.span.set_attribute("gen_ai.response.model", self.response_model)
        if finish_reason:
            self.span.set_attribute("gen_ai.response.finish_reasons", [finish_reason])

    def record_response_id(self, response_id: str) -> None:
        """The vendor's id of the completion (``chatcmpl-...``, ``msg_...``)."""
        self.span.set_attribute("gen_ai.response.id", response_id)

    def record_input(self, messages: Sequence[Any]) -> None:
        """The prompt messages, only when content capture is on (sensitive)."""
        if self._capture and self.span.is_recording():
            body = json.dumps([_message_dict(m) for m in messages], ensure_ascii=False)
            self.span.set_attribute("gen_ai.input.messages", body)

    def record_output(self, text: str) -> None:
        """The answer, only when content capture is on (sensitive)."""
        if self._capture and self.span.is_recording():
            body = json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": text}]}], ensure_ascii=False
            )
            self.span.set_attribute("gen_ai.output.messages", body)


@contextlib.contextmanager
def provider_span(
    provider: str,
    model: str,
    operation: str = "chat",
    *,
    metrics: TurngateMetrics | None = None,
    attributes: Mapping[str, Any] | None = None,
    conversation_id: str | None = None,
    max_tokens: int | None = None,
    server_url: str | None = None,
) -> Iterator[ProviderCall]:
    """A CLIENT span ``{operation} {model}`` around one provider call, current while it runs.

    On exit it records ``error.type`` (and an ERROR status) for an exception, the GenAI client
    metrics (when OTel metrics export is on), and, with ``metrics``, the Prometheus latency
    (``outcome`` ok / error / cancelled) and token counts. ``attributes``: extra content-free
    attributes (``turngate.correlation_id``); ``conversation_id``: the thread id.
    """
    common: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
    } | server_attributes(server_url)
    span_attributes: dict[str, Any] = common | {"gen_ai.system": provider}  # pre-1.37 name
    if conversation_id is not None:
        span_attributes["gen_ai.conversation.id"] = conversation_id
    if max_tokens is not None:
        span_attributes["gen_ai.request.max_tokens"] = max_tokens
    span_attributes.update(attributes or {})
    started = time.monotonic()
    outcome = "ok"
    failure: str | None = None
    with tracer().start_as_current_span(
        f"{operation} {model}",
        kind=SpanKind.CLIENT,
        attributes=span_attributes,
        record_exception=False,  # exception messages may quote the request
        set_status_on_exception=False,
    ) as span:
        call = ProviderCall(span, provider, model)
        try:
            yield call
        except BaseException as exc:
            failure = error_type(exc)
            outcome = "cancelled" if isinstance(exc, asyncio.CancelledError) else "error"
            span.set_attribute("error.type", failure)
            span.set_status(Status(StatusCode.ERROR, failure))
            raise
        finally:
            outcome_attrs = {"gen_ai.response.model": call.response_model} if call.response_model else {}
            if failure is not None:
                outcome_attrs["error.type"] = failure
            record_genai_call(
                common | outcome_attrs,
                seconds=time.monotonic() - started,
                input_tokens=call.input_tokens,
                output_tokens=call.output_tokens,
            )
            if metrics is not None:
                metrics.observe_provider_call(
                    provider,
                    model,
                    outcome=outcome,
                    seconds=time.monotonic() - started,
                    input_tokens=call.input_tokens,
                    output_tokens=call.output_tokens,
                )


def decision_attributes(payload: Mapping[str, Any]) -> dict[str, Any]:
    """turngate's span attributes for a DECISION payload (content-free, None values left out)."""
    attrs: dict[str, Any] = {
        "turngate.decision": payload.get("decision"),
        "turngate.reason_codes": [str(code) for code in payload.get("reason_codes") or []],
        "turngate.context_digest": payload.get("context_digest"),
        "turngate.policy_id": payload.get("policy_id"),
        "turngate.policy_version": payload.get("policy_version"),
    }
    boundary = payload.get("boundary")
    if isinstance(boundary, Mapping):
        attrs["turngate.context_config_digest"] = boundary.get("context_config_digest")
    error = payload.get("error")
    if isinstance(error, Mapping) and error.get("code"):
        attrs["turngate.error_code"] = error.get("code")
    return {k: v for k, v in attrs.items() if v is not None and not isinstance(v, Mapping)}


def _target(span: Span | None) -> Span | None:
    span = span if span is not None else trace.get_current_span()
    return span if span.is_recording() else None


def annotate_decision(
    span: Span | None,
    payload: Mapping[str, Any],
    *,
    thread_id: str | None = None,
    turn_id: str | None = None,
    correlation_id: str | None = None,
) -> None:
    """Put a DECISION's ``turngate.*`` attributes on ``span`` (None: the current span).

    ``payload`` is the DECISION event payload (``decision``, ``reason_codes``,
    ``context_digest``, ``policy_id``, ...); the ids come from the event's identity columns.
    """
    target = _target(span)
    if target is None:
        return
    ids = {
        "turngate.thread_id": thread_id,
        "turngate.turn_id": turn_id,
        "turngate.correlation_id": correlation_id,
    }
    target.set_attributes({k: v for k, v in ids.items() if v is not None} | decision_attributes(payload))


def annotate_event(span: Span | None, event: Any) -> None:
    """Attributes for a recorded ledger event (``turngate.core.events.Event``): kind, index,
    digest and ids for every kind, plus the decision attributes for a DECISION."""
    target = _target(span)
    if target is None:
        return
    kind = str(getattr(event, "kind", ""))
    target.set_attributes(
        {
            "turngate.event.kind": kind,
            "turngate.event.index": int(event.index),
            "turngate.event.digest": str(event.digest),
            "turngate.thread_id": str(event.thread_id),
            "turngate.turn_id": str(event.turn_id),
            "turngate.correlation_id": str(event.correlation_id),
        }
    )
    if kind == "DECISION" and isinstance(event.payload, Mapping):
        target.set_attributes(decision_attributes(event.payload))
    elif kind == "EXECUTION" and isinstance(event.payload, Mapping):
        error = event.payload.get("error")
        if isinstance(error, Mapping) and error.get("code"):
            target.set_attribute("turngate.error_code", str(error["code"]))
