"""Load the data-layer builders a prompt pack names, once, when the worker starts.

``profiles.json`` maps builder names to functions::

    "builders": {
      "task_context": "trickster_layers.py:build_task_context",   # a file in the pack's root
      "learning_profile": "my_company.prompts:learning_profile"   # an importable module
    }

:func:`load_pack_builders` imports them (the pack's ``.py`` files are loaded by path, so a pack
directory is self-contained; a module name is imported from the Python path) and remembers each
function for this process. Workflow code then calls :func:`pack_builders`: a lookup, no import,
no file access. Nothing is registered as a side effect of importing a module.
"""

from __future__ import annotations

import hashlib
import importlib
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from turngate.core.layer_builders import BUILT_IN_BUILDERS, LayerBuilder
from turngate.core.prompt_layers import PromptConfig, PromptError, PromptPackError
from turngate.prompts.pack_files import read_pack_file

__all__ = ["PACK_FILE_SUFFIX", "load_pack_builders", "pack_builders"]

PACK_FILE_SUFFIX = ".py"
MAX_BUILDER_FILE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class _Loaded:
    fn: LayerBuilder
    source_sha256: str | None  # of the pack file it came from; None for an importable module


# Builder functions loaded in this process, by their reference in profiles.json.
_LOADED: dict[str, _Loaded] = {}


def _pack_file_module(root: Path, file_name: str) -> tuple[ModuleType, str]:
    """Import ``root/file_name`` under a name derived from its content (one module per content)."""
    data = read_pack_file(root, file_name, MAX_BUILDER_FILE_BYTES)
    if data is None:
        raise PromptPackError("prompts.unreadable", f"builder file {file_name} is not in the pack")
    sha256 = hashlib.sha256(data).hexdigest()
    stem = file_name.removesuffix(PACK_FILE_SUFFIX).replace("-", "_")
    module_name = f"turngate_pack_builders_{stem}_{sha256[:16]}"
    module = sys.modules.get(module_name)
    if module is None:
        # Run the very bytes that were hashed (not a second read of the file).
        module = ModuleType(module_name)
        module.__file__ = str((root / file_name).resolve())
        sys.modules[module_name] = module
        try:
            exec(compile(data, module.__file__, "exec"), module.__dict__)
        except Exception as exc:
            del sys.modules[module_name]
            raise PromptPackError(
                "prompts.builder_import_failed", f"{file_name} failed to load: {type(exc).__name__}: {exc}"
            ) from exc
    return module, f"sha256:{sha256}"


def _import_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except Exception as exc:
        raise PromptPackError(
            "prompts.builder_import_failed", f"module {name!r} failed to import: {type(exc).__name__}: {exc}"
        ) from exc


def _load(root: Path, ref: str) -> _Loaded:
    module_part, function = ref.rsplit(":", 1)
    if module_part.endswith(PACK_FILE_SUFFIX):
        module, source_sha256 = _pack_file_module(root, module_part)
    else:
        module, source_sha256 = _import_module(module_part), None
    fn = getattr(module, function, None)
    if not callable(fn):
        raise PromptPackError("prompts.builder_import_failed", f"{ref}: {function!r} is not a function of it")
    return _Loaded(fn, source_sha256)


def load_pack_builders(config: PromptConfig, pack_dir: Path) -> dict[str, LayerBuilder]:
    """Import every builder ``config.builders`` names and remember it for :func:`pack_builders`.

    Call at worker start (it imports code and reads files). Returns name -> function, the
    built-in builders included. Raises :class:`PromptPackError`: ``prompts.builder_import_failed``
    (the module or file does not import, or has no such function), ``prompts.path_escape``,
    ``prompts.unreadable``, ``prompts.too_large``, ``prompts.builder_conflict`` (the same
    ``file.py:function`` of two packs with different code in one process).
    """
    root = Path(pack_dir).resolve()
    for ref in sorted(set(config.builders.values())):
        loaded = _load(root, ref)
        earlier = _LOADED.get(ref)
        if earlier is not None and earlier.source_sha256 != loaded.source_sha256:
            raise PromptPackError(
                "prompts.builder_conflict",
                f"{ref} was already loaded from other code in this process; give one of the files "
                "another name",
            )
        _LOADED[ref] = loaded
    return pack_builders(config)


def pack_builders(config: PromptConfig) -> dict[str, LayerBuilder]:
    """The builders ``config`` uses, as loaded at worker start: no import, no file access.

    Raises :class:`PromptError` ``prompts.unknown_builder`` when a builder was never loaded in
    this process (the pack was not loaded with :func:`load_pack_builders`).
    """
    builders: dict[str, LayerBuilder] = {name: entry.fn for name, entry in BUILT_IN_BUILDERS.items()}
    for name, ref in config.builders.items():
        loaded = _LOADED.get(ref)
        if loaded is None:
            raise PromptError(
                "prompts.unknown_builder", f"builder {name!r} ({ref}) is not loaded in this process"
            )
        builders[name] = loaded.fn
    return builders
