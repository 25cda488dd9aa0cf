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

Store calls run under the artifact deadline (:class:`~turngate.artifacts.deadline.StorageDeadline`,
``TURNGATE_ARTIFACT_DEADLINE_S``), one per encode or decode call, so a store that never answers
holds a payload for at most that long. A failure is an ``ApplicationError`` whose ``type`` is the
artifact error code (``artifact.unavailable``, ``artifact.not_found``, ``artifact.mismatch``),
logged and counted through ``on_failure``. What the SDK does with it depends on where the codec
ran (docs/ARTIFACTS.md, "When the store fails under the codec"): storing an activity's result
fails the activity for good (the turn records the error), while a failure around a workflow
activation fails that workflow task, which Temporal retries until the store answers again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal

from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, PayloadCodec
from temporalio.exceptions import ApplicationError

from turngate.artifacts.deadline import DEFAULT_ARTIFACT_DEADLINE_S, StorageDeadline
from turngate.artifacts.store import INLINE_LIMIT_BYTES, ArtifactError, ArtifactStore
from turngate.core.canonical import digest_bytes
from turngate.core.manifest import ArtifactPointer

#: The largest payload (serialized protobuf, metadata included) kept in a history as is.
PAYLOAD_LIMIT_BYTES = INLINE_LIMIT_BYTES
#: The ``encoding`` metadata of a payload that stands for an artifact.
POINTER_ENCODING = b"binary/turngate-artifact-pointer"
PAYLOAD_ARTIFACT_KIND = "temporal_payload"
PAYLOAD_MEDIA_TYPE = "application/x-protobuf"


log = logging.getLogger(__name__)

CodecOperation = Literal["encode", "decode"]
#: Called with the operation and the error code of every failed store call (a metric).
FailureHook = Callable[[CodecOperation, str], None]


class PayloadStoreError(ApplicationError, ArtifactError):
    """The claim check could not reach a payload's artifact: what the SDK (and the remote codec
    route) gets. ``type`` and ``code`` are the artifact error code (``artifact.unavailable``,
    ``artifact.not_found``, ``artifact.mismatch``); ``non_retryable`` is
    :func:`retrying_cannot_help` for an encode, false for a decode."""

    def __init__(self, operation: CodecOperation, message: str, code: str, *, non_retryable: bool) -> None:
        super().__init__(
            message,
            {"missing_pointers": [PAYLOAD_ARTIFACT_KIND]},
            type=code,
            non_retryable=non_retryable,
        )
        self.code = code
        self.operation = operation


def retrying_cannot_help() -> bool:
    """Whether a failed encode should end the activity whose result it was storing.

    Yes for a regular activity's result (the provider call): a retry would call the provider
    again only to meet the same store, so the activity fails for good and the turn records the
    error. No for a local activity's result (turngate's are ledger steps, idempotent and cheap
    to repeat, whose event is already appended: recording the step again as a failure would
    conflict with it), nor outside an activity (a workflow task: the SDK retries it whatever the
    error says). A decode is never final: in a workflow activation a non-retryable error would
    fail the whole workflow, while a failed workflow task is retried and the turn resumes once
    its payload can be read.
    """
    return activity.in_activity() and not activity.info().is_local


class PayloadArtifactError(PayloadStoreError, ValueError):
    """An offloaded payload's artifact does not hash to its pointer (damaged or swapped)."""

    def __init__(self, message: str) -> None:
        super().__init__("decode", message, "artifact.mismatch", non_retryable=False)


class ArtifactPayloadCodec(PayloadCodec):
    """Offloads payloads over :data:`PAYLOAD_LIMIT_BYTES` to ``store``; see the module doc."""

    def __init__(
        self,
        store: ArtifactStore,
        limit_bytes: int = PAYLOAD_LIMIT_BYTES,
        *,
        deadline_s: float = DEFAULT_ARTIFACT_DEADLINE_S,
        on_failure: FailureHook | None = None,
    ) -> None:
        self._store = store
        self._limit = limit_bytes
        self._deadline_s = deadline_s
        self._on_failure = on_failure

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        if all(payload.ByteSize() <= self._limit for payload in payloads):
            return list(payloads)
        return await self._under_deadline("encode", self._encode_one, payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        if all(payload.metadata.get("encoding") != POINTER_ENCODING for payload in payloads):
            return list(payloads)
        return await self._under_deadline("decode", self._decode_one, payloads)

    async def _under_deadline(
        self,
        operation: CodecOperation,
        convert: Callable[[Payload, StorageDeadline], Awaitable[Payload]],
        payloads: Sequence[Payload],
    ) -> list[Payload]:
        """``convert`` each payload, all of them under one artifact deadline."""
        deadline = StorageDeadline(self._deadline_s)
        try:
            return [await convert(payload, deadline) for payload in payloads]
        except ArtifactError as exc:
            error = self._failed(operation, exc)
            raise error from (None if error is exc else exc)

    def _failed(self, operation: CodecOperation, exc: ArtifactError) -> PayloadStoreError:
        """Log and count a failed store call; the error to raise in its place."""
        if isinstance(exc, PayloadStoreError):
            error = exc
        else:
            what = "store" if operation == "encode" else "read back"
            message = f"could not {what} a Temporal payload over {self._limit} bytes: {exc}"
            final = operation == "encode" and retrying_cannot_help()
            error = PayloadStoreError(operation, message, exc.code, non_retryable=final)
        log.error("Temporal payload %s failed (%s): %s", operation, error.code, error)
        if self._on_failure is not None:
            self._on_failure(operation, error.code)
        return error

    async def _encode_one(self, payload: Payload, deadline: StorageDeadline) -> Payload:
        if payload.ByteSize() <= self._limit:
            return payload
        data = payload.SerializeToString()
        pointer = await asyncio.to_thread(
            deadline.call,
            PAYLOAD_ARTIFACT_KIND,
            lambda: self._store.put(data, kind=PAYLOAD_ARTIFACT_KIND, media_type=PAYLOAD_MEDIA_TYPE),
        )
        body = pointer.model_dump_json(exclude={"created_at"}).encode()
        return Payload(metadata={"encoding": POINTER_ENCODING}, data=body)

    async def _decode_one(self, payload: Payload, deadline: StorageDeadline) -> Payload:
        if payload.metadata.get("encoding") != POINTER_ENCODING:
            return payload
        pointer = ArtifactPointer.model_validate_json(payload.data)
        data = await asyncio.to_thread(deadline.call, PAYLOAD_ARTIFACT_KIND, lambda: self._store.get(pointer))
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
    store: ArtifactStore | None,
    encryption: PayloadCodec | None = None,
    overhead_bytes: int = 0,
    *,
    deadline_s: float = DEFAULT_ARTIFACT_DEADLINE_S,
    on_failure: FailureHook | None = None,
) -> DataConverter:
    """Pydantic JSON plus the claim check (no store: none, e.g. offline replay of recorded test
    histories) and, when given, the encryption codec after it. ``overhead_bytes``: what
    encryption adds to a payload, taken off the claim check's limit so the sealed payload still
    fits :data:`PAYLOAD_LIMIT_BYTES`. ``deadline_s`` bounds the store calls of one encode or
    decode; ``on_failure`` hears of each failed one."""
    codecs: list[PayloadCodec] = []
    if store is not None:
        limit = PAYLOAD_LIMIT_BYTES - overhead_bytes
        codecs.append(ArtifactPayloadCodec(store, limit, deadline_s=deadline_s, on_failure=on_failure))
    if encryption is not None:
        codecs.append(encryption)
    if not codecs:
        return pydantic_data_converter
    codec = codecs[0] if len(codecs) == 1 else CodecChain(codecs)
    return dataclasses.replace(pydantic_data_converter, payload_codec=codec)
