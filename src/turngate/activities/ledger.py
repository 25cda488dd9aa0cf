"""Ledger activities: short, idempotent steps run as local activities of the turn workflow.

They are sync (SQLAlchemy is blocking) and run on the worker's thread pool, never on the event
loop. Idempotency comes from the ledger's unique (correlation_id, kind): a retried append returns
the event already recorded.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from turngate.core.events import Event, EventDraft
from turngate.ledger import LedgerConflictError, LedgerStore
from turngate.workflows.shared import AppendInput, BeginTurnInput, BeginTurnResult, Boundary


class LedgerActivities:
    def __init__(self, store: LedgerStore, boundary: Boundary) -> None:
        self._store = store
        self._boundary = boundary

    @activity.defn(name="turngate.begin_turn")
    def begin_turn(self, inp: BeginTurnInput) -> BeginTurnResult:
        """Record the INTENT and fetch the candidate events for its declared refs (O(refs))."""
        intent = self._append(inp.intent)
        candidates = self._store.fetch_ref_candidates(intent.thread_id, inp.ref_ids) if inp.ref_ids else []
        return BeginTurnResult(intent=intent, candidates=candidates, boundary=self._boundary)

    @activity.defn(name="turngate.append_event")
    def append_event(self, inp: AppendInput) -> Event:
        return self._append(inp.draft)

    def _append(self, draft: EventDraft) -> Event:
        try:
            return self._store.append(draft)
        except LedgerConflictError as exc:
            # A different event under the same (correlation_id, kind): never retried, never hidden.
            raise ApplicationError(str(exc), type="ledger.conflict", non_retryable=True) from exc
