"""Load the models file (``TURNGATE_MODELS_FILE``): aliases, fallback candidates and prices.

Loaded once at worker start, like the context config; its digest goes into every DECISION that
carries a spend plan. JSON, or YAML for a ``.yaml`` / ``.yml`` file (YAML needs PyYAML).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from turngate.core.model_aliases import (
    ModelsConfig,
    SpendError,
    parse_models,
)


def load_models_file(path: Path | str | None) -> ModelsConfig | None:
    """The validated models file, or None when no file is configured. Raises :class:`SpendError`
    naming the file."""
    if path is None or str(path).strip() == "":
        return None
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpendError("models.unreadable", f"{file}: {exc.strerror or exc}") from exc
    try:
        return parse_models(_decode(file, text))
    except SpendError as exc:
        raise SpendError(exc.code, f"{file}: {exc.detail}") from exc


def _decode(file: Path, text: str) -> Any:
    if file.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml  # type: ignore[import-untyped,unused-ignore]
        except ImportError as exc:
            raise SpendError(
                "models.yaml_unavailable", "reading YAML needs PyYAML (pip install pyyaml)"
            ) from exc
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SpendError("models.malformed", f"not valid YAML: {exc}") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise SpendError("models.malformed", f"not valid JSON: {exc}") from exc
