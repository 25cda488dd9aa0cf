"""Read a prompt pack directory (the prompt-assembly pipeline's loader).

Layout (``pack_dir`` is the ``prompts/`` directory, e.g. ``TURNGATE_PROMPTS_DIR``)::

    profiles.json                  profiles, selection rules, tools, output safety rules
    default/{layer}.md             the default text of each file layer
    tasks/{task_id}/{layer}.md     a task's own text for a layer (wins over the default)
    tasks/{task_id}/{provider}.md  provider-specific task override (layer 4)

Each file layer resolves task file -> default file -> skipped (with the reason); the provider
override is the task's ``{provider}.md`` or skipped. This is the only module of the prompt
system that touches files: call it from an activity (or at start-up), never from workflow code,
and pin what it returns with :func:`turngate.core.prompts.snapshot_from_sources`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from turngate.core.prompts import (
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
    path = root / relative
    if not path.exists() and not path.is_symlink():
        return None
    resolved = path.resolve()
    if not resolved.is_relative_to(root):
        raise PromptPackError("prompts.path_escape", f"{relative} points outside the prompt pack")
    if not resolved.is_file():
        raise PromptPackError("prompts.unreadable", f"{relative} exists but is not a regular file")
    try:
        size = resolved.stat().st_size
        if size > max_bytes:
            raise PromptPackError(
                "prompts.too_large", f"{relative} is {size} bytes; the limit is {max_bytes}"
            )
        data = resolved.read_bytes()
    except OSError as exc:
        raise PromptPackError("prompts.unreadable", f"{relative}: {exc.strerror or exc}") from exc
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
    """Read and validate ``profiles.json`` (``prompts.invalid_config`` / ``prompts.unreadable``)."""
    root = _pack_root(pack_dir)
    text = _read_text(root, PROFILES_FILE, MAX_PROFILES_BYTES)
    if text is None:
        raise PromptPackError("prompts.invalid_config", f"{root / PROFILES_FILE} does not exist")
    return parse_prompt_config(text)


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
