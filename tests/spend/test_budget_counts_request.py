"""A budget check counts everything the provider is sent, and settles on what it reports.

A real stack (Temporal dev server, worker, API) with the fake OpenAI server of tests/fakes; the
official ``openai`` SDK talks to ``/v1/chat/completions``. The estimate's rule is computed here
independently of the product (docs/BUDGETS.md): each message's canonical JSON in UTF-8 bytes / 3,
rounded up, plus the output tokens asked for.
"""

from __future__ import annotations

import json
import math
from typing import Any

import openai
import pytest

from tests.spend.test_spend_e2e import SpendStack, fakes, spend_stack, verify_clean  # noqa: F401
from turngate.core.events import Event
from turngate.ledger.budgets import BudgetStore
from turngate.security.keys import KeyStore

#: The reported overrun: 30,000 words in a system message, one output token.
LONG_SYSTEM = "a " * 30_000
MULTIBYTE = "Ąžuolas 字 🙂 " * 40  # 2-, 3- and 4-byte characters


def message_tokens(role: str, content: str) -> int:
    text = json.dumps(
        {"content": content, "role": role}, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return math.ceil(len(text.encode("utf-8")) / 3)


def sdk(s: SpendStack, secret: str | None = None) -> openai.AsyncOpenAI:
    key = secret or s.headers["Authorization"].removeprefix("Bearer ")
    return openai.AsyncOpenAI(base_url=f"{s.stack.http.base_url}/v1", api_key=key, max_retries=0)


def events(s: SpendStack, kind: str) -> list[Event]:
    with s.ledger() as ledger:
        _, found = ledger.snapshot(offset=0, limit=1000)
    return [event for event in found if event.kind == kind]


def new_key(s: SpendStack, max_tokens: int) -> str:
    """A fresh key of tenant acme with its own token budget (its secret)."""
    with s.ledger() as ledger:
        created = KeyStore(ledger.engine).create("acme", "intent.write,snapshot.read")
        BudgetStore(ledger).set("acme", key_id=created.key.key_id, period="day", max_tokens=max_tokens)
    return created.secret


async def chat(client: openai.AsyncOpenAI, system: str, user: str, **kw: Any) -> Any:
    return await client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
        **kw,
    )


async def test_a_long_system_message_cannot_overrun_a_100_token_budget(
    tmp_path,
    temporal_server,
    fakes,  # noqa: F811
) -> None:
    async with spend_stack(tmp_path, temporal_server, fakes) as s:
        with s.ledger() as ledger:
            budget = BudgetStore(ledger).set("acme", key_id=s.key_id, period="day", max_tokens=100)
        with pytest.raises(openai.PermissionDeniedError) as refused:
            await chat(sdk(s), LONG_SYSTEM, "Say hi", max_tokens=1)
        with s.ledger() as ledger:
            verify_clean(ledger)
    assert refused.value.status_code == 403
    assert refused.value.code == "budget.exceeded"
    assert s.openai.requests == []  # nothing was sent
    [decision] = events(s, "DECISION")
    payload = decision.payload
    assert payload["decision"] == "DENY" and payload["reason_codes"] == ["budget.exceeded"]
    assert payload["error"]["budget_id"] == budget.budget_id
    plan = payload["spend"]
    expected = message_tokens("system", LONG_SYSTEM) + message_tokens("user", "Say hi")
    assert plan["estimate"] == {"rule": "request.utf8/3", "intent_tokens": expected, "context_tokens": 0}
    assert plan["estimate_input_tokens"] == expected and plan["estimate_output_tokens"] == 1
    assert events(s, "EXECUTION") == []


@pytest.mark.parametrize("text", ["plain ascii words " * 30, MULTIBYTE], ids=["ascii", "multibyte"])
async def test_a_budget_admits_a_request_at_and_under_its_limit_and_refuses_one_over(
    tmp_path,
    temporal_server,
    fakes,  # noqa: F811
    text: str,
) -> None:
    user = "Go"
    needed = message_tokens("system", text) + message_tokens("user", user) + 5  # max_tokens=5
    if text == MULTIBYTE:  # counted by bytes: characters / 3 would undercount it
        assert math.ceil(len(text.encode("utf-8")) / 3) > math.ceil(len(text) / 3) * 3 // 2
    async with spend_stack(tmp_path, temporal_server, fakes) as s:
        over, at, under = new_key(s, needed - 1), new_key(s, needed), new_key(s, needed + 1)
        with pytest.raises(openai.PermissionDeniedError) as refused:
            await chat(sdk(s, over), text, user, max_tokens=5)
        assert s.openai.requests == []
        answered_at = await chat(sdk(s, at), text, user, max_tokens=5)
        answered_under = await chat(sdk(s, under), text, user, max_tokens=5)
        with s.ledger() as ledger:
            verify_clean(ledger)
    assert refused.value.code == "budget.exceeded"
    assert answered_at.choices[0].message.content and answered_under.choices[0].message.content
    assert len(s.openai.requests) == 2
    decisions = events(s, "DECISION")
    assert [d.payload["decision"] for d in decisions] == ["DENY", "ALLOW", "ALLOW"]
    assert {d.payload["spend"]["reserve"]["tokens"] for d in decisions[1:]} == {needed}


async def test_history_and_client_tools_count_and_verify_recomputes_the_intent_part(
    tmp_path,
    temporal_server,
    fakes,  # noqa: F811
) -> None:
    """The referenced history is the gateway's part of the estimate; the client's tool
    definitions are the INTENT's. A forged INTENT part does not verify."""
    from turngate.audit.verification.spend_recompute import verify_spend

    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    async with spend_stack(tmp_path, temporal_server, fakes) as s:
        with s.ledger() as ledger:
            BudgetStore(ledger).set("acme", period="day", max_tokens=100_000)
        client = sdk(s)
        thread = {"X-Turngate-Thread": "th-history"}
        first = [{"role": "user", "content": "What is two plus two?"}]
        answer = await client.chat.completions.create(
            model="gpt-4o-mini", messages=first, extra_headers=thread
        )
        reply = answer.choices[0].message.content
        second = [*first, {"role": "assistant", "content": reply}, {"role": "user", "content": "And 3+3?"}]
        await client.chat.completions.create(
            model="gpt-4o-mini", messages=second, tools=[tool], extra_headers=thread, max_tokens=7
        )
        with s.ledger() as ledger:
            verify_clean(ledger)
            decision = events(s, "DECISION")[-1]
            intent = ledger.by_correlation(decision.correlation_id)[0]
            with ledger.read_connection() as conn:
                forged = json.loads(json.dumps(decision.payload))
                forged["spend"]["estimate"]["intent_tokens"] -= 1
                forged["spend"]["estimate"]["context_tokens"] += 1
                problems = verify_spend(conn, forged, intent, decision.index)
    estimate = decision.payload["spend"]["estimate"]
    definition = {k: tool["function"][k] for k in ("name", "description", "parameters")}
    tools = math.ceil(len(json.dumps(definition, sort_keys=True, separators=(",", ":")).encode()) / 3)
    assert estimate["intent_tokens"] == message_tokens("user", "And 3+3?") + tools
    assert estimate["context_tokens"] == message_tokens("user", first[0]["content"]) + message_tokens(
        "assistant", reply or ""
    )
    assert problems == ["budget_mismatch: the recorded estimate of what the INTENT sends does not recompute"]


async def test_the_next_turn_sees_the_usage_the_provider_reported_not_the_estimate(
    tmp_path,
    temporal_server,
    fakes,  # noqa: F811
) -> None:
    async with spend_stack(tmp_path, temporal_server, fakes) as s:
        with s.ledger() as ledger:
            budget = BudgetStore(ledger).set("acme", period="day", max_tokens=960)
        s.openai.usage = (900, 50)  # far more than the 17 tokens estimated
        first = await s.turn("c-big", "Say four", budget={"max_tokens": 5})
        s.openai.usage = None
        second = await s.turn("c-next", "Say four", budget={"max_tokens": 5})
        with s.ledger() as ledger:
            verify_clean(ledger)
    reserved = first["decision"]["payload"]["spend"]["reserve"]["tokens"]
    assert reserved < 100 and first["execution"]["payload"]["usage"]["input_tokens"] == 900
    denied = second["decision"]["payload"]
    assert denied["decision"] == "DENY" and denied["reason_codes"] == ["budget.exceeded"]
    assert denied["error"]["budget_id"] == budget.budget_id
    assert denied["error"]["spent"] == {"tokens": 950, "cost_micros": 0}
    assert len(s.openai.requests) == 1


async def test_an_answer_without_reported_usage_settles_at_its_estimate(
    tmp_path,
    temporal_server,
    fakes,  # noqa: F811
) -> None:
    """A compatible server that reports no usage does not make a turn free: it settles at the
    estimate its DECISION reserved."""
    async with spend_stack(tmp_path, temporal_server, fakes) as s:
        with s.ledger() as ledger:
            BudgetStore(ledger).set("acme", period="day", max_tokens=60)
        s.openai.send_usage = False
        first = await s.turn("c-silent", "Say four", budget={"max_tokens": 20})
        second = await s.turn("c-after", "Say four", budget={"max_tokens": 20})
        with s.ledger() as ledger:
            verify_clean(ledger)
    reserve = first["decision"]["payload"]["spend"]["reserve"]
    spend = first["execution"]["payload"]["spend"]
    assert spend["settled_from"] == "estimate" and spend["tokens"] == reserve["tokens"] > 30
    denied = second["decision"]["payload"]
    assert denied["decision"] == "DENY" and denied["error"]["spent"]["tokens"] == reserve["tokens"]
    assert len(s.openai.requests) == 1
