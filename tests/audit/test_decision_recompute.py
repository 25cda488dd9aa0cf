"""verify_decision_reusing finds exactly the problems core.decision.verify_decision finds."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.audit.helpers import Ledger, config, make_ledger
from turngate.audit.verification.candidates import ledger_candidates
from turngate.audit.verification.decision_recompute import verify_decision_reusing
from turngate.core.decision import verify_decision
from turngate.core.events import Event, EventKind, event_digest


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Ledger:
    built = make_ledger(tmp_path_factory.mktemp("decisions") / "data", 24, threads=4, deny_every=5)
    yield built
    built.store.close()


def _cases(ledger: Ledger) -> list[tuple[Event, Event, list[Event]]]:
    """(DECISION, its INTENT, the INTENT's candidates) for every DECISION of the ledger."""
    _, stored = ledger.store.snapshot()
    intents = {e.correlation_id: e for e in stored if e.kind == EventKind.INTENT}
    return [
        (event, intents[event.correlation_id], ledger_candidates(ledger.store, intents[event.correlation_id]))
        for event in stored
        if event.kind == EventKind.DECISION
    ]


def _set(path: tuple[str, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(payload: dict[str, Any]) -> None:
        target = payload
        for key in path[:-1]:
            target = target.setdefault(key, {})
        target[path[-1]] = value

    return change


CHANGES = [
    lambda p: None,
    _set(("context_digest",), "sha256:" + "0" * 64),
    _set(("boundary", "context_config_digest"), "sha256:" + "1" * 64),
    _set(("normative_input_digests",), []),
    _set(("resolved_refs",), [{"ref_id": "x"}]),
    _set(("error",), {"code": "REF_NOT_FOUND"}),
    _set(("error",), None),
    _set(("context_spec",), {"prompt": {"pack": "other"}}),
]


@pytest.mark.parametrize("change", range(len(CHANGES)))
def test_same_problems_as_verify_decision(ledger: Ledger, change: int) -> None:
    cfg = config()
    for decision, intent, candidates in _cases(ledger):
        stored = copy.deepcopy(decision.payload)
        CHANGES[change](stored)
        expected = verify_decision(stored, intent, candidates, cfg)
        recomputed = {e.index: event_digest(e, e.index, e.prev_event_digest) for e in (intent, *candidates)}
        assert verify_decision_reusing(stored, intent, candidates, cfg, recomputed) == expected
        assert verify_decision_reusing(stored, intent, candidates, cfg, {}) == expected


def test_a_tampered_input_event_is_still_caught(ledger: Ledger) -> None:
    cfg = config()
    decision, intent, candidates = next(c for c in _cases(ledger) if c[2])
    forged = intent.model_copy(update={"payload": {**intent.payload, "inputs": {"locale": "fr"}}})
    expected = verify_decision(decision.payload, forged, candidates, cfg)
    assert f"event_digest_mismatch: index {intent.index}" in expected
    assert verify_decision_reusing(decision.payload, forged, candidates, cfg, {}) == expected
    # The chain pass's digest is of the row the event was built from: here the forged one.
    recomputed = {intent.index: event_digest(forged, forged.index, forged.prev_event_digest)}
    assert verify_decision_reusing(decision.payload, forged, candidates, cfg, recomputed) == expected
