"""``turngate.call_and_record`` against a real SQLite ledger and artifact store: a retry after
the EXECUTION was recorded never calls the provider again; retryable errors are Temporal's to
retry until the last attempt, which records them; the wall clock ends a slow call."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tests.stack import envelope
from tests.workflows.test_turn_branches import _boundary
from turngate.activities.ledger import LedgerActivities
from turngate.activities.provider import ProviderActivities
from turngate.activities.turn_step import TurnStepActivities
from turngate.artifacts import LocalArtifactStore
from turngate.artifacts.store import ArtifactUnavailableError
from turngate.core.context import ContextConfig
from turngate.core.decision import decide
from turngate.core.events import EventDraft, EventKind, parse_intent
from turngate.core.model_resolution import ModelResolution
from turngate.core.policy import load_policy
from turngate.ledger import LedgerStore
from turngate.providers.base import ProviderError, ProviderRequest, StreamChunk
from turngate.workflows.shared import AppendInput, CallAndRecordInput, ExecutionContext, ProviderCallInput

MODEL = ModelResolution(provider="fake", requested_model_id=None, resolved_model_id="fake-1", ok=True)


class CountingProvider:
    """Answers "four" after ``delay_s``, or fails with ``fail`` on the first ``failures`` calls."""

    name = "fake"
    models: tuple[str, ...] = ("fake-1",)

    def __init__(self, *, fail: ProviderError | None = None, failures: int = 0, delay_s: float = 0.0) -> None:
        self.calls = 0
        self.fail, self.failures, self.delay_s = fail, failures, delay_s

    async def stream(self, request: ProviderRequest) -> AsyncIterator[StreamChunk]:
        self.calls += 1
        if self.fail is not None and self.calls <= self.failures:
            raise self.fail
        await asyncio.sleep(self.delay_s)
        yield StreamChunk(text="four")

    async def aclose(self) -> None:
        return None


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LedgerStore]:
    with LedgerStore(f"sqlite:///{tmp_path / 'ledger.sqlite3'}") as ledger:
        yield ledger


def _ledger(store: LedgerStore, tmp_path: Path) -> LedgerActivities:
    return LedgerActivities(store, LocalArtifactStore(tmp_path / "artifacts"), _boundary("llm"))


def _steps(store: LedgerStore, tmp_path: Path, provider: CountingProvider) -> TurnStepActivities:
    ledger = _ledger(store, tmp_path)
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    return TurnStepActivities(store, ledger, ProviderActivities({"fake": provider}, artifacts=artifacts))


def _input(store: LedgerStore, correlation_id: str, *, wall_clock_s: float = 30.0) -> CallAndRecordInput:
    intent = store.append(parse_intent(envelope("what is 2+2?", correlation_id=correlation_id)).draft())
    execution = {"provider": "fake", "requested_model_id": None, "resolved_model_id": "fake-1"}
    outcome = decide(
        intent, [], ContextConfig(), load_policy("turngate.policies.allow_all"), execution=execution
    )
    decision = EventDraft.following(intent, EventKind.DECISION, outcome.record.as_payload())
    return CallAndRecordInput(
        decision=AppendInput(draft=decision, manifest={"step_id": "decision"}),
        call=ProviderCallInput(
            correlation_id=correlation_id,
            provider="fake",
            model="fake-1",
            messages=[{"role": "user", "content": "what is 2+2?"}],
        ),
        execution=ExecutionContext(model=MODEL, context_digest=outcome.record.context_digest),
        manifest={"step_id": "execution"},
        attempts=3,
        wall_clock_s=wall_clock_s,
    )


def _env(attempt: int = 1) -> ActivityEnvironment:
    environment = ActivityEnvironment()
    now = datetime.now(UTC)
    environment.info = dataclasses.replace(
        environment.info,
        attempt=attempt,
        scheduled_time=now,
        current_attempt_scheduled_time=now,
        start_to_close_timeout=timedelta(seconds=60),
    )
    return environment


def _kinds(store: LedgerStore, correlation_id: str) -> list[str]:
    return [str(event.kind) for event in store.by_correlation(correlation_id)]


async def test_a_retry_after_the_execution_was_recorded_never_calls_the_provider(store, tmp_path) -> None:
    provider = CountingProvider()
    steps = _steps(store, tmp_path, provider)
    inp = _input(store, "c-once")
    first = await _env().run(steps.call_and_record, inp)
    # The worker is lost before Temporal hears of the result: the next attempt finds the turn.
    again = await _env(attempt=2).run(steps.call_and_record, inp)
    assert provider.calls == 1
    assert first.execution is not None and again.execution is not None
    assert (again.decision.digest, again.execution.digest) == (first.decision.digest, first.execution.digest)
    assert first.execution.payload["output_text"] == "four"
    assert "manifest" in first.execution.payload and "manifest" in first.decision.payload
    assert _kinds(store, "c-once") == ["INTENT", "DECISION", "EXECUTION"]


async def test_a_recorded_decision_is_adopted_and_the_call_made_once(store, tmp_path) -> None:
    provider = CountingProvider()
    steps = _steps(store, tmp_path, provider)
    inp = _input(store, "c-adopt")
    recorded = _ledger(store, tmp_path).append_event(inp.decision)  # an attempt died after it
    done = await _env(attempt=2).run(steps.call_and_record, inp)
    assert done.decision == recorded and provider.calls == 1
    assert _kinds(store, "c-adopt") == ["INTENT", "DECISION", "EXECUTION"]


async def test_a_retryable_error_is_raised_until_the_last_attempt_records_it(store, tmp_path) -> None:
    overloaded = ProviderError("provider.overloaded", "fake: HTTP 503", retryable=True, status_code=503)
    provider = CountingProvider(fail=overloaded, failures=3)
    steps = _steps(store, tmp_path, provider)
    inp = _input(store, "c-retry")
    for attempt in (1, 2):
        with pytest.raises(ApplicationError) as raised:
            await _env(attempt).run(steps.call_and_record, inp)
        assert raised.value.type == "provider.overloaded"
        assert _kinds(store, "c-retry") == ["INTENT", "DECISION"]
    done = await _env(3).run(steps.call_and_record, inp)
    assert done.execution is not None and done.execution.payload["error"]["code"] == "provider.overloaded"
    assert provider.calls == 3


async def test_a_non_retryable_error_is_recorded_at_once(store, tmp_path) -> None:
    invalid = ProviderError("provider.invalid_response", "fake: malformed response", retryable=False)
    provider = CountingProvider(fail=invalid, failures=1)
    steps = _steps(store, tmp_path, provider)
    done = await _env().run(steps.call_and_record, _input(store, "c-invalid"))
    assert (
        done.execution is not None and done.execution.payload["error"]["code"] == "provider.invalid_response"
    )
    assert provider.calls == 1


async def test_the_wall_clock_ends_a_slow_call_as_llm_timeout(store, tmp_path) -> None:
    provider = CountingProvider(delay_s=5.0)
    steps = _steps(store, tmp_path, provider)
    done = await _env().run(steps.call_and_record, _input(store, "c-slow", wall_clock_s=0.3))
    assert done.execution is not None
    assert done.execution.payload["error"]["code"] == "llm.timeout"
    assert _kinds(store, "c-slow") == ["INTENT", "DECISION", "EXECUTION"]


class _BrokenStore(LocalArtifactStore):
    def put(self, *args: object, **kwargs: object) -> Any:
        raise ArtifactUnavailableError("the disk is gone", retryable=False)


async def test_a_decision_whose_artifacts_fail_is_a_system_error_deny_at_once(store, tmp_path) -> None:
    provider = CountingProvider()
    ledger = LedgerActivities(store, _BrokenStore(tmp_path / "broken"), _boundary("llm"))
    steps = TurnStepActivities(store, ledger, ProviderActivities({"fake": provider}))
    done = await _env().run(steps.call_and_record, _input(store, "c-broken"))
    assert done.execution is None and provider.calls == 0
    assert done.decision.payload["decision"] == "DENY"
    assert done.decision.payload["reason_codes"] == ["SYSTEM_ERROR"]
    assert done.decision.payload["error"]["missing_pointers"] == ["manifest"]
    assert _kinds(store, "c-broken") == ["INTENT", "DECISION"]
