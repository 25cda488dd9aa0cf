"""The case registry: append-only records per (tenant, case), exact tenant matching (None is a
tenant of its own), latest vs a declared version, idempotent per job id; on both backends."""

from __future__ import annotations

import pytest

from turngate.core.manifest import ArtifactPointer
from turngate.jobs.cases.registry import CaseRegistry
from turngate.ledger import LedgerStore


def pointer(n: int) -> ArtifactPointer:
    digest = f"{n:064x}"
    return ArtifactPointer(
        artifact_id=f"sha256:{digest}",
        path=f"index/case-index/{digest}",
        sha256=f"sha256:{digest}",
        size_bytes=n,
    )


@pytest.fixture
def registry(store: LedgerStore) -> CaseRegistry:
    return CaseRegistry(store.engine)


def add(
    registry: CaseRegistry, tenant: str | None, job: str, kind: str = "index", n: int = 1, case: str = "c"
):
    return registry.record(
        tenant_id=tenant,
        case_id=case,
        kind=kind,  # type: ignore[arg-type]
        job_id=job,
        version=f"sha256:{n:064x}",
        pointer=pointer(n),
        detail={"embedder": {"kind": "offline"}, "n": n},
        key_id="k1",
    )


def test_latest_and_declared_versions_within_one_tenant(registry: CaseRegistry) -> None:
    add(registry, "t1", "j1", n=1)
    add(registry, "t1", "j2", n=2)
    assert registry.find_case_index(tenant_id="t1", case_id="c", index_version=None).job_id == "j2"
    older = registry.find_case_index(tenant_id="t1", case_id="c", index_version=f"sha256:{1:064x}")
    assert older.job_id == "j1" and older.index == pointer(1) and older.embedder.kind == "offline"
    assert registry.find_case_index(tenant_id="t1", case_id="c", index_version="sha256:" + "f" * 64) is None


def test_tenants_match_exactly_and_none_is_its_own_tenant(registry: CaseRegistry) -> None:
    add(registry, "t1", "j1", n=1)
    add(registry, None, "j2", n=2)
    assert registry.find_case_index(tenant_id="t2", case_id="c", index_version=None) is None
    assert registry.find_case_index(tenant_id=None, case_id="c", index_version=None).job_id == "j2"
    assert registry.find_case_index(tenant_id="t1", case_id="c", index_version=None).job_id == "j1"
    # another tenant cannot reach t1's version even by naming it
    assert registry.find_case_index(tenant_id="t2", case_id="c", index_version=f"sha256:{1:064x}") is None


def test_a_retried_job_records_once_and_records_list_newest_first(registry: CaseRegistry) -> None:
    first = add(registry, "t1", "j1", kind="chunks", n=1)
    again = add(registry, "t1", "j1", kind="chunks", n=1)
    assert first == again
    add(registry, "t1", "j2", kind="embeddings", n=2)
    add(registry, "t1", "j3", kind="index", n=3)
    assert [r.kind for r in registry.records(tenant_id="t1", case_id="c")] == [
        "index",
        "embeddings",
        "chunks",
    ]
    assert registry.latest(tenant_id="t1", case_id="c", kind="chunks").version == f"sha256:{1:064x}"
    assert registry.records(tenant_id="t1", case_id="other") == []
    public = first.as_dict()
    assert "tenant_id" not in public and "key_id" not in public and public["job_id"] == "j1"
