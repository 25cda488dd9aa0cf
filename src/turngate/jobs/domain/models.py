"""Job inputs, results and the status model readers use (no Temporal types in here)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from turngate.core.manifest import ArtifactPointer
from turngate.jobs.domain.chunking import ChunkParams
from turngate.jobs.domain.embedder_spec import EmbedderSpec
from turngate.jobs.domain.index_params import IndexParams

JobType = Literal["case.ingest", "case.embed", "case.index"]
JOB_TYPES: tuple[JobType, ...] = ("case.ingest", "case.embed", "case.index")
JobState = Literal["queued", "running", "completed", "failed", "cancelled", "timed_out"]
FINAL_STATES: frozenset[str] = frozenset({"completed", "failed", "cancelled", "timed_out"})
#: The error type of a job that ran past its wall-clock limit (the activity raises it, the
#: workflow and the status readers recognise it).
TIMED_OUT = "job.timed_out"
#: The error type a cancelled job reports.
CANCELLED = "job.cancelled"

# Artifact kinds written by the jobs (chunks use chunking.CHUNK_KIND, indexes index.INDEX_KIND).
CHUNK_MANIFEST_KIND = "case-chunks"
EMBEDDING_SET_KIND = "case-embeddings"
SEGMENT_KIND = "case-job-segment"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


#: Fewest items a checkpoint covers in a job submitted through the API
#: (TURNGATE_JOB_CHECKPOINT_ITEMS is refused below it; tests start jobs with smaller ones).
MIN_CHECKPOINT_ITEMS = 16
#: Segments a heartbeat lists before they are stored as one segment group (bounds its size).
SEGMENT_GROUP_SIZE = 64
#: History bounds of one run of a job workflow: past either it continues as new (docs/JOBS.md).
HISTORY_EVENTS_MAX = 2_000
HISTORY_BYTES_MAX = 4 * 2**20


class JobOptions(_Model):
    """How a job runs: its wall-clock limit, how fast a lost worker is noticed, how much work a
    checkpoint and a step cover, and when the workflow continues as new. Every field but the
    wall clock has a default so inputs recorded before a field existed still parse."""

    wall_clock_s: float = Field(gt=0)
    heartbeat_timeout_s: float = Field(default=30.0, gt=0)
    # items (ingest: documents; embed: chunks) per stored segment, i.e. per checkpoint
    checkpoint_items: int = Field(default=256, ge=1, le=100_000)
    # one activity step runs at most this long, then hands its cursor to the workflow
    step_s: float = Field(default=60.0, gt=0)
    history_events_max: int = Field(default=HISTORY_EVENTS_MAX, ge=20, le=40_000)
    history_bytes_max: int = Field(default=HISTORY_BYTES_MAX, ge=64 * 1024, le=40 * 2**20)
    # run in steps (start_job sets it): a job recorded before steps existed lacks it and
    # replays its one whole-job activity
    steps: bool = False
    # jobs of this type that may run at once across every worker process (a slot is a child
    # workflow with one of ``slots`` ids: Temporal runs one workflow per id); 0: no global limit,
    # only each worker's activity slots
    slots: int = Field(default=0, ge=0, le=1_000)


class JobCheckpoint(BaseModel):
    """How far a job got: the resume cursor an activity heartbeats and a step hands its workflow.

    Items before ``cursor`` are stored in segments: the older ones listed by a chain of segment
    groups (``groups``: the newest group's digest, each group naming the one before), the rest
    in ``pending`` (fewer than :data:`SEGMENT_GROUP_SIZE`). Its size is bounded whatever the
    job's size. ``result`` is set once the job's output is stored (a retry returns it as is).
    """

    cursor: int = 0
    items_done: int = 0  # may run ahead of the cursor (the index build)
    items_total: int = 0
    started_at: str  # first attempt's start: the wall clock runs across retries and steps
    groups: str | None = None
    group_count: int = 0
    pending: list[str] = Field(default_factory=list)
    steps: int = 0  # activity steps run so far (across continue-as-new)
    result: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _old_segments(cls, data: Any) -> Any:
        # A heartbeat of a worker before segment groups listed every segment in ``segments``.
        if isinstance(data, dict) and "segments" in data:
            data = {k: v for k, v in data.items() if k != "segments"} | {"pending": data["segments"]}
        return data


class DocumentRef(_Model):
    """A document already stored as an artifact (an upload is stored first, then referenced)."""

    name: str = Field(min_length=1, max_length=512)
    artifact: ArtifactPointer
    media_type: str | None = None  # None: guessed from the name, then the leading bytes


class _JobInput(_Model):
    case_id: str = Field(min_length=1, max_length=200)
    # Who submitted the job (set by ingress from the caller's key; never a secret). The job's
    # output is recorded in this tenant's case registry.
    tenant_id: str | None = None
    key_id: str | None = None
    # where the previous run stopped: a job that continued as new starts its next run with it
    resume: JobCheckpoint | None = None


class IngestInput(_JobInput):
    documents: list[DocumentRef] = Field(min_length=1)
    chunking: ChunkParams = ChunkParams()
    options: JobOptions


class EmbedInput(_JobInput):
    chunks: ArtifactPointer  # the chunk manifest an ingest job produced
    embedder: EmbedderSpec = EmbedderSpec()
    options: JobOptions


class IndexInput(_JobInput):
    chunks: ArtifactPointer
    embeddings: ArtifactPointer  # the embedding set an embed job produced
    params: IndexParams = IndexParams()
    options: JobOptions


class DocumentChunks(_Model):
    sha256: str
    name: str
    media_type: str
    chunk_ids: list[str]


class ChunkManifest(_Model):
    """What ``case.ingest`` stores: every document and its chunk ids, in input order."""

    case_id: str
    chunking: ChunkParams
    documents: list[DocumentChunks]

    @property
    def chunk_ids(self) -> list[str]:
        """All chunk ids in document order, duplicates (repeated text) dropped."""
        seen: dict[str, None] = {}
        for doc in self.documents:
            seen.update(dict.fromkeys(doc.chunk_ids))
        return list(seen)


class EmbeddingSet(_Model):
    """What ``case.embed`` stores: the segments holding the vectors, in chunk-manifest order."""

    case_id: str
    chunk_manifest: str  # sha256 of the chunk manifest
    embedder_id: str
    dim: int
    segments: list[str]  # sha256 of each segment artifact
    count: int


class IngestResult(_Model):
    case_id: str
    chunks: ArtifactPointer
    documents: int
    chunk_count: int


class EmbedResult(_Model):
    case_id: str
    embeddings: ArtifactPointer
    embedder_id: str
    chunk_count: int


class IndexResult(_Model):
    case_id: str
    index_version: str
    index: ArtifactPointer
    embedder_id: str
    chunk_count: int


class IngestStep(_Model):
    """What one ``case.ingest`` step returns: the cursor, and the result once the job is done."""

    checkpoint: JobCheckpoint
    result: IngestResult | None = None


class EmbedStep(_Model):
    checkpoint: JobCheckpoint
    result: EmbedResult | None = None


class IndexStep(_Model):
    checkpoint: JobCheckpoint
    result: IndexResult | None = None


class ProgressReport(_Model):
    """Sent by a job's activity to its workflow (signal ``report_progress``) by workers before
    progress was read from heartbeats; still accepted so such a job's history replays."""

    items_done: int = Field(ge=0)
    items_total: int = Field(ge=0)
    started_at: str


class JobProgress(BaseModel):
    """The workflow's view of its job (query ``progress``)."""

    state: JobState = "queued"
    items_done: int = 0
    items_total: int = 0
    started_at: str | None = None
    finished_at: str | None = None
    error: dict[str, Any] | None = None
    steps: int = 0
    rate_per_s: float | None = None  # items per second since the job started

    @property
    def percent(self) -> float:
        if self.state == "completed":
            return 100.0
        return round(100.0 * self.items_done / self.items_total, 1) if self.items_total else 0.0


class JobStatus(BaseModel):
    """A job as ``GET /jobs/{id}`` shows it."""

    id: str
    type: JobType
    case_id: str | None
    tenant_id: str | None = None
    state: JobState
    progress: float = Field(ge=0, le=100, description="percent of items done")
    items_done: int
    items_total: int
    submitted_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    error: dict[str, Any] | None = None  # {"type": "job.timed_out", "message": "..."}
    result: dict[str, Any] | None = None
