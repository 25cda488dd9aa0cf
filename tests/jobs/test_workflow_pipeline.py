"""ingest -> embed -> index -> retrieve, end to end on the real Temporal dev server."""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.jobs.helpers import SAMPLE_DOCS, EmbedLog, running_jobs, store_docs
from turngate.jobs.cases.embedders import EmbedderSpec, OfflineEmbedder
from turngate.jobs.cases.retrieval import CaseIndex
from turngate.jobs.control import get_job_status, list_jobs, start_job
from turngate.jobs.domain.chunking import ChunkParams
from turngate.jobs.domain.models import EmbedInput, IndexInput, IngestInput, JobOptions

OPTIONS = JobOptions(wall_clock_s=60, heartbeat_timeout_s=5)


async def test_ingest_embed_index_then_retrieve(temporal_client, store, tmp_path: Path) -> None:
    log = EmbedLog()
    case = f"case-{uuid.uuid4().hex[:6]}"
    async with running_jobs(temporal_client, store, log=log) as (queues, _):
        ingest = await start_job(
            temporal_client,
            "case.ingest",
            IngestInput(
                case_id=case,
                documents=store_docs(store, SAMPLE_DOCS),
                chunking=ChunkParams(size=120, overlap=20),
                options=OPTIONS,
            ),
            job_id=f"job-ingest-{uuid.uuid4().hex}",
            queues=queues,
        )
        ingested = await ingest.result()
        assert ingested.documents == 4 and ingested.chunk_count >= 5

        embed = await start_job(
            temporal_client,
            "case.embed",
            EmbedInput(
                case_id=case, chunks=ingested.chunks, embedder=EmbedderSpec(batch_size=3), options=OPTIONS
            ),
            job_id=f"job-embed-{uuid.uuid4().hex}",
            queues=queues,
        )
        embedded = await embed.result()
        assert embedded.chunk_count == ingested.chunk_count
        assert len(log.texts) == ingested.chunk_count  # every chunk embedded exactly once

        index = await start_job(
            temporal_client,
            "case.index",
            IndexInput(case_id=case, chunks=ingested.chunks, embeddings=embedded.embeddings, options=OPTIONS),
            job_id=f"job-index-{uuid.uuid4().hex}",
            queues=queues,
        )
        indexed = await index.result()
        assert indexed.index_version.startswith("sha256:")

        status = await get_job_status(temporal_client, embed.id)
        assert status.state == "completed" and status.progress == 100.0
        assert status.type == "case.embed" and status.case_id == case
        assert status.items_done == status.items_total == ingested.chunk_count
        assert status.started_at and status.finished_at and status.error is None
        listed = {job.id: job.state for job in await list_jobs(temporal_client, limit=50)}
        # visibility is eventually consistent: the listing has the jobs it has, with their states
        assert all(listed.get(h.id, "completed") == "completed" for h in (ingest, embed, index))

    path = tmp_path / "index.sqlite3"
    path.write_bytes(store.get(indexed.index))
    case_index = CaseIndex(path)
    assert case_index.index_version == indexed.index_version
    query = "quarks and gluons"
    result = case_index.retrieve(query, OfflineEmbedder().embed_sync([query])[0], top_k=1, min_score=0.2)
    assert "Quantum chromodynamics" in case_index.text(result.selected_chunk_ids[0])
    assert len(result.candidates) == ingested.chunk_count  # small case: every chunk is a candidate
    assert {e.reason for e in result.exclusions} <= {"below_threshold", "over_top_k"}
    assert len(result.exclusions) == ingested.chunk_count - 1
    case_index.close()
