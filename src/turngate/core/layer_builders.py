"""Data-layer builders: the contract, rendering helpers, and the two built-in builders.

A profile layer ``{"builder": "<name>", "params": {...}}`` is rendered by a function
``fn(inputs, params, runtime) -> str | None`` (None or blank text: the layer is skipped). Builders
are pure: the same (inputs, params, runtime) must give the same text, or a replayed turn would
build another prompt.

Two builders are part of turngate because they serve its own mechanisms: ``language`` (a
configured instruction, verbatim) and ``redaction_context`` (the one-shot note after output
safety withheld an answer). An application's builders live in its prompt pack and are named in
``profiles.json`` under ``builders`` (loaded by :mod:`turngate.prompts.pack_builders`); the
helpers below render values the same way for all of them.

Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = [
    "BUILT_IN_BUILDERS",
    "BuildRuntime",
    "BuiltInBuilder",
    "LayerBuilder",
    "as_mapping",
    "build_language",
    "build_redaction_context",
    "bullet_lines",
    "list_item",
    "section",
    "text_line",
]


@dataclass(frozen=True)
class BuildRuntime:
    """Per-call values a builder may use besides the intent's inputs and the layer's params."""

    task_id: str | None
    provider: str
    redaction_reason: str | None = None


LayerBuilder = Callable[[Mapping[str, Any], Mapping[str, Any], BuildRuntime], "str | None"]


def text_line(value: Any) -> str:
    """One line of text for a scalar (white space collapsed); compact sorted JSON otherwise."""
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float) or value is None:
        return json.dumps(value)
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ": "), default=str)


_LABEL_KEYS = ("id", "name", "title", "label")


def list_item(value: Any) -> str:
    """A list item: a mapping with an id/name/title/label leads with it (``urgency: <rest>``)."""
    if not isinstance(value, Mapping):
        return text_line(value)
    label_key = next((key for key in _LABEL_KEYS if isinstance(value.get(key), str) and value[key]), None)
    rest = sorted((key for key in value if key != label_key), key=str)
    if label_key is None:
        return "; ".join(f"{text_line(key)}: {text_line(value[key])}" for key in rest)
    head = text_line(value[label_key])
    if not rest:
        return head
    if len(rest) == 1:
        return f"{head}: {text_line(value[rest[0]])}"
    return f"{head}: " + "; ".join(f"{text_line(key)}: {text_line(value[key])}" for key in rest)


def bullet_lines(value: Any) -> list[str]:
    """Bullet lines for a list (order kept), a mapping (keys sorted) or a scalar."""
    if value is None or value == "" or value == [] or value == {}:
        return []
    if isinstance(value, list | tuple):
        return [f"- {list_item(item)}" for item in value if item not in (None, "", [], {})]
    if isinstance(value, Mapping):
        return [f"- {text_line(key)}: {list_item(value[key])}" for key in sorted(value, key=str)]
    return [f"- {text_line(value)}"]


def section(title: str, lines: list[str]) -> str:
    return "\n".join([title, *lines])


def as_mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one (wrong types are ignored, never errors)."""
    return value if isinstance(value, Mapping) else {}


def build_language(inputs: Mapping[str, Any], params: Mapping[str, Any], runtime: BuildRuntime) -> str:
    """The configured language instruction (``params.instruction``), verbatim. Always present."""
    return str(params["instruction"]).strip()


def build_redaction_context(
    inputs: Mapping[str, Any], params: Mapping[str, Any], runtime: BuildRuntime
) -> str | None:
    """One-shot layer: present only when the caller passes the previous turn's redaction reason."""
    reason = runtime.redaction_reason
    if reason is None or not reason.strip():
        return None
    title = str(params.get("title", "## Previous response withheld"))
    shown = text_line(reason)[:200]
    note = (
        f"Your previous response was withheld by the output safety check (reason: {shown}). "
        "Stay in character, do not repeat or mention the withheld content, and continue safely."
    )
    return "\n".join([title, note])


@dataclass(frozen=True)
class BuiltInBuilder:
    fn: LayerBuilder
    required_params: tuple[str, ...] = ()


#: Builders every pack may name without declaring them; a pack's ``builders`` cannot reuse these names.
BUILT_IN_BUILDERS: Mapping[str, BuiltInBuilder] = MappingProxyType(
    {
        "language": BuiltInBuilder(build_language, required_params=("instruction",)),
        "redaction_context": BuiltInBuilder(build_redaction_context),
    }
)
