"""Inputs that answered 500 on a real stack, now 4xx with a documented code and nothing recorded:
tool-call arguments (JSON inside a JSON string, which the body's depth check never sees) nested
deep or holding a lone surrogate, and what-if moments that cannot be compared or converted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.security.conftest import bearer, make_key
from tests.stack import make_settings, running_stack
from turngate.core.json_depth import MAX_JSON_DEPTH
from turngate.devserver import DevServer
from turngate.ledger import LedgerStore
from turngate.settings import Settings


def _nested(levels: int) -> str:
    """A JSON object ``levels`` deep, as text (json.dumps itself would recurse per level)."""
    return '{"a":' * levels + "1" + "}" * levels


def tool_loop(arguments: str) -> dict[str, Any]:
    """A tool loop continued: the assistant's call (with ``arguments``) and its result."""
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": arguments}}
    return {
        "model": "echo-1",
        "messages": [
            {"role": "user", "content": "look it up"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "found it"},
        ],
        "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}],
    }


@pytest.fixture
def settings(tmp_path: Path, temporal_server: DevServer) -> Settings:
    # unmatched history is recorded as client context, so the arguments are read and recorded
    return make_settings(
        tmp_path, temporal_server.address, auth_mode="keys", openai_unmatched_history="record"
    )


@pytest.mark.parametrize(
    ("arguments", "status", "code"),
    [
        (_nested(MAX_JSON_DEPTH + 1), 400, "admission.too_deep"),
        (_nested(900), 400, "admission.too_deep"),
        (_nested(50_000), 400, "admission.too_deep"),
        ('{"a": "\\ud800"}', 400, "openai.invalid_tool_call"),  # an escaped lone surrogate
        ('{"a": "\\udfff x"}', 400, "openai.invalid_tool_call"),
        ('{"\\ud800": 1}', 400, "openai.invalid_tool_call"),  # in a key
        ("[1]", 400, "openai.invalid_tool_call"),  # not an object (as before)
    ],
)
async def test_tool_call_arguments_are_bounded(
    settings: Settings, arguments: str, status: int, code: str
) -> None:
    key = make_key(settings, "acme", "intent.write,snapshot.read")
    async with running_stack(settings) as stack:
        answer = await stack.http.post("/v1/chat/completions", json=tool_loop(arguments), headers=bearer(key))
    assert answer.status_code == status, answer.text[:400]
    error = answer.json()["error"]
    assert error["code"] == code
    assert error["param"] == "messages.1.tool_calls.0.function.arguments" or arguments == "[1]"
    with LedgerStore(settings.effective_ledger_url) as ledger:
        assert ledger.snapshot(limit=10)[0] == 0  # nothing recorded


async def test_tool_call_arguments_at_the_depth_limit_run(settings: Settings) -> None:
    # MAX_JSON_DEPTH levels of arguments are admitted and recorded; a paired surrogate is text.
    key = make_key(settings, "acme", "intent.write,snapshot.read")
    async with running_stack(settings) as stack:
        for arguments in (_nested(MAX_JSON_DEPTH), '{"a": "\\ud83d\\ude00"}'):
            answer = await stack.http.post(
                "/v1/chat/completions", json=tool_loop(arguments), headers=bearer(key)
            )
            assert answer.status_code == 200, answer.text[:400]


@pytest.mark.parametrize(
    ("since", "until"),
    [
        ("2030-01-01T00:00:00", "2030-01-02T00:00:00+00:00"),  # one naive, one aware
        ("2030-01-01T00:00:00+02:00", "2030-01-02T00:00:00"),
        ("2030-01-02T00:00:00", "2030-01-01T00:00:00+14:00"),  # backwards across the two kinds
    ],
)
async def test_whatif_compares_naive_and_aware_moments(settings: Settings, since: str, until: str) -> None:
    # A moment without a zone is UTC (as the CLI reads it): the two compare.
    operator = make_key(settings, "*", "admin")
    body = {"module": "turngate.policies.allow_all", "since": since, "until": until}
    async with running_stack(settings, worker=False) as stack:
        answer = await stack.http.post("/policy/whatif", json=body, headers=bearer(operator))
    backwards = since.startswith("2030-01-02")
    if backwards:
        assert (answer.status_code, answer.json()["reason_code"]) == (422, "request.invalid_parameter")
    else:
        assert answer.status_code == 200, answer.text
        query = answer.json()["query"]
        assert query["since"].endswith("Z") or query["since"].endswith("+00:00")


@pytest.mark.parametrize(
    "moment",
    ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+00:01"],
)
async def test_whatif_refuses_a_moment_utc_cannot_hold(settings: Settings, moment: str) -> None:
    operator = make_key(settings, "*", "admin")
    async with running_stack(settings, worker=False) as stack:
        for field in ("since", "until"):
            body = {"module": "turngate.policies.allow_all", field: moment}
            answer = await stack.http.post("/policy/whatif", json=body, headers=bearer(operator))
            assert answer.status_code == 422, answer.text
            assert answer.json()["reason_code"] == "request.invalid_parameter"
            assert field in answer.json()["detail"]
        # the edge that UTC still holds
        edge = {"module": "turngate.policies.allow_all", "since": "0001-01-01T00:00:00+00:00"}
        at_edge = await stack.http.post("/policy/whatif", json=edge, headers=bearer(operator))
        assert at_edge.status_code == 200, at_edge.text
