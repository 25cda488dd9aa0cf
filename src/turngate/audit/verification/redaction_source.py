"""A DECISION's redaction note, checked against the event it says it was read from.

The turn after a redacted answer gets a one-shot note in its system prompt; the reason is read
from the parent turn's EXECUTION (named by the INTENT's ``parent_turn_id``). The DECISION records
that event as ``prompt.redaction_source {event_index, event_digest, turn_id, reason_code}``;
verify checks that it is the parent turn's redacted EXECUTION in the same thread, recorded before
the DECISION, with that digest and that reason, and that the note recorded is that reason.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, select

from turngate.core.events import Event
from turngate.ledger.schema import events, index_column


def verify_redaction_source(
    conn: Connection, payload: Mapping[str, Any], intent: Event, decision_index: int
) -> list[str]:
    """What differs (empty: nothing, or no redaction source recorded)."""
    prompt = payload.get("prompt")
    if not isinstance(prompt, Mapping) or prompt.get("redaction_source") is None:
        return []
    source = prompt["redaction_source"]
    if not isinstance(source, Mapping):
        return ["redaction_source: not an object"]
    index = source.get("event_index")
    if not isinstance(index, int) or index >= decision_index:
        return [f"redaction_source: event {index!r} is not an earlier event"]
    row = conn.execute(select(events).where(index_column == index)).first()
    if row is None:
        return [f"redaction_source: no event {index}"]
    stored = json.loads(row.payload)
    redaction = stored.get("redaction") if isinstance(stored.get("redaction"), Mapping) else {}
    problems = []
    if row.kind != "EXECUTION" or row.thread_id != intent.thread_id or not stored.get("redacted"):
        problems.append(f"redaction_source: event {index} is not a redacted EXECUTION of this thread")
    if row.turn_id != source.get("turn_id") or source.get("turn_id") != intent.parent_turn_id:
        problems.append(
            f"redaction_source: event {index} is not of the parent turn {intent.parent_turn_id!r}"
        )
    if row.digest != source.get("event_digest"):
        problems.append(f"redaction_source: event {index}'s digest is not the one recorded")
    reason = str(redaction.get("reason_code") or "safety.redacted")
    if source.get("reason_code") != reason or prompt.get("redaction_context") != reason:
        problems.append(
            f"redaction_source: event {index} was redacted for {reason!r}, not the recorded reason"
        )
    return problems
