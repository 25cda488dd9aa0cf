"""Checks run on every DECISION whose recorded inputs verified (the hook for more of them).

Verify recomputes a DECISION's digests from its stored INTENT and candidates first (the
context, the refs, the normative inputs). When those match, the recorded inputs are the ones
the turn decided on, and each :data:`DecisionCheck` listed in
:data:`turngate.audit.verification.run.DECISION_CHECKS` recomputes one more recorded part of
the DECISION from them (the shadow policies' entries, say) and returns what differs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from turngate.audit.verification.findings import AuditKind
from turngate.audit.verification.redaction_source import verify_redaction_source
from turngate.audit.verification.shadow_recompute import shadows_not_rerun, verify_shadows
from turngate.audit.verification.spend_recompute import verify_spend
from turngate.core.context import ContextConfig
from turngate.core.events import Event


@dataclass(frozen=True)
class VerifiedDecision:
    """A DECISION whose recorded inputs verified, with those inputs."""

    index: int
    correlation_id: str
    payload: Mapping[str, Any]  # as stored
    intent: Event
    candidates: Sequence[Event]
    config: ContextConfig  # the context config it was made under
    conn: Connection  # the verify pass's read transaction (checks that count the ledger use it)


#: One check: ``(kind, detail)`` for each thing it finds wrong (a failure of that kind), or
#: ``(SHADOW_NOT_RERUN, policy)`` for a part it could not recompute (summed up as a warning).
DecisionCheck = Callable[[VerifiedDecision], Iterable[tuple[AuditKind, str]]]


def shadow_entries(decision: VerifiedDecision) -> Iterator[tuple[AuditKind, str]]:
    """The DECISION's shadow entries, recomputed (:mod:`.shadow_recompute`); an entry of a policy
    that does not load here is ``shadow_not_rerun`` (a warning, detail: the policy)."""
    for problem in verify_shadows(decision.payload, decision.intent, decision.candidates, decision.config):
        yield AuditKind.DECISION_MISMATCH, problem
    for policy in shadows_not_rerun(decision.payload):
        yield AuditKind.SHADOW_NOT_RERUN, policy


def spend_plan(decision: VerifiedDecision) -> Iterator[tuple[AuditKind, str]]:
    """The DECISION's budget check, recounted from the ledger up to its recorded position
    (:mod:`.spend_recompute`; docs/BUDGETS.md)."""
    for problem in verify_spend(decision.conn, decision.payload, decision.intent, decision.index):
        yield AuditKind.DECISION_MISMATCH, problem


def redaction_note(decision: VerifiedDecision) -> Iterator[tuple[AuditKind, str]]:
    """The event the DECISION's redaction note was read from (:mod:`.redaction_source`)."""
    for problem in verify_redaction_source(decision.conn, decision.payload, decision.intent, decision.index):
        yield AuditKind.DECISION_MISMATCH, problem
