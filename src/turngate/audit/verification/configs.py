"""The context configs a DECISION can be recomputed with (verify, replay and what-if share them).

The current config and any given earlier ones first; then the config stored under the
DECISION's digest in the artifact store (:mod:`turngate.artifacts.configs`: every worker stores
the config it decides with when it starts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from turngate.artifacts.configs import ConfigLookup, context_config_path, load_context_config
from turngate.artifacts.store import ArtifactStore
from turngate.core.canonical import is_digest
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


class ConfigSource:
    """The configs of :func:`config_map`, then the stored ones, each looked up once per run."""

    def __init__(self, configs: Mapping[str, ContextConfig], artifacts: ArtifactStore | None) -> None:
        self.configs = dict(configs)
        self.current = next(iter(self.configs))
        self._artifacts = artifacts
        self._lookups: dict[str, ConfigLookup] = {}

    def lookup(self, digest: str) -> ConfigLookup:
        """The config ``digest`` names: a given one, else the stored one (``ok``), else why not."""
        given = self.configs.get(digest)
        if given is not None:
            return ConfigLookup("ok", "", given)
        found = self._lookups.get(digest)
        if found is None:
            if self._artifacts is None:
                path = context_config_path(digest) if is_digest(digest) else ""
                found = ConfigLookup("unavailable", path, detail="no artifact store was given")
            else:
                found = load_context_config(self._artifacts, digest)
            self._lookups[digest] = found
        return found
