"""Prompt pack loading: task -> default -> skipped, provider overrides, clear errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.prompts.helpers import FILE_LAYERS
from turngate.core.canonical import digest_bytes
from turngate.core.prompt_layers import PROVIDER_OVERRIDE_LAYER, PromptPackError
from turngate.prompts.loader import load_pack_layers, load_prompt_config


def by_name(sources):
    return {source.name: source for source in sources}


def test_task_file_wins_then_default_then_skipped(make_pack) -> None:
    pack = make_pack(
        {
            "default/persona.md": "DEFAULT PERSONA\n",
            "default/behaviour.md": "DEFAULT BEHAVIOUR\n",
            "tasks/t1/behaviour.md": "TASK BEHAVIOUR\n",
        }
    )
    sources = load_pack_layers(pack, task_id="t1", provider="openai", file_layers=FILE_LAYERS)
    assert [s.name for s in sources] == [*FILE_LAYERS, PROVIDER_OVERRIDE_LAYER]
    layers = by_name(sources)
    assert (layers["persona"].origin, layers["persona"].path) == ("default", "default/persona.md")
    assert (layers["behaviour"].origin, layers["behaviour"].path) == ("task", "tasks/t1/behaviour.md")
    assert layers["behaviour"].content == "TASK BEHAVIOUR\n"
    assert layers["behaviour"].sha256 == digest_bytes(b"TASK BEHAVIOUR\n")
    assert layers["safety"].origin == "skipped"
    assert layers["safety"].content is None and layers["safety"].sha256 is None
    assert layers["safety"].skipped_reason == "no tasks/t1/safety.md or default/safety.md"


def test_without_task_id_only_defaults_are_used(make_pack) -> None:
    sources = by_name(load_pack_layers(make_pack(), task_id=None, provider="openai", file_layers=FILE_LAYERS))
    assert sources["behaviour"].origin == "default"
    assert sources[PROVIDER_OVERRIDE_LAYER].origin == "skipped"
    assert "no task_id" in (sources[PROVIDER_OVERRIDE_LAYER].skipped_reason or "")


def test_unknown_task_falls_back_to_defaults(make_pack) -> None:
    sources = by_name(load_pack_layers(make_pack(), task_id="t9", provider="openai", file_layers=FILE_LAYERS))
    assert {s.origin for n, s in sources.items() if n != PROVIDER_OVERRIDE_LAYER} == {"default"}


def test_provider_override_only_for_its_provider(make_pack) -> None:
    pack = make_pack()
    openai = by_name(load_pack_layers(pack, task_id="t1", provider="openai", file_layers=FILE_LAYERS))
    override = openai[PROVIDER_OVERRIDE_LAYER]
    assert (override.origin, override.path, override.content) == (
        "provider_override",
        "tasks/t1/openai.md",
        "OPENAI OVERRIDE\n",
    )
    for provider in ("anthropic", "ollama", "echo"):
        other = by_name(load_pack_layers(pack, task_id="t1", provider=provider, file_layers=FILE_LAYERS))
        assert other[PROVIDER_OVERRIDE_LAYER].origin == "skipped"
        assert other[PROVIDER_OVERRIDE_LAYER].skipped_reason == f"no tasks/t1/{provider}.md"


def test_utf8_bom_is_dropped(make_pack) -> None:
    pack = make_pack({"default/persona.md": "x"})
    (pack / "default/persona.md").write_bytes("\ufeffLabas".encode())
    persona = load_pack_layers(pack, task_id=None, provider="echo", file_layers=["persona"])[0]
    assert persona.content == "Labas"


@pytest.mark.parametrize("task_id", ["../default", "..", "a/b", "T1", "", "-x", "a" * 65, "x\x00", "a.b"])
def test_task_id_path_traversal_is_refused(make_pack, task_id: str) -> None:
    with pytest.raises(PromptPackError) as info:
        load_pack_layers(make_pack(), task_id=task_id, provider="openai", file_layers=FILE_LAYERS)
    assert info.value.reason_code == "prompts.invalid_task_id"


@pytest.mark.parametrize("provider", ["../x", "Open AI", ""])
def test_invalid_provider_is_refused(make_pack, provider: str) -> None:
    with pytest.raises(PromptPackError) as info:
        load_pack_layers(make_pack(), task_id="t1", provider=provider, file_layers=FILE_LAYERS)
    assert info.value.reason_code == "prompts.invalid_provider"


def test_provider_named_like_a_file_layer_is_refused(make_pack) -> None:
    with pytest.raises(PromptPackError) as info:
        load_pack_layers(make_pack(), task_id="t1", provider="persona", file_layers=FILE_LAYERS)
    assert info.value.reason_code == "prompts.invalid_provider"


@pytest.mark.parametrize("layers", [["../persona"], [PROVIDER_OVERRIDE_LAYER], ["persona", "persona"]])
def test_invalid_layer_names_are_refused(make_pack, layers: list[str]) -> None:
    with pytest.raises(PromptPackError) as info:
        load_pack_layers(make_pack(), task_id="t1", provider="openai", file_layers=layers)
    assert info.value.reason_code == "prompts.invalid_layer_name"


def test_missing_pack_dir(tmp_path: Path) -> None:
    with pytest.raises(PromptPackError) as info:
        load_pack_layers(tmp_path / "nope", task_id=None, provider="openai", file_layers=FILE_LAYERS)
    assert info.value.reason_code == "prompts.pack_not_found"


def test_non_utf8_file(make_pack) -> None:
    pack = make_pack()
    (pack / "default/persona.md").write_bytes(b"\xff\xfe bad")
    with pytest.raises(PromptPackError) as info:
        load_pack_layers(pack, task_id=None, provider="openai", file_layers=FILE_LAYERS)
    assert info.value.reason_code == "prompts.not_utf8"


def test_too_large_file(make_pack) -> None:
    with pytest.raises(PromptPackError) as info:
        load_pack_layers(
            make_pack(), task_id=None, provider="openai", file_layers=FILE_LAYERS, max_layer_bytes=5
        )
    assert info.value.reason_code == "prompts.too_large"


def test_directory_in_place_of_a_file(make_pack) -> None:
    pack = make_pack({"default/persona.md/inner.md": "x"})
    with pytest.raises(PromptPackError) as info:
        load_pack_layers(pack, task_id=None, provider="openai", file_layers=["persona"])
    assert info.value.reason_code == "prompts.unreadable"


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlink_out_of_the_pack_is_refused(make_pack, tmp_path: Path) -> None:
    pack = make_pack({"default/persona.md": "x"})
    secret = tmp_path / "secret.txt"
    secret.write_text("not a prompt")
    (pack / "default/behaviour.md").symlink_to(secret)
    with pytest.raises(PromptPackError) as info:
        load_pack_layers(pack, task_id=None, provider="openai", file_layers=["persona", "behaviour"])
    assert info.value.reason_code == "prompts.path_escape"


def test_profiles_json_errors(make_pack) -> None:
    pack = make_pack()
    (pack / "profiles.json").write_text("{not json")
    with pytest.raises(PromptPackError) as info:
        load_prompt_config(pack)
    assert info.value.reason_code == "prompts.invalid_config"
    (pack / "profiles.json").unlink()
    with pytest.raises(PromptPackError) as info:
        load_prompt_config(pack)
    assert info.value.reason_code == "prompts.invalid_config"
