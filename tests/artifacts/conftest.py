"""Fixtures: one moto S3 server per session (127.0.0.1, fake credentials, never real AWS), and a
``backend`` fixture that runs the shared suite against the local and the S3 store."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.faults.misbehaving_proxy import MisbehavingProxy
from turngate.artifacts import BaseArtifactStore, LocalArtifactStore
from turngate.core.manifest import ArtifactPointer

FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing-secret-do-not-print",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": "/nonexistent/turngate-tests/aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/turngate-tests/aws-credentials",
}
CLEARED_AWS_ENV = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
)
FAST = {"connect_timeout": 1.0, "read_timeout": 2.0, "max_attempts": 1}


@pytest.fixture(scope="session")
def fake_aws_env() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for name in CLEARED_AWS_ENV:
            patch.delenv(name, raising=False)
        for name, value in FAKE_AWS_ENV.items():
            patch.setenv(name, value)
        yield


@pytest.fixture(scope="session")
def moto_endpoint(fake_aws_env: None) -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)  # port 0: a free port
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def new_bucket(endpoint: str, client: Any = None) -> str:
    import boto3

    name = f"tg-{uuid.uuid4().hex[:20]}"
    client = client or boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=name)
    return name


def set_s3_last_modified(bucket: str, key: str, moment: datetime) -> None:
    """Backdate an object inside the in-process moto server (S3 has no API for it)."""
    from moto.s3.models import s3_backends

    partition, account = s3_backends.bucket_accounts[bucket]
    fake_key = s3_backends[account][partition].buckets[bucket].keys[key]
    fake_key.last_modified = moment.astimezone(UTC).replace(tzinfo=None)


@dataclass
class Backend:
    """A store plus raw access to what it stored, for tampering and ageing in tests."""

    name: str
    store: BaseArtifactStore
    make: Callable[..., BaseArtifactStore]  # another store on the same location (e.g. with a clock)
    age: Callable[[ArtifactPointer, timedelta], None]  # make an artifact look older
    raw_write: Callable[[str, bytes], None]  # overwrite the bytes behind a path, bypassing the store
    raw_delete: Callable[[str], None]
    count: Callable[[], int]  # every stored object or file, temp files included


def local_backend(root: Path) -> Backend:
    def make(**kw: Any) -> BaseArtifactStore:
        return LocalArtifactStore(root, **kw)

    store = make()

    def age(pointer: ArtifactPointer, delta: timedelta) -> None:
        target = store.file_path(pointer.path)
        moment = (datetime.now(UTC) - delta).timestamp()
        os.utime(target, (moment, moment))

    def raw_write(path: str, data: bytes) -> None:
        store.file_path(path).write_bytes(data)

    def raw_delete(path: str) -> None:
        store.file_path(path).unlink()

    def count() -> int:
        return sum(1 for item in root.rglob("*") if item.is_file()) if root.exists() else 0

    return Backend("local", store, make, age, raw_write, raw_delete, count)


def s3_backend(endpoint: str, client: Any) -> Backend:
    from turngate.artifacts.s3 import S3ArtifactStore

    bucket = new_bucket(endpoint, client)

    def make(**kw: Any) -> BaseArtifactStore:
        return S3ArtifactStore(bucket, "deploy/turngate", client=client, **kw)

    store = make()

    def age(pointer: ArtifactPointer, delta: timedelta) -> None:
        set_s3_last_modified(bucket, store.key(pointer.path), datetime.now(UTC) - delta)

    def raw_write(path: str, data: bytes) -> None:
        client.put_object(Bucket=bucket, Key=store.key(path), Body=data)

    def raw_delete(path: str) -> None:
        client.delete_object(Bucket=bucket, Key=store.key(path))

    def count() -> int:
        return client.list_objects_v2(Bucket=bucket).get("KeyCount", 0)

    return Backend("s3", store, make, age, raw_write, raw_delete, count)


@pytest.fixture(params=["local", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "local":
        return local_backend(tmp_path / "artifacts")
    return s3_backend(request.getfixturevalue("moto_endpoint"), request.getfixturevalue("s3_client"))


@pytest.fixture(scope="session")
def s3_client(moto_endpoint: str) -> Any:
    """One client for the shared suite (building a boto3 client costs ~0.2 s): the stores' own
    client construction is covered by test_s3.py."""
    from turngate.artifacts.s3 import build_s3_client

    return build_s3_client(endpoint_url=moto_endpoint, **FAST)


@pytest.fixture
def s3_bucket(moto_endpoint: str, s3_client: Any) -> str:
    return new_bucket(moto_endpoint, s3_client)


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[MisbehavingProxy]:
    """A proxy in front of moto's S3 that forwards until told to stall or answer 500."""
    host, port = moto_endpoint.removeprefix("http://").split(":")
    proxied = MisbehavingProxy((host, int(port)))
    yield proxied
    proxied.close()
