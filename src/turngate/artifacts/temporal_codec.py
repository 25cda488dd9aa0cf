"""Claim check for Temporal payloads: nothing over 64 KiB enters a workflow history.

Every workflow and activity input and result (local activity markers included) passes through
this codec. A payload whose serialized size is over :data:`PAYLOAD_LIMIT_BYTES` is stored in the
artifact store (kind ``temporal_payload``, standard retention: a history needs it for as long as
it may be replayed) and replaced by a small payload that carries the artifact's pointer
(``{artifact_id, path, sha256, size_bytes}``, the manifests' shape). Decoding reads the artifact
back and checks its sha256 before handing the original payload to the SDK, so a damaged or
swapped artifact fails loudly instead of feeding a workflow other bytes than it was given.

Codecs run outside workflow code (in the client and the worker, before and after the SDK's
workflow activations), so the deterministic core never sees a pointer: it sees the value.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, PayloadCodec

from turngate.artifacts.store import INLINE_LIMIT_BYTES, ArtifactStore
from turngate.core.canonical import digest_bytes
from turngate.core.manifest import ArtifactPointer

#: The largest payload (serialized protobuf, metadata included) kept in a history as is.
PAYLOAD_LIMIT_BYTES = INLINE_LIMIT_BYTES
#: The ``encoding`` metadata of a payload that stands for an artifact.
POINTER_ENCODING = b"binary/turngate-artifact-pointer"
PAYLOAD_ARTIFACT_KIND = "temporal_payload"
PAYLOAD_MEDIA_TYPE = "application/x-protobuf"


class PayloadArtifactError(ValueError):
    """An offloaded payload's artifact does not hash to its pointer (damaged or swapped)."""


class ArtifactPayloadCodec(PayloadCodec):
    """Offloads payloads over :data:`PAYLOAD_LIMIT_BYTES` to ``store``; see the module doc."""

    def __init__(self, store: ArtifactStore, limit_bytes: int = PAYLOAD_LIMIT_BYTES) -> None:
        self._store = store
        self._limit = limit_bytes

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [await self._encode_one(payload) for payload in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [await self._decode_one(payload) for payload in payloads]

    async def _encode_one(self, payload: Payload) -> Payload:
        if payload.ByteSize() <= self._limit:
            return payload
        data = payload.SerializeToString()
        pointer = await asyncio.to_thread(
            self._store.put, data, kind=PAYLOAD_ARTIFACT_KIND, media_type=PAYLOAD_MEDIA_TYPE
        )
        body = pointer.model_dump_json(exclude={"created_at"}).encode()
        return Payload(metadata={"encoding": POINTER_ENCODING}, data=body)

    async def _decode_one(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != POINTER_ENCODING:
            return payload
        pointer = ArtifactPointer.model_validate_json(payload.data)
        data = await asyncio.to_thread(self._store.get, pointer)
        actual = digest_bytes(data)
        if actual != pointer.sha256 or len(data) != pointer.size_bytes:
            raise PayloadArtifactError(
                f"offloaded Temporal payload {pointer.path} hashes to {actual} ({len(data)} bytes), "
                f"not {pointer.sha256} ({pointer.size_bytes} bytes)"
            )
        return Payload.FromString(data)


class CodecChain(PayloadCodec):
    """Codecs applied in order on the way out and in reverse on the way back (the claim check
    first, so that encryption, when on, seals the small payload that enters the history)."""

    def __init__(self, codecs: Sequence[PayloadCodec]) -> None:
        self._codecs = list(codecs)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = list(payloads)
        for codec in self._codecs:
            out = await codec.encode(out)
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = list(payloads)
        for codec in reversed(self._codecs):
            out = await codec.decode(out)
        return out


def turngate_data_converter(
    store: ArtifactStore | None, encryption: PayloadCodec | None = None, overhead_bytes: int = 0
) -> DataConverter:
    """Pydantic JSON plus the claim check (no store: none, e.g. offline replay of recorded test
    histories) and, when given, the encryption codec after it. ``overhead_bytes``: what
    encryption adds to a payload, taken off the claim check's limit so the sealed payload still
    fits :data:`PAYLOAD_LIMIT_BYTES`."""
    codecs: list[PayloadCodec] = []
    if store is not None:
        codecs.append(ArtifactPayloadCodec(store, limit_bytes=PAYLOAD_LIMIT_BYTES - overhead_bytes))
    if encryption is not None:
        codecs.append(encryption)
    if not codecs:
        return pydantic_data_converter
    codec = codecs[0] if len(codecs) == 1 else CodecChain(codecs)
    return dataclasses.replace(pydantic_data_converter, payload_codec=codec)
