"""Token estimators: chars/3 by default, tiktoken only from a verified local file, never downloaded."""

from __future__ import annotations

import base64
import hashlib
import logging
import sys
import types
from pathlib import Path

import pytest

from turngate.core.assembly import chars_div_3 as assembly_chars_div_3
from turngate.core.estimators import DEFAULT_ESTIMATOR, EstimatorError, chars_div_3
from turngate.prompts import token_estimators as estimators
from turngate.prompts.token_estimators import (
    EncodingInfo,
    get_estimator,
    loaded_estimator,
    resolve_estimator,
)


def test_chars_div_3_is_the_assembly_estimator() -> None:
    assert chars_div_3 is assembly_chars_div_3
    assert [chars_div_3(t) for t in ("", "a", "abc", "abcd", "Labas, pasauli!")] == [0, 1, 1, 2, 5]
    assert get_estimator() is chars_div_3
    assert resolve_estimator(DEFAULT_ESTIMATOR).name == "chars/3"


@pytest.mark.parametrize("name", ["words", "tiktoken:", "tiktoken:../x", "chars/4"])
def test_unknown_names_are_errors(name: str) -> None:
    with pytest.raises(EstimatorError):
        get_estimator(name)


@pytest.fixture
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(estimators.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    return cache


def test_tiktoken_missing_falls_back_with_a_warning(
    isolated_cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(estimators.importlib.util, "find_spec", lambda name: None)
    with caplog.at_level(logging.WARNING, logger="turngate.estimators"):
        resolved = resolve_estimator("tiktoken:cl100k_base")
    assert (resolved.requested, resolved.name) == ("tiktoken:cl100k_base", "chars/3")
    assert resolved.count is chars_div_3
    assert "not installed" in (resolved.fallback_reason or "")
    assert "tiktoken:cl100k_base" in caplog.text and "using chars/3" in caplog.text


def test_unknown_encoding_falls_back(isolated_cache: Path) -> None:
    resolved = resolve_estimator("tiktoken:p99k_base")
    assert resolved.name == "chars/3" and "unknown encoding" in (resolved.fallback_reason or "")


def fake_tiktoken(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """A stand-in ``tiktoken`` module: records how Encoding was built; counts bytes per token."""
    built: list[dict] = []

    class Encoding:
        def __init__(self, **kwargs: object) -> None:
            built.append(kwargs)

        def encode(self, text: str, disallowed_special: object = "all") -> list[int]:
            assert disallowed_special == ()
            return list(range(len(text.split())))

    module = types.ModuleType("tiktoken")
    module.Encoding = Encoding  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tiktoken", module)
    monkeypatch.setattr(estimators.importlib.util, "find_spec", lambda name: object())
    estimators._load_encoding.cache_clear()
    return built


def test_no_local_encoding_file_falls_back(isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_tiktoken(monkeypatch)
    resolved = resolve_estimator("tiktoken:o200k_base")
    assert resolved.name == "chars/3" and "no local o200k_base.tiktoken" in (resolved.fallback_reason or "")


def test_local_file_with_wrong_hash_falls_back_and_is_kept(
    isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_tiktoken(monkeypatch)
    bogus = isolated_cache / "cl100k_base.tiktoken"
    bogus.write_bytes(b"aGk= 0\n")
    resolved = resolve_estimator("tiktoken:cl100k_base")
    assert resolved.name == "chars/3" and "published sha256" in (resolved.fallback_reason or "")
    assert bogus.exists()  # never deleted (tiktoken itself would delete and re-download)


def test_verified_local_file_is_used(isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built = fake_tiktoken(monkeypatch)
    data = b"\n".join(
        base64.b64encode(tok) + b" " + str(rank).encode() for rank, tok in enumerate([b"a", b"b"])
    )
    info = EncodingInfo(sha256=hashlib.sha256(data).hexdigest(), pat_str=r"\S+", special_tokens={"<|x|>": 2})
    monkeypatch.setitem(estimators.ENCODINGS, "test_base", info)
    # Stored under tiktoken's own cache key (sha1 of the blob url).
    key = hashlib.sha1(b"https://openaipublic.blob.core.windows.net/encodings/test_base.tiktoken").hexdigest()
    (isolated_cache / key).write_bytes(data)
    resolved = resolve_estimator("tiktoken:test_base")
    assert resolved.name == "tiktoken:test_base" and resolved.fallback_reason is None
    assert resolved("one two three") == 3
    assert built == [
        {
            "name": "test_base",
            "pat_str": r"\S+",
            "mergeable_ranks": {b"a": 0, b"b": 1},
            "special_tokens": {"<|x|>": 2},
        }
    ]
    estimators._load_encoding.cache_clear()


def test_workflow_lookup_needs_no_io_and_only_finds_what_the_worker_resolved(
    isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert loaded_estimator(DEFAULT_ESTIMATOR) is chars_div_3
    with pytest.raises(EstimatorError) as missing:
        loaded_estimator("tiktoken:lookup_base")
    assert missing.value.reason_code == "estimator.not_loaded"
    fake_tiktoken(monkeypatch)
    data = base64.b64encode(b"a") + b" 0"
    info = EncodingInfo(sha256=hashlib.sha256(data).hexdigest(), pat_str=r"\S+", special_tokens={})
    monkeypatch.setitem(estimators.ENCODINGS, "lookup_base", info)
    (isolated_cache / "lookup_base.tiktoken").write_bytes(data)
    resolved = resolve_estimator("tiktoken:lookup_base")  # worker start: reads and hashes the file
    (isolated_cache / "lookup_base.tiktoken").unlink()  # later turns never touch it
    count = loaded_estimator("tiktoken:lookup_base")
    assert count is resolved.count and count("one two") == 2
    estimators._load_encoding.cache_clear()
