"""What a turn adds to its memo as it ends: its outcome, never a None (which would remove a key)."""

from __future__ import annotations

from turngate.workflows.ending_memo import ending_memo
from turngate.workflows.shared import RecordedEvent, TurnResult

INTENT = RecordedEvent(kind="INTENT", index=0, digest="sha256:" + "0" * 64)


def _result(decision: str, error_code: str | None = None) -> TurnResult:
    return TurnResult(
        workflow_id="turn/-/default/t/u/abc",
        correlation_id="c-1",
        decision=decision,
        reason_codes=["policy.allow_all"] if decision == "ALLOW" else ["policy.deny_all"],
        intent=INTENT,
        decision_event=RecordedEvent(kind="DECISION", index=1, digest="sha256:" + "2" * 64),
        error_code=error_code,
    )


def test_an_answered_turn_records_its_decision_and_context_digest() -> None:
    memo = ending_memo(_result("ALLOW"), "sha256:" + "1" * 64)
    assert memo == {
        "decision": "ALLOW",
        "reason_codes": ["policy.allow_all"],
        "context_digest": "sha256:" + "1" * 64,
    }


def test_a_failed_call_records_its_error_code_and_nothing_is_none() -> None:
    memo = ending_memo(_result("ALLOW", "llm.timeout"), None)
    assert memo["error_code"] == "llm.timeout" and "context_digest" not in memo
    assert None not in memo.values()
