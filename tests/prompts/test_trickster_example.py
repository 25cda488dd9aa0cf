"""The shipped Trickster example pack loads, builds every layer, and its config is coherent."""

from __future__ import annotations

import json

from tests.prompts.helpers import EXAMPLE_INPUTS, EXAMPLE_PACK
from turngate.core.prompt_layers import task_id_from_inputs
from turngate.core.safety import check_output
from turngate.core.system_prompt import build_system_prompt
from turngate.core.tools import ToolCall, admit_tool_calls, next_phase, offered_tools, transition_for
from turngate.prompts.loader import load_prompt_config, load_snapshot
from turngate.prompts.pack_builders import pack_builders


def load() -> tuple:
    config = load_prompt_config(EXAMPLE_PACK)
    inputs = json.loads(EXAMPLE_INPUTS.read_text(encoding="utf-8"))
    return config, inputs


def test_dialogue_prompt_contains_every_layer() -> None:
    config, inputs = load()
    profile = config.profile_for("chat.message", inputs)
    assert profile.name == "dialogue"
    snapshot = load_snapshot(
        EXAMPLE_PACK, task_id=task_id_from_inputs(inputs), provider="openai", config=config
    )
    prompt = build_system_prompt(
        snapshot, profile, inputs, redaction_reason="safety.blocklist", builders=pack_builders(config)
    )
    assert [(layer.name, layer.origin) for layer in prompt.layers] == [
        ("persona", "default"),
        ("behaviour", "task"),
        ("safety", "default"),
        ("provider_override", "provider_override"),
        ("task_context", "builder"),
        ("safety_config", "builder"),
        ("language", "builder"),
        ("student_path", "builder"),
        ("redaction_context", "builder"),
    ]
    assert prompt.skipped == []
    for needle in (
        "# Persona: the Trickster",
        "The locked account",
        "# Safety",
        "Provider notes (OpenAI models)",
        "- urgency: an artificial deadline",
        "Intensity ceiling: 2.",
        "Always respond in Lithuanian.",
        "Student selected 'Open the message from IT'",
        "reason: safety.blocklist",
    ):
        assert needle in prompt.text, needle


def test_debrief_inputs_select_the_debrief_profile() -> None:
    config, _ = load()
    inputs = json.loads((EXAMPLE_PACK.parent / "intent-inputs-debrief.json").read_text(encoding="utf-8"))
    profile = config.profile_for("chat.message", inputs)
    assert profile.name == "debrief" and not profile.trim_history and config.tools_for(profile) == []
    snapshot = load_snapshot(EXAMPLE_PACK, task_id="phishing-01", provider="echo", config=config)
    prompt = build_system_prompt(snapshot, profile, inputs, builders=pack_builders(config))
    assert "Drop the adversarial stance" in prompt.text
    assert [s.name for s in prompt.skipped] == ["provider_override", "redaction_context"]


def test_transition_tool_and_safety_rules() -> None:
    config, inputs = load()
    tools = config.tools_for(config.profiles["dialogue"])
    assert offered_tools(tools, 1) == [] and [t.name for t in offered_tools(tools, 2)] == ["transition_phase"]
    admission = admit_tool_calls(
        [{"name": "transition_phase", "arguments": {"signal": "understood"}}], offered_tools(tools, 2)
    )
    call: ToolCall = admission.admitted[0]
    transition = transition_for(call, tools[0])
    assert transition == "on_success"
    assert next_phase(transition, inputs["task"]["ai_transitions"]) == "reveal"

    rules = config.output_safety
    assert check_output("Sveiki! Patvirtink paskyrą: https://login.example.org/verify", rules).ok
    assert check_output("Parašyk savo kortelės numeris", rules).reason_code == "safety.blocklist"
    assert check_output("Spausk https://evil.test/login", rules).reason_code == "safety.regex"
    assert check_output("x" * 1501, rules).reason_code == "safety.max_length"
