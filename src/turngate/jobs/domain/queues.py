"""How jobs are named in Temporal (workflow and activity names, one task queue per job type) and
the per-type concurrency. The workflows, the activities and the code that starts jobs all take
the names from here, so none of them imports another."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from turngate.jobs.domain.models import JobType
from turngate.settings import Settings

WORKFLOW_NAMES: dict[JobType, str] = {
    "case.ingest": "CaseIngestWorkflow",
    "case.embed": "CaseEmbedWorkflow",
    "case.index": "CaseIndexWorkflow",
}
JOB_TYPE_OF_WORKFLOW: dict[str, JobType] = {name: kind for kind, name in WORKFLOW_NAMES.items()}
INGEST_ACTIVITY = "turngate.jobs.ingest"
EMBED_ACTIVITY = "turngate.jobs.embed"
INDEX_ACTIVITY = "turngate.jobs.index"
# One step of a job (since jobs run in steps); the names above run a whole job (jobs before).
INGEST_STEP_ACTIVITY = "turngate.jobs.ingest.step"
EMBED_STEP_ACTIVITY = "turngate.jobs.embed.step"
INDEX_STEP_ACTIVITY = "turngate.jobs.index.step"


class JobQueues(BaseModel):
    """Task queue names; ``prefix`` lets tests (or two deployments) use their own."""

    model_config = ConfigDict(frozen=True)

    prefix: str = "jobs"

    def for_type(self, job_type: JobType) -> str:
        return f"{self.prefix}-{job_type.split('.', 1)[1]}"


class JobConcurrency(BaseModel):
    """Activity slots per job type and worker: with 1, two jobs of that type never overlap."""

    model_config = ConfigDict(frozen=True)

    ingest: int = Field(default=2, ge=1)
    embed: int = Field(default=1, ge=1)
    index: int = Field(default=1, ge=1)

    def for_type(self, job_type: JobType) -> int:
        return int(getattr(self, job_type.split(".", 1)[1]))


def job_concurrency(settings: Settings) -> JobConcurrency:
    """``TURNGATE_JOB_CONCURRENCY_{INGEST,EMBED,INDEX}`` (or the ``DBL_`` names)."""
    return JobConcurrency(
        ingest=settings.job_concurrency_ingest,
        embed=settings.job_concurrency_embed,
        index=settings.job_concurrency_index,
    )


def job_queues(settings: Settings) -> JobQueues:
    return JobQueues(prefix=settings.job_queue_prefix)
