"""What a candidate policy would have decided on a recorded turn (pure, no I/O).

:func:`redecide` runs :func:`turngate.core.decision.judge` (the part of ``decide`` that
resolves refs and asks the policy: the code that decides live turns) on a recorded INTENT, the
candidate events of its declared refs as they were when it was recorded, and the context config
and pinned prompt the DECISION names. Before the
candidate's answer counts, the recomputation must land on the recorded inputs (the same context
digest and resolved refs): otherwise the turn is *unreproducible*, never a flip.

Some DENYs are made by the turn after its policy said ALLOW (no usable model, a prompt or
external-ref error, a manifest that could not be stored). Those gates do not depend on the
policy: when the candidate ALLOWs such a turn, the recorded DENY stands.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from turngate.core.context import ContextConfig
from turngate.core.decision import (
    INTENT_INVALID,
    POLICY_EVALUATION_ERROR,
    POLICY_INVALID_DECISION,
    judge_as_recorded,
    stored_scope,
)
from turngate.core.events import Event
from turngate.core.model_resolution import MODEL_UNAVAILABLE, PROVIDER_MISSING_CREDENTIALS, PROVIDER_UNKNOWN
from turngate.core.policy import LoadedPolicy
from turngate.core.review import REVIEW_KEY, ReviewBlock, budget_request

#: How a candidate that raised (or returned no PolicyDecision) is reported per INTENT.
POLICY_ERROR = "policy.error"
#: DENY reasons the turn records after its policy ALLOWed: no usable model.
MODEL_GATES: frozenset[str] = frozenset({MODEL_UNAVAILABLE, PROVIDER_MISSING_CREDENTIALS, PROVIDER_UNKNOWN})
_POLICY_ERRORS = frozenset({POLICY_EVALUATION_ERROR, POLICY_INVALID_DECISION})


class Change(StrEnum):
    """How the candidate's decision differs from the recorded one."""

    SAME = "same"
    ALLOW_TO_DENY = "ALLOW -> DENY"
    DENY_TO_ALLOW = "DENY -> ALLOW"
    REASONS = "reasons"  # the same decision with other reason codes
    TO_REVIEW = "-> REVIEW"  # the turn would now need a person's review
    FROM_REVIEW = "REVIEW ->"  # a reviewed turn the candidate decides itself


class Verdict(BaseModel):
    """A decision and its reason codes (recorded, or the candidate's)."""

    model_config = ConfigDict(frozen=True)

    decision: str
    reason_codes: list[str]


class Redecision(BaseModel):
    """The candidate's decision on one recorded turn, or why there is none."""

    model_config = ConfigDict(frozen=True)

    recorded: Verdict
    candidate: Verdict | None = None
    change: Change = Change.SAME
    #: ``{code: "policy.error", detail}`` when the candidate raised or returned no decision.
    error: dict[str, str] | None = None
    #: Why the candidate could not be asked on the recorded inputs (None: it was).
    unreproducible: str | None = None
    #: The budget that sent the recorded turn to review (None: none did).
    budget_review: int | None = None


def recorded_verdict(stored: Mapping[str, Any]) -> Verdict:
    """What the recorded policy answered: a reviewed turn's is ``REVIEW`` with the request's
    reason codes (the person's verdict is not the policy's); a turn a budget sent to review, the
    policy's ALLOW (the budget would ask again for a policy that allows it)."""
    block = stored.get(REVIEW_KEY)
    if isinstance(block, Mapping) and "verdict" in block:
        request = ReviewBlock.from_payload(block).request
        if request.budget_id is not None:  # a budget's review: the policy had allowed the turn
            return Verdict(decision="ALLOW", reason_codes=list(request.reason_codes[:-1]))
        return Verdict(decision="REVIEW", reason_codes=list(request.reason_codes))
    codes = stored.get("reason_codes")
    return Verdict(
        decision=str(stored.get("decision")),
        reason_codes=[str(code) for code in codes] if isinstance(codes, list) else [],
    )


def gated_after_policy(stored: Mapping[str, Any], ref_error: bool) -> bool:
    """True when the recorded DENY came from a step after the policy, not from the policy."""
    if stored.get("decision") != "DENY":
        return False
    error = stored.get("error")
    code = error.get("code") if isinstance(error, Mapping) else None
    if code is not None:
        return not ref_error and code not in _POLICY_ERRORS and code != INTENT_INVALID
    codes = stored.get("reason_codes")
    return isinstance(codes, list) and len(codes) == 1 and codes[0] in MODEL_GATES


def change_between(recorded: Verdict, candidate: Verdict) -> Change:
    if recorded.decision != candidate.decision:
        if "REVIEW" in (recorded.decision, candidate.decision):
            return Change.TO_REVIEW if candidate.decision == "REVIEW" else Change.FROM_REVIEW
        return Change.ALLOW_TO_DENY if candidate.decision == "DENY" else Change.DENY_TO_ALLOW
    if recorded.reason_codes != candidate.reason_codes:
        return Change.REASONS
    return Change.SAME


def redecide(
    stored: Mapping[str, Any],
    intent: Event,
    candidates: Sequence[Event],
    cfg: ContextConfig,
    policy: LoadedPolicy,
) -> Redecision:
    """The candidate ``policy``'s decision on the turn whose DECISION payload is ``stored``.

    ``cfg`` must be the config whose digest the DECISION pins, ``candidates`` the events of the
    INTENT's declared refs as they were when it was recorded.
    """
    recorded = recorded_verdict(stored)
    scope = stored_scope(stored)  # recomputed under the context spec version it recorded
    judged = judge_as_recorded(intent, candidates, cfg, policy, scope)
    built = judged.built
    context_digest = built.context_digest if built else None
    resolved = [ref.model_dump(mode="json") for ref in built.resolution.resolved_refs] if built else []
    if context_digest != stored.get("context_digest") or resolved != list(stored.get("resolved_refs") or []):
        return Redecision(
            recorded=recorded,
            unreproducible="the recorded context digest or resolved refs do not recompute",
        )
    code = judged.error.get("code") if judged.error else None
    policy_error = None
    if code in _POLICY_ERRORS:
        policy_error = {"code": POLICY_ERROR, "detail": str(judged.error.get("detail"))}  # type: ignore[union-attr]
    candidate = Verdict(decision=judged.decision.decision, reason_codes=list(judged.decision.reason_codes))
    if candidate.decision in {"ALLOW", "REVIEW"} and gated_after_policy(stored, ref_error=built is None):
        candidate = recorded
    return Redecision(
        recorded=recorded,
        candidate=candidate,
        change=change_between(recorded, candidate),
        error=policy_error,
        budget_review=request.budget_id if (request := budget_request(stored)) is not None else None,
    )
