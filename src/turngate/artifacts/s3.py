"""The S3 artifact store (``TURNGATE_ARTIFACTS=s3://bucket/prefix``), through boto3.

One boto3 client per store, built once (boto3 clients are thread-safe; sessions are not). The
endpoint comes from ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` when set (MinIO, moto, ...),
credentials and region from the usual AWS variables and files. Every call has short connect/read
timeouts (:data:`CONNECT_TIMEOUT_S`, :data:`READ_TIMEOUT_S`) and one attempt: retries belong to
the caller, which makes them under one overall deadline (:mod:`turngate.artifacts.deadline`), so a
turn whose artifact cannot be stored stops with ``SYSTEM_ERROR`` quickly rather than hang. Errors
say whether trying again may help (``retryable``): connection errors, timeouts, 5xx, throttling
and damaged uploads may; access denied, a missing bucket, bad parameters or credentials never.

Every method blocks; async code calls it through :func:`turngate.artifacts.aput` (a thread).

Permissions needed on the prefix: ``s3:GetObject``, ``s3:PutObject``, ``s3:ListBucket`` (so a
missing object answers 404, not 403), and ``s3:DeleteObject`` for ``turngate gc``.
"""

from __future__ import annotations

import base64
import logging
import os
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
    ReadTimeoutError,
)

from turngate.artifacts.store import (
    RETENTIONS,
    ArtifactConfigError,
    ArtifactError,
    ArtifactNotFoundError,
    ArtifactUnavailableError,
    BaseArtifactStore,
    Clock,
    Retention,
    StoredObject,
    digest_hex,
)

logger = logging.getLogger(__name__)

DEFAULT_REGION = "us-east-1"
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NotFound"})
_THROTTLE_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout"})
# 400s that describe the transfer, not the request: the same bytes sent again may well arrive.
_DAMAGED_UPLOAD_CODES = frozenset({"BadDigest", "XAmzContentSHA256Mismatch", "IncompleteBody"})
#: Seconds to open a connection / to wait for a byte of the answer, per call.
CONNECT_TIMEOUT_S = 3.0
READ_TIMEOUT_S = 10.0
#: Attempts per call inside botocore (the caller retries under its deadline).
MAX_ATTEMPTS = 1
_DELETE_BATCH = 1000  # the DeleteObjects limit


def endpoint_from_env() -> str | None:
    """``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL``, else ``None`` (AWS itself)."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def region_from_env() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION


def build_s3_client(
    *,
    endpoint_url: str | None = None,
    region_name: str = DEFAULT_REGION,
    connect_timeout: float = CONNECT_TIMEOUT_S,
    read_timeout: float = READ_TIMEOUT_S,
    max_attempts: int = MAX_ATTEMPTS,
) -> Any:
    """A boto3 S3 client with bounded timeouts and attempts (path-style on custom endpoints)."""
    config = Config(
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        retries={"total_max_attempts": max_attempts, "mode": "standard"},
        s3={"addressing_style": "path"} if endpoint_url else None,
        user_agent_extra="turngate",
    )
    session = boto3.session.Session(region_name=region_name)
    return session.client("s3", endpoint_url=endpoint_url, config=config)


def normalize_prefix(prefix: str) -> str:
    """``""`` or ``"a/b/"``: no leading slash, one trailing slash, no empty/'.'/'..' segments."""
    stripped = prefix.strip("/")
    if not stripped:
        return ""
    parts = stripped.split("/")
    if "\\" in stripped or any(part in ("", ".", "..") for part in parts):
        raise ArtifactConfigError(f"invalid S3 key prefix {prefix!r}: no empty, '.' or '..' segments")
    return stripped + "/"


class S3ArtifactStore(BaseArtifactStore):
    """Artifacts as objects ``<prefix><retention>/<kind>/<ab>/<hex>`` in one bucket."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: Any = None,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        read_timeout: float = READ_TIMEOUT_S,
        max_attempts: int = MAX_ATTEMPTS,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(clock=clock)
        if not _BUCKET_RE.match(bucket or ""):
            raise ArtifactConfigError(f"invalid S3 bucket name {bucket!r}")
        self.bucket = bucket
        self.prefix = normalize_prefix(prefix)
        if client is None:
            self.region = region_name or region_from_env()
            self.endpoint_url = endpoint_url or endpoint_from_env()
            client = build_s3_client(
                endpoint_url=self.endpoint_url,
                region_name=self.region,
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
                max_attempts=max_attempts,
            )
        else:
            self.region = client.meta.region_name
            self.endpoint_url = client.meta.endpoint_url
        self._client = client

    @property
    def client(self) -> Any:
        return self._client

    def describe(self) -> str:
        endpoint = _public_url(self.endpoint_url)
        return f"s3://{self.bucket}/{self.prefix} (endpoint {endpoint}, region {self.region})"

    def close(self) -> None:
        close = getattr(self._client, "close", None)
        if callable(close):
            close()

    def ensure_bucket(self) -> None:
        """Create the bucket if it does not exist (development and tests; production provisions it)."""
        try:
            self._client.head_bucket(Bucket=self.bucket)
            return
        except ClientError as exc:
            if _error_code(exc) not in _NOT_FOUND_CODES | {"NoSuchBucket"}:
                raise self._wrap(exc, "head bucket", "") from exc
        except BotoCoreError as exc:
            raise self._wrap(exc, "head bucket", "") from exc
        kwargs: dict[str, Any] = {"Bucket": self.bucket}
        if self.region != DEFAULT_REGION:
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
        try:
            self._client.create_bucket(**kwargs)
        except ClientError as exc:
            if _error_code(exc) not in {"BucketAlreadyOwnedByYou", "BucketAlreadyExists"}:
                raise self._wrap(exc, "create bucket", "") from exc
        except BotoCoreError as exc:
            raise self._wrap(exc, "create bucket", "") from exc

    def key(self, path: str) -> str:
        return self.prefix + path

    # ---- primitives

    def _stat(self, path: str) -> StoredObject | None:
        return self._head(self.key(path))

    def _write(self, path: str, data: bytes, *, digest: str, media_type: str) -> StoredObject:
        key = self.key(path)
        checksum = base64.b64encode(bytes.fromhex(digest_hex(digest))).decode("ascii")
        try:
            self._client.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=data,
                ContentType=media_type,
                Metadata={"sha256": digest},
                ChecksumSHA256=checksum,  # S3 refuses the upload if the bytes arrive damaged
            )
        except ClientError as exc:
            # The server answered with an error: if a concurrent writer of the same content got
            # there first (seen with conflicting PUTs of one key), its object is ours.
            stored = self._head_quietly(key)
            if stored is not None and stored.size == len(data) and stored.sha256 == digest:
                logger.debug("S3 put of %s failed (%s) but an identical object is stored", key, exc)
                return stored
            raise self._wrap(exc, "put", key) from exc
        except BotoCoreError as exc:
            raise self._wrap(exc, "put", key) from exc
        stored = self._head(key)
        if stored is None:
            raise _unavailable("put", path, "succeeded but the object is absent", retryable=True)
        return stored

    def _read(self, path: str) -> bytes:
        key = self.key(path)
        try:
            response = self._client.get_object(Bucket=self.bucket, Key=key)
            data: bytes = response["Body"].read()
            return data
        except ClientError as exc:
            if _error_code(exc) in _NOT_FOUND_CODES:
                raise ArtifactNotFoundError(f"no artifact at {path}") from None
            raise self._wrap(exc, "get", key) from exc
        except BotoCoreError as exc:
            raise self._wrap(exc, "get", key) from exc

    def _list(self, retention: Retention | None) -> Iterator[tuple[str, StoredObject, str | None]]:
        prefix = self.prefix + (f"{retention}/" if retention else "")
        paginator = self._client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                for obj in page.get("Contents", ()):
                    path = obj["Key"][len(self.prefix) :]
                    yield path, StoredObject(size=obj["Size"], created_at=obj["LastModified"]), None
        except (ClientError, BotoCoreError) as exc:
            raise self._wrap(exc, "list", prefix) from exc

    def _delete(self, paths: list[str]) -> list[str]:
        failed: list[str] = []
        for start in range(0, len(paths), _DELETE_BATCH):
            batch = paths[start : start + _DELETE_BATCH]
            try:
                response = self._client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": self.key(path)} for path in batch], "Quiet": True},
                )
            except (ClientError, BotoCoreError) as exc:
                logger.warning(
                    "artifact gc could not delete %d objects: %s", len(batch), self._wrap(exc, "delete", "")
                )
                failed.extend(batch)
                continue
            for error in response.get("Errors", ()):
                logger.warning("artifact gc could not delete %s: %s", error.get("Key"), error.get("Code"))
                failed.append(str(error.get("Key", ""))[len(self.prefix) :])
        return failed

    def _find(self, hex_digest: str) -> str | None:
        paginator = self._client.get_paginator("list_objects_v2")
        for klass in RETENTIONS:
            try:
                pages = paginator.paginate(Bucket=self.bucket, Prefix=f"{self.prefix}{klass}/", Delimiter="/")
                kinds = [
                    common["Prefix"][len(self.prefix) + len(klass) + 1 :].rstrip("/")
                    for page in pages
                    for common in page.get("CommonPrefixes", ())
                ]
            except (ClientError, BotoCoreError) as exc:
                raise self._wrap(exc, "list", f"{self.prefix}{klass}/") from exc
            for kind in sorted(kinds):
                path = f"{klass}/{kind}/{hex_digest[:2]}/{hex_digest}"
                if self._head(self.key(path)) is not None:
                    return path
        return None

    # ---- helpers

    def _head(self, key: str) -> StoredObject | None:
        try:
            head = self._client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _error_code(exc) in _NOT_FOUND_CODES:
                return None
            raise self._wrap(exc, "head", key) from exc
        except BotoCoreError as exc:
            raise self._wrap(exc, "head", key) from exc
        return StoredObject(
            size=int(head["ContentLength"]),
            created_at=head["LastModified"],
            sha256=(head.get("Metadata") or {}).get("sha256"),
        )

    def _head_quietly(self, key: str) -> StoredObject | None:
        try:
            return self._head(key)
        except ArtifactError:
            return None

    def _wrap(self, exc: Exception, action: str, key: str) -> ArtifactError:
        """The error callers see: the artifact's path in the store and a short reason, never the
        endpoint, bucket or botocore's text (which names URLs); that detail is logged."""
        where = key[len(self.prefix) :] if key.startswith(self.prefix) else key
        logger.warning(
            "S3 %s of s3://%s/%s failed: %s: %s", action, self.bucket, key, type(exc).__name__, exc
        )
        if isinstance(exc, ClientError):
            code = _error_code(exc)
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            retryable = (
                status >= 500
                or status in (408, 429)
                or code in _THROTTLE_CODES
                or code in _DAMAGED_UPLOAD_CODES
            )
            return _unavailable(action, where, f"{code or 'error'} (HTTP {status})", retryable=retryable)
        if isinstance(exc, NoCredentialsError | PartialCredentialsError):
            return _unavailable(action, where, "no AWS credentials", retryable=False)
        if isinstance(exc, ParamValidationError):
            return _unavailable(action, where, "invalid request parameters", retryable=False)
        # connection refused or reset, connect/read timeouts, a proxy that hung up: transient
        return _unavailable(action, where, _transport_reason(exc), retryable=True)


def _unavailable(action: str, where: str, reason: str, *, retryable: bool) -> ArtifactUnavailableError:
    target = f" of {where}" if where else ""
    return ArtifactUnavailableError(f"S3 {action}{target} failed: {reason}", retryable=retryable)


def _transport_reason(exc: Exception) -> str:
    """What went wrong on the wire, in words that hold no URL."""
    if isinstance(exc, ConnectTimeoutError):
        return "connect timeout"
    if isinstance(exc, ReadTimeoutError):
        return "read timeout"
    if isinstance(exc, EndpointConnectionError):
        return "could not connect"
    if isinstance(exc, ConnectionClosedError | HTTPClientError):
        return "connection closed"
    return type(exc).__name__


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _public_url(url: str | None) -> str:
    """An endpoint URL without user info, query or fragment (nothing secret in ``describe()``)."""
    if not url:
        return "AWS default"
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
