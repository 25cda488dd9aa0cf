"""Resolving a declared case_query ref against an index version stored as an artifact."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.jobs.helpers import TEXTS, stored_index
from turngate.jobs.cases.case_query import (
    CaseQueryError,
    CaseQueryRef,
    IndexCache,
    manifest_record,
    resolve_case_query,
)
from turngate.jobs.cases.embedders import OfflineEmbedder


async def test_resolves_against_the_pinned_version_and_records_the_manifest(store, tmp_path: Path) -> None:
    pointer, version = stored_index(store)
    cache = IndexCache(store, tmp_path / "cache")
    index = cache.get(pointer)
    assert cache.get(pointer) is index  # opened once
    ref = CaseQueryRef(case_id="c", query="lighthouse keeper", top_k=1, index_version=version, min_score=0.05)
    result = await resolve_case_query(ref, index, OfflineEmbedder())
    assert "lighthouse" in index.text(result.selected_chunk_ids[0])
    record = manifest_record(ref, result)
    assert record["index_version"] == version and record["retrieval_query"] == "lighthouse keeper"
    assert record["ranking_method"] == "hybrid-linear" and record["admitted_for"] == "execution_only"
    assert set(record["candidate_chunk_ids"]) == set(record["scores"])
    assert {e["reason"] for e in record["exclusions"]} <= {"over_top_k", "below_threshold"}
    assert len(record["exclusions"]) == len(TEXTS) - 1
    again = await resolve_case_query(
        ref, IndexCache(store, tmp_path / "other").get(pointer), OfflineEmbedder()
    )
    assert again == result  # same version, same query: same answer from a fresh copy
    cache.close()


async def test_mismatched_version_or_embedder_is_refused(store, tmp_path: Path) -> None:
    pointer, _ = stored_index(store)
    index = IndexCache(store, tmp_path).get(pointer)
    with pytest.raises(CaseQueryError) as err:
        await resolve_case_query(
            CaseQueryRef(case_id="c", query="q", index_version="sha256:" + "0" * 64), index, OfflineEmbedder()
        )
    assert err.value.code == "case_query.index_version_mismatch"
    with pytest.raises(CaseQueryError) as err:
        await resolve_case_query(CaseQueryRef(case_id="c", query="q"), index, OfflineEmbedder(64))
    assert err.value.code == "case_query.embedder_mismatch"
    index.close()


def test_a_corrupted_index_artifact_is_refused(store, tmp_path: Path) -> None:
    pointer, _ = stored_index(store)
    store.file_path(pointer.path).write_bytes(b"tampered")
    with pytest.raises(CaseQueryError) as err:
        IndexCache(store, tmp_path).get(pointer)
    assert err.value.code == "case_query.index_corrupt"


def test_ref_validation() -> None:
    with pytest.raises(ValueError):
        CaseQueryRef(case_id="c", query="q", top_k=0)
    with pytest.raises(ValueError):
        CaseQueryRef(case_id="c", query="q", min_score=1.5)
    # unknown fields are ignored like every envelope field's (and never recorded)
    ref = CaseQueryRef.model_validate({"ref_type": "case_query", "case_id": "c", "query": "q", "extra": 1})
    assert "extra" not in ref.model_dump()
