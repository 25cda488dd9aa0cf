"""Resolving a declared ``case_query`` ref against a pinned index version.

The turn's external-refs activity (activities/external_refs.py) calls this. Retrieval
happens only for a ref the client declared; the result is a pure function of (index version,
query, top_k, min_score), and :func:`manifest_record` is what the context manifest records.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from turngate.artifacts import ArtifactStore
from turngate.artifacts.store import digest_hex
from turngate.core.canonical import digest_bytes
from turngate.core.events import CaseQueryRef
from turngate.core.manifest import ArtifactPointer
from turngate.jobs.cases.embedders import Embedder
from turngate.jobs.cases.retrieval import CaseIndex, RetrievalResult


class CaseQueryError(ValueError):
    """A ref that cannot be resolved as declared (its code goes into the DENY/EXECUTION error)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class IndexCache:
    """Index files fetched from the artifact store into ``cache_dir`` (verified by sha256) and kept
    open, at most ``max_open`` at a time. Thread-safe."""

    def __init__(self, store: ArtifactStore, cache_dir: Path, *, max_open: int = 4) -> None:
        self._store = store
        self._dir = cache_dir
        self._max_open = max_open
        self._open: OrderedDict[str, CaseIndex] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, pointer: ArtifactPointer) -> CaseIndex:
        key = digest_hex(pointer.sha256)
        with self._lock:
            if key in self._open:
                self._open.move_to_end(key)
                return self._open[key]
            index = CaseIndex(self._fetch(pointer, key))
            self._open[key] = index
            while len(self._open) > self._max_open:
                _, old = self._open.popitem(last=False)
                old.close()
            return index

    def close(self) -> None:
        with self._lock:
            for index in self._open.values():
                index.close()
            self._open.clear()

    def _fetch(self, pointer: ArtifactPointer, key: str) -> Path:
        path = self._dir / f"{key}.sqlite3"
        if path.exists():
            return path
        data = self._store.get(pointer)
        if digest_hex(digest_bytes(data)) != key:
            raise CaseQueryError(
                "case_query.index_corrupt", f"index artifact {pointer.path} fails its sha256"
            )
        self._dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        return path


async def resolve_case_query(ref: CaseQueryRef, index: CaseIndex, embedder: Embedder) -> RetrievalResult:
    """Retrieve for a declared ref from an opened index (the caller resolved the pinned version)."""
    if ref.index_version is not None and ref.index_version != index.index_version:
        raise CaseQueryError(
            "case_query.index_version_mismatch",
            f"declared index_version {ref.index_version} but the index opened is {index.index_version}",
        )
    if embedder.embedder_id != index.manifest.embedder_id:
        raise CaseQueryError(
            "case_query.embedder_mismatch",
            f"index {index.index_version} was embedded with {index.manifest.embedder_id}, "
            f"not {embedder.embedder_id}",
        )
    vector = (await embedder.embed([ref.query]))[0]
    return index.retrieve(ref.query, vector, top_k=ref.top_k, min_score=ref.min_score)


def manifest_record(ref: CaseQueryRef, result: RetrievalResult) -> dict[str, Any]:
    """The context manifest's entry for one ``case_query`` ref (ids, scores, reasons; no texts)."""
    return {
        "ref_type": "case_query",
        "case_id": ref.case_id,
        "index_version": result.index_version,
        "retrieval_query": result.query,
        "top_k": result.top_k,
        "min_score": result.min_score,
        "ranking_method": result.ranking_method,
        "ranking_version": result.ranking_version,
        "candidate_chunk_ids": result.candidate_chunk_ids,
        "selected_chunk_ids": result.selected_chunk_ids,
        "scores": {c.chunk_id: c.score for c in result.candidates},
        "exclusions": [e.model_dump() for e in result.exclusions],
        "admitted_for": "execution_only",
    }
