"""Helpers for the prompt-system tests: small prompt packs written to a directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

EXAMPLE_PACK = Path(__file__).resolve().parents[2] / "examples" / "trickster" / "prompts"
EXAMPLE_INPUTS = EXAMPLE_PACK.parent / "intent-inputs.json"

FILE_LAYERS = ["persona", "behaviour", "safety"]
TRICKSTER_LAYERS_FILE = "trickster_layers.py"
#: The Trickster's own builders, named the way its profiles.json names them.
TRICKSTER_BUILDERS = {
    name: f"{TRICKSTER_LAYERS_FILE}:build_{name}"
    for name in ("task_context", "task_context_debrief", "safety_config", "student_path")
}


def dialogue_layers(task_builder: str = "task_context") -> list[dict[str, Any]]:
    return [
        {"file": "persona"},
        {"file": "behaviour"},
        {"file": "safety"},
        {"provider_override": True},
        {"builder": task_builder},
        {"builder": "safety_config"},
        {"builder": "language", "params": {"instruction": "Always respond in Lithuanian."}},
        {"builder": "student_path"},
        {"builder": "redaction_context"},
    ]


def profiles_config() -> dict[str, Any]:
    return {
        "schema_version": "turngate.prompts.1",
        "default_profile": "dialogue",
        "select": [{"intent_type": "chat.message", "mode": "debrief", "profile": "debrief"}],
        "builders": dict(TRICKSTER_BUILDERS),
        "profiles": {
            "dialogue": {"layers": dialogue_layers(), "tools": ["transition_phase"]},
            "debrief": {
                "layers": dialogue_layers("task_context_debrief"),
                "trim_history": False,
                "tools": [],
            },
        },
        "tools": [
            {
                "name": "transition_phase",
                "description": "End the phase.",
                "min_exchanges": 2,
                "signals": {
                    "understood": "on_success",
                    "partial": "on_partial",
                    "max_reached": "on_max_exchanges",
                },
                "parameters": {
                    "type": "object",
                    "properties": {
                        "signal": {"type": "string", "enum": ["understood", "partial", "max_reached"]},
                        "reason": {"type": "string", "maxLength": 50},
                    },
                    "required": ["signal"],
                    "additionalProperties": False,
                },
            }
        ],
        "output_safety": {"rules": [{"id": "len", "type": "max_length", "max_chars": 100}]},
    }


def write_pack(root: Path, files: dict[str, str], config: dict[str, Any] | None = None) -> Path:
    """A pack: ``files``, ``profiles.json`` and the Trickster's builders file (as the example has it)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / TRICKSTER_LAYERS_FILE).write_bytes((EXAMPLE_PACK / TRICKSTER_LAYERS_FILE).read_bytes())
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (root / "profiles.json").write_text(json.dumps(config or profiles_config()), encoding="utf-8")
    return root


BASIC_FILES = {
    "default/persona.md": "DEFAULT PERSONA\n",
    "default/behaviour.md": "DEFAULT BEHAVIOUR\n",
    "default/safety.md": "DEFAULT SAFETY\n",
    "tasks/t1/behaviour.md": "TASK BEHAVIOUR\n",
    "tasks/t1/openai.md": "OPENAI OVERRIDE\n",
}
