"""Tool gating by exchange count, tool-call admission, signal -> transition mapping."""

from __future__ import annotations

from typing import Any

import pytest

from tests.prompts.helpers import profiles_config
from turngate.core.canonical import canonical_bytes
from turngate.core.events import EventDraft, EventKind, seal
from turngate.core.limits import TEXT_INLINE_LIMIT_BYTES
from turngate.core.prompt_layers import parse_prompt_config
from turngate.core.refs import Resolution
from turngate.core.tools import (
    ToolCall,
    ToolSpec,
    admit_tool_calls,
    exchange_count,
    first_transition,
    next_phase,
    next_phase_for,
    offered_tools,
    schema_errors,
    tools_digest,
    transition_for,
)


def transition_tool() -> ToolSpec:
    config = parse_prompt_config(profiles_config())
    return config.tools_for(config.profiles["dialogue"])[0]


def test_offered_only_from_min_exchanges() -> None:
    spec = transition_tool()
    always = ToolSpec(name="hint", description="A hint.")
    assert offered_tools([spec, always], 0) == [always]
    assert offered_tools([spec, always], 1) == [always]
    assert offered_tools([spec, always], 2) == [spec, always]
    assert offered_tools([spec, always], 9) == [spec, always]
    assert tools_digest([spec]) != tools_digest([spec, always])


class Ledger:
    def __init__(self) -> None:
        self.events: list[Any] = []

    def add(self, kind: EventKind, thread: str, turn: str, payload: dict[str, Any]) -> Any:
        draft = EventDraft(
            kind=kind, thread_id=thread, turn_id=turn, correlation_id=f"c-{turn}", payload=payload
        )
        prev = self.events[-1].digest if self.events else None
        event = seal(draft, len(self.events), prev)
        self.events.append(event)
        return event


def test_exchange_count_counts_completed_pairs_only() -> None:
    ledger = Ledger()
    intents = [
        ledger.add(EventKind.INTENT, "th", "t1", {"payload": {"message": "hi"}}),
        ledger.add(EventKind.INTENT, "th", "t2", {"payload": {"message": "again"}}),
        ledger.add(EventKind.INTENT, "th", "t3", {"payload": {"message": "third"}}),
        ledger.add(EventKind.INTENT, "th", "t4", {"payload": {"message": "fourth"}}),
    ]
    executions = [
        ledger.add(EventKind.EXECUTION, "th", "t1", {"output_text": "hello"}),
        ledger.add(EventKind.EXECUTION, "th", "t2", {"output_text": "yes"}),
        ledger.add(EventKind.EXECUTION, "th", "t3", {"error": {"type": "provider.timeout"}}),  # failed
        ledger.add(EventKind.EXECUTION, "th", "t9", {"output_text": "orphan"}),  # its INTENT not declared
    ]
    assert exchange_count(Resolution()) == 0
    assert exchange_count(Resolution(governance_events=tuple(intents))) == 0
    full = Resolution(governance_events=tuple(intents), execution_events=tuple(executions))
    assert exchange_count(full) == 2
    gated = offered_tools([transition_tool()], exchange_count(full))
    assert [spec.name for spec in gated] == ["transition_phase"]
    one = Resolution(governance_events=tuple(intents), execution_events=(executions[0],))
    assert offered_tools([transition_tool()], exchange_count(one)) == []


def test_admission_rejects_tools_not_offered() -> None:
    spec = transition_tool()
    call = {"name": "transition_phase", "arguments": {"signal": "understood"}, "id": "c1"}
    early = admit_tool_calls([call], offered_tools([spec], 1))
    assert early.admitted == ()
    assert [(r.name, r.id, r.reason_code) for r in early.rejected] == [
        ("transition_phase", "c1", "tool.not_offered")
    ]
    unknown = admit_tool_calls([{"name": "delete_everything", "arguments": {}}], [spec])
    assert unknown.rejected[0].reason_code == "tool.not_offered"
    ok = admit_tool_calls([call], offered_tools([spec], 2))
    assert ok.admitted == (ToolCall(name="transition_phase", arguments={"signal": "understood"}, id="c1"),)
    assert ok.rejected == ()


@pytest.mark.parametrize(
    "arguments",
    [
        {"signal": "whatever"},
        {},
        {"signal": "understood", "extra": 1},
        {"signal": 3},
        {"signal": "partial", "reason": "x" * 51},
        "{not json",
        "[1, 2]",
        ["signal"],
    ],
)
def test_admission_rejects_invalid_arguments(arguments: Any) -> None:
    admission = admit_tool_calls([{"name": "transition_phase", "arguments": arguments}], [transition_tool()])
    assert admission.admitted == ()
    assert admission.rejected[0].reason_code == "tool.invalid_arguments"
    assert admission.rejected[0].detail


def test_json_string_arguments_are_decoded_and_order_is_kept() -> None:
    spec = transition_tool()
    admission = admit_tool_calls(
        [
            {"name": "nope", "arguments": "{}"},
            {"name": "transition_phase", "arguments": '{"signal": "partial", "reason": "named one"}'},
            ToolCall(name="transition_phase", arguments={"signal": "max_reached"}),
        ],
        [spec],
    )
    assert [c.arguments["signal"] for c in admission.admitted] == ["partial", "max_reached"]
    assert [r.name for r in admission.rejected] == ["nope"]
    call, transition = first_transition(admission, [spec]) or (None, None)
    assert transition == "on_partial" and call is admission.admitted[0]


@pytest.mark.parametrize(
    ("signal", "transition"),
    [("understood", "on_success"), ("partial", "on_partial"), ("max_reached", "on_max_exchanges")],
)
def test_signals_map_to_transitions(signal: str, transition: str) -> None:
    spec = transition_tool()
    assert transition_for(ToolCall(name="transition_phase", arguments={"signal": signal}), spec) == transition
    transitions = {"on_success": "reveal", "on_partial": "hint", "on_max_exchanges": "reveal"}
    assert next_phase(transition, transitions) in ("reveal", "hint")


def test_transition_for_other_calls_is_none() -> None:
    spec = transition_tool()
    assert transition_for(ToolCall(name="other", arguments={"signal": "understood"}), spec) is None
    assert transition_for(ToolCall(name="transition_phase", arguments={"signal": "nope"}), spec) is None
    assert transition_for(ToolCall(name="hint"), ToolSpec(name="hint", description="A hint.")) is None
    assert next_phase("on_success", None) is None
    assert next_phase("on_success", {"on_success": ""}) is None


TARGETS = {"on_success": "reveal", "on_partial": "hint"}


@pytest.mark.parametrize(
    ("path", "inputs", "expected"),
    [
        (None, {"task": {"ai_transitions": TARGETS}}, "reveal"),  # the default path
        ("lesson.next", {"lesson": {"next": TARGETS}, "task": {"ai_transitions": {}}}, "reveal"),
        ("targets", {"targets": TARGETS}, "reveal"),
        ("lesson.next", {"lesson": {"next": "not a mapping"}}, None),
        ("lesson.next", {"lesson": ["not", "a", "mapping"]}, None),
        ("lesson.next", {}, None),
    ],
)
def test_next_phase_reads_the_targets_where_the_tool_spec_says(
    path: str | None, inputs: dict[str, Any], expected: str | None
) -> None:
    raw = profiles_config()["tools"][0] | ({"transition_targets": path} if path else {})
    spec = ToolSpec.model_validate(raw)
    call = ToolCall(name="transition_phase", arguments={"signal": "understood"})
    assert next_phase_for(call, "on_success", [spec], inputs) == expected
    assert next_phase_for(ToolCall(name="other"), "on_success", [spec], inputs) is None


def test_transition_targets_enter_the_tools_digest_only_when_not_the_default() -> None:
    raw = profiles_config()["tools"][0]
    implicit = ToolSpec.model_validate(raw)
    explicit = ToolSpec.model_validate(raw | {"transition_targets": "task.ai_transitions"})
    other = ToolSpec.model_validate(raw | {"transition_targets": "lesson.next"})
    assert tools_digest([implicit]) == tools_digest([explicit]) != tools_digest([other])
    for bad in ("", "a..b", ".a", "a/b", "a." * 9 + "a"):
        with pytest.raises(ValueError, match="transition_targets"):
            ToolSpec.model_validate(raw | {"transition_targets": bad})


def test_tool_spec_validation() -> None:
    with pytest.raises(ValueError, match="type 'object'"):
        ToolSpec(name="x", description="d", parameters={"type": "string"})
    with pytest.raises(ValueError, match="signal argument"):
        ToolSpec(name="x", description="d", signals={"done": "on_success"})
    with pytest.raises(ValueError):  # OpenAI's tool-name pattern: letters, digits, _ and -, 1-64
        ToolSpec(name="bad name", description="d")
    with pytest.raises(ValueError):
        ToolSpec(name="x" * 65, description="d")
    assert ToolSpec(name="Bad-Name", description="d").name == "Bad-Name"  # CamelCase and - are OpenAI's
    assert transition_tool().definition()["name"] == "transition_phase"


def test_schema_subset() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 1, "maximum": 3},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
            "flag": {"type": ["boolean", "null"]},
        },
        "required": ["n"],
    }
    assert schema_errors({"n": 2, "tags": ["a"], "flag": None}, schema) == []
    assert schema_errors({"n": 2.0}, schema) == []
    assert schema_errors({"n": True}, schema)  # a bool is not an integer
    assert schema_errors({"n": 0}, schema)
    assert schema_errors({"n": 1, "tags": ["a", 1]}, schema)
    assert schema_errors({"n": 1, "tags": ["a", "b", "c"]}, schema)
    assert schema_errors({"n": 1, "flag": "yes"}, schema)
    assert schema_errors({}, schema) == ["$: missing required property 'n'"]


def test_undecodable_arguments_are_rejected_even_without_required_fields():
    from turngate.core.tools import ToolSpec, admit_tool_calls

    spec = ToolSpec(name="transition_phase", description="d", parameters={"type": "object", "properties": {}})
    admission = admit_tool_calls(
        [{"name": "transition_phase", "arguments": {}, "arguments_raw": "{oops"}], [spec]
    )
    assert not admission.admitted
    assert admission.rejected[0].reason_code == "tool.invalid_arguments"


@pytest.mark.parametrize("unit", ["a", "ž"])
def test_admitted_arguments_stop_at_the_inline_text_limit(unit: str) -> None:
    spec = ToolSpec(
        name="take_note",
        description="stores a note",
        parameters={"type": "object", "properties": {"note": {"type": "string"}}},
    )
    overhead = len(canonical_bytes({"note": ""}))
    width = len(unit.encode())

    def call(size: int) -> dict[str, Any]:
        count, rest = divmod(size - overhead, width)
        arguments = {"note": unit * count + "a" * rest}
        assert len(canonical_bytes(arguments)) == size
        return {"name": "take_note", "arguments": arguments}

    at = admit_tool_calls([call(TEXT_INLINE_LIMIT_BYTES)], [spec])
    over = admit_tool_calls([call(TEXT_INLINE_LIMIT_BYTES + 1)], [spec])
    assert len(at.admitted) == 1 and at.rejected == ()
    assert over.admitted == () and over.rejected[0].reason_code == "tool.arguments_too_large"
    assert "16385 bytes" in over.rejected[0].detail
