"""Index versions and retrieval: stable digests, deterministic rankings, recorded exclusions."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turngate.jobs.cases.embedders import OfflineEmbedder
from turngate.jobs.cases.index import IndexParams, make_manifest, write_index
from turngate.jobs.cases.retrieval import RANKING_METHOD, CaseIndex
from turngate.jobs.domain.chunking import Chunk

EMB = OfflineEmbedder(64)
TEXTS = [
    "The lighthouse keeper logs every ship.",
    "Sourdough bread needs a starter and salt.",
    "Basalt lava flows are fluid and hot.",
    "Quarks and gluons obey chromodynamics.",
    "The keeper of the lighthouse sleeps by day.",
    "duplicate text",
    "duplicate text",  # same text, different chunk (ordinal): a tie in every score
]


def _chunks(texts: list[str]) -> list[Chunk]:
    return [
        Chunk(document="sha256:" + "0" * 64, ordinal=i, start=0, end=len(t), text=t)
        for i, t in enumerate(texts)
    ]


def _build(tmp: Path, chunks: list[Chunk], params: IndexParams | None = None) -> CaseIndex:
    ids = [c.chunk_id for c in chunks]
    matrix = EMB.embed_sync([c.text for c in chunks])
    manifest, order = make_manifest(ids, matrix, EMB.embedder_id, params or IndexParams(candidate_k=5))
    path = tmp / f"{manifest.index_version[7:19]}-{random.random()}.sqlite3"
    write_index(path, manifest, [chunks[i].text for i in order], matrix[order])
    return CaseIndex(path)


def _query(index: CaseIndex, text: str, **kw):
    return index.retrieve(text, EMB.embed_sync([text])[0], **kw)


def test_index_version_is_independent_of_input_order(tmp_path: Path) -> None:
    chunks = _chunks(TEXTS)
    shuffled = chunks[:]
    random.Random(7).shuffle(shuffled)
    a, b = _build(tmp_path, chunks), _build(tmp_path, shuffled)
    assert a.index_version == b.index_version
    assert _query(a, "lighthouse keeper", top_k=3) == _query(b, "lighthouse keeper", top_k=3)


def test_index_version_changes_with_chunks_embedder_or_parameters(tmp_path: Path) -> None:
    base = _build(tmp_path, _chunks(TEXTS)).index_version
    assert _build(tmp_path, _chunks(TEXTS[:-1])).index_version != base
    assert _build(tmp_path, _chunks(TEXTS), IndexParams(candidate_k=6)).index_version != base
    ids = [c.chunk_id for c in _chunks(TEXTS)]
    other, _ = make_manifest(
        ids, OfflineEmbedder(32).embed_sync(TEXTS), "offline:other", IndexParams(candidate_k=5)
    )
    assert other.index_version != base


def test_a_tampered_index_file_is_refused(tmp_path: Path) -> None:
    import sqlite3

    index = _build(tmp_path, _chunks(TEXTS))
    index.close()
    with sqlite3.connect(index.path) as conn:
        conn.execute("UPDATE meta SET value = 'sha256:' || hex(zeroblob(32)) WHERE key = 'index_version'")
    try:
        CaseIndex(index.path)
    except ValueError as exc:
        assert "index_version" in str(exc)
    else:
        raise AssertionError("tampered index accepted")


def test_retrieval_ranks_selects_and_records_exclusions(tmp_path: Path) -> None:
    index = _build(tmp_path, _chunks(TEXTS))
    result = _query(index, "lighthouse keeper", top_k=1, min_score=0.2)
    assert result.ranking_method == RANKING_METHOD and result.ranking_version == "1"
    assert result.index_version == index.index_version
    assert len(result.selected_chunk_ids) == 1
    assert "lighthouse" in index.text(result.selected_chunk_ids[0])
    reasons = {e.chunk_id: e.reason for e in result.exclusions}
    second = result.candidates[1]
    assert second.score >= 0.2 and reasons[second.chunk_id] == "over_top_k"
    assert all(reasons[c.chunk_id] == "below_threshold" for c in result.candidates if c.score < 0.2)
    assert set(reasons) | set(result.selected_chunk_ids) == set(result.candidate_chunk_ids)
    scores = [(-c.score, c.chunk_id) for c in result.candidates]
    assert scores == sorted(scores)  # score descending, ties by chunk id


def test_ties_are_broken_by_chunk_id(tmp_path: Path) -> None:
    index = _build(tmp_path, _chunks(TEXTS))
    result = _query(index, "duplicate text", top_k=1)
    top_two = result.candidates[:2]
    assert top_two[0].score == top_two[1].score
    assert top_two[0].chunk_id < top_two[1].chunk_id
    assert result.selected_chunk_ids == [top_two[0].chunk_id]


@pytest.fixture(scope="module")
def shared_index(tmp_path_factory: pytest.TempPathFactory) -> CaseIndex:
    return _build(tmp_path_factory.mktemp("index"), _chunks(TEXTS))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=40), st.integers(min_value=0, max_value=8), st.floats(min_value=0, max_value=1))
def test_retrieval_is_a_pure_function_of_the_query(
    shared_index: CaseIndex, query: str, top_k: int, min_score: float
) -> None:
    again = CaseIndex(shared_index.path)  # a second reader of the same file
    first = _query(shared_index, query, top_k=top_k, min_score=min_score)
    assert first == _query(again, query, top_k=top_k, min_score=min_score)
    assert len(first.selected_chunk_ids) <= top_k
    again.close()


def test_empty_query_still_ranks_by_vector(tmp_path: Path) -> None:
    index = _build(tmp_path, _chunks(TEXTS))
    result = index.retrieve("", np.zeros(64, dtype=np.float32), top_k=2)
    assert all(c.lexical_score is None for c in result.candidates)
    assert len(result.selected_chunk_ids) == 2
