"""Provider tests: the official SDKs against the fake servers of tests/fakes (127.0.0.1 only)."""

from __future__ import annotations

from typing import Any

from tests.fakes.llm_servers import anthropic_server, ollama_server, openai_server
from turngate.providers.base import ChatMessage, Provider, ProviderRequest, StreamChunk, Usage
from turngate.settings import Settings

__all__ = ["anthropic_server", "ollama_server", "openai_server"]

# A system prompt, earlier context (a full exchange) and the current user message.
CONVERSATION: list[ChatMessage] = [
    ChatMessage(role="system", content="You are terse."),
    ChatMessage(role="user", content="What is two plus two?"),
    ChatMessage(role="assistant", content="Four."),
    ChatMessage(role="user", content="And three plus three?"),
]
CONVERSATION_WORDS = sum(len(m.content.split()) for m in CONVERSATION)


def make_request(
    provider: str, model: str = "m-1", messages: list[ChatMessage] | None = None, **kw: Any
) -> ProviderRequest:
    return ProviderRequest(provider=provider, model=model, messages=messages or CONVERSATION, **kw)


async def collect(provider: Provider, request: ProviderRequest) -> tuple[str, Usage | None, int]:
    """(joined text, final usage, number of text chunks)."""
    texts: list[str] = []
    usage: Usage | None = None
    chunks: list[StreamChunk] = []
    async for chunk in provider.stream(request):
        chunks.append(chunk)
        if chunk.text:
            texts.append(chunk.text)
        if chunk.usage is not None:
            usage = chunk.usage
    assert chunks and chunks[-1].usage is not None, "the last chunk carries the usage"
    return "".join(texts), usage, len(texts)


def provider_settings(**overrides: Any) -> Settings:
    """Settings with every provider field explicit, whatever the environment says."""
    values: dict[str, Any] = {
        "default_provider": None,
        "echo_delay_ms": 0,
        "openai_api_key": None,
        "openai_base_url": None,
        "openai_model_ids": "gpt-4o-mini,gpt-4.1",
        "anthropic_api_key": None,
        "anthropic_base_url": None,
        "anthropic_model_ids": "claude-3-5-haiku-latest",
        "ollama_host": None,
        "ollama_model_ids": "llama3.2:latest,qwen2.5-coder:7b",
        "llm_wall_clock_s": 10,
    }
    values.update(overrides)
    return Settings(**values)
