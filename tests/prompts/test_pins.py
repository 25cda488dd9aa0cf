"""Where a thread's prompt snapshot is pinned: its first DECISION that recorded a prompt, found
a page of DECISIONs at a time however many turns denied before their prompt came first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.prompts.helpers import EXAMPLE_INPUTS, EXAMPLE_PACK
from turngate.artifacts import open_artifact_store
from turngate.core.events import Event, EventDraft, EventKind, parse_intent
from turngate.core.system_prompt import PromptContext
from turngate.ledger import LedgerStore
from turngate.prompts.loader import load_prompt_config
from turngate.prompts.pins import PIN_PAGE, PromptPins

INPUTS = json.loads(EXAMPLE_INPUTS.read_text())
DENIED = {"decision": "DENY", "reason_codes": ["model.unavailable"]}


def _intent(store: LedgerStore, correlation_id: str) -> Event:
    payload = {
        "intent_type": "chat.message",
        "thread_id": "t",
        "inputs": INPUTS,
        "payload": {"message": "hi"},
    }
    return store.append(
        parse_intent({"interface_version": 3, "correlation_id": correlation_id, "payload": payload}).draft()
    )


def _decide(store: LedgerStore, intent: Event, payload: dict[str, Any]) -> Event:
    identity = intent.model_dump(include={"thread_id", "turn_id", "parent_turn_id", "correlation_id"})
    draft = EventDraft(kind=EventKind.DECISION, intent_type=intent.intent_type, payload=payload, **identity)
    return store.append(draft)


def _recorded(context: PromptContext) -> dict[str, Any]:
    """The DECISION's `prompt` as the turn workflow records it (the fields the pin reads)."""
    snapshot = context.snapshot
    return {
        "snapshot_digest": snapshot.snapshot_digest,
        "task_id": snapshot.task_id,
        "provider": snapshot.provider,
        "snapshot_artifact": context.snapshot_artifact,
        "pinned_by_index": context.pinned_by_index,
    }


@pytest.mark.parametrize("denied_first", [0, 1, PIN_PAGE - 1, PIN_PAGE, PIN_PAGE + 1, 2 * PIN_PAGE])
def test_the_pin_is_the_first_decision_that_recorded_a_prompt(tmp_path: Path, denied_first: int) -> None:
    store = LedgerStore(f"sqlite:///{tmp_path / 'ledger.sqlite3'}")
    pins = PromptPins(
        EXAMPLE_PACK,
        load_prompt_config(EXAMPLE_PACK),
        store,
        open_artifact_store(str(tmp_path / "artifacts")),
    )
    try:
        for n in range(denied_first):
            _decide(store, _intent(store, f"c-denied-{n}"), DENIED)
        first = _intent(store, "c-first")
        loaded = pins.resolve(first, "echo")
        assert loaded.pinned_by_index is None  # nothing recorded a prompt yet: this turn pins
        pinning = _decide(
            store, first, {"decision": "ALLOW", "reason_codes": ["x"], "prompt": _recorded(loaded)}
        )

        second = _intent(store, "c-second")
        pinned = pins.resolve(second, "echo")
        assert pinned.pinned_by_index == pinning.index
        assert pinned.snapshot == loaded.snapshot
        _decide(store, second, {"decision": "ALLOW", "reason_codes": ["x"], "prompt": _recorded(pinned)})
        assert pins.resolve(_intent(store, "c-third"), "echo").pinned_by_index == pinning.index
    finally:
        store.close()
