"""The job activities: ``case.ingest``, ``case.embed``, ``case.index``.

Each is one long activity per job (so the task queue's slot count is the job concurrency limit)
that heartbeats a :class:`~turngate.jobs.heartbeat.Checkpoint`: a retried attempt (worker lost or
shut down) resumes at the cursor and reuses the stored segments. Each enforces its job's
wall-clock limit itself, measured from the first attempt's start, and fails with the
non-retryable ``job.timed_out``. Blocking work (artifact I/O, parsing, the SQLite build) runs in
threads so heartbeats and cancellation keep flowing.
"""

from __future__ import annotations

import asyncio
import functools
import tempfile
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy.exc import SQLAlchemyError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from turngate.artifacts import ArtifactError, ArtifactNotFoundError, ArtifactStore
from turngate.artifacts.store import normalize_digest
from turngate.core.manifest import ArtifactPointer
from turngate.jobs.cases.embedders import Embedder, build_embedder
from turngate.jobs.cases.index import INDEX_KIND, make_manifest, write_index
from turngate.jobs.cases.parsing import DocumentParseError
from turngate.jobs.cases.registry import CaseRegistry, RecordKind
from turngate.jobs.cases.segments import (
    ingest_document,
    load_chunk,
    load_chunk_manifest,
    load_embeddings,
    put_embedding_segment,
    put_ingest_segment,
    put_json,
    read_embedding_segment,
    read_ingest_segment,
)
from turngate.jobs.domain.embedder_spec import EmbedderSpec
from turngate.jobs.domain.models import (
    CHUNK_MANIFEST_KIND,
    EMBEDDING_SET_KIND,
    TIMED_OUT,
    ChunkManifest,
    EmbeddingSet,
    EmbedInput,
    EmbedResult,
    IndexInput,
    IndexResult,
    IngestInput,
    IngestResult,
    JobOptions,
)
from turngate.jobs.domain.queues import EMBED_ACTIVITY, INDEX_ACTIVITY, INGEST_ACTIVITY
from turngate.jobs.heartbeat import Checkpoint, ProgressReporter, elapsed_s, resume_checkpoint
from turngate.providers.base import ProviderError

T = TypeVar("T")
INGEST_BATCH = 16  # documents per stored segment


class JobActivities:
    """Holds the shared artifact store and the embedder factory (injected by the worker)."""

    def __init__(
        self,
        artifacts: ArtifactStore,
        *,
        embedder_factory: Callable[[EmbedderSpec], Embedder] = build_embedder,
        work_dir: Path | None = None,
        progress_interval_s: float = 1.0,
        registry: CaseRegistry | None = None,
    ) -> None:
        self._registry = registry
        self._store = artifacts
        self._embedder_factory = embedder_factory
        self._work_dir = work_dir
        self._interval_s = progress_interval_s

    @activity.defn(name=INGEST_ACTIVITY)
    async def ingest(self, input: IngestInput) -> IngestResult:
        cp = resume_checkpoint()
        cp.items_total = len(input.documents)

        async def work(progress: ProgressReporter) -> IngestResult:
            for start in range(cp.cursor, len(input.documents), INGEST_BATCH):
                refs = input.documents[start : start + INGEST_BATCH]
                # In parallel threads: each chunk put is an fsync-bound write, not CPU work.
                docs = list(
                    await asyncio.gather(
                        *(self._thread(ingest_document, self._store, ref, input.chunking) for ref in refs)
                    )
                )
                segment = await self._thread(put_ingest_segment, self._store, docs)
                progress.advance(start + len(refs), segment)
            docs = []
            for seg in cp.segments:
                docs.extend(await self._thread(read_ingest_segment, self._store, seg))
            manifest = ChunkManifest(case_id=input.case_id, chunking=input.chunking, documents=docs)
            pointer = await self._thread(put_json, self._store, manifest.model_dump(), CHUNK_MANIFEST_KIND)
            return IngestResult(
                case_id=input.case_id,
                chunks=pointer,
                documents=len(docs),
                chunk_count=len(manifest.chunk_ids),
            )

        result = await self._run("case.ingest", cp, input.options, work)
        detail = {"documents": result.documents, "chunk_count": result.chunk_count}
        await self._record(input, "chunks", result.chunks, detail | {"chunking": input.chunking.model_dump()})
        return result

    @activity.defn(name=EMBED_ACTIVITY)
    async def embed(self, input: EmbedInput) -> EmbedResult:
        cp = resume_checkpoint()
        batch = input.embedder.batch_size

        async def work(progress: ProgressReporter) -> EmbedResult:
            manifest = await self._thread(load_chunk_manifest, self._store, input.chunks)
            ids = manifest.chunk_ids
            cp.items_total = len(ids)
            embedder = self._embedder_factory(input.embedder)
            try:
                for start in range(cp.cursor, len(ids), batch):
                    part = ids[start : start + batch]
                    texts = await self._thread(lambda p=part: [load_chunk(self._store, c).text for c in p])
                    vectors = await embedder.embed(texts)
                    segment = await self._thread(
                        put_embedding_segment, self._store, embedder.embedder_id, part, vectors
                    )
                    progress.advance(start + len(part), segment)
            finally:
                await embedder.aclose()
            dim = await self._thread(self._segment_dim, cp.segments, input.embedder.dim or 0)
            emb = EmbeddingSet(
                case_id=input.case_id,
                chunk_manifest=normalize_digest(input.chunks.sha256),
                embedder_id=embedder.embedder_id,
                dim=dim,
                segments=list(cp.segments),
                count=len(ids),
            )
            pointer = await self._thread(put_json, self._store, emb.model_dump(), EMBEDDING_SET_KIND)
            return EmbedResult(
                case_id=input.case_id, embeddings=pointer, embedder_id=emb.embedder_id, chunk_count=len(ids)
            )

        result = await self._run("case.embed", cp, input.options, work)
        detail = {
            "embedder_id": result.embedder_id,
            "embedder": input.embedder.model_dump(mode="json"),
            "chunk_count": result.chunk_count,
            "chunks": normalize_digest(input.chunks.sha256),
        }
        await self._record(input, "embeddings", result.embeddings, detail)
        return result

    @activity.defn(name=INDEX_ACTIVITY)
    async def index(self, input: IndexInput) -> IndexResult:
        cp = resume_checkpoint()

        async def work(progress: ProgressReporter) -> IndexResult:
            manifest = await self._thread(load_chunk_manifest, self._store, input.chunks)
            emb, ids, matrix = await self._thread(load_embeddings, self._store, input.embeddings)
            if ids != manifest.chunk_ids:
                raise ApplicationError(
                    "the embedding set does not cover the chunk manifest's chunks",
                    type="job.inputs_mismatch",
                    non_retryable=True,
                )
            cp.items_total = len(ids)
            params = input.params.model_copy(update={"chunker": manifest.chunking.model_dump()})
            index_manifest, order = make_manifest(ids, matrix, emb.embedder_id, params)

            def build() -> bytes:
                # Texts are read in id order as the rows are written; progress counts rows.
                texts = []
                for n, i in enumerate(order):
                    texts.append(load_chunk(self._store, ids[i]).text)
                    progress.items_done = n // 2
                with tempfile.TemporaryDirectory(dir=self._work_dir) as tmp:
                    path = Path(tmp) / "index.sqlite3"
                    write_index(
                        path,
                        index_manifest,
                        texts,
                        matrix[order] if len(order) else matrix,
                        progress=lambda n: setattr(progress, "items_done", (len(ids) + n) // 2),
                    )
                    return path.read_bytes()

            data = await self._thread(build)
            pointer = await self._thread(
                lambda: self._store.put(data, kind=INDEX_KIND, media_type="application/vnd.sqlite3")
            )
            return IndexResult(
                case_id=input.case_id,
                index_version=index_manifest.index_version,
                index=pointer,
                embedder_id=emb.embedder_id,
                chunk_count=len(ids),
            )

        result = await self._run("case.index", cp, input.options, work)
        embedder = await self._embedder_of(input)
        detail = {
            "embedder_id": result.embedder_id,
            "embedder": embedder,
            "chunk_count": result.chunk_count,
            "chunks": normalize_digest(input.chunks.sha256),
            "embeddings": normalize_digest(input.embeddings.sha256),
        }
        await self._record(input, "index", result.index, detail, version=result.index_version)
        return result

    # ---- the case registry

    async def _record(
        self,
        input: IngestInput | EmbedInput | IndexInput,
        kind: RecordKind,
        pointer: ArtifactPointer,
        detail: dict[str, Any],
        *,
        version: str | None = None,
    ) -> None:
        """Append the job's output to its tenant's case registry (idempotent per job id)."""
        if self._registry is None:
            return
        job_id = activity.info().workflow_id
        assert job_id is not None, "a job activity runs in its job's workflow"
        record = functools.partial(
            self._registry.record,
            tenant_id=input.tenant_id,
            case_id=input.case_id,
            kind=kind,
            job_id=job_id,
            version=version or normalize_digest(pointer.sha256),
            pointer=pointer,
            detail=detail,
            key_id=input.key_id,
        )
        try:
            await asyncio.to_thread(record)
        except SQLAlchemyError as exc:  # retryable: the output is stored, only its record is missing
            raise ApplicationError(
                f"could not record the case output: {exc}", type="ledger.unavailable"
            ) from exc

    async def _embedder_of(self, input: IndexInput) -> dict[str, Any] | None:
        """The embedder the index's embeddings were made with (queries must use it)."""
        if self._registry is None:
            return None
        found = await asyncio.to_thread(
            self._registry.latest,
            tenant_id=input.tenant_id,
            case_id=input.case_id,
            kind="embeddings",
            version=normalize_digest(input.embeddings.sha256),
        )
        return found.detail.get("embedder") if found is not None else None

    # ---- shared machinery

    async def _run(
        self,
        job_type: str,
        cp: Checkpoint,
        options: JobOptions,
        work: Callable[[ProgressReporter], Awaitable[T]],
    ) -> T:
        remaining = options.wall_clock_s - elapsed_s(cp.started_at)
        deadline = asyncio.timeout(max(remaining, 0))
        try:
            async with deadline:
                if remaining <= 0:  # a retry after the limit passed (e.g. the worker was down)
                    raise TimeoutError
                async with ProgressReporter(cp, interval_s=self._interval_s) as progress:
                    return await work(progress)
        except TimeoutError:
            if remaining > 0 and not deadline.expired():
                raise  # some other timeout (a socket, a thread): an ordinary, retryable failure
            raise ApplicationError(
                f"{job_type} job exceeded its wall-clock limit of {options.wall_clock_s:g} s "
                f"({cp.cursor} of {cp.items_total} items done)",
                {"items_done": cp.cursor, "items_total": cp.items_total},
                type=TIMED_OUT,
                non_retryable=True,
            ) from None
        except ProviderError as exc:
            raise ApplicationError(
                exc.message,
                type=exc.type,
                non_retryable=not exc.retryable,
                next_retry_delay=_delay(exc.retry_after_s),
            ) from None
        except DocumentParseError as exc:
            raise ApplicationError(str(exc), type=exc.code, non_retryable=True) from None
        except ArtifactNotFoundError as exc:
            raise ApplicationError(str(exc), type=exc.code, non_retryable=True) from None
        except ArtifactError as exc:
            raise ApplicationError(str(exc), type=exc.code, non_retryable=not exc.retryable) from None

    def _segment_dim(self, segments: list[str], default: int) -> int:
        if not segments:
            return default
        _, vectors = read_embedding_segment(self._store, segments[0])
        return int(vectors.shape[1])

    @staticmethod
    async def _thread(func: Callable[..., T], *args: object) -> T:
        return await asyncio.to_thread(func, *args)


def _delay(seconds: float | None) -> timedelta | None:
    return timedelta(seconds=seconds) if seconds else None
