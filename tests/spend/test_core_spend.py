"""The pure spend arithmetic: models file validation, prices, windows, admission at, under and
over a limit, counting spend from ledger rows, and recomputing a plan."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from turngate.core.model_aliases import (
    SpendError,
    parse_models,
    split_candidate,
)
from turngate.core.spend import (
    BudgetCheck,
    BudgetRecord,
    Spend,
    SpendRow,
    SpendSnapshot,
    budget_denial,
    budget_window,
    budgets_for,
    cost_micros,
    count_spend,
    effective_budgets,
    plan_spend,
    recheck_plan,
)
from turngate.spend.models_file import load_models_file

NOW = datetime(2026, 11, 25, 15, 30, tzinfo=UTC)
MODELS = {
    "models": {"smart": {"candidates": ["openai:gpt-x", "anthropic:claude-y"]}},
    "prices": {
        "openai:gpt-x": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
        "anthropic:claude-y": {"input_per_mtok": "0.000001", "output_per_mtok": 15},
    },
}


def budget(budget_id: int = 1, **kw: Any) -> BudgetRecord:
    values: dict[str, Any] = {"tenant_id": "acme", "period": "day", "set_at": "2026-11-25T00:00:00Z"}
    return BudgetRecord(budget_id=budget_id, **(values | kw))


def check(record: BudgetRecord, settled: int = 0, reserved: int = 0, cost: int = 0) -> BudgetCheck:
    start, end = budget_window(record, NOW)
    return BudgetCheck(
        budget=record,
        window_start=start,
        window_end=end,
        settled=Spend(tokens=settled, cost_micros=cost),
        reserved=Spend(tokens=reserved),
    )


def test_the_models_file_of_the_documented_shape_loads_from_json_and_yaml(tmp_path: Path) -> None:
    as_json = tmp_path / "models.json"
    as_json.write_text(json.dumps(MODELS))
    as_yaml = tmp_path / "models.yaml"
    as_yaml.write_text(
        "models:\n  smart:\n    candidates: [openai:gpt-x, anthropic:claude-y]\n"
        "prices:\n  openai:gpt-x: {input_per_mtok: 1.0, output_per_mtok: 2.0}\n"
        "  anthropic:claude-y: {input_per_mtok: '0.000001', output_per_mtok: 15}\n"
    )
    loaded = load_models_file(as_json)
    assert loaded == load_models_file(as_yaml)
    assert loaded is not None and loaded.aliases == {"smart": ("openai:gpt-x", "anthropic:claude-y")}
    assert loaded.prices["openai:gpt-x"].input_micros_per_mtok == 1_000_000
    assert loaded.prices["anthropic:claude-y"].input_micros_per_mtok == 1  # six decimals are exact
    assert load_models_file(None) is None and load_models_file("") is None


@pytest.mark.parametrize(
    ("data", "code"),
    [
        ([], "models.invalid"),
        ({"aliases": {}}, "models.invalid"),
        ({"models": {"a": {"candidates": []}}}, "models.invalid_alias"),
        ({"models": {"a": {"candidates": ["openai:x", "openai:x"]}}}, "models.invalid_alias"),
        ({"models": {"a": {"candidates": ["gpt-x"]}}}, "models.invalid_candidate"),
        ({"models": {"a": {"candidates": [":x"]}}}, "models.invalid_candidate"),
        ({"prices": {"openai:x": {"input_per_mtok": 1}}}, "models.invalid_price"),
        ({"prices": {"openai:x": {"input_per_mtok": -1, "output_per_mtok": 1}}}, "models.invalid_price"),
        (
            {"prices": {"openai:x": {"input_per_mtok": 0.0000001, "output_per_mtok": 1}}},
            "models.invalid_price",
        ),
        ({"prices": {"openai:x": {"input_per_mtok": True, "output_per_mtok": 1}}}, "models.invalid_price"),
        ({"prices": {"openai:x": {"input_per_mtok": "nan", "output_per_mtok": 1}}}, "models.invalid_price"),
        ({"output_reserve_tokens": 0}, "models.invalid"),
    ],
)
def test_a_bad_models_file_is_refused_with_its_code(data: Any, code: str) -> None:
    with pytest.raises(SpendError) as caught:
        parse_models(data)
    assert caught.value.code == code


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "models.json"
    bad.write_text("{not json")
    with pytest.raises(SpendError, match=r"models\.malformed") as caught:
        load_models_file(bad)
    assert str(bad) in str(caught.value)
    with pytest.raises(SpendError, match=r"models\.unreadable"):
        load_models_file(tmp_path / "absent.json")


def test_a_model_id_may_contain_colons() -> None:
    assert split_candidate("ollama:llama3.2:1b") == ("ollama", "llama3.2:1b")


def test_cost_is_rounded_up_to_a_whole_micro_unit() -> None:
    price = parse_models(MODELS).prices["openai:gpt-x"]
    assert cost_micros(price, 0, 0) == 0
    assert cost_micros(price, 1, 0) == 1  # 1 token at 1.0 per million = 1 micro-unit
    assert cost_micros(parse_models(MODELS).prices["anthropic:claude-y"], 1, 0) == 1  # 0.000001 rounds up
    assert cost_micros(price, 1_000_000, 500_000) == 2_000_000
    assert cost_micros(None, 10, 10) == 0


def test_windows_are_the_utc_day_the_utc_month_or_the_fixed_window() -> None:
    assert budget_window(budget(), NOW) == ("2026-11-25T00:00:00.000000Z", "2026-11-26T00:00:00.000000Z")
    december = datetime(2026, 12, 31, 23, 59, tzinfo=UTC)
    assert budget_window(budget(period="month"), december) == (
        "2026-12-01T00:00:00.000000Z",
        "2027-01-01T00:00:00.000000Z",
    )
    fixed = budget(period="window", window_start="2026-11-01T00:00:00Z", window_end="2026-11-08T00:00:00Z")
    assert budget_window(fixed, NOW) == ("2026-11-01T00:00:00.000000Z", "2026-11-08T00:00:00.000000Z")


def test_the_latest_record_of_a_scope_is_in_effect_and_a_cleared_one_removes_it() -> None:
    records = [
        budget(1, max_tokens=10),
        budget(2, max_tokens=20),
        budget(3, key_id="k1", max_tokens=5),
        budget(4, key_id="k1"),  # cleared
        budget(5, tenant_id="globex", max_tokens=1),
    ]
    assert [r.budget_id for r in effective_budgets(records)] == [2, 5]
    records.append(budget(6, key_id="k2", max_cost_micros=0))
    assert [r.budget_id for r in budgets_for(records, "acme", "k2")] == [2, 6]
    assert [r.budget_id for r in budgets_for(records, "acme", "k1")] == [2]
    assert budgets_for(records, None, None) == []


def plan(checks: tuple[BudgetCheck, ...], message: str = "abcdef", max_tokens: int | None = 4) -> Any:
    models = parse_models(MODELS)
    return plan_spend(
        alias="smart",
        candidates=[("openai:gpt-x", True, None), ("anthropic:claude-y", True, None)],
        models=models,
        snapshot=SpendSnapshot(position=10, tenant_id="acme", key_id=None, checks=checks),
        tenant_id="acme",
        key_id=None,
        message=message,
        max_tokens=max_tokens,
    )


@pytest.mark.parametrize(("settled", "admitted"), [(93, True), (94, True), (95, False)])
def test_a_token_limit_admits_at_and_under_it_and_refuses_over_it(settled: int, admitted: bool) -> None:
    # estimate: 6 characters / 3 = 2 input tokens + 4 output tokens = 6; limit 100
    result = plan((check(budget(max_tokens=100), settled=settled - 1, reserved=1),))
    assert [c.admitted for c in result.candidates] == [admitted, admitted]
    assert result.candidates[0].estimate.tokens == 6
    denial = budget_denial(result)
    if admitted:
        assert denial is None and result.reserve.tokens == 6
    else:
        assert denial is not None and denial["code"] == "budget.exceeded"
        assert denial["spent"] == {"tokens": settled, "cost_micros": 0} and denial["position"] == 10


def test_a_cost_limit_refuses_only_the_candidate_that_would_pass_it() -> None:
    # gpt-x: 2 x 1.0 + 4 x 2.0 = 10 micro-units; claude-y: 2 x 0.000001 + 4 x 15 -> 61
    result = plan((check(budget(max_cost_micros=50), cost=40),))
    first, second = result.candidates
    assert (first.estimate.cost_micros, second.estimate.cost_micros) == (10, 61)
    assert first.admitted and not second.admitted and second.refused_by == 1
    assert result.admitted() == ["openai:gpt-x"] and result.reserve.cost_micros == 10


def test_a_cost_budget_refuses_a_candidate_without_a_price() -> None:
    result = plan_spend(
        alias=None,
        candidates=[("ollama:unpriced", True, None)],
        models=None,
        snapshot=SpendSnapshot(
            position=3, tenant_id="acme", key_id=None, checks=(check(budget(max_cost_micros=9)),)
        ),
        tenant_id="acme",
        key_id=None,
        message="hi",
        max_tokens=None,
    )
    assert result.candidates[0].reason == "budget.price_unknown"
    assert budget_denial(result) is not None


def test_an_unavailable_candidate_is_not_admitted_and_no_budget_is_blamed() -> None:
    result = plan_spend(
        alias="smart",
        candidates=[("openai:gpt-x", False, "provider.missing_credentials")],
        models=parse_models(MODELS),
        snapshot=None,
        tenant_id=None,
        key_id=None,
        message="hi",
        max_tokens=None,
    )
    assert result.position is None and result.admitted() == [] and budget_denial(result) is None
    assert result.estimate_output_tokens == 1024  # the default output reserve


def row(index: int, kind: str, cid: str, payload: dict[str, Any], **kw: Any) -> SpendRow:
    values: dict[str, Any] = {"tenant_id": "acme", "key_id": "k1", "created_at": "2026-11-25T10:00:00Z"}
    return SpendRow(index=index, kind=kind, correlation_id=cid, payload=payload, **(values | kw))


def test_spend_counts_executions_and_reserves_of_turns_still_in_flight() -> None:
    planned = {"decision": "ALLOW", "spend": {"reserve": {"tokens": 50, "cost_micros": 7}}}
    rows = [
        row(1, "DECISION", "a", planned),
        row(
            2,
            "EXECUTION",
            "a",
            {"usage": {"input_tokens": 3, "output_tokens": 4}, "spend": {"cost_micros": 2}},
        ),
        row(4, "DECISION", "b", planned),  # in flight: its EXECUTION is at or after the position
        row(5, "DECISION", "c", {"decision": "DENY", "spend": {"reserve": {"tokens": 1, "cost_micros": 1}}}),
        row(6, "EXECUTION", "d", {"usage": {"input_tokens": 100, "output_tokens": 0}}, tenant_id="globex"),
        row(7, "EXECUTION", "e", {"usage": {"input_tokens": 9}}, created_at="2026-11-24T23:59:59Z"),
        row(8, "EXECUTION", "f", {"usage": {"input_tokens": 1, "output_tokens": 1}}, key_id="k2"),
        row(9, "EXECUTION", "b", {"usage": {"input_tokens": 1000}}),
    ]
    tenant = budget(max_tokens=1)
    window = budget_window(tenant, NOW)
    assert count_spend(rows, tenant, window, 9) == (
        Spend(tokens=9, cost_micros=2),
        Spend(tokens=50, cost_micros=7),
    )
    assert count_spend(rows, tenant, window, 10) == (Spend(tokens=1009, cost_micros=2), Spend())
    key = budget(key_id="k1", max_tokens=1)
    assert count_spend(rows, key, window, 9) == (
        Spend(tokens=7, cost_micros=2),
        Spend(tokens=50, cost_micros=7),
    )


def test_recheck_finds_a_changed_count_estimate_admission_or_reserve() -> None:
    checks = (check(budget(max_tokens=100), settled=10),)
    recorded = plan(checks)
    counted = {1: (Spend(tokens=10), Spend())}
    assert recheck_plan(recorded, counted, "abcdef", 4) == []
    assert recheck_plan(recorded, {1: (Spend(tokens=11), Spend())}, "abcdef", 4)[0].startswith(
        "budget_mismatch"
    )
    assert recheck_plan(recorded, counted, "abcdefg", 4) == [
        "budget_mismatch: the recorded input estimate is not the INTENT's"
    ]
    forged = recorded.model_copy(update={"reserve": Spend(tokens=1)})
    assert recheck_plan(forged, counted, "abcdef", 4) == [
        "budget_mismatch: the recorded reserve does not recompute"
    ]
    flipped = recorded.model_copy(
        update={
            "candidates": (
                recorded.candidates[0].model_copy(update={"admitted": False}),
                recorded.candidates[1],
            )
        }
    )
    assert "admission does not recompute" in recheck_plan(flipped, counted, "abcdef", 4)[0]
