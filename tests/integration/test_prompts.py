"""Prompt assembly in real turns with the Trickster example pack: layers, pinning, tools, redaction."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.integration.test_streaming_e2e import read_sse
from tests.stack import make_settings, running_stack
from turngate.artifacts import open_artifact_store
from turngate.core.assembly import chars_div_3
from turngate.core.canonical import canonical_bytes
from turngate.prompts.loader import load_prompt_config

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trickster"
INPUTS = json.loads((EXAMPLE / "intent-inputs.json").read_text())


@pytest.fixture
def pack(tmp_path: Path) -> Path:
    target = tmp_path / "prompts"
    shutil.copytree(EXAMPLE / "prompts", target)
    return target


def system_prompt_sent(settings, execution: dict) -> str:
    store = open_artifact_store(settings.effective_artifacts)
    prompt = json.loads(store.get(execution["fault_snapshots"]["prompt_snapshot"]["artifact_id"]))
    return next(m["content"] for m in prompt["messages"] if m["role"] == "system")


def manifest_tokens(settings, turn: dict) -> int:
    pointer = turn["decision"]["payload"]["manifest"]
    return json.loads(open_artifact_store(settings.effective_artifacts).get(pointer["artifact_id"]))[
        "estimated_tokens"
    ]


def tokens_sent(settings, turn: dict, pack: Path) -> int:
    """chars/3 (the default estimator) of each message sent, plus the offered tool definitions."""
    store = open_artifact_store(settings.effective_artifacts)
    sent = json.loads(
        store.get(turn["execution"]["payload"]["fault_snapshots"]["prompt_snapshot"]["artifact_id"])
    )
    config = load_prompt_config(pack)
    profile = turn["decision"]["payload"]["prompt"]["profile"]
    offered = turn["decision"]["payload"]["prompt"]["tools_offered"]
    tools = [spec.definition() for spec in config.tools_for(config.profiles[profile]) if spec.name in offered]
    total = sum(chars_div_3(message["content"]) for message in sent["messages"])
    return total + (chars_div_3(canonical_bytes(tools).decode()) if tools else 0)


async def final_stream_event(stack, correlation_id: str) -> tuple[str, dict]:
    async with stack.http.stream("GET", f"/turns/{correlation_id}/stream") as resp:
        return (await read_sse(resp))[-1]


def refs_to(*turns: str) -> list[dict]:
    out = []
    for turn in turns:
        out += [{"ref_id": turn}, {"ref_type": "execution", "ref_id": turn}]
    return out


async def test_prompt_layers_pinning_tools_and_redaction(tmp_path, temporal_server, pack):
    settings = make_settings(tmp_path / "data", temporal_server.address, prompts_dir=pack)
    inputs = INPUTS | {"debug_snapshot": True}
    async with running_stack(settings) as stack:
        first = (await stack.chat("Labas", correlation_id="c-1", thread_id="t", inputs=inputs)).json()
        prompt = first["decision"]["payload"]["prompt"]
        assert prompt["task_id"] == "phishing-01" and prompt["pinned_by_index"] is None
        assert [layer["name"] for layer in prompt["layers"]][:3] == ["persona", "behaviour", "safety"]
        assert prompt["tools_offered"] == []  # min_exchanges is 2
        sent = system_prompt_sent(settings, first["execution"]["payload"])
        assert "Lithuanian" in sent

        # A teacher edits the persona mid-session: this thread keeps its snapshot.
        persona = next(pack.rglob("persona.md"))
        persona.write_text("EDITED PERSONA\n")
        second = (
            await stack.chat(
                "Kas čia?",
                correlation_id="c-2",
                thread_id="t",
                parent_turn_id="c-1",
                inputs=inputs,
                declared_refs=refs_to("c-1"),
            )
        ).json()
        pinned = second["decision"]["payload"]["prompt"]
        assert pinned["snapshot_digest"] == prompt["snapshot_digest"]
        assert pinned["pinned_by_index"] == first["decision"]["index"]
        assert "EDITED PERSONA" not in system_prompt_sent(settings, second["execution"]["payload"])
        assert (
            second["decision"]["payload"]["context_spec"]["prompt"]["snapshot_digest"]
            == prompt["snapshot_digest"]
        )

        # Two completed exchanges in the declared context: the transition tool is offered.
        third = (
            await stack.chat(
                "Gerai",
                correlation_id="c-3",
                thread_id="t",
                parent_turn_id="c-2",
                inputs=inputs,
                declared_refs=refs_to("c-1", "c-2"),
            )
        ).json()
        assert third["decision"]["payload"]["prompt"]["tools_offered"] == ["transition_phase"]
        # What is sent counts against the budget: the messages and the offered tool definitions.
        assert manifest_tokens(settings, third) == tokens_sent(settings, third, pack)
        assert third["execution"]["payload"]["exchanges_count"] == 3

        # Output safety: the echo repeats a blocked phrase, so the answer is redacted...
        bad = (
            await stack.chat(
                "Tell me your CVV",
                correlation_id="c-4",
                thread_id="t",
                parent_turn_id="c-3",
                inputs=inputs,
                declared_refs=refs_to("c-3"),
            )
        ).json()
        execution = bad["execution"]["payload"]
        assert execution["redacted"] is True and execution["output_text"] == ""
        assert execution["redaction"]["reason_code"] == "safety.blocklist"
        raw = open_artifact_store(settings.effective_artifacts).get(
            execution["fault_snapshots"]["redacted_output"]["artifact_id"]
        )
        assert b"CVV" in raw
        # ...and only the next turn is told why (one-shot).
        after = (
            await stack.chat(
                "Atsiprašau",
                correlation_id="c-5",
                thread_id="t",
                parent_turn_id="c-4",
                inputs=inputs,
                declared_refs=refs_to("c-4"),
            )
        ).json()
        told = after["decision"]["payload"]["prompt"]
        assert told["redaction_context"] == "safety.blocklist"
        assert "redaction_context" in [layer["name"] for layer in told["layers"]]
        later = (
            await stack.chat(
                "Toliau",
                correlation_id="c-6",
                thread_id="t",
                parent_turn_id="c-5",
                inputs=inputs,
                declared_refs=refs_to("c-5"),
            )
        ).json()
        assert later["decision"]["payload"]["prompt"]["redaction_context"] is None

        # A new thread picks up the edited file.
        fresh = (await stack.chat("Labas", correlation_id="c-7", thread_id="t2", inputs=inputs)).json()
        assert fresh["decision"]["payload"]["prompt"]["snapshot_digest"] != prompt["snapshot_digest"]
        assert "EDITED PERSONA" in system_prompt_sent(settings, fresh["execution"]["payload"])


async def test_debrief_profile_is_configuration(tmp_path, temporal_server, pack):
    settings = make_settings(tmp_path / "data", temporal_server.address, prompts_dir=pack, token_budget=10)
    debrief = json.loads((EXAMPLE / "intent-inputs-debrief.json").read_text())
    async with running_stack(settings) as stack:
        await stack.chat("Labas " * 20, correlation_id="c-1", thread_id="t", inputs=INPUTS)
        body = (
            await stack.chat(
                "Kas buvo?",
                correlation_id="c-2",
                thread_id="t",
                parent_turn_id="c-1",
                inputs=debrief,
                declared_refs=refs_to("c-1"),
            )
        ).json()
        dialogue_done = await final_stream_event(stack, "c-1")
        debrief_done = await final_stream_event(stack, "c-2")
    # The turn stream ends in the shape of the profile's done_event.
    assert dialogue_done[0] == "done" and "debrief_complete" not in dialogue_done[1]
    assert {"phase_transition", "next_phase", "exchanges_count"} <= set(dialogue_done[1])
    assert debrief_done == ("done", debrief_done[1])
    assert debrief_done[1]["debrief_complete"] is True and "phase_transition" not in debrief_done[1]
    prompt = body["decision"]["payload"]["prompt"]
    assert prompt["profile"] == "debrief" and prompt["tools_offered"] == []
    # Full history: no budget trimming even with a tiny budget.
    store = open_artifact_store(settings.effective_artifacts)
    manifest = json.loads(store.get(body["decision"]["payload"]["manifest"]["artifact_id"]))
    assert not [e for e in manifest["exclusion_log"] if e["excluded_reason"] == "budget_limit"]


async def test_bad_task_id_is_a_recorded_deny(tmp_path, temporal_server, pack):
    settings = make_settings(tmp_path / "data", temporal_server.address, prompts_dir=pack)
    async with running_stack(settings) as stack:
        body = (await stack.chat("hi", correlation_id="c-1", inputs={"task_id": "../../etc"})).json()
    decision = body["decision"]["payload"]
    assert decision["decision"] == "DENY"
    assert decision["reason_codes"][0].startswith("prompts.")
    assert "execution" not in body


async def test_a_thread_pins_its_first_decision_that_recorded_a_prompt(tmp_path, temporal_server, pack):
    """A first turn denied before its prompt was built pins nothing; the next turn pins, and a
    later edit of the pack does not reach the thread."""
    settings = make_settings(tmp_path / "data", temporal_server.address, prompts_dir=pack)
    async with running_stack(settings) as stack:
        denied = (
            await stack.chat(
                "Labas",
                correlation_id="c-1",
                thread_id="t",
                inputs=INPUTS,
                requested_model_id="no-such-model",
            )
        ).json()["decision"]
        assert denied["payload"]["reason_codes"] == ["model.unavailable"]
        assert not denied["payload"].get("prompt")
        first = (
            await stack.chat(
                "Labas", correlation_id="c-2", thread_id="t", parent_turn_id="c-1", inputs=INPUTS,
                declared_refs=[{"ref_id": "c-1"}],
            )
        ).json()  # fmt: skip
        pinned = first["decision"]["payload"]["prompt"]
        assert pinned["pinned_by_index"] is None  # this turn pins the snapshot
        next(pack.rglob("persona.md")).write_text("EDITED PERSONA\n")
        later = (
            await stack.chat(
                "Kas čia?", correlation_id="c-3", thread_id="t", parent_turn_id="c-2",
                inputs=INPUTS | {"debug_snapshot": True},
                declared_refs=refs_to("c-2"),
            )
        ).json()  # fmt: skip
        prompt = later["decision"]["payload"]["prompt"]
        assert prompt["snapshot_digest"] == pinned["snapshot_digest"]
        assert prompt["pinned_by_index"] == first["decision"]["index"]
        assert "EDITED PERSONA" not in system_prompt_sent(settings, later["execution"]["payload"])
        # A new thread loads the edited pack.
        fresh = (await stack.chat("Labas", correlation_id="c-new", thread_id="t2", inputs=INPUTS)).json()
        assert fresh["decision"]["payload"]["prompt"]["snapshot_digest"] != pinned["snapshot_digest"]


async def test_the_debrief_stream_shape_is_a_profile_flag(tmp_path, temporal_server, pack):
    """Any profile can end its turns' stream with `debrief_complete` (the flag, not the name)."""
    config = json.loads((pack / "profiles.json").read_text())
    config["profiles"]["dialogue"]["done_event"] = "debrief"
    (pack / "profiles.json").write_text(json.dumps(config))
    settings = make_settings(tmp_path / "data", temporal_server.address, prompts_dir=pack)
    async with running_stack(settings) as stack:
        body = (await stack.chat("Labas", correlation_id="c-1", thread_id="t", inputs=INPUTS)).json()
        assert body["decision"]["payload"]["prompt"]["profile"] == "dialogue"
        kind, done = await final_stream_event(stack, "c-1")
    assert (kind, done["debrief_complete"], done["correlation_id"]) == ("done", True, "c-1")
