"""A tool loop and sampling through the OpenAI front door: planning the turn, assembling the
prompt, and each provider's wire format.

Planning uses a real SQLite ledger; the wire formats are checked against the fake vendor servers
of tests/fakes (127.0.0.1), through the official SDKs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes import FakeAnthropicServer, FakeOllamaServer, FakeOpenAIServer
from tests.openai_compat.test_plan import THREAD, plan, settings, user
from turngate.api.openai_compat.turn import plan_turn
from turngate.api.openai_compat.wire import parse_chat_request
from turngate.core.assembly import assemble, uses_tool_messages
from turngate.core.client_context import ClientContext, client_context_of
from turngate.core.events import AdmissionError, Event, EventDraft, EventKind
from turngate.core.refs import Resolution, ResolvedRef
from turngate.ledger import LedgerStore
from turngate.providers.anthropic_chat import AnthropicChatProvider, to_anthropic
from turngate.providers.base import ChatMessage, Provider, ProviderRequest, ToolCallChunk
from turngate.providers.ollama_chat import OllamaChatProvider
from turngate.providers.openai_chat import OpenAIChatProvider

CALL = {"id": "call_1", "name": "get_weather", "arguments": {"city": "Vilnius"}}
WIRE_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": json.dumps({"city": "Vilnius"})},
}


def called(*calls: dict[str, Any], content: str | None = None) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


def result(text: str, call_id: str = "call_1") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def record(store: LedgerStore, turn: str, intent: dict[str, Any], execution: dict[str, Any]) -> list[Event]:
    def draft(kind: EventKind, payload: dict[str, Any]) -> EventDraft:
        return EventDraft(kind=kind, thread_id=THREAD, turn_id=turn, correlation_id=turn, payload=payload)

    return store.append_many(
        [
            draft(EventKind.INTENT, intent),
            draft(EventKind.DECISION, {"decision": "ALLOW", "reason_codes": []}),
            draft(EventKind.EXECUTION, execution),
        ]
    )


def ask_weather(store: LedgerStore) -> list[Event]:
    """Turn 1: the user asks, the model calls get_weather (no text)."""
    return record(
        store,
        "t1",
        {"payload": {"message": "Weather?"}, "inputs": {}},
        {"output_text": "", "tool_calls": [CALL]},
    )


def answer_with_result(store: LedgerStore) -> list[Event]:
    """Turn 2: the client answered the call; the model answered in text."""
    context = {
        "source": "openai.chat_completions",
        "tool_results": [{"tool_call_id": "call_1", "content": "sunny"}],
    }
    return record(
        store,
        "t2",
        {"payload": {"message": "sunny"}, "inputs": {"client_context": context}},
        {"output_text": "It is sunny in Vilnius."},
    )


# ------------------------------------------------------------------ planning


def test_tool_results_continue_the_recorded_call(store: LedgerStore) -> None:
    first = ask_weather(store)
    turn = plan(store, [user("Weather?"), called(WIRE_CALL), result("sunny")])
    payload = turn.envelope["payload"]
    assert [r["ref_id"] for r in payload["declared_refs"]] == [first[0].digest, first[2].digest]
    assert payload["parent_turn_id"] == "t1"
    assert payload["payload"]["message"] == "sunny"
    context = client_context_of(payload["inputs"])
    assert context is not None and context.messages == ()
    assert [(r.tool_call_id, r.content) for r in context.tool_results] == [("call_1", "sunny")]
    assert turn.refs == 2 and turn.client_messages == 0


def test_a_later_turn_resolves_the_whole_loop_as_refs(store: LedgerStore) -> None:
    first, second = ask_weather(store), answer_with_result(store)
    messages = [
        user("Weather?"),
        called(WIRE_CALL),
        result("sunny"),
        {"role": "assistant", "content": "It is sunny in Vilnius."},
    ]
    turn = plan(store, [*messages, user("Thanks")])
    refs = [r["ref_id"] for r in turn.envelope["payload"]["declared_refs"]]
    assert refs == [first[0].digest, first[2].digest, second[0].digest, second[2].digest]
    assert turn.envelope["payload"]["inputs"] == {}  # nothing unmatched, no client context


@pytest.mark.parametrize(
    "changed",
    [
        called(WIRE_CALL | {"id": "call_2"}),
        called(WIRE_CALL | {"function": {"name": "get_weather", "arguments": '{"city": "Kaunas"}'}}),
        called(WIRE_CALL, content="Let me check."),
    ],
)
def test_calls_that_differ_from_the_recorded_ones_do_not_match(
    store: LedgerStore, changed: dict[str, Any]
) -> None:
    ask_weather(store)
    call_id = changed["tool_calls"][0]["id"]
    with pytest.raises(AdmissionError) as caught:
        plan(store, [user("Weather?"), changed, result("sunny", call_id)])
    assert caught.value.reason_code == "openai.unmatched_history"
    assert "[1]" in caught.value.detail


def test_a_changed_tool_result_in_history_does_not_match(store: LedgerStore) -> None:
    ask_weather(store)
    answer_with_result(store)
    messages = [
        user("Weather?"),
        called(WIRE_CALL),
        result("rainy"),
        {"role": "assistant", "content": "It is sunny in Vilnius."},
    ]
    with pytest.raises(AdmissionError) as caught:
        plan(store, [*messages, user("Thanks")])
    assert caught.value.reason_code == "openai.unmatched_history"
    assert "[2]" in caught.value.detail


def test_record_mode_keeps_an_unmatched_loop_as_client_messages(store: LedgerStore) -> None:
    chat = parse_chat_request(
        {
            "model": "echo-1",
            "messages": [user("Weather?"), called(WIRE_CALL), result("sunny"), user("and tomorrow?")],
        }
    )
    turn = plan_turn(chat, {}, settings(openai_unmatched_history="record"), store, None)
    context = client_context_of(turn.envelope["payload"]["inputs"])
    assert context is not None
    assert [(m.role, m.tool_call_id) for m in context.messages] == [
        ("user", None),
        ("assistant", None),
        ("tool", "call_1"),
    ]
    assert context.messages[1].tool_calls[0].arguments == {"city": "Vilnius"}
    assert context.tool_results == ()


@pytest.mark.parametrize(
    ("messages", "code"),
    [
        ([user("Weather?"), result("sunny")], "openai.orphan_tool_result"),
        ([result("sunny")], "openai.orphan_tool_result"),
        ([user("Weather?"), called(WIRE_CALL), result("sunny", "call_9")], "openai.orphan_tool_result"),
        (
            [user("Weather?"), called(WIRE_CALL), {"role": "tool", "content": "sunny"}],
            "openai.invalid_tool_message",
        ),
        ([user("Weather?"), called(WIRE_CALL), result("  ")], "admission.empty_message"),
        (
            [
                user("Weather?"),
                called(WIRE_CALL | {"function": {"name": "f", "arguments": "[1]"}}),
                result("x"),
            ],
            "openai.invalid_tool_call",
        ),
        (
            [
                user("Weather?"),
                called(WIRE_CALL | {"function": {"name": "f", "arguments": "{nope"}}),
                result("x"),
            ],
            "openai.invalid_tool_call",
        ),
    ],
)
def test_malformed_tool_loops_are_refused(
    store: LedgerStore, messages: list[dict[str, Any]], code: str
) -> None:
    with pytest.raises(AdmissionError) as caught:
        plan(store, messages)
    assert caught.value.reason_code == code


def test_temperature_is_recorded_only_when_sent(store: LedgerStore) -> None:
    assert plan(store, [user("hi")]).envelope["payload"]["inputs"] == {}
    for value in (0, 2, 0.7):
        context = plan(store, [user("hi")], temperature=value).envelope["payload"]["inputs"]["client_context"]
        assert context["temperature"] == value
        parsed = client_context_of({"client_context": context})
        assert parsed is not None and parsed.temperature == value
    for bad in (-0.1, 2.01):
        with pytest.raises(AdmissionError) as caught:
            plan(store, [user("hi")], temperature=bad)
        assert caught.value.reason_code == "admission.invalid_value" and caught.value.field == "temperature"


# ------------------------------------------------------------------ assembly


def test_assembly_sends_the_loop_as_tool_messages(store: LedgerStore) -> None:
    first = ask_weather(store)
    resolution = Resolution(
        resolved_refs=tuple(
            ResolvedRef(
                ref_type="event",
                ref_id=e.digest,
                event_digest=e.digest,
                event_index=e.index,
                event_kind=str(e.kind),
                admitted_for="governance",
            )
            for e in (first[0], first[2])
        ),
        governance_events=(first[0],),
        execution_events=(first[2],),
    )
    context = client_context_of(
        {"client_context": {"tool_results": [{"tool_call_id": "call_1", "content": "sunny"}]}}
    )
    assert uses_tool_messages(resolution, context) and not uses_tool_messages(
        resolution.model_copy(update={"governance_events": (), "execution_events": ()}), None
    )
    assert context is not None
    loop = assemble("Be brief.", resolution, "sunny", tool_results=context.tool_results, tool_messages=True)
    assert [m.model_dump(mode="json") for m in loop.messages] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "call_1", "name": "get_weather", "arguments": '{"city": "Vilnius"}'}],
        },
        {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
    ]
    assert [(e.source_ref, e.item_type, e.included_reason) for e in loop.included][-2] == (
        "client_context.tool_results[0]",
        "tool_output",
        "client_tool_result",
    )
    # Without the tool-loop rule (turns recorded before it) the call has no prompt content.
    before = assemble("Be brief.", resolution, "sunny", tool_results=context.tool_results)
    assert [m.role for m in before.messages] == ["system", "user", "user"]
    assert [e.excluded_reason for e in before.excluded] == ["no_prompt_content"]


def test_plain_messages_dump_as_before() -> None:
    assert ChatMessage(role="user", content="x").model_dump() == {"role": "user", "content": "x"}
    assert ClientContext().model_dump(mode="json")["messages"] == []


# ------------------------------------------------------------------ provider wire formats

LOOP = [
    ChatMessage(role="system", content="Be brief."),
    ChatMessage(role="user", content="Weather?"),
    ChatMessage(
        role="assistant",
        content="",
        tool_calls=(ToolCallChunk(id="call_1", name="get_weather", arguments='{"city": "Vilnius"}'),),
    ),
    ChatMessage(role="tool", content="sunny", tool_call_id="call_1"),
]


async def send(provider: Provider, **kw: Any) -> None:
    try:
        request = ProviderRequest(provider=provider.name, model="m-1", messages=LOOP, **kw)
        assert [chunk async for chunk in provider.stream(request)]
    finally:
        await provider.aclose()


async def test_openai_gets_tool_calls_and_tool_messages(openai_server: FakeOpenAIServer) -> None:
    await send(
        OpenAIChatProvider(api_key="sk-test-loop-0123456789", base_url=openai_server.base_url),
        temperature=0.3,
    )
    body = openai_server.requests[-1].json
    assert body["temperature"] == 0.3
    assert body["messages"][2:] == [
        {"role": "assistant", "content": None, "tool_calls": [WIRE_CALL]},
        {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
    ]
    await send(OpenAIChatProvider(api_key="sk-test-loop-0123456789", base_url=openai_server.base_url))
    assert "temperature" not in openai_server.requests[-1].json


async def test_anthropic_gets_tool_use_and_tool_result_blocks(anthropic_server: FakeAnthropicServer) -> None:
    await send(
        AnthropicChatProvider(api_key="sk-ant-test-loop-0123", base_url=anthropic_server.base_url),
        temperature=1.0,
    )
    body = anthropic_server.requests[-1].json
    assert "temperature" not in body and body["system"] == "Be brief."  # the API has none
    assert body["messages"] == [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Vilnius"}}
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"}]},
    ]


def test_anthropic_merges_results_and_text_into_one_user_turn() -> None:
    second = ChatMessage(role="tool", content="windy", tool_call_id="call_2")
    _, turns = to_anthropic([*LOOP, second, ChatMessage(role="user", content="and so?")])
    assert turns[-1] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"},
            {"type": "tool_result", "tool_use_id": "call_2", "content": "windy"},
            {"type": "text", "text": "and so?"},
        ],
    }
    _, plain = to_anthropic([ChatMessage(role="user", content="a"), ChatMessage(role="user", content="b")])
    assert plain == [{"role": "user", "content": "a\n\nb"}]


async def test_ollama_gets_tool_calls_and_named_tool_messages(ollama_server: FakeOllamaServer) -> None:
    await send(OllamaChatProvider(host=ollama_server.host), temperature=0.0, max_tokens=5)
    body = ollama_server.requests[-1].json
    assert body["options"] == {"num_predict": 5, "temperature": 0.0}
    assert body["messages"][2]["tool_calls"] == [
        {"function": {"name": "get_weather", "arguments": {"city": "Vilnius"}}}
    ]
    assert body["messages"][3] == {"role": "tool", "content": "sunny", "tool_name": "get_weather"}
