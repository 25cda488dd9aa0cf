"""The shared suite: every test runs against the local directory store and the S3 store (moto)."""

from __future__ import annotations

import asyncio
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from tests.artifacts.conftest import Backend
from turngate.artifacts import (
    ArtifactNotFoundError,
    ArtifactStore,
    aget,
    aput,
    parse_artifact_path,
)
from turngate.artifacts.deadline import StorageDeadline
from turngate.core.canonical import digest_bytes
from turngate.core.manifest import ArtifactPointer

MANIFEST = b'{"run_id":"r1","step_id":"s1"}'
PATH_RE = re.compile(r"^(standard|snapshot)/[a-z0-9][a-z0-9_.-]*/[0-9a-f]{2}/[0-9a-f]{64}$")
ISO_UTC_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")


def test_the_store_satisfies_the_protocol(backend: Backend) -> None:
    assert isinstance(backend.store, ArtifactStore)


def test_put_get_exists(backend: Backend) -> None:
    store = backend.store
    pointer = store.put(MANIFEST, kind="manifest")
    digest = digest_bytes(MANIFEST)
    assert type(pointer) is ArtifactPointer
    assert pointer.artifact_id == digest
    assert pointer.sha256 == digest
    assert pointer.size_bytes == len(MANIFEST)
    assert pointer.path == f"standard/manifest/{digest[7:9]}/{digest[7:]}"
    assert pointer.created_at is not None and ISO_UTC_RE.match(pointer.created_at)
    assert abs(datetime.fromisoformat(pointer.created_at) - datetime.now(UTC)) < timedelta(minutes=1)

    assert store.get(pointer) == MANIFEST
    assert store.get(digest) == MANIFEST  # by digest alone
    assert store.get(digest[7:]) == MANIFEST  # bare hex works too
    assert store.exists(pointer)
    assert store.exists(digest)


def test_absent_artifacts(backend: Backend) -> None:
    store = backend.store
    unknown = digest_bytes(b"never stored")
    pointer = ArtifactPointer(
        artifact_id=unknown,
        path=f"standard/manifest/{unknown[7:9]}/{unknown[7:]}",
        sha256=unknown,
        size_bytes=1,
    )
    assert not store.exists(unknown)
    assert not store.exists(pointer)
    with pytest.raises(ArtifactNotFoundError):
        store.get(unknown)
    with pytest.raises(ArtifactNotFoundError):
        store.get(pointer)
    with pytest.raises(ValueError, match="digest"):
        store.get("md5:abc")
    assert list(store.iter_artifacts()) == []


def test_put_is_idempotent(backend: Backend) -> None:
    store = backend.store
    first = store.put(MANIFEST, kind="manifest")
    again = store.put(MANIFEST, kind="manifest")
    assert again == first  # created_at included: the stored object's time, not the call's
    assert backend.count() == 1


def test_the_same_bytes_under_another_kind_or_retention(backend: Backend) -> None:
    store = backend.store
    manifest = store.put(MANIFEST, kind="manifest")
    snapshot = store.put(MANIFEST, kind="prompt_snapshot", retention="snapshot")
    assert manifest.artifact_id == snapshot.artifact_id
    assert manifest.path != snapshot.path
    assert snapshot.path.startswith("snapshot/prompt_snapshot/")
    assert store.get(manifest) == store.get(snapshot) == MANIFEST
    assert backend.count() == 2


def test_paths_are_normalized_and_workspace_relative(backend: Backend) -> None:
    for kind in ("manifest", "prompt_snapshot", "tool-output", "v1.raw", "0"):
        for retention in ("standard", "snapshot"):
            data = f"{kind}/{retention}".encode()
            pointer = backend.store.put(data, kind=kind, retention=retention)  # type: ignore[arg-type]
            path = pointer.path
            assert PATH_RE.match(path), path
            assert not path.startswith("/") and "\\" not in path and ".." not in path.split("/")
            parsed = parse_artifact_path(path)
            assert parsed is not None
            assert (parsed.retention, parsed.kind, parsed.digest) == (retention, kind, pointer.sha256)
            ArtifactPointer.model_validate(pointer.model_dump())  # passes the manifest model's validator


def test_unsafe_kinds_are_refused(backend: Backend) -> None:
    for kind in ("", "../etc", "a/b", "a\\b", ".hidden", "Manifest", "x" * 65, "/abs", "."):
        with pytest.raises(ValueError, match="kind"):
            backend.store.put(b"x", kind=kind)
    assert backend.count() == 0


def test_bad_arguments_are_refused(backend: Backend) -> None:
    with pytest.raises(ValueError, match="retention"):
        backend.store.put(b"x", kind="manifest", retention="forever")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bytes"):
        backend.store.put("text", kind="manifest")  # type: ignore[arg-type]


def test_large_artifacts_round_trip(backend: Backend) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB, far over the 64 KB inline limit
    pointer = backend.store.put(data, kind="tool_output", media_type="application/octet-stream")
    assert pointer.size_bytes == len(data)
    assert backend.store.get(pointer) == data
    assert backend.store.check(pointer).ok


def test_check_passes_for_an_intact_artifact(backend: Backend) -> None:
    pointer = backend.store.put(MANIFEST, kind="manifest")
    result = backend.store.check(pointer)
    assert result.ok and result.status == "ok"
    assert result.actual_sha256 == result.expected_sha256 == pointer.sha256
    assert result.actual_size == result.expected_size == len(MANIFEST)
    assert result.retention == "standard"


def test_check_detects_a_changed_byte_and_does_not_repair(backend: Backend) -> None:
    pointer = backend.store.put(MANIFEST, kind="manifest")
    tampered = bytearray(MANIFEST)
    tampered[5] ^= 0x01
    backend.raw_write(pointer.path, bytes(tampered))

    result = backend.store.check(pointer)
    assert result.status == "mismatch" and not result.ok
    assert result.actual_sha256 == digest_bytes(bytes(tampered)) != pointer.sha256
    assert result.actual_size == len(MANIFEST)
    assert "hash" in result.detail
    assert backend.store.get(pointer) == bytes(tampered)  # reported, not rewritten
    assert backend.store.check(pointer).status == "mismatch"


def test_check_detects_a_missing_object(backend: Backend) -> None:
    pointer = backend.store.put(MANIFEST, kind="prompt_snapshot", retention="snapshot")
    backend.raw_delete(pointer.path)
    result = backend.store.check(pointer)
    assert result.status == "missing" and not result.ok
    assert result.actual_sha256 is None and result.actual_size is None
    assert result.retention == "snapshot"
    assert not backend.store.exists(pointer)


def test_check_detects_a_pointer_that_lies(backend: Backend) -> None:
    pointer = backend.store.put(MANIFEST, kind="manifest")
    wrong_size = pointer.model_copy(update={"size_bytes": pointer.size_bytes + 1})
    assert backend.store.check(wrong_size).status == "mismatch"
    other = digest_bytes(b"other")
    wrong_hash = pointer.model_copy(update={"sha256": other, "artifact_id": other})
    result = backend.store.check(wrong_hash)
    assert result.status == "mismatch"
    assert "path" in result.detail


def test_iter_artifacts_by_retention(backend: Backend) -> None:
    store = backend.store
    manifest = store.put(MANIFEST, kind="manifest")
    tool = store.put(b"raw tool output", kind="tool_output")
    snapshot = store.put(b"the exact prompt bytes", kind="prompt_snapshot", retention="snapshot")

    everything = {record.path: record for record in store.iter_artifacts()}
    assert set(everything) == {manifest.path, tool.path, snapshot.path}
    assert {r.path for r in store.iter_artifacts("snapshot")} == {snapshot.path}
    assert {r.path for r in store.iter_artifacts("standard")} == {manifest.path, tool.path}
    record = everything[snapshot.path]
    assert (record.kind, record.retention) == ("prompt_snapshot", "snapshot")
    assert record.pointer.model_dump(exclude={"created_at"}) == snapshot.model_dump(exclude={"created_at"})
    assert record.pointer.created_at is not None


def test_gc_deletes_only_expired_snapshots(backend: Backend) -> None:
    store = backend.store
    old_manifest = store.put(MANIFEST, kind="manifest")
    old_tool = store.put(b"tool output", kind="tool_output")
    old_snapshot = store.put(b"old prompt", kind="prompt_snapshot", retention="snapshot")
    old_tool_snapshot = store.put(b"old tool snapshot", kind="tool_output", retention="snapshot")
    new_snapshot = store.put(b"new prompt", kind="prompt_snapshot", retention="snapshot")
    for pointer in (old_manifest, old_tool, old_snapshot, old_tool_snapshot):
        backend.age(pointer, timedelta(days=10))

    preview = store.gc(timedelta(days=7), dry_run=True)
    assert preview.dry_run and preview.deleted == 2
    assert set(preview.deleted_paths) == {old_snapshot.path, old_tool_snapshot.path}
    assert backend.count() == 5  # a dry run deletes nothing

    report = store.gc(timedelta(days=7))
    assert (report.scanned, report.deleted, report.kept) == (3, 2, 1)
    assert report.deleted_bytes == old_snapshot.size_bytes + old_tool_snapshot.size_bytes
    assert set(report.deleted_paths) == {old_snapshot.path, old_tool_snapshot.path}
    assert report.ok and not report.failed_paths
    assert not store.exists(old_snapshot) and not store.exists(old_tool_snapshot)
    assert store.exists(new_snapshot)
    assert store.get(old_manifest) == MANIFEST  # manifests are never collected, however old
    assert store.exists(old_tool)

    assert store.gc(timedelta(days=7)).deleted == 0  # nothing left to do


def test_gc_with_a_clock_in_the_future(backend: Backend) -> None:
    """An injected clock: 30 days from now every snapshot has expired, no standard artifact has."""
    manifest = backend.store.put(MANIFEST, kind="manifest")
    snapshot = backend.store.put(b"prompt", kind="prompt_snapshot", retention="snapshot")
    later = backend.make(clock=lambda: datetime.now(UTC) + timedelta(days=30))
    assert later.gc(timedelta(days=31)).deleted == 0
    report = later.gc(timedelta(days=7))
    assert report.deleted_paths == (snapshot.path,)
    assert backend.store.exists(manifest)
    assert not backend.store.exists(snapshot)


def test_gc_refuses_a_negative_age(backend: Backend) -> None:
    with pytest.raises(ValueError, match="negative"):
        backend.store.gc(timedelta(seconds=-1))


def test_concurrent_puts_of_the_same_content(backend: Backend) -> None:
    data = b"same bytes from every thread " * 5000
    barrier = threading.Barrier(8)

    def put(_: int) -> ArtifactPointer:
        barrier.wait(timeout=10)
        # As the turn's steps call the store: transient errors (moto answers an occasional 500
        # under eight racing writers) are retried inside the artifact deadline.
        return StorageDeadline(15).call(
            "prompt_snapshot", lambda: backend.store.put(data, kind="prompt_snapshot", retention="snapshot")
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        pointers = list(pool.map(put, range(8)))
    assert len({p.model_dump_json(exclude={"created_at"}) for p in pointers}) == 1
    assert backend.count() == 1  # one object, no temp files left behind
    assert backend.store.get(pointers[0]) == data
    assert backend.store.check(pointers[0]).ok


async def test_async_helpers_run_off_the_event_loop(backend: Backend) -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []
    real_put = backend.store.put

    def spy(data: bytes, **kw: object) -> ArtifactPointer:
        seen.append(threading.get_ident())
        return real_put(data, **kw)  # type: ignore[arg-type]

    backend.store.put = spy  # type: ignore[method-assign]
    pointer = await aput(backend.store, MANIFEST, kind="manifest")
    assert seen and seen[0] != loop_thread
    assert await aget(backend.store, pointer) == MANIFEST
    results = await asyncio.gather(*(aput(backend.store, MANIFEST, kind="manifest") for _ in range(4)))
    assert set(results) == {pointer}
