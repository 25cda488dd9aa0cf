"""`verify --replay-policy` reads only the DECISIONs in scope, page by page."""

from __future__ import annotations

from pathlib import Path

import pytest

import turngate.audit.policy_replay as policy_replay
from turngate.core.events import EventDraft, EventKind
from turngate.ledger import LedgerStore


@pytest.fixture
def store(tmp_path: Path) -> LedgerStore:
    """Seven turns over threads A and B (INTENT, DECISION each), indexes 0..13."""
    ledger = LedgerStore(f"sqlite:///{tmp_path / 'ledger.sqlite3'}")
    for n in range(7):
        for kind in (EventKind.INTENT, EventKind.DECISION):
            ledger.append(
                EventDraft(
                    kind=kind,
                    thread_id="AB"[n % 2],
                    turn_id=f"t-{n}",
                    correlation_id=f"c-{n}",
                    stream_id="s",
                    lane="user_chat",
                    payload={"n": n},
                )
            )
    yield ledger
    ledger.close()


@pytest.mark.parametrize("page", [1, 2, 3, 500])
def test_the_decisions_in_scope_whatever_the_page_size(
    store: LedgerStore, monkeypatch: pytest.MonkeyPatch, page: int
) -> None:
    monkeypatch.setattr(policy_replay, "_PAGE", page)

    def ids(**scope: object) -> list[str]:
        found = list(policy_replay._decisions(store, **scope))  # type: ignore[arg-type]
        assert all(event.kind == EventKind.DECISION for event in found)
        return [event.correlation_id for event in found]

    assert ids(thread_id=None, since=None, until=None) == [f"c-{n}" for n in range(7)]
    assert ids(thread_id="B", since=None, until=None) == ["c-1", "c-3", "c-5"]
    assert ids(thread_id=None, since=5, until=9) == ["c-2", "c-3", "c-4"]  # DECISIONs at 5, 7, 9
    assert ids(thread_id=None, since=6, until=8) == ["c-3"]
    assert ids(thread_id="A", since=13, until=None) == ["c-6"]
    assert ids(thread_id="A", since=14, until=None) == []
