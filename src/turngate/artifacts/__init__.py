"""Content-addressed artifact storage: a local directory (default) or S3.

Large content (over 64 KB) never goes into the ledger or a Temporal payload: it is stored here
and referenced by an :class:`~turngate.core.manifest.ArtifactPointer`
``{artifact_id, path, sha256, size_bytes, created_at}``. See docs/ARTIFACTS.md.

Importing this package does not import boto3; :class:`S3ArtifactStore` loads it on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from turngate.artifacts.gc import DurationError, format_report, parse_duration, run_gc
from turngate.artifacts.local import LocalArtifactStore
from turngate.artifacts.store import (
    DEFAULT_MEDIA_TYPE,
    INLINE_LIMIT_BYTES,
    RETENTIONS,
    ArtifactCheck,
    ArtifactConfigError,
    ArtifactError,
    ArtifactNotFoundError,
    ArtifactRecord,
    ArtifactStore,
    ArtifactUnavailableError,
    BaseArtifactStore,
    GcReport,
    Retention,
    aget,
    aput,
    artifact_path,
    is_content_addressed,
    open_artifact_store,
    parse_artifact_path,
)

if TYPE_CHECKING:
    from turngate.artifacts.s3 import S3ArtifactStore

__all__ = [
    "DEFAULT_MEDIA_TYPE",
    "INLINE_LIMIT_BYTES",
    "RETENTIONS",
    "ArtifactCheck",
    "ArtifactConfigError",
    "ArtifactError",
    "ArtifactNotFoundError",
    "ArtifactRecord",
    "ArtifactStore",
    "ArtifactUnavailableError",
    "BaseArtifactStore",
    "DurationError",
    "GcReport",
    "LocalArtifactStore",
    "Retention",
    "S3ArtifactStore",
    "aget",
    "aput",
    "artifact_path",
    "format_report",
    "is_content_addressed",
    "open_artifact_store",
    "parse_artifact_path",
    "parse_duration",
    "run_gc",
]


def __getattr__(name: str) -> Any:
    if name == "S3ArtifactStore":
        from turngate.artifacts.s3 import S3ArtifactStore

        return S3ArtifactStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
