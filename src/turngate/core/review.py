"""Human review as a policy outcome (pure, no I/O).

A policy may answer ``REVIEW``: the turn is allowed only if a person with the review spec's role
approves it before the deadline. The turn waits for that verdict (workflows/turn_review.py) and
then records one DECISION, ALLOW or DENY, carrying a ``review`` block:

``{"request": {reason_codes, role, deadline_s, four_eyes}, "verdict": "approve" | "deny" |
"timed_out", "approver": {key_id, tenant_id, roles}, "comment": <artifact pointer>}``

The block is inside the DECISION's digest, and everything in it is checked again by verify
(:func:`review_problems`): the policy, re-run on the recorded inputs, must ask for exactly this
review; the approver must hold the role (and, under four-eyes, not be the intent's own caller or
actor); and the verdict must give the recorded decision and reason codes (:func:`final_outcome`).
A review block without a verdict is a turn the policy sent to review that a later rule (no usable
model, a budget, an external ref) denied before anyone was asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

#: The role a review spec names unless it says otherwise (an API key role).
REVIEW_ROLE = "review"
#: The role that may do anything (see turngate.security.principal): it may review too.
ADMIN_ROLE = "admin"
REVIEW_KEY = "review"

REASON_APPROVED = "review.approved"
#: The last reason code of a review a budget asked for (after the policy's own ALLOW codes).
REASON_BUDGET_REVIEW = "budget.review_required"
REASON_DENIED = "review.denied"
REASON_TIMED_OUT = "review.timed_out"

#: The longest a turn may wait for its verdict (a policy asking for more is refused: 30 days).
MAX_DEADLINE_S = 30 * 24 * 3600
DEFAULT_DEADLINE_S = 24 * 3600
#: A reviewer's comment is stored as an artifact; longer ones are refused.
MAX_COMMENT_CHARS = 4000

ReasonCode = Annotated[str, StringConstraints(min_length=1, max_length=200)]
Verdict = Literal["approve", "deny", "timed_out"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ReviewSpec(_Frozen):
    """Who may decide a turn the policy sent to review, and by when."""

    role: Annotated[str, StringConstraints(min_length=1, max_length=100)] = REVIEW_ROLE
    deadline_s: int = Field(default=DEFAULT_DEADLINE_S, ge=1, le=MAX_DEADLINE_S)
    four_eyes: bool = False  # the intent's own caller (its key, its actor) may not approve


class ReviewRequest(ReviewSpec):
    """What the policy asked: its reason codes and its spec, as the DECISION records them. A
    review a budget asked for names it (``budget_id``; its spec is the budget's, its reason codes
    the policy's ALLOW codes and :data:`REASON_BUDGET_REVIEW`)."""

    reason_codes: tuple[ReasonCode, ...] = Field(min_length=1)
    budget_id: int | None = None


class Approver(_Frozen):
    """Who gave the verdict, as the gateway authenticated them (never a secret)."""

    key_id: str | None
    tenant_id: str | None
    roles: tuple[str, ...]

    def may(self, role: str) -> bool:
        return ADMIN_ROLE in self.roles or role in self.roles


class ReviewVerdict(_Frozen):
    """A reviewer's verdict as the workflow receives it (the comment already stored)."""

    verdict: Literal["approve", "deny"]
    approver: Approver
    comment: dict[str, Any] | None = None  # ArtifactPointer JSON of the comment text


class ReviewBlock(_Frozen):
    """The DECISION's ``review`` block (absent keys, never nulls)."""

    request: ReviewRequest
    verdict: Verdict | None = None  # None: the turn was denied before anyone was asked
    approver: Approver | None = None
    comment: dict[str, Any] | None = None

    def as_payload(self) -> dict[str, Any]:
        dumped: dict[str, Any] = {"request": _request_payload(self.request)}
        if self.verdict is not None:
            dumped["verdict"] = self.verdict
        if self.approver is not None:
            dumped["approver"] = self.approver.model_dump(mode="json")
        if self.comment is not None:
            dumped["comment"] = dict(self.comment)
        return dumped

    @classmethod
    def from_payload(cls, value: Any) -> ReviewBlock:
        """A stored block, validated (ValueError: malformed)."""
        if not isinstance(value, Mapping):
            raise ValueError("review is not an object")
        try:
            return cls.model_validate(dict(value))
        except ValidationError as exc:
            raise ValueError(f"review is malformed: {exc.errors(include_url=False)[0]['msg']}") from None


def _request_payload(request: ReviewRequest) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "reason_codes": list(request.reason_codes),
        "role": request.role,
        "deadline_s": request.deadline_s,
        "four_eyes": request.four_eyes,
    }
    if request.budget_id is not None:
        payload["budget_id"] = request.budget_id
    return payload


def pending_block(reason_codes: tuple[str, ...], spec: ReviewSpec) -> dict[str, Any]:
    """The ``review`` block of a DECISION the policy sent to review, before any verdict."""
    request = ReviewRequest(reason_codes=reason_codes, **spec.model_dump())
    return ReviewBlock(request=request).as_payload()


def budget_block(policy_codes: tuple[str, ...], spec: ReviewSpec, budget_id: int) -> dict[str, Any]:
    """The ``review`` block of an ALLOWed turn that budget ``budget_id`` sent to review."""
    codes = (*policy_codes, REASON_BUDGET_REVIEW)
    request = ReviewRequest(reason_codes=codes, budget_id=budget_id, **spec.model_dump())
    return ReviewBlock(request=request).as_payload()


def budget_request(stored: Mapping[str, Any]) -> ReviewRequest | None:
    """The review a budget asked for in a stored DECISION (None: none, or a policy's)."""
    try:
        request = ReviewBlock.from_payload(stored.get(REVIEW_KEY)).request
    except ValueError:
        return None
    return request if request.budget_id is not None else None


def pending_request(payload: Mapping[str, Any]) -> ReviewRequest | None:
    """The review a DECISION payload is waiting for: an ALLOW whose review block has no verdict
    yet (None: nothing to wait for)."""
    block = payload.get(REVIEW_KEY)
    if payload.get("decision") != "ALLOW" or not isinstance(block, Mapping) or "verdict" in block:
        return None
    return ReviewBlock.from_payload(block).request


def final_outcome(request: ReviewRequest, verdict: Verdict) -> tuple[Literal["ALLOW", "DENY"], list[str]]:
    """The DECISION a verdict gives: (decision, reason codes)."""
    if verdict == "approve":
        return "ALLOW", [*request.reason_codes, REASON_APPROVED]
    return "DENY", [REASON_DENIED if verdict == "deny" else REASON_TIMED_OUT]


def decided_block(request: ReviewRequest, verdict: ReviewVerdict | None) -> ReviewBlock:
    """The block a DECISION records once ``verdict`` came (None: the deadline passed first)."""
    if verdict is None:
        return ReviewBlock(request=request, verdict="timed_out")
    return ReviewBlock(
        request=request, verdict=verdict.verdict, approver=verdict.approver, comment=verdict.comment
    )


class IntentCaller(_Frozen):
    """Who declared the intent: its actor and the key that sent it (four-eyes compares them)."""

    actor: str
    key_id: str | None
    tenant_id: str | None


def caller_of(intent_payload: Mapping[str, Any], actor: str, tenant_id: str | None) -> IntentCaller:
    """The :class:`IntentCaller` of an INTENT (its payload, actor and tenant columns)."""
    principal = intent_payload.get("principal")
    key_id = principal.get("key_id") if isinstance(principal, Mapping) else None
    return IntentCaller(actor=actor, key_id=key_id if isinstance(key_id, str) else None, tenant_id=tenant_id)


#: Why a verdict is refused: (code, detail). The codes are the API's (docs/ERRORS.md).
FORBIDDEN_ROLE = "review.forbidden"
FOUR_EYES = "review.four_eyes"
WRONG_TENANT = "review.not_found"


def verdict_refusal(
    request: ReviewRequest, approver: Approver, caller: IntentCaller
) -> tuple[str, str] | None:
    """Why ``approver`` may not decide this review (None: they may). Both approving and denying
    need the role; four-eyes keeps the intent's own caller from deciding it either way."""
    if approver.tenant_id is not None and approver.tenant_id != caller.tenant_id:
        return WRONG_TENANT, "no review of this turn in your tenant"
    if not approver.may(request.role):
        return FORBIDDEN_ROLE, f"deciding this review needs the {request.role!r} role"
    if request.four_eyes:
        if approver.key_id is None:
            return FOUR_EYES, "four-eyes review needs an identified approver (an API key)"
        if approver.key_id in {caller.key_id, caller.actor}:
            return FOUR_EYES, "four-eyes review: the intent's own caller may not decide it"
    return None


def replayed_outcome(again: Mapping[str, Any], stored: Mapping[str, Any]) -> tuple[str, list[str]]:
    """The (decision, reason codes) a re-run policy's DECISION payload ``again`` stands for,
    given the stored DECISION: a review the policy asks again is settled by the stored verdict
    when the stored block records this very request; otherwise it is ``REVIEW`` (the policy now
    asks for a review that was not recorded). A stored request never put to anyone (a later
    rule denied the turn) stays the pending ALLOW the policy gave."""
    decision, codes = str(again.get("decision")), [str(c) for c in again.get("reason_codes") or []]
    asked = again.get(REVIEW_KEY)
    if not isinstance(asked, Mapping):
        return _budget_settled(decision, codes, stored)
    request = ReviewBlock.from_payload(asked).request
    try:
        block = ReviewBlock.from_payload(stored.get(REVIEW_KEY))
    except ValueError:
        return "REVIEW", list(request.reason_codes)
    if block.request != request:
        return "REVIEW", list(request.reason_codes)
    if block.verdict is None:
        return decision, codes
    final, final_codes = final_outcome(request, block.verdict)
    return final, final_codes


def _budget_settled(decision: str, codes: list[str], stored: Mapping[str, Any]) -> tuple[str, list[str]]:
    """A policy ALLOW that a budget sent to review (recorded with exactly these codes) is settled
    by the recorded verdict, as a policy's own review is; anything else stands as decided."""
    request = budget_request(stored)
    if request is None or decision != "ALLOW" or list(request.reason_codes) != [*codes, REASON_BUDGET_REVIEW]:
        return decision, codes
    block = ReviewBlock.from_payload(stored.get(REVIEW_KEY))
    if block.verdict is None:
        return decision, codes
    return final_outcome(request, block.verdict)


#: ``asked`` when the policy that decided cannot be re-run here: its request is not compared.
NOT_RERUN = "not_rerun"


def review_problems(
    stored: Mapping[str, Any], asked: Mapping[str, Any] | str | None, caller: IntentCaller
) -> list[str]:
    """What is wrong with a stored DECISION's ``review`` block. ``asked``: the ``review`` block
    the policy gives when re-run on the recorded inputs (None: it asks for no review;
    :data:`NOT_RERUN`: it could not be re-run, the rest is still checked)."""
    try:
        block = ReviewBlock.from_payload(stored.get(REVIEW_KEY))
    except ValueError as exc:
        return [f"review_malformed: {exc}"]
    problems: list[str] = []
    if asked != NOT_RERUN and (
        not isinstance(asked, Mapping) or ReviewBlock.from_payload(asked).request != block.request
    ):
        problems.append("review_mismatch: the re-evaluated policy does not ask for this review")
    if block.verdict is None:
        if stored.get("decision") != "DENY" or any(
            str(code).startswith("review.") for code in stored.get("reason_codes") or []
        ):
            problems.append("review_mismatch: a review without a verdict must be a DENY by a later rule")
        return problems
    if block.verdict == "timed_out":
        if block.approver is not None or block.comment is not None:
            problems.append("review_mismatch: a timed-out review has no approver")
    elif block.approver is None:
        problems.append(f"review_mismatch: a verdict {block.verdict!r} without an approver")
    else:
        refusal = verdict_refusal(block.request, block.approver, caller)
        if refusal is not None:
            problems.append(f"review_mismatch: the approver may not decide it ({refusal[1]})")
    decision, codes = final_outcome(block.request, block.verdict)
    if stored.get("decision") != decision or list(stored.get("reason_codes") or []) != codes:
        problems.append(
            f"review_mismatch: verdict {block.verdict!r} gives {decision} {codes}, the DECISION records "
            f"{stored.get('decision')} {list(stored.get('reason_codes') or [])}"
        )
    return problems
