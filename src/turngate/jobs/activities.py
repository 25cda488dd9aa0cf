"""The job activities: ``case.ingest``, ``case.embed``, ``case.index``.

A job runs as a sequence of *steps*, one activity at a time (so the task queue's slot count is
the job concurrency per worker). A step heartbeats a
:class:`~turngate.jobs.domain.models.JobCheckpoint`: a retried attempt (worker lost or shut
down) resumes at the cursor and reuses the stored segments; after ``step_s`` the step returns
the checkpoint to the workflow, which starts the next step with it (or continues as new). Each
step enforces the job's wall-clock limit itself, measured from the job's first attempt, and
fails with the non-retryable ``job.timed_out``. Blocking work (artifact I/O, parsing, the
SQLite build) runs in threads so heartbeats and cancellation keep flowing.
"""

from __future__ import annotations

import asyncio
import functools
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
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
    discard_checkpoints,
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
    DocumentChunks,
    EmbeddingSet,
    EmbedInput,
    EmbedResult,
    EmbedStep,
    IndexInput,
    IndexResult,
    IndexStep,
    IngestInput,
    IngestResult,
    IngestStep,
    JobCheckpoint,
    JobOptions,
)
from turngate.jobs.domain.queues import (
    EMBED_ACTIVITY,
    EMBED_STEP_ACTIVITY,
    INDEX_ACTIVITY,
    INDEX_STEP_ACTIVITY,
    INGEST_ACTIVITY,
    INGEST_STEP_ACTIVITY,
)
from turngate.jobs.heartbeat import ProgressReporter, elapsed_s, job_id, resume_checkpoint
from turngate.providers.base import ProviderError

T = TypeVar("T")
INGEST_PARALLEL = 16  # documents parsed and stored at the same time (fsync-bound writes)


class _StepClock:
    """When a step hands its cursor back to the workflow: after ``step_s`` (None: never), and
    only once it stored something (every step makes progress)."""

    def __init__(self, step_s: float | None, cursor: int) -> None:
        self._ends = None if step_s is None else time.monotonic() + step_s
        self._cursor = cursor

    def due(self, cursor: int) -> bool:
        return self._ends is not None and cursor > self._cursor and time.monotonic() >= self._ends


class JobActivities:
    """Holds the shared artifact store and the embedder factory (injected by the worker).

    Each job type has a *step* activity (``turngate.jobs.<type>.step``: runs up to the job's
    ``step_s``, returns its checkpoint and, on the last step, the result) and the whole-job
    activity the workflows called before steps existed (kept for jobs started then)."""

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

    # ---- the activities

    @activity.defn(name=INGEST_STEP_ACTIVITY)
    async def ingest_step(self, input: IngestInput, resume: JobCheckpoint | None) -> IngestStep:
        return await self._ingest(input, resume, input.options.step_s)

    @activity.defn(name=EMBED_STEP_ACTIVITY)
    async def embed_step(self, input: EmbedInput, resume: JobCheckpoint | None) -> EmbedStep:
        return await self._embed(input, resume, input.options.step_s)

    @activity.defn(name=INDEX_STEP_ACTIVITY)
    async def index_step(self, input: IndexInput, resume: JobCheckpoint | None) -> IndexStep:
        return await self._index(input, resume)

    @activity.defn(name=INGEST_ACTIVITY)
    async def ingest(self, input: IngestInput) -> IngestResult:
        step = await self._ingest(input, None, None)
        assert step.result is not None, "a step without a time limit runs to the end"
        return step.result

    @activity.defn(name=EMBED_ACTIVITY)
    async def embed(self, input: EmbedInput) -> EmbedResult:
        step = await self._embed(input, None, None)
        assert step.result is not None, "a step without a time limit runs to the end"
        return step.result

    @activity.defn(name=INDEX_ACTIVITY)
    async def index(self, input: IndexInput) -> IndexResult:
        step = await self._index(input, None)
        assert step.result is not None, "a step without a time limit runs to the end"
        return step.result

    # ---- the work

    async def _ingest(
        self, input: IngestInput, resume: JobCheckpoint | None, step_s: float | None
    ) -> IngestStep:
        cp = resume_checkpoint(resume)
        if cp.result is None:
            cp.items_total = len(input.documents)
            per = input.options.checkpoint_items

            async def work(progress: ProgressReporter) -> IngestStep:
                clock = _StepClock(step_s, cp.cursor)
                for start in range(cp.cursor, len(input.documents), per):
                    if clock.due(cp.cursor):
                        return IngestStep(checkpoint=cp)
                    refs = input.documents[start : start + per]
                    docs: list[DocumentChunks] = []
                    for at in range(0, len(refs), INGEST_PARALLEL):
                        part = refs[at : at + INGEST_PARALLEL]
                        docs.extend(
                            await asyncio.gather(
                                *(self._thread(ingest_document, self._store, r, input.chunking) for r in part)
                            )
                        )
                        progress.items_done = start + len(docs)
                    segment = await self._thread(put_ingest_segment, self._store, docs, job_id())
                    await progress.advance(start + len(refs), segment)
                segments = await progress.segments()
                all_docs: list[DocumentChunks] = []
                for seg in segments:
                    all_docs.extend(await self._thread(read_ingest_segment, self._store, seg))
                manifest = ChunkManifest(case_id=input.case_id, chunking=input.chunking, documents=all_docs)
                pointer = await self._thread(
                    put_json, self._store, manifest.model_dump(), CHUNK_MANIFEST_KIND
                )
                result = IngestResult(
                    case_id=input.case_id,
                    chunks=pointer,
                    documents=len(all_docs),
                    chunk_count=len(manifest.chunk_ids),
                )
                await self._finish(progress, result, segments)
                return IngestStep(checkpoint=cp, result=result)

            step = await self._run("case.ingest", cp, input.options, work)
            if step.result is None:
                return step
        result = IngestResult.model_validate(cp.result)
        detail = {"documents": result.documents, "chunk_count": result.chunk_count}
        await self._record(input, "chunks", result.chunks, detail | {"chunking": input.chunking.model_dump()})
        return IngestStep(checkpoint=cp, result=result)

    async def _embed(
        self, input: EmbedInput, resume: JobCheckpoint | None, step_s: float | None
    ) -> EmbedStep:
        cp = resume_checkpoint(resume)
        if cp.result is None:
            batch = input.embedder.batch_size
            # a checkpoint holds whole embedding calls, at least checkpoint_items chunks
            per = -(-max(input.options.checkpoint_items, batch) // batch) * batch

            async def work(progress: ProgressReporter) -> EmbedStep:
                manifest = await self._thread(load_chunk_manifest, self._store, input.chunks)
                ids = manifest.chunk_ids
                cp.items_total = len(ids)
                clock = _StepClock(step_s, cp.cursor)
                embedder = self._embedder_factory(input.embedder)
                try:
                    for start in range(cp.cursor, len(ids), per):
                        if clock.due(cp.cursor):
                            return EmbedStep(checkpoint=cp)
                        part = ids[start : start + per]
                        texts = await self._thread(
                            lambda p=part: [load_chunk(self._store, c).text for c in p]
                        )
                        vectors = []
                        for at in range(0, len(part), batch):
                            vectors.append(await embedder.embed(texts[at : at + batch]))
                            progress.items_done = start + min(at + batch, len(part))
                        segment = await self._thread(
                            put_embedding_segment,
                            self._store,
                            embedder.embedder_id,
                            part,
                            np.concatenate(vectors),
                        )
                        await progress.advance(start + len(part), segment)
                finally:
                    await embedder.aclose()
                segments = await progress.segments()
                dim = await self._thread(self._segment_dim, segments, input.embedder.dim or 0)
                emb = EmbeddingSet(
                    case_id=input.case_id,
                    chunk_manifest=normalize_digest(input.chunks.sha256),
                    embedder_id=embedder.embedder_id,
                    dim=dim,
                    segments=segments,
                    count=len(ids),
                )
                pointer = await self._thread(put_json, self._store, emb.model_dump(), EMBEDDING_SET_KIND)
                result = EmbedResult(
                    case_id=input.case_id,
                    embeddings=pointer,
                    embedder_id=emb.embedder_id,
                    chunk_count=len(ids),
                )
                await self._finish(progress, result)
                return EmbedStep(checkpoint=cp, result=result)

            step = await self._run("case.embed", cp, input.options, work)
            if step.result is None:
                return step
        result = EmbedResult.model_validate(cp.result)
        detail = {
            "embedder_id": result.embedder_id,
            "embedder": input.embedder.model_dump(mode="json"),
            "chunk_count": result.chunk_count,
            "chunks": normalize_digest(input.chunks.sha256),
        }
        await self._record(input, "embeddings", result.embeddings, detail)
        return EmbedStep(checkpoint=cp, result=result)

    async def _index(self, input: IndexInput, resume: JobCheckpoint | None) -> IndexStep:
        cp = resume_checkpoint(resume)
        if cp.result is None:

            async def work(progress: ProgressReporter) -> IndexStep:
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
                result = IndexResult(
                    case_id=input.case_id,
                    index_version=index_manifest.index_version,
                    index=pointer,
                    embedder_id=emb.embedder_id,
                    chunk_count=len(ids),
                )
                await self._finish(progress, result)
                return IndexStep(checkpoint=cp, result=result)

            await self._run("case.index", cp, input.options, work)
        result = IndexResult.model_validate(cp.result)
        embedder = await self._embedder_of(input)
        detail = {
            "embedder_id": result.embedder_id,
            "embedder": embedder,
            "chunk_count": result.chunk_count,
            "chunks": normalize_digest(input.chunks.sha256),
            "embeddings": normalize_digest(input.embeddings.sha256),
        }
        await self._record(input, "index", result.index, detail, version=result.index_version)
        return IndexStep(checkpoint=cp, result=result)

    async def _finish(
        self,
        progress: ProgressReporter,
        result: IngestResult | EmbedResult | IndexResult,
        scratch: Sequence[str] = (),
    ) -> None:
        """The output is stored: heartbeat it (a retry from here returns it), then delete the
        job's checkpoints (segment groups; an ingest's segments, now in its chunk manifest)."""
        cp = progress.checkpoint
        cp.result = result.model_dump(mode="json")
        cp.cursor = progress.items_done = cp.items_total
        progress.beat()
        await self._thread(discard_checkpoints, self._store, cp.groups, list(scratch))

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
        record = functools.partial(
            self._registry.record,
            tenant_id=input.tenant_id,
            case_id=input.case_id,
            kind=kind,
            job_id=job_id(),
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
        cp: JobCheckpoint,
        options: JobOptions,
        work: Callable[[ProgressReporter], Awaitable[T]],
    ) -> T:
        remaining = options.wall_clock_s - elapsed_s(cp.started_at)
        deadline = asyncio.timeout(max(remaining, 0))
        try:
            async with deadline:
                if remaining <= 0:  # a retry after the limit passed (e.g. the worker was down)
                    raise TimeoutError
                async with ProgressReporter(cp, self._store, interval_s=self._interval_s) as progress:
                    return await work(progress)
        except TimeoutError:
            if remaining > 0 and not deadline.expired():
                raise  # some other timeout (a socket, a thread): an ordinary, retryable failure
            raise ApplicationError(
                f"{job_type} job exceeded its wall-clock limit of {options.wall_clock_s:g} s "
                f"({max(cp.items_done, cp.cursor)} of {cp.items_total} items done)",
                {"items_done": max(cp.items_done, cp.cursor), "items_total": cp.items_total},
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
