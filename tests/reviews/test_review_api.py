"""Reviews through the API on a real stack (worker + API + Temporal dev server) with two tenants'
keys: listing, approving and denying, tenant isolation, four-eyes, a second verdict; then verify
and what-if over the ledger the reviews left."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.audit.helpers import Ledger
from tests.security.conftest import bearer, make_key
from tests.stack import Stack, envelope, make_settings, running_stack
from turngate.artifacts import open_artifact_store
from turngate.audit import verify_all
from turngate.audit.replay import replay_turn
from turngate.audit.verification.shadow_recompute import known_policies
from turngate.client import AsyncTurngate
from turngate.core.policy import load_policy
from turngate.devserver import DevServer
from turngate.ledger import LedgerStore
from turngate.policy_lifecycle.whatif import run_whatif

POLICY_MODULE, POLICY_OBJECT = "tests.reviews.policies", "FOUR_EYES"


class Keys:
    def __init__(self, settings: Any) -> None:
        self.writer = make_key(settings, "t1", "intent.write,snapshot.read")
        self.self_reviewer = make_key(settings, "t1", "intent.write,review")  # writes and reviews
        self.reviewer = make_key(settings, "t1", "review")
        self.other_tenant = make_key(settings, "t2", "review")
        self.operator = make_key(settings, "*", "admin")


def key_id(secret: str) -> str:
    return secret.split("_")[1]


@pytest.fixture(scope="module")
async def stack(
    tmp_path_factory: pytest.TempPathFactory, temporal_server: DevServer
) -> AsyncIterator[tuple[Stack, Keys]]:
    settings = make_settings(
        tmp_path_factory.mktemp("reviews"),
        temporal_server.address,
        auth_mode="keys",
        policy_module=POLICY_MODULE,
        policy_object=POLICY_OBJECT,
        wait_timeout_s=1.0,
    )
    keys = Keys(settings)
    async with running_stack(settings) as running:
        yield running, keys


async def _send(stack: Stack, secret: str, message: str, cid: str) -> httpx.Response:
    body = envelope(message, correlation_id=cid)
    return await stack.http.post(
        "/ingress/intent", params={"wait": "decision"}, json=body, headers=bearer(secret)
    )


async def _listed(stack: Stack, secret: str, cid: str) -> dict[str, Any]:
    for _ in range(1200):  # a bound on a hang (60 s), not a speed target
        answer = await stack.http.get("/reviews", headers=bearer(secret))
        assert answer.status_code == 200, answer.text
        found = [r for r in answer.json()["reviews"] if r["correlation_id"] == cid]
        if found:
            return found[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"{cid} never listed for review")


async def _events(stack: Stack, secret: str, cid: str, kinds: set[str]) -> dict[str, dict[str, Any]]:
    for _ in range(1200):  # a bound on a hang (60 s), not a speed target
        page = await stack.http.get("/snapshot", params={"limit": 2000}, headers=bearer(secret))
        found = {e["kind"]: e for e in page.json()["events"] if e["correlation_id"] == cid}
        if kinds <= set(found):
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"{cid}: {kinds} never recorded")


async def test_an_approver_of_the_tenant_approves_after_the_refusals(stack) -> None:
    running, keys = stack
    http = running.http
    sent = await _send(running, keys.self_reviewer, "please refund order 7", "c-approve")
    assert sent.status_code == 202 and sent.json()["wait_timed_out"] is True
    listed = await _listed(running, keys.reviewer, "c-approve")
    assert listed["message"] == "please refund order 7"
    assert listed["request"]["reason_codes"] == ["policy.review_keyword"] and listed["request"]["four_eyes"]
    assert "inclusion_log" in listed["manifest"] and listed["age_s"] >= 0
    metrics = (await http.get("/metrics", headers=bearer(keys.operator))).text
    gauges = {
        line.split()[0]: float(line.split()[1])
        for line in metrics.splitlines()
        if line.startswith("turngate_review")
    }
    assert gauges["turngate_reviews_pending"] >= 1 and gauges["turngate_review_oldest_age_seconds"] >= 0
    # another tenant neither sees nor decides it
    other = await http.get("/reviews", headers=bearer(keys.other_tenant))
    assert all(r["correlation_id"] != "c-approve" for r in other.json()["reviews"])
    refused = await http.post("/reviews/c-approve/approve", json={}, headers=bearer(keys.other_tenant))
    assert (refused.status_code, refused.json()["reason_code"]) == (404, "review.not_found")
    assert (await http.get("/reviews/c-approve", headers=bearer(keys.other_tenant))).status_code == 404
    # a key without the review role never reaches the route; the intent's own key is four-eyes
    refused = await http.post("/reviews/c-approve/approve", json={}, headers=bearer(keys.writer))
    assert (refused.status_code, refused.json()["reason_code"]) == (403, "auth.forbidden")
    refused = await http.post("/reviews/c-approve/approve", json={}, headers=bearer(keys.self_reviewer))
    assert (refused.status_code, refused.json()["reason_code"]) == (403, "review.four_eyes")
    too_long = await http.post(
        "/reviews/c-approve/approve", json={"comment": "x" * 4001}, headers=bearer(keys.reviewer)
    )
    assert (too_long.status_code, too_long.json()["reason_code"]) == (422, "request.invalid_parameter")
    at_limit = await http.post(
        "/reviews/c-approve/deny", json={"comment": "x" * 4000, "extra": 1}, headers=bearer(keys.reviewer)
    )
    assert at_limit.status_code == 422  # an unknown field: nothing taken
    approved = await http.post(
        "/reviews/c-approve/approve", json={"comment": "checked the order"}, headers=bearer(keys.reviewer)
    )
    assert approved.status_code == 200, approved.text
    again = await http.post("/reviews/c-approve/deny", json={}, headers=bearer(keys.reviewer))
    assert (again.status_code, again.json()["reason_code"]) == (409, "review.already_decided")
    events = await _events(running, keys.writer, "c-approve", {"DECISION", "EXECUTION"})
    decision = events["DECISION"]["payload"]
    assert (decision["decision"], decision["reason_codes"]) == (
        "ALLOW",
        ["policy.review_keyword", "review.approved"],
    )
    review = decision["review"]
    assert review["verdict"] == "approve" and review["approver"]["key_id"] == key_id(keys.reviewer)
    assert review["comment"]["sha256"] and "error" not in events["EXECUTION"]["payload"]
    shown = await http.get("/reviews/c-approve", headers=bearer(keys.reviewer))
    assert shown.json()["state"] == "decided" and shown.json()["review"] == review


async def test_a_denied_turn_is_recorded_deny_and_never_executed(stack) -> None:
    running, keys = stack
    await _send(running, keys.writer, "refund everything", "c-deny")
    await _listed(running, keys.reviewer, "c-deny")
    denied = await running.http.post(
        "/reviews/c-deny/deny", json={"comment": "no"}, headers=bearer(keys.reviewer)
    )
    assert denied.status_code == 200, denied.text
    events = await _events(running, keys.writer, "c-deny", {"DECISION"})
    await asyncio.sleep(0.3)
    events = await _events(running, keys.writer, "c-deny", {"DECISION"})
    assert "EXECUTION" not in events
    payload = events["DECISION"]["payload"]
    assert (payload["decision"], payload["reason_codes"]) == ("DENY", ["review.denied"])


async def test_a_turn_the_policy_allows_has_no_review(stack) -> None:
    running, keys = stack
    sent = await _send(running, keys.writer, "hello there", "c-plain")
    assert sent.json()["decision"]["payload"]["decision"] == "ALLOW"
    assert "review" not in sent.json()["decision"]["payload"]
    shown = await running.http.get("/reviews/c-plain", headers=bearer(keys.reviewer))
    assert shown.status_code == 404
    refused = await running.http.post("/reviews/c-plain/approve", json={}, headers=bearer(keys.reviewer))
    assert (refused.status_code, refused.json()["reason_code"]) == (409, "review.not_pending")


@pytest.fixture
def policy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """verify re-runs the configured policy (from the environment, as `turngate verify` does)."""
    monkeypatch.setenv("TURNGATE_POLICY_MODULE", POLICY_MODULE)
    monkeypatch.setenv("TURNGATE_POLICY_OBJECT", POLICY_OBJECT)
    known_policies.cache_clear()
    yield
    known_policies.cache_clear()


async def _recorded_kinds(running: Stack, secret: str, cid: str) -> set[str]:
    page = await running.http.get("/snapshot", params={"limit": 2000}, headers=bearer(secret))
    return {e["kind"] for e in page.json()["events"] if e["correlation_id"] == cid}


async def test_verify_whatif_and_a_tampered_review_block(stack, policy_env) -> None:
    running, keys = stack
    settings = running.settings
    # The turns the tests above recorded. A parallel run can rebuild this module's stack between
    # tests (another module's tests ran on the worker in between): then record them here again.
    if "EXECUTION" not in await _recorded_kinds(running, keys.writer, "c-approve"):
        await test_an_approver_of_the_tenant_approves_after_the_refusals(stack)
    if "DECISION" not in await _recorded_kinds(running, keys.writer, "c-deny"):
        await test_a_denied_turn_is_recorded_deny_and_never_executed(stack)
    if "DECISION" not in await _recorded_kinds(running, keys.writer, "c-plain"):
        await test_a_turn_the_policy_allows_has_no_review(stack)
    await _events(running, keys.writer, "c-approve", {"EXECUTION"})
    artifacts = open_artifact_store(settings.effective_artifacts)
    config = settings.context_config()
    with LedgerStore(settings.effective_ledger_url) as store:
        report = verify_all(store, artifacts=artifacts, context_config=config)
        assert report.ok, report.failures
        # what-if: the active policy asks the same reviews; allow_all would decide them itself
        same = run_whatif(store, load_policy(POLICY_MODULE, POLICY_OBJECT), context_config=config, workers=1)
        assert same.by_change == {}
        allow = run_whatif(
            store, load_policy("turngate.policies.allow_all"), context_config=config, workers=1
        )
        flipped = {flip.correlation_id: flip for flip in allow.flipped}
        assert flipped["c-approve"].change.value == "REVIEW ->"
        assert flipped["c-approve"].recorded.decision == "REVIEW"
        reviewed = {f.correlation_id for f in allow.flipped if f.change.value == "REVIEW ->"}
        assert {"c-approve", "c-deny"} <= reviewed and flipped["c-plain"].change.value == "reasons"
        # `turngate replay turn`: the policy asks this review again; the verdict settles it
        for cid in ("c-approve", "c-deny"):
            replayed = replay_turn(
                store, cid, context_config=config, policy_module=POLICY_MODULE, policy_object=POLICY_OBJECT
            )
            assert replayed.ok, replayed.checks
    # a forger rewrites the approver (and the whole chain after it): verify still fails
    ledger = Ledger(data_dir=Path(settings.data_dir), store=None, built=None)  # type: ignore[arg-type]
    row = ledger.row("c-approve", "DECISION")

    def forge(payload: dict[str, Any]) -> None:
        payload["review"]["approver"]["key_id"] = key_id(keys.self_reviewer)

    ledger.edit_payload(row["index"], forge, reseal=True)
    with LedgerStore(settings.effective_ledger_url) as store:
        report = verify_all(store, artifacts=artifacts, context_config=config)
    assert not report.ok
    details = [f.detail for f in report.failures if f.index == row["index"]]
    assert any("review_mismatch: the approver may not decide it" in d for d in details), details
    assert json.loads(ledger.row("c-approve", "DECISION")["payload"])["review"]["verdict"] == "approve"


async def test_clients_are_told_the_turn_waits_for_review(stack) -> None:
    running, keys = stack
    url = str(running.http.base_url)
    async with AsyncTurngate(url, keys.writer) as writer, AsyncTurngate(url, keys.reviewer) as reviewer:
        receipt = await writer.chat("refund it please", correlation_id="c-client", wait="decision")
        assert receipt.wait_timed_out and receipt.review_pending and receipt.decision is None
        assert receipt.review is not None and receipt.review["correlation_id"] == "c-client"
        assert receipt.review["reason_codes"] == ["policy.review_keyword"]
        seen: list[str] = []

        async def follow() -> None:
            async for event in writer.stream_turn("c-client"):
                seen.append(event.event)
                if event.event == "review_pending":
                    assert event.data["turn_id"] == "c-client"
                    assert [r["correlation_id"] for r in await reviewer.reviews()].count("c-client") == 1
                    await reviewer.approve("c-client", comment="fine")

        await asyncio.wait_for(follow(), 30)
        assert seen[0] == "review_pending" and seen[-1] == "done" and "token" in seen
        decided = await reviewer.review("c-client")
        assert decided["state"] == "decided" and decided["review"]["verdict"] == "approve"


async def test_the_openai_endpoint_answers_review_pending_then_the_result_on_retry(stack) -> None:
    running, keys = stack
    http = running.http
    body = {"model": "echo-1", "messages": [{"role": "user", "content": "refund order 9"}]}
    headers = bearer(keys.writer) | {"Idempotency-Key": "idem-review-1"}
    pending = await http.post("/v1/chat/completions", json=body, headers=headers)
    assert pending.status_code == 423, pending.text
    assert pending.json()["error"]["code"] == "review.pending"
    cid = pending.headers["X-Turngate-Correlation-Id"]
    assert cid in pending.json()["error"]["message"]
    again = await http.post("/v1/chat/completions", json=body, headers=headers)  # still waiting
    assert again.status_code == 423 and again.headers["X-Turngate-Correlation-Id"] == cid
    approved = await http.post(f"/reviews/{cid}/approve", json={}, headers=bearer(keys.reviewer))
    assert approved.status_code == 200, approved.text
    answered = await http.post("/v1/chat/completions", json=body, headers=headers)
    assert answered.status_code == 200, answered.text
    assert answered.json()["id"] == cid and answered.json()["choices"][0]["message"]["content"]


async def test_a_deadline_that_passes_is_recorded_and_verifies(
    tmp_path: Path, temporal_server: DevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(
        tmp_path,
        temporal_server.address,
        policy_module=POLICY_MODULE,
        policy_object="SHORT",
        wait_timeout_s=8.0,
    )
    monkeypatch.setenv("TURNGATE_POLICY_MODULE", POLICY_MODULE)
    monkeypatch.setenv("TURNGATE_POLICY_OBJECT", "SHORT")
    known_policies.cache_clear()
    try:
        async with running_stack(settings) as running:
            sent = await running.chat("refund it", correlation_id="c-late", wait="decision")
            decision = sent.json()["decision"]["payload"]
            assert (decision["decision"], decision["reason_codes"]) == ("DENY", ["review.timed_out"])
            assert decision["review"]["verdict"] == "timed_out" and "approver" not in decision["review"]
            late = await running.http.post("/reviews/c-late/approve", json={})
            assert (late.status_code, late.json()["reason_code"]) == (409, "review.already_decided")
        with LedgerStore(settings.effective_ledger_url) as store:
            report = verify_all(
                store,
                artifacts=open_artifact_store(settings.effective_artifacts),
                context_config=settings.context_config(),
            )
        assert report.ok, report.failures
    finally:
        known_policies.cache_clear()
