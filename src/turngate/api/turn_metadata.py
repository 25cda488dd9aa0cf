"""What the Temporal UI shows of a turn from its start: summary, details and memo
(docs/TEMPORAL-UI.md).

All three are sent with the start request, so they cost the turn no history event. They carry
ids, the model and the lane; the message only as a short preview, and only when histories are
not encrypted (with encryption on, the summary must not say what the encrypted INTENT says).
They are payloads: the payload codec encrypts them with the rest of the history.
"""

from __future__ import annotations

from typing import Any

from turngate.core.events import IntentEnvelope

PREVIEW_CHARS = 60


def _preview(message: str) -> str:
    flat = " ".join(message.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


def turn_summary(envelope: IntentEnvelope, *, encrypted: bool) -> str:
    """One line, e.g. ``chat.message · gpt-4o-mini · thread t-42 · "Summarise the…"``."""
    p = envelope.payload
    parts = [p.intent_type, p.requested_model_id or "default model", f"thread {envelope.thread_id}"]
    if not encrypted and not envelope.offloaded:
        parts.append(f'"{_preview(envelope.message)}"')
    return " · ".join(parts)


def turn_details(envelope: IntentEnvelope, *, web_url: str | None) -> str:
    """Markdown: the turn's ids and links to its page and its thread in turngate's web UI."""
    p = envelope.payload
    lines = [
        f"**Correlation id** `{envelope.correlation_id}`",
        f"**Thread** `{envelope.thread_id}` · **turn** `{envelope.turn_id}`",
        f"**Lane** `{p.lane}` · **actor** `{p.actor}` · **stream** `{p.stream_id}`",
    ]
    if envelope.tenant_id:
        lines.append(f"**Tenant** `{envelope.tenant_id}`")
    if web_url:
        base = web_url.rstrip("/")
        lines.append(
            f"[Turn: context and proof]({base}/ui/#/turn/{envelope.correlation_id}) · "
            f"[Thread]({base}/ui/#/thread/{envelope.thread_id})"
        )
    return "\n\n".join(lines)


def turn_memo(envelope: IntentEnvelope) -> dict[str, Any]:
    """The memo a turn starts with. The decision, context digest and error code are known only
    once the turn ran: the workflow adds them when it ends (``workflows/ending_memo.py``)."""
    return {
        "correlation_id": envelope.correlation_id,
        "thread_id": envelope.thread_id,
        "turn_id": envelope.turn_id,
        "intent_type": envelope.payload.intent_type,
        "requested_model_id": envelope.payload.requested_model_id,
    }
