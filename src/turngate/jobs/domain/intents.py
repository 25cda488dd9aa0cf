"""Case job intents at ingress: ``case.ingest``, ``case.embed``, ``case.index`` (docs/JOBS.md).

The envelope is the one of a chat intent (``interface_version`` 3, ``correlation_id``,
``payload.intent_type``) with a job body in ``payload.payload``. Validation is pure: what needs
the registry or the artifact store (default inputs, stored documents) is done by the API.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from turngate.core.events import AdmissionError
from turngate.core.manifest import ArtifactPointer
from turngate.jobs.domain.chunking import ChunkParams
from turngate.jobs.domain.embedder_spec import OFFLINE_VERSION, EmbedderSpec
from turngate.jobs.domain.index_params import IndexParams
from turngate.jobs.domain.models import JOB_TYPES, JobType
from turngate.settings import Settings

CaseId = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
Version = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]
MAX_DOCUMENTS = 10_000
CASE_SLUG_MAX = 40  # characters of the case id in a job id
JOB_HASH_HEX = 16  # hex digits of the hash in a job id (64 bits)
_CASE_SLUG = re.compile(r"[^a-z0-9._-]+")
#: Models used when TURNGATE_EMBEDDER names a remote embedder and TURNGATE_EMBEDDER_MODEL is unset.
DEFAULT_EMBEDDER_MODELS = {
    "offline": OFFLINE_VERSION,
    "openai": "text-embedding-3-small",
    "ollama": "nomic-embed-text",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DocumentIn(_Strict):
    """One document: inline ``text``, inline ``content_base64`` (e.g. a PDF), or an ``artifact``
    uploaded before (``POST /artifacts``). Exactly one of the three."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=512)]
    media_type: str | None = None
    text: str | None = None
    content_base64: str | None = None
    artifact: ArtifactPointer | None = None

    @model_validator(mode="after")
    def _one_source(self) -> DocumentIn:
        given = [f for f in ("text", "content_base64", "artifact") if getattr(self, f) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of text, content_base64, artifact")
        return self

    def inline_bytes(self) -> bytes | None:
        if self.text is not None:
            return self.text.encode("utf-8")
        if self.content_base64 is not None:
            try:
                return base64.b64decode(self.content_base64, validate=True)
            except binascii.Error as exc:
                raise ValueError(f"content_base64 of {self.name!r} is not base64: {exc}") from exc
        return None


class EmbedderIn(_Strict):
    """The embedder a client may choose. Never a URL: where remote embedders live is the
    operator's configuration (a client-chosen URL would make the worker post case texts anywhere)."""

    kind: Literal["offline", "openai", "ollama"] = "offline"
    model: str | None = None
    dim: Annotated[int, Field(ge=8, le=8192)] | None = None
    # texts per embedding call; None: TURNGATE_JOB_EMBED_BATCH_SIZE. Checkpoints group calls
    # into at least TURNGATE_JOB_CHECKPOINT_ITEMS chunks, so a small batch costs calls, not files.
    batch_size: Annotated[int, Field(ge=1, le=2048)] | None = None


class IngestBody(_Strict):
    case_id: CaseId
    documents: Annotated[list[DocumentIn], Field(min_length=1, max_length=MAX_DOCUMENTS)]
    chunking: ChunkParams = ChunkParams()


class EmbedBody(_Strict):
    case_id: CaseId
    chunks: Version | None = None  # a chunks record's version; default: the case's latest
    embedder: EmbedderIn | None = None  # default: TURNGATE_EMBEDDER


class IndexBody(_Strict):
    case_id: CaseId
    embeddings: Version | None = None  # default: the case's latest (its chunks come with it)
    params: IndexParams = IndexParams()


BODIES: dict[JobType, type[_Strict]] = {
    "case.ingest": IngestBody,
    "case.embed": EmbedBody,
    "case.index": IndexBody,
}


class JobIntentPayload(_Strict):
    stream_id: str = "default"
    lane: str = "jobs"
    actor: str = "user"
    intent_type: JobType
    payload: dict[str, Any]


class JobIntent(_Strict):
    interface_version: Literal[3]
    correlation_id: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
    payload: JobIntentPayload

    @property
    def job_type(self) -> JobType:
        return self.payload.intent_type


def is_job_intent(data: Any) -> bool:
    """Does this parsed body declare a case job (as opposed to a chat message)?"""
    payload = data.get("payload") if isinstance(data, dict) else None
    return isinstance(payload, dict) and payload.get("intent_type") in JOB_TYPES


def parse_job_intent(data: dict[str, Any]) -> tuple[JobIntent, IngestBody | EmbedBody | IndexBody]:
    """The envelope and its typed body, or :class:`AdmissionError` (nothing is started)."""
    data = {k: v for k, v in data.items() if k != "principal"}  # set by the gateway, never the client
    try:
        intent = JobIntent.model_validate(data)
        body = BODIES[intent.job_type].model_validate(intent.payload.payload)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        code = "admission.missing_field" if first.get("type") == "missing" else "admission.invalid_value"
        raise AdmissionError(code, f"{where}: {first.get('msg')}", where or None) from exc
    if isinstance(body, IngestBody):
        for n, doc in enumerate(body.documents):
            try:
                doc.inline_bytes()
            except ValueError as exc:
                raise AdmissionError(
                    "admission.invalid_value", str(exc), f"payload.payload.documents.{n}"
                ) from exc
    return intent, body  # type: ignore[return-value]


def job_id_for(
    job_type: JobType, deployment: str, tenant_id: str | None, correlation_id: str, *, case_id: str = ""
) -> str:
    """The job's workflow id, ``job-<type>-<case>-<hash>``: readable in the Temporal UI (the case
    id shortened to letters, digits, ``.``, ``_`` and ``-``), while the hash of (deployment,
    tenant, correlation id) keeps it unique: a resubmission names the same job, and tenants and
    deployments sharing a namespace never collide."""
    key = json.dumps([deployment, tenant_id, correlation_id]).encode("utf-8")
    case = _CASE_SLUG.sub("-", case_id.strip().lower()).strip("-.")[:CASE_SLUG_MAX].strip("-.") or "case"
    return f"job-{job_type.split('.', 1)[1]}-{case}-{hashlib.sha256(key).hexdigest()[:JOB_HASH_HEX]}"


def embedder_spec(chosen: EmbedderIn | None, settings: Settings) -> EmbedderSpec:
    """The embedder a case.embed job runs: the client's choice, else the configured default."""
    kind = chosen.kind if chosen else settings.embedder
    model = (chosen.model if chosen else None) or (
        settings.embedder_model if kind == settings.embedder else None
    )
    dim = (chosen.dim if chosen else None) or (settings.embedder_dim if kind == settings.embedder else None)
    spec: dict[str, Any] = {"kind": kind, "model": model or DEFAULT_EMBEDDER_MODELS[kind]}
    if dim is not None:
        spec["dim"] = dim
    elif kind != "offline":
        spec["dim"] = None  # the model's own dimension
    spec["batch_size"] = (chosen.batch_size if chosen else None) or settings.job_embed_batch_size
    return EmbedderSpec.model_validate(spec)
