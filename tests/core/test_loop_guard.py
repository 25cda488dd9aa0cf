"""The loop guard: a tool call repeated more than the threshold stops the tool loop."""

from __future__ import annotations

import pytest

from turngate.core.context import ContextConfigError, context_config_digest, load_context_config
from turngate.core.loop_guard import LOOP_GUARD, repeated_tool_call
from turngate.core.messages import ChatMessage, ToolCallChunk


def _loop(times: int, arguments: str = '{"city": "Vilnius"}', name: str = "weather") -> list[ChatMessage]:
    messages = [ChatMessage(role="user", content="weather?")]
    for i in range(times):
        call = ToolCallChunk(id=f"call_{i}", name=name, arguments=arguments)
        messages.append(ChatMessage(role="assistant", content="", tool_calls=(call,)))
        messages.append(ChatMessage(role="tool", content="no data", tool_call_id=f"call_{i}"))
    return messages


@pytest.mark.parametrize(("times", "stopped"), [(2, False), (3, False), (4, True)])
def test_the_threshold_is_the_most_a_call_may_repeat(times: int, stopped: bool) -> None:
    found = repeated_tool_call(_loop(times), 3)
    assert (found is not None) is stopped
    if found is not None:
        assert (found["code"], found["tool"], found["repeats"], found["max_repeats"]) == (
            LOOP_GUARD,
            "weather",
            4,
            3,
        )
        assert found["arguments_digest"].startswith("sha256:")


def test_the_same_arguments_in_another_order_or_spacing_are_the_same_call() -> None:
    messages = _loop(2, '{"city": "Vilnius", "days": 1}') + _loop(2, '{"days":1,"city":"Vilnius"}')[1:]
    assert repeated_tool_call(messages, 3) is not None


def test_other_arguments_or_tools_are_new_calls() -> None:
    messages = _loop(3) + _loop(3, '{"city": "Kaunas"}')[1:] + _loop(3, name="forecast")[1:]
    assert repeated_tool_call(messages, 3) is None


def test_arguments_that_are_not_json_are_compared_as_text() -> None:
    assert repeated_tool_call(_loop(4, "{not json"), 3) is not None
    assert repeated_tool_call(_loop(2, "{not json") + _loop(2, "{not json ")[1:], 3) is None


def test_zero_turns_the_guard_off() -> None:
    assert repeated_tool_call(_loop(50), 0) is None


def test_the_threshold_is_configurable_and_enters_the_digest_only_when_changed() -> None:
    default = load_context_config(env={})
    assert default.context.loop_guard_max_repeats == 3
    assert "loop_guard_max_repeats" not in default.effective()["context"]
    five = load_context_config(env={"TURNGATE_CONTEXT_LOOP_GUARD_MAX_REPEATS": "5"})
    assert five.effective()["context"]["loop_guard_max_repeats"] == 5
    assert context_config_digest(five) != context_config_digest(default)
    assert context_config_digest(
        load_context_config(env={"TURNGATE_CONTEXT_LOOP_GUARD_MAX_REPEATS": "3"})
    ) == (context_config_digest(default))


@pytest.mark.parametrize("raw", ["-1", "1001", "three"])
def test_a_bad_threshold_is_refused(raw: str) -> None:
    with pytest.raises(ContextConfigError):
        load_context_config(env={"TURNGATE_CONTEXT_LOOP_GUARD_MAX_REPEATS": raw})
