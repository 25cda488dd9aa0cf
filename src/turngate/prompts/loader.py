"""Read a prompt pack directory (the prompt-assembly pipeline's loader).

Layout (``pack_dir`` is the ``prompts/`` directory, e.g. ``TURNGATE_PROMPTS_DIR``)::

    profiles.json                  profiles, selection rules, builders, tools, output safety rules
    *.py                           the pack's own layer builders (named in profiles.json)
    default/{layer}.md             the default text of each file layer
    tasks/{task_id}/{layer}.md     a task's own text for a layer (wins over the default)
    tasks/{task_id}/{provider}.md  provider-specific task override

Each file layer resolves task file -> default file -> skipped (with the reason); the provider
override is the task's ``{provider}.md`` or skipped. This module reads the pack's files: call it
from an activity (or at start-up), never from workflow code, and pin what it returns with
:func:`turngate.core.prompt_layers.snapshot_from_sources`. :func:`load_prompt_config` also loads
the pack's own layer builders (:mod:`turngate.prompts.pack_builders`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from turngate.core.prompt_layers import (
    PROVIDER_OVERRIDE_LAYER,
    SLUG_PATTERN,
    LayerOrigin,
    LayerSource,
    PromptConfig,
    PromptPackError,
    PromptSnapshot,
    found_layer,
    parse_prompt_config,
    skipped_layer,
    snapshot_from_sources,
)
from turngate.prompts.pack_builders import load_pack_builders
from turngate.prompts.pack_files import read_pack_file

__all__ = [
    "DEFAULT_MAX_LAYER_BYTES",
    "PROFILES_FILE",
    "PROMPTS_DIR_ENV",
    "PromptPackError",
    "load_pack_layers",
    "load_prompt_config",
    "load_snapshot",
]

PROMPTS_DIR_ENV = "TURNGATE_PROMPTS_DIR"
PROFILES_FILE = "profiles.json"
DEFAULT_DIR = "default"
TASKS_DIR = "tasks"
DEFAULT_MAX_LAYER_BYTES = 64 * 1024
MAX_PROFILES_BYTES = 1024 * 1024

_SLUG = re.compile(SLUG_PATTERN)


def _check_slug(value: str, what: str, reason_code: str) -> None:
    if not isinstance(value, str) or not _SLUG.match(value):
        raise PromptPackError(
            reason_code, f"{what} {value!r} must match {SLUG_PATTERN} (lowercase, no path separators)"
        )


def _pack_root(pack_dir: Path) -> Path:
    root = Path(pack_dir)
    if not root.is_dir():
        raise PromptPackError("prompts.pack_not_found", f"prompt pack directory {str(root)!r} does not exist")
    return root.resolve()


def _read_text(root: Path, relative: str, max_bytes: int) -> str | None:
    """The UTF-8 text of ``root/relative``, or None when there is no such file."""
    data = read_pack_file(root, relative, max_bytes)
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PromptPackError("prompts.not_utf8", f"{relative} is not UTF-8 text: {exc.reason}") from exc
    return text.removeprefix("\ufeff")


def load_pack_layers(
    pack_dir: Path,
    *,
    task_id: str | None,
    provider: str,
    file_layers: Sequence[str],
    max_layer_bytes: int = DEFAULT_MAX_LAYER_BYTES,
) -> list[LayerSource]:
    """Resolve ``file_layers`` (in order) and then the provider override layer.

    Raises :class:`PromptPackError`: ``prompts.pack_not_found``, ``prompts.invalid_task_id``,
    ``prompts.invalid_provider``, ``prompts.invalid_layer_name``, ``prompts.path_escape``,
    ``prompts.unreadable``, ``prompts.too_large``, ``prompts.not_utf8``.
    """
    if task_id is not None:
        _check_slug(task_id, "task_id", "prompts.invalid_task_id")
    _check_slug(provider, "provider", "prompts.invalid_provider")
    names = list(file_layers)
    for name in names:
        _check_slug(name, "layer name", "prompts.invalid_layer_name")
    if PROVIDER_OVERRIDE_LAYER in names:
        raise PromptPackError("prompts.invalid_layer_name", f"{PROVIDER_OVERRIDE_LAYER!r} is reserved")
    if len(set(names)) != len(names):
        raise PromptPackError("prompts.invalid_layer_name", f"file layers repeat a name: {names}")
    if provider in names:
        raise PromptPackError(
            "prompts.invalid_provider",
            f"provider {provider!r} has the same name as a file layer; tasks/<id>/{provider}.md "
            "would be both",
        )
    root = _pack_root(pack_dir)

    sources: list[LayerSource] = []
    for name in names:
        candidates: list[tuple[LayerOrigin, str]] = []
        if task_id is not None:
            candidates.append(("task", f"{TASKS_DIR}/{task_id}/{name}.md"))
        candidates.append(("default", f"{DEFAULT_DIR}/{name}.md"))
        for origin, relative in candidates:
            text = _read_text(root, relative, max_layer_bytes)
            if text is not None:
                sources.append(found_layer(name, origin, relative, text))
                break
        else:
            tried = " or ".join(relative for _, relative in candidates)
            sources.append(skipped_layer(name, f"no {tried}"))

    if task_id is None:
        sources.append(skipped_layer(PROVIDER_OVERRIDE_LAYER, "no task_id, so no provider override"))
    else:
        relative = f"{TASKS_DIR}/{task_id}/{provider}.md"
        text = _read_text(root, relative, max_layer_bytes)
        if text is None:
            sources.append(skipped_layer(PROVIDER_OVERRIDE_LAYER, f"no {relative}"))
        else:
            sources.append(found_layer(PROVIDER_OVERRIDE_LAYER, "provider_override", relative, text))
    return sources


def load_prompt_config(pack_dir: Path) -> PromptConfig:
    """Read and validate ``profiles.json`` and load the builders it names (at start-up).

    Raises :class:`PromptPackError`: ``prompts.invalid_config``, ``prompts.unreadable``, and the
    builder loading errors of :func:`turngate.prompts.pack_builders.load_pack_builders`.
    """
    root = _pack_root(pack_dir)
    text = _read_text(root, PROFILES_FILE, MAX_PROFILES_BYTES)
    if text is None:
        raise PromptPackError("prompts.invalid_config", f"{root / PROFILES_FILE} does not exist")
    config = parse_prompt_config(text)
    load_pack_builders(config, root)
    return config


def load_snapshot(
    pack_dir: Path,
    *,
    task_id: str | None,
    provider: str,
    config: PromptConfig | None = None,
    max_layer_bytes: int = DEFAULT_MAX_LAYER_BYTES,
) -> PromptSnapshot:
    """A fresh snapshot of every file layer the pack's profiles use, for (task_id, provider)."""
    config = config if config is not None else load_prompt_config(pack_dir)
    sources = load_pack_layers(
        pack_dir,
        task_id=task_id,
        provider=provider,
        file_layers=config.file_layers(),
        max_layer_bytes=max_layer_bytes,
    )
    return snapshot_from_sources(sources, task_id=task_id, provider=provider)
