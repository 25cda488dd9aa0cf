"""Governed spend on a real stack: a Temporal dev server, the worker and the API in process, and
fake OpenAI / Anthropic servers speaking their real wire formats on 127.0.0.1.

The models file names the alias ``smart`` = openai:gpt-x then anthropic:claude-y (both priced)
and ``cheap`` = a free OpenAI model then the priced Anthropic one. What is asserted is what the
ledger records (DECISION plan, EXECUTION spend) and that ``verify`` recomputes it.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import FakeAnthropicServer, FakeOpenAIServer, fake_anthropic, fake_openai
from tests.stack import Stack, envelope, make_settings, running_stack
from turngate.audit.replay import replay_turn
from turngate.audit.verification.run import verify_all
from turngate.core.context import load_context_config
from turngate.ledger import LedgerStore
from turngate.ledger.budgets import BudgetStore
from turngate.security.keys import KeyStore
from turngate.settings import Settings

MODELS = {
    "models": {
        "smart": {"candidates": ["openai:gpt-x", "anthropic:claude-y"]},
        "cheap": {"candidates": ["openai:free-x", "anthropic:claude-y"]},
    },
    "prices": {
        "openai:gpt-x": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
        "openai:free-x": {"input_per_mtok": 0, "output_per_mtok": 0},
        "anthropic:claude-y": {"input_per_mtok": 3.0, "output_per_mtok": 15.0},
    },
}
REPLY = "four"


@dataclass
class SpendStack:
    stack: Stack
    settings: Settings
    openai: FakeOpenAIServer
    anthropic: FakeAnthropicServer
    headers: dict[str, str]
    key_id: str

    async def turn(self, cid: str, message: str = "What is two plus two?", **payload: Any) -> dict[str, Any]:
        body = envelope(message, correlation_id=cid, thread_id=f"t-{cid}", **payload)
        answer = await self.stack.http.post(
            "/ingress/intent", params={"wait": "execution"}, json=body, headers=self.headers
        )
        assert answer.status_code == 202, answer.text
        return answer.json()

    def ledger(self) -> LedgerStore:
        return LedgerStore(self.settings.effective_ledger_url)


@pytest.fixture
def fakes() -> Iterator[tuple[FakeOpenAIServer, FakeAnthropicServer]]:
    with fake_openai(REPLY) as openai, fake_anthropic(REPLY) as anthropic:
        yield openai, anthropic


@asynccontextmanager
async def spend_stack(
    tmp_path: Path, temporal_server: Any, fakes: Any, **overrides: Any
) -> AsyncIterator[SpendStack]:
    openai, anthropic = fakes
    models = tmp_path / "models.json"
    models.write_text(json.dumps(MODELS))
    settings = make_settings(
        tmp_path / "data",
        temporal_server.address,
        auth_mode="keys",
        openai_api_key="sk-test-spend-openai-0123456789",
        openai_base_url=openai.base_url,
        anthropic_api_key="sk-ant-test-spend-0123456789",
        anthropic_base_url=anthropic.base_url,
        default_provider="openai",
        models_file=models,
        **overrides,
    )
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with LedgerStore(settings.effective_ledger_url) as ledger:
        created = KeyStore(ledger.engine).create("acme", "intent.write,snapshot.read")
    async with running_stack(settings) as stack:
        yield SpendStack(
            stack,
            settings,
            openai,
            anthropic,
            {"Authorization": f"Bearer {created.secret}"},
            created.key.key_id,
        )


def verify_clean(ledger: LedgerStore) -> None:
    report = verify_all(ledger, artifacts=None, context_config=load_context_config(None, {}))
    assert report.failures == [], report.failures
    assert report.checked_decisions > 0


def cost(usage: dict[str, int], input_per_mtok: float, output_per_mtok: float) -> int:
    """The expected cost in micro-units (rounded up), computed independently."""
    # tokens x price per million tokens = micro-units
    return math.ceil(usage["input_tokens"] * input_per_mtok + usage["output_tokens"] * output_per_mtok)


async def test_a_503_falls_back_and_the_execution_names_the_second_candidate(
    tmp_path, temporal_server, fakes
) -> None:
    async with spend_stack(tmp_path, temporal_server, fakes) as s:
        s.openai.fail_next(503)
        answer = await s.turn("c-503", requested_model_id="smart")
    decision, execution = answer["decision"]["payload"], answer["execution"]["payload"]
    plan = decision["spend"]
    assert plan["alias"] == "smart"
    assert [c["candidate"] for c in plan["candidates"]] == ["openai:gpt-x", "anthropic:claude-y"]
    assert all(c["admitted"] for c in plan["candidates"]) and plan["position"] is None
    assert decision["provider"] == "openai" and decision["resolved_model_id"] == "gpt-x"
    spend = execution["spend"]
    assert spend["candidate"] == "anthropic:claude-y"
    assert spend["failed"] == [
        {"candidate": "openai:gpt-x", "code": "provider.overloaded", "status_code": 503}
    ]
    assert execution["provider"] == "anthropic" and execution["model_id"] == "claude-y"
    assert execution["output_text"] == REPLY and "error" not in execution
    assert spend["cost_micros"] == cost(execution["usage"], 3.0, 15.0) > 0
    assert len(s.openai.requests) == 1 and len(s.anthropic.requests) == 1  # one attempt, then the next
    with s.ledger() as ledger:
        verify_clean(ledger)


async def test_a_candidate_past_its_wall_clock_falls_back(tmp_path, temporal_server, fakes) -> None:
    async with spend_stack(tmp_path, temporal_server, fakes, llm_wall_clock_s=1) as s:
        s.openai.delay_s = 3.0
        answer = await s.turn("c-slow", requested_model_id="smart")
    spend = answer["execution"]["payload"]["spend"]
    assert spend["candidate"] == "anthropic:claude-y"
    assert spend["failed"] == [{"candidate": "openai:gpt-x", "code": "llm.timeout", "status_code": None}]


async def test_a_400_does_not_fall_back(tmp_path, temporal_server, fakes) -> None:
    async with spend_stack(tmp_path, temporal_server, fakes) as s:
        s.openai.fail_next(400)
        answer = await s.turn("c-400", requested_model_id="smart")
    execution = answer["execution"]["payload"]
    assert execution["error"]["code"] == "provider.bad_request"
    assert execution["spend"] == {
        "alias": "smart",
        "candidate": "openai:gpt-x",
        "failed": [],
        "tokens": 0,
        "cost_micros": 0,
    }
    assert len(s.openai.requests) == 1 and s.anthropic.requests == []


async def test_over_its_daily_token_budget_a_tenant_gets_a_recorded_deny_that_verify_recomputes(
    tmp_path, temporal_server, fakes
) -> None:
    async with spend_stack(tmp_path, temporal_server, fakes) as s:
        with s.ledger() as ledger:
            # The first turn's estimate (its request, 17, plus max_tokens) fits; with its usage
            # settled, the second one's does not.
            budget = BudgetStore(ledger).set("acme", period="day", max_tokens=30)
        budget_turn = {"budget": {"max_tokens": 10}}
        first = await s.turn("c-1", **budget_turn)
        used = first["execution"]["payload"]["usage"]
        second = await s.turn("c-2", **budget_turn)
        with s.ledger() as ledger:
            verify_clean(ledger)
            head = ledger.head()[0]
            replayed = replay_turn(
                ledger,
                "c-2",
                context_config=load_context_config(None, {}),
                policy_module="turngate.policies.allow_all",
            )
    assert first["decision"]["payload"]["decision"] == "ALLOW"
    plan = first["decision"]["payload"]["spend"]
    assert plan["alias"] is None and plan["budgets"][0]["budget"]["budget_id"] == budget.budget_id
    assert plan["budgets"][0]["settled"] == {"tokens": 0, "cost_micros": 0}
    denied = second["decision"]["payload"]
    assert denied["decision"] == "DENY" and denied["reason_codes"] == ["budget.exceeded"]
    spent = used["input_tokens"] + used["output_tokens"]
    assert denied["error"]["spent"] == {"tokens": spent, "cost_micros": 0}
    assert denied["error"]["budget_id"] == budget.budget_id
    assert first["execution"]["index"] < denied["error"]["position"] <= second["decision"]["index"] < head
    assert "execution" not in second
    # `turngate replay turn` recounts it too, and expects the workflow's DENY after the policy's ALLOW.
    checks = {check.name: check.status for check in replayed.checks}
    assert replayed.ok and checks["budget"] == "pass" and checks["decision"] == "pass", replayed.checks


async def test_verify_reports_a_budget_check_that_does_not_recompute(
    tmp_path, temporal_server, fakes
) -> None:
    """A later budget record with the same id cannot exist (append-only), so tamper with the
    recorded spend instead: the recomputation finds it."""
    from turngate.audit.verification.spend_recompute import verify_spend

    async with spend_stack(tmp_path, temporal_server, fakes) as s:
        with s.ledger() as ledger:
            BudgetStore(ledger).set("acme", period="day", max_tokens=1000)
        await s.turn("c-a", budget={"max_tokens": 10})
        answer = await s.turn("c-b", budget={"max_tokens": 10})
        with s.ledger() as ledger:
            intent = ledger.by_correlation("c-b")[0]
            payload = answer["decision"]["payload"]
            index = answer["decision"]["index"]
            with ledger.read_connection() as conn:
                assert verify_spend(conn, payload, intent, index) == []
                forged = json.loads(json.dumps(payload))
                forged["spend"]["budgets"][0]["settled"]["tokens"] = 0
                problems = verify_spend(conn, forged, intent, index)
    assert problems and problems[0].startswith("budget_mismatch: budget")


async def test_a_paid_fallback_is_refused_for_an_over_budget_key_while_a_free_primary_answers(
    tmp_path, temporal_server, fakes
) -> None:
    async with spend_stack(tmp_path, temporal_server, fakes) as s:
        with s.ledger() as ledger:
            budget = BudgetStore(ledger).set("acme", key_id=s.key_id, period="day", max_cost_micros=0)
        answer = await s.turn("c-free", requested_model_id="cheap")
        s.openai.fail_next(503, times=3)  # the last admitted candidate gets its usual retries
        failed = await s.turn("c-free-503", requested_model_id="cheap")
        with s.ledger() as ledger:
            verify_clean(ledger)
    plan = answer["decision"]["payload"]["spend"]
    free, paid = plan["candidates"]
    assert free["admitted"] and free["estimate"]["cost_micros"] == 0
    assert (
        not paid["admitted"]
        and paid["refused_by"] == budget.budget_id
        and paid["reason"] == "budget.exceeded"
    )
    assert answer["execution"]["payload"]["spend"]["candidate"] == "openai:free-x"
    assert answer["execution"]["payload"]["output_text"] == REPLY
    # The paid candidate was never admitted, so a failing free primary does not reach it.
    assert failed["execution"]["payload"]["error"]["code"] == "provider.overloaded"
    assert s.anthropic.requests == []


CLIENTS = 8
LIMIT_TOKENS = 90


async def test_eight_concurrent_clients_of_one_tenant_overshoot_by_no_more_than_the_bound(
    tmp_path, temporal_server, fakes
) -> None:
    """The documented bound: a scope's spend passes its limit by at most the usage of the other
    turns deciding at the same time (here at most CLIENTS - 1 turns), as long as each turn's
    usage stays within its estimate."""
    async with spend_stack(tmp_path, temporal_server, fakes) as s:
        with s.ledger() as ledger:
            BudgetStore(ledger).set("acme", period="day", max_tokens=LIMIT_TOKENS)
        usages: list[int] = []
        denied: list[str] = []

        async def client(number: int) -> None:
            for turn in range(40):
                answer = await s.turn(f"c-{number}-{turn}", "Say four", budget={"max_tokens": 5})
                decision = answer["decision"]["payload"]
                if decision["decision"] == "DENY":
                    assert decision["reason_codes"] == ["budget.exceeded"]
                    denied.append(answer["correlation_id"])
                    return
                usage = answer["execution"]["payload"]["usage"]
                usages.append(usage["input_tokens"] + usage["output_tokens"])

        await asyncio.gather(*(client(n) for n in range(CLIENTS)))
        with s.ledger() as ledger:
            verify_clean(ledger)
    assert len(denied) == CLIENTS  # every client ran into the budget
    per_turn = max(usages)
    assert sum(usages) <= LIMIT_TOKENS + (CLIENTS - 1) * per_turn
    assert sum(usages) > LIMIT_TOKENS - per_turn - 20  # the budget was used, not refused early


async def test_status_and_metrics_show_spend_and_a_turn_without_alias_or_budget_records_none(
    tmp_path, temporal_server, fakes
) -> None:
    async with spend_stack(tmp_path, temporal_server, fakes) as s:
        plain = await s.turn("c-plain")
        with s.ledger() as ledger:
            budget = BudgetStore(ledger).set(
                "acme", period="month", max_tokens=10_000, max_cost_micros=5_000_000
            )
            BudgetStore(ledger).set("globex", period="day", max_tokens=5)
            admin = KeyStore(ledger.engine).create("*", "admin").secret
        answer = await s.turn("c-smart", requested_model_id="smart")
        mine = (await s.stack.http.get("/status", headers=s.headers)).json()
        everyone = (await s.stack.http.get("/status", headers={"Authorization": f"Bearer {admin}"})).json()
        metrics = (await s.stack.http.get("/metrics", headers={"Authorization": f"Bearer {admin}"})).text
        listed = (await s.stack.http.get("/v1/models", headers=s.headers)).json()
    assert "spend" not in plain["decision"]["payload"] and "spend" not in plain["execution"]["payload"]
    assert {"cheap", "smart"} <= {m["id"] for m in listed["data"]}  # aliases are offered as models
    execution = answer["execution"]["payload"]
    tokens, cost_paid = execution["spend"]["tokens"], execution["spend"]["cost_micros"]
    plain_usage = plain["execution"]["payload"]["usage"]
    plain_tokens = plain_usage["input_tokens"] + plain_usage["output_tokens"]
    [entry] = mine["budgets"]  # a tenant's key sees its own tenant's budgets only
    assert entry["budget"]["budget_id"] == budget.budget_id
    assert entry["settled"] == {"tokens": plain_tokens + tokens, "cost_micros": cost_paid}
    assert entry["reserved"] == {"tokens": 0, "cost_micros": 0}
    assert entry["remaining"] == {
        "tokens": 10_000 - plain_tokens - tokens,
        "cost_micros": 5_000_000 - cost_paid,
    }
    assert sorted(e["budget"]["tenant_id"] for e in everyone["budgets"]) == ["acme", "globex"]
    line = 'turngate_spend_tokens_total{candidate="openai:gpt-x",model="smart",tenant="acme"}'
    assert f"{line} {float(tokens)}" in metrics
    assert 'turngate_spend_cost_micros_total{candidate="openai:gpt-x",model="smart",tenant="acme"}' in metrics
