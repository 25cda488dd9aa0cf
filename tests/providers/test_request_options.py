"""Structured output, tool choice, ``strict`` and sampling options, in each vendor's wire format:
the official SDKs against the fake servers of tests/fakes; what cannot be honoured is refused
with ``provider.unsupported_parameter`` before anything is sent."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes import FakeAnthropicServer, FakeOllamaServer, FakeOpenAIServer
from tests.providers.conftest import collect, make_request
from tests.providers.test_tool_calls import chunks_of, tool_calls
from turngate.core.request_options import ProviderOptions
from turngate.providers.anthropic_chat import AnthropicChatProvider
from turngate.providers.base import ProviderError, ToolDefinition
from turngate.providers.ollama_chat import OllamaChatProvider
from turngate.providers.openai_chat import OpenAIChatProvider

KEY = "sk-test-options-0123456789"
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "degrees": {"type": "integer"}},
    "required": ["city", "degrees"],
    "additionalProperties": False,
}
JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "Weather", "schema": SCHEMA, "strict": True}}
WEATHER = ToolDefinition(name="GetWeather", description="Weather for a city", parameters=SCHEMA)
NOTE = ToolDefinition(name="note-1", description="A note", parameters={"type": "object", "properties": {}})


def options(**values: Any) -> ProviderOptions:
    return ProviderOptions.model_validate(values)


# ------------------------------------------------------------------ OpenAI


async def test_openai_forwards_every_option_as_itself(openai_server: FakeOpenAIServer) -> None:
    provider = OpenAIChatProvider(api_key=KEY, base_url=openai_server.base_url)
    request = make_request(
        "openai",
        max_tokens=64,
        tools=[WEATHER, NOTE],
        options=options(
            response_format=JSON_SCHEMA,
            tool_choice={"mode": "function", "name": "GetWeather"},
            parallel_tool_calls=False,
            top_p=0.5,
            seed=7,
            stop=["END"],
            frequency_penalty=0.1,
            presence_penalty=-0.2,
            reasoning_effort="low",
            max_completion_tokens=True,
            strict_tools=["GetWeather"],
        ),
    )
    try:
        await collect(provider, request)
    finally:
        await provider.aclose()
    body = openai_server.last_request.json
    assert body["response_format"] == JSON_SCHEMA
    assert body["tool_choice"] == {"type": "function", "function": {"name": "GetWeather"}}
    assert body["max_completion_tokens"] == 64 and "max_tokens" not in body
    assert {k: body[k] for k in ("parallel_tool_calls", "top_p", "seed", "stop")} == {
        "parallel_tool_calls": False,
        "top_p": 0.5,
        "seed": 7,
        "stop": ["END"],
    }
    assert (body["frequency_penalty"], body["presence_penalty"], body["reasoning_effort"]) == (
        0.1,
        -0.2,
        "low",
    )
    functions = {t["function"]["name"]: t["function"] for t in body["tools"]}
    assert functions["GetWeather"]["strict"] is True and "strict" not in functions["note-1"]


async def test_openai_without_options_sends_what_it_always_sent(openai_server: FakeOpenAIServer) -> None:
    provider = OpenAIChatProvider(api_key=KEY, base_url=openai_server.base_url)
    try:
        await collect(provider, make_request("openai", max_tokens=5, tools=[NOTE]))
    finally:
        await provider.aclose()
    body = openai_server.last_request.json
    assert set(body) == {"model", "messages", "stream", "stream_options", "max_tokens", "tools"}
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "note-1", "description": "A note", "parameters": NOTE.parameters},
        }
    ]


# ------------------------------------------------------------------ Anthropic


async def test_anthropic_maps_structured_output_and_tool_choice(
    anthropic_server: FakeAnthropicServer,
) -> None:
    provider = AnthropicChatProvider(api_key=KEY, base_url=anthropic_server.base_url)
    request = make_request(
        "anthropic",
        tools=[WEATHER, NOTE],
        options=options(
            response_format=JSON_SCHEMA,
            tool_choice={"mode": "required"},
            parallel_tool_calls=False,
            stop=["END"],
            reasoning_effort="high",
            strict_tools=["GetWeather"],
        ),
    )
    try:
        await collect(provider, request)
    finally:
        await provider.aclose()
    body = anthropic_server.last_request.json
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": SCHEMA}, "effort": "high"}
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert body["stop_sequences"] == ["END"]
    tools = {t["name"]: t for t in body["tools"]}
    assert tools["GetWeather"]["strict"] is True and "strict" not in tools["note-1"]


async def test_anthropic_named_tool_choice(anthropic_server: FakeAnthropicServer) -> None:
    provider = AnthropicChatProvider(api_key=KEY, base_url=anthropic_server.base_url)
    request = make_request(
        "anthropic", tools=[WEATHER], options=options(tool_choice={"mode": "function", "name": "GetWeather"})
    )
    try:
        await collect(provider, request)
    finally:
        await provider.aclose()
    assert anthropic_server.last_request.json["tool_choice"] == {"type": "tool", "name": "GetWeather"}


@pytest.mark.parametrize(
    "unsupported",
    [
        {"seed": 1},
        {"frequency_penalty": 0.5},
        {"presence_penalty": 0.5},
        {"top_p": 0.9},
        {"reasoning_effort": "minimal"},
    ],
)
async def test_anthropic_refuses_what_it_has_no_equivalent_for(
    anthropic_server: FakeAnthropicServer, unsupported: dict[str, Any]
) -> None:
    provider = AnthropicChatProvider(api_key=KEY, base_url=anthropic_server.base_url)
    try:
        with pytest.raises(ProviderError) as caught:
            await collect(provider, make_request("anthropic", options=options(**unsupported)))
    finally:
        await provider.aclose()
    assert caught.value.type == "provider.unsupported_parameter" and not caught.value.retryable
    assert anthropic_server.requests == []  # nothing was sent


# ------------------------------------------------------------------ Ollama


async def test_ollama_maps_structured_output_and_sampling(ollama_server: FakeOllamaServer) -> None:
    request = make_request(
        "ollama",
        max_tokens=9,
        options=options(response_format=JSON_SCHEMA, top_p=0.5, seed=3, stop=["END"], frequency_penalty=0.1),
    )
    await collect(OllamaChatProvider(host=ollama_server.host), request)
    body = ollama_server.last_request.json
    assert body["format"] == SCHEMA
    assert body["options"] == {
        "num_predict": 9,
        "top_p": 0.5,
        "seed": 3,
        "stop": ["END"],
        "frequency_penalty": 0.1,
    }
    await collect(
        OllamaChatProvider(host=ollama_server.host),
        make_request("ollama", options=options(response_format={"type": "json_object"})),
    )
    assert ollama_server.last_request.json["format"] == "json"


async def test_ollama_forced_tool_is_asked_as_structured_output(ollama_server: FakeOllamaServer) -> None:
    ollama_server.reply = json.dumps({"city": "Vilnius", "degrees": 21})
    request = make_request(
        "ollama",
        tools=[WEATHER, NOTE],
        options=options(tool_choice={"mode": "function", "name": "GetWeather"}),
    )
    chunks = await chunks_of(OllamaChatProvider(host=ollama_server.host), request)
    body = ollama_server.last_request.json
    assert body["format"] == SCHEMA and body.get("tools") in (None, [])
    assert [chunk.text for chunk in chunks if chunk.text] == []  # the JSON is the call, not text
    (call,) = tool_calls(chunks)
    assert (call.name, json.loads(call.arguments)) == ("GetWeather", {"city": "Vilnius", "degrees": 21})


@pytest.mark.parametrize(
    "unsupported",
    [
        {"reasoning_effort": "low"},
        {"parallel_tool_calls": False},
        {"tool_choice": {"mode": "required"}},  # two tools offered: no schema forces one of them
    ],
)
async def test_ollama_refuses_what_it_cannot_honour(
    ollama_server: FakeOllamaServer, unsupported: dict[str, Any]
) -> None:
    request = make_request("ollama", tools=[WEATHER, NOTE], options=options(**unsupported))
    with pytest.raises(ProviderError) as caught:
        await collect(OllamaChatProvider(host=ollama_server.host), request)
    assert caught.value.type == "provider.unsupported_parameter"
    assert ollama_server.requests == []


async def test_parallel_tool_calls_go_out_only_with_tools(openai_server: FakeOpenAIServer) -> None:
    provider = OpenAIChatProvider(api_key=KEY, base_url=openai_server.base_url)
    try:
        await collect(provider, make_request("openai", options=options(parallel_tool_calls=False)))
    finally:
        await provider.aclose()
    assert "parallel_tool_calls" not in openai_server.last_request.json
