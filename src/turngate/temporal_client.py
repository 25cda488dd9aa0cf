"""One way to connect to Temporal for every process, and search-attribute registration."""

from __future__ import annotations

import logging

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from turngate.artifacts import open_artifact_store
from turngate.artifacts.temporal_codec import turngate_data_converter
from turngate.settings import Settings
from turngate.telemetry import temporal_interceptors, temporal_runtime
from turngate.workflows.shared import SEARCH_ATTRIBUTES

log = logging.getLogger(__name__)


async def connect(settings: Settings) -> Client:
    # Tracing interceptors (empty unless OTEL export is configured) are inherited by workers
    # built from this client; the runtime carries the SDK's own metrics when asked for. Payloads
    # over 64 KiB go to the artifact store (the claim check in artifacts/temporal_codec.py).
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        data_converter=turngate_data_converter(open_artifact_store(settings.effective_artifacts)),
        interceptors=temporal_interceptors(),
        runtime=temporal_runtime(),
    )


async def ensure_search_attributes(client: Client, namespace: str) -> list[str]:
    """Register turngate's search attributes if missing (idempotent). Returns the names added."""
    existing = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    known = set(existing.custom_attributes) | set(existing.system_attributes)
    missing = {
        key.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
        for key in SEARCH_ATTRIBUTES
        if key.name not in known
    }
    if not missing:
        return []
    try:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=namespace, search_attributes=missing)
        )
    except RPCError as exc:
        if exc.status != RPCStatusCode.ALREADY_EXISTS:
            raise
    log.info("registered search attributes: %s", ", ".join(sorted(missing)))
    return sorted(missing)
