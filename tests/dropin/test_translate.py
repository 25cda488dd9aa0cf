"""Responses and Messages requests -> the planned turn, without a stack: what the translation
makes of items and blocks, the thread a call continues, the ids, and errors in the request's own
terms. A real SQLite ledger holds the recorded turns; the planner is the Chat Completions one."""

from __future__ import annotations

from typing import Any

import pytest

from turngate.api.dropin.plan import Planned, plan_translated
from turngate.api.messages_api.translate import MAX_TURN_LOOKUPS, MESSAGES, CallIds
from turngate.api.responses_api.request import input_items, parse_request
from turngate.api.responses_api.translate import RESPONSES, chat_messages
from turngate.core.events import AdmissionError, Event, EventDraft, EventKind
from turngate.ledger import LedgerStore
from turngate.settings import load_settings

CALL = {"id": "call_1", "name": "get_weather", "arguments": {"city": "Vilnius"}}


def record(
    store: LedgerStore, cid: str, thread: str, intent: dict[str, Any], execution: dict[str, Any]
) -> list[Event]:
    def draft(kind: EventKind, payload: dict[str, Any]) -> EventDraft:
        return EventDraft(kind=kind, thread_id=thread, turn_id=cid, correlation_id=cid, payload=payload)

    return store.append_many(
        [
            draft(EventKind.INTENT, {"payload": {"message": "Weather?"}, "inputs": {}} | intent),
            draft(EventKind.DECISION, {"decision": "ALLOW", "reason_codes": []}),
            draft(EventKind.EXECUTION, execution),
        ]
    )


def responses(store: LedgerStore, body: dict[str, Any], **settings: Any) -> Planned[Any]:
    data = {"model": "echo-1"} | body
    return plan_translated(RESPONSES, data, {}, load_settings(**settings), store, None)


def messages(store: LedgerStore, body: dict[str, Any], headers: dict[str, str] | None = None) -> Planned[Any]:
    data = {"model": "echo-1", "max_tokens": 32} | body
    return plan_translated(MESSAGES, data, headers or {}, load_settings(), store, None)


def test_an_answer_and_its_calls_are_one_assistant_message() -> None:
    request = parse_request(
        {
            "model": "m",
            "input": [
                {"role": "user", "content": "Weather?"},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "Checking."}],
                },
                {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "b", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "a", "output": "1"},
                {
                    "type": "function_call_output",
                    "call_id": "b",
                    "output": [{"type": "input_text", "text": "2"}],
                },
            ],
        }
    )
    translated, origins = chat_messages(input_items(request))
    assert [m["role"] for m in translated] == ["user", "assistant", "tool", "tool"]
    assert translated[1]["content"] == "Checking."
    assert [c["id"] for c in translated[1]["tool_calls"]] == ["a", "b"]
    assert translated[3]["content"] == "2"
    assert origins == ["input[0]", "input[1]", "input[4]", "input[5]"]


def test_ids_are_the_front_doors_and_an_idempotency_key_names_one_turn(store: LedgerStore) -> None:
    body = {"input": "hi", "metadata": {"idempotency_key": "k-1"}}
    first, again = responses(store, body), responses(store, body)
    assert first.turn.correlation_id == again.turn.correlation_id
    assert first.turn.correlation_id.startswith("resp_") and len(first.turn.correlation_id) == 5 + 32
    assert first.turn.envelope["payload"]["turn_id"] == first.turn.correlation_id
    assert first.turn.thread_id == first.turn.correlation_id  # a new thread, named by its first turn


def test_previous_response_id_declares_the_whole_history(store: LedgerStore) -> None:
    earlier = record(store, "resp_" + "a" * 32, "th-r", {}, {"output_text": "Cloudy."})
    ref = [
        {"ref_type": "event", "ref_id": earlier[0].digest},
        {"ref_type": "event", "ref_id": earlier[2].digest},
    ]
    called = record(
        store, "resp_" + "b" * 32, "th-r", {"declared_refs": ref}, {"output_text": "", "tool_calls": [CALL]}
    )
    planned = responses(
        store,
        {
            "previous_response_id": "resp_" + "b" * 32,
            "input": [{"type": "function_call_output", "call_id": "call_1", "output": "sunny"}],
        },
    )
    payload = planned.turn.envelope["payload"]
    assert payload["thread_id"] == "th-r" and payload["parent_turn_id"] == "resp_" + "b" * 32
    assert [r["ref_id"] for r in payload["declared_refs"]] == [
        earlier[0].digest,
        earlier[2].digest,
        called[0].digest,
        called[2].digest,
    ]
    assert payload["payload"]["message"] == "sunny"


@pytest.mark.parametrize("execution", [{"error": {"code": "provider.server_error"}}, None])
def test_a_failed_or_unknown_previous_response_is_refused(
    store: LedgerStore, execution: dict[str, Any] | None
) -> None:
    if execution is not None:
        record(store, "resp_" + "c" * 32, "th-f", {}, execution)
    with pytest.raises(AdmissionError) as caught:
        responses(store, {"previous_response_id": "resp_" + "c" * 32, "input": "go on"})
    assert caught.value.reason_code == "responses.previous_response_not_found"
    assert caught.value.field == "previous_response_id"


def test_a_header_naming_another_thread_is_a_conflict(store: LedgerStore) -> None:
    record(store, "resp_" + "d" * 32, "th-d", {}, {"output_text": "Hi."})
    with pytest.raises(AdmissionError) as caught:
        plan_translated(
            RESPONSES,
            {"model": "echo-1", "previous_response_id": "resp_" + "d" * 32, "input": "go on"},
            {"X-Turngate-Thread": "th-other"},
            load_settings(),
            store,
            None,
        )
    assert caught.value.reason_code == "thread.conflict"


@pytest.mark.parametrize(("items", "status"), [(3, "ok"), (4, "ok"), (5, "refused"), (6, "refused")])
def test_the_message_cap_counts_translated_messages(store: LedgerStore, items: int, status: str) -> None:
    """``TURNGATE_OPENAI_MAX_MESSAGES`` bounds the translated list: instructions count as one."""
    body = {
        "instructions": "Be brief.",
        "input": [{"role": "system", "content": f"note {i}"} for i in range(items - 1)]
        + [{"role": "user", "content": "hi"}],
    }
    if status == "ok":
        assert responses(store, body, openai_max_messages=5).chat.messages[-1].content == "hi"
        return
    with pytest.raises(AdmissionError) as caught:
        responses(store, body, openai_max_messages=5)
    assert caught.value.reason_code == "openai.too_many_messages" and caught.value.field == "input"
    if items == 6:  # over the cap as sent: refused before any item is validated
        assert caught.value.detail.startswith("input has 6 entries")


def test_the_message_cap_is_checked_before_any_message_is_validated(store: LedgerStore) -> None:
    body = {"messages": [{"role": "nobody"}] * 6}
    with pytest.raises(AdmissionError) as caught:
        plan_translated(
            MESSAGES,
            {"model": "m", "max_tokens": 1} | body,
            {},
            load_settings(openai_max_messages=5),
            store,
            None,
        )
    assert caught.value.reason_code == "openai.too_many_messages" and caught.value.field == "messages"


def test_anthropic_tool_ids_map_back_to_the_recorded_calls(store: LedgerStore) -> None:
    cid = "msg_" + "e" * 32
    first = record(store, cid, "th-e", {}, {"output_text": "", "tool_calls": [CALL]})
    use = {
        "type": "tool_use",
        "id": f"toolu_{'e' * 32}_0",
        "name": "get_weather",
        "input": {"city": "Vilnius"},
    }
    result = {
        "type": "tool_result",
        "tool_use_id": f"toolu_{'e' * 32}_0",
        "content": "sunny",
        "is_error": True,
    }
    planned = messages(
        store,
        {
            "messages": [
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": [use]},
                {"role": "user", "content": [result]},
            ]
        },
    )
    payload = planned.turn.envelope["payload"]
    assert payload["thread_id"] == "th-e"
    assert [r["ref_id"] for r in payload["declared_refs"]] == [first[0].digest, first[2].digest]
    context = payload["inputs"]["client_context"]
    assert context["source"] == "anthropic.messages"
    assert context["tool_results"] == [{"tool_call_id": "call_1", "content": "[tool error] sunny"}]


def test_an_unknown_tool_id_is_left_as_it_is(store: LedgerStore) -> None:
    use = {"type": "tool_use", "id": "toolu_" + "f" * 32 + "_0", "name": "f", "input": {}}
    planned = messages(
        store,
        {
            "messages": [
                {"role": "user", "content": "Go"},
                {"role": "assistant", "content": [use]},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": "x"}],
                },
            ]
        },
    )
    # No recorded turn made that call: a new thread, the history recorded as client context
    # (a stateless client's conversation), the call's id as the client sent it.
    context = planned.turn.envelope["payload"]["inputs"]["client_context"]
    sent = [m for m in context["messages"] if m["source"] == "unmatched_history"]
    assert [m["role"] for m in sent] == ["user", "assistant"] and planned.turn.refs == 0
    assert sent[1]["tool_calls"][0]["id"] == use["id"]


def test_unmatched_input_items_start_a_thread_with_them_as_client_context(store: LedgerStore) -> None:
    body = {
        "instructions": "x",
        "input": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"},
        ],
    }
    planned = responses(store, body)
    context = planned.turn.envelope["payload"]["inputs"]["client_context"]
    sent = [(m["role"], m["content"]) for m in context["messages"] if m["source"] == "unmatched_history"]
    assert sent == [("user", "a"), ("assistant", "b")] and planned.turn.refs == 0


def test_anthropic_fields_become_chat_fields(store: LedgerStore) -> None:
    planned = messages(
        store,
        {
            "system": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
            "stop_sequences": ["END"],
            "metadata": {"user_id": "u-7"},
            "temperature": 0.3,
        },
    )
    assert planned.chat.max_tokens == 32 and planned.chat.temperature == 0.3
    assert planned.chat.user == "u-7" and planned.chat.tool_choice == "auto"
    payload = planned.turn.envelope["payload"]
    assert payload["actor"] == "u-7" and payload["budget"] == {"max_tokens": 32}
    context = payload["inputs"]["client_context"]
    assert context["messages"] == [{"role": "system", "content": "Be brief.", "source": "system"}]
    assert [t["name"] for t in context["tools"]] == ["get_weather"]


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (
            [{"type": "tool_result", "tool_use_id": "x", "content": "1"}, {"type": "text", "text": "and?"}],
            "anthropic.unsupported_content",
        ),
        ([{"type": "tool_use", "id": "x", "name": "f", "input": {}}], "anthropic.unsupported_content"),
        ([{"type": "document", "source": {}}], "anthropic.unsupported_content"),
        ([{"type": "text"}], "admission.missing_field"),
    ],
)
def test_user_blocks_that_cannot_be_recorded(store: LedgerStore, content: list[Any], code: str) -> None:
    with pytest.raises(AdmissionError) as caught:
        messages(store, {"messages": [{"role": "user", "content": content}]})
    assert caught.value.reason_code == code
    assert caught.value.field is not None and caught.value.field.startswith("messages[0]")


def test_max_tokens_is_required_and_positive(store: LedgerStore) -> None:
    for body, code in (
        ({"max_tokens": None}, "admission.invalid_value"),
        ({"max_tokens": 0}, "admission.invalid_value"),
    ):
        with pytest.raises(AdmissionError) as caught:
            messages(store, {"messages": [{"role": "user", "content": "hi"}]} | body)
        assert caught.value.reason_code == code and caught.value.field == "max_tokens"
    with pytest.raises(AdmissionError) as caught:
        plan_translated(
            MESSAGES,
            {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            {},
            load_settings(),
            store,
            None,
        )
    assert caught.value.reason_code == "admission.missing_field"
    assert (
        messages(store, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}).chat.max_tokens
        == 1
    )


def test_tool_id_lookups_are_bounded(store: LedgerStore) -> None:
    """One request looks up at most MAX_TURN_LOOKUPS turns: a body full of made-up ids costs
    a bounded number of ledger reads; ids past the bound stay as sent."""
    record(store, "msg_" + "1" * 32, "th-b", {}, {"output_text": "", "tool_calls": [CALL]})
    ids = CallIds(store, None)
    known = f"toolu_{'1' * 32}_0"
    assert ids.recorded(known) == "call_1"
    for n in range(MAX_TURN_LOOKUPS + 5):
        made_up = f"toolu_{n:032x}_0"
        assert ids.recorded(made_up) == made_up
    assert ids.recorded(known) == "call_1"  # already looked up: remembered
    late = CallIds(store, None)
    for n in range(MAX_TURN_LOOKUPS):
        late.recorded(f"toolu_{n + 7:032x}_0")
    assert late.recorded(known) == known  # past the bound: not looked up
