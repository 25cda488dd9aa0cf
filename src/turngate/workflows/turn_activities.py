"""The turn's activities as the workflow refers to them: name, input and result type.

The workflow calls these definitions (``workflow.execute_local_activity(begin_turn, ...)``), never
the implementations in ``turngate.activities``: their dependencies (the ledger's database driver,
the artifact store, provider clients) stay out of the workflow sandbox, and the result type
comes from the definition's annotation. The worker registers the implementations under the same
names; tests/replay/test_activity_definitions.py checks that each one matches its definition.

The names are recorded in every history: never rename them.
"""

from __future__ import annotations

from temporalio import activity

from turngate.core.external import ExternalContext
from turngate.workflows.shared import (
    AppendedEvent,
    AppendInput,
    BeginTurnInput,
    BeginTurnResult,
    CallAndRecordInput,
    CallAndRecordResult,
    ExternalRefsInput,
    ProviderCallInput,
    ProviderCallResult,
    StoredSnapshots,
    StoreSnapshotsInput,
)

BEGIN_TURN = "turngate.begin_turn"
APPEND_EVENT = "turngate.append_event"
RESOLVE_EXTERNAL_REFS = "turngate.resolve_external_refs"
CALL_PROVIDER = "turngate.call_provider"
CALL_AND_RECORD = "turngate.call_and_record"
STORE_FAULT_SNAPSHOTS = "turngate.store_fault_snapshots"


def _definition_only(name: str) -> NotImplementedError:
    return NotImplementedError(f"{name} is a definition: the worker registers its implementation")


@activity.defn(name=BEGIN_TURN)
def begin_turn(inp: BeginTurnInput) -> BeginTurnResult:
    """Record the INTENT; fetch its ref candidates and the thread's pinned prompt
    (``LedgerActivities.begin_turn``, a local activity)."""
    raise _definition_only(BEGIN_TURN)


@activity.defn(name=APPEND_EVENT)
def append_event(inp: AppendInput) -> AppendedEvent:
    """Store a step's artifacts, then append its event (``LedgerActivities.append_event``)."""
    raise _definition_only(APPEND_EVENT)


@activity.defn(name=RESOLVE_EXTERNAL_REFS)
def resolve_external_refs(inp: ExternalRefsInput) -> ExternalContext:
    """Resolve ``case_query`` / ``artifact.handle`` refs (``ExternalRefActivities``)."""
    raise _definition_only(RESOLVE_EXTERNAL_REFS)


@activity.defn(name=CALL_PROVIDER)
async def call_provider(inp: ProviderCallInput) -> ProviderCallResult:
    """Call the model provider (``ProviderActivities.call_provider``)."""
    raise _definition_only(CALL_PROVIDER)


@activity.defn(name=CALL_AND_RECORD)
async def call_and_record(inp: CallAndRecordInput) -> CallAndRecordResult:
    """Append an allowed turn's DECISION, call the provider, append the EXECUTION; a retry finds
    what the ledger holds and never calls the provider again once the EXECUTION is recorded
    (``TurnStepActivities.call_and_record``)."""
    raise _definition_only(CALL_AND_RECORD)


@activity.defn(name=STORE_FAULT_SNAPSHOTS)
def store_fault_snapshots(inp: StoreSnapshotsInput) -> StoredSnapshots:
    """Store a step's fault snapshots, one try per attempt: Temporal retries and bounds it
    (``LedgerActivities.store_fault_snapshots``, a local activity)."""
    raise _definition_only(STORE_FAULT_SNAPSHOTS)
