"""Deterministic retrieval over one pinned index version.

Ranking method ``hybrid-linear/1``: up to ``candidate_k`` chunks from BM25 (FTS5) and up to
``candidate_k`` from exact cosine similarity form the candidates; each gets
``score = lexical_weight * bm25 / max_bm25 + vector_weight * max(cosine, 0)``, rounded to 6
decimals (so last-bit float differences between machines cannot reorder results), and candidates
are ranked by (score descending, chunk id ascending). Those under ``min_score`` are excluded as
``below_threshold``, those past ``top_k`` as ``over_top_k``; the rest are selected.
"""

from __future__ import annotations

import re
import sqlite3
from functools import cached_property
from pathlib import Path
from typing import cast

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from turngate.jobs.cases.index import IndexManifest

RANKING_METHOD = "hybrid-linear"
RANKING_VERSION = "1"
_TOKEN_RE = re.compile(r"\w+", re.UNICODE)


class Candidate(BaseModel):
    model_config = ConfigDict(frozen=True)

    chunk_id: str
    score: float
    lexical_score: float | None  # raw BM25 (higher is better); None: not a lexical candidate
    vector_score: float  # cosine similarity
    rank: int


class Exclusion(BaseModel):
    model_config = ConfigDict(frozen=True)

    chunk_id: str
    reason: str  # below_threshold | over_top_k
    score: float


class RetrievalResult(BaseModel):
    """What a ``case_query`` resolves to: everything a context manifest records."""

    model_config = ConfigDict(frozen=True)

    index_version: str
    query: str
    top_k: int
    min_score: float
    ranking_method: str = RANKING_METHOD
    ranking_version: str = RANKING_VERSION
    candidates: list[Candidate]
    selected_chunk_ids: list[str]
    exclusions: list[Exclusion] = Field(default_factory=list)

    @property
    def candidate_chunk_ids(self) -> list[str]:
        return [c.chunk_id for c in self.candidates]


class CaseIndex:
    """An opened index file (read-only). Safe to share between threads for reads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        uri = f"file:{path.as_posix()}?mode=ro&immutable=1"
        self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        raw = self._meta("manifest")
        self.manifest = IndexManifest.model_validate_json(raw)
        self.index_version = self.manifest.index_version
        stored = self._meta("index_version")
        stored_text = stored.decode() if isinstance(stored, bytes) else stored
        if stored_text != self.index_version:
            raise ValueError(f"{path}: stored index_version {stored_text} != recomputed {self.index_version}")
        count = len(self.manifest.chunk_ids)
        rows = np.frombuffer(self._meta("matrix"), dtype="<f4").reshape(count, self.manifest.dim)
        # Kept dimension-major: a sparse query (the offline embedder's) then reads only the
        # dimensions it uses, ~1/6 of the matrix; memory bandwidth is what a brute-force scan costs.
        self.by_dim = np.ascontiguousarray(rows.T, dtype=np.float32)
        self.chunk_ids = self.manifest.chunk_ids

    def _meta(self, key: str) -> bytes:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        if row is None:
            raise ValueError(f"{self.path}: not a case index (no {key})")
        return cast(bytes, row[0])  # sqlite3 rows are untyped; the meta values are BLOBs

    @cached_property
    def _row_of(self) -> dict[str, int]:
        return {cid: i for i, cid in enumerate(self.chunk_ids)}

    def text(self, chunk_id: str) -> str:
        row = self._conn.execute("SELECT text FROM chunks WHERE chunk_id = ?", (chunk_id,)).fetchone()
        if row is None:
            raise KeyError(chunk_id)
        return str(row[0])

    def close(self) -> None:
        self._conn.close()

    def lexical(self, query: str, k: int) -> list[tuple[int, float]]:
        """(row, bm25 score) for the best ``k`` rows, ties by row (= chunk id order)."""
        tokens = sorted(set(_TOKEN_RE.findall(query.lower())))
        if not tokens:
            return []
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in tokens)
        rows = self._conn.execute(
            "SELECT rowid, -bm25(fts) AS s FROM fts WHERE fts MATCH ? ORDER BY s DESC, rowid LIMIT ?",
            (match, k),
        ).fetchall()
        return [(int(rowid) - 1, float(score)) for rowid, score in rows]

    def similarities(self, query_vector: np.ndarray) -> np.ndarray:
        """Cosine similarity of every chunk (vectors are L2-normalised): exact, in float32.

        Sparse queries sum their non-zero dimensions in ascending order; dense ones go through
        one BLAS product. Which path runs depends on the query alone, so a query always gets the
        same bits on the same index."""
        q = np.asarray(query_vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != self.manifest.dim:
            raise ValueError(f"query vector has {q.shape[0]} dimensions, index {self.manifest.dim}")
        nonzero = np.flatnonzero(q)
        if len(nonzero) > self.manifest.dim // 4:
            return q @ self.by_dim
        out = np.zeros(self.by_dim.shape[1], dtype=np.float32)
        scratch = np.empty_like(out)
        for j in nonzero:
            np.multiply(self.by_dim[j], q[j], out=scratch)
            out += scratch
        return out

    def retrieve(
        self, query: str, query_vector: np.ndarray, *, top_k: int, min_score: float = 0.0
    ) -> RetrievalResult:
        params = self.manifest.params
        k = params.candidate_k
        lexical = dict(self.lexical(query, k))
        sims = self.similarities(query_vector)
        rows = set(lexical)
        n = len(sims)
        if n:
            # The k best by cosine; argpartition may cut inside a tie, so every row at least as
            # good as the k-th best (to the 6 decimals scores are compared at) is a candidate.
            top = np.argpartition(sims, n - k)[n - k :] if n > k else np.arange(n)
            floor = float(sims[top].min()) - 5e-7
            rows.update(np.flatnonzero(sims >= floor).tolist())
        max_lex = max(lexical.values(), default=0.0)
        scored: list[tuple[float, str, int]] = []
        for row in rows:
            lex = lexical.get(row)
            lex_norm = (lex / max_lex) if lex is not None and max_lex > 0 else 0.0
            vec = max(float(sims[row]), 0.0)
            score = round(params.lexical_weight * lex_norm + params.vector_weight * vec, 6)
            scored.append((score, self.chunk_ids[row], row))
        scored.sort(key=lambda item: (-item[0], item[1]))
        candidates: list[Candidate] = []
        selected: list[str] = []
        exclusions: list[Exclusion] = []
        for rank, (score, chunk_id, row) in enumerate(scored):
            lex = lexical.get(row)
            candidates.append(
                Candidate(
                    chunk_id=chunk_id,
                    score=score,
                    lexical_score=round(lex, 6) if lex is not None else None,
                    vector_score=round(float(sims[row]), 6),
                    rank=rank,
                )
            )
            if score < min_score:
                exclusions.append(Exclusion(chunk_id=chunk_id, reason="below_threshold", score=score))
            elif len(selected) >= top_k:
                exclusions.append(Exclusion(chunk_id=chunk_id, reason="over_top_k", score=score))
            else:
                selected.append(chunk_id)
        return RetrievalResult(
            index_version=self.index_version,
            query=query,
            top_k=top_k,
            min_score=min_score,
            candidates=candidates,
            selected_chunk_ids=selected,
            exclusions=exclusions,
        )
