"""Temporal's remote codec protocol: ``POST /codec/encode`` and ``POST /codec/decode`` take and
answer ``{"payloads": [...]}`` (payloads in protobuf JSON), so the Temporal UI and the
``temporal`` CLI (``--codec-endpoint``) can show encrypted histories in the clear.

Operators only (turngate.security.routes: the admin role and no tenant): whoever may call it
reads every prompt and answer, and the histories it decodes (the Temporal UI lists one
namespace) are every tenant's, so a tenant-scoped admin key is refused. Browsers call it from
the Temporal UI's origin, so CORS is open to exactly that origin (TURNGATE_TEMPORAL_UI_URL) and
only on these two paths.

The artifact claim check runs only on what decryption returns: a claim-check pointer that was
sealed under the deployment's keys, which only turngate's own codec makes (``/codec/encode``
refuses a pointer as input). A pointer sent in the clear comes back unchanged and the store is
never read for it, so the endpoint cannot be used to probe the artifact store by hash.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal
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
from turngate.artifacts.temporal_codec import POINTER_ENCODING, PayloadArtifactError, PayloadStoreError
from turngate.core.json_depth import MAX_JSON_DEPTH, too_deep
from turngate.encryption import DecryptionError
from turngate.settings import Settings
from turngate.temporal_client import data_converter, encryption_keys

PREFIX = "/codec/"
#: The largest request body (bytes, as sent). The claim check keeps every payload of a history at
#: 64 KiB or less (base64 in JSON: about 88 KB), so this holds dozens of a history's payloads in
#: one call; the Temporal UI and CLI send one payload list per call.
MAX_CODEC_BODY_BYTES = 4 * 1024 * 1024
#: The same nesting cap as every other JSON body (a payload list nests 4 levels).
MAX_CODEC_JSON_DEPTH = MAX_JSON_DEPTH

router = APIRouter()


class CodecPayloads(BaseModel):
    """The remote codec protocol's body, both ways: payloads in protobuf JSON."""

    payloads: list[dict[str, Any]]


class _Refused(Exception):
    def __init__(self, status: int, reason_code: str, detail: str) -> None:
        super().__init__(detail)
        self.response = error_response(status, reason_code, detail)


def _codec(request: Request) -> PayloadCodec | None:
    codec: PayloadCodec | None = request.app.state.payload_codec
    return codec


async def _body(request: Request) -> bytes:
    """The body, refused past :data:`MAX_CODEC_BODY_BYTES` before more of it is read."""
    too_large = _Refused(
        413, "codec.too_large", f"the body exceeds {MAX_CODEC_BODY_BYTES} bytes; send fewer payloads per call"
    )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_CODEC_BODY_BYTES:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > MAX_CODEC_BODY_BYTES:
            raise too_large
    return bytes(body)


def _payloads(body: bytes) -> list[Payload]:
    """The body's payload list; anything else is 400 ``codec.bad_request``."""
    expected = 'expected {"payloads": [{"metadata": {...}, "data": "<base64>"}, ...]}'
    if too_deep(body, MAX_CODEC_JSON_DEPTH):  # before json.loads, which recurses once per level
        raise _Refused(400, "codec.bad_request", f"{expected}: nested deeper than {MAX_CODEC_JSON_DEPTH}")
    try:
        return list(json_format.Parse(body.decode("utf-8"), Payloads()).payloads)
    except (json_format.ParseError, UnicodeDecodeError, ValueError) as exc:
        raise _Refused(400, "codec.bad_request", f"{expected}: {exc}") from None


def _refuse_pointers(payloads: Sequence[Payload]) -> None:
    """Only turngate's claim check makes pointers: one sent to ``encode`` would come back sealed,
    and ``decode`` follows sealed pointers."""
    for position, payload in enumerate(payloads):
        if payload.metadata.get("encoding") == POINTER_ENCODING:
            raise _Refused(
                400,
                "codec.pointer_refused",
                f"payloads[{position}]: encoding {POINTER_ENCODING.decode()} is the claim check's own; "
                "it is never accepted as input",
            )


async def _decode_sealed(codec: PayloadCodec, payloads: Sequence[Payload]) -> list[Payload]:
    """Decode every payload except a pointer in the clear, which comes back as it was sent: the
    claim check only follows a pointer that decryption returned."""
    clear = [payload.metadata.get("encoding") == POINTER_ENCODING for payload in payloads]
    decoded = iter(await codec.decode([p for p, bare in zip(payloads, clear, strict=True) if not bare]))
    return [payload if bare else next(decoded) for payload, bare in zip(payloads, clear, strict=True)]


async def _apply(request: Request, operation: Literal["encode", "decode"]) -> JSONResponse:
    codec = _codec(request)
    if codec is None:
        return error_response(
            404, "codec.disabled", "histories are not encrypted here (TURNGATE_ENCRYPTION_KEYS is unset)"
        )
    try:
        payloads = _payloads(await _body(request))
        if operation == "encode":
            _refuse_pointers(payloads)
            converted = await codec.encode(payloads)
        else:
            converted = await _decode_sealed(codec, payloads)
    except _Refused as refused:
        return refused.response
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
    return await _apply(request, "encode")


@router.post("/codec/decode", response_model=None, tags=["codec"], responses={200: {"model": CodecPayloads}})
async def decode(request: Request) -> JSONResponse:
    """Decrypt payloads with the key each one names (and read back a payload over 64 KiB from the
    artifact store); unencrypted payloads come back unchanged."""
    return await _apply(request, "decode")


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
