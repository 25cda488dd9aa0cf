"""The system prompt of one turn: snapshot + profile + inputs + builders -> text and layer records.

:func:`build_system_prompt` joins the profile's non-empty layers with a blank line: file layers
come only from the pinned snapshot, data layers from the builders it is given (turngate's built-in
ones plus those a pack names in ``profiles.json`` under ``builders``, loaded once at worker start
by :mod:`turngate.prompts.pack_builders`). One :class:`LayerRecord` per layer goes into the
manifest. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from turngate.core.canonical import digest_bytes
from turngate.core.layer_builders import BuildRuntime, LayerBuilder
from turngate.core.payloads import RedactionSource
from turngate.core.prompt_layers import Profile, PromptError, PromptSnapshot

LAYER_SEPARATOR = "\n\n"
RecordOrigin = Literal["task", "default", "provider_override", "builder"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LayerRecord(_Frozen):
    """A layer that is in the system prompt. ``sha256`` is over the block as the model saw it;
    ``source_sha256`` is the snapshot's sha256 of the file it came from."""

    name: str
    origin: RecordOrigin
    sha256: str
    chars: int
    path: str | None = None
    source_sha256: str | None = None
    builder: str | None = None


class SkippedLayerRecord(_Frozen):
    name: str
    reason: str


class SystemPrompt(_Frozen):
    text: str
    layers: list[LayerRecord]
    skipped: list[SkippedLayerRecord]
    snapshot_digest: str
    profile: str
    profile_digest: str
    text_sha256: str
    trim_history: bool
    done_event: Literal["dialogue", "debrief"] = "dialogue"


def build_system_prompt(
    snapshot: PromptSnapshot,
    profile: Profile,
    inputs: Mapping[str, Any],
    *,
    builders: Mapping[str, LayerBuilder],
    redaction_reason: str | None = None,
) -> SystemPrompt:
    """The system prompt for one turn. Pure: file layers come only from ``snapshot``, data layers
    from ``builders`` (name -> function: the built-in ones and the pack's, see
    :func:`turngate.prompts.pack_builders.pack_builders`).

    Raises :class:`PromptError` ``prompts.layer_not_in_snapshot`` when the profile uses a file
    layer the snapshot was not taken for, ``prompts.unknown_builder`` when ``builders`` lacks a
    builder the profile names, and ``prompts.builder_failed`` when a builder breaks.
    """
    runtime = BuildRuntime(
        task_id=snapshot.task_id, provider=snapshot.provider, redaction_reason=redaction_reason
    )
    blocks: list[str] = []
    records: list[LayerRecord] = []
    skipped: list[SkippedLayerRecord] = []
    for layer in profile.layers:
        name = layer.layer_name
        if layer.kind == "builder":
            build = builders.get(str(layer.builder))
            if build is None:
                raise PromptError("prompts.unknown_builder", f"builder {layer.builder!r} is not loaded")
            try:
                text = build(inputs, layer.params, runtime)
            except Exception as exc:
                raise PromptError(
                    "prompts.builder_failed", f"builder {layer.builder!r} failed: {type(exc).__name__}: {exc}"
                ) from exc
            if text is not None and not isinstance(text, str):
                raise PromptError(
                    "prompts.builder_failed", f"builder {layer.builder!r} returned {type(text)}"
                )
            block = text.strip() if text else ""
            if not block:
                skipped.append(SkippedLayerRecord(name=name, reason="builder returned no text"))
                continue
            blocks.append(block)
            records.append(
                LayerRecord(
                    name=name,
                    origin="builder",
                    sha256=digest_bytes(block.encode("utf-8")),
                    chars=len(block),
                    builder=layer.builder,
                )
            )
            continue
        source = snapshot.layers.get(name)
        if source is None:
            raise PromptError(
                "prompts.layer_not_in_snapshot",
                f"profile {profile.name!r} uses layer {name!r}, which snapshot {snapshot.snapshot_digest} "
                "does not hold; take snapshots with PromptConfig.file_layers()",
            )
        if source.origin == "skipped" or source.content is None:
            skipped.append(SkippedLayerRecord(name=name, reason=source.skipped_reason or "skipped"))
            continue
        block = source.content.strip()
        if not block:
            skipped.append(SkippedLayerRecord(name=name, reason=f"{source.path} is empty"))
            continue
        blocks.append(block)
        records.append(
            LayerRecord(
                name=name,
                origin=source.origin,  # never "skipped" here
                sha256=digest_bytes(block.encode("utf-8")),
                chars=len(block),
                path=source.path,
                source_sha256=source.sha256,
            )
        )
    text = LAYER_SEPARATOR.join(blocks)
    return SystemPrompt(
        text=text,
        layers=records,
        skipped=skipped,
        snapshot_digest=snapshot.snapshot_digest,
        profile=profile.name,
        profile_digest=profile.digest,
        text_sha256=digest_bytes(text.encode("utf-8")),
        trim_history=profile.trim_history,
        done_event=profile.done_event,
    )


class PromptContext(_Frozen):
    """What the workflow needs to build the system prompt, decided outside it (I/O)."""

    snapshot: PromptSnapshot
    snapshot_artifact: dict[str, Any]
    pinned_by_index: int | None  # the DECISION that pinned it; None: this turn pins it
    redaction_reason: str | None = None
    redaction_source: RedactionSource | None = None  # the event redaction_reason was read from
