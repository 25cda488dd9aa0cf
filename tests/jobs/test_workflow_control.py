"""Job control on the real Temporal dev server: concurrency limit, cancel, wall-clock timeout,
and resume after a worker is stopped mid-embed."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from tests.jobs.helpers import EmbedLog, many_docs, running_jobs, store_docs
from turngate.artifacts import ArtifactStore
from turngate.core.manifest import ArtifactPointer
from turngate.jobs.cases.embedders import EmbedderSpec
from turngate.jobs.cases.segments import load_chunk, load_chunk_manifest
from turngate.jobs.control import get_job_status, start_job
from turngate.jobs.domain.chunking import ChunkParams
from turngate.jobs.domain.models import EmbedInput, IngestInput, JobCheckpoint, JobOptions
from turngate.jobs.domain.queues import JobConcurrency, JobQueues

FAST = JobOptions(wall_clock_s=60, heartbeat_timeout_s=5, checkpoint_items=2)


async def _ingest(client: Client, store: ArtifactStore, n_docs: int) -> ArtifactPointer:
    async with running_jobs(client, store) as (queues, _):
        handle = await start_job(
            client,
            "case.ingest",
            IngestInput(
                case_id="c1",
                documents=store_docs(store, many_docs(n_docs)),
                chunking=ChunkParams(size=2000, overlap=0),
                options=FAST,
            ),
            job_id=f"job-ingest-{uuid.uuid4().hex}",
            queues=queues,
        )
        return (await handle.result()).chunks


def _embed_input(chunks: ArtifactPointer, *, batch: int = 2, options: JobOptions = FAST) -> EmbedInput:
    return EmbedInput(case_id="c1", chunks=chunks, embedder=EmbedderSpec(batch_size=batch), options=options)


async def _until(check, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_with_limit_one_two_embed_jobs_never_overlap(temporal_client, store) -> None:
    chunks = await _ingest(temporal_client, store, 10)
    log = EmbedLog(delay_s=0.1)
    async with running_jobs(temporal_client, store, log=log, concurrency=JobConcurrency(embed=1)) as (q, _):
        handles = [
            await start_job(
                temporal_client,
                "case.embed",
                _embed_input(chunks),
                job_id=f"job-embed-{i}-{uuid.uuid4().hex}",
                queues=q,
            )
            for i in range(2)
        ]
        ids = [h.id for h in handles]
        await _until(lambda: _any_running(temporal_client, ids), 10, "one job to run")
        # Whichever got the slot: while it still runs, the other one waits (read the other first).
        for runner, waiter in (ids, ids[::-1]):
            other = await get_job_status(temporal_client, waiter, with_result=False)
            if (await get_job_status(temporal_client, runner, with_result=False)).state == "running":
                assert other.state == "queued", "a second job started while the first ran"
        await asyncio.gather(*(h.result() for h in handles))
    (_, a_end), (b_start, _) = sorted(log.lifetimes)
    assert a_end <= b_start, "the two embed jobs ran at the same time"
    assert len(log.texts) == 20


async def _any_running(client: Client, ids: list[str]) -> bool:
    return any([await _state_is(client, job_id, "running", "completed") for job_id in ids])


async def _state_is(client: Client, job_id: str, *states: str) -> bool:
    try:
        return (await get_job_status(client, job_id, with_result=False)).state in states
    except Exception:
        return False


async def test_cancel_stops_the_activity(temporal_client, store) -> None:
    chunks = await _ingest(temporal_client, store, 40)
    log = EmbedLog(delay_s=0.1)
    async with running_jobs(temporal_client, store, log=log) as (queues, _):
        handle = await start_job(
            temporal_client,
            "case.embed",
            _embed_input(chunks),
            job_id=f"job-embed-{uuid.uuid4().hex}",
            queues=queues,
        )
        await _until(lambda: _state_is(temporal_client, handle.id, "running"), 10, "the job to run")
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        embedded = len(log.texts)
        await asyncio.sleep(0.4)
        assert len(log.texts) == embedded < 40  # nothing embedded after the cancel
        status = await get_job_status(temporal_client, handle.id)
        assert status.state == "cancelled" and status.finished_at
        assert status.error == {"type": "job.cancelled", "message": "the job was cancelled"}


async def test_wall_clock_limit_ends_as_timed_out(temporal_client, store) -> None:
    chunks = await _ingest(temporal_client, store, 40)
    log = EmbedLog(delay_s=0.2)
    options = JobOptions(wall_clock_s=1, heartbeat_timeout_s=5, checkpoint_items=2)
    async with running_jobs(temporal_client, store, log=log) as (queues, _):
        handle = await start_job(
            temporal_client,
            "case.embed",
            _embed_input(chunks, options=options),
            job_id=f"job-embed-{uuid.uuid4().hex}",
            queues=queues,
        )
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        cause = failure.value.cause
        assert isinstance(cause, ApplicationError) and cause.type == "job.timed_out"
        assert "wall-clock limit of 1 s" in cause.message
        status = await get_job_status(temporal_client, handle.id)
    assert status.state == "timed_out"
    assert status.error and status.error["type"] == "job.timed_out"
    assert 0 < status.items_done < status.items_total == 40


async def test_stopped_worker_resumes_without_re_embedding(temporal_client, store) -> None:
    chunks = await _ingest(temporal_client, store, 24)
    ids = load_chunk_manifest(store, chunks).chunk_ids
    text_of = {load_chunk(store, cid).text: cid for cid in ids}
    queues = JobQueues(prefix=f"jobs-{uuid.uuid4().hex[:8]}")
    first, second = EmbedLog(hold_after=4), EmbedLog()  # the first worker gets stuck after 8 chunks
    handle = None
    seen = JobCheckpoint(started_at="")

    async def server_cursor_at_least(n: int) -> bool:
        nonlocal seen
        desc = await handle.describe()
        pending = desc.raw_description.pending_activities
        if not pending or not pending[0].heartbeat_details.payloads:
            return False
        [details] = await temporal_client.data_converter.decode(pending[0].heartbeat_details.payloads)
        seen = JobCheckpoint.model_validate(details)
        return seen.cursor >= n

    async with running_jobs(temporal_client, store, log=first, queues=queues):
        handle = await start_job(
            temporal_client,
            "case.embed",
            _embed_input(chunks),
            job_id=f"job-embed-{uuid.uuid4().hex}",
            queues=queues,
        )
        await _until(lambda: server_cursor_at_least(8), 20, "8 chunks checkpointed on the server")
    # the first worker is gone (shut down mid-embed); a new one picks the job up
    async with running_jobs(temporal_client, store, log=second, queues=queues):
        result = await asyncio.wait_for(handle.result(), 30)
    assert result.chunk_count == 24
    assert seen.cursor >= 8 and second.texts, "the second worker finished the job"
    done_before = set(ids[: seen.cursor])
    again = {text_of[t] for t in second.texts}
    assert not again & done_before, "chunks checkpointed before the crash were embedded again"
    assert {text_of[t] for t in first.texts + second.texts} == set(ids)
    assert len(second.texts) <= 24 - seen.cursor


async def test_a_long_job_continues_as_new_within_its_history_bound(temporal_client, store) -> None:
    """Steps of one checkpoint each and a 20-event bound: the job runs as several runs, each
    within the bound plus one step, carries its cursor (every chunk embedded once), and ends
    with its memo, summary and status as a one-run job's."""
    chunks = await _ingest(temporal_client, store, 24)
    log = EmbedLog()
    options = JobOptions(
        wall_clock_s=60, heartbeat_timeout_s=5, checkpoint_items=2, step_s=0.001, history_events_max=20
    )
    async with running_jobs(temporal_client, store, log=log) as (queues, _):
        handle = await start_job(
            temporal_client,
            "case.embed",
            _embed_input(chunks, options=options),
            job_id=f"job-embed-{uuid.uuid4().hex}",
            queues=queues,
        )
        result = await asyncio.wait_for(handle.result(), 60)
        status = await get_job_status(temporal_client, handle.id)
    assert result.chunk_count == 24 and sorted(log.texts) == sorted(set(log.texts)) and len(log.texts) == 24
    runs = [wf async for wf in temporal_client.list_workflows(f"WorkflowId = '{handle.id}'")]
    assert len(runs) >= 3, "the job never continued as new"
    for run in runs:
        events = (
            await temporal_client.get_workflow_handle(handle.id, run_id=run.run_id).fetch_history()
        ).events
        assert len(events) <= 20 + 8  # the bound, plus the step that crossed it
    assert status.state == "completed" and status.items_done == status.items_total == 24
    assert status.case_id == "c1" and status.started_at  # the memo carried over


async def test_a_global_limit_holds_across_two_worker_processes(temporal_client, store) -> None:
    """Two workers on the same queues (two processes, as Temporal sees them: two identities),
    each with one embed slot, and jobs limited to one slot globally: two embed jobs never run at
    the same time, and the waiting one shows as queued."""
    chunks = await _ingest(temporal_client, store, 10)
    log = EmbedLog(delay_s=0.1)
    queues = JobQueues(prefix=f"jobs-{uuid.uuid4().hex[:8]}")
    options = FAST.model_copy(update={"slots": 1})
    second = await Client.connect(
        temporal_client.service_client.config.target_host,
        data_converter=temporal_client.data_converter,
        identity=f"second-worker-{uuid.uuid4().hex[:6]}",
    )
    async with (
        running_jobs(temporal_client, store, log=log, queues=queues, concurrency=JobConcurrency(embed=1)),
        running_jobs(second, store, log=log, queues=queues, concurrency=JobConcurrency(embed=1)),
    ):
        handles = [
            await start_job(
                temporal_client,
                "case.embed",
                _embed_input(chunks, options=options),
                job_id=f"job-embed-{i}-{uuid.uuid4().hex}",
                queues=queues,
            )
            for i in range(2)
        ]
        await asyncio.gather(*(asyncio.wait_for(h.result(), 60) for h in handles))
    (_, a_end), (b_start, _) = sorted(log.lifetimes)
    assert a_end <= b_start, "two embed jobs ran at the same time across the two workers"
    assert len(log.texts) == 20
