"""The one-line summaries a turn's activities carry into the Temporal UI (docs/TEMPORAL-UI.md).

``append DECISION ALLOW``, ``call openai gpt-4o-mini``, ``store fault snapshot``: the step's kind
and names, never a message or a secret. A summary is user metadata on the activity's history
event (or local activity marker): replay does not compare it, and it passes the payload codec
like every payload, so it is encrypted when the history is.
"""

from __future__ import annotations

from collections.abc import Mapping

from turngate.workflows.shared import AppendInput, CallAndRecordInput, ProviderCallInput

#: begin_turn: records the INTENT and reads what the turn needs from the ledger.
BEGIN_SUMMARY = "append INTENT, read the thread"


def append_summary(inp: AppendInput) -> str:
    draft = inp.draft
    decision = draft.payload.get("decision")
    parts = [f"append {draft.kind.value}" + (f" {decision}" if isinstance(decision, str) else "")]
    if inp.snapshots:
        parts.append("store fault snapshot")
    elif inp.manifest:
        parts.append("store context manifest")
    if inp.stored_snapshots and not inp.snapshots:
        parts.append("point at stored snapshots")
    return ", ".join(parts)


def snapshots_summary(snapshots: Mapping[str, str]) -> str:
    """The fault-snapshot step (the turn's shape 5): which snapshots it stores."""
    return "store fault snapshot: " + ", ".join(sorted(snapshots))


def provider_summary(inp: ProviderCallInput | CallAndRecordInput | object) -> str:
    if isinstance(inp, CallAndRecordInput):
        return f"append DECISION, call {inp.call.provider} {inp.call.model}, append EXECUTION"
    if isinstance(inp, ProviderCallInput):
        return f"call {inp.provider} {inp.model}"
    return "call provider"


def external_refs_summary(count: int) -> str:
    return f"resolve {count} external ref" + ("s" if count != 1 else "")
