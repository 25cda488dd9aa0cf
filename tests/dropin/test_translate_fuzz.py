"""Random bodies for both translations: each is planned or refused with an AdmissionError, never
another exception (which the route would answer as a 500). Bodies are drawn near the real
shapes (items, blocks, tools, ids turngate gives) so the translation code, not only the first
validation, is reached; a real SQLite ledger holds one recorded turn the ids may name."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turngate.api.dropin.plan import FrontDoor, plan_translated
from turngate.api.messages_api.translate import MESSAGES
from turngate.api.responses_api.translate import RESPONSES
from turngate.core.events import AdmissionError, EventDraft, EventKind
from turngate.ledger import LedgerStore
from turngate.settings import load_settings

HEX = "ab" * 16
CALL = {"id": "call_1", "name": "get_weather", "arguments": {"city": "Vilnius"}}

leaf = st.one_of(st.none(), st.booleans(), st.integers(-2, 3), st.text(max_size=8))
value = st.recursive(
    leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def mostly(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``valid`` nine times in ten, any JSON value otherwise."""
    return st.tuples(st.integers(0, 9), valid, value).map(lambda t: t[2] if t[0] == 0 else t[1])


texts = st.sampled_from(["Weather?", "sunny", "", " ", "\u00e9"]) | st.text(max_size=12)
ids = st.sampled_from(
    [f"msg_{HEX}", f"fc_{HEX}_0", f"fc_{HEX}_3", f"toolu_{HEX}_0", f"toolu_{HEX}_7", "call_1", "x"]
)
part = st.fixed_dictionaries(
    {
        "type": mostly(st.sampled_from(["input_text", "output_text", "text", "input_image", "refusal"])),
        "text": mostly(texts),
    }
)
content = texts | st.lists(part, max_size=3)
arguments = st.sampled_from(
    ['{"city": "Vilnius"}', "{}", "[]", "nope", '{"a":' * 70 + "1" + "}" * 70, '"\\ud800"']
)
items = st.one_of(
    st.fixed_dictionaries(
        {
            "role": mostly(st.sampled_from(["user", "user", "assistant", "system", "developer"])),
            "content": mostly(content),
        },
        optional={"type": st.just("message"), "id": ids},
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("function_call"),
            "call_id": ids,
            "name": st.sampled_from(["get_weather", "Bad-Name"]),
            "arguments": arguments,
        },
        optional={"id": ids},
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call_output"), "call_id": ids, "output": mostly(content)}
    ),
    st.fixed_dictionaries({"type": st.sampled_from(["reasoning", "item_reference"])}),
)
tool = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["function", "function", "web_search"]),
        "name": st.sampled_from(["get_weather", "A b"]),
    },
    optional={"parameters": st.just({"type": "object"}) | value, "strict": st.booleans()},
)
text_format = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "json_schema", "json_object", "x"])},
    optional={"schema": st.just({"type": "object"}), "name": texts, "strict": st.booleans()},
)
responses_bodies = st.fixed_dictionaries(
    {"model": mostly(st.just("echo-1")), "input": texts | st.lists(items, min_size=1, max_size=5)},
    optional={
        "instructions": mostly(texts),
        "previous_response_id": st.sampled_from([f"resp_{HEX}", "resp_nope"]),
        "tools": mostly(st.lists(tool, max_size=2)),
        "tool_choice": st.sampled_from(["auto", "none", "required"])
        | st.fixed_dictionaries({"type": st.sampled_from(["function", "mcp"]), "name": texts}),
        "text": st.fixed_dictionaries({}, optional={"format": text_format}),
        "max_output_tokens": st.integers(0, 5),
        "store": st.booleans(),
        "include": st.lists(st.just("reasoning.encrypted_content"), max_size=1),
        "metadata": st.dictionaries(
            st.sampled_from(["thread_id", "idempotency_key", "k"]), st.text(min_size=1, max_size=5)
        ),
        "stream": st.booleans(),
    },
)
block = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": mostly(texts)}),
    st.fixed_dictionaries(
        {
            "type": st.just("tool_use"),
            "id": ids,
            "name": st.sampled_from(["get_weather", "Bad-Name"]),
            "input": mostly(st.just({"city": "Vilnius"})),
        }
    ),
    st.fixed_dictionaries(
        {"type": st.just("tool_result"), "tool_use_id": ids},
        optional={
            "content": mostly(
                texts | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": texts}), max_size=2)
            ),
            "is_error": st.booleans(),
        },
    ),
    st.fixed_dictionaries({"type": st.sampled_from(["image", "thinking"])}),
)
message = st.fixed_dictionaries(
    {"role": mostly(st.sampled_from(["user", "assistant"])), "content": texts | st.lists(block, max_size=3)}
)
messages_bodies = st.fixed_dictionaries(
    {
        "model": mostly(st.just("echo-1")),
        "max_tokens": mostly(st.integers(1, 50)),
        "messages": st.lists(message, min_size=1, max_size=4),
    },
    optional={
        "system": mostly(
            texts | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": texts}), max_size=2)
        ),
        "tools": st.lists(
            st.fixed_dictionaries(
                {
                    "name": st.sampled_from(["get_weather", "A b"]),
                    "input_schema": mostly(st.just({"type": "object"})),
                },
                optional={"type": st.sampled_from(["custom", "bash_20250124"])},
            ),
            max_size=2,
        ),
        "tool_choice": st.fixed_dictionaries(
            {"type": st.sampled_from(["auto", "any", "tool", "none"])},
            optional={"name": texts, "disable_parallel_tool_use": st.booleans()},
        ),
        "output_config": st.fixed_dictionaries(
            {},
            optional={
                "format": st.just({"type": "json_schema", "schema": {"type": "object"}}),
                "effort": st.just("low"),
            },
        ),
        "thinking": st.sampled_from([{"type": "disabled"}, {"type": "enabled", "budget_tokens": 1024}]),
        "metadata": st.fixed_dictionaries({}, optional={"user_id": texts}),
        "stop_sequences": st.lists(texts, max_size=2),
        "stream": st.booleans(),
    },
)
FUZZ = settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LedgerStore]:
    path: Path = tmp_path_factory.mktemp("fuzz") / "ledger.sqlite3"
    with LedgerStore(f"sqlite:///{path}") as store:
        for cid in (f"resp_{HEX}", f"msg_{HEX}"):
            store.append_many(
                [
                    EventDraft(
                        kind=kind, thread_id="th-fuzz", turn_id=cid, correlation_id=cid, payload=payload
                    )
                    for kind, payload in (
                        (EventKind.INTENT, {"payload": {"message": "Weather?"}, "inputs": {}}),
                        (EventKind.DECISION, {"decision": "ALLOW", "reason_codes": []}),
                        (EventKind.EXECUTION, {"output_text": "", "tool_calls": [CALL]}),
                    )
                ]
            )
        yield store


SETTINGS = load_settings()


def _planned_or_refused(door: FrontDoor[Any], body: Any, store: LedgerStore) -> None:
    with contextlib.suppress(AdmissionError):
        plan_translated(door, body, {}, SETTINGS, store, None)


def test_responses_bodies_are_planned_or_refused(ledger: LedgerStore) -> None:
    @FUZZ
    @given(mostly(responses_bodies))
    def check(body: Any) -> None:
        _planned_or_refused(RESPONSES, body, ledger)

    check()


def test_messages_bodies_are_planned_or_refused(ledger: LedgerStore) -> None:
    @FUZZ
    @given(mostly(messages_bodies))
    def check(body: Any) -> None:
        _planned_or_refused(MESSAGES, body, ledger)

    check()
