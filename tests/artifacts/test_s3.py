"""S3-only behaviour, against moto's S3 server on 127.0.0.1 through boto3 (never real AWS)."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.artifacts.conftest import FAKE_AWS_ENV, FAST, new_bucket
from turngate.artifacts import ArtifactUnavailableError, open_artifact_store
from turngate.artifacts.s3 import S3ArtifactStore, build_s3_client
from turngate.core.canonical import digest_bytes

DATA = b'{"prompt": "exact bytes"}'


@pytest.fixture
def store(moto_endpoint: str, s3_bucket: str) -> S3ArtifactStore:
    return S3ArtifactStore(s3_bucket, "turngate/", endpoint_url=moto_endpoint, **FAST)


def _count_calls(store: S3ArtifactStore, operation: str) -> list[str]:
    calls: list[str] = []
    store.client.meta.events.register(f"before-call.s3.{operation}", lambda **_: calls.append(operation))
    return calls


def test_objects_carry_content_type_and_sha256(store: S3ArtifactStore) -> None:
    pointer = store.put(DATA, kind="prompt_snapshot", retention="snapshot", media_type="text/plain")
    head = store.client.head_object(Bucket=store.bucket, Key=store.key(pointer.path))
    assert head["ContentType"] == "text/plain"
    assert head["Metadata"]["sha256"] == pointer.sha256 == digest_bytes(DATA)
    assert store.key(pointer.path) == f"turngate/{pointer.path}"
    # created_at is the object's LastModified
    assert pointer.created_at == head["LastModified"].astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_a_second_put_only_heads(store: S3ArtifactStore) -> None:
    first = store.put(DATA, kind="manifest")
    puts = _count_calls(store, "PutObject")
    assert store.put(DATA, kind="manifest") == first
    assert puts == []


def test_a_damaged_object_of_another_size_is_rewritten_by_put(store: S3ArtifactStore) -> None:
    pointer = store.put(DATA, kind="manifest")
    store.client.put_object(Bucket=store.bucket, Key=store.key(pointer.path), Body=DATA[:-3])
    assert store.check(pointer).status == "mismatch"
    store.put(DATA, kind="manifest")
    assert store.check(pointer).ok


class _FlakyPutClient:
    """Forwards to a real client; put_object stores (or not), then answers HTTP 500."""

    def __init__(self, client: Any, *, store_first: bool) -> None:
        self._client = client
        self._store_first = store_first

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def put_object(self, **kwargs: Any) -> Any:
        if self._store_first:
            self._client.put_object(**kwargs)
        error = {
            "Error": {"Code": "InternalError", "Message": "boom"},
            "ResponseMetadata": {"HTTPStatusCode": 500},
        }
        raise ClientError(error, "PutObject")  # type: ignore[arg-type]


def test_a_failed_put_whose_content_a_racing_writer_stored_counts_as_stored(
    store: S3ArtifactStore,
) -> None:
    racing = S3ArtifactStore(
        store.bucket, store.prefix, client=_FlakyPutClient(store.client, store_first=True)
    )
    pointer = racing.put(DATA, kind="manifest")
    assert store.get(pointer) == DATA


def test_a_server_error_is_unavailable_and_retryable(store: S3ArtifactStore) -> None:
    failing = S3ArtifactStore(
        store.bucket, store.prefix, client=_FlakyPutClient(store.client, store_first=False)
    )
    with pytest.raises(ArtifactUnavailableError, match="InternalError") as caught:
        failing.put(DATA, kind="manifest")
    assert caught.value.retryable
    assert caught.value.code == "artifact.unavailable"


def test_a_missing_bucket_is_unavailable_not_retryable(moto_endpoint: str) -> None:
    store = S3ArtifactStore("tg-no-such-bucket", "p", endpoint_url=moto_endpoint, **FAST)
    with pytest.raises(ArtifactUnavailableError, match="NoSuchBucket") as caught:
        store.put(DATA, kind="manifest")
    assert not caught.value.retryable
    with pytest.raises(ArtifactUnavailableError):
        store.get(digest_bytes(DATA))
    with pytest.raises(ArtifactUnavailableError):
        list(store.iter_artifacts())


def test_ensure_bucket_creates_it_once(moto_endpoint: str) -> None:
    store = S3ArtifactStore("tg-ensure-bucket-test", "", endpoint_url=moto_endpoint, **FAST)
    store.ensure_bucket()
    store.ensure_bucket()
    assert store.get(store.put(DATA, kind="manifest")) == DATA
    assert store.put(DATA, kind="manifest").path.startswith("standard/")  # no prefix: keys are the paths


def test_gc_deletes_in_batches_with_delete_objects(store: S3ArtifactStore) -> None:
    for i in range(5):
        store.put(f"snapshot {i}".encode(), kind="prompt_snapshot", retention="snapshot")
    calls = _count_calls(store, "DeleteObjects")
    later = S3ArtifactStore(
        store.bucket, store.prefix, client=store.client, clock=lambda: datetime.now(UTC) + timedelta(days=8)
    )
    assert later.gc(timedelta(days=7)).deleted == 5
    assert calls == ["DeleteObjects"]
    assert list(store.iter_artifacts()) == []


def test_open_artifact_store_reads_the_endpoint_from_the_environment(
    moto_endpoint: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    store = open_artifact_store(f"s3://{s3_bucket}/tenant-a/artifacts")
    assert isinstance(store, S3ArtifactStore)
    assert store.prefix == "tenant-a/artifacts/"
    assert store.region == "us-east-1"
    pointer = store.put(DATA, kind="manifest")
    assert store.get(pointer) == DATA
    assert moto_endpoint in store.describe()

    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto_endpoint + "/")  # the S3-specific variable wins
    assert open_artifact_store(f"s3://{s3_bucket}").endpoint_url == moto_endpoint + "/"  # type: ignore[attr-defined]


def test_describe_shows_no_secrets(moto_endpoint: str) -> None:
    client = build_s3_client(endpoint_url=moto_endpoint.replace("http://", "http://user:pass@") + "/?token=t")
    store = S3ArtifactStore("tg-any", "p", client=client)
    description = store.describe()
    assert "s3://tg-any/p/" in description
    for secret in (
        "pass",
        "user",
        "token",
        FAKE_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        FAKE_AWS_ENV["AWS_ACCESS_KEY_ID"],
    ):
        assert secret not in description


def test_missing_credentials_are_unavailable_not_retryable(
    moto_endpoint: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    store = S3ArtifactStore(s3_bucket, "p", endpoint_url=moto_endpoint, **FAST)
    with pytest.raises(ArtifactUnavailableError, match="credentials") as caught:
        store.put(DATA, kind="manifest")
    assert not caught.value.retryable


# ---- the store is down: put fails fast with ArtifactUnavailableError (the turn stops with SYSTEM_ERROR)


@pytest.fixture
def stopped_server(fake_aws_env: None) -> Iterator[tuple[str, str]]:
    """A moto server that served one bucket and was then stopped (its port refuses connections)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    bucket = new_bucket(endpoint)
    S3ArtifactStore(bucket, "p", endpoint_url=endpoint, **FAST).put(b"before the outage", kind="manifest")
    server.stop()
    with contextlib.suppress(Exception):
        server._server.server_close()  # release the listening socket: connections are refused
    yield endpoint, bucket


def test_put_on_a_stopped_server_fails_fast(stopped_server: tuple[str, str]) -> None:
    endpoint, bucket = stopped_server
    store = S3ArtifactStore(bucket, "p", endpoint_url=endpoint, **FAST)
    started = time.monotonic()
    with pytest.raises(ArtifactUnavailableError, match="S3 head") as caught:
        store.put(DATA, kind="prompt_snapshot", retention="snapshot")
    assert time.monotonic() - started < 5
    assert caught.value.retryable
    # nothing else mistakes the outage for a missing artifact
    for call in (
        lambda: store.get(digest_bytes(b"before the outage")),
        lambda: store.exists(digest_bytes(b"before the outage")),
        lambda: list(store.iter_artifacts()),
    ):
        with pytest.raises(ArtifactUnavailableError):
            call()


def test_put_with_the_default_timeouts_also_fails_fast(stopped_server: tuple[str, str]) -> None:
    endpoint, bucket = stopped_server
    store = S3ArtifactStore(bucket, "p", endpoint_url=endpoint)  # default timeouts, 1 attempt
    started = time.monotonic()
    with pytest.raises(ArtifactUnavailableError):
        store.put(DATA, kind="manifest")
    assert time.monotonic() - started < 5


def test_check_on_a_stopped_server_raises_instead_of_reporting_missing(
    moto_endpoint: str, s3_bucket: str, stopped_server: tuple[str, str]
) -> None:
    pointer = S3ArtifactStore(s3_bucket, "p", endpoint_url=moto_endpoint, **FAST).put(DATA, kind="manifest")
    endpoint, bucket = stopped_server
    with pytest.raises(ArtifactUnavailableError):
        S3ArtifactStore(bucket, "p", endpoint_url=endpoint, **FAST).check(pointer)


def test_a_server_that_never_answers_hits_the_read_timeout(fake_aws_env: None) -> None:
    with socket.socket() as listener:  # accepts connections (backlog) and never replies
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        store = S3ArtifactStore(
            "tg-silent",
            "p",
            endpoint_url=f"http://127.0.0.1:{port}",
            connect_timeout=1,
            read_timeout=1,
            max_attempts=1,
        )
        started = time.monotonic()
        with pytest.raises(ArtifactUnavailableError, match="read timeout") as caught:
            store.put(DATA, kind="manifest")
        assert time.monotonic() - started < 30  # the error names the 1 s bound; this rules out a hang
        assert caught.value.retryable
        assert str(port) not in str(caught.value)  # the endpoint is logged, never in the error
