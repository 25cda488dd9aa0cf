"""The case jobs' activities as their workflows refer to them: name, input and result type.

The job workflows call these definitions (``workflow.execute_activity(ingest, ...)``), never the
implementations in ``turngate.jobs.activities``: their dependencies (parsers, embedders, the
artifact store) stay out of the workflow sandbox, and the result type comes from the
definition's annotation. The worker registers ``JobActivities`` under the same names;
tests/replay/test_activity_definitions.py checks that each one matches its definition.

The names are recorded in every job's history: never rename them.
"""

from __future__ import annotations

from temporalio import activity

from turngate.jobs.domain.models import (
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
)
from turngate.jobs.domain.queues import (
    EMBED_ACTIVITY,
    EMBED_STEP_ACTIVITY,
    INDEX_ACTIVITY,
    INDEX_STEP_ACTIVITY,
    INGEST_ACTIVITY,
    INGEST_STEP_ACTIVITY,
)


def _definition_only(name: str) -> NotImplementedError:
    return NotImplementedError(f"{name} is a definition: the worker registers its implementation")


@activity.defn(name=INGEST_ACTIVITY)
async def ingest(input: IngestInput) -> IngestResult:
    """Parse and store a case's documents (``JobActivities.ingest``)."""
    raise _definition_only(INGEST_ACTIVITY)


@activity.defn(name=EMBED_ACTIVITY)
async def embed(input: EmbedInput) -> EmbedResult:
    """Chunk and embed a case's documents (``JobActivities.embed``)."""
    raise _definition_only(EMBED_ACTIVITY)


@activity.defn(name=INDEX_ACTIVITY)
async def index(input: IndexInput) -> IndexResult:
    """Build a case's retrieval index (``JobActivities.index``)."""
    raise _definition_only(INDEX_ACTIVITY)


@activity.defn(name=INGEST_STEP_ACTIVITY)
async def ingest_step(input: IngestInput, resume: JobCheckpoint | None) -> IngestStep:
    """One step of an ingest from ``resume`` (``JobActivities.ingest_step``)."""
    raise _definition_only(INGEST_STEP_ACTIVITY)


@activity.defn(name=EMBED_STEP_ACTIVITY)
async def embed_step(input: EmbedInput, resume: JobCheckpoint | None) -> EmbedStep:
    """One step of an embed from ``resume`` (``JobActivities.embed_step``)."""
    raise _definition_only(EMBED_STEP_ACTIVITY)


@activity.defn(name=INDEX_STEP_ACTIVITY)
async def index_step(input: IndexInput, resume: JobCheckpoint | None) -> IndexStep:
    """The index build (one step: ``JobActivities.index_step``)."""
    raise _definition_only(INDEX_STEP_ACTIVITY)
