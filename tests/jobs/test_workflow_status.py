"""What readers see of a job (JobStatus, the progress query), failures, and history replay."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from tests.jobs.helpers import EmbedLog, many_docs, running_jobs, store_docs
from turngate.jobs.cases.embedders import EmbedderSpec
from turngate.jobs.control import (
    cancel_job,
    count_open_jobs,
    get_job_status,
    job_runtime,
    reported_state,
    start_job,
)
from turngate.jobs.domain.chunking import ChunkParams
from turngate.jobs.domain.models import EmbedInput, IngestInput, JobOptions, JobState
from turngate.jobs.domain.queues import JobConcurrency
from turngate.jobs.workflows import JOB_WORKFLOWS

OPTIONS = JobOptions(wall_clock_s=60, heartbeat_timeout_s=5)


async def test_unreadable_document_fails_the_job_without_retries(temporal_client, store) -> None:
    refs = store_docs(store, {"broken.pdf": b"%PDF-1.4 this is not really a pdf"})
    async with running_jobs(temporal_client, store) as (queues, _):
        handle = await start_job(
            temporal_client,
            "case.ingest",
            IngestInput(case_id="c", documents=refs, options=OPTIONS),
            job_id=f"job-ingest-{uuid.uuid4().hex}",
            queues=queues,
        )
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 20)
        status = await get_job_status(temporal_client, handle.id)
    assert status.state == "failed"
    assert status.error and status.error["type"] == "job.document_unreadable"
    assert "PDF" in status.error["message"]


async def test_progress_is_visible_while_running_and_history_replays(temporal_client, store) -> None:
    async with running_jobs(temporal_client, store) as (queues, _):
        ingest = await start_job(
            temporal_client,
            "case.ingest",
            IngestInput(
                case_id="c",
                documents=store_docs(store, many_docs(20)),
                chunking=ChunkParams(size=2000, overlap=0),
                options=OPTIONS,
            ),
            job_id=f"job-ingest-{uuid.uuid4().hex}",
            queues=queues,
        )
        chunks = (await ingest.result()).chunks
    log = EmbedLog(delay_s=0.1)
    async with running_jobs(temporal_client, store, log=log) as (queues, _):
        embed = await start_job(
            temporal_client,
            "case.embed",
            EmbedInput(case_id="c", chunks=chunks, embedder=EmbedderSpec(batch_size=2), options=OPTIONS),
            job_id=f"job-embed-{uuid.uuid4().hex}",
            queues=queues,
        )
        seen = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            status = await get_job_status(temporal_client, embed.id)
            seen.append((status.state, status.items_done, status.progress))
            if status.state == "running" and 0 < status.items_done < status.items_total:
                break
            await asyncio.sleep(0.05)
        assert status.items_total == 20 and 0 < status.progress < 100
        assert status.started_at is not None and status.finished_at is None
        runtime = await job_runtime(
            temporal_client, queue_max=100, queues=queues, concurrency=JobConcurrency(embed=3)
        )
        assert runtime["queue_max"] == 100 and runtime["active_counts"]["case.embed"] >= 1
        # one worker process polls these queues: the effective limits are its own
        assert runtime["workers"] == {"case.ingest": 1, "case.embed": 1, "case.index": 1}
        assert runtime["effective_concurrency"] == {"case.ingest": 2, "case.embed": 3, "case.index": 1}
        assert set(runtime["queue_sizes"]) == {"case.ingest", "case.embed", "case.index"}
        assert await count_open_jobs(temporal_client, "case.embed") >= 1
        await cancel_job(temporal_client, embed.id)
        with pytest.raises(WorkflowFailureError):
            await embed.result()
        histories = [await h.fetch_history() for h in (ingest, embed)]
    # The recorded histories (a completed and a cancelled job) replay against today's code.
    replayer = Replayer(workflows=list(JOB_WORKFLOWS), data_converter=pydantic_data_converter)
    for history in histories:
        await replayer.replay_workflow(history)


@pytest.mark.parametrize(
    ("status", "progress_state", "expected"),
    [
        # the progress says completed a moment before the run closes: still running, since its
        # result is not readable yet
        (WorkflowExecutionStatus.RUNNING, "completed", "running"),
        (WorkflowExecutionStatus.RUNNING, "failed", "running"),
        (WorkflowExecutionStatus.RUNNING, "running", "running"),
        (WorkflowExecutionStatus.RUNNING, None, "queued"),
        (WorkflowExecutionStatus.COMPLETED, "running", "completed"),
        (WorkflowExecutionStatus.TERMINATED, "running", "cancelled"),
        (WorkflowExecutionStatus.TIMED_OUT, None, "timed_out"),
    ],
)
def test_a_job_is_final_only_once_its_run_has_closed(
    status: WorkflowExecutionStatus, progress_state: JobState | None, expected: str
) -> None:
    assert reported_state(status, progress_state) == expected
