"""Activities resume from a heartbeat checkpoint (ActivityEnvironment, no server): finished items
are neither re-read nor re-stored, and the result equals an uninterrupted run."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tests.jobs.helpers import EmbedLog, counting_factory, many_docs, store_docs
from turngate.artifacts import ArtifactUnavailableError, LocalArtifactStore
from turngate.core.manifest import ArtifactPointer
from turngate.jobs.activities import JobActivities
from turngate.jobs.cases.embedders import EmbedderSpec
from turngate.jobs.domain.chunking import ChunkParams
from turngate.jobs.domain.models import SEGMENT_GROUP_SIZE, SEGMENT_KIND, EmbedInput, IngestInput, JobOptions

PER = 3  # items per checkpoint
OPTIONS = JobOptions(wall_clock_s=60, checkpoint_items=PER)


class CountingStore(LocalArtifactStore):
    """Counts reads; with ``fail_segment`` set, the put of that segment (1-based) fails as an
    unreachable store does (the attempt ends, its last heartbeat stays)."""

    def __init__(self, root: Any) -> None:
        super().__init__(root)
        self.reads: list[str] = []
        self.fail_segment: int | None = None
        self.segments = 0

    def get(self, ref: ArtifactPointer | str) -> bytes:
        self.reads.append(ref.sha256 if isinstance(ref, ArtifactPointer) else ref)
        return super().get(ref)

    def put(self, data: bytes, **kw: Any) -> ArtifactPointer:
        if kw.get("kind") == SEGMENT_KIND:
            self.segments += 1
            if self.segments == self.fail_segment:
                raise ArtifactUnavailableError("the store went away")
        return super().put(data, **kw)


def _env(heartbeats: list[dict[str, Any]], details: dict[str, Any] | None = None) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *d: heartbeats.append(d[0])
    if details is not None:
        env.info = dataclasses.replace(env.info, heartbeat_details=[details])
    return env


async def test_ingest_resumes_after_the_last_stored_segment(tmp_path) -> None:
    docs = many_docs(PER + 4)
    reference = LocalArtifactStore(tmp_path / "reference")
    full = await ActivityEnvironment().run(JobActivities(reference).ingest, _ingest_job(reference, docs))
    store = CountingStore(tmp_path / "a")
    job = _ingest_job(store, docs)
    refs = job.documents
    acts = JobActivities(store)
    beats: list[dict[str, Any]] = []
    store.fail_segment = 2  # the first attempt stores one segment, then loses the store
    with pytest.raises(ApplicationError, match="the store went away"):
        await _env(beats).run(acts.ingest, job)
    after_first = beats[-1]
    assert after_first["cursor"] == PER and len(after_first["pending"]) == 1
    store.reads.clear()
    resumed = await _env([], after_first).run(acts.ingest, job)
    assert (resumed.chunks.sha256, resumed.documents, resumed.chunk_count) == (
        full.chunks.sha256,
        full.documents,
        full.chunk_count,
    )
    read_docs = {r.artifact.sha256 for r in refs} & set(store.reads)
    assert read_docs == {r.artifact.sha256 for r in refs[PER:]}  # the first batch is not re-read
    # the job's scratch (its ingest segments) is gone: the chunk manifest holds what they held
    assert not [a for a in store.iter_artifacts() if a.kind == SEGMENT_KIND]


def _ingest_job(store: LocalArtifactStore, docs: dict[str, bytes]) -> IngestInput:
    return IngestInput(
        case_id="c",
        documents=store_docs(store, docs),
        chunking=ChunkParams(size=200, overlap=20),
        options=OPTIONS,
    )


async def test_embed_resumes_at_the_cursor(tmp_path) -> None:
    store = LocalArtifactStore(tmp_path / "a")
    refs = store_docs(store, many_docs(10))
    acts = JobActivities(store)
    ingested = await ActivityEnvironment().run(
        acts.ingest,
        IngestInput(case_id="c", documents=refs, chunking=ChunkParams(size=2000, overlap=0), options=OPTIONS),
    )
    job = EmbedInput(
        case_id="c", chunks=ingested.chunks, embedder=EmbedderSpec(batch_size=3), options=OPTIONS
    )
    first, second = EmbedLog(), EmbedLog()
    beats: list[dict[str, Any]] = []
    full = await _env(beats).run(JobActivities(store, embedder_factory=counting_factory(first)).embed, job)
    checkpoint = next(b for b in beats if b["cursor"] == 6)
    resumed = await _env([], checkpoint).run(
        JobActivities(store, embedder_factory=counting_factory(second)).embed, job
    )
    assert resumed == full
    assert len(first.texts) == 10 and len(second.texts) == 4  # only the chunks after the cursor


async def test_heartbeats_stay_small_and_segment_groups_are_collected(tmp_path) -> None:
    """One segment per document: past SEGMENT_GROUP_SIZE segments the heartbeat lists a group
    instead (its size bounded), a resume reads the group, and the finished job leaves no
    checkpoint artifact behind."""
    store = LocalArtifactStore(tmp_path / "a")
    n = SEGMENT_GROUP_SIZE + 6
    job = IngestInput(
        case_id="c",
        documents=store_docs(store, many_docs(n, words=5)),
        options=JobOptions(wall_clock_s=60, checkpoint_items=1),
    )
    beats: list[dict[str, Any]] = []
    full = await _env(beats).run(JobActivities(store).ingest, job)
    sizes = [len(json.dumps(b)) for b in beats]
    assert max(sizes) < 8 * 1024, "a heartbeat grew with the job"
    grouped = next(b for b in beats if b["groups"] and b["cursor"] == SEGMENT_GROUP_SIZE + 2)
    assert grouped["group_count"] == 1 and len(grouped["pending"]) == 2
    assert full.documents == n
    assert not [a for a in store.iter_artifacts() if a.retention == "snapshot"], "checkpoints left behind"

    # a resume from the grouped checkpoint (the job's scratch written again first: a second
    # store holding what the first attempt had stored)
    again = LocalArtifactStore(tmp_path / "b")
    job_b = job.model_copy(update={"documents": store_docs(again, many_docs(n, words=5))})
    beats_b: list[dict[str, Any]] = []
    first = CountingStore(tmp_path / "b")
    first.fail_segment = SEGMENT_GROUP_SIZE + 3
    with pytest.raises(ApplicationError):
        await _env(beats_b).run(JobActivities(first).ingest, job_b)
    resumed = await _env([], beats_b[-1]).run(JobActivities(again).ingest, job_b)
    assert (resumed.chunks.sha256, resumed.chunk_count) == (full.chunks.sha256, full.chunk_count)
