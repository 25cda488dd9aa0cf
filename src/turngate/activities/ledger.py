"""Ledger activities: short, idempotent steps run as local activities of the turn workflow.

They are sync (SQLAlchemy and the artifact store block) and run on the worker's thread pool,
never on the event loop. Idempotency comes from content: artifacts are keyed by their sha256 and
the ledger's (correlation_id, kind) is unique, so a retried step returns what is already recorded.
"""

from __future__ import annotations

import functools
import logging
from datetime import UTC, datetime
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from turngate.activities.snapshots import snapshot_bytes
from turngate.artifacts import ArtifactError, ArtifactStore
from turngate.artifacts.deadline import StorageDeadline, within
from turngate.core.canonical import canonical_bytes
from turngate.core.events import Event, EventDraft, EventKind
from turngate.core.model_resolution import ProviderCatalog
from turngate.core.prompt_layers import PromptError
from turngate.core.spend import (
    key_of,
)
from turngate.ledger import LedgerConflictError, LedgerStore
from turngate.ledger.budgets import spend_snapshot
from turngate.prompts.pins import PromptPins
from turngate.telemetry import TurngateMetrics, observe_ledger_event
from turngate.workflows.shared import (
    AppendedEvent,
    AppendInput,
    BeginTurnInput,
    BeginTurnResult,
    Boundary,
    StoredSnapshots,
    StoreSnapshotsInput,
)
from turngate.workflows.spend import resolve_route
from turngate.workflows.turn_activities import APPEND_EVENT, BEGIN_TURN, STORE_FAULT_SNAPSHOTS

log = logging.getLogger(__name__)
#: A different event under the same (correlation_id, kind): never retried.
LEDGER_CONFLICT = "ledger.conflict"


class LedgerActivities:
    def __init__(
        self,
        store: LedgerStore,
        artifacts: ArtifactStore,
        boundary: Boundary,
        pins: PromptPins | None = None,
        metrics: TurngateMetrics | None = None,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._artifacts = artifacts
        self._boundary = boundary
        self._pins = pins
        self._catalog = ProviderCatalog.model_validate(boundary.provider_catalog)

    @activity.defn(name=BEGIN_TURN)
    def begin_turn(self, inp: BeginTurnInput) -> BeginTurnResult:
        """Record the INTENT, fetch the candidate events for its declared refs (O(refs)) and,
        with prompt packs, the thread's pinned prompt snapshot."""
        # Under the ledger's write lock: a thread holds one tenant's turns (ledger/thread_claims.py).
        intent = self._append(inp.intent, claim_thread=True)
        # Refs resolve within the intent's tenant only (another tenant's event is REF_NOT_FOUND).
        candidates = (
            self._store.fetch_ref_candidates(intent.thread_id, inp.ref_ids, tenant_id=intent.tenant_id)
            if inp.ref_ids
            else []
        )
        prompt, prompt_error = None, None
        model, _ = resolve_route(intent.payload.get("requested_model_id"), self._boundary)
        if self._pins is not None and model.ok and model.provider:
            # The INTENT is recorded: a failure here must end in a recorded DENY, not an orphan,
            # and soon: a stuck store gets the step's artifact deadline, no more.
            pins, provider = self._pins, model.provider
            try:
                prompt = self._deadline().call("prompt snapshot", lambda: pins.resolve(intent, provider))
            except ArtifactError as exc:
                prompt_error = {
                    "code": "SYSTEM_ERROR",
                    "detail": f"the prompt snapshot could not be stored or read: {exc}",
                    "missing_pointers": ["prompt_snapshot"],
                }
            except PromptError as exc:
                prompt_error = {"code": exc.reason_code, "detail": exc.detail}
        later = {
            str(event.kind): event
            for event in self._store.by_correlation(intent.correlation_id)
            if event.kind != EventKind.INTENT
        }
        return BeginTurnResult(
            intent=intent,
            candidates=candidates,
            boundary=self._boundary,
            prompt=prompt,
            prompt_error=prompt_error,
            recorded=later,
            spend=spend_snapshot(self._store, intent.tenant_id, key_of(intent), datetime.now(UTC)),
        )

    @activity.defn(name=APPEND_EVENT)
    def append_event(self, inp: AppendInput) -> AppendedEvent:
        """Store the step's fault snapshots and manifest as artifacts, then append the event that
        points at them. If the artifact store fails, nothing is appended and the workflow records
        a SYSTEM_ERROR instead (context observability stop semantics).

        If the turn already holds a different event of this kind (the step ran before, in a
        workflow task that never completed: a stalled or crashed worker, a restart on another
        configuration), that recorded event is returned: the ledger keeps the first one, and
        the workflow goes on from it (``workflows/adoption.py``) instead of failing the turn."""
        draft = inp.draft
        if inp.manifest is not None or inp.snapshots or inp.stored_snapshots:
            draft = draft.model_copy(update={"payload": self._attach(inp)})
        try:
            return AppendedEvent(**self._append(draft).model_dump())
        except ApplicationError as exc:
            recorded = self._recorded(draft) if exc.type == LEDGER_CONFLICT else None
            if recorded is None:
                raise
            log.warning(
                "turn %s: the ledger already holds another %s (index %d); the turn goes on from it",
                draft.correlation_id,
                draft.kind,
                recorded.index,
            )
            return AppendedEvent(**recorded.model_dump(), adopted=True)

    @activity.defn(name=STORE_FAULT_SNAPSHOTS)
    def store_fault_snapshots(self, inp: StoreSnapshotsInput) -> StoredSnapshots:
        """Store a step's fault snapshots (one try each, waited for at most the attempt's
        timeout). A failure is raised for Temporal to retry under the workflow's snapshot retry
        policy; a permanent one (the store refuses the write) is not retried. Content-addressed,
        so a retry re-stores what an earlier attempt stored without a duplicate."""
        store = self._artifacts
        timeout = activity.info().start_to_close_timeout
        left = timeout.total_seconds() if timeout else self._boundary.artifact_deadline_s
        pointers: dict[str, dict[str, Any]] = {}
        try:
            for name, text in sorted(inp.snapshots.items()):
                data = within(functools.partial(snapshot_bytes, name, text, store.get), left)
                pointer = within(functools.partial(store.put, data, kind=name, retention="snapshot"), left)
                pointers[name] = pointer.recorded()
        except (ArtifactError, TimeoutError) as exc:
            retryable = isinstance(exc, TimeoutError) or getattr(exc, "retryable", False)
            why = str(exc) or "the store did not answer"
            raise ApplicationError(
                f"fault snapshots of {inp.correlation_id} could not be stored: {why}",
                {"missing_pointers": sorted(inp.snapshots)},
                type="artifact.unavailable",
                non_retryable=not retryable,
            ) from exc
        return StoredSnapshots(pointers=pointers)

    def _deadline(self) -> StorageDeadline:
        return StorageDeadline(self._boundary.artifact_deadline_s)

    def _attach(self, inp: AppendInput) -> dict[str, Any]:
        payload = dict(inp.draft.payload)
        stored: list[dict[str, Any]] = []
        deadline = self._deadline()
        store = self._artifacts
        try:
            snapshots: dict[str, Any] = dict(inp.stored_snapshots)
            stored.extend(pointer for _, pointer in sorted(inp.stored_snapshots.items()))
            for name, text in sorted(inp.snapshots.items()):
                data = deadline.call(name, functools.partial(snapshot_bytes, name, text, store.get))
                pointer = deadline.call(
                    name, functools.partial(store.put, data, kind=name, retention="snapshot")
                )
                snapshots[name] = pointer.recorded()
                stored.append(snapshots[name])
            if snapshots:
                payload["fault_snapshots"] = snapshots
            if inp.manifest is not None:
                manifest = canonical_bytes(
                    dict(inp.manifest, artifacts=stored, snapshot_id=_snapshot_id(snapshots, inp.manifest))
                )
                pointer = deadline.call("manifest", lambda: store.put(manifest, kind="manifest"))
                payload["manifest"] = pointer.recorded()
            # Past the deadline the workflow may already record this step as SYSTEM_ERROR: a
            # late success must not race it into the ledger.
            deadline.check("artifacts")
        except ArtifactError as exc:
            missing = sorted({*inp.snapshots, *(["manifest"] if inp.manifest is not None else [])})
            # Transient failures were retried above, within the deadline: what arrives here is
            # final, and the workflow records the step as SYSTEM_ERROR. Where the store lives
            # (a directory, an endpoint) stays out of the history: the backend logged it.
            raise ApplicationError(
                f"the artifact store failed: {exc}",
                {"missing_pointers": missing},
                type="artifact.unavailable",
                non_retryable=True,
            ) from exc
        return payload

    def _append(self, draft: EventDraft, *, claim_thread: bool = False) -> Event:
        try:
            event = self._store.append(draft, claim_thread=claim_thread)
        except LedgerConflictError as exc:
            # A different event under the same (correlation_id, kind): never retried, never hidden.
            raise ApplicationError(str(exc), type=LEDGER_CONFLICT, non_retryable=True) from exc
        observe_ledger_event(event, self._metrics)
        return event

    def _recorded(self, draft: EventDraft) -> Event | None:
        """The event of ``draft``'s kind the ledger holds for the same turn of the same tenant
        (a correlation id reused elsewhere is a conflict, never adopted)."""
        same = (draft.kind, draft.tenant_id, draft.stream_id, draft.thread_id, draft.turn_id)
        for event in self._store.by_correlation(draft.correlation_id):
            if (event.kind, event.tenant_id, event.stream_id, event.thread_id, event.turn_id) == same:
                return event
        return None


def _snapshot_id(snapshots: dict[str, Any], manifest: dict[str, Any]) -> str | None:
    """The manifest's ``snapshot_id``: the step's prompt snapshot, else its first snapshot."""
    if not snapshots:
        return manifest.get("snapshot_id")
    chosen = snapshots.get("prompt_snapshot") or snapshots[min(snapshots)]
    return str(chosen["artifact_id"])
