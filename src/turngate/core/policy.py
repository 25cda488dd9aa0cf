"""The policy interface: what governance may see (I_context) and how a policy is loaded.

A policy is pure code loaded from a module path. It receives a :class:`PolicyInput`: a view of
the current intent plus the INTENT events the client referenced (:class:`GovernanceItem`).
EXECUTION output is structurally absent: a ``GovernanceItem`` can only be built from an INTENT,
and ``PolicyInput`` accepts nothing else (context-system invariant 1).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from turngate.core.canonical import CanonicalizationError, digest
from turngate.core.events import Event, EventDraft, EventKind
from turngate.core.review import ReviewSpec

OBSERVER_POLICY_ID = "turngate.observer"
OBSERVER_REASON = "gateway.observer_mode"

# DBL gateway module names (DBL_GATEWAY_POLICY_MODULE) mapped to turngate's built-ins.
DBL_MODULE_ALIASES: Mapping[str, str] = {
    "dbl_policy.allow_all": "turngate.policies.allow_all",
    "dbl_policy.deny_all": "turngate.policies.deny_all",
    "dbl_policy.max_user_messages": "turngate.policies.max_user_messages",
}

ReasonCode = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class PolicyLoadError(ValueError):
    """The configured policy cannot be loaded; the process must not start."""

    code = "policy.load_failed"


class InvalidIntentError(ValueError):
    """A stored INTENT lacks what governance needs (``payload.payload.message``)."""

    code = "INTENT_INVALID"


def intent_message(event: EventDraft) -> str | None:
    """The user message of an INTENT (``payload.payload.message``), or None."""
    body = event.payload.get("payload")
    message = body.get("message") if isinstance(body, Mapping) else None
    return message if isinstance(message, str) else None


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class IntentView(_Frozen):
    """The current intent as governance sees it (identity + what the client declared)."""

    intent_type: str
    thread_id: str
    turn_id: str
    parent_turn_id: str | None
    actor: str
    lane: str
    stream_id: str
    message: str
    inputs: dict[str, Any]
    declared_tools: tuple[str, ...]
    requested_model_id: str | None

    @classmethod
    def from_intent(cls, event: EventDraft) -> IntentView:
        if event.kind != EventKind.INTENT:
            raise ValueError(f"IntentView needs an INTENT event, got {event.kind}")
        message = intent_message(event)
        if message is None:
            raise InvalidIntentError("the INTENT has no payload.payload.message string")
        inputs = event.payload.get("inputs") or {}
        tools = event.payload.get("declared_tools") or []
        model = event.payload.get("requested_model_id")
        if not isinstance(inputs, dict) or not isinstance(tools, list):
            raise InvalidIntentError("the INTENT's inputs/declared_tools have the wrong type")
        return cls(
            intent_type=event.intent_type,
            thread_id=event.thread_id,
            turn_id=event.turn_id,
            parent_turn_id=event.parent_turn_id,
            actor=event.actor,
            lane=event.lane,
            stream_id=event.stream_id,
            message=message,
            inputs=inputs,
            declared_tools=tuple(str(tool) for tool in tools),
            requested_model_id=model if isinstance(model, str) else None,
        )


class GovernanceItem(_Frozen):
    """One referenced INTENT, projected for governance. Built from INTENT events only."""

    event_kind: Literal["INTENT"] = "INTENT"
    event_index: int
    event_digest: str
    actor: str
    intent_type: str
    message: str | None
    inputs: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _only_intents(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "kind" in data:
            if str(data["kind"]) != EventKind.INTENT:
                raise ValueError(
                    f"a governance item cannot be built from a {data['kind']} event: "
                    "policy sees INTENT payloads only (context-system invariant 1)"
                )
            data = Event.model_validate(dict(data))
        if isinstance(data, EventDraft):
            if data.kind != EventKind.INTENT:
                raise ValueError(
                    f"a governance item cannot be built from a {data.kind} event: "
                    "policy sees INTENT payloads only (context-system invariant 1)"
                )
            if not isinstance(data, Event):
                raise ValueError("a governance item needs a recorded event (index, digest)")
            inputs = data.payload.get("inputs")
            return {
                "event_index": data.index,
                "event_digest": data.digest,
                "actor": data.actor,
                "intent_type": data.intent_type,
                "message": intent_message(data),
                "inputs": inputs if isinstance(inputs, dict) else {},
            }
        return data

    @classmethod
    def from_event(cls, event: Event) -> GovernanceItem:
        return cls.model_validate(event)


class PolicyInput(_Frozen):
    """Everything a policy may read: the current intent and I_context (INTENTs only)."""

    intent: IntentView
    i_context: tuple[GovernanceItem, ...] = ()


def build_policy_input(intent: Event, governance_events: Sequence[Event]) -> PolicyInput:
    """PolicyInput for ``intent`` from the resolved governance (INTENT) events."""
    items = sorted(
        (GovernanceItem.from_event(event) for event in governance_events),
        key=lambda item: (item.event_index, item.event_digest),
    )
    return PolicyInput(intent=IntentView.from_intent(intent), i_context=tuple(items))


class PolicyDecision(_Frozen):
    """What a policy returns. At least one reason code is required. ``REVIEW``: allowed only
    once a person approves it, as ``review`` says (docs/REVIEWS.md)."""

    decision: Literal["ALLOW", "DENY", "REVIEW"]
    reason_codes: tuple[ReasonCode, ...] = Field(min_length=1)
    review: ReviewSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _default_spec(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and data.get("decision") == "REVIEW" and data.get("review") is None:
            return {**data, "review": ReviewSpec()}
        return data

    @model_validator(mode="after")
    def _review_spec(self) -> PolicyDecision:
        if self.decision != "REVIEW" and self.review is not None:
            raise ValueError("only a REVIEW decision carries a review spec")
        return self

    @property
    def allowed(self) -> bool:
        return self.decision == "ALLOW"

    @classmethod
    def allow(cls, *reason_codes: str) -> PolicyDecision:
        return cls(decision="ALLOW", reason_codes=reason_codes)

    @classmethod
    def deny(cls, *reason_codes: str) -> PolicyDecision:
        return cls(decision="DENY", reason_codes=reason_codes)

    @classmethod
    def needs_review(cls, *reason_codes: str, spec: ReviewSpec | None = None) -> PolicyDecision:
        return cls(decision="REVIEW", reason_codes=reason_codes, review=spec or ReviewSpec())


@runtime_checkable
class Policy(Protocol):
    """A governance policy: pure, deterministic, no I/O."""

    policy_id: str
    policy_version: str

    def config(self) -> dict[str, Any]:
        """The policy's effective configuration (JSON); its digest is pinned in every DECISION."""
        ...

    def evaluate(self, policy_input: PolicyInput) -> PolicyDecision: ...


class ObserverPolicy:
    """No policy configured: every intent is recorded and DENIED (``gateway.observer_mode``)."""

    policy_id = OBSERVER_POLICY_ID
    policy_version = "1"

    def config(self) -> dict[str, Any]:
        return {"mode": "observer"}

    def evaluate(self, policy_input: PolicyInput) -> PolicyDecision:
        return PolicyDecision.deny(OBSERVER_REASON)


@dataclass(frozen=True)
class LoadedPolicy:
    """A validated policy with its identity and the digest of its configuration."""

    policy: Policy
    policy_id: str
    policy_version: str
    config_digest: str
    module: str | None
    object_name: str

    def evaluate(self, policy_input: PolicyInput) -> PolicyDecision:
        return self.policy.evaluate(policy_input)

    def describe(self) -> dict[str, str]:
        """``{policy_id, policy_version, config_digest}`` as recorded in a DECISION."""
        return {
            "policy_id": self.policy_id,
            "policy_version": self.policy_version,
            "config_digest": self.config_digest,
        }


def _split_module(module: str, object_name: str) -> tuple[str, str]:
    module = module.strip()
    if ":" in module:
        module, _, obj = module.partition(":")
        object_name = obj.strip() or object_name
        module = module.strip()
    if not module:
        raise PolicyLoadError("the policy module name is empty")
    return DBL_MODULE_ALIASES.get(module, module), object_name.strip() or "POLICY"


def _validated(candidate: Any, module: str | None, object_name: str) -> LoadedPolicy:
    where = f"{module}:{object_name}" if module else "observer policy"
    missing = [name for name in ("evaluate", "config") if not callable(getattr(candidate, name, None))]
    if missing:
        raise PolicyLoadError(f"{where} is not a policy: no callable {' or '.join(missing)}()")
    for attr in ("policy_id", "policy_version"):
        value = getattr(candidate, attr, None)
        if not isinstance(value, str) or not value.strip():
            raise PolicyLoadError(f"{where}: {attr} must be a non-empty string, got {value!r}")
    try:
        config = candidate.config()
    except Exception as exc:
        raise PolicyLoadError(f"{where}: config() failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(config, Mapping):
        raise PolicyLoadError(f"{where}: config() must return a JSON object, got {type(config).__name__}")
    try:
        config_digest = digest(dict(config))
    except CanonicalizationError as exc:
        raise PolicyLoadError(f"{where}: config() is not canonical JSON: {exc}") from exc
    return LoadedPolicy(
        policy=candidate,
        policy_id=candidate.policy_id,
        policy_version=candidate.policy_version,
        config_digest=config_digest,
        module=module,
        object_name=object_name,
    )


@lru_cache(maxsize=64)
def _load(module: str | None, object_name: str) -> LoadedPolicy:
    if module is None:
        return _validated(ObserverPolicy(), None, object_name)
    try:
        loaded_module = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise PolicyLoadError(f"policy module {module!r} not found: {exc}") from exc
    except Exception as exc:
        raise PolicyLoadError(
            f"importing policy module {module!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not hasattr(loaded_module, object_name):
        raise PolicyLoadError(
            f"policy module {module!r} has no object {object_name!r} "
            "(set TURNGATE_POLICY_OBJECT or use 'module:object')"
        )
    candidate = getattr(loaded_module, object_name)
    if isinstance(candidate, type) or (callable(candidate) and not hasattr(candidate, "evaluate")):
        # A class or factory (DBL convention): instantiate it without arguments.
        try:
            candidate = candidate()
        except Exception as exc:
            raise PolicyLoadError(f"{module}:{object_name}() failed: {type(exc).__name__}: {exc}") from exc
    return _validated(candidate, module, object_name)


def load_policy(module: str | None, object_name: str = "POLICY") -> LoadedPolicy:
    """Load (and cache) the policy object ``object_name`` from ``module``.

    ``None`` (or an empty string) selects the observer policy. ``module`` may be written
    ``"pkg.mod:OBJECT"``; the DBL names ``dbl_policy.allow_all`` / ``dbl_policy.deny_all`` map to
    turngate's built-ins. Raises :class:`PolicyLoadError` with a clear message.
    """
    if module is None or not module.strip():
        return _load(None, OBSERVER_POLICY_ID)
    return _load(*_split_module(module, object_name))


def clear_policy_cache() -> None:
    """Forget loaded policies (tests)."""
    _load.cache_clear()
