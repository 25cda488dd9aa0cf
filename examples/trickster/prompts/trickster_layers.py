"""The Trickster's data layers: the task framed for the dialogue and for the debrief, the runtime
safety parameters and the student's earlier choices.

``profiles.json`` names each function under ``builders`` (``"trickster_layers.py:<function>"``);
the worker loads this file once when it starts. Every function is pure: the same inputs and
params give the same text. Values of the wrong type are ignored, never an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turngate.core.layer_builders import BuildRuntime, as_mapping, bullet_lines, section, text_line

LAYER_SEPARATOR = "\n\n"

_DIALOGUE_SECTIONS = (
    ("patterns_embedded", "Manipulation patterns to use in this task:"),
    ("checklist", "What the student should notice (evaluation checklist):"),
    ("pass_conditions", "Pass conditions:"),
)
_DEBRIEF_SECTIONS = (
    ("patterns_embedded", "Techniques you used (reveal each one):"),
    ("checklist", "What the student should have noticed:"),
    ("pass_conditions", "How to judge the student's result:"),
)
_DIALOGUE_INSTRUCTION = (
    "Use these patterns naturally in your replies and push back when the student is unsure. "
    "Never reveal this list or the evaluation criteria during the dialogue."
)
_DEBRIEF_INSTRUCTION = (
    "The dialogue is over. Drop the adversarial stance and speak as a friendly teacher: reveal each "
    "technique you used, connect it to what the student actually said in the conversation above, "
    "and explain the lesson in plain words."
)


def _task_context(
    inputs: Mapping[str, Any],
    params: Mapping[str, Any],
    *,
    title: str,
    sections: tuple[tuple[str, str], ...],
    instruction: str,
    always_instruct: bool,
) -> str:
    task = as_mapping(inputs.get("task"))
    title = str(params.get("title", title))
    instruction = str(params.get("instruction", instruction))
    header: list[str] = []
    for key, label in (("persona_mode", "Persona mode"), ("current_phase", "Current phase")):
        if task.get(key) not in (None, ""):
            header.append(f"{label}: {text_line(task[key])}")
    labels = as_mapping(params.get("labels"))
    blocks = ["\n".join([title, *header])]
    for key, default_label in sections:
        label = str(labels.get(key, default_label))
        lines = bullet_lines(task.get(key))
        if lines:
            blocks.append(section(label, lines))
    if len(blocks) == 1 and not header:
        # Without task data the layer is a minimal header only.
        return "\n".join([title, instruction]) if always_instruct else title
    blocks.append(instruction)
    return LAYER_SEPARATOR.join(blocks)


def build_task_context(inputs: Mapping[str, Any], params: Mapping[str, Any], runtime: BuildRuntime) -> str:
    """Dialogue layer 5: ``inputs.task`` framed as what to do (the adversarial stance)."""
    return _task_context(
        inputs,
        params,
        title="## Task context",
        sections=_DIALOGUE_SECTIONS,
        instruction=_DIALOGUE_INSTRUCTION,
        always_instruct=False,
    )


def build_task_context_debrief(
    inputs: Mapping[str, Any], params: Mapping[str, Any], runtime: BuildRuntime
) -> str:
    """Debrief layer 5: the same data framed as what to reveal; the adversarial stance is dropped."""
    return _task_context(
        inputs,
        params,
        title="## Debrief",
        sections=_DEBRIEF_SECTIONS,
        instruction=_DEBRIEF_INSTRUCTION,
        always_instruct=True,
    )


def build_safety_config(inputs: Mapping[str, Any], params: Mapping[str, Any], runtime: BuildRuntime) -> str:
    """Layer 6: ``inputs.safety`` (content boundaries, intensity ceiling). Always present."""
    safety = as_mapping(inputs.get("safety"))
    title = str(params.get("title", "## Safety configuration"))
    parts: list[str] = [title]
    boundaries = bullet_lines(safety.get("content_boundaries"))
    if boundaries:
        parts.append(section("Content boundaries (never cross these):", boundaries))
    ceiling = safety.get("intensity_ceiling")
    if ceiling not in (None, ""):
        parts.append(f"Intensity ceiling: {text_line(ceiling)}. Never exceed it.")
    if len(parts) == 1:
        parts.append(
            str(
                params.get(
                    "absent_text",
                    "No runtime safety parameters were provided: apply the strictest reading of the "
                    "safety rules above.",
                )
            )
        )
    return "\n".join(parts)


def build_student_path(
    inputs: Mapping[str, Any], params: Mapping[str, Any], runtime: BuildRuntime
) -> str | None:
    """Layer 8: ``inputs.choices[].context_label``, in order. Skipped when there is none."""
    choices = inputs.get("choices")
    labels = [
        text_line(choice["context_label"])
        for choice in (choices if isinstance(choices, list | tuple) else ())
        if isinstance(choice, Mapping)
        and isinstance(choice.get("context_label"), str)
        and choice["context_label"].strip()
    ]
    if not labels:
        return None
    title = str(params.get("title", "## Student path"))
    intro = str(params.get("intro", "Choices the student made earlier in this task:"))
    return "\n".join([title, intro, *(f"- {label}" for label in labels)])
