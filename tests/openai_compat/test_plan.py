"""An OpenAI request -> one turn's envelope: history matching, client context, refusals.

Pure except for a real SQLite ledger holding the thread's recorded events.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from turngate.api.openai_compat.history import HistoryMessage, match_history
from turngate.api.openai_compat.turn import PlannedTurn, correlation_id_for, plan_turn
from turngate.api.openai_compat.wire import parse_chat_request
from turngate.core.client_context import client_context_of
from turngate.core.events import AdmissionError, Event, EventDraft, EventKind
from turngate.ledger import LedgerStore
from turngate.settings import Settings, load_settings

THREAD = "th-1"


def record_turn(store: LedgerStore, turn: str, message: str, answer: str, **execution: Any) -> list[Event]:
    def draft(kind: EventKind, payload: dict[str, Any]) -> EventDraft:
        return EventDraft(kind=kind, thread_id=THREAD, turn_id=turn, correlation_id=turn, payload=payload)

    return store.append_many(
        [
            draft(EventKind.INTENT, {"payload": {"message": message}, "inputs": {}}),
            draft(EventKind.DECISION, {"decision": "ALLOW", "reason_codes": []}),
            draft(EventKind.EXECUTION, {"output_text": answer} | execution),
        ]
    )


def plan(
    store: LedgerStore, messages: list[dict[str, Any]], headers: dict[str, str] | None = None, **body: Any
) -> PlannedTurn:
    chat = parse_chat_request({"model": "echo-1", "messages": messages} | body)
    thread = {"X-Turngate-Thread": THREAD} if headers is None else headers
    return plan_turn(chat, thread, settings(), store, None)


def settings(**overrides: Any) -> Settings:
    return load_settings(**overrides)


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


# ------------------------------------------------------------------ history matching


def test_recorded_exchanges_become_refs_in_order(store: LedgerStore) -> None:
    first = record_turn(store, "t1", "Labas! Kaip sekasi? ąčęėįšųūž", "Puikiai 🙂")
    second = record_turn(store, "t2", "again", "and again")
    turn = plan(store, [user(first[0].payload["payload"]["message"]), assistant("Puikiai 🙂"),
                        user("again"), assistant("and again"), user("next")])  # fmt: skip
    refs = [r["ref_id"] for r in turn.envelope["payload"]["declared_refs"]]
    assert refs == [first[0].digest, first[2].digest, second[0].digest, second[2].digest]
    assert turn.envelope["payload"]["parent_turn_id"] == "t2"
    assert turn.refs == 4 and turn.client_messages == 0
    assert turn.envelope["payload"]["inputs"] == {}


def test_each_recorded_event_matches_once_and_in_order(store: LedgerStore) -> None:
    events = record_turn(store, "t1", "same", "same answer")
    history = [HistoryMessage(0, "user", "same"), HistoryMessage(1, "user", "same")]
    match = match_history(history, events)
    assert match.ref_digests == (events[0].digest,)
    assert [m.position for m in match.unmatched] == [1]
    # an answer before its question in the request does not match out of order
    swapped = [HistoryMessage(0, "assistant", "same answer"), HistoryMessage(1, "user", "same")]
    match = match_history(swapped, events)
    assert match.ref_digests == (events[2].digest,) and [m.position for m in match.unmatched] == [1]


def test_text_that_differs_by_one_character_does_not_match(store: LedgerStore) -> None:
    events = record_turn(store, "t1", "Sveikas", "Labas")
    match = match_history(
        [HistoryMessage(0, "user", "Sveikas!"), HistoryMessage(1, "assistant", "Labas")], events
    )
    assert match.ref_digests == (events[2].digest,) and [m.position for m in match.unmatched] == [0]


def test_whitespace_around_a_text_still_matches(store: LedgerStore) -> None:
    # SDKs and frameworks add (or strip) a trailing newline when they send an answer back.
    events = record_turn(store, "t1", "Sveikas\n", "Labas")
    match = match_history(
        [HistoryMessage(0, "user", " Sveikas"), HistoryMessage(1, "assistant", "Labas\n\n")], events
    )
    assert match.ref_digests == (events[0].digest, events[2].digest) and not match.unmatched
    # whitespace inside a text is part of it
    inner = match_history([HistoryMessage(0, "user", "Svei kas")], events)
    assert [m.position for m in inner.unmatched] == [0]


def test_failed_execution_never_matches(store: LedgerStore) -> None:
    events = record_turn(store, "t1", "q", "", error={"code": "llm.timeout"})
    assert match_history([HistoryMessage(0, "assistant", "")], events).ref_digests == ()


def test_offloaded_texts_match_by_their_artifact_sha256(store: LedgerStore) -> None:
    full = "x" * 70_000
    sha = hashlib.sha256(full.encode()).hexdigest()
    pointer = {"artifact_id": sha, "path": f"a/{sha}", "sha256": sha, "size_bytes": len(full)}
    drafts = [
        EventDraft(
            kind=EventKind.INTENT,
            thread_id=THREAD,
            turn_id="big",
            correlation_id="big",
            payload={
                "payload": {"message": full[:4096], "message_artifact": pointer, "message_truncated": True}
            },
        ),
        EventDraft(
            kind=EventKind.EXECUTION,
            thread_id=THREAD,
            turn_id="big",
            correlation_id="big",
            payload={"output_text": full[:4096], "output_artifact": pointer, "output_truncated": True},
        ),
    ]
    events = store.append_many(drafts)
    match = match_history([HistoryMessage(0, "user", full), HistoryMessage(1, "assistant", full)], events)
    assert match.ref_digests == (events[0].digest, events[1].digest)
    # the preview alone is not the text
    preview = match_history([HistoryMessage(0, "user", full[:4096])], events)
    assert preview.ref_digests == ()


# ------------------------------------------------------------------ unmatched history, system


def test_unmatched_history_is_refused_by_default(store: LedgerStore) -> None:
    record_turn(store, "t1", "asked", "answered")
    with pytest.raises(AdmissionError) as caught:
        plan(store, [user("asked"), assistant("something else"), user("now")])
    assert caught.value.reason_code == "openai.unmatched_history"
    assert "messages [1]" in caught.value.detail


def test_without_a_thread_unmatched_history_starts_a_thread_as_client_context(store: LedgerStore) -> None:
    # consecutive user messages (context, then the question) from a stateless client
    record_turn(store, "t1", "asked", "answered")
    turn = plan(store, [user("asked"), user("now")], headers={})
    assert turn.thread_id == turn.correlation_id and turn.refs == 0
    context = client_context_of(turn.envelope["payload"]["inputs"])
    assert context is not None
    assert [(m.role, m.content, m.source) for m in context.messages] == [
        ("user", "asked", "unmatched_history")
    ]


def test_an_unmatched_empty_tool_result_is_refused_not_a_crash(store: LedgerStore) -> None:
    """Client context holds no empty message: an empty tool result only the client has is a 400."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        user("hi"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": ""},
        user("next"),
    ]
    with pytest.raises(AdmissionError) as caught:
        plan(store, messages, {})
    assert caught.value.reason_code == "openai.unsupported_message"
    assert caught.value.field == "messages[2]"
    messages[2] = {"role": "tool", "tool_call_id": "c1", "content": "42"}  # not empty: recorded
    assert plan(store, messages, {}).client_messages == 3


def test_record_mode_keeps_unmatched_history_and_system_as_client_context(store: LedgerStore) -> None:
    chat = parse_chat_request(
        {
            "model": "echo-1",
            "messages": [
                {"role": "developer", "content": "Rules."},
                user("elsewhere"),
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "part one, "}, {"type": "text", "text": "two"}],
                },
            ],
        }
    )
    turn = plan_turn(chat, {}, settings(openai_unmatched_history="record"), store, None)
    context = client_context_of(turn.envelope["payload"]["inputs"])
    assert context is not None
    assert [(m.role, m.content, m.source) for m in context.messages] == [
        ("system", "Rules.", "system"),
        ("user", "elsewhere", "unmatched_history"),
    ]
    assert turn.envelope["payload"]["payload"] == {"message": "part one, two"}
    assert turn.envelope["payload"]["declared_refs"] == []


def test_client_system_message_can_be_refused(store: LedgerStore) -> None:
    chat = parse_chat_request(
        {"model": "echo-1", "messages": [{"role": "system", "content": "x"}, user("hi")]}
    )
    with pytest.raises(AdmissionError) as caught:
        plan_turn(chat, {}, settings(openai_client_system="refuse"), store, None)
    assert caught.value.reason_code == "openai.system_message_refused"


@pytest.mark.parametrize(
    ("messages", "code"),
    [
        ([assistant("last")], "openai.last_message_not_user"),
        ([user("   ")], "admission.empty_message"),
        ([{"role": "function", "content": "42", "name": "f"}, user("hi")], "openai.unsupported_message"),
        ([{"role": "assistant", "content": None}, user("hi")], "openai.unsupported_message"),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            "openai.unsupported_content",
        ),
    ],
)
def test_messages_that_cannot_be_a_turn_are_refused(
    store: LedgerStore, messages: list[dict[str, Any]], code: str
) -> None:
    with pytest.raises(AdmissionError) as caught:
        plan(store, messages)
    assert caught.value.reason_code == code


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"model": "echo-1", "messages": []}, "admission.invalid_value"),
        ({"messages": [user("x")]}, "admission.missing_field"),
        ({"model": "echo-1", "messages": [user("x")], "n": 2}, "openai.unsupported_parameter"),
        ({"model": "echo-1", "messages": [user("x")], "max_tokens": 0}, "admission.invalid_value"),
        ([1, 2], "admission.invalid_type"),
    ],
)
def test_bad_requests_have_reason_codes(body: Any, code: str) -> None:
    with pytest.raises(AdmissionError) as caught:
        parse_chat_request(body)
    assert caught.value.reason_code == code


# ------------------------------------------------------------------ tools, ids, budget


def tool(name: str, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


def test_tool_names_at_and_over_the_length_limit(store: LedgerStore) -> None:
    longest = "t" + "x" * 63  # 64 characters: the limit
    turn = plan(store, [user("hi")], tools=[tool(longest)])
    tools = turn.envelope["payload"]["inputs"]["client_context"]["tools"]
    assert [t["name"] for t in tools] == [longest]
    assert tools[0]["description"] == longest  # none given: the name stands in
    with pytest.raises(AdmissionError) as caught:
        plan(store, [user("hi")], tools=[tool(longest + "x")])
    assert caught.value.reason_code == "openai.invalid_tool"


def test_openai_tool_names_are_accepted(store: LedgerStore) -> None:
    names = ["Get-Weather", "WeatherReport", "0_tool", "x"]
    turn = plan(store, [user("hi")], tools=[tool(name) for name in names])
    assert [t["name"] for t in turn.envelope["payload"]["inputs"]["client_context"]["tools"]] == names


@pytest.mark.parametrize(
    "bad", [tool("get weather"), tool("ok_name", {"type": "array"}), tool("ąžuolas"), tool("a.b")]
)
def test_tools_a_gateway_cannot_admit_are_refused(store: LedgerStore, bad: dict[str, Any]) -> None:
    with pytest.raises(AdmissionError) as caught:
        plan(store, [user("hi")], tools=[bad])
    assert caught.value.reason_code == "openai.invalid_tool"


def test_tool_choice_none_offers_nothing_and_auto_records_nothing(store: LedgerStore) -> None:
    assert (
        plan(store, [user("hi")], tools=[tool("a")], tool_choice="none").envelope["payload"]["inputs"] == {}
    )
    auto = plan(store, [user("hi")], tools=[tool("a")], tool_choice="auto")
    assert "request_options" not in auto.envelope["payload"]["inputs"]["client_context"]


def test_idempotency_key_names_the_turn_per_tenant_and_thread() -> None:
    one = correlation_id_for("acme", "th", "k")
    assert one == correlation_id_for("acme", "th", "k")
    assert len({one, correlation_id_for("other", "th", "k"), correlation_id_for("acme", "th2", "k")}) == 3


def test_max_completion_tokens_wins_and_becomes_the_budget(store: LedgerStore) -> None:
    turn = plan(store, [user("hi")], max_tokens=50, max_completion_tokens=7, user="alice")
    assert turn.envelope["payload"]["budget"] == {"max_tokens": 7}
    assert turn.envelope["payload"]["actor"] == "alice"
    assert turn.envelope["payload"]["requested_model_id"] == "echo-1"
