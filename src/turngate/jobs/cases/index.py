"""A case index version: one SQLite file holding the chunk texts, an FTS5 (BM25) table and the
embedding matrix, named by an immutable ``index_version`` digest.

Why these libraries (measured in docs/JOBS.md): SQLite FTS5 is in the standard library's
``sqlite3``, maintained with SQLite, persistent, and ranks with BM25 (``bm25()``, k1=1.2, b=0.75)
in C; the vectors are one float32 matrix searched by exact brute force with numpy (one matrix-
vector product: exact, so no approximate-neighbour randomness, and ~5 ms at 100,000 x 256).
One file per version makes a version immutable and easy to ship as an artifact.

Rows are written in chunk-id order whatever order the chunks came in, so the same inputs give
the same ``index_version`` and the same rankings.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from turngate.core.canonical import canonical_bytes, digest, digest_bytes
from turngate.jobs.domain.index_params import IndexParams

INDEX_FORMAT = "turngate-case-index/1"
INDEX_KIND = "case-index"


class IndexManifest(BaseModel):
    """What an index version is made of; ``index_version`` is the digest of the rest."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: str = INDEX_FORMAT
    chunk_ids: tuple[str, ...]
    embedder_id: str
    dim: int
    embeddings_digest: str  # sha256 of the float32 matrix in chunk-id order
    params: IndexParams

    @property
    def index_version(self) -> str:
        return index_version(self)


def index_version(manifest: IndexManifest) -> str:
    """sha256 over (format, sorted chunk ids, embedder id, dim, embeddings digest, parameters)."""
    return digest(manifest.model_dump(mode="json"))


def matrix_digest(matrix: np.ndarray) -> str:
    return digest_bytes(np.ascontiguousarray(matrix, dtype="<f4").tobytes())


def make_manifest(
    chunk_ids: Sequence[str], matrix: np.ndarray, embedder_id: str, params: IndexParams
) -> tuple[IndexManifest, list[int]]:
    """The manifest and the row permutation that puts ``chunk_ids`` (and ``matrix``) in id order."""
    if len(set(chunk_ids)) != len(chunk_ids):
        raise ValueError("duplicate chunk ids")
    if matrix.shape[0] != len(chunk_ids):
        raise ValueError(f"{matrix.shape[0]} embeddings for {len(chunk_ids)} chunks")
    order = sorted(range(len(chunk_ids)), key=chunk_ids.__getitem__)
    ordered = matrix[order] if len(order) else matrix
    manifest = IndexManifest(
        chunk_ids=tuple(chunk_ids[i] for i in order),
        embedder_id=embedder_id,
        dim=int(matrix.shape[1]) if matrix.ndim == 2 else 0,
        embeddings_digest=matrix_digest(ordered),
        params=params,
    )
    return manifest, order


def write_index(
    path: Path,
    manifest: IndexManifest,
    texts: Sequence[str],
    matrix: np.ndarray,
    *,
    progress: Callable[[int], None] | None = None,
    batch: int = 2000,
) -> None:
    """Write the index file (``texts`` and ``matrix`` rows already in ``manifest.chunk_ids`` order)."""
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    try:
        conn.executescript(
            f"""
            PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;
            CREATE TABLE meta(key TEXT PRIMARY KEY, value BLOB NOT NULL);
            CREATE TABLE chunks(rowid INTEGER PRIMARY KEY, chunk_id TEXT NOT NULL UNIQUE, text TEXT NOT NULL);
            CREATE VIRTUAL TABLE fts USING fts5(text, content='chunks', content_rowid='rowid',
                tokenize='{manifest.params.tokenizer}');
            """
        )
        conn.execute(
            "INSERT INTO meta VALUES ('manifest', ?)", (canonical_bytes(manifest.model_dump(mode="json")),)
        )
        conn.execute("INSERT INTO meta VALUES ('index_version', ?)", (manifest.index_version,))
        conn.execute(
            "INSERT INTO meta VALUES ('matrix', ?)", (np.ascontiguousarray(matrix, dtype="<f4").tobytes(),)
        )
        ids = manifest.chunk_ids
        for start in range(0, len(ids), batch):
            rows = [(i + 1, ids[i], texts[i]) for i in range(start, min(start + batch, len(ids)))]
            conn.executemany("INSERT INTO chunks VALUES (?, ?, ?)", rows)
            conn.executemany("INSERT INTO fts(rowid, text) VALUES (?, ?)", [(r[0], r[2]) for r in rows])
            if progress is not None:
                progress(start + len(rows))
        conn.execute("INSERT INTO fts(fts) VALUES ('optimize')")  # one b-tree segment: faster queries
        conn.commit()
        conn.execute("VACUUM")
    finally:
        conn.close()
