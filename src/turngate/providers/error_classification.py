"""Classify vendor SDK and transport failures into :class:`ProviderError`, where they are raised.

One table for every provider (see docs/PROVIDERS.md); whether a type is retryable comes from
:data:`turngate.core.provider_errors.PROVIDER_ERROR_TYPES`, the one list the workflow derives
its non-retryable and fallback codes from:

======================  =============================  =========
HTTP status / failure   ``ProviderError.type``         retryable
======================  =============================  =========
400                     ``provider.bad_request``       no
401, 403                ``provider.auth``              no
404                     ``provider.not_found``         no
408                     ``provider.timeout``           yes
409                     ``provider.conflict``          yes
413                     ``provider.request_too_large`` no
422                     ``provider.unprocessable``     no
429                     ``provider.rate_limited``      yes
503, 529                ``provider.overloaded``        yes
other 5xx               ``provider.server_error``      yes
other 4xx               ``provider.client_error``      no
timeout (no answer)     ``provider.timeout``           yes
connection failure      ``provider.connection``        yes
error event mid-stream  by its error type, else ``provider.server_error`` (yes)
malformed response      ``provider.invalid_response``  no
======================  =============================  =========

Retryable errors carry ``retry_after_s`` from ``retry-after-ms`` or ``Retry-After`` (seconds or an
HTTP-date) when the response had one. Messages are scrubbed: they never contain an API key, a
bearer token, an ``Authorization``/``x-api-key`` value or a password inside a URL.
"""

from __future__ import annotations

import email.utils
import re
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from turngate.core.provider_errors import is_retryable
from turngate.providers.base import ProviderError

# The vendor SDKs are imported by their providers, only when configured (~90 MB for openai and
# anthropic): an exception of an SDK that is not in sys.modules cannot have been raised, so the
# checks below look only at the SDKs (and httpx2, their fork of httpx) already imported.
_HTTPX_MODULES = ("httpx", "httpx2")


def _classes(modules: tuple[str, ...], name: str) -> tuple[type[BaseException], ...]:
    """``name`` of each of ``modules`` that is already imported (an empty tuple matches nothing)."""
    found = (getattr(sys.modules.get(module), name, None) for module in modules)
    return tuple(cls for cls in found if isinstance(cls, type))


def _sdk(name: str) -> tuple[type[BaseException], ...]:
    return _classes(("openai", "anthropic"), name)


MAX_MESSAGE_CHARS = 500
REDACTED = "[redacted]"

# Vendor error types (Anthropic's ``error.type``, OpenAI's ``error.type``/``code``) seen in error
# events that arrive after a 200 response has started streaming.
_STREAM_ERROR_TYPES: dict[str, str] = {
    "overloaded_error": "provider.overloaded",
    "rate_limit_error": "provider.rate_limited",
    "rate_limit_exceeded": "provider.rate_limited",
    "api_error": "provider.server_error",
    "server_error": "provider.server_error",
    "timeout_error": "provider.timeout",
    "invalid_request_error": "provider.bad_request",
    "authentication_error": "provider.auth",
    "permission_error": "provider.auth",
    "not_found_error": "provider.not_found",
    "request_too_large": "provider.request_too_large",
}

_SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # header-like "Authorization: Bearer x", "x-api-key=x", "'api_key': 'x'"
    (
        re.compile(
            r"(?i)\b(authorization|x-api-key|api[_-]?key)(['\"]?\s*[:=]\s*['\"]?)"
            r"(?:bearer\s+)?[^\s'\",}]+"
        ),
        r"\1\2" + REDACTED,
    ),
    (re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]+"), "Bearer " + REDACTED),
    # OpenAI / Anthropic style keys: sk-..., sk-proj-..., sk-ant-...
    (
        re.compile(r"\bsk-[A-Za-z0-9_*.-]{2,}"),
        "sk-" + REDACTED,
    ),  # credentials inside a URL: scheme://user:password@host
    (re.compile(r"://[^/\s:@]+:[^/\s@]+@"), "://" + REDACTED + "@"),
)


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """Remove known secret values and anything shaped like a key or bearer token."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def parse_retry_after(headers: Mapping[str, str] | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (delta-seconds or HTTP-date)."""
    if not headers:
        return None
    millis = _header(headers, "retry-after-ms")
    if millis is not None:
        try:
            value = float(millis)
        except ValueError:
            value = -1.0
        if value >= 0:
            return value / 1000.0
    raw = _header(headers, "retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def status_error_type(status: int) -> tuple[str, bool]:
    """``(ProviderError.type, retryable)`` for an HTTP status of a failed call."""
    type_ = _status_type(status)
    return type_, is_retryable(type_)


def _status_type(status: int) -> str:
    if status == 400:
        return "provider.bad_request"
    if status in (401, 403):
        return "provider.auth"
    if status == 404:
        return "provider.not_found"
    if status == 408:
        return "provider.timeout"
    if status == 409:
        return "provider.conflict"
    if status == 413:
        return "provider.request_too_large"
    if status == 422:
        return "provider.unprocessable"
    if status == 429:
        return "provider.rate_limited"
    if status in (503, 529):
        return "provider.overloaded"
    if 500 <= status <= 599:
        return "provider.server_error"
    if 400 <= status <= 499:
        return "provider.client_error"
    # A non-error status with an error (e.g. an error event inside a 200 stream): server side.
    return "provider.server_error"


def classify_status(
    status: int,
    *,
    vendor: str,
    detail: str = "",
    headers: Mapping[str, str] | None = None,
    error_type: str | None = None,
    secrets: Iterable[str] = (),
) -> ProviderError:
    """A :class:`ProviderError` for an HTTP failure (``error_type``: the vendor's, if known)."""
    if status < 400 and error_type in _STREAM_ERROR_TYPES:
        type_ = _STREAM_ERROR_TYPES[error_type]
        retryable = is_retryable(type_)
    else:
        type_, retryable = status_error_type(status)
    prefix = f"{vendor}: HTTP {status}" if status >= 400 else f"{vendor}: error in stream"
    return ProviderError(
        type_,
        _message(prefix, detail, secrets),
        retryable=retryable,
        status_code=status if status >= 400 else None,
        retry_after_s=parse_retry_after(headers) if retryable else None,
    )


def classify_exception(
    exc: BaseException, *, vendor: str, secrets: Iterable[str] = ()
) -> ProviderError | None:
    """Map an exception raised by a vendor SDK or its transport; None if it is not one of those."""
    secrets = tuple(secrets)
    if isinstance(exc, ProviderError):
        return exc
    name = type(exc).__name__
    # The SDKs' classes are looked up by name (no SDK import here): their attributes are untyped.
    sdk_exc: Any = exc
    if isinstance(exc, (*_sdk("APITimeoutError"), *_classes(_HTTPX_MODULES, "TimeoutException"))):
        return ProviderError(
            "provider.timeout",
            _message(f"{vendor}: timed out", name, secrets),
            retryable=is_retryable("provider.timeout"),
        )
    if isinstance(exc, _sdk("APIConnectionError")):
        return _connection_error(vendor, f"{name}: {_cause_text(exc)}", secrets)
    if isinstance(exc, _sdk("APIStatusError")):
        message, error_type = _body_detail(sdk_exc.body)
        return classify_status(
            sdk_exc.status_code,
            vendor=vendor,
            detail=f"{name}: {message or sdk_exc.message}",
            headers=sdk_exc.response.headers,
            error_type=error_type,
            secrets=secrets,
        )
    if isinstance(exc, _sdk("APIResponseValidationError")):
        return ProviderError(
            "provider.invalid_response",
            _message(f"{vendor}: malformed response", name, secrets),
            retryable=is_retryable("provider.invalid_response"),
            status_code=sdk_exc.status_code,
        )
    if isinstance(exc, _classes(("openai",), "APIError")):  # an error event in a streamed 200 response
        message, error_type = _body_detail(sdk_exc.body)
        return classify_status(
            200,
            vendor=vendor,
            detail=f"{name}: {message or sdk_exc.message}",
            error_type=error_type or getattr(exc, "type", None),
            secrets=secrets,
        )
    if isinstance(exc, (*_classes(("openai",), "OpenAIError"), *_classes(("anthropic",), "AnthropicError"))):
        # Client-side SDK failures (missing credentials, bad configuration): never retryable.
        return ProviderError(
            "provider.client_error",
            _message(f"{vendor}: {name}", str(exc), secrets),
            retryable=is_retryable("provider.client_error"),
        )
    if isinstance(exc, _classes(("ollama",), "ResponseError")):
        if sdk_exc.status_code < 0:  # {"error": ...} line inside the NDJSON stream
            return classify_status(200, vendor=vendor, detail=str(sdk_exc.error), secrets=secrets)
        return classify_status(sdk_exc.status_code, vendor=vendor, detail=str(sdk_exc.error), secrets=secrets)
    if isinstance(exc, _classes(_HTTPX_MODULES, "HTTPStatusError")):
        response = sdk_exc.response
        return classify_status(
            response.status_code,
            vendor=vendor,
            detail=_safe_text(response),
            headers=response.headers,
            secrets=secrets,
        )
    if isinstance(exc, _classes(_HTTPX_MODULES, "TransportError")):
        return _connection_error(vendor, f"{name}: {exc}", secrets)
    if isinstance(exc, ConnectionError):  # ollama raises the builtin for refused connections
        return _connection_error(vendor, f"{name}: {exc}", secrets)
    return None


def _connection_error(vendor: str, detail: str, secrets: Iterable[str]) -> ProviderError:
    return ProviderError(
        "provider.connection",
        _message(f"{vendor}: connection failed", detail, secrets),
        retryable=is_retryable("provider.connection"),
    )


def _message(prefix: str, detail: str, secrets: Iterable[str]) -> str:
    detail = " ".join(detail.split())
    text = f"{prefix}: {detail}" if detail else prefix
    text = scrub(text, secrets)
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 3] + "..."
    return text


def _body_detail(body: object) -> tuple[str | None, str | None]:
    """``(message, error type)`` from an OpenAI/Anthropic error body, when it has them."""
    if not isinstance(body, Mapping):
        return (str(body) if body else None), None
    error: Any = body.get("error", body)
    if not isinstance(error, Mapping):
        return str(error), None
    message = error.get("message")
    error_type = error.get("type") or error.get("code")
    return (
        str(message) if message is not None else None,
        str(error_type) if error_type is not None else None,
    )


def _cause_text(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    return f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)


def _safe_text(response: Any) -> str:
    try:
        return str(response.text)
    except Exception:  # a streamed body that was never read
        return ""


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    return value
