"""The review outcome's pure parts: the policy's REVIEW, the DECISION it becomes under each
verdict, who may decide, and what verify and what-if make of a recorded review block."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from turngate.core.context import ContextConfig
from turngate.core.decision import decide, verify_decision
from turngate.core.events import EventDraft, EventKind, seal
from turngate.core.policy import PolicyDecision, load_policy
from turngate.core.review import (
    MAX_DEADLINE_S,
    NOT_RERUN,
    Approver,
    IntentCaller,
    ReviewBlock,
    ReviewRequest,
    ReviewSpec,
    final_outcome,
    pending_block,
    pending_request,
    replayed_outcome,
    review_problems,
    verdict_refusal,
)
from turngate.core.whatif import Change, Verdict, change_between, recorded_verdict, redecide

REQUEST = ReviewRequest(reason_codes=("policy.review_keyword",), role="review", deadline_s=60, four_eyes=True)
CALLER = IntentCaller(actor="alice", key_id="k-author", tenant_id="t1")
REVIEWER = Approver(key_id="k-rev", tenant_id="t1", roles=("review",))


def _intent(message: str = "please refund", tenant: str | None = "t1") -> Any:
    draft = EventDraft(
        kind=EventKind.INTENT,
        thread_id="th",
        turn_id="tu",
        correlation_id="c-1",
        actor="alice",
        intent_type="chat.message",
        payload={"payload": {"message": message}, "principal": {"tenant_id": tenant, "key_id": "k-author"}},
        tenant_id=tenant,
    )
    return seal(draft, 0, None)


def _decided(verdict: str, approver: Approver | None = REVIEWER) -> dict[str, Any]:
    decision, codes = final_outcome(REQUEST, verdict)  # type: ignore[arg-type]
    block = ReviewBlock(request=REQUEST, verdict=verdict, approver=approver)  # type: ignore[arg-type]
    return {"decision": decision, "reason_codes": codes, "review": block.as_payload()}


@pytest.mark.parametrize("deadline", [0, MAX_DEADLINE_S + 1])
def test_a_deadline_out_of_bounds_is_refused(deadline: int) -> None:
    with pytest.raises(ValidationError):
        ReviewSpec(deadline_s=deadline)


@pytest.mark.parametrize("deadline", [1, MAX_DEADLINE_S])
def test_a_deadline_at_its_bounds_is_taken(deadline: int) -> None:
    assert ReviewSpec(deadline_s=deadline).deadline_s == deadline


def test_only_a_review_carries_a_spec_and_a_review_gets_the_default_one() -> None:
    with pytest.raises(ValidationError):
        PolicyDecision(decision="ALLOW", reason_codes=("x",), review=ReviewSpec())
    assert PolicyDecision(decision="REVIEW", reason_codes=("x",)).review == ReviewSpec()


def test_each_verdict_gives_its_decision() -> None:
    assert final_outcome(REQUEST, "approve") == ("ALLOW", ["policy.review_keyword", "review.approved"])
    assert final_outcome(REQUEST, "deny") == ("DENY", ["review.denied"])
    assert final_outcome(REQUEST, "timed_out") == ("DENY", ["review.timed_out"])


def test_who_may_decide() -> None:
    assert verdict_refusal(REQUEST, REVIEWER, CALLER) is None
    admin = Approver(key_id="k-admin", tenant_id="t1", roles=("admin",))
    assert verdict_refusal(REQUEST, admin, CALLER) is None
    operator = Approver(key_id="k-op", tenant_id=None, roles=("admin",))  # unscoped: any tenant
    assert verdict_refusal(REQUEST, operator, CALLER) is None
    cases = {
        "review.not_found": Approver(key_id="k-x", tenant_id="t2", roles=("review",)),
        "review.forbidden": Approver(key_id="k-x", tenant_id="t1", roles=("intent.write",)),
        "review.four_eyes": Approver(key_id="k-author", tenant_id="t1", roles=("review",)),
    }
    for code, approver in cases.items():
        refusal = verdict_refusal(REQUEST, approver, CALLER)
        assert refusal is not None and refusal[0] == code
    # the actor names the approver's key: the intent's own caller too
    as_actor = Approver(key_id="alice", tenant_id="t1", roles=("review",))
    anonymous = Approver(key_id=None, tenant_id="t1", roles=("review",))
    for approver in (as_actor, anonymous):
        refusal = verdict_refusal(REQUEST, approver, CALLER)
        assert refusal is not None and refusal[0] == "review.four_eyes"
    without_four_eyes = REQUEST.model_copy(update={"four_eyes": False})
    assert verdict_refusal(without_four_eyes, cases["review.four_eyes"], CALLER) is None


def test_a_recorded_review_verifies_and_every_forgery_is_found() -> None:
    asked = ReviewBlock(request=REQUEST).as_payload()
    for verdict in ("approve", "deny"):
        assert review_problems(_decided(verdict), asked, CALLER) == []
    assert review_problems(_decided("timed_out", None), asked, CALLER) == []
    assert review_problems(_decided("approve"), NOT_RERUN, CALLER) == []
    forged = {
        "no longer asked": (_decided("approve"), None),
        "another request": (_decided("approve"), pending_block(("other",), ReviewSpec())),
        "verdict flipped": ({**_decided("deny"), "review": _decided("approve")["review"]}, asked),
        "self-approved": (
            _decided("approve", Approver(key_id="k-author", tenant_id="t1", roles=("review",))),
            asked,
        ),
        "no role": (_decided("approve", Approver(key_id="k-x", tenant_id="t1", roles=())), asked),
        "approve without approver": (_decided("approve", None), asked),
        "timed out with approver": (_decided("timed_out"), asked),
        "malformed": ({"decision": "ALLOW", "reason_codes": [], "review": {"verdict": "approve"}}, asked),
        "pending on an ALLOW": (
            {"decision": "ALLOW", "reason_codes": ["policy.review_keyword"], "review": asked},
            asked,
        ),
    }
    for name, (stored, again) in forged.items():
        assert review_problems(stored, again, CALLER), name


def test_a_pending_request_is_an_allow_without_verdict() -> None:
    asked = ReviewBlock(request=REQUEST).as_payload()
    assert pending_request({"decision": "ALLOW", "review": asked}) == REQUEST
    assert pending_request({"decision": "DENY", "review": asked}) is None
    assert pending_request(_decided("approve")) is None
    assert pending_request({"decision": "ALLOW"}) is None


def test_the_policy_review_is_a_pending_allow_settled_by_the_verdict_on_replay() -> None:
    policy = load_policy("tests.reviews.policies:FOUR_EYES")
    intent = _intent()
    again = decide(intent, [], ContextConfig(), policy).payload
    assert again["decision"] == "ALLOW" and pending_request(again) is not None
    stored = again | {
        "decision": "ALLOW",
        "reason_codes": ["policy.review_keyword", "review.approved"],
        "review": again["review"] | {"verdict": "approve", "approver": REVIEWER.model_dump(mode="json")},
    }
    assert replayed_outcome(again, stored) == ("ALLOW", ["policy.review_keyword", "review.approved"])
    assert verify_decision(stored, intent, [], ContextConfig(), policy) == []
    # a turn recorded without review, that the policy now sends to review
    plain = again | {"reason_codes": ["policy.no_review_needed"]}
    plain.pop("review")
    assert replayed_outcome(again, plain) == ("REVIEW", ["policy.review_keyword"])
    assert "decision differs from the re-evaluated policy" in verify_decision(
        plain, intent, [], ContextConfig(), policy
    )


def test_whatif_names_turns_that_would_now_need_review() -> None:
    review = Verdict(decision="REVIEW", reason_codes=["a"])
    allow = Verdict(decision="ALLOW", reason_codes=["b"])
    assert change_between(allow, review) == Change.TO_REVIEW
    assert change_between(review, allow) == Change.FROM_REVIEW
    assert recorded_verdict(_decided("deny")) == Verdict(
        decision="REVIEW", reason_codes=["policy.review_keyword"]
    )
    intent = _intent()
    allowed = decide(intent, [], ContextConfig(), load_policy("turngate.policies.allow_all")).payload
    flip = redecide(allowed, intent, [], ContextConfig(), load_policy("tests.reviews.policies:FOUR_EYES"))
    assert flip.change == Change.TO_REVIEW and flip.candidate == Verdict(
        decision="REVIEW", reason_codes=["policy.review_keyword"]
    )
