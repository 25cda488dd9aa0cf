"""Model resolution: which provider and model a turn runs on. Pure and deterministic.

The :class:`ProviderCatalog` is plain data (built from settings by
``turngate.providers.registry.provider_catalog`` and carried in the worker's boundary), so the
workflow and the replay tool resolve with the same code and the same inputs, without reading the
environment.

Rules of :func:`resolve_model`:

- no requested model (``None`` or blank): the default provider's first model;
- a requested model id: the first CONFIGURED provider (catalog order) that lists it, else the
  first provider that lists it;
- the chosen provider is not configured (no credentials): ``provider.missing_credentials``;
- no provider lists the model (or the default provider has no models): ``model.unavailable``;
- the default provider names no catalog entry: ``provider.unknown``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

MODEL_UNAVAILABLE = "model.unavailable"
PROVIDER_MISSING_CREDENTIALS = "provider.missing_credentials"
PROVIDER_UNKNOWN = "provider.unknown"


class ProviderEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    models: tuple[str, ...]
    """Model ids; the first is the provider's default."""
    configured: bool
    """Credentials/endpoint present, so the worker has this provider."""
    offline: bool = False
    """True for ``echo``: a deterministic stand-in, not a model."""
    label: str = ""


class ProviderCatalog(BaseModel):
    model_config = ConfigDict(frozen=True)

    providers: tuple[ProviderEntry, ...]
    default_provider: str

    def get(self, name: str) -> ProviderEntry | None:
        return next((p for p in self.providers if p.name == name), None)

    @property
    def configured(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.providers if p.configured)


class ModelResolution(BaseModel):
    model_config = ConfigDict(frozen=True)

    provider: str | None
    requested_model_id: str | None
    resolved_model_id: str | None
    reason_code: str | None = None
    ok: bool


def resolve_model(
    requested_model_id: str | None, catalog: ProviderCatalog | Mapping[str, Any]
) -> ModelResolution:
    """Resolve a requested model id (or the default) against the provider catalog."""
    if not isinstance(catalog, ProviderCatalog):
        catalog = ProviderCatalog.model_validate(catalog)
    requested = requested_model_id.strip() if requested_model_id else ""
    if not requested:
        return _resolve_default(requested_model_id, catalog)
    listing = [p for p in catalog.providers if requested in p.models]
    if not listing:
        return _denied(None, requested_model_id, None, MODEL_UNAVAILABLE)
    entry = next((p for p in listing if p.configured), listing[0])
    if not entry.configured:
        return _denied(entry.name, requested_model_id, requested, PROVIDER_MISSING_CREDENTIALS)
    return ModelResolution(
        provider=entry.name,
        requested_model_id=requested_model_id,
        resolved_model_id=requested,
        ok=True,
    )


def _resolve_default(requested: str | None, catalog: ProviderCatalog) -> ModelResolution:
    entry = catalog.get(catalog.default_provider)
    if entry is None:
        return _denied(catalog.default_provider, requested, None, PROVIDER_UNKNOWN)
    if not entry.models:
        return _denied(entry.name, requested, None, MODEL_UNAVAILABLE)
    if not entry.configured:
        return _denied(entry.name, requested, entry.models[0], PROVIDER_MISSING_CREDENTIALS)
    return ModelResolution(
        provider=entry.name,
        requested_model_id=requested,
        resolved_model_id=entry.models[0],
        ok=True,
    )


def _denied(
    provider: str | None, requested: str | None, resolved: str | None, reason: str
) -> ModelResolution:
    return ModelResolution(
        provider=provider,
        requested_model_id=requested,
        resolved_model_id=resolved,
        reason_code=reason,
        ok=False,
    )
