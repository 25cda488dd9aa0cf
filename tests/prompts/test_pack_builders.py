"""A pack's own layer builders: named in profiles.json, loaded once at start, looked up per turn."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.prompts.helpers import BASIC_FILES, EXAMPLE_PACK, profiles_config, write_pack
from turngate.core.layer_builders import BUILT_IN_BUILDERS
from turngate.core.prompt_layers import PromptError, PromptPackError, parse_prompt_config
from turngate.core.system_prompt import build_system_prompt
from turngate.prompts import pack_builders as pack_builders_module
from turngate.prompts.loader import load_prompt_config, load_snapshot
from turngate.prompts.pack_builders import pack_builders


def config_with(builders: dict[str, str], layer: str | None = None) -> dict[str, Any]:
    config = copy.deepcopy(profiles_config())
    config["builders"].update(builders)
    if layer is not None:
        config["profiles"]["dialogue"]["layers"].append({"builder": layer})
    return config


def load_error(pack: Path) -> PromptPackError:
    with pytest.raises(PromptPackError) as info:
        load_prompt_config(pack)
    return info.value


def test_importing_the_product_registers_no_application_builder() -> None:
    assert sorted(BUILT_IN_BUILDERS) == ["language", "redaction_context"]
    with pytest.raises(PromptPackError, match="unknown builder 'task_context'"):
        parse_prompt_config(
            {
                "schema_version": "turngate.prompts.1",
                "default_profile": "p",
                "profiles": {"p": {"layers": [{"builder": "task_context"}]}},
            }
        )


def test_the_example_pack_names_its_builders_and_they_load_from_its_own_file() -> None:
    config = load_prompt_config(EXAMPLE_PACK)
    assert set(config.builders) == {"task_context", "task_context_debrief", "safety_config", "student_path"}
    assert all(ref.startswith("trickster_layers.py:") for ref in config.builders.values())
    builders = pack_builders(config)
    assert set(builders) == set(config.builders) | set(BUILT_IN_BUILDERS)
    module = sys.modules[builders["task_context"].__module__]
    assert Path(module.__file__ or "").resolve() == (EXAMPLE_PACK / "trickster_layers.py").resolve()


def test_a_builder_from_an_importable_module(tmp_path: Path) -> None:
    pack = write_pack(
        tmp_path / "p",
        BASIC_FILES,
        config_with({"greeting": "tests.prompts.module_builders:greeting"}, "greeting"),
    )
    config = load_prompt_config(pack)
    snapshot = load_snapshot(pack, task_id=None, provider="echo", config=config)
    prompt = build_system_prompt(snapshot, config.profiles["dialogue"], {}, builders=pack_builders(config))
    assert prompt.text.endswith("## Greeting\nHello from echo.")
    assert prompt.layers[-1].builder == "greeting"


def test_a_config_that_was_never_loaded_has_no_pack_builders() -> None:
    config = parse_prompt_config(config_with({"never_loaded": "never_loaded_mod.py:f"}, "never_loaded"))
    with pytest.raises(PromptError) as info:
        pack_builders(config)
    assert info.value.reason_code == "prompts.unknown_builder"
    assert "never_loaded" in info.value.detail


@pytest.mark.parametrize(
    ("builders", "needle"),
    [
        ({"language": "tests.prompts.module_builders:greeting"}, "built in"),
        ({"Bad-Name": "tests.prompts.module_builders:greeting"}, "builders"),
        ({"greeting": "../escape.py:f"}, "builders.greeting"),
        ({"greeting": "sub/dir.py:f"}, "builders.greeting"),
        ({"greeting": "no_function_part"}, "builders.greeting"),
        ({"greeting": "mod:f:g"}, "builders.greeting"),
    ],
)
def test_bad_builder_entries_are_config_errors(builders: dict[str, str], needle: str) -> None:
    with pytest.raises(PromptPackError) as info:
        parse_prompt_config(config_with(builders))
    assert info.value.reason_code == "prompts.invalid_config"
    assert needle in info.value.detail


@pytest.mark.parametrize(
    ("files", "ref", "reason_code", "needle"),
    [
        ({}, "missing.py:f", "prompts.unreadable", "missing.py"),
        ({"nofn.py": "X = 1\n"}, "nofn.py:f", "prompts.builder_import_failed", "'f' is not a function"),
        (
            {"raises.py": "raise RuntimeError('at import')\n"},
            "raises.py:f",
            "prompts.builder_import_failed",
            "at import",
        ),
        ({"syntax.py": "def f(:\n"}, "syntax.py:f", "prompts.builder_import_failed", "SyntaxError"),
        ({}, "tests.prompts.no_such_module:f", "prompts.builder_import_failed", "no_such_module"),
        (
            {},
            "tests.prompts.module_builders:NOT_A_FUNCTION",
            "prompts.builder_import_failed",
            "not a function",
        ),
    ],
)
def test_builders_that_do_not_load_stop_the_pack_loading(
    tmp_path: Path, files: dict[str, str], ref: str, reason_code: str, needle: str
) -> None:
    pack = write_pack(tmp_path / "p", {**BASIC_FILES, **files}, config_with({"extra": ref}, "extra"))
    error = load_error(pack)
    assert (error.reason_code, needle in error.detail) == (reason_code, True), error.detail


def test_a_builder_file_may_not_leave_the_pack(tmp_path: Path) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text("def f(inputs, params, runtime):\n    return 'outside'\n", encoding="utf-8")
    pack = write_pack(tmp_path / "p", BASIC_FILES, config_with({"extra": "linked.py:f"}, "extra"))
    (pack / "linked.py").symlink_to(outside)
    assert load_error(pack).reason_code == "prompts.path_escape"


def test_two_packs_with_different_code_under_one_reference_conflict(tmp_path: Path) -> None:
    source = "def f(inputs, params, runtime):\n    return {!r}\n"
    config = config_with({"extra": "conflict_layers.py:f"}, "extra")
    first = write_pack(tmp_path / "a", {**BASIC_FILES, "conflict_layers.py": source.format("A")}, config)
    same = write_pack(tmp_path / "b", {**BASIC_FILES, "conflict_layers.py": source.format("A")}, config)
    other = write_pack(tmp_path / "c", {**BASIC_FILES, "conflict_layers.py": source.format("C")}, config)
    load_prompt_config(first)
    load_prompt_config(same)  # the same code again: fine
    error = load_error(other)
    assert error.reason_code == "prompts.builder_conflict"
    assert pack_builders(parse_prompt_config(config))["extra"]({}, {}, None) == "A"  # type: ignore[arg-type]


@pytest.mark.parametrize(("extra_bytes", "loads"), [(-1, True), (0, True), (1, False)])
def test_builder_file_size_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra_bytes: int, loads: bool
) -> None:
    source = f"def f(inputs, params, runtime):\n    return 'sized {extra_bytes}'\n"
    limit = len(source.encode()) - extra_bytes
    monkeypatch.setattr(pack_builders_module, "MAX_BUILDER_FILE_BYTES", limit)
    name = f"sized_{extra_bytes + 1}.py"
    config = {
        "schema_version": "turngate.prompts.1",
        "default_profile": "p",
        "builders": {"extra": f"{name}:f"},
        "profiles": {"p": {"layers": [{"builder": "extra"}]}},
    }
    pack = write_pack(tmp_path / "p", {name: source}, config)
    if loads:
        assert pack_builders(load_prompt_config(pack))["extra"]({}, {}, None) == f"sized {extra_bytes}"  # type: ignore[arg-type]
    else:
        error = load_error(pack)
        assert error.reason_code == "prompts.too_large" and str(limit) in error.detail
