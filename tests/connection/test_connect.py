"""turngate connects to Temporal the way the `temporal` CLI does (temporalio.envconfig): mTLS
against the dev server behind a TLS-terminating proxy that requires a client certificate, TOML
profiles, and API keys (which imply TLS)."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from pathlib import Path

import pytest
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.service import TLSConfig

from tests.connection.certs import SERVER_NAME, Pki
from tests.connection.tls_proxy import server_context, tls_proxy
from tests.stack import make_settings, running_stack
from turngate.devserver import DevServer, find_temporal_cli
from turngate.settings import Settings, load_settings
from turngate.temporal_client import connect, connect_config

CONNECT_TIMEOUT_S = 60


async def _temporal_cli_connects() -> bool:
    """`temporal operator namespace describe` with this process's environment (TEMPORAL_*)."""
    command = [str(find_temporal_cli()), "operator", "namespace", "describe", "--namespace", "default"]
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=60)
    return done.returncode == 0


def settings_from_env(tmp_path: Path) -> Settings:
    """Test settings whose Temporal address comes from the environment, as in production."""
    base = make_settings(tmp_path, "unused")
    return load_settings(**{n: getattr(base, n) for n in base.model_fields_set if n != "temporal_address"})


def mtls_env(monkeypatch: pytest.MonkeyPatch, pki: Pki, address: str, *, cert: Path, key: Path) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", address)
    monkeypatch.setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", str(pki.ca_cert))
    monkeypatch.setenv("TEMPORAL_TLS_SERVER_NAME", SERVER_NAME)
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", str(cert))
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", str(key))


async def test_a_turn_runs_over_mtls(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, temporal_server: DevServer, pki: Pki
) -> None:
    with tls_proxy(temporal_server.address, server_context(pki, require_client_cert=True)) as proxy:
        mtls_env(monkeypatch, pki, proxy.address, cert=pki.client_cert, key=pki.client_key)
        settings = settings_from_env(tmp_path)
        async with running_stack(settings) as stack:
            response = await stack.chat("hello over mTLS", correlation_id=f"c-{uuid.uuid4().hex}")
            assert response.status_code == 202, response.text
            assert response.json()["execution"]["payload"]["output_text"] == "echo: hello over mTLS"
            status = (await stack.http.get("/status")).json()
            assert status["temporal"]["address"] == proxy.address
            assert status["temporal"]["reachable"] is True
            assert status["temporal"]["missing_search_attributes"] == []


@pytest.mark.parametrize("who", ["no client certificate", "a certificate of another CA"])
async def test_the_frontend_refuses_a_client_without_its_certificate(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, temporal_server: DevServer, pki: Pki, who: str
) -> None:
    with tls_proxy(temporal_server.address, server_context(pki, require_client_cert=True)) as proxy:
        if who == "no client certificate":
            monkeypatch.setenv("TEMPORAL_ADDRESS", proxy.address)
            monkeypatch.setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", str(pki.ca_cert))
            monkeypatch.setenv("TEMPORAL_TLS_SERVER_NAME", SERVER_NAME)
        else:
            mtls_env(monkeypatch, pki, proxy.address, cert=pki.stranger_cert, key=pki.stranger_key)
        with pytest.raises(RuntimeError):
            await asyncio.wait_for(connect(settings_from_env(tmp_path)), CONNECT_TIMEOUT_S)


async def test_a_toml_profile_selected_by_temporal_profile(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, temporal_server: DevServer, pki: Pki
) -> None:
    with tls_proxy(temporal_server.address, server_context(pki, require_client_cert=True)) as proxy:
        config = tmp_path / "temporal.toml"
        config.write_text(
            "\n".join(
                [
                    "[profile.default]",
                    'address = "127.0.0.1:1"',  # not this one
                    "[profile.prod]",
                    f'address = "{proxy.address}"',
                    'namespace = "default"',
                    "[profile.prod.tls]",
                    f'server_ca_cert_path = "{pki.ca_cert}"',
                    f'server_name = "{SERVER_NAME}"',
                    f'client_cert_path = "{pki.client_cert}"',
                    f'client_key_path = "{pki.client_key}"',
                ]
            )
        )
        monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(config))
        monkeypatch.setenv("TEMPORAL_PROFILE", "prod")
        client = await asyncio.wait_for(connect(settings_from_env(tmp_path)), CONNECT_TIMEOUT_S)
        described = await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace="default")
        )
        assert described.namespace_info.name == "default"
        assert client.service_client.config.target_host == proxy.address


def test_an_api_key_carries_tls_as_the_temporal_cli_does(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pki: Pki
) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", "my-ns.a1b2c.tmprl.cloud:7233")
    monkeypatch.setenv("TEMPORAL_NAMESPACE", "my-ns.a1b2c")
    monkeypatch.setenv("TEMPORAL_API_KEY", "secret-api-key")
    config = connect_config(settings_from_env(tmp_path))
    assert config["target_host"] == "my-ns.a1b2c.tmprl.cloud:7233"
    assert config["namespace"] == "my-ns.a1b2c"
    assert config["api_key"] == "secret-api-key"
    assert config["tls"] is True  # an API key without TLS settings: TLS with system roots

    monkeypatch.setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", str(pki.ca_cert))
    tls = connect_config(settings_from_env(tmp_path))["tls"]
    assert isinstance(tls, TLSConfig)
    assert tls.server_root_ca_cert == pki.ca_cert.read_bytes()


async def test_an_api_key_connects_over_server_tls(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, temporal_server: DevServer, pki: Pki
) -> None:
    with tls_proxy(temporal_server.address, server_context(pki, require_client_cert=False)) as proxy:
        monkeypatch.setenv("TEMPORAL_ADDRESS", proxy.address)
        monkeypatch.setenv("TEMPORAL_API_KEY", "secret-api-key")
        monkeypatch.setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", str(pki.ca_cert))
        monkeypatch.setenv("TEMPORAL_TLS_SERVER_NAME", SERVER_NAME)
        client = await asyncio.wait_for(connect(settings_from_env(tmp_path)), CONNECT_TIMEOUT_S)
        assert client.api_key == "secret-api-key"
        await client.service_client.check_health()
        assert await _temporal_cli_connects()  # and so does the `temporal` CLI, from the same env


def test_an_explicit_address_wins_over_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`turngate dev` points every component at its own server, whatever TEMPORAL_ADDRESS says."""
    monkeypatch.setenv("TEMPORAL_ADDRESS", "elsewhere:7233")
    explicit = make_settings(tmp_path, "127.0.0.1:7999")
    assert connect_config(explicit)["target_host"] == "127.0.0.1:7999"
    assert connect_config(settings_from_env(tmp_path))["target_host"] == "elsewhere:7233"
    monkeypatch.delenv("TEMPORAL_ADDRESS")
    assert connect_config(settings_from_env(tmp_path))["target_host"] == "127.0.0.1:7233"
