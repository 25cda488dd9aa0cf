"""The artifact store contract and the logic every backend shares.

Artifacts are content-addressed: the key of an artifact is the sha256 of its bytes, so storing
the same bytes twice (a retried activity, two workers racing) yields the same pointer and one
object. An artifact lives at a workspace-relative POSIX path::

    <retention>/<kind>/<hex[:2]>/<hex>        e.g. standard/manifest/3f/3f9a...e1

``retention`` is ``standard`` (manifests, tool outputs referenced by events: never collected) or
``snapshot`` (fault prompt snapshots: collected by ``turngate gc --older-than``). The path is the
whole address; a backend maps it onto a directory or an S3 key prefix.

Every method is synchronous: the store is called from sync Temporal activities (thread pool)
or through :func:`aput` / :func:`aget`, which run it in a thread. Backend failures surface as
:class:`ArtifactUnavailableError` (the turn workflow stops with ``SYSTEM_ERROR``), absent
artifacts as :class:`ArtifactNotFoundError`.

Past 500 lines on purpose: the contract, its errors and paths, and the logic every backend
shares (put, get, check, gc) are one unit a new backend reads as a whole; the backends
themselves live in their own modules.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from turngate.core.canonical import DIGEST_PREFIX, digest_bytes, is_digest
from turngate.core.limits import EVENT_PAYLOAD_LIMIT_BYTES
from turngate.core.manifest import ArtifactPointer

logger = logging.getLogger(__name__)

Retention = Literal["standard", "snapshot"]
RETENTIONS: tuple[Retention, ...] = ("standard", "snapshot")
DEFAULT_MEDIA_TYPE = "application/json"
# Anything larger than this never goes into the ledger or a Temporal payload (DESIGN.md).
INLINE_LIMIT_BYTES = EVENT_PAYLOAD_LIMIT_BYTES

_KIND_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
_HEX_RE = re.compile(r"^[0-9a-f]{64}$")

Clock = Callable[[], datetime]


# --------------------------------------------------------------------------- errors


class ArtifactError(Exception):
    """Base class of every artifact store error."""

    code = "artifact.error"
    retryable = False


class ArtifactNotFoundError(ArtifactError):
    """No artifact at this pointer / digest."""

    code = "artifact.not_found"


class ArtifactUnavailableError(ArtifactError):
    """The backend could not be read or written (I/O error, S3 unreachable, access denied, ...).

    ``retryable`` says whether trying again may help (connection errors, timeouts, 5xx, throttling)
    or not (access denied, missing bucket). Either way a turn that cannot store an artifact it
    must store stops with ``SYSTEM_ERROR``.
    """

    code = "artifact.unavailable"

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class ArtifactConfigError(ArtifactError):
    """``TURNGATE_ARTIFACTS`` (or a constructor argument) names no usable store."""

    code = "artifact.config_invalid"


# --------------------------------------------------------------------------- models


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ArtifactRecord(_Frozen):
    """A stored artifact as a backend lists it: the pointer plus what its path and metadata say."""

    pointer: ArtifactPointer
    kind: str
    retention: Retention
    media_type: str | None = None

    @property
    def path(self) -> str:
        return self.pointer.path


CheckStatus = Literal["ok", "missing", "mismatch"]


class ArtifactCheck(_Frozen):
    """The result of re-hashing one stored artifact against its pointer (never a repair)."""

    artifact_id: str
    path: str
    status: CheckStatus
    expected_sha256: str
    actual_sha256: str | None = None
    expected_size: int
    actual_size: int | None = None
    retention: Retention | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class GcReport(_Frozen):
    """What a garbage collection removed (or, with ``dry_run``, would remove)."""

    store: str
    cutoff: str
    older_than_s: float
    dry_run: bool
    scanned: int = Field(ge=0, description="snapshot artifacts looked at")
    deleted: int = Field(ge=0, description="expired snapshot artifacts deleted (or to delete)")
    deleted_bytes: int = Field(ge=0)
    kept: int = Field(ge=0, description="snapshot artifacts younger than the cutoff")
    deleted_paths: tuple[str, ...] = ()
    failed_paths: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failed_paths


# --------------------------------------------------------------------------- paths and helpers


@dataclass(frozen=True, slots=True)
class ParsedPath:
    retention: Retention
    kind: str
    hex: str

    @property
    def digest(self) -> str:
        return DIGEST_PREFIX + self.hex


def validate_kind(kind: str) -> str:
    if not isinstance(kind, str) or not _KIND_RE.match(kind):
        raise ValueError(
            f"artifact kind {kind!r} must match {_KIND_RE.pattern} (lowercase, no '/', no leading '.')"
        )
    return kind


def validate_retention(retention: str) -> Retention:
    if retention not in RETENTIONS:
        raise ValueError(f"artifact retention {retention!r} must be one of {', '.join(RETENTIONS)}")
    return retention


def artifact_path(retention: Retention, kind: str, digest: str) -> str:
    """The workspace-relative POSIX path of an artifact: ``<retention>/<kind>/<ab>/<hex>``."""
    hex_digest = digest_hex(digest)
    return f"{validate_retention(retention)}/{validate_kind(kind)}/{hex_digest[:2]}/{hex_digest}"


def parse_artifact_path(path: str) -> ParsedPath | None:
    """The parts of a path this store lays out, or ``None`` for any other path."""
    parts = path.split("/")
    if len(parts) != 4:
        return None
    retention, kind, fan, hex_digest = parts
    if retention not in RETENTIONS or not _KIND_RE.match(kind) or not _HEX_RE.match(hex_digest):
        return None
    if fan != hex_digest[:2]:
        return None
    return ParsedPath(retention=retention, kind=kind, hex=hex_digest)


def is_content_addressed(pointer: ArtifactPointer) -> bool:
    """Whether ``pointer.path`` is a path this store lays out for ``pointer.sha256`` (and its
    ``artifact_id`` is that digest): a pointer naming one object's hash and another object's path
    is never read."""
    parsed = parse_artifact_path(pointer.path)
    try:
        expected = normalize_digest(pointer.sha256)
    except ValueError:
        return False
    return parsed is not None and parsed.digest == expected == pointer.artifact_id


def digest_hex(value: str) -> str:
    """The 64 hex characters of ``sha256:<hex>`` (or of a bare hex digest)."""
    hex_digest = value[len(DIGEST_PREFIX) :] if value.startswith(DIGEST_PREFIX) else value
    if not _HEX_RE.match(hex_digest):
        raise ValueError(f"not a sha256 digest: {value!r}")
    return hex_digest


def normalize_digest(value: str) -> str:
    """``sha256:<hex>`` whether ``value`` carries the prefix or not."""
    return DIGEST_PREFIX + digest_hex(value)


def format_timestamp(moment: datetime) -> str:
    """ISO-8601 UTC with microseconds and ``Z``, the ledger's timestamp format."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_timestamp(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


def utc_now() -> datetime:
    return datetime.now(UTC)


# --------------------------------------------------------------------------- the contract


@runtime_checkable
class ArtifactStore(Protocol):
    """What the worker, ``turngate gc`` and ``turngate verify`` use. All methods block."""

    def put(
        self,
        data: bytes,
        *,
        kind: str,
        retention: Retention = "standard",
        media_type: str = DEFAULT_MEDIA_TYPE,
    ) -> ArtifactPointer: ...

    def get(self, ref: ArtifactPointer | str) -> bytes: ...

    def exists(self, ref: ArtifactPointer | str) -> bool: ...

    def check(self, pointer: ArtifactPointer) -> ArtifactCheck: ...

    def iter_artifacts(self, retention: Retention | None = None) -> Iterator[ArtifactRecord]: ...

    def gc(self, older_than: timedelta, *, dry_run: bool = False) -> GcReport: ...

    def discard(self, kind: str, digests: Iterable[str]) -> int: ...

    def describe(self) -> str: ...


@dataclass(frozen=True, slots=True)
class StoredObject:
    """What a backend knows about one stored object without reading it."""

    size: int
    created_at: datetime
    sha256: str | None = None  # from metadata, when the backend keeps it


def pointer_problems(
    pointer: ArtifactPointer, expected: str, parsed: ParsedPath | None, actual: str, size: int
) -> list[str]:
    """What is wrong between ``pointer`` (whose normalized sha256 is ``expected`` and whose
    parsed path is ``parsed``) and the stored bytes (hashing to ``actual``, ``size`` long)."""
    problems: list[str] = []
    if actual != expected:
        problems.append("stored bytes do not hash to the pointer's sha256")
    if size != pointer.size_bytes:
        problems.append(f"stored size {size} != pointer size {pointer.size_bytes}")
    if parsed is not None and parsed.digest != expected:
        problems.append("the path's digest is not the pointer's sha256")
    if pointer.artifact_id != expected and is_digest(pointer.artifact_id):
        problems.append("the artifact_id is not the pointer's sha256")
    return problems


class BaseArtifactStore(abc.ABC):
    """Shared logic: addressing, idempotent put, check, digest lookup, gc. Backends supply I/O."""

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._clock: Clock = clock or utc_now

    # ---- backend primitives

    @abc.abstractmethod
    def _stat(self, path: str) -> StoredObject | None:
        """Size and creation time of the object at ``path``; ``None`` when absent."""

    @abc.abstractmethod
    def _write(self, path: str, data: bytes, *, digest: str, media_type: str) -> StoredObject:
        """Store ``data`` at ``path`` (atomically, replacing any object there) and stat it."""

    @abc.abstractmethod
    def _read(self, path: str) -> bytes:
        """The bytes at ``path``; :class:`ArtifactNotFoundError` when absent."""

    @abc.abstractmethod
    def _list(self, retention: Retention | None) -> Iterator[tuple[str, StoredObject, str | None]]:
        """``(path, stat, media_type)`` for every object in this store's layout."""

    @abc.abstractmethod
    def _delete(self, paths: list[str]) -> list[str]:
        """Delete objects (absent ones are fine); return the paths that could not be deleted."""

    @abc.abstractmethod
    def _find(self, hex_digest: str) -> str | None:
        """The path of some artifact with this digest, any retention or kind; ``None`` if none."""

    @abc.abstractmethod
    def describe(self) -> str: ...

    # ---- the contract

    def put(
        self,
        data: bytes,
        *,
        kind: str,
        retention: Retention = "standard",
        media_type: str = DEFAULT_MEDIA_TYPE,
    ) -> ArtifactPointer:
        """Store ``data`` (idempotent: the same bytes, kind and retention give the same pointer)."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"artifact data must be bytes, not {type(data).__name__}")
        data = bytes(data)
        digest = digest_bytes(data)
        path = artifact_path(retention, kind, digest)
        stored = self._stat(path)
        if stored is None or stored.size != len(data) or stored.sha256 not in (None, digest):
            stored = self._write(path, data, digest=digest, media_type=media_type)
            logger.debug("artifact stored: %s (%d bytes) in %s", path, len(data), self.describe())
        return ArtifactPointer(
            artifact_id=digest,
            path=path,
            sha256=digest,
            size_bytes=len(data),
            created_at=format_timestamp(stored.created_at),
        )

    def get(self, ref: ArtifactPointer | str) -> bytes:
        """The stored bytes of a pointer, or of any artifact with this ``sha256:<hex>`` digest.

        A pointer whose path is not the one of its sha256 is not found (see
        :func:`is_content_addressed`). Returns what is stored, unverified: :meth:`check` is the
        integrity check.
        """
        return self._read(self._resolve(ref))

    def read_path(self, path: str) -> bytes:
        """The bytes stored at ``path`` as it is written, unverified (no lookup by digest);
        :class:`ArtifactNotFoundError` when absent. For callers that compare them with a pointer
        themselves (``turngate verify``'s artifact check)."""
        return self._read(path)

    def exists(self, ref: ArtifactPointer | str) -> bool:
        try:
            path = self._resolve(ref)
        except ArtifactNotFoundError:
            return False
        return self._stat(path) is not None

    def check(self, pointer: ArtifactPointer) -> ArtifactCheck:
        """Re-hash the stored bytes and compare them with the pointer's sha256 and size.

        Reports ``missing`` or ``mismatch``; never rewrites anything. Backend failures raise
        :class:`ArtifactUnavailableError` (an unreadable store is not evidence of tampering).
        """
        expected = normalize_digest(pointer.sha256)
        parsed = parse_artifact_path(pointer.path)
        base: dict[str, Any] = {
            "artifact_id": pointer.artifact_id,
            "path": pointer.path,
            "expected_sha256": expected,
            "expected_size": pointer.size_bytes,
            "retention": parsed.retention if parsed else None,
        }
        try:
            data = self._read(pointer.path)
        except ArtifactNotFoundError:
            return ArtifactCheck(status="missing", detail="no object at this path", **base)
        actual = digest_bytes(data)
        problems = pointer_problems(pointer, expected, parsed, actual, len(data))
        return ArtifactCheck(
            status="mismatch" if problems else "ok",
            actual_sha256=actual,
            actual_size=len(data),
            detail="; ".join(problems),
            **base,
        )

    def iter_artifacts(self, retention: Retention | None = None) -> Iterator[ArtifactRecord]:
        """Every artifact in the store (or of one retention class), in no particular order."""
        if retention is not None:
            validate_retention(retention)
        for path, stored, media_type in self._list(retention):
            parsed = parse_artifact_path(path)
            if parsed is None:  # not ours (a temp file, a foreign object): never listed, never deleted
                continue
            yield ArtifactRecord(
                pointer=ArtifactPointer(
                    artifact_id=parsed.digest,
                    path=path,
                    sha256=parsed.digest,
                    size_bytes=stored.size,
                    created_at=format_timestamp(stored.created_at),
                ),
                kind=parsed.kind,
                retention=parsed.retention,
                media_type=media_type,
            )

    def gc(self, older_than: timedelta, *, dry_run: bool = False) -> GcReport:
        """Delete ``snapshot`` artifacts created before ``now - older_than``; never ``standard`` ones."""
        if older_than < timedelta(0):
            raise ValueError("older_than must not be negative")
        cutoff = self._clock() - older_than
        scanned = kept = deleted_bytes = 0
        expired: list[ArtifactRecord] = []
        for record in self.iter_artifacts("snapshot"):
            if record.retention != "snapshot":  # belt and braces: gc never touches anything else
                continue
            scanned += 1
            created = parse_timestamp(record.pointer.created_at or "")
            if created < cutoff:
                expired.append(record)
            else:
                kept += 1
        paths = sorted(record.path for record in expired)
        failed: list[str] = []
        if paths and not dry_run:
            failed = sorted(self._delete(paths))
        gone = set(paths) - set(failed)
        deleted_bytes = sum(record.pointer.size_bytes for record in expired if record.path in gone)
        report = GcReport(
            store=self.describe(),
            cutoff=format_timestamp(cutoff),
            older_than_s=older_than.total_seconds(),
            dry_run=dry_run,
            scanned=scanned,
            deleted=len(gone),
            deleted_bytes=deleted_bytes,
            kept=kept,
            deleted_paths=tuple(sorted(gone)),
            failed_paths=tuple(failed),
        )
        logger.info(
            "artifact gc%s: %d of %d snapshot artifacts older than %s (%d bytes), %d failed",
            " (dry run)" if dry_run else "",
            report.deleted,
            scanned,
            report.cutoff,
            deleted_bytes,
            len(failed),
        )
        return report

    def discard(self, kind: str, digests: Iterable[str]) -> int:
        """Delete ``snapshot`` artifacts of ``kind`` by digest (a finished job's checkpoints);
        ``standard`` ones are never touched. Absent ones are skipped; answers how many went."""
        paths = sorted({artifact_path("snapshot", kind, digest) for digest in digests})
        present = [path for path in paths if self._stat(path) is not None]
        failed = set(self._delete(present)) if present else set()
        return len(present) - len(failed)

    # ---- helpers

    def _resolve(self, ref: ArtifactPointer | str) -> str:
        if isinstance(ref, ArtifactPointer):
            if not is_content_addressed(ref):
                raise ArtifactNotFoundError("no artifact at this pointer (its path is not its sha256's)")
            return ref.path
        if isinstance(ref, str):
            try:
                hex_digest = digest_hex(ref)
            except ValueError:
                raise ValueError(
                    f"expected an ArtifactPointer or a 'sha256:<hex>' digest, got {ref!r}"
                ) from None
            path = self._find(hex_digest)
            if path is None:
                raise ArtifactNotFoundError(f"no artifact with digest {normalize_digest(ref)}")
            return path
        raise TypeError(f"expected an ArtifactPointer or a digest, not {type(ref).__name__}")


async def aput(store: ArtifactStore, data: bytes, **kw: Any) -> ArtifactPointer:
    """:meth:`ArtifactStore.put` for async callers: runs in a worker thread, never on the loop."""
    return await asyncio.to_thread(store.put, data, **kw)


async def aget(store: ArtifactStore, ref: ArtifactPointer | str) -> bytes:
    """:meth:`ArtifactStore.get` for async callers: runs in a worker thread, never on the loop."""
    return await asyncio.to_thread(store.get, ref)


# --------------------------------------------------------------------------- configuration

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")
_USERINFO_RE = re.compile(r"://[^/@]*@")


def open_artifact_store(location: str, *, clock: Clock | None = None) -> ArtifactStore:
    """The store ``TURNGATE_ARTIFACTS`` names: ``s3://bucket[/prefix]``, ``file:///dir`` or a directory.

    Anything else (``ftp://...``, ``s3://`` without a bucket, an empty value) is an
    :class:`ArtifactConfigError`. Nothing is contacted or created here: a local directory is
    created on the first write, an S3 bucket must exist.
    """
    from urllib.parse import unquote, urlsplit

    if not isinstance(location, str) or not location.strip():
        raise ArtifactConfigError("TURNGATE_ARTIFACTS is empty: give a directory or s3://bucket/prefix")
    location = location.strip()
    shown = _USERINFO_RE.sub("://***@", location)  # error messages never repeat a password
    match = _SCHEME_RE.match(location)
    scheme = match.group(1).lower() if match else None  # one letter is a Windows drive, not a scheme
    if scheme == "s3":
        from turngate.artifacts.s3 import S3ArtifactStore

        parts = urlsplit(location)
        if not location.lower().startswith("s3://") or not parts.netloc:
            raise ArtifactConfigError(f"TURNGATE_ARTIFACTS={shown!r}: expected s3://bucket/prefix")
        if parts.query or parts.fragment or "@" in parts.netloc or ":" in parts.netloc:
            raise ArtifactConfigError(
                f"TURNGATE_ARTIFACTS={shown!r}: s3://bucket/prefix takes no credentials, port or query "
                "(endpoint and credentials come from the AWS_* environment variables)"
            )
        return S3ArtifactStore(parts.netloc, parts.path, clock=clock)
    from turngate.artifacts.local import LocalArtifactStore

    if scheme == "file":
        parts = urlsplit(location)
        if parts.netloc not in ("", "localhost") or not parts.path:
            raise ArtifactConfigError(f"TURNGATE_ARTIFACTS={shown!r}: expected file:///absolute/dir")
        return LocalArtifactStore(unquote(parts.path), clock=clock)
    if scheme is not None:
        raise ArtifactConfigError(
            f"TURNGATE_ARTIFACTS={shown!r}: unsupported scheme {scheme!r}; "
            "use a local directory or s3://bucket/prefix"
        )
    return LocalArtifactStore(location, clock=clock)
