"""Which providers this process has, built once from settings, and the catalog the core reads.

- ``echo``: always (an offline, deterministic convenience, labelled as such; not a model);
- ``openai``: when ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` is set (a compatible server without
  a key gets the placeholder key ``"unused"``);
- ``anthropic``: when ``ANTHROPIC_API_KEY`` is set;
- ``ollama``: when ``OLLAMA_HOST`` is set.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from turngate.core.model_resolution import ProviderCatalog, ProviderEntry
from turngate.providers.base import Provider
from turngate.providers.echo import ECHO_MODELS, EchoProvider
from turngate.settings import Settings

log = logging.getLogger(__name__)

REAL_PROVIDERS: tuple[str, ...] = ("openai", "anthropic", "ollama")
ECHO_LABEL = "offline echo (deterministic test stand-in, not a model)"
_LABELS = {
    "openai": "OpenAI (or an OpenAI-compatible server)",
    "anthropic": "Anthropic",
    "ollama": "Ollama",
}


def _configured(settings: Settings) -> dict[str, bool]:
    return {
        "openai": bool(settings.openai_api_key and settings.openai_api_key.get_secret_value())
        or bool(settings.openai_base_url),
        "anthropic": bool(settings.anthropic_api_key and settings.anthropic_api_key.get_secret_value()),
        "ollama": bool(settings.ollama_host),
    }


def _models(settings: Settings) -> dict[str, tuple[str, ...]]:
    return {
        "openai": settings.openai_models,
        "anthropic": settings.anthropic_models,
        "ollama": settings.ollama_models,
    }


def build_providers(settings: Settings) -> dict[str, Provider]:
    """One client per configured provider, created once (close with :func:`close_providers`)."""
    configured = _configured(settings)
    providers: dict[str, Provider] = {"echo": EchoProvider.from_settings(settings)}
    # Each vendor SDK is imported only when its provider is configured (openai and anthropic
    # alone are ~90 MB of resident memory per process).
    if configured["openai"]:
        from turngate.providers.openai_chat import OpenAIChatProvider

        providers["openai"] = OpenAIChatProvider.from_settings(settings)
    if configured["anthropic"]:
        from turngate.providers.anthropic_chat import AnthropicChatProvider

        providers["anthropic"] = AnthropicChatProvider.from_settings(settings)
    if configured["ollama"]:
        from turngate.providers.ollama_chat import OllamaChatProvider

        providers["ollama"] = OllamaChatProvider.from_settings(settings)
    return providers


def default_provider_name(settings: Settings) -> str:
    """``TURNGATE_DEFAULT_PROVIDER``, else the first configured of openai, anthropic, ollama,
    else ``echo``."""
    if settings.default_provider:
        return settings.default_provider.strip()
    configured = _configured(settings)
    return next((name for name in REAL_PROVIDERS if configured[name]), "echo")


def provider_catalog(settings: Settings) -> ProviderCatalog:
    """Every known provider with its model ids (first = default) and whether it is configured."""
    configured = _configured(settings)
    models = _models(settings)
    entries = [
        ProviderEntry(name="echo", models=ECHO_MODELS, configured=True, offline=True, label=ECHO_LABEL)
    ]
    entries.extend(
        ProviderEntry(name=name, models=models[name], configured=configured[name], label=_LABELS[name])
        for name in REAL_PROVIDERS
    )
    return ProviderCatalog(providers=tuple(entries), default_provider=default_provider_name(settings))


async def close_providers(providers: Mapping[str, Provider]) -> None:
    """Close every provider's client; a failure to close one is logged, the others still close."""
    results = await asyncio.gather(
        *(provider.aclose() for provider in providers.values()), return_exceptions=True
    )
    for name, result in zip(providers, results, strict=True):
        if isinstance(result, BaseException):
            log.warning("closing provider %s failed: %s", name, type(result).__name__)
