"""The DECISION: resolve refs, ask the policy, and produce the DECISION event payload.

Pure and deterministic: the same (INTENT, candidates, config, policy) always gives the same
payload, so replay/verify recomputes it with :func:`recompute_decision_digests` and
:func:`verify_decision`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, ValidationError

from turngate.core.canonical import canonical_bytes
from turngate.core.context import (
    CONTEXT_SPEC_SCHEMA_VERSION,
    ContextBuild,
    ContextConfig,
    build_context,
    context_config_digest,
    spec_schema_version,
)
from turngate.core.events import Event, EventKind, event_digest
from turngate.core.payloads import DecisionPayload, ExecutionPlan
from turngate.core.policy import (
    InvalidIntentError,
    LoadedPolicy,
    PolicyDecision,
    PolicyInput,
)
from turngate.core.refs import RefResolutionError, Resolution
from turngate.core.review import pending_block, replayed_outcome

POLICY_EVALUATION_ERROR = "policy.evaluation_error"
POLICY_INVALID_DECISION = "policy.invalid_decision"
INTENT_INVALID = InvalidIntentError.code


class DecisionOutcome(BaseModel):
    """The result of :func:`decide`: the DECISION (``record``; ``payload`` is its event payload)
    and what the turn builds its context from."""

    model_config = ConfigDict(frozen=True)

    record: DecisionPayload
    resolution: Resolution | None = None
    context_spec: dict[str, Any] | None = None
    context_digest: str | None = None
    assembled_context: dict[str, Any] | None = None
    policy_input: PolicyInput | None = None

    @property
    def allowed(self) -> bool:
        return self.record.allowed

    @property
    def payload(self) -> dict[str, Any]:
        """The DECISION event payload (a new dict: changes go through ``record``)."""
        return self.record.as_payload()

    def recording(self, record: DecisionPayload) -> DecisionOutcome:
        """This outcome with another DECISION record (shadows, external refs, tools offered)."""
        return self.model_copy(update={"record": record})

    def denied(self, reason_code: str, error: Mapping[str, Any] | None = None) -> DecisionOutcome:
        """This outcome as a DENY for ``reason_code`` (:meth:`DecisionPayload.denied`)."""
        return self.recording(self.record.denied(reason_code, error))


def _assert_json_without_floats(value: Any, where: str = "payload") -> None:
    if isinstance(value, float):
        raise ValueError(f"{where} is a float; DECISION payloads carry no floats")
    if isinstance(value, Mapping):
        for key, item in value.items():
            _assert_json_without_floats(item, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for position, item in enumerate(value):
            _assert_json_without_floats(item, f"{where}[{position}]")


def _record(
    *,
    decision: PolicyDecision,
    policy: LoadedPolicy,
    config_digest: str,
    built: ContextBuild | None,
    error: Mapping[str, Any] | None,
    plan: ExecutionPlan | None,
) -> DecisionPayload:
    # A REVIEW is a pending ALLOW: the turn goes on to its checks and assembly, then waits for
    # the verdict that makes it the recorded ALLOW or DENY (core/review.py).
    review = pending_block(decision.reason_codes, decision.review) if decision.review is not None else None
    record = DecisionPayload(
        decision="DENY" if decision.decision == "DENY" else "ALLOW",
        reason_codes=list(decision.reason_codes),
        policy=policy.describe(),
        policy_id=policy.policy_id,
        policy_version=policy.policy_version,
        context_digest=built.context_digest if built else None,
        context_spec=built.context_spec if built else None,
        boundary={"context_config_digest": config_digest},
        normative_input_digests=list(built.resolution.normative_input_digests) if built else [],
        resolved_refs=[ref.model_dump(mode="json") for ref in built.resolution.resolved_refs]
        if built
        else [],
        error=dict(error) if error is not None else None,
        plan=plan,
        review=review,
    )
    payload = record.as_payload()
    _assert_json_without_floats(payload)
    canonical_bytes(payload)  # raises CanonicalizationError for anything not JSON
    return record


def evaluate_policy(
    policy: LoadedPolicy, policy_input: PolicyInput
) -> tuple[PolicyDecision, dict[str, Any] | None]:
    """``policy``'s decision on ``policy_input``; a policy that raises or returns no decision
    gives a DENY with the error (``policy.evaluation_error`` / ``policy.invalid_decision``)."""
    try:
        result = policy.evaluate(policy_input)
    except Exception as exc:
        detail = f"{type(exc).__name__}: {exc}"
        return PolicyDecision.deny(POLICY_EVALUATION_ERROR), {
            "code": POLICY_EVALUATION_ERROR,
            "detail": detail,
            "ref_id": None,
        }
    if isinstance(result, PolicyDecision):
        return result, None
    try:
        return PolicyDecision.model_validate(result), None
    except ValidationError as exc:
        reason = exc.errors(include_url=False)[0]["msg"]
        detail = f"policy returned {type(result).__name__}, not a PolicyDecision: {reason}"
        return PolicyDecision.deny(POLICY_INVALID_DECISION), {
            "code": POLICY_INVALID_DECISION,
            "detail": detail,
            "ref_id": None,
        }


def decide(
    intent: Event,
    candidates: Sequence[Event],
    cfg: ContextConfig,
    policy: LoadedPolicy,
    *,
    execution: ExecutionPlan | Mapping[str, Any] | None = None,
    prompt: Mapping[str, Any] | None = None,
    schema_version: str = CONTEXT_SPEC_SCHEMA_VERSION,
) -> DecisionOutcome:
    """Decide ``intent``: resolve refs, evaluate the policy on I_context, build the payload.

    A ref error (or an INTENT without a message) ends in DENY with the error code as reason code;
    the policy is not called. A policy that raises or returns garbage ends in DENY
    (``policy.evaluation_error`` / ``policy.invalid_decision``). ``execution`` (the
    :class:`ExecutionPlan`: provider, requested and resolved model, token budget, prompt) is
    recorded beside the decision; a mapping is validated into one (a key of the decision itself
    is refused). ``prompt`` (the pinned prompt snapshot and profile digests) enters the context
    spec and so the digest. ``schema_version``: of the context spec (a replay uses the version
    the DECISION recorded).
    """
    if execution is not None and not isinstance(execution, ExecutionPlan):
        execution = ExecutionPlan.model_validate(execution)
    config_digest = context_config_digest(cfg)
    judged = judge(intent, candidates, cfg, policy, prompt, schema_version=schema_version)
    built = judged.built
    record = _record(
        decision=judged.decision,
        policy=policy,
        config_digest=config_digest,
        built=built,
        error=judged.error,
        plan=execution,
    )
    if built is None:
        return DecisionOutcome(record=record)
    return DecisionOutcome(
        record=record,
        resolution=built.resolution,
        context_spec=built.context_spec,
        context_digest=built.context_digest,
        assembled_context=built.assembled_context,
        policy_input=built.policy_input,
    )


class StoredScope(BaseModel):
    """What a stored DECISION says its context digest was computed over, besides the ledger:
    the pinned prompt, the spec's schema version and (version 2) the external refs' resolution."""

    model_config = ConfigDict(frozen=True)

    prompt: dict[str, Any] | None = None
    schema_version: str = CONTEXT_SPEC_SCHEMA_VERSION
    external_resolved: list[dict[str, Any]] | None = None


def stored_scope(stored: Mapping[str, Any]) -> StoredScope:
    """The :class:`StoredScope` of a stored DECISION payload."""
    spec = stored.get("context_spec")
    prompt = spec.get("prompt") if isinstance(spec, Mapping) else None
    external = stored.get("external_context")
    return StoredScope.model_construct(
        prompt=dict(prompt) if isinstance(prompt, Mapping) else None,
        schema_version=spec_schema_version(spec),
        external_resolved=[dict(r) for r in external if isinstance(r, Mapping)]
        if isinstance(external, list)
        else None,
    )


class Judgement(NamedTuple):
    """The decision part of :func:`decide`, before it is written up as a DECISION payload."""

    built: ContextBuild | None  # None: a ref or INTENT error, the policy was not asked
    decision: PolicyDecision
    error: dict[str, Any] | None


def judge(
    intent: Event,
    candidates: Sequence[Event],
    cfg: ContextConfig,
    policy: LoadedPolicy,
    prompt: Mapping[str, Any] | None = None,
    *,
    schema_version: str = CONTEXT_SPEC_SCHEMA_VERSION,
    external_resolved: Sequence[Mapping[str, Any]] | None = None,
) -> Judgement:
    """Resolve refs and ask the policy, as :func:`decide` does (it calls this), without building
    the payload: what re-deciding recorded turns with another policy needs (with the recorded
    ``schema_version`` and, for version 2, the recorded ``external_resolved``)."""
    if intent.kind != EventKind.INTENT:
        raise ValueError(f"decide needs an INTENT event, got {intent.kind}")
    try:
        built = build_context(
            intent,
            candidates,
            cfg,
            prompt,
            schema_version=schema_version,
            external_resolved=external_resolved,
        )
    except (RefResolutionError, InvalidIntentError) as exc:
        if isinstance(exc, RefResolutionError):
            error = exc.as_dict()
        else:
            error = {"code": INTENT_INVALID, "detail": str(exc), "ref_id": None}
        return Judgement(None, PolicyDecision.deny(error["code"]), error)
    decision, policy_error = evaluate_policy(policy, built.policy_input)
    return Judgement(built, decision, policy_error)


def judge_as_recorded(
    intent: Event, candidates: Sequence[Event], cfg: ContextConfig, policy: LoadedPolicy, scope: StoredScope
) -> Judgement:
    """:func:`judge` under what a stored DECISION pinned (its prompt, context spec version and
    external refs' resolution): what verify and what-if re-decide recorded turns with."""
    return judge(
        intent,
        candidates,
        cfg,
        policy,
        scope.prompt,
        schema_version=scope.schema_version,
        external_resolved=scope.external_resolved,
    )


def recompute_decision_digests(
    intent: Event,
    candidates: Sequence[Event],
    cfg: ContextConfig,
    prompt: Mapping[str, Any] | None = None,
    scope: StoredScope | None = None,
) -> dict[str, Any]:
    """Recompute from stored inputs what a DECISION pins (what the context system says can be verified).

    Returns ``{context_digest, context_config_digest, normative_input_digests, resolved_refs,
    error_code}``; on a ref error the digest fields are ``None``/empty and ``error_code`` is set.
    ``scope``: the stored DECISION's (:func:`stored_scope`); its prompt wins over ``prompt``.
    """
    config_digest = context_config_digest(cfg)
    scope = scope or StoredScope.model_construct(prompt=dict(prompt) if prompt else None)
    try:
        built = build_context(
            intent,
            candidates,
            cfg,
            scope.prompt,
            schema_version=scope.schema_version,
            external_resolved=scope.external_resolved,
        )
    except RefResolutionError as exc:
        error_code: str | None = exc.code
        built = None
    except InvalidIntentError:
        error_code = INTENT_INVALID
        built = None
    else:
        error_code = None
    return _pinned(built, config_digest, error_code)


def _pinned(built: ContextBuild | None, config_digest: str, error_code: str | None) -> dict[str, Any]:
    """What a DECISION pins, from one context build (None: a ref or INTENT error)."""
    return {
        "context_digest": built.context_digest if built else None,
        "context_config_digest": config_digest,
        "normative_input_digests": (list(built.resolution.normative_input_digests) if built else []),
        "resolved_refs": (
            [ref.model_dump(mode="json") for ref in built.resolution.resolved_refs] if built else []
        ),
        "error_code": error_code,
    }


def compare_decision(stored: Mapping[str, Any], again: Mapping[str, Any]) -> list[str]:
    """The problems between a stored DECISION payload and ``recompute_decision_digests``' result."""
    problems: list[str] = []
    boundary = stored.get("boundary")
    stored_config = boundary.get("context_config_digest") if isinstance(boundary, Mapping) else None
    if stored_config != again["context_config_digest"]:
        problems.append("context_config_digest differs from the reloaded config")
    if stored.get("context_digest") != again["context_digest"]:
        problems.append("context_digest differs from the recomputation")
    if list(stored.get("normative_input_digests") or []) != again["normative_input_digests"]:
        problems.append("normative_input_digests differ")
    if list(stored.get("resolved_refs") or []) != again["resolved_refs"]:
        problems.append("resolved_refs differ")
    stored_error = stored.get("error")
    stored_code = stored_error.get("code") if isinstance(stored_error, Mapping) else None
    if again["error_code"] is not None and stored_code != again["error_code"]:
        problems.append(f"ref error differs: stored {stored_code!r}, recomputed {again['error_code']!r}")
    return problems


def verify_decision(
    stored: Mapping[str, Any],
    intent: Event,
    candidates: Sequence[Event],
    cfg: ContextConfig,
    policy: LoadedPolicy | None = None,
) -> list[str]:
    """Compare a stored DECISION payload with a recomputation; ``[]`` means it verifies.

    Event digests of the INTENT and the candidates are recomputed from their payloads (never
    trusted from a digest column). With ``policy``, the policy is re-run and its identity,
    config digest, decision and reason codes are compared too.
    """
    problems: list[str] = []
    for event in (intent, *candidates):
        if event_digest(event, event.index, event.prev_event_digest) != event.digest:
            problems.append(f"event_digest_mismatch: index {event.index}")
    scope = stored_scope(stored)
    if policy is None:
        problems.extend(
            compare_decision(stored, recompute_decision_digests(intent, candidates, cfg, scope=scope))
        )
        return problems
    # One context build serves both the digests and the re-run policy.
    judged = judge_as_recorded(intent, candidates, cfg, policy, scope)
    error_code = judged.error["code"] if judged.built is None and judged.error else None
    problems.extend(compare_decision(stored, _pinned(judged.built, context_config_digest(cfg), error_code)))
    asked: dict[str, Any] = {
        "decision": judged.decision.decision,
        "reason_codes": list(judged.decision.reason_codes),
    }
    if judged.decision.review is not None:  # settled by the recorded verdict (core/review.py)
        asked["decision"] = "ALLOW"
        asked["review"] = pending_block(judged.decision.reason_codes, judged.decision.review)
    decision, reason_codes = replayed_outcome(asked, stored)
    replayed = {"decision": decision, "reason_codes": reason_codes, "policy": policy.describe()}
    for key in ("decision", "reason_codes", "policy"):
        if stored.get(key) != replayed[key]:
            problems.append(f"{key} differs from the re-evaluated policy")
    return problems
