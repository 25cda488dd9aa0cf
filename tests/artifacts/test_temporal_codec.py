"""The claim check for Temporal payloads: over 64 KiB a payload becomes a pointer, decoding
gives the exact payload back, and a damaged artifact fails loudly."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload

from turngate.artifacts import LocalArtifactStore
from turngate.artifacts.temporal_codec import (
    PAYLOAD_LIMIT_BYTES,
    POINTER_ENCODING,
    ArtifactPayloadCodec,
    PayloadArtifactError,
)
from turngate.core.manifest import ArtifactPointer


def sized(size: int) -> Payload:
    """A JSON payload whose serialized size is exactly ``size`` bytes."""
    length = size - 32
    while True:
        payload = Payload(metadata={"encoding": b"json/plain"}, data=b"x" * length)
        if payload.ByteSize() == size:
            return payload
        length += 1 if payload.ByteSize() < size else -1


async def test_at_the_limit_stays_and_one_byte_over_is_offloaded(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    codec = ArtifactPayloadCodec(store)
    at, over = sized(PAYLOAD_LIMIT_BYTES), sized(PAYLOAD_LIMIT_BYTES + 1)
    kept, moved = await codec.encode([at, over])
    assert kept == at
    assert moved.metadata["encoding"] == POINTER_ENCODING and moved.ByteSize() < 1024
    pointer = ArtifactPointer.model_validate_json(moved.data)
    assert pointer.path.startswith("standard/temporal_payload/")
    assert pointer.size_bytes == over.ByteSize() and pointer.created_at is None
    assert await codec.decode([kept, moved]) == [at, over]


async def test_a_damaged_artifact_is_refused(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    codec = ArtifactPayloadCodec(store)
    [moved] = await codec.encode([sized(PAYLOAD_LIMIT_BYTES * 2)])
    pointer = ArtifactPointer.model_validate_json(moved.data)
    path = tmp_path / pointer.path
    path.write_bytes(path.read_bytes()[:-1] + b"y")
    with pytest.raises(PayloadArtifactError, match="hashes to") as caught:
        await codec.decode([moved])
    assert caught.value.code == caught.value.type == "artifact.mismatch"
    assert not caught.value.non_retryable


def test_failed_payload_calls_are_counted_in_the_process_metrics() -> None:
    from prometheus_client import generate_latest

    from turngate.telemetry.metrics import default_metrics
    from turngate.temporal_client import _count_codec_failure

    counter = default_metrics().payload_codec_failures.labels(operation="decode", code="artifact.not_found")
    before = counter._value.get()
    _count_codec_failure("decode", "artifact.not_found")
    assert counter._value.get() == before + 1
    exposed = generate_latest(default_metrics().registry).decode()
    assert 'turngate_payload_codec_failures_total{code="artifact.not_found",operation="decode"}' in exposed
