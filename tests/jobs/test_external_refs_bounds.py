"""The external-refs activity's bounds hold against a server on loopback that accepts connections
and never answers: a Workbench fetch configured to wait ten minutes, and a query embedder whose
index spec says ten minutes, are both cut by the attempt's start-to-close timeout, heartbeating
meanwhile; the nested bounds themselves (fetch, embedding < attempt < schedule-to-close).

Which bound ended a call is told by what it ended with (the fetch's cut timeout in its detail, the
attempt's own error type), and a call waited at least that bound; the elapsed time is otherwise
only bounded to rule out a hang. How soon after its bound each call ends is measured by
bench/external_refs_bounds.py."""

from __future__ import annotations

import dataclasses
import re
import socket
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tests.jobs.helpers import stored_index
from tests.security.fake_resolver import LOOPBACK_ALLOWED
from turngate.activities import external_refs
from turngate.activities.external_refs import MAX_ATTEMPTS, ExternalRefActivities
from turngate.artifacts import LocalArtifactStore
from turngate.jobs.cases.embedders import Embedder, EmbedderSpec, build_embedder
from turngate.security.workbench import WorkbenchConfig
from turngate.workflows import external_refs_options as options
from turngate.workflows.shared import ExternalRefsInput

#: What the tests give one attempt (the workflow gives 15 s).
ATTEMPT = timedelta(seconds=2)
HANDLE = {"ref_type": "artifact.handle", "ref_id": "h", "kind": "note"}
NEVER = 600_000  # ms: a fetch timeout the attempt must cut
#: Seconds past which a call is taken as hung (far below the ten minutes the cut bounds replace).
HANG_S = 10 * ATTEMPT.total_seconds()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A TCP server on loopback that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


def _environment(attempt: int, beats: list[Any]) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info,
        attempt=attempt,
        start_to_close_timeout=ATTEMPT,
        schedule_to_close_timeout=ATTEMPT * 3,
        heartbeat_timeout=timedelta(milliseconds=400),
    )
    env.on_heartbeat = lambda *details: beats.append(details)
    return env


async def _timed(
    env: ActivityEnvironment, acts: ExternalRefActivities, refs: list[dict]
) -> tuple[Any, float]:
    started = time.monotonic()
    try:
        result: Any = await env.run(
            acts.resolve_external_refs, ExternalRefsInput(tenant_id="t1", correlation_id="c", refs=refs)
        )
    except Exception as exc:  # what the attempt ended with is the result here
        result = exc
    return result, time.monotonic() - started


def test_the_bounds_nest() -> None:
    attempt = options.ATTEMPT_TIMEOUT
    assert attempt > options.QUERY_EMBED_TIMEOUT
    assert WorkbenchConfig().timeout_ms / 1000 < attempt.total_seconds()
    assert options.HEARTBEAT_TIMEOUT < attempt < options.SCHEDULE_TO_CLOSE_TIMEOUT
    assert (
        attempt * options.MAX_ATTEMPTS >= options.SCHEDULE_TO_CLOSE_TIMEOUT - attempt
    )  # 3 tries fit, nearly
    assert options.RETRY_POLICY.maximum_attempts == MAX_ATTEMPTS


async def test_a_fetch_that_never_answers_ends_within_the_attempt(tmp_path: Path, silent_port: int) -> None:
    config = WorkbenchConfig(
        enabled=True,
        resolver_url=f"http://127.0.0.1:{silent_port}/h",
        admit_kinds=("note",),
        timeout_ms=NEVER,
        deny_networks=LOOPBACK_ALLOWED,
    )
    acts = ExternalRefActivities(
        SimpleNamespace(), LocalArtifactStore(tmp_path / "a"), cache_dir=tmp_path / "c", workbench=config
    )  # type: ignore[arg-type]
    beats: list[Any] = []
    first, took = await _timed(_environment(1, beats), acts, [HANDLE])
    # The fetch's own timeout ended it (not the attempt's), cut from ten minutes to what was left
    # of the attempt, and it waited that long.
    assert isinstance(first, ApplicationError) and first.type == "workbench.timeout", first
    cut_ms = _cut_ms(str(first))
    assert cut_ms < ATTEMPT.total_seconds() * 1000, first
    assert cut_ms / 1000 <= took < HANG_S
    assert len(beats) >= 3  # every 0.1 s of a 0.4 s heartbeat timeout

    last, took = await _timed(_environment(MAX_ATTEMPTS, []), acts, [HANDLE])
    assert [r["reason_code"] for r in last.records] == ["workbench.timeout"]  # recorded, not lost
    assert _cut_ms(last.records[0]["detail"]) < ATTEMPT.total_seconds() * 1000, last.records
    assert took < HANG_S
    acts.close()


def _cut_ms(detail: str) -> int:
    """The fetch timeout a ``workbench.timeout`` names ("no complete answer within N ms")."""
    found = re.search(r"within (\d+) ms", detail)
    assert found, detail
    return int(found.group(1))


def _openai_index(store: LocalArtifactStore, spec: EmbedderSpec) -> Any:
    """An index whose manifest names ``spec``'s embedder (vectors from the offline one)."""
    pointer, version = stored_index(store, spec.embedder_id)
    return SimpleNamespace(index_version=version, index=pointer, embedder=spec)


class _Registry:
    def __init__(self, record: Any) -> None:
        self.record = record

    def find_case_index(self, **_: Any) -> Any:
        return self.record


def _embedding_activities(tmp_path: Path, port: int, built: list[EmbedderSpec]) -> ExternalRefActivities:
    # The index was made by a job whose embedder waits ten minutes per request.
    spec = EmbedderSpec(
        kind="openai", model="m", dim=256, base_url=f"http://127.0.0.1:{port}/v1", timeout_s=600
    )
    store = LocalArtifactStore(tmp_path / "a")

    def factory(used: EmbedderSpec) -> Embedder:
        built.append(used)
        return build_embedder(used)

    return ExternalRefActivities(
        _Registry(_openai_index(store, spec)),  # type: ignore[arg-type]
        store,
        cache_dir=tmp_path / "c",
        workbench=WorkbenchConfig(),
        embedder_factory=factory,
    )


QUERY = {"ref_type": "case_query", "case_id": "c1", "query": "lighthouse keeper", "top_k": 1}


async def test_a_query_embedder_that_never_answers_ends_within_the_attempt(
    tmp_path: Path, silent_port: int
) -> None:
    built: list[EmbedderSpec] = []
    acts = _embedding_activities(tmp_path, silent_port, built)
    beats: list[Any] = []
    result, took = await _timed(_environment(1, beats), acts, [QUERY])
    # The attempt's bound ended it (the embedder's is 10 s), once the attempt's work had run out.
    assert isinstance(result, ApplicationError) and result.type == "external_refs.attempt_timeout", result
    assert ATTEMPT.total_seconds() - 0.5 < took < HANG_S
    assert len(beats) >= 3
    # The query embedder is not built with the job's ten minutes but with the query bound.
    assert [s.timeout_s for s in built] == [options.QUERY_EMBED_TIMEOUT.total_seconds()]
    acts.close()


async def test_the_query_embedders_own_timeout_applies(
    tmp_path: Path, silent_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(options, "QUERY_EMBED_TIMEOUT", timedelta(milliseconds=500))
    built: list[EmbedderSpec] = []
    acts = _embedding_activities(tmp_path, silent_port, built)
    result, took = await _timed(_environment(1, []), acts, [QUERY])
    # The embedding request timed out by itself (a retryable provider error), before the attempt
    # (which would have ended it with external_refs.attempt_timeout), and not before its 0.5 s.
    assert not isinstance(result, ApplicationError), result
    assert "timeout" in type(result).__name__.lower() or "timed out" in str(result).lower(), repr(result)
    assert 0.4 < took < HANG_S
    assert external_refs.MAX_ATTEMPTS == MAX_ATTEMPTS
    acts.close()
