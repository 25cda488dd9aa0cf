from __future__ import annotations

import itertools

import pytest

from tests.fakes import FakeAnthropicServer, fake_anthropic
from tests.providers.conftest import CONVERSATION_WORDS, collect, make_request
from turngate.providers.anthropic_chat import (
    DEFAULT_MAX_TOKENS,
    LEADING_USER_PLACEHOLDER,
    AnthropicChatProvider,
    to_anthropic,
)
from turngate.providers.base import ChatMessage, ProviderError

KEY = "sk-ant-test-0123456789"


def _m(role: str, content: str) -> ChatMessage:
    return ChatMessage(role=role, content=content)  # type: ignore[arg-type]


async def test_streams_text_and_usage(anthropic_server: FakeAnthropicServer) -> None:
    provider = AnthropicChatProvider(api_key=KEY, base_url=anthropic_server.base_url)
    try:
        text, usage, n = await collect(provider, make_request("anthropic", "claude-x"))
    finally:
        await provider.aclose()
    assert text == "Hello from the fake server"
    assert n == 5
    assert usage is not None
    # input from message_start (system + every message), output from message_delta
    assert (usage.input_tokens, usage.output_tokens) == (CONVERSATION_WORDS, 5)


async def test_sends_system_parameter_and_whole_history(
    anthropic_server: FakeAnthropicServer,
) -> None:
    provider = AnthropicChatProvider(api_key=KEY, base_url=anthropic_server.base_url)
    try:
        await collect(provider, make_request("anthropic", "claude-x"))
    finally:
        await provider.aclose()
    request = anthropic_server.last_request
    assert request.path == "/v1/messages"
    assert KEY in (request.headers.get("x-api-key", "") + request.headers.get("authorization", ""))
    assert "anthropic-version" in request.headers
    body = request.json
    assert body["model"] == "claude-x"
    assert body["system"] == "You are terse."
    assert body["messages"] == [
        {"role": "user", "content": "What is two plus two?"},
        {"role": "assistant", "content": "Four."},
        {"role": "user", "content": "And three plus three?"},
    ]
    assert body["max_tokens"] == DEFAULT_MAX_TOKENS
    assert body["stream"] is True


async def test_max_tokens_is_passed(anthropic_server: FakeAnthropicServer) -> None:
    provider = AnthropicChatProvider(api_key=KEY, base_url=anthropic_server.base_url)
    try:
        await collect(provider, make_request("anthropic", max_tokens=7))
    finally:
        await provider.aclose()
    assert anthropic_server.last_request.json["max_tokens"] == 7


async def test_no_system_parameter_without_system_message(
    anthropic_server: FakeAnthropicServer,
) -> None:
    provider = AnthropicChatProvider(api_key=KEY, base_url=anthropic_server.base_url)
    try:
        await collect(provider, make_request("anthropic", messages=[_m("user", "hi")]))
    finally:
        await provider.aclose()
    body = anthropic_server.last_request.json
    assert "system" not in body
    assert body["messages"] == [{"role": "user", "content": "hi"}]


async def test_base_url_is_honoured() -> None:
    with fake_anthropic(reply="from the proxy") as server:
        provider = AnthropicChatProvider(api_key=KEY, base_url=f"{server.origin}/gateway")
        try:
            text, _usage, _n = await collect(provider, make_request("anthropic"))
        finally:
            await provider.aclose()
        assert text == "from the proxy"
        assert server.last_request.path == "/gateway/v1/messages"


def test_shape_joins_every_system_message_in_order() -> None:
    system, turns = to_anthropic([_m("system", "layer one"), _m("user", "q"), _m("system", "layer two")])
    assert system == "layer one\n\nlayer two"
    assert turns == [{"role": "user", "content": "q"}]


def test_shape_merges_consecutive_same_role_messages() -> None:
    _system, turns = to_anthropic(
        [
            _m("user", "context A"),
            _m("user", "context B"),
            _m("assistant", "r1"),
            _m("assistant", "r2"),
            _m("user", "now"),
        ]
    )
    assert turns == [
        {"role": "user", "content": "context A\n\ncontext B"},
        {"role": "assistant", "content": "r1\n\nr2"},
        {"role": "user", "content": "now"},
    ]
    roles = [t["role"] for t in turns]
    assert all(a != b for a, b in itertools.pairwise(roles))


def test_shape_leading_assistant_is_kept_after_placeholder_user() -> None:
    system, turns = to_anthropic([_m("system", "s"), _m("assistant", "earlier"), _m("user", "q")])
    assert system == "s"
    assert turns == [
        {"role": "user", "content": LEADING_USER_PLACEHOLDER},
        {"role": "assistant", "content": "earlier"},
        {"role": "user", "content": "q"},
    ]


def test_shape_without_conversation_is_bad_request() -> None:
    with pytest.raises(ProviderError) as info:
        to_anthropic([_m("system", "only a system prompt")])
    assert info.value.type == "provider.bad_request"
    assert info.value.retryable is False


async def test_the_response_id_rides_on_the_first_chunk_only(anthropic_server: FakeAnthropicServer) -> None:
    provider = AnthropicChatProvider(api_key=KEY, base_url=anthropic_server.base_url)
    try:
        chunks = [chunk async for chunk in provider.stream(make_request("anthropic", "claude-haiku-4-5"))]
    finally:
        await provider.aclose()
    assert chunks[0].response_id == "msg_fake" and chunks[0].text
    assert all(chunk.response_id is None for chunk in chunks[1:])
