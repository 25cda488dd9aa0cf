"""The one-step activity of an allowed turn (append the DECISION, call the provider, append the
EXECUTION) when Temporal runs it again: a worker lost after the ledger committed but before
Temporal recorded the activity's completion. Real ledger, real artifact store, the echo provider
counting its calls."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from tests.stack import make_settings
from turngate.activities.ledger import LedgerActivities
from turngate.activities.provider import ProviderActivities
from turngate.activities.turn_step import TurnStepActivities
from turngate.artifacts import ArtifactUnavailableError, LocalArtifactStore
from turngate.core.events import Event, EventDraft, EventKind, parse_intent
from turngate.core.manifest import ArtifactPointer
from turngate.core.models import ModelResolution
from turngate.ledger import LedgerStore
from turngate.providers.base import ProviderRequest, StreamChunk
from turngate.providers.echo import EchoProvider
from turngate.worker.boundary import load_boundary
from turngate.workflows.shared import AppendInput, DecideAndCallInput, ExecutionStep, ProviderCallInput


class CountingEcho(EchoProvider):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    async def stream(self, request: ProviderRequest) -> AsyncIterator[StreamChunk]:
        self.calls += 1
        async for chunk in super().stream(request):
            yield chunk


class BrokenStore(LocalArtifactStore):
    def put(self, data: bytes, **kw: Any) -> ArtifactPointer:
        raise ArtifactUnavailableError("disk on fire", retryable=False)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LedgerStore]:
    ledger = LedgerStore(f"sqlite:///{tmp_path / 'ledger.sqlite3'}")
    yield ledger
    ledger.close()


def steps(
    tmp_path: Path, store: LedgerStore, echo: CountingEcho, *, broken: bool = False
) -> TurnStepActivities:
    artifacts = (BrokenStore if broken else LocalArtifactStore)(tmp_path / "artifacts")
    boundary = load_boundary(make_settings(tmp_path, "127.0.0.1:1", artifact_deadline_s=1))
    return TurnStepActivities(
        LedgerActivities(store, artifacts, boundary), ProviderActivities({"echo": echo}, artifacts=artifacts)
    )


def _identity(intent: Event, kind: EventKind, payload: dict[str, Any]) -> EventDraft:
    return EventDraft(
        kind=kind,
        thread_id=intent.thread_id,
        turn_id=intent.turn_id,
        correlation_id=intent.correlation_id,
        payload=payload,
    )


def one_step(store: LedgerStore) -> DecideAndCallInput:
    envelope = parse_intent(
        {
            "interface_version": 3,
            "correlation_id": "c-1",
            "payload": {"intent_type": "chat.message", "payload": {"message": "only once"}},
        }
    )
    intent = store.append(envelope.draft())
    decision = _identity(intent, EventKind.DECISION, {"decision": "ALLOW", "reason_codes": ["test.ok"]})
    return DecideAndCallInput(
        decision=AppendInput(draft=decision, manifest={"step_id": "decision"}),
        call=ProviderCallInput(
            correlation_id="c-1",
            provider="echo",
            model="echo-1",
            messages=[{"role": "user", "content": "only once"}],
        ),
        execution=ExecutionStep(
            draft=_identity(intent, EventKind.EXECUTION, {}),
            model=ModelResolution(
                provider="echo", requested_model_id=None, resolved_model_id="echo-1", ok=True
            ),
            context_digest=None,
            manifest={"step_id": "execution"},
        ),
    )


def kinds(store: LedgerStore) -> list[str]:
    return [str(event.kind) for event in store.by_correlation("c-1")]


async def test_a_rerun_after_the_execution_was_recorded_calls_nothing(
    tmp_path: Path, store: LedgerStore
) -> None:
    echo = CountingEcho()
    activity = steps(tmp_path, store, echo).decide_and_call
    inp = one_step(store)
    first = await ActivityEnvironment().run(activity, inp)
    again = await ActivityEnvironment().run(activity, inp)
    assert echo.calls == 1
    assert first.execution is not None and first.answer is not None
    assert first.execution.payload["output_text"] == first.answer.output_text
    assert again.decision == first.decision and again.execution == first.execution
    assert again.answer is None
    assert kinds(store) == ["INTENT", "DECISION", "EXECUTION"]


async def test_a_rerun_after_only_the_decision_calls_once(tmp_path: Path, store: LedgerStore) -> None:
    echo = CountingEcho()
    turn = steps(tmp_path, store, echo)
    inp = one_step(store)
    await ActivityEnvironment().run(turn.decide_and_call, inp.model_copy(update={"execution": None}))
    assert kinds(store) == ["INTENT", "DECISION"]  # the attempt was lost before its EXECUTION
    done = await ActivityEnvironment().run(turn.decide_and_call, inp)
    assert echo.calls == 2 and done.execution is not None
    assert kinds(store) == ["INTENT", "DECISION", "EXECUTION"]


async def test_decision_artifacts_that_fail_stop_before_the_provider(
    tmp_path: Path, store: LedgerStore
) -> None:
    echo = CountingEcho()
    result = await ActivityEnvironment().run(
        steps(tmp_path, store, echo, broken=True).decide_and_call, one_step(store)
    )
    assert result.decision is None and result.execution is None
    assert result.decision_failure is not None
    assert result.decision_failure["missing_pointers"] == ["manifest"]
    assert echo.calls == 0
    assert kinds(store) == ["INTENT"]
