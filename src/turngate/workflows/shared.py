"""Inputs, results and names shared by the turn workflow, its activities, the worker and the API."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer
from temporalio.common import SearchAttributeKey

from turngate.core.context import ContextConfig
from turngate.core.events import Event, EventDraft, IntentEnvelope
from turngate.core.external import ExternalContext
from turngate.core.messages import ChatMessage
from turngate.core.model_aliases import ModelsConfig
from turngate.core.model_resolution import ModelResolution, ProviderCatalog
from turngate.core.prompt_layers import PromptConfig
from turngate.core.request_options import ProviderOptions
from turngate.core.safety import SafetyRules, SafetyVerdict
from turngate.core.spend import (
    SpendSnapshot,
)
from turngate.core.system_prompt import PromptContext
from turngate.core.tools import ToolSpec

# Search attributes that make turns findable in the Temporal UI (registered by the worker).
SA_THREAD_ID = SearchAttributeKey.for_keyword("TurngateThreadId")
SA_TURN_ID = SearchAttributeKey.for_keyword("TurngateTurnId")
SA_DECISION = SearchAttributeKey.for_keyword("TurngateDecision")
SA_POLICY_ID = SearchAttributeKey.for_keyword("TurngatePolicyId")
SA_ACTOR = SearchAttributeKey.for_keyword("TurngateActor")
#: The tenant of a case job or a turn (listed per tenant by a visibility query).
SA_TENANT_ID = SearchAttributeKey.for_keyword("TurngateTenantId")
#: A case job's case and type (``case.embed``), and the correlation id a turn or job was
#: submitted with: what a person searching the Temporal UI knows.
SA_CASE_ID = SearchAttributeKey.for_keyword("TurngateCaseId")
SA_JOB_TYPE = SearchAttributeKey.for_keyword("TurngateJobType")
SA_CORRELATION_ID = SearchAttributeKey.for_keyword("TurngateCorrelationId")
SEARCH_ATTRIBUTES = (
    SA_THREAD_ID,
    SA_TURN_ID,
    SA_DECISION,
    SA_POLICY_ID,
    SA_ACTOR,
    SA_TENANT_ID,
    SA_CASE_ID,
    SA_JOB_TYPE,
    SA_CORRELATION_ID,
)

_UNSAFE = re.compile(r"[^A-Za-z0-9._:@-]")


def turn_workflow_id(
    stream_id: str, thread_id: str, turn_id: str, prefix: str = "turn", *, tenant_id: str | None
) -> str:
    """Business id of a turn: resubmitting the same (tenant, stream, thread, turn) finds the same
    workflow, and no other tenant's request ever does (the tenant is part of the turn's identity;
    none, for an unscoped caller, is a tenant of its own).

    ``<prefix>/<tenant>/<stream>/<thread>/<turn>/<digest>``: readable where the ids are plain
    (``-`` for no tenant); the digest over all four keeps it unique where characters were
    replaced or cut.
    """
    raw = "\x1f".join(("tenant-v2", tenant_id or "", stream_id, thread_id, turn_id))
    tenant = "-" if tenant_id is None else _readable(tenant_id)
    parts = (tenant, *(_readable(part) for part in (stream_id, thread_id, turn_id)))
    return f"{prefix}/{'/'.join(parts)}/{hashlib.sha256(raw.encode()).hexdigest()[:12]}"


def legacy_turn_workflow_id(stream_id: str, thread_id: str, turn_id: str, prefix: str = "turn") -> str:
    """The id turns had before the tenant became part of it: ``<prefix>/<stream>/<thread>/<turn>/
    <digest>``. Read only to find a turn started under it (an upgrade with turns in flight)."""
    raw = f"{stream_id}\x1f{thread_id}\x1f{turn_id}"
    readable = "/".join(_readable(part) for part in (stream_id, thread_id, turn_id))
    return f"{prefix}/{readable}/{hashlib.sha256(raw.encode()).hexdigest()[:12]}"


def _readable(part: str) -> str:
    return _UNSAFE.sub("_", part)[:60]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


#: Fields added after payloads were recorded, with the value that means "as before": a dump
#: leaves them out at that value, so recorded payloads round-trip to the same bytes
#: (tests/replay/test_payload_compat.py).
_LATER_FIELDS_AT_DEFAULT = {"snapshot_sample_n": 0, "output_faults": False}


def _without_sampling_off(dumped: dict[str, Any]) -> dict[str, Any]:
    """A dump without the later fields while they hold their "as before" value."""
    for name, default in _LATER_FIELDS_AT_DEFAULT.items():
        if name in dumped and dumped[name] == default:
            dumped.pop(name)
    return dumped


class TurnInput(_Model):
    envelope: IntentEnvelope


class Boundary(_Model):
    """What the worker decides with, loaded once at worker start and recorded in history.

    The configs are typed: validated once where the worker loads them and where a history is
    decoded, never again per turn (the JSON is the same as the dicts recorded before)."""

    policy_module: str | None
    policy_object: str
    context_config: ContextConfig
    context_config_digest: str
    provider_catalog: ProviderCatalog
    llm_task_queue: str
    llm_wall_clock_s: int
    provider_activity: str = "regular"  # regular | local (Settings.provider_activity)
    budget_tokens: int = 100_000
    token_estimator: str = "chars/3"  # the estimator in effect on the worker (after any fallback)
    prompt_config: PromptConfig | None = None
    # Settings.artifact_deadline_s: one step's artifact writes end by then (SYSTEM_ERROR past it)
    artifact_deadline_s: float = 15.0
    shadow_policies: tuple[str, ...] = ()  # module:object of each shadow policy (docs/POLICIES.md)
    models: ModelsConfig | None = None  # the models file: aliases and prices (docs/BUDGETS.md)
    # The turn's shape (docs/WORKFLOW.md, "Workflow versions"): the worker sets the current one;
    # histories recorded before the field carry none and replay as shape 1. Data in the
    # begin_turn result, so choosing it costs no marker and no search-attribute write per turn.
    turn_shape: int = 1
    # Settings.snapshot_sample_n: one successful turn in N stores debug snapshots (0: none).
    snapshot_sample_n: int = 0
    # A review webhook is configured: a turn that starts waiting for a reviewer notifies it.
    review_webhook: bool = False

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_sampling_off(handler(self))


class ReviewRequested(_Model):
    """What the review webhook is told (never the message: a reviewer reads it through the API)."""

    event: str = "review.requested"
    correlation_id: str
    thread_id: str
    turn_id: str
    tenant_id: str | None
    actor: str
    reason_codes: list[str]
    role: str
    four_eyes: bool
    requested_at: str
    deadline_at: str


class ExternalRefsInput(_Model):
    """The turn's ``case_query`` / ``artifact.handle`` refs, as the INTENT recorded them."""

    tenant_id: str | None
    correlation_id: str
    refs: list[dict[str, Any]]


class BeginTurnInput(_Model):
    intent: EventDraft
    ref_ids: list[str]


class BeginTurnResult(_Model):
    intent: Event
    candidates: list[Event]
    boundary: Boundary
    prompt: PromptContext | None = None
    prompt_error: dict[str, Any] | None = None  # the prompt snapshot could not be had: DENY
    # DECISION/EXECUTION already in the ledger for this turn: a rerun of a workflow task whose
    # worker was lost after the ledger commit but before Temporal recorded the step.
    recorded: dict[str, Event] = {}
    spend: SpendSnapshot | None = None  # the turn's budgets and their spend (docs/BUDGETS.md)


class AppendInput(_Model):
    """An event to append, with the step's context manifest and fault snapshots (stored as
    artifacts first; the event then carries their pointers)."""

    draft: EventDraft
    manifest: dict[str, Any] | None = None
    snapshots: dict[str, str] = Field(default_factory=dict)
    # Snapshots an activity already stored (name -> ArtifactPointer JSON), listed beside them.
    stored_snapshots: dict[str, dict[str, Any]] = Field(default_factory=dict)


class AppendedEvent(Event):
    """What the append step returns: the turn's event of that kind as the ledger holds it.
    ``adopted``: the ledger already held a different one (recorded by an earlier run of the step
    whose workflow task never completed); the workflow goes on from it. Results recorded before
    this field existed read as not adopted."""

    adopted: bool = False


class ProviderCallInput(_Model):
    correlation_id: str
    provider: str
    model: str
    messages: list[ChatMessage]  # a tool loop's carry tool calls
    # The conversation (gen_ai.conversation.id on the provider span); None in older histories.
    thread_id: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None  # the client's, when it asked for one
    tools: list[dict[str, Any]] = Field(default_factory=list)
    # The current message was over the inline limit: the activity reads it from this artifact.
    message_artifact: dict[str, Any] | None = None
    # Referenced messages and answers that were offloaded: message index -> pointer to the whole
    # text (the message itself holds the preview); the activity loads them.
    message_artifacts: dict[int, dict[str, Any]] = Field(default_factory=dict)
    # The prompt pack's output safety rules: the activity checks the whole answer before
    # anything of it is offloaded or returned (None: no rules).
    output_safety: SafetyRules | None = None
    # The client's structured output, tool choice and sampling options (None: it sent none;
    # then absent from the dump, so a call without them serialises as it always did).
    options: ProviderOptions | None = None

    @model_serializer(mode="wrap")
    def _without_unset_options(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        if dumped.get("options") is None:
            dumped.pop("options", None)
        return dumped


class ProviderCallResult(_Model):
    """The provider's answer. An answer over the inline limit (64 KB) never travels through
    Temporal: the activity stores it as an artifact and returns a preview plus the pointer."""

    provider: str
    model: str
    output_text: str
    usage: dict[str, int | None] = Field(default_factory=dict)
    duration_ms: int = 0
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)  # [{id, name, arguments}]
    output_artifact: dict[str, Any] | None = None  # ArtifactPointer of the full text when offloaded
    output_truncated: bool = False
    # The output safety verdict over the whole answer (None: not checked). A violation returns
    # no text and no output_artifact: the raw answer is only in the restricted redaction
    # snapshot, ``redacted_output`` (snapshot retention).
    safety: SafetyVerdict | None = None
    redacted_output: dict[str, Any] | None = None


class RecordedEvent(_Model):
    kind: str
    index: int
    digest: str


class TurnResult(_Model):
    workflow_id: str
    correlation_id: str
    decision: str
    reason_codes: list[str]
    intent: RecordedEvent
    decision_event: RecordedEvent
    execution: RecordedEvent | None = None
    error_code: str | None = None


class ExecutionContext(_Model):
    """What makes the EXECUTION of a provider call's outcome, besides the call: the model and
    the decision's context digest it records, the tools offered (only calls to them are
    admitted), the intent's inputs (phase transitions, ``debug_snapshot``), the prompt pack's
    output rules (``prompt_pack``: the turn ran with one), the exchange count and the external
    context (fetch faults are snapshotted)."""

    model: ModelResolution
    context_digest: str | None
    offered: tuple[ToolSpec, ...] = ()
    inputs: dict[str, Any] = Field(default_factory=dict)
    prompt_pack: bool = False
    output_safety: SafetyRules | None = None
    exchanges_count: int | None = None
    external: ExternalContext | None = None
    snapshot_sample_n: int = 0  # the boundary's 1-in-N sampling of successful turns
    # Shape 8: an answer that fails the JSON schema the client asked for, or a tool call whose
    # arguments fail its tool's schema, is a fault (snapshots).
    output_faults: bool = False

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_sampling_off(handler(self))


class CallAndRecordInput(_Model):
    """An allowed turn's DECISION to append, the provider call to make, and how to record the
    EXECUTION of its outcome (``manifest``: the EXECUTION's context manifest)."""

    decision: AppendInput
    call: ProviderCallInput
    execution: ExecutionContext
    manifest: dict[str, Any]
    attempts: int  # the activity's maximum attempts: the last one records a retryable error
    wall_clock_s: float  # the provider call's limit over all attempts (llm.timeout past it)
    # Shape 5: an EXECUTION with fault snapshots is handed back unrecorded (``deferred``), for
    # the workflow's own snapshot step; before it, the activity stored and appended it itself.
    defer_fault_snapshots: bool = False


class CallAndRecordResult(_Model):
    """The turn's DECISION and EXECUTION as the ledger holds them (``execution`` None: the
    recorded DECISION is a DENY, so nothing was called)."""

    decision: Event
    execution: Event | None = None
    # The EXECUTION still to record, with the fault snapshots to store first (shape 5).
    deferred: AppendInput | None = None


class StoreSnapshotsInput(_Model):
    """Fault snapshots to store (name -> text as the workflow made it, see
    ``activities/snapshots.py``), for the turn ``correlation_id``."""

    correlation_id: str
    snapshots: dict[str, str]


class StoredSnapshots(_Model):
    """The stored snapshots' pointers (name -> ArtifactPointer JSON)."""

    pointers: dict[str, dict[str, Any]]
