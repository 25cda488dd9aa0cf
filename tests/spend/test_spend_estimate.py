"""The budget estimate of everything sent (core.spend_estimate) and the rule a plan records:
pure functions, no stack. The rule is restated here independently (json.dumps, sorted keys, no
spaces, UTF-8 bytes / 3)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from tests.spend.test_core_spend import MODELS, budget, check
from turngate.core.assembly import assemble
from turngate.core.model_aliases import parse_models
from turngate.core.refs import Resolution
from turngate.core.spend import (
    SpendEstimate,
    SpendPlan,
    SpendSnapshot,
    plan_spend,
    recheck_plan,
    recorded_spend,
    settle,
)
from turngate.core.spend_estimate import bytes_tokens, intent_tokens, sent_tokens


def tokens_of(value: Any) -> int:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return math.ceil(len(text.encode("utf-8")) / 3)


def intent(message: str, **inputs: Any) -> dict[str, Any]:
    return {"payload": {"message": message}, "inputs": inputs}


@pytest.mark.parametrize(("size", "tokens"), [(0, 0), (1, 1), (2999, 1000), (3000, 1000), (3001, 1001)])
def test_bytes_round_up_to_whole_tokens(size: int, tokens: int) -> None:
    assert bytes_tokens(size) == tokens


@pytest.mark.parametrize("text", ["abc", "ą" * 7, "字" * 5, "🙂" * 3, 'a\nb"c'])
def test_a_message_counts_its_json_bytes_not_its_characters(text: str) -> None:
    assert intent_tokens(intent(text)) == tokens_of({"content": text, "role": "user"})


def test_the_intent_part_counts_client_messages_tools_and_an_offloaded_message_whole() -> None:
    context = {
        "messages": [
            {"role": "system", "content": "Be brief.", "source": "system"},
            {
                "role": "assistant",
                "content": "",
                "source": "unmatched_history",
                "tool_calls": [{"id": "c1", "name": "f", "arguments": {"q": "Vilnius"}}],
            },
        ],
        "tools": [{"name": "f", "description": "find", "parameters": {"type": "object"}}],
    }
    preview = "x" * 10
    payload = {
        "payload": {
            "message": preview,
            "message_truncated": True,
            "message_artifact": {"artifact_id": "a", "path": "p", "sha256": "s", "size_bytes": 9000},
        },
        "inputs": {"client_context": context},
    }
    assistant = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "name": "f", "arguments": json.dumps({"q": "Vilnius"})}],
    }
    user = math.ceil(
        (len(json.dumps({"content": preview, "role": "user"}, separators=(",", ":"))) + 9000 - 10) / 3
    )
    assert intent_tokens(payload) == (
        tokens_of({"role": "system", "content": "Be brief."})
        + tokens_of(assistant)
        + user
        + tokens_of({"name": "f", "description": "find", "parameters": {"type": "object"}})
    )


def test_tool_results_count_in_place_of_the_message() -> None:
    results = [{"tool_call_id": "c1", "content": "sunny"}]
    payload = intent("sunny", client_context={"tool_results": results})
    assert intent_tokens(payload) == tokens_of({"role": "tool", "content": "sunny", "tool_call_id": "c1"})


def test_the_assembled_request_counts_the_system_prompt_and_tools_beyond_the_intent() -> None:
    empty = Resolution()
    assembly = assemble("You are a pirate.", empty, "hello")
    tool = {"name": "t", "description": "d", "parameters": {}}
    total = sent_tokens(assembly, [tool], None)
    assert total == intent_tokens(intent("hello")) + tokens_of(
        {"role": "system", "content": "You are a pirate."}
    ) + tokens_of(tool)
    pointer = {"size_bytes": 3000}  # the current message was offloaded: it is sent whole
    assert sent_tokens(assembly, [], pointer) > sent_tokens(assembly, [], None) + 900


def planned(estimate: SpendEstimate | None, message: str = "abcdef") -> SpendPlan:
    return plan_spend(
        alias="smart",
        candidates=[("openai:gpt-x", True, None)],
        models=parse_models(MODELS),
        snapshot=SpendSnapshot(
            position=10, tenant_id="acme", key_id=None, checks=(check(budget(max_tokens=10_000)),)
        ),
        tenant_id="acme",
        key_id=None,
        message=message,
        max_tokens=4,
        estimate=estimate,
    )


def test_a_plan_of_the_first_rule_keeps_its_recorded_shape_and_rechecks_by_the_message() -> None:
    old = planned(None)
    assert "estimate" not in old.model_dump(mode="json")
    assert old.estimate_input_tokens == 2
    counted = {1: (old.budgets[0].settled, old.budgets[0].reserved)}
    assert recheck_plan(old, counted, "abcdef", 4, intent("abcdef", client_context={})) == []
    # an old plan validated from its recorded JSON is the same plan
    assert SpendPlan.model_validate(old.model_dump(mode="json")) == old


def test_a_plan_of_the_request_rule_rechecks_its_intent_part_and_its_sum() -> None:
    payload = intent(
        "abcdef", client_context={"messages": [{"role": "system", "content": "S" * 300, "source": "system"}]}
    )
    own = intent_tokens(payload)
    new = planned(SpendEstimate(intent_tokens=own, context_tokens=40))
    assert new.estimate_input_tokens == own + 40 and own > 100
    dumped = new.model_dump(mode="json")
    assert dumped["estimate"] == {"rule": "request.utf8/3", "intent_tokens": own, "context_tokens": 40}
    counted = {1: (new.budgets[0].settled, new.budgets[0].reserved)}
    assert recheck_plan(new, counted, "abcdef", 4, payload) == []
    # the message alone no longer explains the estimate, and that is not a mismatch ...
    assert new.estimate_input_tokens != 2
    # ... but an INTENT part that is not the INTENT's is
    smaller = intent("abcdef")
    assert recheck_plan(new, counted, "abcdef", 4, smaller) == [
        "budget_mismatch: the recorded estimate of what the INTENT sends does not recompute"
    ]
    lying = new.model_copy(update={"estimate_input_tokens": own})
    assert "budget_mismatch: the recorded input estimate is not the sum of its parts" in recheck_plan(
        lying, counted, "abcdef", 4, payload
    )


def test_an_answer_without_usage_settles_at_its_estimate_under_the_request_rule_only() -> None:
    new = planned(SpendEstimate(intent_tokens=10, context_tokens=5))
    estimate = new.candidates[0].estimate
    assert settle(new, "openai:gpt-x", {}, answered=True) == {
        "tokens": estimate.tokens,
        "cost_micros": estimate.cost_micros,
        "settled_from": "estimate",
    }
    assert settle(new, "openai:gpt-x", {"input_tokens": 2, "output_tokens": 1}, answered=True) == {
        "tokens": 3,
        "cost_micros": 4,
    }
    assert settle(new, "openai:gpt-x", {}, answered=False) == {"tokens": 0, "cost_micros": 0}
    assert settle(planned(None), "openai:gpt-x", {}, answered=True) == {"tokens": 0, "cost_micros": 0}
    execution = {"usage": {}, "spend": settle(new, "openai:gpt-x", {}, answered=True)}
    assert recorded_spend(execution) == (estimate.tokens, estimate.cost_micros)
