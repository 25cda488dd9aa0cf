"""The case registry: what each completed case job produced, per tenant and case.

One row per job (``case_records``, migration 0005), appended by the job's activity when its work
is stored, never updated. Ingress reads it for a job's default inputs (embed the case's latest
chunks, index its latest embeddings); a turn's ``case_query`` reads it for the index version to
pin. Tenants match exactly: ``None`` (no authentication, ``turngate dev``) is a tenant of its
own, so a case name never resolves across tenants.

The registry is a lookup, not evidence: what a turn saw is proven by its DECISION (the pinned
``index_version`` and the index artifact's sha256, re-hashed by ``turngate verify``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import IntegrityError

from turngate.core.manifest import ArtifactPointer
from turngate.jobs.domain.embedder_spec import EmbedderSpec
from turngate.ledger.rows import (
    utc_now_iso,
)
from turngate.ledger.schema import case_records

RecordKind = Literal["chunks", "embeddings", "index"]


@dataclass(frozen=True)
class CaseRecord:
    seq: int
    tenant_id: str | None
    case_id: str
    kind: RecordKind
    job_id: str
    version: str
    pointer: ArtifactPointer
    detail: dict[str, Any]
    key_id: str | None
    created_at: str

    @property
    def index_version(self) -> str:
        return self.version

    @property
    def index(self) -> ArtifactPointer:
        return self.pointer

    @property
    def embedder(self) -> EmbedderSpec:
        """The embedder of an embeddings or index record (queries must use the same one)."""
        return EmbedderSpec.model_validate(self.detail.get("embedder") or {})

    def as_dict(self) -> dict[str, Any]:
        """For the API: no tenant or key (the caller's own) and no internal sequence number."""
        return {
            "kind": self.kind,
            "job_id": self.job_id,
            "version": self.version,
            "pointer": self.pointer.model_dump(mode="json", exclude_none=True),
            "detail": self.detail,
            "created_at": self.created_at,
        }


class CaseRegistry:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def record(
        self,
        *,
        tenant_id: str | None,
        case_id: str,
        kind: RecordKind,
        job_id: str,
        version: str,
        pointer: ArtifactPointer,
        detail: dict[str, Any],
        key_id: str | None = None,
    ) -> CaseRecord:
        """Append the job's output; a retried activity that recorded already gets the same row."""
        row = {
            "tenant_id": tenant_id,
            "case_id": case_id,
            "kind": kind,
            "job_id": job_id,
            "version": version,
            "pointer": pointer.model_dump_json(exclude_none=True),
            "detail": json.dumps(detail, sort_keys=True),
            "key_id": key_id,
            "created_at": utc_now_iso(),
        }
        try:
            with self._engine.begin() as conn:
                conn.execute(insert(case_records).values(**row))
        except IntegrityError:
            pass  # this job recorded already (unique job_id)
        found = self.by_job(job_id)
        if found is None:  # pragma: no cover - the insert or the earlier one is there
            raise LookupError(f"case record of job {job_id} vanished")
        return found

    def by_job(self, job_id: str) -> CaseRecord | None:
        return self._one(select(case_records).where(case_records.c.job_id == job_id))

    def latest(
        self, *, tenant_id: str | None, case_id: str, kind: RecordKind, version: str | None = None
    ) -> CaseRecord | None:
        """The case's newest record of ``kind`` (with ``version``: that one) within the tenant."""
        query = select(case_records).where(
            case_records.c.case_id == case_id, case_records.c.kind == kind, _tenant_is(tenant_id)
        )
        if version is not None:
            query = query.where(case_records.c.version == version)
        return self._one(query.order_by(case_records.c.seq.desc()).limit(1))

    def find_case_index(
        self, *, tenant_id: str | None, case_id: str, index_version: str | None
    ) -> CaseRecord | None:
        """What a ``case_query`` ref resolves against: the declared index version, else the latest."""
        return self.latest(tenant_id=tenant_id, case_id=case_id, kind="index", version=index_version)

    def records(self, *, tenant_id: str | None, case_id: str, limit: int = 200) -> list[CaseRecord]:
        """The case's records, newest first."""
        query = (
            select(case_records)
            .where(case_records.c.case_id == case_id, _tenant_is(tenant_id))
            .order_by(case_records.c.seq.desc())
            .limit(limit)
        )
        with self._engine.connect() as conn:
            return [_record(row._mapping) for row in conn.execute(query)]

    def _one(self, query: Any) -> CaseRecord | None:
        with self._engine.connect() as conn:
            row = conn.execute(query).first()
        return _record(row._mapping) if row is not None else None


def _tenant_is(tenant_id: str | None) -> Any:
    column = case_records.c.tenant_id
    return column.is_(None) if tenant_id is None else column == tenant_id


def _record(row: Any) -> CaseRecord:
    return CaseRecord(
        seq=int(row["seq"]),
        tenant_id=row["tenant_id"],
        case_id=row["case_id"],
        kind=row["kind"],
        job_id=row["job_id"],
        version=row["version"],
        pointer=ArtifactPointer.model_validate_json(row["pointer"]),
        detail=json.loads(row["detail"]),
        key_id=row["key_id"],
        created_at=row["created_at"],
    )
