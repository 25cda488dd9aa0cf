"""Tools offered and tool calls streamed back, through each official SDK against the fake servers."""

from __future__ import annotations

import json

import pytest

from tests.fakes import FakeAnthropicServer, FakeOllamaServer, FakeOpenAIServer
from tests.providers.conftest import make_request
from turngate.core.tools import ToolSpec
from turngate.providers.anthropic_chat import AnthropicChatProvider
from turngate.providers.base import (
    ChatMessage,
    Provider,
    ProviderRequest,
    StreamChunk,
    ToolCallChunk,
    ToolDefinition,
)
from turngate.providers.echo import EchoProvider
from turngate.providers.ollama_chat import OllamaChatProvider
from turngate.providers.openai_chat import OpenAIChatProvider
from turngate.providers.tool_calls import ToolCallAccumulator

KEY = "sk-test-tools-0123456789"

TRANSITION = ToolSpec(
    name="transition_phase",
    description="End the phase with a signal.",
    parameters={
        "type": "object",
        "properties": {"signal": {"type": "string", "enum": ["understood", "partial", "max_reached"]}},
        "required": ["signal"],
    },
    signals={"understood": "on_success", "partial": "on_partial", "max_reached": "on_max_exchanges"},
)
TOOLS = [ToolDefinition.model_validate(TRANSITION.definition())]
CALL = {"name": "transition_phase", "arguments": {"signal": "understood"}}


async def chunks_of(provider: Provider, request: ProviderRequest) -> list[StreamChunk]:
    try:
        return [chunk async for chunk in provider.stream(request)]
    finally:
        await provider.aclose()


def tool_calls(chunks: list[StreamChunk]) -> list[ToolCallChunk]:
    with_calls = [c for c in chunks if c.tool_calls]
    assert len(with_calls) <= 1, "tool calls arrive in at most one chunk"
    return list(with_calls[0].tool_calls or []) if with_calls else []


def assert_stream_shape(chunks: list[StreamChunk]) -> None:
    """Text, then the tool-call chunk, then the usage chunk last."""
    assert chunks[-1].usage is not None and chunks[-1].text == ""
    positions = [i for i, c in enumerate(chunks) if c.tool_calls]
    texts = [i for i, c in enumerate(chunks) if c.text]
    if positions:
        assert positions == [len(chunks) - 2]
        assert all(i < positions[0] for i in texts)


# ------------------------------------------------------------------ contract


def test_tool_definition_from_a_tool_spec() -> None:
    assert TOOLS[0].name == "transition_phase"
    assert TOOLS[0].parameters["required"] == ["signal"]
    assert ProviderRequest(provider="x", model="m", messages=[]).tools == []


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ('{"signal": "understood"}', {"signal": "understood"}),
        ("", {}),
        ("  ", {}),
        ('{"signal": ', None),
        ("[1, 2]", None),
        ('"text"', None),
    ],
)
def test_parsed_arguments(text: str, parsed: object) -> None:
    assert ToolCallChunk(id="c", name="t", arguments=text).parsed_arguments() == parsed


def test_accumulator_joins_fragments_in_index_order() -> None:
    acc = ToolCallAccumulator("vendor")
    assert not acc
    acc.start(1, call_id="b", name="second")
    acc.start(0, name="first")
    acc.add_arguments(0, '{"a"')
    acc.add_arguments(1, None)
    acc.add_arguments(0, ": 1}")
    acc.start(0, call_id="a-late", name="ignored")
    assert acc
    assert acc.complete() == [
        ToolCallChunk(id="a-late", name="first", arguments='{"a": 1}'),
        ToolCallChunk(id="b", name="second", arguments="{}"),
    ]


def test_accumulator_numbers_calls_without_ids_and_keeps_whole_initial_arguments() -> None:
    acc = ToolCallAccumulator("vendor")
    acc.start(3, name="t", initial_arguments='{"x": 1}')
    acc.start(5, name="u", initial_arguments='{"y": 2}')
    acc.add_arguments(5, '{"y": 3}')  # fragments win over the start's whole arguments
    assert acc.complete() == [
        ToolCallChunk(id="vendor-call-1", name="t", arguments='{"x": 1}'),
        ToolCallChunk(id="vendor-call-2", name="u", arguments='{"y": 3}'),
    ]


# ------------------------------------------------------------------ OpenAI


async def test_openai_sends_tools_as_functions_and_joins_streamed_calls(
    openai_server: FakeOpenAIServer,
) -> None:
    openai_server.tool_calls = [
        CALL | {"id": "call_1"},
        {"name": "note", "arguments": {"text": "a longer argument, streamed in pieces"}},
    ]
    chunks = await chunks_of(
        OpenAIChatProvider(api_key=KEY, base_url=openai_server.base_url), make_request("openai", tools=TOOLS)
    )
    assert openai_server.received_tools == [
        {"type": "function", "function": TRANSITION.definition()},
    ]
    assert_stream_shape(chunks)
    assert "".join(c.text for c in chunks) == "Hello from the fake server"
    calls = tool_calls(chunks)
    assert [(c.id, c.name) for c in calls] == [("call_1", "transition_phase"), ("call_fake_2", "note")]
    assert [c.parsed_arguments() for c in calls] == [
        {"signal": "understood"},
        {"text": "a longer argument, streamed in pieces"},
    ]


async def test_openai_without_tools_sends_none_and_emits_none(openai_server: FakeOpenAIServer) -> None:
    chunks = await chunks_of(
        OpenAIChatProvider(api_key=KEY, base_url=openai_server.base_url), make_request("openai")
    )
    assert "tools" not in openai_server.last_request.json
    assert openai_server.received_tools is None
    assert tool_calls(chunks) == []


async def test_openai_invalid_arguments_are_kept_verbatim(openai_server: FakeOpenAIServer) -> None:
    openai_server.reply = ""
    openai_server.tool_calls = [{"name": "transition_phase", "arguments": '{"signal": "underst'}]
    chunks = await chunks_of(
        OpenAIChatProvider(api_key=KEY, base_url=openai_server.base_url), make_request("openai", tools=TOOLS)
    )
    (call,) = tool_calls(chunks)
    assert call.arguments == '{"signal": "underst'
    assert call.parsed_arguments() is None
    assert all(not c.text for c in chunks)


# ------------------------------------------------------------------ Anthropic


async def test_anthropic_sends_input_schema_and_parses_tool_use(
    anthropic_server: FakeAnthropicServer,
) -> None:
    anthropic_server.tool_calls = [CALL | {"id": "toolu_1"}]
    chunks = await chunks_of(
        AnthropicChatProvider(api_key=KEY, base_url=anthropic_server.base_url),
        make_request("anthropic", tools=TOOLS),
    )
    assert anthropic_server.received_tools == [
        {
            "name": "transition_phase",
            "description": TRANSITION.description,
            "input_schema": TRANSITION.parameters,
        }
    ]
    # The system message still goes to the system parameter when tools are offered.
    assert anthropic_server.last_request.json["system"] == "You are terse."
    assert_stream_shape(chunks)
    assert "".join(c.text for c in chunks) == "Hello from the fake server"
    (call,) = tool_calls(chunks)
    assert (call.id, call.name, call.parsed_arguments()) == ("toolu_1", "transition_phase", CALL["arguments"])


async def test_anthropic_without_tools_sends_none(anthropic_server: FakeAnthropicServer) -> None:
    chunks = await chunks_of(
        AnthropicChatProvider(api_key=KEY, base_url=anthropic_server.base_url), make_request("anthropic")
    )
    assert "tools" not in anthropic_server.last_request.json
    assert tool_calls(chunks) == []


# ------------------------------------------------------------------ Ollama


async def test_ollama_sends_function_tools_and_collects_calls(ollama_server: FakeOllamaServer) -> None:
    ollama_server.tool_calls = [CALL, {"name": "note", "arguments": {"text": "hi"}}]
    chunks = await chunks_of(OllamaChatProvider(host=ollama_server.host), make_request("ollama", tools=TOOLS))
    (sent,) = ollama_server.received_tools or []
    assert sent["type"] == "function"
    assert sent["function"]["name"] == "transition_phase"
    assert sent["function"]["description"] == TRANSITION.description
    assert sent["function"]["parameters"]["required"] == ["signal"]
    assert sent["function"]["parameters"]["properties"]["signal"]["enum"] == [
        "understood",
        "partial",
        "max_reached",
    ]
    assert_stream_shape(chunks)
    calls = tool_calls(chunks)
    assert [(c.id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("ollama-call-1", "transition_phase", {"signal": "understood"}),
        ("ollama-call-2", "note", {"text": "hi"}),
    ]


async def test_ollama_without_tools_offers_none(ollama_server: FakeOllamaServer) -> None:
    chunks = await chunks_of(OllamaChatProvider(host=ollama_server.host), make_request("ollama"))
    # The SDK always sends a list; an empty one offers nothing.
    assert ollama_server.last_request.json.get("tools") in (None, [])
    assert tool_calls(chunks) == []


# ------------------------------------------------------------------ echo


def echo_request(text: str, tools: list[ToolDefinition] | None = None) -> ProviderRequest:
    messages = [
        ChatMessage(role="user", content="earlier /tool ignored {}"),
        ChatMessage(role="user", content=text),
    ]
    return ProviderRequest(provider="echo", model="echo-1", messages=messages, tools=tools or [])


async def test_echo_tool_hook_emits_the_call_after_the_echo_text() -> None:
    text = 'I get it now. /tool transition_phase {"signal": "understood"}'
    chunks = await chunks_of(EchoProvider(), echo_request(text, TOOLS))
    assert "".join(c.text for c in chunks) == "echo: " + text
    assert_stream_shape(chunks)
    assert tool_calls(chunks) == [
        ToolCallChunk(id="echo-call-1", name="transition_phase", arguments='{"signal": "understood"}')
    ]


async def test_echo_tool_hook_needs_offered_tools() -> None:
    chunks = await chunks_of(EchoProvider(), echo_request('/tool transition_phase {"signal": "understood"}'))
    assert tool_calls(chunks) == []


async def test_echo_tool_hook_several_calls_unoffered_names_and_raw_arguments() -> None:
    text = (
        '/tool transition_phase {"signal": "partial", "nested": {"a": [1, "}"]}} and more\n'
        "/tool not_offered {broken json\n"
        "/tool bare\n"
        "not a/tool directive {}"
    )
    calls = tool_calls(await chunks_of(EchoProvider(), echo_request(text, TOOLS)))
    assert [(c.id, c.name) for c in calls] == [
        ("echo-call-1", "transition_phase"),
        ("echo-call-2", "not_offered"),
        ("echo-call-3", "bare"),
    ]
    assert calls[0].parsed_arguments() == {"signal": "partial", "nested": {"a": [1, "}"]}}
    assert calls[1].arguments == "{broken json" and calls[1].parsed_arguments() is None
    assert calls[2].arguments == "{}"


async def test_echo_tool_hook_is_deterministic() -> None:
    request = echo_request('/tool transition_phase {"signal": "understood"}', TOOLS)
    first = await chunks_of(EchoProvider(), request)
    second = await chunks_of(EchoProvider(), request)
    assert first == second
