"""``job_workers``: one Temporal worker per job type, for the worker process to run.

Each job type has its own task queue; its ``max_concurrent_activities`` is that type's job
concurrency (one job = one activity), so with 1 two jobs of a type never run at the same time,
and ingest jobs never wait behind embed jobs.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from turngate.artifacts import ArtifactStore
from turngate.jobs.activities import JobActivities
from turngate.jobs.cases.embedders import Embedder, build_embedder
from turngate.jobs.cases.registry import CaseRegistry
from turngate.jobs.domain.embedder_spec import EmbedderSpec
from turngate.jobs.domain.models import JOB_TYPES
from turngate.jobs.domain.queues import JobConcurrency, JobQueues
from turngate.jobs.workflows import CaseEmbedWorkflow, CaseIndexWorkflow, CaseIngestWorkflow, JobSlotWorkflow


def job_workers(
    client: Client,
    *,
    artifacts: ArtifactStore,
    concurrency: JobConcurrency | None = None,
    queues: JobQueues | None = None,
    embedder_factory: Callable[[EmbedderSpec], Embedder] = build_embedder,
    work_dir: Path | None = None,
    heartbeat_throttle: timedelta = timedelta(seconds=1),
    progress_interval_s: float = 1.0,
    workflow_runner: WorkflowRunner | None = None,
    registry: CaseRegistry | None = None,
) -> list[Worker]:
    """Workers for ``case.ingest``, ``case.embed`` and ``case.index`` (not started: ``run()`` them).

    ``heartbeat_throttle`` caps how stale the server's copy of a job's resume cursor can be (the
    SDK default, 80% of the heartbeat timeout, would lose up to 24 s of work on a crash).
    ``registry``: where completed jobs record their outputs (the worker process passes the
    ledger database's; None records nothing).
    """
    concurrency = concurrency or JobConcurrency()
    queues = queues or JobQueues()
    activities = JobActivities(
        artifacts,
        embedder_factory=embedder_factory,
        work_dir=work_dir,
        progress_interval_s=progress_interval_s,
        registry=registry,
    )
    # the step activity, and the whole-job one jobs started before steps still call
    per_type: dict[str, tuple[type, list[Callable[..., Any]]]] = {
        "case.ingest": (CaseIngestWorkflow, [activities.ingest_step, activities.ingest]),
        "case.embed": (CaseEmbedWorkflow, [activities.embed_step, activities.embed]),
        "case.index": (CaseIndexWorkflow, [activities.index_step, activities.index]),
    }
    return [
        Worker(
            client,
            task_queue=queues.for_type(job_type),
            workflows=[per_type[job_type][0], JobSlotWorkflow],
            activities=per_type[job_type][1],
            max_concurrent_activities=concurrency.for_type(job_type),
            max_heartbeat_throttle_interval=heartbeat_throttle,
            default_heartbeat_throttle_interval=heartbeat_throttle,
            # None: the SDK's default, a sandbox with the default restrictions.
            workflow_runner=workflow_runner or SandboxedWorkflowRunner(),
        )
        for job_type in JOB_TYPES
    ]
