"""An unavailable store, told apart from a missing artifact, against real misbehaving servers on
loopback: a proxy in front of moto's S3 that accepts connections and never answers, or answers
every request with a 500. The errors carry one code each (``artifact.unavailable``,
``artifact.not_found``) and never the endpoint, the bucket or a path of this machine; the
Temporal claim check's store calls end at the artifact deadline, not on the S3 client's own
timeouts."""

from __future__ import annotations

import threading
import time

import pytest
from temporalio.api.common.v1 import Payload

from tests.artifacts.conftest import new_bucket
from tests.faults.misbehaving_proxy import MisbehavingProxy
from turngate.artifacts import ArtifactNotFoundError, ArtifactUnavailableError
from turngate.artifacts.s3 import S3ArtifactStore
from turngate.artifacts.temporal_codec import (
    PAYLOAD_LIMIT_BYTES,
    ArtifactPayloadCodec,
    PayloadStoreError,
)
from turngate.core.canonical import digest_bytes

DATA = b'{"manifest": "exact bytes"}'
# Longer than any deadline below: when a call ends, the deadline ended it, not the client.
READ_TIMEOUT_S = 20.0
DEADLINE_S = 1.5
# A deadline ends a stuck call within its time plus one poll of the waiting thread; the rest is
# scheduling noise on a busy machine.
SLACK_S = 1.5


@pytest.fixture
def store(proxy: MisbehavingProxy, moto_endpoint: str) -> S3ArtifactStore:
    bucket = new_bucket(moto_endpoint)
    return slow_store(bucket, proxy.url)


def slow_store(bucket: str, endpoint: str) -> S3ArtifactStore:
    return S3ArtifactStore(
        bucket, "tg", endpoint_url=endpoint, connect_timeout=1, read_timeout=READ_TIMEOUT_S
    )


def recording_codec(store: S3ArtifactStore) -> tuple[ArtifactPayloadCodec, list[tuple[str, str]]]:
    """A claim check under :data:`DEADLINE_S` and the failures it reports."""
    failures: list[tuple[str, str]] = []
    codec = ArtifactPayloadCodec(
        store, deadline_s=DEADLINE_S, on_failure=lambda op, code: failures.append((op, code))
    )
    return codec, failures


def big_payload(extra: int = 1) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=b"x" * (PAYLOAD_LIMIT_BYTES + extra))


def assert_says_nothing_internal(
    error: BaseException, proxy: MisbehavingProxy, store: S3ArtifactStore
) -> None:
    text = str(error)
    for internal in ("127.0.0.1", str(proxy.port), "http://", "s3://", store.bucket, "/tmp"):
        assert internal not in text, f"{internal!r} in {text!r}"


# --------------------------------------------------------------------------- the store itself


def test_a_store_that_answers_500_is_unavailable_and_says_nothing_internal(
    proxy: MisbehavingProxy, store: S3ArtifactStore
) -> None:
    pointer = store.put(DATA, kind="manifest")
    proxy.set_mode("error500")
    for call in (
        lambda: store.put(b"new bytes", kind="manifest"),
        lambda: store.get(pointer),
        lambda: store.check(pointer),
        lambda: store.exists(pointer.artifact_id),
    ):
        with pytest.raises(ArtifactUnavailableError, match=r"\(HTTP 500\)") as caught:
            call()
        assert caught.value.code == "artifact.unavailable" and caught.value.retryable
        assert_says_nothing_internal(caught.value, proxy, store)


def test_a_store_that_never_answers_is_unavailable_not_missing(
    proxy: MisbehavingProxy, moto_endpoint: str
) -> None:
    bucket = new_bucket(moto_endpoint)
    store = S3ArtifactStore(bucket, "tg", endpoint_url=proxy.url, connect_timeout=1, read_timeout=1)
    pointer = store.put(DATA, kind="manifest")
    proxy.set_mode("stall")
    with pytest.raises(ArtifactUnavailableError, match="read timeout") as caught:
        store.get(pointer)
    assert caught.value.code == "artifact.unavailable" and caught.value.retryable
    assert_says_nothing_internal(caught.value, proxy, store)


def test_a_missing_artifact_has_its_own_code(proxy: MisbehavingProxy, store: S3ArtifactStore) -> None:
    gone = digest_bytes(b"never stored")
    with pytest.raises(ArtifactNotFoundError) as caught:
        store.get(gone)
    assert caught.value.code == "artifact.not_found"
    assert not isinstance(caught.value, ArtifactUnavailableError)


# --------------------------------------------------------------------------- the claim check


async def test_the_claim_check_round_trips_through_a_healthy_store(store: S3ArtifactStore) -> None:
    codec = ArtifactPayloadCodec(store, deadline_s=DEADLINE_S)
    original = big_payload()
    [pointer] = await codec.encode([original])
    assert pointer.ByteSize() < 1024
    assert await codec.decode([pointer]) == [original]


async def test_encode_against_a_silent_store_ends_at_the_deadline(
    proxy: MisbehavingProxy, store: S3ArtifactStore
) -> None:
    codec, failures = recording_codec(store)
    proxy.set_mode("stall")
    started = time.monotonic()
    with pytest.raises(PayloadStoreError) as caught:
        await codec.encode([big_payload()])
    elapsed = time.monotonic() - started
    # over the deadline it fails, and the deadline ended it: the client's 20 s read timeout is not
    # waited (how soon past the deadline is scheduling noise, not checked)
    assert DEADLINE_S <= elapsed < READ_TIMEOUT_S
    error = caught.value
    assert error.type == error.code == "artifact.unavailable"
    assert not error.non_retryable  # final only for a regular activity's result (test_codec_in_worker)
    assert error.details == ({"missing_pointers": ["temporal_payload"]},)
    assert f"deadline of {DEADLINE_S:g} s passed" in str(error)
    assert_says_nothing_internal(error, proxy, store)
    assert failures == [("encode", "artifact.unavailable")]


async def test_encode_against_a_store_answering_500_retries_then_fails(
    proxy: MisbehavingProxy, store: S3ArtifactStore
) -> None:
    codec = ArtifactPayloadCodec(store, deadline_s=DEADLINE_S)
    proxy.set_mode("error500")
    started = time.monotonic()
    with pytest.raises(PayloadStoreError, match=r"\(HTTP 500\)") as caught:
        await codec.encode([big_payload()])
    assert time.monotonic() - started < DEADLINE_S + SLACK_S + 2.0  # at most one backoff past it
    assert proxy.errors_sent >= 2  # retried inside the deadline
    assert caught.value.code == "artifact.unavailable"
    assert_says_nothing_internal(caught.value, proxy, store)


async def test_a_store_back_within_the_deadline_is_not_an_error(
    proxy: MisbehavingProxy, store: S3ArtifactStore
) -> None:
    codec = ArtifactPayloadCodec(store, deadline_s=6.0)
    proxy.set_mode("stall")
    # Under the deadline: the store answers again after 1 s (the held connection is dropped, the
    # retry goes through).
    threading.Timer(1.0, proxy.set_mode, args=("forward",)).start()
    started = time.monotonic()
    original = big_payload(7)
    [pointer] = await codec.encode([original])
    assert 1.0 <= time.monotonic() - started < 6.0
    assert await codec.decode([pointer]) == [original]


async def test_decode_against_a_silent_store_is_retryable_and_bounded(
    proxy: MisbehavingProxy, store: S3ArtifactStore
) -> None:
    codec, failures = recording_codec(store)
    [pointer] = await codec.encode([big_payload()])
    proxy.set_mode("stall")
    started = time.monotonic()
    with pytest.raises(PayloadStoreError) as caught:
        await codec.decode([pointer])
    # the deadline ended it, not the client's read timeout (how soon past it: scheduling noise)
    assert DEADLINE_S <= time.monotonic() - started < READ_TIMEOUT_S
    # in a workflow activation a non-retryable error would fail the whole workflow
    assert caught.value.code == "artifact.unavailable" and not caught.value.non_retryable
    assert_says_nothing_internal(caught.value, proxy, store)
    assert failures == [("decode", "artifact.unavailable")]


async def test_decode_of_a_missing_payload_artifact_says_not_found(
    store: S3ArtifactStore, moto_endpoint: str
) -> None:
    codec = ArtifactPayloadCodec(store, deadline_s=DEADLINE_S)
    [pointer] = await codec.encode([big_payload()])
    other = slow_store(new_bucket(moto_endpoint), moto_endpoint)
    started = time.monotonic()
    with pytest.raises(PayloadStoreError) as caught:
        await ArtifactPayloadCodec(other, deadline_s=DEADLINE_S).decode([pointer])
    assert time.monotonic() - started < DEADLINE_S  # missing is final at once, never waited on
    assert caught.value.code == "artifact.not_found"
