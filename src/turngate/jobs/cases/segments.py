"""The per-item work of each job and the artifacts it writes, without Temporal.

A job's results are written as *segments* (one artifact per batch of finished items); the
activity's heartbeat carries ``(cursor, segment digests)``, so a retried attempt continues after
the last stored segment instead of starting over.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from turngate.artifacts import ArtifactStore
from turngate.artifacts.store import normalize_digest
from turngate.core.canonical import canonical_bytes
from turngate.core.manifest import ArtifactPointer
from turngate.jobs.cases.parsing import guess_media_type, parse_document
from turngate.jobs.domain.chunking import CHUNK_KIND, Chunk, ChunkParams, chunk_text
from turngate.jobs.domain.models import SEGMENT_KIND, ChunkManifest, DocumentChunks, DocumentRef, EmbeddingSet


def ingest_document(store: ArtifactStore, ref: DocumentRef, params: ChunkParams) -> DocumentChunks:
    """Parse one stored document, store its chunks (a put of an existing chunk is a stat only)."""
    data = store.get(ref.artifact)
    media_type = ref.media_type or guess_media_type(ref.name, data)
    text = parse_document(data, media_type)
    sha = normalize_digest(ref.artifact.sha256)
    chunks = chunk_text(text, sha, params)
    for chunk in chunks:
        store.put(chunk.to_bytes(), kind=CHUNK_KIND)
    return DocumentChunks(
        sha256=sha, name=ref.name, media_type=media_type, chunk_ids=[c.chunk_id for c in chunks]
    )


def put_json(store: ArtifactStore, value: object, kind: str) -> ArtifactPointer:
    return store.put(canonical_bytes(value), kind=kind)


def get_json(store: ArtifactStore, ref: ArtifactPointer | str) -> dict[str, object]:
    value = json.loads(store.get(ref))
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object")
    return value


def load_chunk(store: ArtifactStore, chunk_id: str) -> Chunk:
    return Chunk.model_validate_json(store.get(chunk_id))


def load_chunk_manifest(store: ArtifactStore, ref: ArtifactPointer | str) -> ChunkManifest:
    return ChunkManifest.model_validate_json(store.get(ref))


def put_ingest_segment(store: ArtifactStore, docs: Sequence[DocumentChunks]) -> str:
    body = {"type": "ingest", "documents": [d.model_dump() for d in docs]}
    return put_json(store, body, SEGMENT_KIND).sha256


def read_ingest_segment(store: ArtifactStore, digest: str) -> list[DocumentChunks]:
    body = get_json(store, digest)
    # Parsed JSON: each item is validated as it is read.
    return [DocumentChunks.model_validate(d) for d in cast(list[Any], body["documents"])]


def put_embedding_segment(
    store: ArtifactStore, embedder_id: str, chunk_ids: Sequence[str], vectors: np.ndarray
) -> str:
    body = {
        "type": "embed",
        "embedder_id": embedder_id,
        "chunk_ids": list(chunk_ids),
        "dim": int(vectors.shape[1]),
        "vectors_f32le_b64": base64.b64encode(np.ascontiguousarray(vectors, dtype="<f4").tobytes()).decode(),
    }
    return put_json(store, body, SEGMENT_KIND).sha256


def read_embedding_segment(store: ArtifactStore, digest: str) -> tuple[list[str], np.ndarray]:
    body = get_json(store, digest)
    ids = list(body["chunk_ids"])  # type: ignore[call-overload]
    raw = base64.b64decode(str(body["vectors_f32le_b64"]))
    return ids, np.frombuffer(raw, dtype="<f4").reshape(len(ids), int(body["dim"]))  # type: ignore[call-overload]


def load_embeddings(store: ArtifactStore, ref: ArtifactPointer) -> tuple[EmbeddingSet, list[str], np.ndarray]:
    """The embedding set and all its vectors, in chunk-manifest order."""
    emb = EmbeddingSet.model_validate_json(store.get(ref))
    ids: list[str] = []
    parts: list[np.ndarray] = []
    for seg in emb.segments:
        seg_ids, vectors = read_embedding_segment(store, seg)
        ids.extend(seg_ids)
        parts.append(vectors)
    matrix = np.concatenate(parts) if parts else np.zeros((0, emb.dim), dtype=np.float32)
    return emb, ids, matrix
