from __future__ import annotations

from tests.fakes import FakeOllamaServer
from tests.providers.conftest import CONVERSATION, CONVERSATION_WORDS, collect, make_request
from turngate.providers.ollama_chat import OllamaChatProvider


async def test_streams_text_and_usage(ollama_server: FakeOllamaServer) -> None:
    provider = OllamaChatProvider(host=ollama_server.host)
    try:
        text, usage, n = await collect(provider, make_request("ollama", "llama3.2:latest"))
    finally:
        await provider.aclose()
    assert text == "Hello from the fake server"
    assert n == 5
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (CONVERSATION_WORDS, 5)


async def test_sends_the_whole_message_list(ollama_server: FakeOllamaServer) -> None:
    provider = OllamaChatProvider(host=ollama_server.host)
    try:
        await collect(provider, make_request("ollama", "qwen2.5-coder:7b", max_tokens=9))
    finally:
        await provider.aclose()
    request = ollama_server.last_request
    assert request.path == "/api/chat"
    body = request.json
    assert body["model"] == "qwen2.5-coder:7b"
    assert body["messages"] == [{"role": m.role, "content": m.content} for m in CONVERSATION]
    assert body["stream"] is True
    assert body["options"] == {"num_predict": 9}


async def test_no_options_without_max_tokens(ollama_server: FakeOllamaServer) -> None:
    provider = OllamaChatProvider(host=ollama_server.host)
    try:
        await collect(provider, make_request("ollama"))
    finally:
        await provider.aclose()
    assert not ollama_server.last_request.json.get("options")


async def test_host_is_honoured(ollama_server: FakeOllamaServer) -> None:
    provider = OllamaChatProvider(host=ollama_server.host)
    try:
        assert provider.base_url.rstrip("/") == ollama_server.host
        await collect(provider, make_request("ollama"))
    finally:
        await provider.aclose()
    assert len(ollama_server.requests) == 1
