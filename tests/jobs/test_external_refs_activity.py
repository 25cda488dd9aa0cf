"""The turn's external-refs activity (ActivityEnvironment, no server): a case_query pinned to the
registry's index version within the tenant, and a Workbench handle fetched, stored and named by
digest, or refused with its reason; transient fetch failures retried, recorded on the last try."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tests.jobs.helpers import TEXTS, stored_index
from tests.security.fake_resolver import LOOPBACK_ALLOWED, FakeResolver, fake_resolver
from turngate.activities.external_refs import MAX_ATTEMPTS, ExternalRefActivities
from turngate.artifacts import LocalArtifactStore
from turngate.jobs.cases.embedders import EmbedderSpec
from turngate.security.workbench import WorkbenchConfig
from turngate.workflows.shared import ExternalRefsInput


class Registry:
    """Stands in for the ledger's case registry: one index for tenant ``t1``'s case ``c1``."""

    def __init__(self, pointer: Any, version: str) -> None:
        self.record = SimpleNamespace(index_version=version, index=pointer, embedder=EmbedderSpec())
        self.asked: list[tuple[str | None, str, str | None]] = []

    def find_case_index(self, *, tenant_id: str | None, case_id: str, index_version: str | None) -> Any:
        self.asked.append((tenant_id, case_id, index_version))
        if (tenant_id, case_id) != ("t1", "c1"):
            return None
        if index_version not in (None, self.record.index_version):
            return None
        return self.record


@pytest.fixture
def resolver() -> Iterator[FakeResolver]:
    with fake_resolver() as server:
        yield server


def activities(
    tmp_path: Path, *, workbench: WorkbenchConfig | None = None
) -> tuple[ExternalRefActivities, Registry]:
    store = LocalArtifactStore(tmp_path / "artifacts")
    pointer, version = stored_index(store)
    registry = Registry(pointer, version)
    acts = ExternalRefActivities(
        registry,  # type: ignore[arg-type]
        store,
        cache_dir=tmp_path / "cache",
        workbench=workbench or WorkbenchConfig(),
    )
    return acts, registry


def run(
    acts: ExternalRefActivities, refs: list[dict[str, Any]], *, tenant: str | None = "t1", attempt: int = 1
):
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=attempt)
    return env.run(
        acts.resolve_external_refs, ExternalRefsInput(tenant_id=tenant, correlation_id="c", refs=refs)
    )


async def test_a_case_query_is_pinned_to_the_latest_index_and_records_everything(tmp_path: Path) -> None:
    acts, registry = activities(tmp_path)
    ref = {
        "ref_type": "case_query",
        "case_id": "c1",
        "query": "lighthouse keeper",
        "top_k": 1,
        "min_score": 0.05,
    }
    result = await run(acts, [ref])
    assert result.error is None and registry.asked == [("t1", "c1", None)]
    version = registry.record.index_version
    [item] = result.items
    assert "lighthouse" in item.text and item.text in TEXTS
    assert item.source_ref == f"case_query[0]:c1@{version}" and item.included_reason == "declared_case_query"
    [record] = result.records
    assert record["index_version"] == version and record["declared_index_version"] is None
    assert record["selected_chunk_ids"] == [item.item_id]
    assert set(record["candidate_chunk_ids"]) == set(record["scores"])
    assert {e.excluded_reason for e in result.excluded} <= {"over_top_k", "score_below_threshold"}
    assert len(result.excluded) == len(record["candidate_chunk_ids"]) - 1
    again = await run(acts, [ref | {"index_version": version}])  # pinned explicitly: same answer
    assert again.items == result.items
    acts.close()


@pytest.mark.parametrize(
    ("tenant", "ref"),
    [
        ("t2", {"case_id": "c1"}),  # another tenant's case: as if absent
        ("t1", {"case_id": "nope"}),
        ("t1", {"case_id": "c1", "index_version": "sha256:" + "0" * 64}),
    ],
)
async def test_an_unknown_case_or_version_denies_with_a_code(tmp_path: Path, tenant: str, ref: dict) -> None:
    acts, _ = activities(tmp_path)
    result = await run(acts, [{"ref_type": "case_query", "query": "q"} | ref], tenant=tenant)
    assert result.error is not None and result.error.code == "case_query.index_not_found"
    assert result.items == ()
    acts.close()


async def test_a_fetched_handle_is_stored_and_named_by_its_digest(
    tmp_path: Path, resolver: FakeResolver
) -> None:
    config = WorkbenchConfig(
        enabled=True,
        resolver_url=resolver.base_url,
        admit_kinds=("note",),
        timeout_ms=1000,
        deny_networks=LOOPBACK_ALLOWED,
    )
    acts, _ = activities(tmp_path, workbench=config)
    result = await run(acts, [{"ref_type": "artifact.handle", "ref_id": "ok", "kind": "note"}])
    [item] = result.items
    assert item.text == "hello from the workbench" and item.included_reason == "declared_handle"
    [record] = result.records
    assert record["reason_code"] == "workbench.fetched" and record["content_sha256"] == item.item_id
    stored = LocalArtifactStore(tmp_path / "artifacts").get(record["artifact"]["sha256"])
    assert stored == b"hello from the workbench"
    acts.close()


@pytest.mark.parametrize(
    ("handle", "kind", "reason"),
    [
        ("html", "note", "workbench.content_type"),
        ("ok", "secret", "workbench.kind_not_admitted"),
        ("missing", "note", "workbench.http_error"),
    ],
)
async def test_a_refused_handle_is_recorded_never_dropped(
    tmp_path: Path, resolver: FakeResolver, handle: str, kind: str, reason: str
) -> None:
    config = WorkbenchConfig(
        enabled=True,
        resolver_url=resolver.base_url,
        admit_kinds=("note",),
        timeout_ms=1000,
        deny_networks=LOOPBACK_ALLOWED,
    )
    acts, _ = activities(tmp_path, workbench=config)
    result = await run(acts, [{"ref_type": "artifact.handle", "ref_id": handle, "kind": kind}])
    assert result.items == () and result.error is None
    assert [r["reason_code"] for r in result.records] == [reason]
    assert [(e.item_id, e.excluded_reason) for e in result.excluded] == [
        (f"handle:{handle}", "fetch_refused")
    ]
    acts.close()


async def test_fetch_is_off_by_default(tmp_path: Path) -> None:
    acts, _ = activities(tmp_path)
    result = await run(acts, [{"ref_type": "artifact.handle", "ref_id": "ok", "kind": "note"}])
    assert [r["reason_code"] for r in result.records] == ["workbench.disabled"]


async def test_a_timeout_is_retried_then_recorded_on_the_last_attempt(
    tmp_path: Path, resolver: FakeResolver
) -> None:
    config = WorkbenchConfig(
        enabled=True,
        resolver_url=resolver.base_url,
        admit_kinds=("note",),
        timeout_ms=200,
        deny_networks=LOOPBACK_ALLOWED,
    )
    acts, _ = activities(tmp_path, workbench=config)
    ref = {"ref_type": "artifact.handle", "ref_id": "slow", "kind": "note"}
    with pytest.raises(ApplicationError) as caught:
        await run(acts, [ref], attempt=1)
    assert caught.value.type == "workbench.timeout"
    last = await run(acts, [ref], attempt=MAX_ATTEMPTS)
    assert [r["reason_code"] for r in last.records] == ["workbench.timeout"]
