"""The per-item work of each job and the artifacts it writes, without Temporal.

A job's results are written as *segments* (one artifact per checkpoint of finished items); the
activity's heartbeat carries the cursor and the newest segments, older ones listed by *segment
groups* (one artifact per :data:`SEGMENT_GROUP_SIZE` segments, each naming the group before it),
so a retried attempt continues after the last stored segment instead of starting over, and the
heartbeat stays small whatever the job's size.

Ingest segments and segment groups are the job's own scratch (``snapshot`` retention, the job id
inside so no other job shares their digest): the job deletes them once its output is stored
(:func:`discard_checkpoints`). Embedding segments are the job's output (the embedding set lists
them) and stay.
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

#: Segment groups: the chained lists of a running job's older segments.
CHECKPOINT_KIND = "case-job-checkpoint"


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


def put_ingest_segment(store: ArtifactStore, docs: Sequence[DocumentChunks], job_id: str = "") -> str:
    body = {"type": "ingest", "job": job_id, "documents": [d.model_dump() for d in docs]}
    return store.put(canonical_bytes(body), kind=SEGMENT_KIND, retention="snapshot").sha256


def put_segment_group(
    store: ArtifactStore, job_id: str, previous: str | None, segments: Sequence[str]
) -> str:
    """Store one group of segment digests (after the group ``previous``); answers its digest."""
    body = {"type": "segment-group", "job": job_id, "previous": previous, "segments": list(segments)}
    return store.put(canonical_bytes(body), kind=CHECKPOINT_KIND, retention="snapshot").sha256


def _walk_groups(store: ArtifactStore, newest: str | None) -> list[tuple[str, list[str]]]:
    """``(group digest, its segments)`` oldest first."""
    chain: list[tuple[str, list[str]]] = []
    while newest is not None:
        body = get_json(store, newest)
        chain.append((newest, [str(s) for s in cast(list[Any], body["segments"])]))
        previous = body.get("previous")
        newest = str(previous) if previous else None
    return chain[::-1]


def read_segment_groups(store: ArtifactStore, newest: str | None) -> list[str]:
    """Every segment the chain of groups ending at ``newest`` lists, in order."""
    return [segment for _, segments in _walk_groups(store, newest) for segment in segments]


def discard_checkpoints(
    store: ArtifactStore, newest_group: str | None, ingest_segments: Sequence[str] = ()
) -> int:
    """Delete a finished job's segment groups (and, for ingest, its segments): answers how many."""
    groups = [digest for digest, _ in _walk_groups(store, newest_group)]
    return store.discard(CHECKPOINT_KIND, groups) + store.discard(SEGMENT_KIND, ingest_segments)


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
