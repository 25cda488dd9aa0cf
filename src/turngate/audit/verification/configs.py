"""The context configs a DECISION can be recomputed with (verify, replay and what-if share them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from turngate.core.context import ContextConfig, context_config_digest


def config_map(current: ContextConfig, known: Sequence[ContextConfig] = ()) -> dict[str, ContextConfig]:
    """digest -> config for every config the verifier may recompute with (the current one wins)."""
    configs: dict[str, ContextConfig] = {}
    for cfg in (current, *known):
        configs.setdefault(context_config_digest(cfg), cfg)
    return configs


def stored_config_digest(payload: Mapping[str, Any]) -> str | None:
    """The ``boundary.context_config_digest`` a DECISION was made under (None: not recorded)."""
    boundary = payload.get("boundary")
    value = boundary.get("context_config_digest") if isinstance(boundary, Mapping) else None
    return value if isinstance(value, str) else None
