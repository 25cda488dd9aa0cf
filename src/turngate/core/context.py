"""Context configuration, the context spec and the context digest (the context system).

``context_digest`` = sha256 over the canonical JSON of ``{context_spec, assembled_context}``:

* ``context_spec``: identity, intent (type + user input), declared refs, resolved refs (with event
  digests, execution_only included), normalization (applied rules + config digest), assembly
  rules and the normative input digests.
* ``external_refs`` (spec version 2): the digest of each declared ``case_query`` /
  ``artifact.handle`` ref, in declaration order, and the digest of what they resolved to (the
  DECISION's ``external_context``: index versions, selected chunk ids, fetched content sha256 or
  refusal codes), ``None`` while unresolved (a turn denied before retrieval).
* ``assembled_context``: normative material only: the INTENT digests, the digests of the
  governance items the policy saw, and the digest of the policy's view of the current intent.

Never inside: timestamps, storage ids, ``_obs`` fields, EXECUTION output content (an EXECUTION is
pinned by its event digest in ``resolved_refs`` only). Everything is recomputable from the stored
INTENT, the stored candidate events and the config: see :func:`build_context`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from turngate.core.canonical import digest
from turngate.core.events import EXTERNAL_REF_TYPES, DeclaredRef, Event, ExternalRef
from turngate.core.policy import GovernanceItem, IntentView, PolicyInput, build_policy_input
from turngate.core.refs import (
    RULE_FILTER_INTENT_ONLY,
    RULE_SCOPE_BOUND,
    RULE_SORT_CANONICAL,
    Resolution,
    declared_ref_sort_key,
    external_refs_of,
    parse_declared_refs,
    resolve_declared_refs,
)
from turngate.core.system_context import CHAT_HISTORY, SYSTEM_CONTEXT, PromptShape

#: Version 2 adds ``external_refs``: the declared ``case_query`` / ``artifact.handle`` refs and
#: what they resolved to are inside the digest scope (recorded by turns that declare such refs;
#: the others keep version 1). Version 3 resolves ``event`` refs by turn or correlation id to the
#: whole turn (``EXPAND_TURN_REFS``: the INTENT and its EXECUTION) and has ``external_refs``
#: exactly when the turn declares external refs; it is recorded by turns that declare ledger
#: refs. DECISIONs are recomputed under the version their spec names. The workflow picks the
#: version per turn (``workflows/context_scope.py``); the default here is what a caller that
#: names none (and a DECISION without a spec: a ref error, which no version changes) gets.
CONTEXT_SPEC_SCHEMA_V1 = "turngate.ctxspec.1"
CONTEXT_SPEC_SCHEMA_V2 = "turngate.ctxspec.2"
CONTEXT_SPEC_SCHEMA_V3 = "turngate.ctxspec.3"
CONTEXT_SPEC_SCHEMA_VERSION = CONTEXT_SPEC_SCHEMA_V2
CONTEXT_SPEC_SCHEMA_VERSIONS: tuple[str, ...] = (
    CONTEXT_SPEC_SCHEMA_V1,
    CONTEXT_SPEC_SCHEMA_V2,
    CONTEXT_SPEC_SCHEMA_V3,
)
DEFAULT_CONFIG_RESOURCE = ("turngate.config", "context.json")

# Rules a config file may list, in the order turngate applies them.
CONFIGURABLE_RULES: tuple[str, ...] = (
    RULE_SCOPE_BOUND,
    RULE_FILTER_INTENT_ONLY,
    RULE_SORT_CANONICAL,
)
REQUIRED_RULES: frozenset[str] = frozenset({RULE_FILTER_INTENT_ONLY, RULE_SORT_CANONICAL})

ENV_MAX_REFS = "TURNGATE_CONTEXT_MAX_REFS"
ENV_EMPTY_REFS_POLICY = "TURNGATE_CONTEXT_EMPTY_REFS_POLICY"
ENV_ALLOW_EXECUTION_REFS = "TURNGATE_CONTEXT_ALLOW_EXECUTION_REFS"
ENV_ENFORCE_SCOPE_BOUND = "TURNGATE_CONTEXT_ENFORCE_SCOPE_BOUND"
ENV_EMPTY_REFS_FIRST_TURN = "TURNGATE_CONTEXT_EMPTY_REFS_FIRST_TURN"
ENV_PROMPT_SHAPE = "TURNGATE_CONTEXT_PROMPT_SHAPE"

_ENV_NAMES = (
    ENV_MAX_REFS,
    ENV_EMPTY_REFS_POLICY,
    ENV_EMPTY_REFS_FIRST_TURN,
    ENV_ALLOW_EXECUTION_REFS,
    ENV_ENFORCE_SCOPE_BOUND,
    ENV_PROMPT_SHAPE,
)
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class ContextConfigError(ValueError):
    """The context configuration (file or environment) is invalid; startup must stop."""

    code = "context.config_invalid"


class ContextSettings(BaseModel):
    """The ``context`` section. Unknown keys (DBL's ``handle_content_fetch``) are ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    max_refs: StrictInt = Field(50, ge=0, le=10_000)
    empty_refs_policy: Literal["DENY", "ALLOW_EMPTY"] = "DENY"
    # Under DENY, a thread's first turn (no parent) may still declare no refs (``ALLOW``, as the
    # published DBL gateway lets a first chat.message through); ``DENY`` exempts nothing, as the
    # context system states. Only a non-default value enters the config digest.
    empty_refs_first_turn: Literal["ALLOW", "DENY"] = "ALLOW"
    # Accepted and pinned for DBL compatibility; auto-expansion is a non-goal of the context system, so
    # nothing expands the thread. Documented in docs/CORE.md.
    expand_last_n: StrictInt = Field(10, ge=0)
    allow_execution_refs_for_prompt: StrictBool = True
    canonical_sort: Literal["event_index_asc"] = "event_index_asc"
    enforce_scope_bound: StrictBool = True
    # How the resolved context reaches the model (core/system_context.py): chat_history sends the
    # referenced turns as chat messages; system_context sends [system_context, user_message], as
    # the context system's "Use in Execution" states. Only a non-default value enters the config
    # digest and the context spec (assembly_rules.prompt_shape).
    prompt_shape: PromptShape = CHAT_HISTORY


class NormalizationConfig(BaseModel):
    """The ``normalization`` section; ``rules`` is kept in application order."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    rules: tuple[StrictStr, ...] = CONFIGURABLE_RULES

    @model_validator(mode="before")
    @classmethod
    def _no_enabled_conditional_rules(cls, data: Any) -> Any:
        conditional = data.get("conditional_rules") if isinstance(data, Mapping) else None
        if isinstance(conditional, Mapping):
            for name, spec in conditional.items():
                if isinstance(spec, Mapping) and spec.get("enabled") is True:
                    raise ValueError(
                        f"conditional rule {name} is enabled, but conditional rules are not "
                        "supported (no auto-expansion, a non-goal of the context system)"
                    )
        return data

    @field_validator("rules")
    @classmethod
    def _known_rules(cls, rules: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [rule for rule in rules if rule not in CONFIGURABLE_RULES]
        if unknown:
            raise ValueError(f"unknown rule(s) {unknown}; known: {list(CONFIGURABLE_RULES)}")
        if len(set(rules)) != len(rules):
            raise ValueError(f"duplicate rules in {list(rules)}")
        missing = sorted(REQUIRED_RULES - set(rules))
        if missing:
            raise ValueError(f"required rule(s) {missing} missing (context-system invariants 1 and 4)")
        return tuple(rule for rule in CONFIGURABLE_RULES if rule in rules)


class ContextConfig(BaseModel):
    """The context configuration (the context system's ``config/context.json``), after env overrides."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    schema_version: Literal["1"] = "1"
    context: ContextSettings = Field(default_factory=ContextSettings)
    normalization: NormalizationConfig = Field(default_factory=NormalizationConfig)

    @model_validator(mode="after")
    def _scope_rule_matches_switch(self) -> ContextConfig:
        listed = RULE_SCOPE_BOUND in self.normalization.rules
        if listed != self.context.enforce_scope_bound:
            raise ValueError(
                f"normalization.rules {'lists' if listed else 'does not list'} SCOPE_BOUND but "
                f"context.enforce_scope_bound is {str(self.context.enforce_scope_bound).lower()}"
            )
        return self

    def effective(self) -> dict[str, Any]:
        """The canonical effective configuration: what :func:`context_config_digest` covers.
        ``empty_refs_first_turn`` is in it only when set to ``DENY`` and ``prompt_shape`` only
        when ``system_context``, so configs that leave them at their defaults keep the digest
        they had before the options existed."""
        dumped = self.model_dump(mode="json")
        if self.context.empty_refs_first_turn == "ALLOW":
            del dumped["context"]["empty_refs_first_turn"]
        if self.context.prompt_shape == CHAT_HISTORY:
            del dumped["context"]["prompt_shape"]
        return dumped


#: id(cfg) -> (cfg, digest): the digest of each config object computed once. A ContextConfig is
#: immutable all the way down (frozen models, tuples, scalars), so its digest never changes; the
#: entry keeps the object alive so that its id cannot be reused by another object. Bounded.
_CONFIG_DIGESTS: dict[int, tuple[ContextConfig, str]] = {}
_CONFIG_DIGESTS_MAX = 64


def context_config_digest(cfg: ContextConfig) -> str:
    """Digest of the effective config (known keys only, after env overrides)."""
    cached = _CONFIG_DIGESTS.get(id(cfg))
    if cached is not None and cached[0] is cfg:
        return cached[1]
    value = digest(cfg.effective())
    if type(cfg) is ContextConfig:  # a subclass could be mutable: not cached
        if len(_CONFIG_DIGESTS) >= _CONFIG_DIGESTS_MAX:
            _CONFIG_DIGESTS.clear()
        _CONFIG_DIGESTS[id(cfg)] = (cfg, value)
    return value


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error.get("loc", ()))
        parts.append(f"{where}: {error.get('msg')}" if where else str(error.get("msg")))
    return "; ".join(parts)


def _read_config_text(path: Path | None) -> tuple[str, str]:
    if path is None:
        package, name = DEFAULT_CONFIG_RESOURCE
        source = "packaged turngate/config/context.json"
        try:
            return source, resources.files(package).joinpath(name).read_text(encoding="utf-8")
        except (OSError, ModuleNotFoundError) as exc:  # pragma: no cover - broken install
            raise ContextConfigError(f"{source} cannot be read: {exc}") from exc
    source = Path(path).as_posix()
    try:
        return source, Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ContextConfigError(f"context config {source} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ContextConfigError(f"context config {source} cannot be read: {exc}") from exc


def _env_bool(env: Mapping[str, str], name: str) -> bool | None:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return None
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ContextConfigError(f"{name}={env[name]!r} is not a boolean (use true/false, 1/0)")


def _env_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    raw = env.get(ENV_MAX_REFS, "").strip()
    if raw:
        try:
            overrides["max_refs"] = int(raw, 10)
        except ValueError as exc:
            raise ContextConfigError(f"{ENV_MAX_REFS}={raw!r} is not an integer") from exc
    raw = env.get(ENV_EMPTY_REFS_POLICY, "").strip()
    if raw:
        if raw.upper() not in ("DENY", "ALLOW_EMPTY"):
            raise ContextConfigError(f"{ENV_EMPTY_REFS_POLICY}={raw!r} must be DENY or ALLOW_EMPTY")
        overrides["empty_refs_policy"] = raw.upper()
    raw = env.get(ENV_EMPTY_REFS_FIRST_TURN, "").strip()
    if raw:
        if raw.upper() not in ("ALLOW", "DENY"):
            raise ContextConfigError(f"{ENV_EMPTY_REFS_FIRST_TURN}={raw!r} must be ALLOW or DENY")
        overrides["empty_refs_first_turn"] = raw.upper()
    raw = env.get(ENV_PROMPT_SHAPE, "").strip()
    if raw:
        if raw.lower() not in (CHAT_HISTORY, SYSTEM_CONTEXT):
            raise ContextConfigError(f"{ENV_PROMPT_SHAPE}={raw!r} must be {CHAT_HISTORY} or {SYSTEM_CONTEXT}")
        overrides["prompt_shape"] = raw.lower()
    allow = _env_bool(env, ENV_ALLOW_EXECUTION_REFS)
    if allow is not None:
        overrides["allow_execution_refs_for_prompt"] = allow
    scope = _env_bool(env, ENV_ENFORCE_SCOPE_BOUND)
    if scope is not None:
        overrides["enforce_scope_bound"] = scope
    return overrides


def load_context_config(path: Path | None = None, env: Mapping[str, str] | None = None) -> ContextConfig:
    """Load the context config from ``path`` (default: the packaged file) and apply ``env``.

    Environment overrides: ``TURNGATE_CONTEXT_MAX_REFS``, ``TURNGATE_CONTEXT_EMPTY_REFS_POLICY``,
    ``TURNGATE_CONTEXT_EMPTY_REFS_FIRST_TURN``,
    ``TURNGATE_CONTEXT_ALLOW_EXECUTION_REFS``, ``TURNGATE_CONTEXT_ENFORCE_SCOPE_BOUND`` (the last
    also adds/removes ``SCOPE_BOUND`` from the effective rules). Raises :class:`ContextConfigError`.
    """
    source, text = _read_config_text(path)
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ContextConfigError(f"context config {source} is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ContextConfigError(f"context config {source} must be a JSON object")
    try:
        cfg = ContextConfig.model_validate(raw)
    except ValidationError as exc:
        raise ContextConfigError(f"context config {source}: {_describe(exc)}") from exc

    env = env or {}
    overrides = _env_overrides(env)
    if not overrides:
        return cfg
    context = {**cfg.context.model_dump(), **overrides}
    rules = [rule for rule in cfg.normalization.rules if rule != RULE_SCOPE_BOUND]
    if context["enforce_scope_bound"]:
        rules.append(RULE_SCOPE_BOUND)
    try:
        return ContextConfig.model_validate(
            {
                "schema_version": cfg.schema_version,
                "context": context,
                "normalization": {"rules": rules},
            }
        )
    except ValidationError as exc:
        used = ", ".join(f"{name}={env[name]!r}" for name in _ENV_NAMES if env.get(name, "").strip())
        raise ContextConfigError(
            f"context config {source} with environment overrides {used}: {_describe(exc)}"
        ) from exc


# --------------------------------------------------------------------------- spec and digest


def canonical_declared_refs(
    intent: Event, declared: Sequence[DeclaredRef] | None = None
) -> list[dict[str, Any]]:
    """The declared refs as declared (every entry, duplicates kept), in canonical order.

    The client's own order stays in the INTENT event; the spec sorts by (ref_type, ref_id,
    version) so that equal requests get equal digests (context-system invariant 4). ``declared``:
    those refs already parsed and sorted (as :func:`resolve_declared_refs` returns them).
    """
    if declared is None:
        declared = sorted(parse_declared_refs(intent), key=declared_ref_sort_key)
    return [ref.model_dump(mode="json", exclude_none=True) for ref in declared]


def declares_external_refs(intent: Event) -> bool:
    """True when the INTENT declares a ``case_query`` or ``artifact.handle`` ref: then its
    context spec is version 2. A turn without one has nothing outside version 1's scope and
    keeps version 1 (its digest is what it always was)."""
    raw = intent.payload.get("declared_refs")
    return isinstance(raw, list) and any(
        isinstance(ref, Mapping) and ref.get("ref_type") in EXTERNAL_REF_TYPES for ref in raw
    )


def declares_ledger_refs(intent: Event) -> bool:
    """True when the INTENT declares at least one ref to a ledger event: then its context spec
    is version 3 (``EXPAND_TURN_REFS`` can change nothing for a turn without one)."""
    raw = intent.payload.get("declared_refs")
    return isinstance(raw, list) and any(
        not (isinstance(ref, Mapping) and ref.get("ref_type") in EXTERNAL_REF_TYPES) for ref in raw
    )


def expands_turn_refs(schema_version: str) -> bool:
    """Whether a context spec of ``schema_version`` resolves refs with ``EXPAND_TURN_REFS``."""
    return schema_version == CONTEXT_SPEC_SCHEMA_V3


def _has_external_scope(intent: Event, schema_version: str) -> bool:
    if schema_version == CONTEXT_SPEC_SCHEMA_V3:
        return declares_external_refs(intent)
    return schema_version == CONTEXT_SPEC_SCHEMA_V2


def spec_schema_version(spec: Mapping[str, Any] | None) -> str:
    """The schema version a stored context spec was built under (version 1 when unnamed)."""
    rules = spec.get("assembly_rules") if isinstance(spec, Mapping) else None
    version = rules.get("schema_version") if isinstance(rules, Mapping) else None
    return version if version in CONTEXT_SPEC_SCHEMA_VERSIONS else CONTEXT_SPEC_SCHEMA_V1


def external_scope(
    declared: Sequence[ExternalRef], resolved: Sequence[Mapping[str, Any]] | None
) -> dict[str, Any]:
    """Spec version 2's ``external_refs``: digests only (the refs and records carry floats and
    may be long; the INTENT and the DECISION's ``external_context`` hold them in full)."""
    return {
        "declared": [digest(ref.model_dump(mode="json", exclude_none=True)) for ref in declared],
        "resolved": None if resolved is None else digest([dict(record) for record in resolved]),
    }


def with_external_resolution(
    spec: Mapping[str, Any], assembled: Mapping[str, Any], resolved: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, Any], str]:
    """A version 2 spec once its external refs are resolved (the activity runs after the
    policy), and the context digest over it. A version 1 spec is returned as it is."""
    if "external_refs" not in spec:  # version 1, or version 3 without external refs
        return dict(spec), context_digest(spec, assembled)
    scope = dict(spec.get("external_refs") or {})
    scope["resolved"] = digest([dict(record) for record in resolved])
    rescoped = dict(spec) | {"external_refs": scope}
    return rescoped, context_digest(rescoped, assembled)


def build_context_spec(
    intent: Event,
    resolution: Resolution,
    cfg: ContextConfig,
    prompt: Mapping[str, Any] | None = None,
    declared: Sequence[DeclaredRef] | None = None,
    view: IntentView | None = None,
    *,
    schema_version: str = CONTEXT_SPEC_SCHEMA_VERSION,
    external_resolved: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The context spec: the context system's digest scope, plus (when prompt packs are in use) the pinned
    prompt snapshot and profile digests, so replay can prove which prompts were used.
    ``declared``: see :func:`canonical_declared_refs`; ``view``: the intent's
    :class:`IntentView` if the caller has it already. ``schema_version`` 2 adds the external
    refs (``external_resolved``: the DECISION's ``external_context``, None while unresolved)."""
    if schema_version not in CONTEXT_SPEC_SCHEMA_VERSIONS:
        raise ValueError(f"unknown context spec schema version {schema_version!r}")
    normalization: dict[str, Any] = {
        "applied_rules": list(resolution.applied_rules),
        "config_digest": context_config_digest(cfg),
    }
    if resolution.dropped_refs:
        normalization["dropped_refs"] = [ref.model_dump(mode="json") for ref in resolution.dropped_refs]
    return (
        {
            "identity": {
                "thread_id": intent.thread_id,
                "turn_id": intent.turn_id,
                "parent_turn_id": intent.parent_turn_id,
            },
            "intent": {
                "intent_type": intent.intent_type,
                "user_input": (view or IntentView.from_intent(intent)).message,
            },
            "declared_refs": canonical_declared_refs(intent, declared),
            "retrieval": {
                "resolved_refs": [ref.model_dump(mode="json") for ref in resolution.resolved_refs],
                "normalization": normalization,
            },
            "assembly_rules": {
                "schema_version": schema_version,
                "ordering": cfg.context.canonical_sort,
            }
            | prompt_shape_rule(cfg),
            "normative_input_digests": list(resolution.normative_input_digests),
        }
        | ({"prompt": dict(prompt)} if prompt else {})
        | (
            {"external_refs": external_scope(external_refs_of(intent), external_resolved)}
            if _has_external_scope(intent, schema_version)
            else {}
        )
    )


def prompt_shape_rule(cfg: ContextConfig) -> dict[str, str]:
    """The spec's record of the prompt shape: ``{"prompt_shape": "system_context"}``, or nothing
    for the default ``chat_history`` (specs recorded before the option keep their digest)."""
    shape = cfg.context.prompt_shape
    return {} if shape == CHAT_HISTORY else {"prompt_shape": shape}


def governance_item_digest(item: GovernanceItem) -> str:
    return digest(item.model_dump(mode="json"))


def build_assembled_context(policy_input: PolicyInput, resolution: Resolution) -> dict[str, Any]:
    """The normative material assembled for governance (no EXECUTION content, no timestamps)."""
    return {
        "normative_input_digests": list(resolution.normative_input_digests),
        "governance_item_digests": [governance_item_digest(item) for item in policy_input.i_context],
        "intent_view_digest": digest(policy_input.intent.model_dump(mode="json")),
    }


def context_digest(context_spec: Mapping[str, Any], assembled_context: Mapping[str, Any]) -> str:
    """sha256 over the canonical JSON of ``{context_spec, assembled_context}``."""
    return digest({"context_spec": dict(context_spec), "assembled_context": dict(assembled_context)})


class ContextBuild(BaseModel):
    """Everything derived from (INTENT, candidates, config) before the policy runs."""

    model_config = ConfigDict(frozen=True)

    resolution: Resolution
    policy_input: PolicyInput
    context_spec: dict[str, Any]
    assembled_context: dict[str, Any]
    context_digest: str


def build_context(
    intent: Event,
    candidates: Sequence[Event],
    cfg: ContextConfig,
    prompt: Mapping[str, Any] | None = None,
    *,
    schema_version: str = CONTEXT_SPEC_SCHEMA_VERSION,
    external_resolved: Sequence[Mapping[str, Any]] | None = None,
) -> ContextBuild:
    """Resolve refs, build the policy input, the spec and the digest: one code path for deciding
    and for replay/verify. Raises ``RefResolutionError`` or ``InvalidIntentError``."""
    resolution, declared = resolve_declared_refs(
        intent, candidates, cfg.context, turn_refs=expands_turn_refs(schema_version)
    )
    policy_input = build_policy_input(intent, resolution.governance_events)
    spec = build_context_spec(
        intent,
        resolution,
        cfg,
        prompt,
        declared,
        policy_input.intent,
        schema_version=schema_version,
        external_resolved=external_resolved,
    )
    assembled = build_assembled_context(policy_input, resolution)
    # model_construct: every field was just built here with its declared type (validating them
    # again only copies the dicts); the values, and so the digests, are the same.
    return ContextBuild.model_construct(
        resolution=resolution,
        policy_input=policy_input,
        context_spec=spec,
        assembled_context=assembled,
        context_digest=context_digest(spec, assembled),
    )


def recompute_context_digest(
    intent: Event,
    candidates: Sequence[Event],
    cfg: ContextConfig,
    prompt: Mapping[str, Any] | None = None,
    *,
    schema_version: str = CONTEXT_SPEC_SCHEMA_VERSION,
    external_resolved: Sequence[Mapping[str, Any]] | None = None,
) -> str:
    """Recompute ``context_digest`` from stored inputs (context-system invariant 6)."""
    return build_context(
        intent,
        candidates,
        cfg,
        prompt,
        schema_version=schema_version,
        external_resolved=external_resolved,
    ).context_digest
