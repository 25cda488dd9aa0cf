"""Layered system prompts (prompt assembly): layer sources, pinned prompt snapshots, profiles.

A *prompt pack* (read by :mod:`turngate.prompts.loader`) holds file layers
(``default/{layer}.md``, ``tasks/{task_id}/{layer}.md``), per-provider task overrides
(``tasks/{task_id}/{provider}.md``), ``profiles.json`` and, optionally, the pack's own layer
builders (``*.py``). Everything here is pure:

* :class:`PromptSnapshot`: the resolved file layers for one (task_id, provider), content-addressed
  (``snapshot_digest``). The caller takes it on a thread's first turn, stores
  :func:`snapshot_bytes` as an artifact and pins the digest, so editing a file later changes
  nothing for that thread (the prompt-assembly pipeline's live session integrity).
* :class:`Profile`: an ordered list of layers (file, provider override, or a data layer rendered
  by a named builder from the intent's ``inputs``), whether history may be trimmed, which tools.
  Profiles are chosen per intent type and ``inputs.mode``.
* :class:`PromptConfig`: a pack's ``profiles.json`` (profiles, selection rules, the pack's own
  builders, tools, output safety rules).

:mod:`turngate.core.system_prompt` builds a turn's system prompt from these.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from turngate.core.canonical import canonical_bytes, digest, digest_bytes
from turngate.core.layer_builders import BUILT_IN_BUILDERS
from turngate.core.safety import SafetyRules
from turngate.core.tools import ToolSpec

PROFILES_SCHEMA_VERSION = "turngate.prompts.1"
SNAPSHOT_SCHEMA_VERSION: Final = "turngate.prompt_snapshot.1"
PROVIDER_OVERRIDE_LAYER = "provider_override"
SLUG_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
BUILDER_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
#: ``package.module:function`` (an importable module), or ``file.py:function`` (a Python file in
#: the pack's root directory).
BUILDER_REF_PATTERN = (
    r"^(?:[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*|[A-Za-z0-9_][A-Za-z0-9_-]{0,63}\.py)"
    r":[A-Za-z_][A-Za-z0-9_]*$"
)

Slug = Annotated[str, StringConstraints(pattern=SLUG_PATTERN)]
BuilderName = Annotated[str, StringConstraints(pattern=BUILDER_NAME_PATTERN)]
BuilderRef = Annotated[str, StringConstraints(pattern=BUILDER_REF_PATTERN)]
LayerOrigin = Literal["task", "default", "provider_override", "skipped"]


class PromptError(ValueError):
    """A prompt pack, profile or snapshot problem. ``reason_code`` is stable (docs/PROMPTS.md)."""

    def __init__(self, reason_code: str, detail: str) -> None:
        super().__init__(f"{reason_code}: {detail}")
        self.reason_code = reason_code
        self.detail = detail

    def as_dict(self) -> dict[str, Any]:
        return {"reason_code": self.reason_code, "detail": self.detail}


class PromptPackError(PromptError):
    """The pack on disk or its ``profiles.json`` is unusable."""


class PromptSnapshotError(PromptError):
    """Stored snapshot bytes are malformed, tampered with, or not the pinned snapshot."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --------------------------------------------------------------------------- layer sources


class LayerSource(_Frozen):
    """One resolved file layer: where it came from and its text, or why it was skipped.

    ``sha256`` is over the UTF-8 text (``sha256:<hex>``); ``path`` is relative to the pack root.
    """

    name: str
    origin: LayerOrigin
    path: str | None = None
    content: str | None = None
    sha256: str | None = None
    skipped_reason: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> LayerSource:
        if self.origin == "skipped":
            if self.content is not None or self.sha256 is not None or not self.skipped_reason:
                raise ValueError(f"skipped layer {self.name!r} has content or no skipped_reason")
        else:
            if self.content is None or self.path is None or self.skipped_reason is not None:
                raise ValueError(f"layer {self.name!r} ({self.origin}) needs path and content")
            actual = digest_bytes(self.content.encode("utf-8"))
            if self.sha256 != actual:
                raise ValueError(f"layer {self.name!r}: sha256 {self.sha256} does not match its content")
        return self


def found_layer(name: str, origin: LayerOrigin, path: str, content: str) -> LayerSource:
    """A layer read from ``path`` (its sha256 computed here)."""
    return LayerSource(
        name=name, origin=origin, path=path, content=content, sha256=digest_bytes(content.encode("utf-8"))
    )


def skipped_layer(name: str, reason: str) -> LayerSource:
    return LayerSource(name=name, origin="skipped", skipped_reason=reason)


# --------------------------------------------------------------------------- snapshots


class PromptSnapshot(_Frozen):
    """The file layers of one (task_id, provider) as they were when the thread began."""

    schema_version: Literal["turngate.prompt_snapshot.1"] = SNAPSHOT_SCHEMA_VERSION
    task_id: str | None
    provider: str
    layers: dict[str, LayerSource]
    snapshot_digest: str

    def body(self) -> dict[str, Any]:
        """What ``snapshot_digest`` covers: everything but the digest itself."""
        return _snapshot_body(self.task_id, self.provider, self.layers)


def _snapshot_body(task_id: str | None, provider: str, layers: Mapping[str, LayerSource]) -> dict[str, Any]:
    return {
        "schema_version": SNAPSHOT_SCHEMA_VERSION,
        "task_id": task_id,
        "provider": provider,
        "layers": {name: source.model_dump(mode="json") for name, source in layers.items()},
    }


def snapshot_from_sources(
    sources: Iterable[LayerSource], *, task_id: str | None, provider: str
) -> PromptSnapshot:
    """Content-address resolved layers. The digest does not depend on the sources' order."""
    layers: dict[str, LayerSource] = {}
    for source in sources:
        if source.name in layers:
            raise PromptSnapshotError("prompts.duplicate_layer", f"layer {source.name!r} appears twice")
        layers[source.name] = source
    return PromptSnapshot(
        task_id=task_id,
        provider=provider,
        layers=layers,
        snapshot_digest=digest(_snapshot_body(task_id, provider, layers)),
    )


def snapshot_bytes(snapshot: PromptSnapshot) -> bytes:
    """RFC 8785 canonical JSON of the snapshot (digest included): the artifact to store."""
    return canonical_bytes(snapshot.model_dump(mode="json"))


def snapshot_from_bytes(data: bytes, *, expected_digest: str | None = None) -> PromptSnapshot:
    """Parse stored snapshot bytes, recompute the digest and check it (and the pinned one).

    Raises :class:`PromptSnapshotError`: ``prompts.snapshot_invalid`` (not a snapshot, or a layer's
    sha256 does not match its text), ``prompts.snapshot_digest_mismatch`` (the stored digest is
    not the digest of the stored layers), ``prompts.snapshot_not_pinned`` (a valid snapshot, but
    not the one ``expected_digest`` names).
    """
    try:
        raw = json.loads(data)
        snapshot = PromptSnapshot.model_validate(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        detail = exc.errors(include_url=False)[0] if isinstance(exc, ValidationError) else exc
        raise PromptSnapshotError("prompts.snapshot_invalid", f"not a prompt snapshot: {detail}") from exc
    for name, source in snapshot.layers.items():
        if source.name != name:
            raise PromptSnapshotError("prompts.snapshot_invalid", f"layer key {name!r} names {source.name!r}")
    recomputed = digest(snapshot.body())
    if recomputed != snapshot.snapshot_digest:
        raise PromptSnapshotError(
            "prompts.snapshot_digest_mismatch",
            f"stored snapshot_digest {snapshot.snapshot_digest} but the layers digest to {recomputed}",
        )
    if expected_digest is not None and recomputed != expected_digest:
        raise PromptSnapshotError(
            "prompts.snapshot_not_pinned", f"snapshot {recomputed} is not the pinned {expected_digest}"
        )
    return snapshot


# --------------------------------------------------------------------------- profiles


class LayerSpec(_Frozen):
    """One profile layer: exactly one of ``file``, ``provider_override`` or ``builder``."""

    file: Slug | None = None
    provider_override: bool = False
    builder: str | None = None
    name: Slug | None = None
    params: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_kind(self) -> LayerSpec:
        kinds = [self.file is not None, self.provider_override, self.builder is not None]
        if sum(kinds) != 1:
            raise ValueError("a layer is exactly one of {file}, {provider_override: true} or {builder}")
        if self.builder is None and (self.params or self.name):
            raise ValueError("only builder layers take 'name' and 'params'")
        if self.file == PROVIDER_OVERRIDE_LAYER:
            raise ValueError(f"{PROVIDER_OVERRIDE_LAYER!r} is reserved; use {{provider_override: true}}")
        if self.builder is not None:
            canonical_bytes(self.params)
        return self

    @property
    def kind(self) -> Literal["file", "provider_override", "builder"]:
        if self.file is not None:
            return "file"
        return "provider_override" if self.provider_override else "builder"

    @property
    def layer_name(self) -> str:
        if self.file is not None:
            return self.file
        if self.provider_override:
            return PROVIDER_OVERRIDE_LAYER
        return self.name or str(self.builder)


class Profile(_Frozen):
    """An ordered list of layers plus history trimming and the tools it may offer."""

    name: Slug
    layers: tuple[LayerSpec, ...] = Field(min_length=1)
    trim_history: bool = True
    tools: tuple[str, ...] = ()
    #: The shape of the turn stream's final ``done`` event: the dialogue's phase fields, or
    #: ``{"debrief_complete": true}`` for a debrief.
    done_event: Literal["dialogue", "debrief"] = "dialogue"

    @field_validator("layers")
    @classmethod
    def _unique_layer_names(cls, layers: tuple[LayerSpec, ...]) -> tuple[LayerSpec, ...]:
        names = [layer.layer_name for layer in layers]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"layer names must be unique within a profile: {duplicates}")
        return layers

    @property
    def digest(self) -> str:
        # done_event is in the digest once set (profiles without it keep their earlier digest)
        exclude = {"done_event"} if self.done_event == "dialogue" else set()
        return digest(self.model_dump(mode="json", exclude=exclude))


class ProfileRule(_Frozen):
    """Use ``profile`` for intents of ``intent_type`` (any when None) with ``inputs.mode`` = ``mode``
    (any when None)."""

    profile: Slug
    intent_type: str | None = None
    mode: str | None = None


class PromptConfig(_Frozen):
    """A pack's ``profiles.json``."""

    schema_version: Literal["turngate.prompts.1"]
    profiles: dict[str, Profile]
    select: tuple[ProfileRule, ...] = ()
    default_profile: Slug
    tools: tuple[ToolSpec, ...] = ()
    output_safety: SafetyRules = Field(default_factory=SafetyRules)
    #: The pack's own data-layer builders: name -> ``module:function`` or ``file.py:function``.
    builders: dict[BuilderName, BuilderRef] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _profile_names_from_keys(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and isinstance(data.get("profiles"), Mapping):
            profiles = {
                key: ({**value, "name": key} if isinstance(value, Mapping) and "name" not in value else value)
                for key, value in data["profiles"].items()
            }
            data = {**data, "profiles": profiles}
        return data

    @model_validator(mode="after")
    def _references(self) -> PromptConfig:
        for key, profile in self.profiles.items():
            if profile.name != key:
                raise ValueError(f"profile key {key!r} and its name {profile.name!r} differ")
        known = set(self.profiles)
        if self.default_profile not in known:
            raise ValueError(f"default_profile {self.default_profile!r} is not a profile ({sorted(known)})")
        for rule in self.select:
            if rule.profile not in known:
                raise ValueError(f"select names unknown profile {rule.profile!r}")
        tool_names = [spec.name for spec in self.tools]
        if len(set(tool_names)) != len(tool_names):
            raise ValueError("tool names must be unique")
        for profile in self.profiles.values():
            unknown = sorted(set(profile.tools) - set(tool_names))
            if unknown:
                raise ValueError(f"profile {profile.name!r} names unknown tools {unknown}")
        self._check_builders()
        return self

    def _check_builders(self) -> None:
        shadowing = sorted(set(self.builders) & set(BUILT_IN_BUILDERS))
        if shadowing:
            raise ValueError(f"builders {shadowing} are built in; give the pack's builders other names")
        for profile in self.profiles.values():
            for layer in profile.layers:
                if layer.builder is None or layer.builder in self.builders:
                    continue
                built_in = BUILT_IN_BUILDERS.get(layer.builder)
                if built_in is None:
                    raise ValueError(
                        f"profile {profile.name!r}: unknown builder {layer.builder!r} (built in: "
                        f"{sorted(BUILT_IN_BUILDERS)}; the pack's own go under 'builders')"
                    )
                missing = [key for key in built_in.required_params if key not in layer.params]
                if missing:
                    raise ValueError(
                        f"profile {profile.name!r}: builder {layer.builder!r} needs params {missing}"
                    )

    def file_layers(self) -> list[str]:
        """Every file layer any profile uses, in order of first appearance (what to snapshot)."""
        seen: dict[str, None] = {}
        for profile in self.profiles.values():
            for layer in profile.layers:
                if layer.file is not None:
                    seen.setdefault(layer.file, None)
        return list(seen)

    def profile_for(self, intent_type: str, inputs: Mapping[str, Any]) -> Profile:
        """The first ``select`` rule matching the intent type and ``inputs.mode``; else the default."""
        mode = inputs.get("mode")
        mode = mode if isinstance(mode, str) else None
        for rule in self.select:
            if rule.intent_type not in (None, intent_type):
                continue
            if rule.mode is not None and rule.mode != mode:
                continue
            return self.profiles[rule.profile]
        return self.profiles[self.default_profile]

    def tools_for(self, profile: Profile) -> list[ToolSpec]:
        """The profile's tools, in the profile's order."""
        by_name = {spec.name: spec for spec in self.tools}
        return [by_name[name] for name in profile.tools]

    @property
    def digest(self) -> str:
        # builders are in the digest once a pack has any (packs without keep their earlier digest)
        exclude = set() if self.builders else {"builders"}
        return digest(self.model_dump(mode="json", exclude=exclude))


def parse_prompt_config(data: Mapping[str, Any] | bytes | str) -> PromptConfig:
    """Validate ``profiles.json`` content. Raises :class:`PromptPackError` (``prompts.invalid_config``)."""
    try:
        raw = json.loads(data) if isinstance(data, bytes | str) else data
        return PromptConfig.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        raise PromptPackError(
            "prompts.invalid_config", f"{where + ': ' if where else ''}{first.get('msg')}"
        ) from exc
    except ValueError as exc:
        raise PromptPackError("prompts.invalid_config", f"profiles.json is not valid JSON: {exc}") from exc


def task_id_from_inputs(inputs: Mapping[str, Any]) -> str | None:
    """The task whose files a thread uses: ``inputs.task_id`` (a string), or None for defaults only."""
    task_id = inputs.get("task_id")
    return task_id if isinstance(task_id, str) and task_id else None
