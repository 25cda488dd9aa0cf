"""A budget that sends turns over it to review (``on_exceed: "review"``), in the pure spend
arithmetic: admission at, under and over the limit, review only where a DENY would be, one review
a turn, the recorded bytes of a denying budget unchanged, and a tampered plan caught."""

from __future__ import annotations

from typing import Any

import pytest

from tests.spend.test_core_spend import budget, check
from turngate.core.review import (
    REASON_BUDGET_REVIEW,
    ReviewBlock,
    ReviewSpec,
    budget_block,
    budget_request,
    final_outcome,
    replayed_outcome,
)
from turngate.core.spend import (
    BudgetRecord,
    SpendPlan,
    SpendSnapshot,
    budget_denial,
    plan_spend,
    recheck_plan,
)

SPEC = ReviewSpec(role="finance", deadline_s=3600, four_eyes=True)
MESSAGE = "x" * 30  # the first rule's estimate: 10 input tokens; output 10: 20 tokens a turn


def reviewing(budget_id: int = 1, **kw: Any) -> BudgetRecord:
    return budget(budget_id, on_exceed="review", review=SPEC, **kw)


def plan(*checks: Any, review_allowed: bool = True, candidates: Any = None) -> SpendPlan:
    return plan_spend(
        alias=None,
        candidates=candidates or [("echo:echo-1", True, None)],
        models=None,
        snapshot=SpendSnapshot(position=5, tenant_id="acme", key_id=None, checks=tuple(checks)),
        tenant_id="acme",
        key_id=None,
        message=MESSAGE,
        max_tokens=10,
        review_allowed=review_allowed,
    )


@pytest.mark.parametrize(
    ("settled", "review_by"),
    [(80, None), (79, None), (81, 1)],  # limit 100, estimate 20: at, under, one token over
)
def test_a_review_budget_asks_for_review_only_past_its_limit(settled: int, review_by: int | None) -> None:
    planned = plan(check(reviewing(max_tokens=100), settled=settled))
    assert planned.review_by == review_by
    assert planned.admitted() == ["echo:echo-1"] and budget_denial(planned) is None
    assert planned.reserve.tokens == 20  # an approved turn reserves as any other
    assert (
        recheck_plan(planned, {1: (planned.budgets[0].settled, planned.budgets[0].reserved)}, MESSAGE, 10)
        == []
    )


def test_a_denying_budget_still_denies_and_records_the_bytes_it_did() -> None:
    planned = plan(check(budget(max_tokens=100), settled=81))
    assert planned.review_by is None and planned.admitted() == []
    assert budget_denial(planned) is not None
    dumped = planned.model_dump(mode="json")
    assert "review_by" not in dumped
    assert set(dumped["budgets"][0]["budget"]) == {
        "budget_id", "tenant_id", "key_id", "period", "window_start", "window_end",
        "max_tokens", "max_cost_micros", "set_at",
    }  # fmt: skip
    assert BudgetRecord.model_validate(dumped["budgets"][0]["budget"]) == budget(max_tokens=100)


def test_a_denying_budget_over_its_limit_wins_over_a_reviewing_one() -> None:
    tenant = reviewing(1, max_tokens=100)
    key = budget(2, key_id="k1", max_tokens=50)
    planned = plan(check(tenant, settled=90), check(key, settled=40))
    assert planned.review_by is None and budget_denial(planned) is not None
    # the key budget has room: only the reviewing tenant budget is passed, so it asks
    planned = plan(check(tenant, settled=90), check(key, settled=0))
    assert planned.review_by == 1


def test_review_only_replaces_a_deny_a_candidate_that_fits_runs_without_review() -> None:
    rows = [("echo:big", True, None), ("echo:small", True, None)]
    over = check(reviewing(max_tokens=100), settled=81)
    planned = plan(over, candidates=rows)
    assert planned.review_by == 1 and planned.admitted() == ["echo:big", "echo:small"]
    unavailable = [("echo:gone", False, "provider.unknown"), ("echo:small", True, None)]
    planned = plan(over, candidates=unavailable)
    assert planned.review_by == 1 and planned.admitted() == ["echo:small"]


def test_a_cost_budget_without_a_price_is_refused_not_reviewed() -> None:
    planned = plan(check(reviewing(max_cost_micros=5)))
    assert planned.review_by is None and planned.candidates[0].reason == "budget.price_unknown"


def test_one_review_a_turn_the_policy_already_asked_for() -> None:
    planned = plan(check(reviewing(max_tokens=100), settled=81), review_allowed=False)
    assert planned.review_by is None and budget_denial(planned) is not None


def test_a_tampered_review_by_or_admission_does_not_recompute() -> None:
    planned = plan(check(reviewing(max_tokens=100), settled=81))
    counted = {1: (planned.budgets[0].settled, planned.budgets[0].reserved)}
    dropped = planned.model_copy(update={"review_by": None})
    assert any("review by budget" in p for p in recheck_plan(dropped, counted, MESSAGE, 10))
    # the same plan is not a review when the policy had asked one (verify passes review_allowed)
    assert recheck_plan(planned, counted, MESSAGE, 10, review_allowed=False)
    made_up = plan(check(reviewing(max_tokens=100), settled=10)).model_copy(update={"review_by": 1})
    counted = {1: (made_up.budgets[0].settled, made_up.budgets[0].reserved)}
    assert any("review by budget" in p for p in recheck_plan(made_up, counted, MESSAGE, 10))


def test_the_budget_review_block_and_its_verdicts() -> None:
    block = budget_block(("policy.allow_all",), SPEC, 7)
    assert block == {
        "request": {
            "reason_codes": ["policy.allow_all", REASON_BUDGET_REVIEW],
            "role": "finance",
            "deadline_s": 3600,
            "four_eyes": True,
            "budget_id": 7,
        }
    }
    request = ReviewBlock.from_payload(block).request
    assert budget_request({"review": block}) == request
    assert (
        budget_request({"review": budget_block(("a",), SPEC, 7) | {"request": {"reason_codes": ["a"]}}})
        is None
    )
    assert final_outcome(request, "approve") == (
        "ALLOW",
        ["policy.allow_all", REASON_BUDGET_REVIEW, "review.approved"],
    )
    assert final_outcome(request, "timed_out") == ("DENY", ["review.timed_out"])
    # replay: the policy's ALLOW with the recorded codes is settled by the recorded verdict
    stored = {
        "review": block | {"verdict": "deny", "approver": {"key_id": "k", "tenant_id": "acme", "roles": []}}
    }
    again = {"decision": "ALLOW", "reason_codes": ["policy.allow_all"]}
    assert replayed_outcome(again, stored) == ("DENY", ["review.denied"])
    other = {"decision": "ALLOW", "reason_codes": ["policy.other"]}
    assert replayed_outcome(other, stored) == ("ALLOW", ["policy.other"])


def test_a_record_reads_back_from_its_row() -> None:
    row = reviewing(3, max_tokens=5).model_dump(mode="json")
    spec = row.pop("review")
    columns = {f"review_{k}": v for k, v in spec.items()}
    assert BudgetRecord.from_row(row | columns) == reviewing(3, max_tokens=5)
    plain = budget(4, max_tokens=5).model_dump(mode="json")
    nulls = {"on_exceed": "deny", "review_role": None, "review_deadline_s": None, "review_four_eyes": None}
    assert BudgetRecord.from_row(plain | nulls) == budget(4, max_tokens=5)
    with pytest.raises(ValueError):
        BudgetRecord(budget_id=1, tenant_id="a", period="day", set_at="x", on_exceed="review")
