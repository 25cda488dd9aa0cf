"""What ``turngate verify`` reports: the kinds of finding, a finding, the report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, Field


class AuditKind(StrEnum):
    """What a finding is about. Failures and unchecked DECISIONs make a report not ok (the
    latter unless allowed); warnings and info do not."""

    # (a) the chain, from turngate.ledger.verify_ledger
    DIGEST_MISMATCH = "digest_mismatch"
    CHAIN_BREAK = "chain_break"
    INDEX_GAP = "index_gap"
    DUPLICATE = "duplicate"
    # (b) decisions recomputed from stored inputs
    DECISION_WITHOUT_INTENT = "decision_without_intent"
    DECISION_MALFORMED = "decision_malformed"
    CONTEXT_DIGEST_MISMATCH = "context_digest_mismatch"
    RESOLVED_REFS_MISMATCH = "resolved_refs_mismatch"
    NORMATIVE_INPUTS_MISMATCH = "normative_inputs_mismatch"
    REF_ERROR_MISMATCH = "ref_error_mismatch"
    INPUT_DIGEST_MISMATCH = "input_digest_mismatch"
    DECISION_MISMATCH = "decision_mismatch"
    EXECUTION_WITHOUT_ALLOW = "execution_without_allow"
    EXECUTION_CONTEXT_MISMATCH = "execution_context_mismatch"
    # (c) the policy decided again (``--replay-policy``): it must decide the same
    POLICY_REPLAY_MISMATCH = "policy_replay_mismatch"
    # a raw blob in the ledger: a stored payload over the event payload limit (docs/ARTIFACTS.md)
    PAYLOAD_TOO_LARGE = "payload_too_large"
    # (d) the I_context / O_context split
    OBSERVATION_LEAK = "observation_leak"
    NORMATIVE_INPUT_UNKNOWN = "normative_input_unknown"
    # (e) artifacts
    ARTIFACT_MISSING = "artifact_missing"
    ARTIFACT_MISMATCH = "artifact_mismatch"
    ARTIFACT_POINTER_INVALID = "artifact_pointer_invalid"
    ARTIFACT_UNAVAILABLE = "artifact_unavailable"
    # the config stored under a DECISION's config digest is not that config (altered or corrupt)
    CONFIG_MISMATCH = "config_mismatch"
    # unchecked: DECISIONs whose config could not be had, so they were not recomputed
    CONFIG_UNAVAILABLE = "config_unavailable"
    # warnings
    ARTIFACTS_NOT_CHECKED = "artifacts_not_checked"
    SHADOW_NOT_RERUN = "shadow_not_rerun"  # shadow entries of a policy that does not load here
    # info
    EXPIRED_SNAPSHOT = "expired_snapshot"
    CONFIG_DRIFT = "config_drift"  # DECISIONs recomputed with an earlier (stored) config
    POLICY_REPLAY_SCOPE = "policy_replay_scope"  # what --replay-policy decided again, what not


class Finding(BaseModel):
    kind: AuditKind
    index: int | None = Field(None, description="ledger index of the event the finding is about")
    correlation_id: str | None = None
    detail: str


class AuditReport(BaseModel):
    ok: bool = Field(
        description=(
            "no failures and every DECISION in scope recomputed (or the unchecked ones allowed); "
            "warnings and info do not count"
        )
    )
    thread_id: str | None = None
    since_index: int | None = None
    until_index: int | None = None
    checked_events: int = Field(description="events whose digest and chain link were recomputed")
    checked_decisions: int = Field(description="DECISIONs recomputed from their stored inputs")
    unchecked_decisions: int = Field(
        0, description="DECISIONs not recomputed: the config they were made under could not be had"
    )
    allow_unchecked: bool = Field(False, description="unchecked DECISIONs do not make the report not ok")
    checked_artifacts: int = Field(description="artifact pointers re-hashed against the store")
    failures: list[Finding] = Field(default_factory=list)
    unchecked: list[Finding] = Field(
        default_factory=list, description="why DECISIONs were not recomputed (one per config digest)"
    )
    warnings: list[Finding] = Field(default_factory=list)
    info: list[Finding] = Field(default_factory=list)
    head_index: int | None = Field(None, description="index of the last event checked")
    head_digest: str | None = Field(None, description="recomputed digest of the last event checked")
    context_config_digest: str = Field(description="digest of the config the verifier ran with")
    duration_ms: int
    events_per_s: float


#: ``progress(done, total)``.
ProgressFn = Callable[[int, int], None]

_DECISION_PROBLEM_KINDS: tuple[tuple[str, AuditKind], ...] = (
    ("event_digest_mismatch", AuditKind.INPUT_DIGEST_MISMATCH),
    ("context_digest", AuditKind.CONTEXT_DIGEST_MISMATCH),
    ("normative_input_digests", AuditKind.NORMATIVE_INPUTS_MISMATCH),
    ("resolved_refs", AuditKind.RESOLVED_REFS_MISMATCH),
    ("ref error", AuditKind.REF_ERROR_MISMATCH),
)


def decision_problem_kind(problem: str) -> AuditKind:
    """Classify one problem string of :func:`turngate.core.decision.verify_decision`."""
    for prefix, kind in _DECISION_PROBLEM_KINDS:
        if problem.startswith(prefix):
            return kind
    return AuditKind.DECISION_MISMATCH


@dataclass
class Span:
    """How many findings of one sort, from which index to which (reported as one line)."""

    count: int
    first_index: int
    last_index: int
    first_correlation_id: str

    def add(self, index: int) -> None:
        self.count += 1
        self.last_index = index


def join_spans(earlier: Span | None, later: Span) -> Span:
    """Two spans of one sort, ``later`` from a later index range."""
    if earlier is None:
        return later
    return Span(
        earlier.count + later.count, earlier.first_index, later.last_index, earlier.first_correlation_id
    )
