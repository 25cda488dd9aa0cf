"""Test doubles that talk real protocols (see llm_servers.py for the fake provider servers)."""

from tests.fakes.llm_servers import (
    FakeAnthropicServer,
    FakeLLMServer,
    FakeOllamaServer,
    FakeOpenAIServer,
    RecordedRequest,
    anthropic_server,
    fake_anthropic,
    fake_ollama,
    fake_openai,
    free_port,
    ollama_server,
    openai_server,
    refused_url,
)

__all__ = [
    "FakeAnthropicServer",
    "FakeLLMServer",
    "FakeOllamaServer",
    "FakeOpenAIServer",
    "RecordedRequest",
    "anthropic_server",
    "fake_anthropic",
    "fake_ollama",
    "fake_openai",
    "free_port",
    "ollama_server",
    "openai_server",
    "refused_url",
]
