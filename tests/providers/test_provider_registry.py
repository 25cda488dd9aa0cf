from __future__ import annotations

import json

import pytest

from tests.providers.conftest import provider_settings
from turngate.core.model_resolution import ProviderCatalog, ProviderEntry, resolve_model
from turngate.providers.anthropic_chat import AnthropicChatProvider
from turngate.providers.base import Provider
from turngate.providers.echo import EchoProvider
from turngate.providers.ollama_chat import OllamaChatProvider
from turngate.providers.openai_chat import OpenAIChatProvider
from turngate.providers.registry import build_providers, close_providers, provider_catalog

# ------------------------------------------------------------------------- build_providers


async def test_only_echo_without_configuration() -> None:
    providers = build_providers(provider_settings())
    assert list(providers) == ["echo"]
    assert isinstance(providers["echo"], EchoProvider)
    await close_providers(providers)


async def test_all_configured_providers_are_built() -> None:
    settings = provider_settings(
        openai_api_key="sk-test-openai",
        anthropic_api_key="sk-ant-test",
        ollama_host="http://127.0.0.1:11434",
        echo_delay_ms=5,
    )
    providers = build_providers(settings)
    try:
        assert list(providers) == ["echo", "openai", "anthropic", "ollama"]
        assert isinstance(providers["openai"], OpenAIChatProvider)
        assert isinstance(providers["anthropic"], AnthropicChatProvider)
        assert isinstance(providers["ollama"], OllamaChatProvider)
        for name, provider in providers.items():
            assert isinstance(provider, Provider)
            assert provider.name == name
        assert providers["openai"].models == ("gpt-4o-mini", "gpt-4.1")
        assert providers["ollama"].models == ("llama3.2:latest", "qwen2.5-coder:7b")
        assert providers["echo"]._delay_s == 0.005  # TURNGATE_ECHO_DELAY_MS is read
        assert providers["anthropic"].models == ("claude-3-5-haiku-latest",)
    finally:
        await close_providers(providers)


async def test_openai_base_url_alone_configures_openai() -> None:
    settings = provider_settings(openai_base_url="http://127.0.0.1:9/v1")
    providers = build_providers(settings)
    try:
        openai_provider = providers["openai"]
        assert isinstance(openai_provider, OpenAIChatProvider)
        assert openai_provider.base_url.startswith("http://127.0.0.1:9/v1")
        assert openai_provider._client.api_key == "unused"
    finally:
        await close_providers(providers)


async def test_close_providers_survives_a_failing_close() -> None:
    class Broken(EchoProvider):
        async def aclose(self) -> None:
            raise RuntimeError("boom")

    closed: list[str] = []

    class Recording(EchoProvider):
        async def aclose(self) -> None:
            closed.append("ok")

    await close_providers({"a": Broken(), "b": Recording()})
    assert closed == ["ok"]


# ------------------------------------------------------------------------- provider_catalog


def test_catalog_lists_every_provider_and_is_json() -> None:
    catalog = provider_catalog(provider_settings(anthropic_api_key="sk-ant-x"))
    data = json.loads(catalog.model_dump_json())
    assert [p["name"] for p in data["providers"]] == ["echo", "openai", "anthropic", "ollama"]
    configured = {p["name"]: p["configured"] for p in data["providers"]}
    assert configured == {"echo": True, "openai": False, "anthropic": True, "ollama": False}
    assert data["providers"][0]["offline"] is True
    assert "not a model" in data["providers"][0]["label"]
    assert data["default_provider"] == "anthropic"
    assert "sk-ant-x" not in catalog.model_dump_json()
    assert ProviderCatalog.model_validate(data) == catalog
    assert ProviderCatalog.model_validate(catalog.model_dump(mode="json")) == catalog


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({}, "echo"),
        ({"ollama_host": "http://h:1"}, "ollama"),
        ({"ollama_host": "http://h:1", "anthropic_api_key": "k"}, "anthropic"),
        ({"ollama_host": "http://h:1", "openai_base_url": "http://h:2/v1"}, "openai"),
        ({"openai_api_key": "k", "default_provider": "ollama"}, "ollama"),
        ({"default_provider": "echo", "anthropic_api_key": "k"}, "echo"),
    ],
)
def test_default_provider(overrides: dict[str, str], expected: str) -> None:
    assert provider_catalog(provider_settings(**overrides)).default_provider == expected


# ------------------------------------------------------------------------- resolve_model


def _catalog(default: str = "openai") -> ProviderCatalog:
    return ProviderCatalog(
        providers=(
            ProviderEntry(name="echo", models=("echo-1",), configured=True, offline=True),
            ProviderEntry(name="openai", models=("gpt-4o-mini", "gpt-4.1"), configured=True),
            ProviderEntry(name="anthropic", models=("claude-x",), configured=False),
            ProviderEntry(name="ollama", models=("shared-model",), configured=True),
            ProviderEntry(name="other", models=("shared-model",), configured=False),
        ),
        default_provider=default,
    )


@pytest.mark.parametrize("requested", [None, "", "  "])
def test_resolve_default(requested: str | None) -> None:
    resolution = resolve_model(requested, _catalog())
    assert resolution.ok
    assert (resolution.provider, resolution.resolved_model_id) == ("openai", "gpt-4o-mini")
    assert resolution.reason_code is None
    assert resolution.requested_model_id == requested


def test_resolve_listed_model() -> None:
    resolution = resolve_model("gpt-4.1", _catalog())
    assert resolution.ok
    assert resolution.provider == "openai"
    assert resolution.requested_model_id == "gpt-4.1"
    assert resolution.resolved_model_id == "gpt-4.1"


def test_resolve_echo_model() -> None:
    resolution = resolve_model("echo-1", _catalog())
    assert (resolution.ok, resolution.provider) == (True, "echo")


def test_resolve_unknown_model() -> None:
    resolution = resolve_model("gpt-99", _catalog())
    assert not resolution.ok
    assert resolution.reason_code == "model.unavailable"
    assert resolution.provider is None
    assert resolution.resolved_model_id is None


def test_resolve_model_of_unconfigured_provider() -> None:
    resolution = resolve_model("claude-x", _catalog())
    assert not resolution.ok
    assert resolution.reason_code == "provider.missing_credentials"
    assert resolution.provider == "anthropic"


def test_resolve_default_of_unconfigured_provider() -> None:
    resolution = resolve_model(None, _catalog(default="anthropic"))
    assert not resolution.ok
    assert resolution.reason_code == "provider.missing_credentials"


def test_resolve_default_unknown_provider() -> None:
    resolution = resolve_model(None, _catalog(default="nope"))
    assert (resolution.ok, resolution.reason_code) == (False, "provider.unknown")


def test_resolve_prefers_configured_provider_for_shared_model() -> None:
    resolution = resolve_model("shared-model", _catalog())
    assert (resolution.ok, resolution.provider) == (True, "ollama")


def test_resolve_accepts_catalog_data_and_is_deterministic() -> None:
    data = _catalog().model_dump(mode="json")
    assert resolve_model("gpt-4.1", data) == resolve_model("gpt-4.1", _catalog())
    assert resolve_model(None, data) == resolve_model(None, data)


def test_resolve_against_settings_catalog() -> None:
    catalog = provider_catalog(provider_settings())
    assert resolve_model(None, catalog).resolved_model_id == "echo-1"
    missing = resolve_model("gpt-4o-mini", catalog)
    assert (missing.ok, missing.reason_code) == (False, "provider.missing_credentials")
    assert resolve_model("nope", catalog).reason_code == "model.unavailable"
