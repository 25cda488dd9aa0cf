from __future__ import annotations

import time

import pytest

from tests.providers.conftest import CONVERSATION_WORDS, collect, make_request
from turngate.providers.base import ChatMessage, Provider, ProviderError
from turngate.providers.echo import EchoProvider


def test_echo_is_a_provider() -> None:
    echo = EchoProvider()
    assert isinstance(echo, Provider)
    assert echo.name == "echo"
    assert echo.models == ("echo-1",)


async def test_echo_streams_word_by_word() -> None:
    echo = EchoProvider()
    request = make_request("echo", "echo-1", [ChatMessage(role="user", content="hello big world")])
    chunks = [c async for c in echo.stream(request)]
    assert [c.text for c in chunks[:-1]] == ["echo: ", "hello ", "big ", "world"]
    assert chunks[-1].text == ""
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.input_tokens == 3
    assert chunks[-1].usage.output_tokens == 4


async def test_echo_keeps_whitespace_exactly() -> None:
    text = "line one\n\nline  two "
    request = make_request("echo", "echo-1", [ChatMessage(role="user", content=text)])
    joined, _usage, _n = await collect(EchoProvider(), request)
    assert joined == "echo: " + text


async def test_echo_sees_the_whole_message_list() -> None:
    # The answer is the echo of the last user message; input_tokens counts every message.
    text, usage, _n = await collect(EchoProvider(), make_request("echo", "echo-1"))
    assert text == "echo: And three plus three?"
    assert usage is not None
    assert usage.input_tokens == CONVERSATION_WORDS
    assert usage.output_tokens == 5


async def test_echo_is_deterministic() -> None:
    echo = EchoProvider()
    first = [c async for c in echo.stream(make_request("echo", "echo-1"))]
    second = [c async for c in echo.stream(make_request("echo", "echo-1"))]
    assert first == second


async def test_echo_delay_between_chunks() -> None:
    echo = EchoProvider(delay_ms=40)
    request = make_request("echo", "echo-1", [ChatMessage(role="user", content="a b c")])
    started = time.monotonic()
    text, _usage, n = await collect(echo, request)
    elapsed = time.monotonic() - started
    assert text == "echo: a b c"
    assert n == 4
    assert elapsed >= 3 * 0.040 * 0.9  # a delay between each of the 4 chunks, none before


async def test_echo_without_user_message_is_bad_request() -> None:
    request = make_request("echo", "echo-1", [ChatMessage(role="system", content="only system")])
    with pytest.raises(ProviderError) as info:
        await collect(EchoProvider(), request)
    assert info.value.type == "provider.bad_request"
    assert info.value.retryable is False
