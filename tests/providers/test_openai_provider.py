from __future__ import annotations

from tests.fakes import FakeOpenAIServer, fake_openai
from tests.providers.conftest import CONVERSATION, CONVERSATION_WORDS, collect, make_request
from turngate.providers.base import Usage
from turngate.providers.openai_chat import OpenAIChatProvider

KEY = "sk-test-openai-0123456789"


async def test_streams_text_and_usage(openai_server: FakeOpenAIServer) -> None:
    provider = OpenAIChatProvider(api_key=KEY, base_url=openai_server.base_url)
    try:
        text, usage, n = await collect(provider, make_request("openai", "gpt-4o-mini"))
    finally:
        await provider.aclose()
    assert text == "Hello from the fake server"
    assert n == 5
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (CONVERSATION_WORDS, 5)


async def test_sends_the_whole_message_list(openai_server: FakeOpenAIServer) -> None:
    provider = OpenAIChatProvider(api_key=KEY, base_url=openai_server.base_url)
    try:
        await collect(provider, make_request("openai", "gpt-4.1"))
    finally:
        await provider.aclose()
    request = openai_server.last_request
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    body = request.json
    assert body["model"] == "gpt-4.1"
    assert body["messages"] == [{"role": m.role, "content": m.content} for m in CONVERSATION]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert "max_tokens" not in body


async def test_max_tokens_is_passed(openai_server: FakeOpenAIServer) -> None:
    provider = OpenAIChatProvider(api_key=KEY, base_url=openai_server.base_url)
    try:
        await collect(provider, make_request("openai", max_tokens=42))
    finally:
        await provider.aclose()
    assert openai_server.last_request.json["max_tokens"] == 42


async def test_base_url_with_prefix_is_honoured() -> None:
    with fake_openai(reply="compatible server") as server:
        base_url = f"{server.origin}/proxy/openai/v1"
        provider = OpenAIChatProvider(api_key=None, base_url=base_url)
        try:
            text, _usage, _n = await collect(provider, make_request("openai", "local-model"))
        finally:
            await provider.aclose()
        assert text == "compatible server"
        assert server.last_request.path == "/proxy/openai/v1/chat/completions"
        # No key configured: the placeholder goes out, never a key from elsewhere.
        assert server.last_request.headers["authorization"] == "Bearer unused"


async def test_without_usage_chunk_still_ends_with_usage(openai_server: FakeOpenAIServer) -> None:
    # A compatible server that ignores stream_options: the final chunk has empty usage.
    openai_server.send_usage = False
    provider = OpenAIChatProvider(api_key=KEY, base_url=openai_server.base_url)
    try:
        chunks = [c async for c in provider.stream(make_request("openai"))]
    finally:
        await provider.aclose()
    assert "".join(c.text for c in chunks) == "Hello from the fake server"
    assert chunks[-1].text == ""
    assert chunks[-1].usage == Usage(input_tokens=None, output_tokens=None)


async def test_the_response_id_rides_on_the_first_chunk_only(openai_server: FakeOpenAIServer) -> None:
    provider = OpenAIChatProvider(api_key=KEY, base_url=openai_server.base_url)
    try:
        chunks = [chunk async for chunk in provider.stream(make_request("openai", "gpt-4o-mini"))]
    finally:
        await provider.aclose()
    assert chunks[0].response_id == "chatcmpl-fake" and chunks[0].text
    assert all(chunk.response_id is None for chunk in chunks[1:])
