"""Wire contract v3's tool and budget fields at admission: a budget names at least one limit
(each within its range), ``tool_scope`` is ``strict`` or ``advisory`` when sent. The published
DBL gateway refuses the same envelopes (tests/conformance)."""

from __future__ import annotations

from typing import Any

import pytest

from turngate.core.events import AdmissionError, parse_intent


def _envelope(**fields: Any) -> dict[str, Any]:
    payload = {"intent_type": "chat.message", "thread_id": "t", "payload": {"message": "hi"}} | fields
    return {"interface_version": 3, "correlation_id": "c", "payload": payload}


@pytest.mark.parametrize(
    "budget",
    [
        {"max_tokens": 1},
        {"max_tokens": 1_000_000},
        {"max_duration_ms": 1000},
        {"max_duration_ms": 300_000},
        {"max_tokens": 2048, "max_duration_ms": 30_000},
    ],
)
def test_a_budget_within_its_ranges_is_admitted(budget: dict[str, int]) -> None:
    assert parse_intent(_envelope(budget=budget)).payload.budget is not None


@pytest.mark.parametrize(
    ("budget", "code"),
    [
        ({}, "admission.invalid_value"),
        ({"max_tokens": None, "max_duration_ms": None}, "admission.invalid_value"),
        ({"max_tokens": 0}, "admission.invalid_value"),
        ({"max_tokens": 1_000_001}, "admission.invalid_value"),
        ({"max_duration_ms": 999}, "admission.invalid_value"),
        ({"max_duration_ms": 300_001}, "admission.invalid_value"),
        ({"max_tokens": 4096.5}, "admission.invalid_type"),
    ],
)
def test_an_empty_or_out_of_range_budget_is_refused(budget: dict[str, Any], code: str) -> None:
    with pytest.raises(AdmissionError) as refused:
        parse_intent(_envelope(budget=budget))
    assert refused.value.reason_code == code


@pytest.mark.parametrize("scope", ["strict", "advisory", None])
def test_a_known_tool_scope_is_admitted_and_not_recorded(scope: str | None) -> None:
    envelope = parse_intent(_envelope(declared_tools=["web.search"], tool_scope=scope))
    assert "tool_scope" not in envelope.intent_event_payload()


@pytest.mark.parametrize(
    ("scope", "code"),
    [("relaxed", "admission.invalid_value"), ("", "admission.invalid_value"), (42, "admission.invalid_type")],
)
def test_another_tool_scope_is_refused(scope: Any, code: str) -> None:
    with pytest.raises(AdmissionError) as refused:
        parse_intent(_envelope(tool_scope=scope))
    assert (refused.value.reason_code, refused.value.field) == (code, "payload.tool_scope")
