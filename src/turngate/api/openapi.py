"""What ``/openapi.json`` says, and ``/docs`` served from packaged assets.

Routes that read their body themselves (ingress, the OpenAI endpoint) declare it here; every
route documents its 2xx model and the error body it really returns (:class:`ErrorBody`); SSE
routes are ``text/event-stream``. Unknown routes and methods answer the same JSON error body.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, TypeAdapter
from starlette.exceptions import HTTPException as StarletteHTTPException

from turngate.api.error_responses import error_response
from turngate.client.answers import SnapshotPage as ClientSnapshotPage
from turngate.client.answers import TurnReceipt
from turngate.client.answers import VerifyReport as VerifyReport
from turngate.core.events import EventDraft, IntentEnvelope
from turngate.jobs.domain.intents import BODIES, JobIntent

COMPONENTS = "#/components/schemas/{model}"


class ErrorBody(BaseModel):
    """Every refusal: a documented ``reason_code`` (docs/ERRORS.md) and a readable ``detail``."""

    ok: bool = False
    reason_code: str
    detail: str
    field: str | None = None


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class EventRecord(EventDraft):
    """A ledger event as ``/snapshot``, ``/tail`` and ingress serve it."""

    index: int
    digest: str
    prev_event_digest: str | None = None
    created_at: str | None = None
    canon_len: int
    is_authoritative: bool


class IntentAccepted(TurnReceipt):
    """``POST /ingress/intent``'s 202 for a turn (with ``wait``: its DECISION and EXECUTION)."""

    detail: str | None = None
    # The documented shape of the same fields (an event as served, with its index).
    decision: EventRecord | None = None  # type: ignore[assignment]
    execution: EventRecord | None = None  # type: ignore[assignment]


class JobAccepted(_Open):
    """``POST /ingress/intent``'s 202 for a case job."""

    job_id: str
    status_url: str


class SnapshotPage(ClientSnapshotPage):
    events: list[EventRecord]  # type: ignore[assignment]  # the documented shape of the events


class Capabilities(_Open):
    gateway: str
    version: str
    interface_version: int
    intent_types: list[str]
    providers: dict[str, Any]


class Status(_Open):
    """Ledger head, running turns, queues (fields: docs/LEDGER.md)."""


class Health(_Open):
    ok: bool


class JobView(_Open):
    id: str
    type: str
    state: str


class JobList(_Open):
    jobs: list[JobView]


class CaseSummary(_Open):
    case_id: str


class ArtifactStored(_Open):
    artifact: dict[str, Any]


class ModelList(_Open):
    object: str
    data: list[dict[str, Any]]


class ChatCompletion(_Open):
    """An OpenAI ``chat.completion`` (docs/OPENAI.md); with ``stream: true`` an SSE stream of
    ``chat.completion.chunk`` frames instead."""

    id: str
    object: str
    created: int
    model: str
    choices: list[dict[str, Any]]
    usage: dict[str, int]


#: The error body, for the statuses a route can answer with it.
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text}
    for status, text in {
        400: "malformed request",
        401: "no or bad credentials",
        403: "the key lacks the route's role",
        404: "not found",
        409: "conflict",
        413: "too large",
        422: "invalid input",
        429: "rate or stream limit (Retry-After)",
        503: "a dependency is unavailable or a queue is full (Retry-After)",
    }.items()
}


def sse(description: str) -> dict[int | str, dict[str, Any]]:
    """A 200 that is a Server-Sent Events stream."""
    return {
        200: {"description": description, "content": {"text/event-stream": {"schema": {"type": "string"}}}}
    }


def _schema_of(target: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    schema = TypeAdapter(target).json_schema(ref_template=COMPONENTS)
    return schema, schema.pop("$defs", {})


def intent_request_body() -> dict[str, Any]:
    """``openapi_extra`` of ``POST /ingress/intent``: a turn's envelope or a case job."""
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "oneOf": [
                            {"$ref": COMPONENTS.format(model="IntentEnvelope")},
                            {"$ref": COMPONENTS.format(model="JobIntent")},
                        ]
                    }
                }
            },
        }
    }


def chat_request_body() -> dict[str, Any]:
    """``openapi_extra`` of ``POST /v1/chat/completions``."""
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": COMPONENTS.format(model="ChatCompletionRequest")}}
            },
        }
    }


def _body_components() -> dict[str, Any]:
    from turngate.api.openai_compat.wire import ChatCompletionRequest

    components: dict[str, Any] = {}
    for name, model in (
        ("IntentEnvelope", IntentEnvelope),
        ("JobIntent", JobIntent),
        ("ChatCompletionRequest", ChatCompletionRequest),
    ):
        schema, defs = _schema_of(model)
        components.update(defs)
        components[name] = schema
    # A job's payload is validated per intent type at run time (one of the three bodies).
    bodies = []
    for body in BODIES.values():
        schema, defs = _schema_of(body)
        components.update(defs)
        components[body.__name__] = schema
        bodies.append({"$ref": COMPONENTS.format(model=body.__name__)})
    components["JobIntentPayload"]["properties"]["payload"] = {"oneOf": bodies, "title": "Payload"}
    return components


def install_openapi(app: FastAPI, docs_assets: str | None) -> None:
    """The request-body components, JSON 404/405 bodies, and ``/docs`` from ``docs_assets``
    (the packaged Swagger UI: nothing from a CDN)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                summary=app.summary,
                routes=app.routes,
            )
            schema.setdefault("components", {}).setdefault("schemas", {}).update(_body_components())
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "route.not_found", 405: "route.method_not_allowed"}.get(
            exc.status_code, f"http.{exc.status_code}"
        )
        response = error_response(exc.status_code, code, str(exc.detail))
        response.headers.update(exc.headers or {})
        return response

    if docs_assets is None:
        return
    app.mount("/docs-assets", StaticFiles(directory=docs_assets), name="docs-assets")

    async def docs(_: Request) -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{app.title} - API",
            swagger_js_url="/docs-assets/swagger-ui-bundle.js",
            swagger_css_url="/docs-assets/swagger-ui.css",
            swagger_favicon_url="/docs-assets/favicon-32x32.png",
        )

    # A plain route: outside the API's authorization dependency, like FastAPI's own /docs.
    app.router.add_route("/docs", docs, methods=["GET"], include_in_schema=False)
