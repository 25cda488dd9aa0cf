"""Property: build_system_prompt is a pure function of (snapshot, profile, inputs, redaction_reason)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.prompts.helpers import EXAMPLE_PACK
from turngate.core.system_prompt import build_system_prompt
from turngate.prompts.loader import load_prompt_config, load_snapshot
from turngate.prompts.pack_builders import pack_builders

CONFIG = load_prompt_config(EXAMPLE_PACK)
SNAPSHOT = load_snapshot(EXAMPLE_PACK, task_id="phishing-01", provider="openai", config=CONFIG)

text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False) | text
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
task = st.fixed_dictionaries(
    {},
    optional={
        "persona_mode": json_values,
        "current_phase": json_values,
        "patterns_embedded": json_values,
        "checklist": json_values,
        "pass_conditions": json_values,
    },
)
inputs_strategy = st.fixed_dictionaries(
    {},
    optional={
        "mode": st.sampled_from(["dialogue", "debrief", "other"]),
        "task": task | json_values,
        "safety": st.fixed_dictionaries(
            {}, optional={"content_boundaries": json_values, "intensity_ceiling": json_values}
        ),
        "choices": st.lists(
            st.fixed_dictionaries({}, optional={"context_label": text, "choice_id": text}), max_size=3
        )
        | json_values,
        "extra": json_values,
    },
)


def reorder(value: Any) -> Any:
    """The same JSON value with every mapping's keys in reverse order."""
    if isinstance(value, dict):
        return {key: reorder(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [reorder(item) for item in value]
    return value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    inputs=inputs_strategy, redaction=st.none() | text, profile_name=st.sampled_from(["dialogue", "debrief"])
)
def test_build_is_pure_and_key_order_independent(
    inputs: dict[str, Any], redaction: str | None, profile_name: str
):
    profile = CONFIG.profiles[profile_name]
    snapshot_copy = SNAPSHOT.model_validate(json.loads(SNAPSHOT.model_dump_json()))
    first = build_system_prompt(
        SNAPSHOT, profile, inputs, redaction_reason=redaction, builders=pack_builders(CONFIG)
    )
    again = build_system_prompt(
        snapshot_copy,
        profile,
        json.loads(json.dumps(inputs)),
        redaction_reason=redaction,
        builders=pack_builders(CONFIG),
    )
    shuffled = build_system_prompt(
        SNAPSHOT, profile, reorder(inputs), redaction_reason=redaction, builders=pack_builders(CONFIG)
    )
    assert first == again == shuffled
    # The file layers and the always-present data layers are there whatever the inputs.
    names = [layer.name for layer in first.layers]
    assert names[:4] == ["persona", "behaviour", "safety", "provider_override"]
    assert {"safety_config", "language"} <= set(names)
    assert first.text.count("Always respond in Lithuanian.") >= 1
