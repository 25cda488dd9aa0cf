"""Profiles: layer order, blank-line joining, data layers, debrief, selection, config errors."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.prompts.helpers import BASIC_FILES, profiles_config
from turngate.core.canonical import digest_bytes
from turngate.core.prompt_layers import PromptError, PromptPackError, parse_prompt_config, task_id_from_inputs
from turngate.core.system_prompt import LAYER_SEPARATOR, build_system_prompt
from turngate.prompts.loader import load_prompt_config, load_snapshot
from turngate.prompts.pack_builders import pack_builders

FULL_INPUTS: dict[str, Any] = {
    "task_id": "t1",
    "task": {
        "persona_mode": "urgent_authority",
        "current_phase": "dialogue",
        "patterns_embedded": [{"id": "urgency", "description": "a fake deadline"}, "false authority"],
        "checklist": ["spots the deadline", "checks the sender"],
        "pass_conditions": {"understood": "names two techniques", "partial": "names one"},
    },
    "safety": {"content_boundaries": ["no real brands"], "intensity_ceiling": 2},
    "choices": [
        {"context_label": "Student selected 'Share without reading'"},
        {"choice_id": "no-label"},
        {"context_label": "Student selected 'Ask a friend'"},
    ],
}


def setup(make_pack, provider: str = "openai", task_id: str | None = "t1"):
    pack = make_pack()
    config = load_prompt_config(pack)
    snapshot = load_snapshot(pack, task_id=task_id, provider=provider, config=config)
    return config, snapshot


def test_layers_in_profile_order_joined_by_blank_lines(make_pack) -> None:
    config, snapshot = setup(make_pack)
    prompt = build_system_prompt(
        snapshot,
        config.profiles["dialogue"],
        FULL_INPUTS,
        redaction_reason="x",
        builders=pack_builders(config),
    )
    names = [layer.name for layer in prompt.layers]
    assert names == [
        "persona",
        "behaviour",
        "safety",
        "provider_override",
        "task_context",
        "safety_config",
        "language",
        "student_path",
        "redaction_context",
    ]
    blocks = prompt.text.split(LAYER_SEPARATOR)
    assert blocks[:4] == ["DEFAULT PERSONA", "TASK BEHAVIOUR", "DEFAULT SAFETY", "OPENAI OVERRIDE"]
    assert blocks[4].startswith("## Task context")
    # The records cut the text into its blocks: each block's sha256, then one blank line.
    position = 0
    for layer in prompt.layers:
        block = prompt.text[position : position + layer.chars]
        assert digest_bytes(block.encode()) == layer.sha256
        position += layer.chars
        assert prompt.text[position : position + 2] in (LAYER_SEPARATOR, "")
        position += 2
    assert position - 2 == len(prompt.text)
    assert prompt.text_sha256 == digest_bytes(prompt.text.encode())
    assert prompt.skipped == []
    origins = {layer.name: layer.origin for layer in prompt.layers}
    assert origins["persona"] == "default" and origins["behaviour"] == "task"
    assert origins["provider_override"] == "provider_override" and origins["language"] == "builder"


def test_skipped_file_layers_leave_no_gap(make_pack) -> None:
    pack = make_pack({"default/persona.md": "P\n", "default/safety.md": "   \n"})
    config = load_prompt_config(pack)
    snapshot = load_snapshot(pack, task_id=None, provider="echo", config=config)
    prompt = build_system_prompt(snapshot, config.profiles["dialogue"], {}, builders=pack_builders(config))
    assert prompt.text.startswith("P\n\n## Task context")
    assert "\n\n\n" not in prompt.text
    skipped = {s.name: s.reason for s in prompt.skipped}
    assert skipped["behaviour"] == "no default/behaviour.md"
    assert skipped["safety"] == "default/safety.md is empty"
    assert "provider_override" in skipped


def test_task_context_minimal_header_when_absent(make_pack) -> None:
    config, snapshot = setup(make_pack)
    for inputs in ({}, {"task": {}}, {"task": "not a mapping"}, {"task": {"checklist": []}}):
        prompt = build_system_prompt(
            snapshot, config.profiles["dialogue"], inputs, builders=pack_builders(config)
        )
        assert LAYER_SEPARATOR + "## Task context" + LAYER_SEPARATOR in prompt.text
    full = build_system_prompt(
        snapshot, config.profiles["dialogue"], FULL_INPUTS, builders=pack_builders(config)
    ).text
    assert "Persona mode: urgent_authority" in full
    assert "- urgency: a fake deadline\n- false authority" in full
    assert "- partial: names one\n- understood: names two techniques" in full  # keys sorted
    assert "Never reveal this list" in full


def test_safety_config_always_present(make_pack) -> None:
    config, snapshot = setup(make_pack)
    bare = build_system_prompt(snapshot, config.profiles["dialogue"], {}, builders=pack_builders(config))
    assert "safety_config" in [layer.name for layer in bare.layers]
    assert "No runtime safety parameters were provided" in bare.text
    full = build_system_prompt(
        snapshot, config.profiles["dialogue"], FULL_INPUTS, builders=pack_builders(config)
    ).text
    assert "- no real brands" in full and "Intensity ceiling: 2." in full


def test_language_layer_is_the_configured_instruction(make_pack) -> None:
    config, snapshot = setup(make_pack)
    bare = build_system_prompt(snapshot, config.profiles["dialogue"], {}, builders=pack_builders(config))
    assert bare.text.endswith(LAYER_SEPARATOR + "Always respond in Lithuanian.")
    full = build_system_prompt(
        snapshot, config.profiles["dialogue"], FULL_INPUTS, builders=pack_builders(config)
    )
    assert LAYER_SEPARATOR + "Always respond in Lithuanian." + LAYER_SEPARATOR in full.text


def test_student_path_skipped_without_labels(make_pack) -> None:
    config, snapshot = setup(make_pack)
    for inputs in ({}, {"choices": []}, {"choices": [{"choice_id": "a"}, {"context_label": "  "}]}):
        prompt = build_system_prompt(
            snapshot, config.profiles["dialogue"], inputs, builders=pack_builders(config)
        )
        assert "student_path" in [s.name for s in prompt.skipped]
        assert "## Student path" not in prompt.text
    full = build_system_prompt(
        snapshot, config.profiles["dialogue"], FULL_INPUTS, builders=pack_builders(config)
    ).text
    assert "- Student selected 'Share without reading'\n- Student selected 'Ask a friend'" in full


def test_redaction_context_only_when_given(make_pack) -> None:
    config, snapshot = setup(make_pack)
    profile = config.profiles["dialogue"]
    without = build_system_prompt(snapshot, profile, FULL_INPUTS, builders=pack_builders(config))
    assert "redaction_context" in [s.name for s in without.skipped]
    with_reason = build_system_prompt(
        snapshot, profile, FULL_INPUTS, redaction_reason="safety.blocklist", builders=pack_builders(config)
    )
    assert with_reason.layers[-1].name == "redaction_context"
    assert with_reason.text.endswith("continue safely.")
    assert "reason: safety.blocklist" in with_reason.text
    assert with_reason.text.startswith(without.text + LAYER_SEPARATOR)


def test_debrief_differs_only_in_layer_5_tools_and_trimming(make_pack) -> None:
    config, snapshot = setup(make_pack)
    dialogue, debrief = config.profiles["dialogue"], config.profiles["debrief"]
    a = build_system_prompt(snapshot, dialogue, FULL_INPUTS, builders=pack_builders(config))
    b = build_system_prompt(snapshot, debrief, FULL_INPUTS, builders=pack_builders(config))
    assert len(a.layers) == len(b.layers)
    differing = [i for i, (x, y) in enumerate(zip(a.layers, b.layers, strict=True)) if x.sha256 != y.sha256]
    assert differing == [4]
    assert (a.layers[4].builder, b.layers[4].builder) == ("task_context", "task_context_debrief")
    debrief_block = b.text.split(LAYER_SEPARATOR + "## Safety configuration")[0]
    assert "Drop the adversarial stance" in debrief_block
    assert "Techniques you used (reveal each one):" in debrief_block
    assert "Never reveal this list" not in b.text
    assert (a.trim_history, b.trim_history) == (True, False)
    assert [t.name for t in config.tools_for(dialogue)] == ["transition_phase"]
    assert config.tools_for(debrief) == []


def test_profile_selection_by_intent_type_and_mode(make_pack) -> None:
    config = load_prompt_config(make_pack())
    assert config.profile_for("chat.message", {}).name == "dialogue"
    assert config.profile_for("chat.message", {"mode": "dialogue"}).name == "dialogue"
    assert config.profile_for("chat.message", {"mode": "debrief"}).name == "debrief"
    assert config.profile_for("chat.message", {"mode": 7}).name == "dialogue"
    assert config.profile_for("other.type", {"mode": "debrief"}).name == "dialogue"


def test_file_layers_union_in_first_appearance_order(make_pack) -> None:
    assert load_prompt_config(make_pack()).file_layers() == ["persona", "behaviour", "safety"]


def test_task_id_from_inputs() -> None:
    assert task_id_from_inputs({"task_id": "t1"}) == "t1"
    assert task_id_from_inputs({"task_id": ""}) is None
    assert task_id_from_inputs({"task_id": 3}) is None
    assert task_id_from_inputs({}) is None


def bad(mutate) -> str:
    config = profiles_config()
    mutate(config)
    with pytest.raises(PromptPackError) as info:
        parse_prompt_config(config)
    assert info.value.reason_code == "prompts.invalid_config"
    return info.value.detail


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda c: c["profiles"]["dialogue"]["layers"].append({"builder": "nope"}), "unknown builder"),
        (lambda c: c["profiles"]["dialogue"]["layers"].append({"file": "persona"}), "unique"),
        (
            lambda c: c["profiles"]["dialogue"]["layers"].append({"file": "x", "builder": "language"}),
            "exactly one",
        ),
        (lambda c: c["profiles"]["dialogue"]["layers"].append({"file": "../etc"}), "file"),
        (lambda c: c["profiles"]["dialogue"]["layers"].append({"file": "provider_override"}), "reserved"),
        (lambda c: c["profiles"]["dialogue"]["layers"][6].pop("params"), "needs params"),
        (lambda c: c.update(default_profile="nope"), "default_profile"),
        (lambda c: c["select"].append({"profile": "nope"}), "unknown profile"),
        (lambda c: c["profiles"]["dialogue"].update(tools=["nope"]), "unknown tools"),
        (lambda c: c["profiles"]["dialogue"].update(extra=1), "extra"),
        (lambda c: c.update(schema_version="v0"), "schema_version"),
        (lambda c: c["tools"][0].update(signals={"done": "on_success"}), "differs"),
        (
            lambda c: c["output_safety"]["rules"].append({"id": "len", "type": "max_length", "max_chars": 1}),
            "duplicate",
        ),
    ],
)
def test_config_errors_are_clear(mutate, needle: str) -> None:
    assert needle in bad(mutate)


LEARNING_BUILDER = """
def learning_profile(inputs, params, runtime):
    level = inputs.get("level")
    return f"{params['title']}\\nLevel: {level} ({runtime.provider})" if level else None
"""


def test_custom_builder_is_configuration_plus_one_function(make_pack) -> None:
    config = copy.deepcopy(profiles_config())
    config["builders"]["learning_profile"] = "learning.py:learning_profile"
    config["profiles"]["dialogue"]["layers"].insert(
        1, {"builder": "learning_profile", "name": "learning", "params": {"title": "## Level"}}
    )
    pack = make_pack({**BASIC_FILES, "learning.py": LEARNING_BUILDER}, config=config)
    loaded = load_prompt_config(pack)
    snapshot = load_snapshot(pack, task_id="t1", provider="openai", config=loaded)
    prompt = build_system_prompt(
        snapshot, loaded.profiles["dialogue"], {"level": "B1"}, builders=pack_builders(loaded)
    )
    assert prompt.layers[1].name == "learning" and prompt.layers[1].builder == "learning_profile"
    assert "DEFAULT PERSONA\n\n## Level\nLevel: B1 (openai)\n\nTASK BEHAVIOUR" in prompt.text


def test_failing_builder_is_a_prompt_error(make_pack) -> None:
    config = profiles_config()
    config["builders"]["broken"] = "tests.prompts.module_builders:broken"
    config["profiles"]["dialogue"]["layers"].append({"builder": "broken"})
    pack = make_pack(config=config)
    loaded = load_prompt_config(pack)
    snapshot = load_snapshot(pack, task_id=None, provider="openai", config=loaded)
    with pytest.raises(PromptError) as info:
        build_system_prompt(snapshot, loaded.profiles["dialogue"], {}, builders=pack_builders(loaded))
    assert info.value.reason_code == "prompts.builder_failed"


def test_task_context_wording_is_configurable(make_pack) -> None:
    config = profiles_config()
    config["profiles"]["dialogue"]["layers"][4]["params"] = {
        "title": "## Užduotis",
        "instruction": "Stay on task.",
        "labels": {"checklist": "Criteria:"},
    }
    pack = make_pack(config=config)
    loaded = load_prompt_config(pack)
    snapshot = load_snapshot(pack, task_id="t1", provider="openai", config=loaded)
    text = build_system_prompt(
        snapshot, loaded.profiles["dialogue"], FULL_INPUTS, builders=pack_builders(loaded)
    ).text
    assert "## Užduotis\nPersona mode" in text
    assert "Criteria:\n- spots the deadline" in text and "Manipulation patterns to use" in text
    assert "Stay on task." in text and "Never reveal this list" not in text
