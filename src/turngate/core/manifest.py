"""Context manifests (context observability): what the model saw, why, and what was left out, per step.

Pointers and hashes only: item ids are event digests, sources are event indexes, large content
lives in the artifact store and is referenced by :class:`ArtifactPointer`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    field_validator,
    model_serializer,
)

from turngate.core.canonical import digest
from turngate.core.client_context import recorded_client_context

if TYPE_CHECKING:
    from turngate.core.assembly import Assembly
    from turngate.core.decision import DecisionOutcome
    from turngate.core.events import Event
    from turngate.core.external import ExternalContext
    from turngate.core.system_prompt import SystemPrompt

MANIFEST_SCHEMA_VERSION = "turngate.manifest.1"

ItemType = Literal["user_input", "tool_output", "memory", "evidence", "policy", "summary"]
ExcludedReason = Literal[
    "budget_limit",
    "policy_filter",
    "not_admitted_for_execution",
    "score_below_threshold",
    "over_top_k",
    "fetch_refused",
    "no_prompt_content",
]
Sha256 = Annotated[str, StringConstraints(pattern=r"^(sha256:)?[0-9a-f]{64}$")]

_DRIVE = re.compile(r"^[A-Za-z]:")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class InclusionEntry(_Frozen):
    """An item that is in the prompt, and why."""

    item_id: str
    item_type: ItemType
    source_ref: int | str
    included_reason: str


class ExclusionEntry(_Frozen):
    """An item that was available but left out, and why."""

    item_id: str
    item_type: ItemType
    source_ref: int | str
    excluded_reason: ExcludedReason


class ArtifactPointer(_Frozen):
    """Where raw bytes live: a workspace-relative path plus their hash and size."""

    artifact_id: str
    path: str
    sha256: Sha256
    size_bytes: int = Field(ge=0)
    created_at: str | None = None

    def recorded(self) -> dict[str, Any]:
        """The pointer as events and manifests record it: without ``created_at``. When an object
        was stored depends on the store and the moment (a file's mtime, S3's ``LastModified``);
        a step run again, on another worker or after a rewrite, must record the same bytes."""
        return self.model_dump(mode="json", exclude={"created_at"})

    @field_validator("path")
    @classmethod
    def _workspace_relative(cls, path: str) -> str:
        if not path or path.startswith("/") or "\\" in path or _DRIVE.match(path):
            raise ValueError("artifact paths are workspace-relative POSIX paths")
        if any(part in ("", ".", "..") for part in path.split("/")):
            raise ValueError("artifact paths have no empty, '.' or '..' segments")
        return path


class ContextManifest(_Frozen):
    """The context manifest for one step (one turn's prompt assembly)."""

    schema_version: str = MANIFEST_SCHEMA_VERSION
    run_id: str
    step_id: str
    snapshot_id: str | None
    intent: dict[str, Any]
    retrieval_query: dict[str, Any] | None
    candidate_chunk_ids: tuple[str, ...]
    selected_chunk_ids: tuple[str, ...]
    reranker_model: str | None = None
    reranker_version: str | None = None
    token_budget: int
    estimated_tokens: int
    compiler_version: str
    prefix_hash: str
    prefix_length: int
    inclusion_log: tuple[InclusionEntry, ...]
    exclusion_log: tuple[ExclusionEntry, ...]
    artifacts: tuple[ArtifactPointer, ...] = ()
    # One record per case_query / artifact.handle ref: pinned index version, query, candidates
    # with scores, ranking method and version, exclusions; or the handle's digest or refusal.
    external_refs: tuple[dict[str, Any], ...] = ()
    # The 1-in-N sampling of successful turns (core/sampling.py), on an EXECUTION's manifest:
    # {"one_in": N, "sampled": bool}. Absent while sampling is off (earlier manifests' bytes).
    snapshot_sampling: dict[str, Any] | None = None

    @model_serializer(mode="wrap")
    def _without_sampling_when_off(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        if dumped.get("snapshot_sampling") is None:
            dumped.pop("snapshot_sampling", None)
        return dumped


def _intent_pointers(outcome: DecisionOutcome, intent: Event) -> dict[str, Any]:
    """What a manifest says about the intent and its decision: digests and ids, never text."""
    payload = outcome.payload
    boundary = payload.get("boundary") or {}
    client = recorded_client_context(intent.payload)
    # The client's sampling temperature, only when it sent one (older manifests are unchanged).
    sampling: dict[str, Any] = {}
    if client is not None and client.temperature is not None:
        sampling["temperature"] = client.temperature
    # The client's request options (structured output schema, tool choice, sampling), by digest,
    # only when it sent some.
    if client is not None and client.request_options is not None:
        sampling["request_options_digest"] = digest(client.request_options.recorded())
    return sampling | {
        "event_digest": intent.digest,
        "event_index": intent.index,
        "thread_id": intent.thread_id,
        "turn_id": intent.turn_id,
        "intent_type": intent.intent_type,
        "decision": payload.get("decision"),
        "reason_codes": payload.get("reason_codes"),
        "context_digest": outcome.context_digest,
        "context_config_digest": boundary.get("context_config_digest"),
        "policy": payload.get("policy"),
    }


def build_manifest(
    outcome: DecisionOutcome,
    assembly: Assembly,
    *,
    intent: Event,
    run_id: str,
    step_id: str,
    snapshot_id: str | None = None,
    artifacts: Sequence[ArtifactPointer] = (),
    external: ExternalContext | None = None,
    system: SystemPrompt | None = None,
) -> ContextManifest:
    """The manifest of an ALLOWed turn from its decision and its assembly.

    With a prompt pack, each layer of the system prompt leads the inclusion log (its block's
    sha256, ``source_ref`` ``prompt_layer:<name>``) and each skipped layer is in the exclusion
    log (``no_prompt_content``).

    ``intent`` holds digest pointers (never the message text); ``retrieval_query`` is the
    declared refs (and the ``case_query`` refs' queries); ``reranker_model`` / ``_version`` name
    the ranking of those queries; candidates are every resolved or dropped ref, then the
    retrieval candidates; selected are the items whose content is in the prompt.
    """
    resolution = outcome.resolution
    candidates: list[str] = []
    if resolution is not None:
        ranked = [(ref.event_index, ref.event_digest) for ref in resolution.resolved_refs]
        ranked += [(ref.event_index, ref.event_digest) for ref in resolution.dropped_refs]
        candidates = [item_digest for _, item_digest in sorted(ranked)]
    candidates += _external_candidates(external)
    selected = [
        entry.item_id
        for entry in assembly.included
        if entry.included_reason in ("declared_ref", *EXTERNAL_INCLUDED_REASONS)
    ]
    declared = (outcome.context_spec or {}).get("declared_refs", [])
    return ContextManifest(
        run_id=run_id,
        step_id=step_id,
        snapshot_id=snapshot_id,
        intent=_intent_pointers(outcome, intent),
        retrieval_query=_retrieval_query(declared, external),
        candidate_chunk_ids=tuple(candidates),
        selected_chunk_ids=tuple(selected),
        **_reranker(external),
        token_budget=assembly.budget_tokens,
        estimated_tokens=assembly.estimated_tokens,
        compiler_version=assembly.compiler_version,
        prefix_hash=assembly.prefix_hash,
        prefix_length=assembly.prefix_length,
        inclusion_log=_layers_included(system) + tuple(assembly.included),
        exclusion_log=_layers_skipped(system)
        + tuple(assembly.excluded)
        + (external.excluded if external else ()),
        artifacts=tuple(artifacts),
        external_refs=external.records if external else (),
    )


EXTERNAL_INCLUDED_REASONS = ("declared_case_query", "declared_handle")
#: ``included_reason`` of a system-prompt layer (the profile puts it in every prompt).
PROMPT_LAYER_REASON = "system_prompt_layer"


def _layers_included(system: SystemPrompt | None) -> tuple[InclusionEntry, ...]:
    return tuple(
        InclusionEntry(
            item_id=layer.sha256,
            item_type="policy",
            source_ref=f"prompt_layer:{layer.name}",
            included_reason=PROMPT_LAYER_REASON,
        )
        for layer in (system.layers if system else ())
    )


def _layers_skipped(system: SystemPrompt | None) -> tuple[ExclusionEntry, ...]:
    return tuple(
        ExclusionEntry(
            item_id=f"prompt_layer:{layer.name}",
            item_type="policy",
            source_ref=f"prompt_layer:{layer.name}",
            excluded_reason="no_prompt_content",
        )
        for layer in (system.skipped if system else ())
    )


def _external_candidates(external: ExternalContext | None) -> list[str]:
    """Retrieval candidates in rank order, then fetched handles, ref by ref."""
    ids: list[str] = []
    for record in external.records if external else ():
        ids += record.get("candidate_chunk_ids") or []
        if record.get("content_sha256"):
            ids.append(record["content_sha256"])
    return ids


def _reranker(external: ExternalContext | None) -> dict[str, str | None]:
    """``reranker_model`` / ``reranker_version``: the ranking method and version the turn's
    ``case_query`` refs ranked their candidates with (``hybrid-linear`` / ``1``); several
    distinct ones are listed in declaration order, comma-separated. None without retrieval."""
    methods: dict[str, None] = {}
    versions: dict[str, None] = {}
    for record in external.records if external else ():
        if record.get("ref_type") == "case_query" and record.get("ranking_method"):
            methods.setdefault(str(record["ranking_method"]), None)
            versions.setdefault(str(record.get("ranking_version") or ""), None)
    if not methods:
        return {"reranker_model": None, "reranker_version": None}
    return {
        "reranker_model": ",".join(methods),
        "reranker_version": ",".join(v for v in versions if v) or None,
    }


def _retrieval_query(declared: Any, external: ExternalContext | None) -> dict[str, Any]:
    query: dict[str, Any] = {"mode": "declared_refs", "declared_refs": declared}
    cases = [r for r in (external.records if external else ()) if r.get("ref_type") == "case_query"]
    if cases:
        query["case_queries"] = [
            {key: r.get(key) for key in ("case_id", "index_version", "retrieval_query", "top_k", "min_score")}
            for r in cases
        ]
    return query


def build_denied_manifest(
    outcome: DecisionOutcome,
    *,
    intent: Event,
    run_id: str,
    step_id: str,
    snapshot_id: str | None = None,
    external: ExternalContext | None = None,
) -> ContextManifest:
    """The manifest of a DENIED turn: nothing reached a model; every resolved ref is excluded
    with ``policy_filter`` (a ref error resolves nothing, so its logs are empty)."""
    from turngate.core.assembly import COMPILER_VERSION, item_type_for_kind  # cycle: assembly imports us

    resolution = outcome.resolution
    refs = list(resolution.resolved_refs) if resolution is not None else []
    return ContextManifest(
        run_id=run_id,
        step_id=step_id,
        snapshot_id=snapshot_id,
        intent=_intent_pointers(outcome, intent),
        retrieval_query=_retrieval_query((outcome.context_spec or {}).get("declared_refs", []), external),
        candidate_chunk_ids=tuple(ref.event_digest for ref in refs) + tuple(_external_candidates(external)),
        external_refs=external.records if external else (),
        selected_chunk_ids=(),
        **_reranker(external),
        token_budget=0,
        estimated_tokens=0,
        compiler_version=COMPILER_VERSION,
        prefix_hash=digest([]),
        prefix_length=0,
        inclusion_log=(),
        exclusion_log=tuple(
            ExclusionEntry(
                item_id=ref.event_digest,
                item_type=item_type_for_kind(ref.event_kind),
                source_ref=ref.event_index,
                excluded_reason="policy_filter",
            )
            for ref in refs
        )
        + tuple(
            ExclusionEntry(
                item_id=item.item_id,
                item_type="evidence",
                source_ref=item.source_ref,
                excluded_reason="policy_filter",
            )
            for item in (external.items if external else ())
        )
        + (external.excluded if external else ()),
    )


def parse_pointer(raw: Mapping[str, Any]) -> ArtifactPointer:
    """A pointer :func:`server_pointers` found, validated on its known fields (any other key is
    left out); raises pydantic's ``ValidationError``."""
    if raw.keys() <= _POINTER_FIELDS:  # the usual case: nothing to leave out
        return ArtifactPointer.model_validate(raw)
    return ArtifactPointer.model_validate({k: raw[k] for k in _POINTER_FIELDS if k in raw})


_POINTER_FIELDS = frozenset(ArtifactPointer.model_fields)
