"""Prompt snapshots: content-addressed, stored as canonical bytes, pinned per thread (session integrity)."""

from __future__ import annotations

import json

import pytest

from tests.prompts.helpers import FILE_LAYERS
from turngate.core.canonical import canonical_bytes, digest
from turngate.core.prompt_layers import (
    PromptError,
    PromptSnapshotError,
    snapshot_bytes,
    snapshot_from_bytes,
    snapshot_from_sources,
)
from turngate.core.system_prompt import build_system_prompt
from turngate.prompts.loader import load_pack_layers, load_prompt_config, load_snapshot
from turngate.prompts.pack_builders import pack_builders


def test_digest_is_stable_under_order(make_pack) -> None:
    sources = load_pack_layers(make_pack(), task_id="t1", provider="openai", file_layers=FILE_LAYERS)
    forward = snapshot_from_sources(sources, task_id="t1", provider="openai")
    backward = snapshot_from_sources(list(reversed(sources)), task_id="t1", provider="openai")
    assert forward.snapshot_digest == backward.snapshot_digest
    assert snapshot_bytes(forward) == snapshot_bytes(backward)
    assert forward.snapshot_digest == digest(forward.body())


def test_digest_changes_with_any_layer_byte_task_or_provider(make_pack) -> None:
    pack = make_pack()
    base = load_snapshot(pack, task_id="t1", provider="openai").snapshot_digest
    seen = {base}
    for relative in (
        "default/persona.md",
        "tasks/t1/behaviour.md",
        "default/safety.md",
        "tasks/t1/openai.md",
    ):
        path = pack / relative
        original = path.read_bytes()
        path.write_bytes(original + b" ")
        changed = load_snapshot(pack, task_id="t1", provider="openai").snapshot_digest
        assert changed not in seen
        seen.add(changed)
        path.write_bytes(original)
    assert load_snapshot(pack, task_id="t1", provider="openai").snapshot_digest == base
    assert load_snapshot(pack, task_id="t1", provider="anthropic").snapshot_digest != base
    assert load_snapshot(pack, task_id="t2", provider="openai").snapshot_digest != base


def test_bytes_round_trip_and_verification(make_pack) -> None:
    snapshot = load_snapshot(make_pack(), task_id="t1", provider="openai")
    data = snapshot_bytes(snapshot)
    assert data == canonical_bytes(json.loads(data))
    again = snapshot_from_bytes(data, expected_digest=snapshot.snapshot_digest)
    assert again == snapshot


def test_tampered_snapshot_bytes_are_refused(make_pack) -> None:
    snapshot = load_snapshot(make_pack(), task_id="t1", provider="openai")
    raw = json.loads(snapshot_bytes(snapshot))

    # Content changed but sha256 left: the layer itself is inconsistent.
    edited = json.loads(json.dumps(raw))
    edited["layers"]["persona"]["content"] = "EVIL PERSONA"
    with pytest.raises(PromptSnapshotError) as info:
        snapshot_from_bytes(json.dumps(edited).encode())
    assert info.value.reason_code == "prompts.snapshot_invalid"

    # A consistent layer swapped in: the snapshot digest no longer matches.
    edited = json.loads(json.dumps(raw))
    edited["layers"]["persona"]["content"] = "EVIL PERSONA"
    edited["layers"]["persona"]["sha256"] = digest_text("EVIL PERSONA")
    with pytest.raises(PromptSnapshotError) as info:
        snapshot_from_bytes(json.dumps(edited).encode())
    assert info.value.reason_code == "prompts.snapshot_digest_mismatch"

    with pytest.raises(PromptSnapshotError) as info:
        snapshot_from_bytes(snapshot_bytes(snapshot), expected_digest="sha256:" + "0" * 64)
    assert info.value.reason_code == "prompts.snapshot_not_pinned"

    for junk in (b"not json", b"[]", b'{"schema_version": "x"}'):
        with pytest.raises(PromptSnapshotError) as info:
            snapshot_from_bytes(junk)
        assert info.value.reason_code == "prompts.snapshot_invalid"


def digest_text(text: str) -> str:
    from turngate.core.canonical import digest_bytes

    return digest_bytes(text.encode())


def test_pinned_snapshot_ignores_later_edits_and_a_fresh_load_sees_them(make_pack) -> None:
    pack = make_pack()
    config = load_prompt_config(pack)
    profile = config.profiles["dialogue"]
    inputs = {"task": {"current_phase": "dialogue"}}

    first = load_snapshot(pack, task_id="t1", provider="openai", config=config)
    stored = snapshot_bytes(first)  # the caller stores this as an artifact and pins the digest
    before = build_system_prompt(first, profile, inputs, builders=pack_builders(config))

    (pack / "tasks/t1/behaviour.md").write_text("EDITED MID-SESSION\n")
    (pack / "tasks/t1/persona.md").write_text("A NEW TASK PERSONA\n")  # a layer that was absent

    pinned = snapshot_from_bytes(stored, expected_digest=first.snapshot_digest)
    after = build_system_prompt(pinned, profile, inputs, builders=pack_builders(config))
    assert after == before
    assert "EDITED" not in after.text and "A NEW TASK PERSONA" not in after.text

    fresh = load_snapshot(pack, task_id="t1", provider="openai", config=config)
    assert fresh.snapshot_digest != first.snapshot_digest
    rebuilt = build_system_prompt(fresh, profile, inputs, builders=pack_builders(config))
    assert "EDITED MID-SESSION" in rebuilt.text and "A NEW TASK PERSONA" in rebuilt.text
    assert rebuilt.snapshot_digest == fresh.snapshot_digest


def test_profile_layer_missing_from_snapshot_is_an_error(make_pack) -> None:
    pack = make_pack()
    config = load_prompt_config(pack)
    partial = snapshot_from_sources(
        load_pack_layers(pack, task_id="t1", provider="openai", file_layers=["persona"]),
        task_id="t1",
        provider="openai",
    )
    with pytest.raises(PromptError) as info:
        build_system_prompt(partial, config.profiles["dialogue"], {}, builders=pack_builders(config))
    assert info.value.reason_code == "prompts.layer_not_in_snapshot"


def test_duplicate_sources_are_refused(make_pack) -> None:
    sources = load_pack_layers(make_pack(), task_id="t1", provider="openai", file_layers=["persona"])
    with pytest.raises(PromptSnapshotError):
        snapshot_from_sources([*sources, sources[0]], task_id="t1", provider="openai")
