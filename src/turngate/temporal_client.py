"""One way to connect to Temporal for every process (API, worker, CLI), and search-attribute
registration.

The connection is loaded the way the ``temporal`` CLI loads it (``temporalio.envconfig``):
TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_*, TEMPORAL_PROFILE and the
TOML config file (TEMPORAL_CONFIG_FILE). An address or namespace turngate was given explicitly
(``turngate dev`` points at its own server) wins over the profile. With encryption keys set, every
payload passes through the AES-256-GCM codec (turngate.encryption).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from pydantic import BaseModel
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.envconfig import ClientConfigProfile, ClientConnectConfig
from temporalio.service import RPCError, RPCStatusCode

from turngate.artifacts import open_artifact_store
from turngate.artifacts.temporal_codec import turngate_data_converter
from turngate.encryption import ENCRYPTION_OVERHEAD_BYTES, EncryptionCodec, EncryptionKeys, load_keys
from turngate.settings import Settings
from turngate.telemetry import temporal_interceptors, temporal_runtime
from turngate.telemetry.metrics import default_metrics
from turngate.workflows.shared import SEARCH_ATTRIBUTES

log = logging.getLogger(__name__)


def connect_config(settings: Settings, environ: Mapping[str, str] | None = None) -> ClientConnectConfig:
    """``Client.connect`` arguments as the ``temporal`` CLI would use them for this environment
    (``environ``: the process's own when None)."""
    profile = ClientConfigProfile.load(override_env_vars=environ)
    config = profile.to_client_connect_config()
    if "temporal_address" in settings.model_fields_set or not config.get("target_host"):
        config["target_host"] = settings.temporal_address
    if "temporal_namespace" in settings.model_fields_set or not config.get("namespace"):
        config["namespace"] = settings.temporal_namespace
    return config


def encryption_keys(settings: Settings) -> EncryptionKeys | None:
    """The history encryption keys, None when encryption is off."""
    secret = settings.encryption_keys.get_secret_value() if settings.encryption_keys else None
    return load_keys(secret, settings.encryption_keys_file)


def data_converter(settings: Settings) -> DataConverter:
    """Pydantic payloads; any over 64 KiB go to the artifact store (the claim check in
    artifacts/temporal_codec.py, its store calls bounded by TURNGATE_ARTIFACT_DEADLINE_S and
    counted in ``turngate_payload_codec_failures`` when they fail), and all are encrypted when
    TURNGATE_ENCRYPTION_KEYS(_FILE) is set."""
    keys = encryption_keys(settings)
    store = open_artifact_store(settings.effective_artifacts)
    encryption = EncryptionCodec(keys) if keys is not None else None
    return turngate_data_converter(
        store,
        encryption,
        overhead_bytes=ENCRYPTION_OVERHEAD_BYTES if keys is not None else 0,
        deadline_s=settings.artifact_deadline_s,
        on_failure=_count_codec_failure,
    )


def _count_codec_failure(operation: str, code: str) -> None:
    default_metrics().payload_codec_failures.labels(operation=operation, code=code).inc()


async def connect(settings: Settings) -> Client:
    # Tracing interceptors (empty unless OTEL export is configured) are inherited by workers
    # built from this client; the runtime carries the SDK's own metrics when asked for. Payloads
    # over 64 KiB go to the artifact store (the claim check in artifacts/temporal_codec.py).
    return await Client.connect(
        **connect_config(settings),
        data_converter=data_converter(settings),
        interceptors=temporal_interceptors(),
        runtime=temporal_runtime(),
    )


class SearchAttributeState(BaseModel):
    """What registration found: ``missing`` names still unregistered (turns that set them fail
    until an operator registers them with ``commands``)."""

    added: list[str] = []
    missing: list[str] = []
    commands: list[str] = []


def registration_commands(namespace: str, names: list[str]) -> list[str]:
    """The commands an operator runs where turngate may not register attributes itself: the
    ``temporal`` CLI for a self-hosted cluster, ``tcld`` for Temporal Cloud."""
    cli = " ".join(f"--name {name} --type Keyword" for name in names)
    cloud = " ".join(f"--search-attribute {name}=Keyword" for name in names)
    return [
        f"temporal operator search-attribute create --namespace {namespace} {cli}",
        f"tcld namespace search-attributes add --namespace {namespace} {cloud}",
    ]


async def ensure_search_attributes(client: Client, namespace: str | None = None) -> SearchAttributeState:
    """Register turngate's search attributes if missing (idempotent). Where the OperatorService
    refuses (Temporal Cloud, a restricted role), log the exact commands to run and carry on."""
    namespace = namespace or client.namespace
    # Until the listing answers, every attribute counts as missing (it may be refused too).
    missing = [key.name for key in SEARCH_ATTRIBUTES]
    try:
        existing = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace)
        )
        known = set(existing.custom_attributes) | set(existing.system_attributes)
        missing = [name for name in missing if name not in known]
        if not missing:
            return SearchAttributeState()
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=namespace,
                search_attributes={n: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for n in missing},
            )
        )
    except RPCError as exc:
        if exc.status == RPCStatusCode.ALREADY_EXISTS:
            return SearchAttributeState()
        if exc.status not in _REFUSED:
            raise
        commands = registration_commands(namespace, missing)
        log.warning(
            "Temporal refused search-attribute registration (%s); turns fail until they exist. "
            "Register them with one of:\n  %s",
            exc.status.name,
            "\n  ".join(commands),
        )
        return SearchAttributeState(missing=missing, commands=commands)
    log.info("registered search attributes: %s", ", ".join(missing))
    return SearchAttributeState(added=missing)


#: What Temporal Cloud and restricted roles answer to OperatorService calls.
_REFUSED = (RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNIMPLEMENTED, RPCStatusCode.UNAUTHENTICATED)
