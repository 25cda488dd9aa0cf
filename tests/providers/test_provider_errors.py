"""Error classification through the official SDKs against the fakes, for every provider."""

from __future__ import annotations

import email.utils
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import pytest

from tests.fakes import FakeLLMServer, fake_anthropic, fake_ollama, fake_openai, refused_url
from tests.providers.conftest import collect, make_request
from turngate.providers.anthropic_chat import AnthropicChatProvider
from turngate.providers.base import Provider, ProviderError
from turngate.providers.error_classification import (
    classify_exception,
    classify_status,
    parse_retry_after,
    scrub,
    status_error_type,
)
from turngate.providers.ollama_chat import OllamaChatProvider
from turngate.providers.openai_chat import OpenAIChatProvider

# made up per run: no key-shaped secret is committed to the repository
OPENAI_KEY = f"sk-test-SECRETopenai{secrets.token_hex(8)}"
ANTHROPIC_KEY = f"sk-ant-test-SECRETanthropic{secrets.token_hex(8)}"

VENDORS = ["openai", "anthropic", "ollama"]


def _build(vendor: str, url: str, timeout_s: float = 10.0) -> Provider:
    if vendor == "openai":
        return OpenAIChatProvider(api_key=OPENAI_KEY, base_url=url, timeout_s=timeout_s)
    if vendor == "anthropic":
        return AnthropicChatProvider(api_key=ANTHROPIC_KEY, base_url=url, timeout_s=timeout_s)
    return OllamaChatProvider(host=url, timeout_s=timeout_s)


def _server(vendor: str) -> Iterator[FakeLLMServer]:
    return {"openai": fake_openai, "anthropic": fake_anthropic, "ollama": fake_ollama}[vendor]()


# One fake server and one provider per vendor for this module (building an SDK client costs
# tens of milliseconds); every test starts from a reset server.


@pytest.fixture(scope="module", params=VENDORS)
def vendor(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def shared_server(vendor: str) -> Iterator[FakeLLMServer]:
    with _server(vendor) as srv:
        yield srv


@pytest.fixture
def server(shared_server: FakeLLMServer) -> FakeLLMServer:
    shared_server.reset()
    return shared_server


@pytest.fixture(scope="module")
async def provider(vendor: str, shared_server: FakeLLMServer) -> AsyncIterator[Provider]:
    built = _build(vendor, shared_server.base_url)
    yield built
    await built.aclose()


async def _error(provider: Provider) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        await collect(provider, make_request(provider.name))
    return info.value


STATUS_TABLE = [
    (400, "provider.bad_request", False),
    (401, "provider.auth", False),
    (403, "provider.auth", False),
    (404, "provider.not_found", False),
    (408, "provider.timeout", True),
    (409, "provider.conflict", True),
    (413, "provider.request_too_large", False),
    (418, "provider.client_error", False),
    (422, "provider.unprocessable", False),
    (429, "provider.rate_limited", True),
    (500, "provider.server_error", True),
    (502, "provider.server_error", True),
    (503, "provider.overloaded", True),
    (529, "provider.overloaded", True),
]


@pytest.mark.parametrize(("status", "error_type", "retryable"), STATUS_TABLE)
async def test_http_status_is_classified(
    provider: Provider, server: FakeLLMServer, status: int, error_type: str, retryable: bool
) -> None:
    server.fail_next(status)
    error = await _error(provider)
    assert (error.type, error.retryable, error.status_code) == (error_type, retryable, status)
    assert error.retry_after_s is None
    assert error.message.startswith(f"{provider.name}: HTTP {status}")
    # the failure was not retried by the SDK (Temporal owns retries) ...
    assert len(server.requests) == 1
    # ... and the provider still works afterwards
    text, _usage, _n = await collect(provider, make_request(provider.name))
    assert text == server.reply


async def test_rate_limit_carries_retry_after_seconds(provider: Provider, server: FakeLLMServer) -> None:
    server.fail_next(429, retry_after="2")
    error = await _error(provider)
    assert (error.type, error.retryable, error.retry_after_s) == (
        "provider.rate_limited",
        True,
        2.0,
    )


async def test_overloaded_carries_retry_after_http_date(provider: Provider, server: FakeLLMServer) -> None:
    when = datetime.now(UTC) + timedelta(seconds=30)
    server.fail_next(529, retry_after=email.utils.format_datetime(when, usegmt=True))
    error = await _error(provider)
    assert error.type == "provider.overloaded"
    assert error.retry_after_s is not None
    assert 25 <= error.retry_after_s <= 31


async def test_retry_after_ms_header_is_preferred(provider: Provider, server: FakeLLMServer) -> None:
    server.fail_next(503, retry_after="9", headers={"retry-after-ms": "1500"})
    error = await _error(provider)
    assert (error.type, error.retry_after_s) == ("provider.overloaded", 1.5)


async def test_non_retryable_error_ignores_retry_after(provider: Provider, server: FakeLLMServer) -> None:
    server.fail_next(400, retry_after="5")
    error = await _error(provider)
    assert (error.type, error.retryable, error.retry_after_s) == (
        "provider.bad_request",
        False,
        None,
    )


async def test_auth_error_never_contains_the_key(provider: Provider, server: FakeLLMServer) -> None:
    # The fake echoes the received Authorization / x-api-key value in its 401 message.
    server.fail_next(401)
    error = await _error(provider)
    assert error.type == "provider.auth"
    rendered = " ".join([error.message, str(error), repr(error.args)])
    for secret in (OPENAI_KEY, ANTHROPIC_KEY, "SECRET"):
        assert secret not in rendered
    assert error.__cause__ is None  # the SDK exception (with its raw body) is not chained


async def test_key_in_server_message_is_scrubbed(provider: Provider, server: FakeLLMServer) -> None:
    server.fail_next(500, message="upstream said: Authorization: Bearer sk-live-SECRET999 bad")
    error = await _error(provider)
    assert error.type == "provider.server_error"
    assert "SECRET" not in error.message
    assert "[redacted]" in error.message


async def test_connection_refused(vendor: str) -> None:
    url = refused_url("/v1" if vendor == "openai" else "")
    provider = _build(vendor, url)
    try:
        error = await _error(provider)
    finally:
        await provider.aclose()
    assert (error.type, error.retryable, error.status_code) == ("provider.connection", True, None)


async def test_timeout(vendor: str, server: FakeLLMServer) -> None:
    server.delay_s = 1.0
    provider = _build(vendor, server.base_url, timeout_s=0.2)
    started = time.monotonic()
    try:
        error = await _error(provider)
    finally:
        await provider.aclose()
    # The server answers after 1 s: a timeout error means the 0.2 s bound ended the call (the
    # time only rules out a hang).
    assert (error.type, error.retryable) == ("provider.timeout", True)
    assert time.monotonic() - started < 30


@pytest.mark.parametrize(
    ("vendor_name", "expected"),
    [
        ("openai", "provider.overloaded"),
        ("anthropic", "provider.overloaded"),
        ("ollama", "provider.server_error"),  # Ollama's stream errors carry only a message
    ],
)
async def test_error_event_mid_stream(vendor_name: str, expected: str) -> None:
    with _server(vendor_name) as server:
        server.error_mid_stream_next("overloaded_error")
        provider = _build(vendor_name, server.base_url)
        texts: list[str] = []
        try:
            with pytest.raises(ProviderError) as info:
                async for chunk in provider.stream(make_request(vendor_name)):
                    texts.append(chunk.text)
        finally:
            await provider.aclose()
    assert texts == ["Hello "]  # what streamed before the error reached the caller
    assert (info.value.type, info.value.retryable) == (expected, True)


async def test_connection_dropped_mid_stream(provider: Provider, server: FakeLLMServer) -> None:
    server.drop_mid_stream_next(after_chunks=2)
    texts: list[str] = []
    with pytest.raises(ProviderError) as info:
        async for chunk in provider.stream(make_request(provider.name)):
            texts.append(chunk.text)
    assert texts == ["Hello ", "from "]  # what streamed before the drop reached the caller
    assert (info.value.type, info.value.retryable, info.value.status_code) == (
        "provider.connection",
        True,
        None,
    )
    text, _usage, _n = await collect(provider, make_request(provider.name))  # the next call is whole
    assert text == server.reply


async def test_closing_a_stream_early(provider: Provider, server: FakeLLMServer) -> None:
    server.chunk_delay_s = 0.01
    stream = provider.stream(make_request(provider.name))
    first = await stream.__anext__()  # type: ignore[attr-defined]
    assert first.text == "Hello "
    await stream.aclose()  # type: ignore[attr-defined]
    text, _usage, _n = await collect(provider, make_request(provider.name))
    assert text == server.reply


# ------------------------------------------------------------------------- pure helpers


@pytest.mark.parametrize(("status", "expected"), [(s, (t, r)) for s, t, r in STATUS_TABLE])
def test_status_table(status: int, expected: tuple[str, bool]) -> None:
    assert status_error_type(status) == expected


def test_parse_retry_after_forms() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"Retry-After": "0.5"}) == 0.5
    assert parse_retry_after({"retry-after": "-4"}) == 0.0
    assert parse_retry_after({"retry-after": "Wed, 01 Jan 2025 12:00:10 GMT"}, now=now) == 10.0
    assert parse_retry_after({"retry-after": "Wed, 01 Jan 2025 11:00:00 GMT"}, now=now) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "3"}) == 0.25
    assert parse_retry_after({"retry-after-ms": "x", "retry-after": "3"}) == 3.0
    assert parse_retry_after({}) is None
    assert parse_retry_after(None) is None


@pytest.mark.parametrize(
    "text",
    [
        "Incorrect API key provided: sk-proj-abcDEF123456",
        "Incorrect API key provided: sk-abc1**********xyz9",
        "headers={'Authorization': 'Bearer tok_abcdef123'}",
        "authorization: Bearer abc.def.ghi",
        "x-api-key: sk-ant-api03-abc",
        "api_key=hunter2hunter2",
        "Bearer eyJhbGciOi.payload.sig",
        "connect to http://user:hunter2pw@proxy.local:8080 failed",
    ],
)
def test_scrub_removes_key_shapes(text: str) -> None:
    cleaned = scrub(text)
    for fragment in (
        "abcDEF123456",
        "abc1",
        "tok_abcdef123",
        "abc.def.ghi",
        "api03",
        "hunter2",
        "eyJ",
    ):
        assert fragment not in cleaned
    assert "[redacted]" in cleaned


def test_scrub_removes_exact_secrets() -> None:
    assert scrub("the key is plainsecretvalue!", ["plainsecretvalue"]) == "the key is [redacted]!"


def test_classify_builtin_and_unknown_exceptions() -> None:
    error = classify_exception(ConnectionRefusedError("refused"), vendor="ollama")
    assert error is not None
    assert error.type == "provider.connection"
    assert classify_exception(ValueError("a bug"), vendor="openai") is None
    same = ProviderError("provider.auth", "x", retryable=False)
    assert classify_exception(same, vendor="openai") is same


def test_classify_status_message_is_bounded_and_scrubbed() -> None:
    error = classify_status(500, vendor="openai", detail="sk-" + "a" * 2000, secrets=())
    assert len(error.message) <= 500
    assert "aaaa" not in error.message
