"""Local-directory-only behaviour: atomic writes, directories on demand, several processes."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from turngate.artifacts import ArtifactUnavailableError, LocalArtifactStore
from turngate.core.manifest import ArtifactPointer

DATA = b"local artifact bytes" * 100


def _files(root: Path) -> list[Path]:
    return sorted(item for item in root.rglob("*") if item.is_file())


def test_the_directory_is_created_on_first_write(tmp_path: Path) -> None:
    root = tmp_path / "not" / "yet" / "there"
    store = LocalArtifactStore(root)
    assert not root.exists()
    assert list(store.iter_artifacts()) == []  # reading an absent store is not an error
    pointer = store.put(DATA, kind="manifest")
    assert _files(root) == [root / pointer.path]
    assert store.describe() == f"local:{root.as_posix()}"


def test_relative_roots_are_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = LocalArtifactStore("artifacts")
    assert store.root == tmp_path / "artifacts"


def test_writes_leave_no_temp_files_and_are_private(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    pointer = store.put(DATA, kind="prompt_snapshot", retention="snapshot")
    store.put(DATA, kind="prompt_snapshot", retention="snapshot")
    assert _files(tmp_path) == [tmp_path / pointer.path]
    assert (tmp_path / pointer.path).stat().st_mode & 0o077 == 0  # snapshots may be sensitive


def test_a_repeated_put_keeps_the_first_write_and_its_time(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    pointer = store.put(DATA, kind="manifest")
    target = tmp_path / pointer.path
    old = (datetime.now() - timedelta(days=3)).timestamp()
    os.utime(target, (old, old))
    again = store.put(DATA, kind="manifest")
    assert again.created_at == store.put(DATA, kind="manifest").created_at
    assert datetime.fromisoformat(again.created_at or "").timestamp() == pytest.approx(old, abs=1e-3)


def test_a_truncated_file_is_replaced_by_the_next_put(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    pointer = store.put(DATA, kind="manifest")
    (tmp_path / pointer.path).write_bytes(DATA[:10])
    assert store.check(pointer).status == "mismatch"
    store.put(DATA, kind="manifest")
    assert store.check(pointer).ok


def test_foreign_and_temp_files_are_neither_listed_nor_collected(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    pointer = store.put(DATA, kind="prompt_snapshot", retention="snapshot")
    fan = (tmp_path / pointer.path).parent
    temp = fan / f".{pointer.sha256[7:19]}.abc.tmp"
    temp.write_bytes(b"half written")
    stray = [tmp_path / "README", tmp_path / "snapshot" / "notes.txt", fan / "not-a-digest"]
    for item in stray:
        item.write_bytes(b"x")
    old = (datetime.now() - timedelta(days=30)).timestamp()
    for item in [*stray, temp, tmp_path / pointer.path]:
        os.utime(item, (old, old))

    assert [record.path for record in store.iter_artifacts()] == [pointer.path]
    report = store.gc(timedelta(days=7))
    assert report.deleted_paths == (pointer.path,)
    assert all(item.exists() for item in [*stray, temp])


def test_gc_removes_emptied_fan_out_directories(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    pointer = store.put(DATA, kind="prompt_snapshot", retention="snapshot")
    old = (datetime.now() - timedelta(days=30)).timestamp()
    os.utime(tmp_path / pointer.path, (old, old))
    store.gc(timedelta(days=7))
    assert not (tmp_path / pointer.path).parent.exists()
    assert store.put(DATA, kind="prompt_snapshot", retention="snapshot") is not None  # recreated on demand


def test_an_unwritable_root_is_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    store = LocalArtifactStore(blocker / "artifacts")
    with pytest.raises(ArtifactUnavailableError, match="write failed") as caught:
        store.put(DATA, kind="manifest")
    assert caught.value.code == "artifact.unavailable"
    assert str(tmp_path) not in str(caught.value)  # where the store lives is logged, not told


def test_pointer_paths_cannot_escape_the_root(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    for path in ("../outside", "/etc/passwd", "a//b", "a\\b"):
        with pytest.raises(ValueError):
            store.file_path(path)


def _put_in_another_process(root: str) -> ArtifactPointer:
    return LocalArtifactStore(root).put(DATA * 50, kind="prompt_snapshot", retention="snapshot")


def test_several_processes_put_the_same_artifact_at_once(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=4, mp_context=context) as pool:
        pointers = list(pool.map(_put_in_another_process, [str(tmp_path)] * 8))
    assert len(set(pointers)) == 1  # created_at too: the first published file wins, nobody overwrites
    assert len(_files(tmp_path)) == 1
    assert LocalArtifactStore(tmp_path).check(pointers[0]).ok


def test_threads_racing_on_one_artifact_agree_on_created_at(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    store = LocalArtifactStore(tmp_path)
    with ThreadPoolExecutor(max_workers=8) as pool:
        pointers = list(pool.map(lambda _: store.put(DATA, kind="manifest"), range(16)))
    assert len(set(pointers)) == 1
