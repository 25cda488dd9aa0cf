"""Verify's artifact check: a pointer's stored bytes re-hashed and compared with the pointer."""

from __future__ import annotations

from turngate.artifacts.store import (
    ArtifactNotFoundError,
    ArtifactStore,
    BaseArtifactStore,
    normalize_digest,
    parse_artifact_path,
    pointer_problems,
)
from turngate.core.canonical import digest_bytes
from turngate.core.manifest import ArtifactPointer


def check_artifact(store: ArtifactStore, pointer: ArtifactPointer) -> tuple[str, str, str]:
    """``(status, detail, retention)`` of ``store.check(pointer)`` ("" for none).

    A store whose ``check`` is :meth:`BaseArtifactStore.check` (every store turngate ships) gets
    the same steps here, without an ``ArtifactCheck`` model per artifact: the same read, then
    the same comparisons (:func:`pointer_problems`, which ``check`` uses too)
    (tests/audit/test_verify_fast_paths.py compares both on intact and tampered artifacts).
    Raises what ``check`` raises."""
    if not isinstance(store, BaseArtifactStore) or type(store).check is not BaseArtifactStore.check:
        check = store.check(pointer)
        return check.status, check.detail or "", check.retention or ""
    expected = normalize_digest(pointer.sha256)
    parsed = parse_artifact_path(pointer.path)
    retention = parsed.retention if parsed else ""
    try:
        data = store.read_path(pointer.path)
    except ArtifactNotFoundError:
        return "missing", "no object at this path", retention
    problems = pointer_problems(pointer, expected, parsed, digest_bytes(data), len(data))
    return ("mismatch" if problems else "ok"), "; ".join(problems), retention
