"""Effective configs stored by their digest, so a DECISION can be recomputed under the config it
was made with after the worker's config has changed.

A DECISION pins ``boundary.context_config_digest`` (``sha256`` of the canonical JSON of the
effective context config) and its policy's ``config_digest`` (the same over the policy's
``config()``). The worker stores both configs at start, as those canonical bytes, in the
``standard`` retention class (never collected): the artifact's own sha256 is then the digest
the DECISION names, so ``turngate verify`` finds the config from the DECISION alone and knows
the bytes it read are the config (docs/AUDIT.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from pydantic import ValidationError

from turngate.artifacts.store import (
    ArtifactNotFoundError,
    ArtifactStore,
    ArtifactUnavailableError,
    artifact_path,
)
from turngate.core.canonical import canonical_bytes, digest_bytes, is_digest
from turngate.core.context import ContextConfig, context_config_digest
from turngate.core.manifest import ArtifactPointer
from turngate.core.policy import LoadedPolicy

CONTEXT_CONFIG_KIND = "context_config"
POLICY_CONFIG_KIND = "policy_config"

#: ``missing``: nothing stored under the digest; ``mismatch``: the stored bytes are not the
#: config (altered or corrupt); ``invalid``: they are, but this version of turngate cannot
#: rebuild that digest from them; ``unavailable``: the store could not be read.
LookupStatus = Literal["ok", "missing", "mismatch", "invalid", "unavailable"]


@dataclass(frozen=True)
class ConfigLookup:
    """A stored context config looked up by digest: the config, or why there is none."""

    status: LookupStatus
    path: str
    config: ContextConfig | None = None
    detail: str = ""


def context_config_path(digest: str) -> str:
    """Where the context config with this digest is stored."""
    return artifact_path("standard", CONTEXT_CONFIG_KIND, digest)


def store_context_config(store: ArtifactStore, cfg: ContextConfig) -> ArtifactPointer:
    """Store ``cfg`` under its digest (idempotent: every worker with this config writes the same
    object)."""
    pointer = store.put(canonical_bytes(cfg.effective()), kind=CONTEXT_CONFIG_KIND)
    if pointer.sha256 != context_config_digest(cfg):  # the digest covers exactly these bytes
        raise ValueError(f"stored context config {pointer.sha256} is not {context_config_digest(cfg)}")
    return pointer


def store_policy_config(store: ArtifactStore, policy: LoadedPolicy) -> ArtifactPointer:
    """Store the configuration a policy decides with under its ``config_digest`` (what a DECISION
    records in ``policy.config_digest``): an auditor can read what the policy was configured
    with. The policy's code is not stored: it is named by ``policy_id`` and version."""
    pointer = store.put(canonical_bytes(dict(policy.policy.config())), kind=POLICY_CONFIG_KIND)
    if pointer.sha256 != policy.config_digest:
        raise ValueError(
            f"policy {policy.policy_id}: config() changed between two calls "
            f"({policy.config_digest}, then {pointer.sha256})"
        )
    return pointer


def load_context_config(store: ArtifactStore, digest: str) -> ConfigLookup:
    """The context config stored under ``digest``, re-hashed and rebuilt; never raises for a
    store that fails (``unavailable``)."""
    if not is_digest(digest):  # a recorded digest is always "sha256:<64 hex>"
        return ConfigLookup("invalid", "", detail=f"{digest[:80]!r} is not a sha256 digest")
    path = context_config_path(digest)
    pointer = ArtifactPointer(artifact_id=digest, path=path, sha256=digest, size_bytes=0)
    try:
        data = store.get(pointer)
    except ArtifactNotFoundError:
        return ConfigLookup("missing", path, detail="no config is stored under this digest")
    except ArtifactUnavailableError as exc:
        return ConfigLookup("unavailable", path, detail=f"the artifact store failed: {exc}")
    actual = digest_bytes(data)
    if actual != digest:
        return ConfigLookup("mismatch", path, detail=f"the stored bytes hash to {actual}, not to the digest")
    try:
        cfg = ContextConfig.model_validate(json.loads(data))
    except (ValueError, ValidationError) as exc:
        return ConfigLookup("invalid", path, detail=f"the stored config does not load here: {exc}")
    again = context_config_digest(cfg)
    if again != digest:
        return ConfigLookup(
            "invalid",
            path,
            detail=f"the stored config loads here as {again}: this version reads it differently",
        )
    return ConfigLookup("ok", path, cfg)
