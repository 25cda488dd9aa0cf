"""Activities resume from a heartbeat checkpoint (ActivityEnvironment, no server): finished items
are neither re-read nor re-stored, and the result equals an uninterrupted run."""

from __future__ import annotations

import dataclasses
from typing import Any

from temporalio.testing import ActivityEnvironment

from tests.jobs.helpers import EmbedLog, counting_factory, many_docs, store_docs
from turngate.artifacts import LocalArtifactStore
from turngate.core.manifest import ArtifactPointer
from turngate.jobs.activities import INGEST_BATCH, JobActivities
from turngate.jobs.cases.embedders import EmbedderSpec
from turngate.jobs.domain.chunking import ChunkParams
from turngate.jobs.domain.models import EmbedInput, IngestInput, JobOptions

OPTIONS = JobOptions(wall_clock_s=60)


class CountingStore(LocalArtifactStore):
    def __init__(self, root: Any) -> None:
        super().__init__(root)
        self.reads: list[str] = []

    def get(self, ref: ArtifactPointer | str) -> bytes:
        self.reads.append(ref.sha256 if isinstance(ref, ArtifactPointer) else ref)
        return super().get(ref)


def _env(heartbeats: list[dict[str, Any]], details: dict[str, Any] | None = None) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *d: heartbeats.append(d[0])
    if details is not None:
        env.info = dataclasses.replace(env.info, heartbeat_details=[details])
    return env


async def test_ingest_resumes_after_the_last_stored_segment(tmp_path) -> None:
    store = CountingStore(tmp_path / "a")
    refs = store_docs(store, many_docs(INGEST_BATCH + 4))
    job = IngestInput(
        case_id="c", documents=refs, chunking=ChunkParams(size=200, overlap=20), options=OPTIONS
    )
    acts = JobActivities(store)
    beats: list[dict[str, Any]] = []
    full = await _env(beats).run(acts.ingest, job)
    after_first = next(b for b in beats if b["cursor"] == INGEST_BATCH)
    store.reads.clear()
    resumed = await _env([], after_first).run(acts.ingest, job)
    assert resumed == full
    read_docs = {r.artifact.sha256 for r in refs} & set(store.reads)
    assert read_docs == {r.artifact.sha256 for r in refs[INGEST_BATCH:]}  # the first batch is not re-read


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
