"""``GET /capabilities?format=gateway.v1``: the gateway described in the published DBL gateway's
client-facing capabilities document (``gateway.capabilities.v1``), for clients written for it.

The document's fields (``schema``, ``generated_at``, ``gateway``, ``api.endpoints``, ``intents``,
``schemas``, ``providers``, ``limits``, ``failure_codes``), filled from this gateway's own
configuration, plus the fields of the published gateway's live answer that do not clash with
them and that chat clients read to pick a model: ``schema_version``, ``gateway_version``,
``interface_version``, ``providers[].models`` and ``surfaces``. Its JSON Schema is
``gateway.capabilities.v1`` in :mod:`turngate.schemas` (docs/schemas/).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from turngate import __version__
from turngate.core.context import ContextConfig
from turngate.core.decision import POLICY_EVALUATION_ERROR
from turngate.core.events import INTERFACE_VERSION
from turngate.core.model_resolution import (
    MODEL_UNAVAILABLE,
    PROVIDER_MISSING_CREDENTIALS,
    PROVIDER_UNKNOWN,
    ProviderCatalog,
)
from turngate.core.payloads import SYSTEM_ERROR
from turngate.core.policy import OBSERVER_REASON
from turngate.core.provider_errors import LLM_TIMEOUT
from turngate.core.refs import (
    CROSS_THREAD_REF,
    EMPTY_REFS_DENIED,
    MAX_REFS_EXCEEDED,
    REF_INVALID,
    REF_NOT_FOUND,
)
from turngate.core.spend import REASON_BUDGET_EXCEEDED
from turngate.schemas import GATEWAY_CAPABILITIES_SCHEMA_VERSION
from turngate.settings import Settings
from turngate.workflows.shared import Boundary

GATEWAY_V1_SCHEMA = GATEWAY_CAPABILITIES_SCHEMA_VERSION

#: Where each provider's models come from (the published document's ``model_sources``).
_MODEL_SOURCES = {
    "echo": [],
    "openai": ["OPENAI_CHAT_MODEL_IDS", "OPENAI_MODEL_IDS"],
    "anthropic": ["ANTHROPIC_MODEL_IDS"],
    "ollama": ["OLLAMA_MODEL_IDS"],
}

#: DENY reason codes a DECISION can carry (every refusal code: docs/ERRORS.md).
FAILURE_CODES = (
    OBSERVER_REASON,
    EMPTY_REFS_DENIED,
    REF_NOT_FOUND,
    CROSS_THREAD_REF,
    MAX_REFS_EXCEEDED,
    REF_INVALID,
    POLICY_EVALUATION_ERROR,
    MODEL_UNAVAILABLE,
    PROVIDER_MISSING_CREDENTIALS,
    PROVIDER_UNKNOWN,
    REASON_BUDGET_EXCEEDED,
    LLM_TIMEOUT,
    SYSTEM_ERROR,
)

_ENDPOINTS = (
    ("GET", "/healthz", "Health check", "none", "{ok, ledger, ledger_length}"),
    (
        "GET",
        "/capabilities",
        "Providers, models, limits and surfaces (?format=gateway.v1: this document)",
        "{format?: turngate|gateway.v1}",
        "turngate.capabilities.1 | gateway.capabilities.v1",
    ),
    (
        "POST",
        "/ingress/intent",
        "Ingest an intent envelope (authoritative input)",
        f"IntentEnvelope (interface_version={INTERFACE_VERSION})",
        "{accepted, stream_id, index, correlation_id, queued, workflow_id, ...}",
    ),
    (
        "GET",
        "/snapshot",
        "Snapshot of the event log",
        "{limit, offset, stream_id?, lane?, thread_id?}",
        "{length, offset, limit, v_digest, events[]}",
    ),
    (
        "GET",
        "/tail",
        "SSE stream of events",
        "{from? | since?, backlog?, stream_id?, lanes?}",
        "text/event-stream (event: envelope, id: index, data: event JSON)",
    ),
    ("GET", "/status", "Runtime status and job runtime", "none", "turngate.status.2"),
    ("GET", "/verify", "Recompute digests and the hash chain", "{thread_id?, since?, until?}", "report"),
    (
        "GET",
        "/turns/{correlation_id}/stream",
        "The answer's tokens while the provider runs",
        "none",
        "text/event-stream (token, reset, redact, done)",
    ),
)


def gateway_v1_capabilities(boundary: Boundary, settings: Settings) -> dict[str, Any]:
    """The answer of ``GET /capabilities?format=gateway.v1``."""
    config = boundary.context_config
    return {
        "schema": GATEWAY_V1_SCHEMA,
        "schema_version": GATEWAY_V1_SCHEMA,
        "generated_at": datetime.now(UTC).isoformat(),
        "gateway": {
            "name": "turngate",
            "version": __version__,
            "boundary_version": "1",
            "policy_version": boundary.policy_module or "observer",
        },
        "gateway_version": __version__,
        "interface_version": INTERFACE_VERSION,
        "api": {
            "endpoints": [
                {"method": m, "path": p, "purpose": what, "request_schema": req, "response_schema": res}
                for m, p, what, req, res in _ENDPOINTS
            ]
        },
        "intents": _intents(config),
        "schemas": [
            {"id": "IntentEnvelope", "version": str(INTERFACE_VERSION), "source": "turngate.core.events"},
            {"id": "ContextSpec", "version": "turngate.ctxspec", "source": "turngate.core.context"},
            {"id": "ContextConfig", "version": config.schema_version, "source": "TURNGATE_CONTEXT_CONFIG"},
            {"id": "CapabilitiesResponse", "version": GATEWAY_V1_SCHEMA, "source": "turngate.schemas"},
        ],
        "providers": _providers(boundary.provider_catalog),
        "limits": _limits(config, settings),
        "failure_codes": list(FAILURE_CODES),
        "surfaces": {"tail": True, "snapshot": True, "events": False, "ingress_intent": True},
    }


def _intents(config: ContextConfig) -> list[dict[str, str]]:
    ctx = config.context
    refs = (
        f"declared_refs: a list of {{ref_type, ref_id, version?}}; max_refs={ctx.max_refs}; "
        f"empty_refs_policy={ctx.empty_refs_policy}; scope bound enforced={ctx.enforce_scope_bound}"
    )
    return [
        {
            "intent_type": "chat.message",
            "accepted_inputs": "payload.message (string), payload.inputs (object, optional), "
            "payload.declared_refs (list, optional), payload.requested_model_id (optional)",
            "declared_refs_rules": refs,
            "admitted_content_rules": "INTENT events admitted for governance; EXECUTION events "
            "for the prompt only (execution_only) when allow_execution_refs_for_prompt="
            f"{str(ctx.allow_execution_refs_for_prompt).lower()}",
        }
    ]


def _providers(catalog: ProviderCatalog) -> list[dict[str, Any]]:
    return [
        {
            "id": entry.name,
            "model_sources": _MODEL_SOURCES.get(entry.name, []),
            "default_models": list(entry.models[:1]),
            "notes": entry.label or ("configured" if entry.configured else "not configured"),
            "configured": entry.configured,
            # The live answer's shape: the models a turn can run on now (a configured provider's).
            "models": [
                {
                    "id": model,
                    "display_name": model,
                    "features": {"streaming": True, "tools": not entry.offline, "json_mode": False},
                }
                for model in (entry.models if entry.configured else ())
            ],
        }
        for entry in catalog.providers
    ]


def _limits(config: ContextConfig, settings: Settings) -> dict[str, Any]:
    ctx = config.context
    return {
        "max_refs": ctx.max_refs,
        "empty_refs_policy": ctx.empty_refs_policy,
        "allow_execution_refs_for_prompt": ctx.allow_execution_refs_for_prompt,
        "canonical_sort": ctx.canonical_sort,
        "enforce_scope_bound": ctx.enforce_scope_bound,
        "queue_max": settings.job_queue_max,
        "concurrency": {
            "ingest": settings.job_concurrency_ingest,
            "embed": settings.job_concurrency_embed,
            "index": settings.job_concurrency_index,
            "llm": settings.llm_concurrency,
        },
        "llm_wall_clock_s": settings.llm_wall_clock_s,
    }
