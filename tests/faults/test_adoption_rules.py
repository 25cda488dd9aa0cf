"""A step that runs again records the same bytes, or gets back what the ledger holds: the append
activity on real stores (SQLite ledger, artifact directories), and the rules the workflow
follows when it got back another run's DECISION (workflows/adoption.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from tests.stack import make_settings
from turngate.activities.ledger import LedgerActivities
from turngate.artifacts import open_artifact_store
from turngate.core.events import EventDraft, EventKind
from turngate.ledger import LedgerStore
from turngate.worker.boundary import load_boundary
from turngate.workflows.adoption import REASON_REDECIDED, next_step, recorded_plan, unexecuted
from turngate.workflows.shared import AppendInput

POINTER = {
    "artifact_id": "sha256:" + "a" * 64,
    "path": "standard/x/aa/" + "a" * 64,
    "sha256": "sha256:" + "a" * 64,
    "size_bytes": 1,
}


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with LedgerStore(f"sqlite:///{tmp_path / 'ledger.sqlite3'}") as ledger:
        yield ledger


def _activities(tmp_path: Path, store: LedgerStore, artifacts: str) -> LedgerActivities:
    settings = make_settings(tmp_path, "127.0.0.1:1")
    return LedgerActivities(store, open_artifact_store(str(tmp_path / artifacts)), load_boundary(settings))


def _intent(store: LedgerStore, *, thread: str = "t", tenant: str | None = None) -> EventDraft:
    draft = EventDraft(
        kind=EventKind.INTENT,
        thread_id=thread,
        turn_id="u",
        correlation_id="c",
        payload={"payload": {"message": "hi"}},
        tenant_id=tenant,
    )
    return store.append(draft)


def _decision(intent: EventDraft, **payload: Any) -> AppendInput:
    body = {"decision": "ALLOW", "reason_codes": ["policy.allow_all"], "context_digest": "sha256:1"} | payload
    return AppendInput(
        draft=EventDraft.following(intent, EventKind.DECISION, body),
        manifest={"step_id": "decision"},
        snapshots={"request_snapshot": "the request so far"},
    )


def test_a_step_run_again_on_another_artifact_directory_records_the_same_event(
    tmp_path: Path, store: LedgerStore
) -> None:
    intent = _intent(store)
    first = _activities(tmp_path, store, "artifacts-a").append_event(_decision(intent))
    again = _activities(tmp_path, store, "artifacts-b").append_event(_decision(intent))
    assert again == first and not again.adopted
    assert "created_at" not in first.payload["manifest"]
    assert all("created_at" not in p for p in first.payload["fault_snapshots"].values())
    assert store.head()[0] == 2


def test_a_step_run_again_after_its_artifacts_were_written_again_records_the_same_event(
    tmp_path: Path, store: LedgerStore
) -> None:
    """A store whose objects got a new time in between (an S3 object written again by a racing
    writer has a new LastModified; here: new file times)."""
    intent = _intent(store)
    activities = _activities(tmp_path, store, "artifacts")
    first = activities.append_event(_decision(intent))
    stored = [path for path in (tmp_path / "artifacts").rglob("*") if path.is_file()]
    assert len(stored) == 2  # the manifest and the snapshot
    for path in stored:
        os.utime(path, (1_000_000_000, 1_000_000_000))
    again = activities.append_event(_decision(intent))
    assert again == first and not again.adopted


def test_another_decision_of_the_same_turn_comes_back_as_the_recorded_one(
    tmp_path: Path, store: LedgerStore
) -> None:
    intent = _intent(store, tenant="acme")
    activities = _activities(tmp_path, store, "artifacts")
    first = activities.append_event(_decision(intent))
    other = activities.append_event(_decision(intent, decision="DENY", reason_codes=["policy.deny_all"]))
    assert other.adopted and other.model_dump(exclude={"adopted"}) == first.model_dump(exclude={"adopted"})
    assert store.head()[0] == 2


def test_a_second_answer_comes_back_as_the_recorded_execution(tmp_path: Path, store: LedgerStore) -> None:
    """A stalled worker that came back answered first: the live run's answer is not recorded."""
    intent = _intent(store)
    activities = _activities(tmp_path, store, "artifacts")
    activities.append_event(_decision(intent))
    answers = [
        activities.append_event(
            AppendInput(draft=EventDraft.following(intent, EventKind.EXECUTION, {"output_text": text}))
        )
        for text in ("first answer", "second answer")
    ]
    assert [a.payload["output_text"] for a in answers] == ["first answer", "first answer"]
    assert [a.adopted for a in answers] == [False, True] and answers[0].digest == answers[1].digest
    assert store.head()[0] == 3


def test_an_event_of_another_turn_or_tenant_is_still_a_conflict(tmp_path: Path, store: LedgerStore) -> None:
    intent = _intent(store, tenant="acme")
    activities = _activities(tmp_path, store, "artifacts")
    activities.append_event(_decision(intent))
    for elsewhere in (
        intent.model_copy(update={"tenant_id": "evil"}),
        intent.model_copy(update={"thread_id": "t-other"}),
    ):
        with pytest.raises(ApplicationError) as caught:
            activities.append_event(_decision(elsewhere, decision="DENY"))
        assert caught.value.type == "ledger.conflict"
    assert store.head()[0] == 2


# --------------------------------------------------------------------------- the rules

ALLOW: dict[str, Any] = {
    "decision": "ALLOW",
    "context_digest": "sha256:c",
    "token_budget": {"tokens": 4000, "estimator": "chars/3"},
    "provider": "echo",
    "requested_model_id": None,
    "resolved_model_id": "echo-1",
    "policy_id": "policy.allow_all",
    "manifest": POINTER,
    "prompt": {"snapshot_artifact": POINTER | {"created_at": "2026-01-01T00:00:00Z"}},
    "spend": {"position": 7, "candidates": [{"candidate": "echo:echo-1", "admitted": True}]},
}


def test_a_recorded_deny_stops_the_turn() -> None:
    assert next_step(ALLOW | {"decision": "DENY"}, ALLOW, executable=True) == "stop"


def test_a_recorded_allow_of_the_same_request_is_executed() -> None:
    # other policy, other manifest, pointer times, budgets counted at another position
    ours = ALLOW | {
        "policy_id": "policy.max_user_messages",
        "manifest": POINTER | {"sha256": "sha256:" + "b" * 64},
        "prompt": {"snapshot_artifact": POINTER},
        "spend": {"position": 9, "candidates": [{"candidate": "echo:echo-1", "admitted": True}]},
    }
    assert next_step(ALLOW, ours, executable=True) == "execute"


@pytest.mark.parametrize(
    "change",
    [
        {"decision": "DENY"},
        {"context_digest": "sha256:other"},
        {"token_budget": {"tokens": 8000, "estimator": "chars/3"}},
        {"resolved_model_id": "echo-2"},
        {"spend": {"position": 7, "candidates": [{"candidate": "echo:echo-1", "admitted": False}]}},
    ],
)
def test_a_recorded_allow_of_another_request_ends_without_a_call(change: dict[str, Any]) -> None:
    assert next_step(ALLOW, ALLOW | change, executable=change.get("decision") != "DENY") == "end"
    ending = unexecuted(ALLOW).as_payload()
    assert ending["error"]["code"] == REASON_REDECIDED
    assert ending["context_digest"] == ALLOW["context_digest"] and ending["output_text"] == ""


def test_a_recorded_allow_is_not_executed_by_a_run_without_a_request() -> None:
    assert next_step(ALLOW, ALLOW, executable=False) == "end"


def test_without_a_plan_there_is_no_recorded_plan_to_take() -> None:
    assert recorded_plan(ALLOW, None) is None
