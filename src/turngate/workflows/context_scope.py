"""The context digest's scope in a turn: which context spec version it records, and the DECISION
once the external refs are resolved (they are resolved by an activity after the policy ran, so
their resolution enters the spec and the digest afterwards)."""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from turngate.core.context import (
        CONTEXT_SPEC_SCHEMA_V1,
        CONTEXT_SPEC_SCHEMA_V2,
        CONTEXT_SPEC_SCHEMA_V3,
        declares_external_refs,
        declares_ledger_refs,
        with_external_resolution,
    )
    from turngate.core.decision import DecisionOutcome
    from turngate.core.events import Event
    from turngate.core.external import ExternalContext
    from turngate.workflows.patches import CONTEXT_SPEC_V2, CONTEXT_SPEC_V3


def spec_version(intent: Event) -> str:
    """Context spec v3 for a turn that declares ledger refs (its ``event`` refs name whole
    turns); else v2 (external refs inside the digest) for a turn that declares external refs;
    else v1. Histories recorded before a version replay with the one their DECISIONs recorded;
    a turn that declares no refs keeps v1 (and no patch marker)."""
    if declares_ledger_refs(intent) and workflow.patched(CONTEXT_SPEC_V3):
        return CONTEXT_SPEC_SCHEMA_V3
    if declares_external_refs(intent) and workflow.patched(CONTEXT_SPEC_V2):
        return CONTEXT_SPEC_SCHEMA_V2
    return CONTEXT_SPEC_SCHEMA_V1


def with_external(outcome: DecisionOutcome, external: ExternalContext) -> DecisionOutcome:
    """The DECISION records what the external refs pinned (or refused); a declared retrieval that
    cannot be done as declared DENIES the turn with its code."""
    pinned = external.decision_record()
    record = outcome.record.model_copy(update={"external_context": pinned})
    update: dict[str, Any] = {}
    if outcome.context_spec is not None and outcome.assembled_context is not None:
        # What the refs resolved to is inside the digest (context spec v2; v1 is left as it was).
        spec, digest = with_external_resolution(outcome.context_spec, outcome.assembled_context, pinned)
        record = record.model_copy(update={"context_spec": spec, "context_digest": digest})
        update = {"context_spec": spec, "context_digest": digest}
    if external.error is not None:
        record = record.denied(external.error.code, external.error.model_dump(mode="json"))
    return outcome.model_copy(update={"record": record} | update)
