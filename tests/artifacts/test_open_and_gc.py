"""open_artifact_store (TURNGATE_ARTIFACTS), parse_duration and run_gc (``turngate gc``)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from turngate.artifacts import (
    ArtifactConfigError,
    DurationError,
    LocalArtifactStore,
    format_report,
    open_artifact_store,
    parse_duration,
    run_gc,
)
from turngate.settings import Settings


def test_a_directory_opens_the_local_store(tmp_path: Path) -> None:
    store = open_artifact_store(str(tmp_path / "artifacts"))
    assert isinstance(store, LocalArtifactStore)
    assert store.root == tmp_path / "artifacts"
    assert not store.root.exists()  # nothing created until the first write


def test_a_file_url_opens_the_local_store(tmp_path: Path) -> None:
    store = open_artifact_store((tmp_path / "a b").as_uri())
    assert isinstance(store, LocalArtifactStore)
    assert store.root == tmp_path / "a b"


def test_the_settings_default_is_the_data_dir(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    store = open_artifact_store(settings.effective_artifacts)
    assert isinstance(store, LocalArtifactStore)
    assert store.root == tmp_path / "artifacts"


@pytest.mark.parametrize(
    ("location", "prefix"),
    [
        ("s3://tg-bucket", ""),
        ("s3://tg-bucket/", ""),
        ("s3://tg-bucket/a/b", "a/b/"),
        ("S3://tg-bucket/a/", "a/"),
    ],
)
def test_an_s3_url_opens_the_s3_store(fake_aws_env: None, location: str, prefix: str) -> None:
    from turngate.artifacts import S3ArtifactStore

    store = open_artifact_store(location)
    assert isinstance(store, S3ArtifactStore)
    assert (store.bucket, store.prefix) == ("tg-bucket", prefix)


@pytest.mark.parametrize(
    ("location", "message"),
    [
        ("ftp://host/dir", "unsupported scheme 'ftp'"),
        ("ftp://me:secret@host/dir", "'ftp://\\*\\*\\*@host/dir'"),
        ("https://example.com/bucket", "unsupported scheme 'https'"),
        ("", "empty"),
        ("   ", "empty"),
        ("s3://", "expected s3://bucket/prefix"),
        ("s3:///prefix", "expected s3://bucket/prefix"),
        ("s3:bucket", "expected s3://bucket/prefix"),
        ("s3://Not_A_Bucket/x", "invalid S3 bucket name"),
        ("s3://tg-bucket/a/../b", "invalid S3 key prefix"),
        ("s3://key:secret@tg-bucket/x", "no credentials"),
        ("s3://tg-bucket:9000/x", "no credentials, port"),
        ("file://remote-host/dir", "file:///absolute/dir"),
    ],
)
def test_bad_locations_are_config_errors(fake_aws_env: None, location: str, message: str) -> None:
    with pytest.raises(ArtifactConfigError, match=message) as caught:
        open_artifact_store(location)
    assert caught.value.code == "artifact.config_invalid"
    assert "secret" not in str(caught.value)  # credentials in the URL are masked in the message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7d", timedelta(days=7)),
        ("12h", timedelta(hours=12)),
        ("30m", timedelta(minutes=30)),
        ("90s", timedelta(seconds=90)),
        ("2w", timedelta(weeks=2)),
        ("1d12h", timedelta(days=1, hours=12)),
        (" 7D ", timedelta(days=7)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "7", "d", "-1d", "7 days", "1.5h", "7y", "0s", "0d0h"])
def test_parse_duration_refuses_nonsense(text: str) -> None:
    with pytest.raises(DurationError, match="invalid duration"):
        parse_duration(text)
    with pytest.raises(ValueError):  # DurationError is a ValueError
        parse_duration(text)


def test_run_gc_takes_a_duration_string(tmp_path: Path) -> None:
    import os
    import time

    store = LocalArtifactStore(tmp_path)
    manifest = store.put(b"{}", kind="manifest")
    snapshot = store.put(b"prompt", kind="prompt_snapshot", retention="snapshot")
    old = time.time() - 8 * 86400
    for pointer in (manifest, snapshot):
        os.utime(store.file_path(pointer.path), (old, old))

    preview = run_gc(store, "7d", dry_run=True)
    assert preview.deleted_paths == (snapshot.path,)
    assert "would delete 1 snapshot artifact(s)" in format_report(preview)
    assert store.exists(snapshot)

    report = run_gc(store, timedelta(days=7))
    assert report.deleted == 1 and report.kept == 0
    assert report.older_than_s == 7 * 86400
    assert "deleted 1 snapshot artifact(s), 6 bytes" in format_report(report)
    assert store.exists(manifest) and not store.exists(snapshot)
    with pytest.raises(DurationError):
        run_gc(store, timedelta(0))
