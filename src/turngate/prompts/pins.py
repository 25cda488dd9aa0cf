"""Prompt snapshots pinned per thread (the prompt-assembly pipeline's live session integrity).

A thread's first turn that gets a prompt loads the pack's layers from disk, stores the snapshot
content-addressed in the artifact store and records it in its DECISION; every later turn of the
thread uses that snapshot, even if the files changed on disk since. A new thread picks up edited
files. The pin is the thread's first DECISION that recorded a prompt: a first turn denied before
its prompt was built (``model.unavailable``, a prompt error) pins nothing, and the next turn that
gets one pins it. Finding the pin reads the thread's DECISIONs from the first until one recorded a
prompt (usually the first: one indexed lookup), never the rest of the thread.
"""

from __future__ import annotations

import logging
from pathlib import Path

from turngate.artifacts import ArtifactStore
from turngate.core.events import Event, EventKind
from turngate.core.payloads import RedactionSource
from turngate.core.prompt_layers import PromptConfig, snapshot_bytes, snapshot_from_bytes, task_id_from_inputs
from turngate.core.system_prompt import PromptContext
from turngate.ledger import LedgerStore
from turngate.prompts.loader import load_snapshot

log = logging.getLogger(__name__)
#: DECISIONs read per query while looking for the pin.
PIN_PAGE = 16


class PromptPins:
    def __init__(
        self, pack_dir: Path, config: PromptConfig, store: LedgerStore, artifacts: ArtifactStore
    ) -> None:
        self._pack_dir = pack_dir
        self._config = config
        self._store = store
        self._artifacts = artifacts

    def resolve(self, intent: Event, provider: str) -> PromptContext:
        inputs = intent.payload.get("inputs") or {}
        task_id = task_id_from_inputs(inputs)
        pinned = self._pinned(intent.thread_id, task_id, provider)
        if pinned is None:
            snapshot = load_snapshot(self._pack_dir, task_id=task_id, provider=provider, config=self._config)
            pointer = self._artifacts.put(snapshot_bytes(snapshot), kind="prompt_snapshot")
            context = PromptContext(
                snapshot=snapshot, snapshot_artifact=pointer.recorded(), pinned_by_index=None
            )
        else:
            context = pinned
        source = self._redaction_source(intent)
        return context.model_copy(
            update={
                "redaction_reason": source.reason_code if source else None,
                "redaction_source": source,
            }
        )

    def _pinned(self, thread_id: str, task_id: str | None, provider: str) -> PromptContext | None:
        first = self._first_decision_with_prompt(thread_id)
        prompt = (first.payload.get("prompt") if first else None) or {}
        if first is None or not prompt:
            return None  # no pin yet
        if prompt.get("task_id") != task_id or prompt.get("provider") != provider:
            return None  # this turn uses another task/provider: a fresh snapshot
        pointer = prompt["snapshot_artifact"]
        data = self._artifacts.get(pointer["artifact_id"])
        snapshot = snapshot_from_bytes(data, expected_digest=prompt["snapshot_digest"])
        return PromptContext(snapshot=snapshot, snapshot_artifact=pointer, pinned_by_index=first.index)

    def _first_decision_with_prompt(self, thread_id: str) -> Event | None:
        after = -1
        while True:
            page = self._store.in_thread(thread_id, EventKind.DECISION, after_index=after, limit=PIN_PAGE)
            found = next((event for event in page if event.payload.get("prompt")), None)
            if found is not None or len(page) < PIN_PAGE:
                return found
            after = page[-1].index

    def _redaction_source(self, intent: Event) -> RedactionSource | None:
        """One-shot: the turn right after a redacted answer learns why (the prompt-assembly
        pipeline). Read from the parent turn's EXECUTION, which the INTENT names by
        ``parent_turn_id`` rather than by a declared ref: the DECISION records that event's index
        and digest with the reason (``prompt.redaction_source``), so no input goes unrecorded
        and verify can check it."""
        if not intent.parent_turn_id:
            return None
        for event in self._store.turn_events(intent.thread_id, intent.parent_turn_id):
            if event.kind == EventKind.EXECUTION and event.payload.get("redacted"):
                redaction = event.payload.get("redaction") or {}
                return RedactionSource(
                    event_index=event.index,
                    event_digest=event.digest,
                    turn_id=intent.parent_turn_id,
                    reason_code=str(redaction.get("reason_code") or "safety.redacted"),
                )
        return None
