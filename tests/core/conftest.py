"""Builders for the core tests: a small in-memory hash-chained ledger.

Test modules get the builder through the session-scoped ``new_chain`` fixture (safe with
hypothesis), so they import nothing but ``turngate``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from turngate.core.events import Event, EventDraft, EventKind, parse_intent, seal
from turngate.core.refs import ref_lookup_ids


class Chain:
    """An append-only list of sealed events (global index, prev-digest chain)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def append(self, draft: EventDraft, created_at: str | None = None) -> Event:
        prev = self.events[-1].digest if self.events else None
        event = seal(draft, len(self.events), prev, created_at=created_at)
        self.events.append(event)
        return event

    def intent(
        self,
        thread: str,
        turn: str,
        message: str,
        *,
        parent: str | None = None,
        refs: Sequence[dict[str, Any]] = (),
        correlation: str | None = None,
        actor: str = "user",
        inputs: dict[str, Any] | None = None,
        obs: dict[str, Any] | None = None,
        created_at: str | None = "2024-01-01T00:00:00Z",
    ) -> Event:
        envelope = parse_intent(
            {
                "interface_version": 3,
                "correlation_id": correlation or f"c-{thread}-{turn}",
                "payload": {
                    "intent_type": "chat.message",
                    "thread_id": thread,
                    "turn_id": turn,
                    "parent_turn_id": parent,
                    "actor": actor,
                    "inputs": inputs or {},
                    "declared_refs": list(refs),
                    "payload": {"message": message},
                },
            }
        )
        draft = envelope.draft()
        if obs is not None:
            draft = draft.model_copy(update={"payload": {**draft.payload, "_obs": obs}})
        return self.append(draft, created_at=created_at)

    def follow(self, intent: Event, kind: EventKind, payload: dict[str, Any]) -> Event:
        draft = EventDraft.following(intent, kind, payload)
        return self.append(draft, created_at="2024-01-01T00:00:01Z")

    def decision(self, intent: Event, decision: str = "ALLOW") -> Event:
        return self.follow(intent, EventKind.DECISION, {"decision": decision, "reason_codes": ["x"]})

    def execution(self, intent: Event, output: str) -> Event:
        return self.follow(
            intent,
            EventKind.EXECUTION,
            {"provider": "echo", "output_text": output, "usage": {"output_tokens": 3}},
        )

    def turn(
        self,
        thread: str,
        turn: str,
        message: str,
        output: str | None = "answer",
        **kwargs: Any,
    ) -> tuple[Event, Event, Event | None]:
        intent = self.intent(thread, turn, message, **kwargs)
        decision = self.decision(intent)
        execution = self.execution(intent, output) if output is not None else None
        return intent, decision, execution

    def candidates_for(self, intent: Event) -> list[Event]:
        """What the ledger hands over (its documented contract): every earlier in-thread event
        matching a ref id, plus the lowest-index other-thread event per id without one."""
        ids = ref_lookup_ids(intent.payload.get("declared_refs") or [])
        earlier = [event for event in self.events if event.index < intent.index]
        out: list[Event] = []
        for ref_id in ids:
            hits = [e for e in earlier if ref_id in (e.correlation_id, e.turn_id, e.digest)]
            inside = [e for e in hits if e.thread_id == intent.thread_id]
            if inside:
                out += inside
            elif hits:
                out.append(hits[0])
        unique = {event.digest: event for event in out}
        return sorted(unique.values(), key=lambda event: event.index)


@pytest.fixture(scope="session")
def new_chain() -> Callable[[], Chain]:
    return Chain
