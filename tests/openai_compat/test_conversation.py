"""A call's turn id from its content, retries, and the thread a stateless call continues
(planning against a real SQLite ledger; no Temporal)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.openai_compat.test_plan import assistant, settings, user
from turngate.api.openai_compat.conversation import MAX_GENERATIONS, RETRY_COUNT_HEADER, is_retry
from turngate.api.openai_compat.turn import PlannedTurn, plan_turn
from turngate.api.openai_compat.wire import parse_chat_request
from turngate.core.events import AdmissionError, EventDraft, EventKind
from turngate.ledger import LedgerStore

RETRY = {RETRY_COUNT_HEADER: "1"}


def plan(
    ledger: LedgerStore, messages: list[dict[str, Any]], headers: dict[str, str] | None = None, **body: Any
) -> PlannedTurn:
    chat = parse_chat_request({"model": "echo-1", "messages": messages} | body)
    return plan_turn(chat, headers or {}, settings(), ledger, "acme")


def record(store: LedgerStore, turn: PlannedTurn, answer: str) -> None:
    """What the workflow would record for a planned turn (INTENT and its EXECUTION)."""
    payload = turn.envelope["payload"]

    def draft(kind: EventKind, body: dict[str, Any]) -> EventDraft:
        return EventDraft(
            kind=kind,
            thread_id=turn.thread_id,
            turn_id=turn.correlation_id,
            correlation_id=turn.correlation_id,
            tenant_id="acme",
            payload=body,
        )

    store.append_many(
        [
            draft(EventKind.INTENT, {"payload": payload["payload"], "inputs": payload["inputs"]}),
            draft(EventKind.DECISION, {"decision": "ALLOW", "reason_codes": []}),
            draft(EventKind.EXECUTION, {"output_text": answer}),
        ]
    )


@pytest.mark.parametrize(
    ("value", "retry"), [(None, False), ("0", False), ("1", True), ("2", True), ("x", False)]
)
def test_retry_header(value: str | None, retry: bool) -> None:
    assert is_retry({} if value is None else {RETRY_COUNT_HEADER: value}) is retry


def test_a_retry_names_the_recorded_turn_and_a_new_call_the_next(store: LedgerStore) -> None:
    first = plan(store, [user("hi")])
    assert plan(store, [user("hi")]).correlation_id == first.correlation_id  # nothing recorded yet
    assert plan(store, [user("hi")], RETRY).correlation_id == first.correlation_id
    record(store, first, "hello")
    assert plan(store, [user("hi")], RETRY).correlation_id == first.correlation_id
    second = plan(store, [user("hi")])
    assert second.correlation_id != first.correlation_id and second.thread_id != first.thread_id
    record(store, second, "hello again")
    assert plan(store, [user("hi")], RETRY).correlation_id == second.correlation_id
    # another tenant computes other ids
    chat = parse_chat_request({"model": "echo-1", "messages": [user("hi")]})
    assert plan_turn(chat, {}, settings(), store, "other").correlation_id not in {
        first.correlation_id,
        second.correlation_id,
    }


def test_the_same_messages_get_findable_ids_up_to_the_limit(store: LedgerStore) -> None:
    ids = []
    for _ in range(MAX_GENERATIONS):
        turn = plan(store, [user("again")])
        record(store, turn, "ok")
        ids.append(turn.correlation_id)
    assert len(set(ids)) == MAX_GENERATIONS
    beyond = {plan(store, [user("again")]).correlation_id for _ in range(2)}
    assert len(beyond) == 2 and not beyond & set(ids)  # random past the limit
    assert plan(store, [user("again")], RETRY).correlation_id == ids[-1]


def test_a_stateless_conversation_continues_its_thread(store: LedgerStore) -> None:
    first = plan(store, [{"role": "system", "content": "Be brief."}, user("What is 2+2?")])
    record(store, first, "Four.")
    # the framework sends the answer back with a trailing newline, and a new system prompt
    second = plan(
        store,
        [
            {"role": "system", "content": "Be very brief."},
            user("What is 2+2?"),
            assistant("Four.\n"),
            user("3+3?"),
        ],
    )
    assert second.thread_id == first.thread_id and second.refs == 2
    assert second.envelope["payload"]["parent_turn_id"] == first.correlation_id
    record(store, second, "Six.")
    third = plan(
        store, [user("What is 2+2?"), assistant("Four."), user("3+3?"), assistant("Six."), user("4+4?")]
    )
    assert third.thread_id == first.thread_id and third.refs == 4


def test_an_edited_answer_starts_a_new_thread_with_its_history_as_client_context(store: LedgerStore) -> None:
    first = plan(store, [user("What is 2+2?")])
    record(store, first, "Four.")
    edited = plan(store, [user("What is 2+2?"), assistant("Five."), user("Sure?")])
    assert edited.thread_id == edited.correlation_id != first.thread_id
    context = edited.envelope["payload"]["inputs"]["client_context"]
    assert [m["content"] for m in context["messages"]] == ["What is 2+2?", "Five."]


def test_a_named_thread_is_never_replaced_by_the_lookup(store: LedgerStore) -> None:
    first = plan(store, [user("Q")])
    record(store, first, "A")
    messages = [user("Q"), assistant("A"), user("next")]
    named = {"X-Turngate-Thread": "th-named"}
    with pytest.raises(AdmissionError) as caught:  # its history is not th-named's: refused
        plan(store, messages, named)
    assert caught.value.reason_code == "openai.unmatched_history"
    chat = parse_chat_request({"model": "m", "messages": messages})
    recorded = plan_turn(chat, named, settings(openai_unmatched_history="record"), store, "acme")
    assert recorded.thread_id == "th-named" and recorded.refs == 0


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"logprobs": True}, "openai.unsupported_parameter", "logprobs"),
        ({"top_logprobs": 2}, "openai.unsupported_parameter", "top_logprobs"),
        ({"store": True}, "openai.unsupported_parameter", "store"),
        ({"n": 2}, "openai.unsupported_parameter", "n"),
        ({"modalities": ["text", "audio"]}, "openai.unsupported_parameter", "modalities"),
        ({"metadata": {"team": "x"}}, "openai.unsupported_parameter", "metadata"),
        ({"brand_new_field": 1}, "openai.unsupported_parameter", "brand_new_field"),
        ({"top_p": 1.5}, "admission.invalid_value", "top_p"),
        ({"reasoning_effort": "extreme"}, "admission.invalid_value", "reasoning_effort"),
        ({"response_format": {"type": "xml"}}, "admission.invalid_value", "response_format.type"),
        ({"tool_choice": "required"}, "openai.invalid_tool_choice", "tool_choice"),
        (
            {
                "tools": [{"type": "function", "function": {"name": "a"}}],
                "tool_choice": {"type": "function", "function": {"name": "b"}},
            },
            "openai.invalid_tool_choice",
            "tool_choice",
        ),
    ],
)
def test_fields_that_cannot_be_honoured_are_refused_with_a_code(
    store: LedgerStore, body: dict[str, Any], code: str, param: str
) -> None:
    with pytest.raises(AdmissionError) as caught:
        plan(store, [user("x")], **body)
    assert (caught.value.reason_code, caught.value.field) == (code, param)


def test_defaults_record_nothing_new(store: LedgerStore) -> None:
    """A call that sets no option records the INTENT it always did."""
    turn = plan(
        store,
        [user("plain")],
        stream=False,
        n=1,
        logprobs=False,
        store=False,
        modalities=["text"],
        response_format={"type": "text"},
        tool_choice="auto",
        metadata={"thread_id": "th-plain"},
    )
    assert turn.envelope["payload"]["inputs"] == {}
