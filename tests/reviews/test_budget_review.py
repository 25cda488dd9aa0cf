"""A budget with ``on_exceed: "review"`` on a real stack (worker + API + Temporal dev server, API
keys): a turn over it waits for a reviewer of the budget's role instead of being denied; approved,
it runs and its spend is counted; denied or past its deadline, it ends as any review does. At and
under the limit a turn runs without review, and a budget without the option still denies. Then
verify, replay and what-if over the ledger these turns left, and a tampered plan caught."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from tests.audit.helpers import Ledger
from tests.security.conftest import bearer, make_key
from tests.stack import Stack, envelope, make_settings, running_stack
from turngate.artifacts import open_artifact_store
from turngate.audit import verify_all
from turngate.audit.replay import replay_turn
from turngate.audit.verification.shadow_recompute import known_policies
from turngate.core.policy import load_policy
from turngate.core.review import REASON_BUDGET_REVIEW, ReviewSpec
from turngate.devserver import DevServer
from turngate.ledger import LedgerStore
from turngate.ledger.budgets import BudgetStore, spend_snapshot
from turngate.ledger.schema import events
from turngate.policy_lifecycle.whatif import run_whatif
from turngate.reviews.commands import review_lines

POLICY_MODULE, POLICY_OBJECT = "tests.reviews.policies", "REVIEW"  # "refund" goes to review
#: Approvers of over-budget turns need the admin role: the support reviewers (review) may not.
FINANCE = ReviewSpec(role="admin", deadline_s=3600, four_eyes=True)
MESSAGE = "What is two plus two?"
ALLOWED = ["policy.no_review_needed"]  # the policy's own ALLOW codes


def key_id(secret: str) -> str:
    return secret.split("_")[1]


class Turns:
    """The stack, its ledger, and the tenant's keys: one writer key per case (key budgets keep
    the cases apart), an admin approver (the budgets' role) and a reviewer without it."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        settings = stack.settings
        self.approver = make_key(settings, "t1", "admin")
        self.reviewer = make_key(settings, "t1", "review")
        self.url = settings.effective_ledger_url

    def writer(self, max_tokens: int, review: ReviewSpec | None = None) -> str:
        secret = make_key(self.stack.settings, "t1", "intent.write")
        with LedgerStore(self.url) as store:
            BudgetStore(store).set("t1", key_id=key_id(secret), max_tokens=max_tokens, review=review)
        return secret

    async def send(
        self, secret: str, cid: str, message: str = MESSAGE, wait: str = "execution"
    ) -> httpx.Response:
        body = envelope(message, correlation_id=cid, thread_id=f"t-{cid}")
        return await self.stack.http.post(
            "/ingress/intent", params={"wait": wait}, json=body, headers=bearer(secret)
        )

    def recorded(self, cid: str) -> dict[str, dict[str, Any]]:
        with LedgerStore(self.url) as store, store.engine.connect() as conn:
            rows = conn.execute(select(events.c.kind, events.c.payload).where(events.c.correlation_id == cid))
            return {row.kind: json.loads(row.payload) for row in rows}

    async def until(self, cid: str, kinds: set[str]) -> dict[str, dict[str, Any]]:
        for _ in range(1200):  # a bound on a hang (60 s), not a speed target
            found = self.recorded(cid)
            if kinds <= set(found):
                return found
            await asyncio.sleep(0.05)
        raise AssertionError(f"{cid}: {kinds} never recorded")

    async def pending(self, cid: str) -> dict[str, Any]:
        for _ in range(1200):  # a bound on a hang (60 s), not a speed target
            answer = await self.stack.http.get("/reviews", headers=bearer(self.approver))
            found = [r for r in answer.json()["reviews"] if r["correlation_id"] == cid]
            if found:
                return found[0]
            await asyncio.sleep(0.05)
        raise AssertionError(f"{cid} never listed for review")

    async def verdict(self, secret: str, cid: str, verdict: str) -> httpx.Response:
        return await self.stack.http.post(
            f"/reviews/{cid}/{verdict}", json={"comment": "ok"}, headers=bearer(secret)
        )


@pytest.fixture(scope="module")
async def turns(tmp_path_factory: pytest.TempPathFactory, temporal_server: DevServer) -> AsyncIterator[Turns]:
    settings = make_settings(
        tmp_path_factory.mktemp("budget-review"),
        temporal_server.address,
        auth_mode="keys",
        policy_module=POLICY_MODULE,
        policy_object=POLICY_OBJECT,
        wait_timeout_s=1.0,
    )
    async with running_stack(settings) as running:
        yield Turns(running)


@pytest.fixture(scope="module")
async def estimate(turns: Turns) -> int:
    return await _estimate(turns)


async def _estimate(turns: Turns) -> int:
    """What a turn of MESSAGE is estimated at (read from a plan under a budget it fits)."""
    if "DECISION" in turns.recorded("c-calibrate"):
        plan = turns.recorded("c-calibrate")["DECISION"]["spend"]
        return int(plan["candidates"][0]["estimate"]["tokens"])
    sent = await turns.send(turns.writer(10**9), "c-calibrate")
    assert sent.status_code == 202, sent.text
    plan = turns.recorded("c-calibrate")["DECISION"]["spend"]
    return int(plan["candidates"][0]["estimate"]["tokens"])


async def test_at_and_under_the_limit_a_turn_runs_and_a_budget_without_the_option_denies(
    turns: Turns, estimate: int
) -> None:
    cases = {
        "c-at": turns.writer(estimate, FINANCE),
        "c-under": turns.writer(estimate + 1, FINANCE),
        "c-deny": turns.writer(estimate - 1),
    }
    answers = await asyncio.gather(*(turns.send(secret, cid) for cid, secret in cases.items()))
    assert all(answer.status_code == 202 for answer in answers), [a.text for a in answers]
    for cid in ("c-at", "c-under"):
        recorded = await turns.until(cid, {"DECISION", "EXECUTION"})
        decision = recorded["DECISION"]
        assert (decision["decision"], decision["reason_codes"]) == ("ALLOW", ALLOWED)
        assert "review" not in decision and "review_by" not in decision["spend"]
        assert decision["spend"]["budgets"][0]["budget"]["on_exceed"] == "review"
    denied = turns.recorded("c-deny")
    assert "EXECUTION" not in denied
    payload = denied["DECISION"]
    assert (payload["decision"], payload["reason_codes"]) == ("DENY", ["budget.exceeded"])
    assert "review" not in payload and "on_exceed" not in payload["spend"]["budgets"][0]["budget"]


async def test_one_token_over_a_turn_waits_for_the_budget_reviewer_and_runs_once_approved(
    turns: Turns, estimate: int
) -> None:
    writer = turns.writer(estimate - 1, FINANCE)
    sent = await turns.send(writer, "c-over", wait="decision")
    assert sent.status_code == 202 and sent.json()["review_pending"] is True, sent.text
    listed = await turns.pending("c-over")
    budget_id = listed["request"]["budget_id"]
    assert listed["request"] == {
        "reason_codes": [*ALLOWED, REASON_BUDGET_REVIEW],
        "role": "admin",
        "deadline_s": 3600,
        "four_eyes": True,
        "budget_id": budget_id,
    }
    assert "DECISION" not in turns.recorded("c-over")  # nothing reserved while it waits
    shown = await turns.stack.http.get("/reviews/c-over", headers=bearer(turns.approver))
    assert f"role 'admin', four-eyes (over budget #{budget_id})" in "\n".join(review_lines(shown.json()))
    refused = await turns.verdict(
        turns.reviewer, "c-over", "approve"
    )  # the policy's role is not the budget's
    assert (refused.status_code, refused.json()["reason_code"]) == (403, "review.forbidden")
    approved = await turns.verdict(turns.approver, "c-over", "approve")
    assert approved.status_code == 200, approved.text
    recorded = await turns.until("c-over", {"DECISION", "EXECUTION"})
    decision, execution = recorded["DECISION"], recorded["EXECUTION"]
    assert (decision["decision"], decision["reason_codes"]) == (
        "ALLOW",
        [*ALLOWED, REASON_BUDGET_REVIEW, "review.approved"],
    )
    assert decision["spend"]["review_by"] == budget_id and decision["spend"]["reserve"]["tokens"] == estimate
    assert decision["review"]["verdict"] == "approve"
    assert decision["review"]["approver"]["key_id"] == key_id(turns.approver)
    assert "error" not in execution and execution["spend"]["tokens"] > 0
    # its spend is settled like any turn's: the key's budget now counts it
    with LedgerStore(turns.url) as store:
        snapshot = spend_snapshot(store, "t1", key_id(writer), datetime.now(UTC))
    assert snapshot is not None
    assert snapshot.checks[0].settled.tokens == execution["spend"]["tokens"]
    assert snapshot.checks[0].reserved.tokens == 0


async def test_a_denied_review_and_a_passed_deadline_end_the_turn(turns: Turns) -> None:
    writer = turns.writer(1, FINANCE)
    late = turns.writer(1, ReviewSpec(role="admin", deadline_s=1))
    await turns.send(writer, "c-no", wait="decision")
    await turns.send(late, "c-late", wait="decision")
    await turns.pending("c-no")
    denied = await turns.verdict(turns.approver, "c-no", "deny")
    assert denied.status_code == 200, denied.text
    for cid, code in (("c-no", "review.denied"), ("c-late", "review.timed_out")):
        recorded = await turns.until(cid, {"DECISION"})
        decision = recorded["DECISION"]
        assert (decision["decision"], decision["reason_codes"]) == ("DENY", [code])
        assert decision["spend"]["review_by"] == decision["review"]["request"]["budget_id"]
        await asyncio.sleep(0.2)
        assert "EXECUTION" not in turns.recorded(cid)


async def test_a_turn_the_policy_sent_to_review_is_denied_by_the_budget(turns: Turns) -> None:
    """One review a turn: the policy's review stands, and a budget it passes denies it."""
    writer = turns.writer(1, FINANCE)
    sent = await turns.send(writer, "c-both", message="please refund order 3", wait="decision")
    decision = sent.json()["decision"]["payload"]
    assert (decision["decision"], decision["reason_codes"]) == ("DENY", ["budget.exceeded"])
    assert "verdict" not in decision["review"] and "budget_id" not in decision["review"]["request"]
    assert "review_by" not in decision["spend"]


@pytest.fixture
def policy_env(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("TURNGATE_POLICY_MODULE", POLICY_MODULE)
    monkeypatch.setenv("TURNGATE_POLICY_OBJECT", POLICY_OBJECT)
    known_policies.cache_clear()
    yield
    known_policies.cache_clear()


async def test_verify_replay_whatif_and_a_tampered_plan(turns: Turns, policy_env: Any) -> None:
    # The turns the tests above recorded. A parallel run can rebuild this module's stack between
    # tests (another module's tests ran on the worker in between): then record them here again.
    estimate = await _estimate(turns)
    if "DECISION" not in turns.recorded("c-at"):
        await test_at_and_under_the_limit_a_turn_runs_and_a_budget_without_the_option_denies(turns, estimate)
    if "EXECUTION" not in turns.recorded("c-over"):
        await test_one_token_over_a_turn_waits_for_the_budget_reviewer_and_runs_once_approved(turns, estimate)
    if "DECISION" not in turns.recorded("c-no"):
        await test_a_denied_review_and_a_passed_deadline_end_the_turn(turns)
    if "DECISION" not in turns.recorded("c-both"):
        await test_a_turn_the_policy_sent_to_review_is_denied_by_the_budget(turns)
    settings = turns.stack.settings
    for cid in ("c-over", "c-no", "c-late", "c-both", "c-at", "c-deny"):
        await turns.until(cid, {"DECISION"})
    artifacts = open_artifact_store(settings.effective_artifacts)
    config = settings.context_config()
    with LedgerStore(turns.url) as store:
        report = verify_all(store, artifacts=artifacts, context_config=config)
        assert report.ok, report.failures
        for cid in ("c-over", "c-no", "c-late"):
            replayed = replay_turn(
                store, cid, context_config=config, policy_module=POLICY_MODULE, policy_object=POLICY_OBJECT
            )
            assert replayed.ok, replayed.checks
        # what-if: the same policy changes nothing, and names the turns a budget reviewed
        same = run_whatif(store, load_policy(POLICY_MODULE, POLICY_OBJECT), context_config=config, workers=1)
        assert same.by_change == {} and same.budget_reviewed >= 3
        allow = run_whatif(
            store, load_policy("turngate.policies.allow_all"), context_config=config, workers=1
        )
        flipped = {flip.correlation_id: flip for flip in allow.flipped}
        assert flipped["c-over"].recorded.reason_codes == ALLOWED
        assert flipped["c-over"].budget_review is not None and flipped["c-at"].budget_review is None
    # a forger drops the budget's review from the approved turn (and reseals the chain)
    ledger = Ledger(data_dir=Path(settings.data_dir), store=None, built=None)  # type: ignore[arg-type]
    row = ledger.row("c-over", "DECISION")

    def forge(payload: dict[str, Any]) -> None:
        del payload["spend"]["review_by"]

    ledger.edit_payload(row["index"], forge, reseal=True)
    with LedgerStore(turns.url) as store:
        report = verify_all(store, artifacts=artifacts, context_config=config)
    details = [f.detail for f in report.failures if f.index == row["index"]]
    assert any("budget_mismatch" in d for d in details), details
