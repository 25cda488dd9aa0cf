"""Temporal's remote codec protocol: ``POST /codec/encode`` and ``POST /codec/decode`` take and
answer ``{"payloads": [...]}`` (payloads in protobuf JSON), so the Temporal UI and the
``temporal`` CLI (``--codec-endpoint``) can show encrypted histories in the clear.

Admin role only (turngate.security.routes): whoever may call it reads every prompt and answer.
Browsers call it from the Temporal UI's origin, so CORS is open to exactly that origin
(TURNGATE_TEMPORAL_UI_URL) and only on these two paths.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from google.protobuf import json_format
from pydantic import BaseModel
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.converter import PayloadCodec

from turngate.api.error_responses import error_response
from turngate.artifacts import ArtifactError
from turngate.artifacts.temporal_codec import PayloadArtifactError, PayloadStoreError
from turngate.encryption import DecryptionError
from turngate.settings import Settings
from turngate.temporal_client import data_converter, encryption_keys

PREFIX = "/codec/"

router = APIRouter()


class CodecPayloads(BaseModel):
    """The remote codec protocol's body, both ways: payloads in protobuf JSON."""

    payloads: list[dict[str, Any]]


def _codec(request: Request) -> PayloadCodec | None:
    codec: PayloadCodec | None = request.app.state.payload_codec
    return codec


async def _apply(
    request: Request,
    operation: Callable[[PayloadCodec], Callable[[Sequence[Payload]], Awaitable[list[Payload]]]],
) -> JSONResponse:
    codec = _codec(request)
    if codec is None:
        return error_response(
            404, "codec.disabled", "histories are not encrypted here (TURNGATE_ENCRYPTION_KEYS is unset)"
        )
    try:
        payloads = json_format.Parse(await request.body(), Payloads())
    except json_format.ParseError as exc:
        return error_response(400, "codec.bad_request", f'expected {{"payloads": [...]}}: {exc}')
    try:
        converted = await operation(codec)(list(payloads.payloads))
    except (DecryptionError, PayloadArtifactError) as exc:
        return error_response(422, "codec.undecryptable", str(exc))
    except PayloadStoreError as exc:  # a payload over 64 KiB lives in the artifact store
        if exc.code == "artifact.not_found":  # gone for good: retrying cannot help
            return error_response(404, exc.code, str(exc))
        return error_response(503, "artifact.unavailable", f"the artifact store could not be read: {exc}")
    except ArtifactError as exc:
        return error_response(503, "artifact.unavailable", f"the artifact store could not be read: {exc}")
    body: dict[str, Any] = json_format.MessageToDict(Payloads(payloads=converted))
    return JSONResponse({"payloads": body.get("payloads", [])})


@router.post("/codec/encode", response_model=None, tags=["codec"], responses={200: {"model": CodecPayloads}})
async def encode(request: Request) -> JSONResponse:
    """Encrypt payloads with the active key (Temporal's remote codec protocol)."""
    return await _apply(request, lambda codec: codec.encode)


@router.post("/codec/decode", response_model=None, tags=["codec"], responses={200: {"model": CodecPayloads}})
async def decode(request: Request) -> JSONResponse:
    """Decrypt payloads with the key each one names (and read back a payload over 64 KiB from the
    artifact store); unencrypted payloads come back unchanged."""
    return await _apply(request, lambda codec: codec.decode)


class CodecCors:
    """CORS for the codec paths only; every other route stays same-origin."""

    def __init__(self, app: ASGIApp, origin: str) -> None:
        self.app = app
        self.cors = CORSMiddleware(
            app,
            allow_origins=[origin],
            allow_methods=["POST"],
            allow_headers=["Authorization", "Content-Type", "X-Namespace"],
            allow_credentials=True,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(PREFIX):
            await self.cors(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def ui_origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def mount_codec(app: FastAPI, settings: Settings) -> None:
    """The codec routes, the codec (None when encryption is off: the routes answer
    ``codec.disabled``) and the UI's CORS. The codec is the clients' whole chain, so a payload
    that went to the artifact store decodes to its value too."""
    on = encryption_keys(settings) is not None
    app.state.payload_codec = data_converter(settings).payload_codec if on else None
    app.include_router(router)
    if settings.temporal_ui_url:
        app.add_middleware(CodecCors, origin=ui_origin(settings.temporal_ui_url))
