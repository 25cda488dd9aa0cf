"""The DECISION and EXECUTION event payloads as typed, frozen models.

A ledger event stores its payload as a JSON object (``EventDraft.payload``) and its digest covers
that object's canonical bytes. ``as_payload()`` gives exactly the object the gateway has always
recorded: an optional part that is not set is an absent key, never a ``null``, so the digests of
recorded events and of new ones are computed over the same shapes (tests/core/test_core_payloads.py
holds the canonical bytes of every shape).

Changes are new models (``model_copy``), never in-place edits: :meth:`DecisionPayload.denied` is
the one way a decision becomes a DENY after the policy spoke (a prompt, model, client-context or
external-ref failure, or an artifact store that failed), :meth:`ExecutionPayload.redacted_by` the
one way an answer is withheld.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from turngate.core.events import OBS_KEY

#: The reason code (and ``error.code``) of a step whose artifacts could not be stored.
SYSTEM_ERROR = "SYSTEM_ERROR"


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Optional fields written only when set: ``None`` means the key is absent.
    ABSENT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset()

    def _dump(self, exclude: set[str] | None = None) -> dict[str, Any]:
        dumped = self.model_dump(mode="json", exclude=exclude)
        return {k: v for k, v in dumped.items() if not (v is None and k in self.ABSENT_WHEN_NONE)}


class TokenBudget(_Payload):
    """The token budget the turn's context was assembled within, and how tokens were counted."""

    tokens: int
    estimator: str


class RedactionSource(_Payload):
    """The ledger event a turn's redaction note was read from: its parent turn's redacted
    EXECUTION (named by the INTENT's ``parent_turn_id``, not by a declared ref), so the DECISION
    records exactly which event, with its digest, went into the system prompt."""

    event_index: int
    event_digest: str
    turn_id: str
    reason_code: str


class PromptRecord(_Payload):
    """The pinned prompt a DECISION records: the digests that enter the context spec, where the
    snapshot came from, the layers built and the tools offered."""

    snapshot_digest: str
    profile_digest: str
    system_prompt_sha256: str
    task_id: str | None
    provider: str
    profile: str
    done_event: str | None
    snapshot_artifact: dict[str, Any] | None
    pinned_by_index: int | None
    redaction_context: str | None
    layers: list[dict[str, Any]]
    #: Where ``redaction_context`` came from; absent (not null) without one, so prompt records
    #: without a redaction note keep their recorded shape.
    redaction_source: RedactionSource | None = Field(default=None, exclude_if=lambda v: v is None)
    skipped_layers: list[dict[str, Any]]
    tools_offered: list[str] = Field(default_factory=list)

    def pinned(self) -> dict[str, str]:
        """The part of the prompt that enters the context spec (and so the context digest)."""
        return {
            "snapshot_digest": self.snapshot_digest,
            "profile_digest": self.profile_digest,
            "system_prompt_sha256": self.system_prompt_sha256,
        }


class ExecutionPlan(_Payload):
    """What the DECISION says the turn will run with, beside the policy's answer: the model as
    requested and resolved, the token budget, the pinned prompt. Written at the top level of the
    DECISION payload; none of its keys may be a key of the decision itself (``extra="forbid"``
    refuses anything else)."""

    ABSENT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"token_budget", "prompt"})

    token_budget: TokenBudget | None = None
    provider: str | None
    requested_model_id: str | None
    resolved_model_id: str | None
    prompt: PromptRecord | None = None


class DecisionPayload(_Payload):
    """The DECISION event payload."""

    ABSENT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset(
        {"error", "shadow", "external_context", "spend", "review"}
    )

    decision: Literal["ALLOW", "DENY"]
    reason_codes: list[str]
    policy: dict[str, Any]  # LoadedPolicy.describe(): id, version, config digest
    policy_id: str
    policy_version: str
    context_digest: str | None
    context_spec: dict[str, Any] | None
    boundary: dict[str, Any]  # {"context_config_digest": ...}
    normative_input_digests: list[str]
    resolved_refs: list[dict[str, Any]]
    error: dict[str, Any] | None = None  # {code, detail, ...}: its keys depend on the failure
    plan: ExecutionPlan | None = None  # written flat, beside the decision's own keys
    shadow: list[dict[str, Any]] | None = None  # one entry per shadow policy (core/shadow.py)
    external_context: list[dict[str, Any]] | None = None  # what each external ref pinned
    spend: dict[str, Any] | None = None  # the spend plan of a turn with a model alias or a budget
    review: dict[str, Any] | None = None  # a human review the policy asked for (core/review.py)

    @property
    def allowed(self) -> bool:
        return self.decision == "ALLOW"

    def denied(self, reason_code: str, error: Mapping[str, Any] | None = None) -> DecisionPayload:
        """This decision as a DENY for ``reason_code`` (its only reason), recording ``error``
        when given (an earlier error is kept otherwise)."""
        update: dict[str, Any] = {"decision": "DENY", "reason_codes": [reason_code]}
        if error is not None:
            update["error"] = dict(error)
        return self.model_copy(update=update)

    def as_payload(self) -> dict[str, Any]:
        payload = self._dump(exclude={"plan"})
        if self.plan is not None:
            payload |= self.plan._dump()
        return payload


class ExecutionPayload(_Payload):
    """The EXECUTION event payload: the provider's answer or error, and what the workflow
    admitted of it (tool calls, phase transition) or withheld (redaction)."""

    ABSENT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset(
        {
            "usage",
            "error",
            "output_artifact",
            "output_truncated",
            "tool_calls",
            "tool_calls_rejected",
            "exchanges_count",
            "redacted",
            "redaction",
            "obs",
            "spend",
            "output_check",
        }
    )

    provider: str | None
    model_id: str | None
    requested_model_id: str | None
    resolved_model_id: str | None
    context_digest: str | None
    output_text: str = ""
    usage: dict[str, int | None] | None = None
    error: dict[str, Any] | None = None  # {provider, status_code, code, message} (+ SYSTEM_ERROR's)
    output_artifact: dict[str, Any] | None = None  # the full answer when over the inline limit
    output_truncated: bool | None = None
    tool_calls: list[dict[str, Any]] | None = None  # the admitted calls (forwarded to the client)
    tool_calls_rejected: list[dict[str, Any]] | None = None
    # Written together: the transition an admitted call signalled and the application's target
    # phase for it (null when the application maps none).
    phase_transition: str | None = None
    next_phase: str | None = None
    exchanges_count: int | None = None
    redacted: bool | None = None
    redaction: dict[str, Any] | None = None  # {rule_id, reason_code, detail}
    spend: dict[str, Any] | None = None  # which candidate of the spend plan answered, at what cost
    # The answer checked against the JSON schema the client asked for (request_options.OutputCheck).
    output_check: dict[str, Any] | None = None
    obs: dict[str, Any] | None = None  # observational (``_obs``): outside the event digest

    def redacted_by(self, rule_id: Any, reason_code: Any, detail: Any) -> ExecutionPayload:
        """The record of an answer a safety rule withheld: no text, and which rule fired."""
        return self.model_copy(
            update={
                "output_text": "",
                "redacted": True,
                "redaction": {"rule_id": rule_id, "reason_code": reason_code, "detail": detail},
            }
        )

    def failed(self, error: Mapping[str, Any]) -> ExecutionPayload:
        """This execution with ``error``; an earlier error (the provider's) becomes its ``cause``."""
        merged = dict(error) | ({"cause": self.error} if self.error else {})
        return self.model_copy(update={"error": merged})

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> ExecutionPayload:
        """The inverse of :meth:`as_payload`."""
        fields = dict(payload)
        obs = fields.pop(OBS_KEY, None)
        return cls.model_validate(fields | ({"obs": obs} if obs is not None else {}))

    def as_payload(self) -> dict[str, Any]:
        payload = self._dump(exclude={"phase_transition", "next_phase", "obs"})
        if self.phase_transition is not None:
            payload |= {"phase_transition": self.phase_transition, "next_phase": self.next_phase}
        if self.obs is not None:
            payload[OBS_KEY] = dict(self.obs)
        return payload
