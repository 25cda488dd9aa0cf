"""Keep an INTENT within the event payload limit (64 KiB) before anything is started.

Per field (docs/ARTIFACTS.md, "Size limits"):

* ``payload.payload.message``: over 16 KiB (UTF-8 bytes) it is stored as an artifact; the INTENT
  keeps a 4,096-character preview and ``message_artifact``. It is also offloaded, whatever its
  size, when the INTENT would not fit otherwise. Over ``TURNGATE_MAX_MESSAGE_BYTES``: 413.
* other ``payload.payload`` fields (opaque to turngate): while the INTENT does not fit, the
  largest one is stored as an artifact (its canonical JSON) and named in the server-owned
  ``offloaded`` map instead.
* ``inputs``, ``declared_refs``, ``declared_tools``, ``budget``: the policy and the prompt
  builder read them, so they cannot become pointers. An INTENT that does not fit once everything
  offloadable is offloaded is refused: 413 ``admission.intent_too_large``, nothing recorded.
"""

from __future__ import annotations

from typing import Any

from turngate.api.cpu_pool import in_cpu_thread
from turngate.artifacts import ArtifactStore
from turngate.artifacts.deadline import aput_within
from turngate.core.canonical import canonical_bytes
from turngate.core.events import AdmissionError, IntentEnvelope
from turngate.core.limits import (
    EVENT_PAYLOAD_LIMIT_BYTES,
    TEXT_INLINE_LIMIT_BYTES,
    TEXT_PREVIEW_CHARS,
    payload_size,
    text_size,
)

INTENT_TOO_LARGE = "admission.intent_too_large"
OFFLOADED_FIELD_KIND = "intent_field"
MESSAGE_KIND = "message"
#: Body keys the gateway itself writes when it offloads the message.
MESSAGE_POINTER_KEYS = frozenset({"message", "message_artifact", "message_truncated"})
#: INTENT fields that stay inline whatever their size (the deterministic core reads them).
NON_OFFLOADABLE = ("inputs", "declared_refs", "declared_tools", "budget")

# The largest pointer a field can become (no created_at: timestamps stay out of digests).
_HEX = "f" * 64
_WIDEST_POINTER: dict[str, Any] = {
    "artifact_id": f"sha256:{_HEX}",
    "path": f"standard/{OFFLOADED_FIELD_KIND}/ff/{_HEX}",
    "sha256": f"sha256:{_HEX}",
    "size_bytes": 10**12,
}


def _extras(envelope: IntentEnvelope) -> dict[str, Any]:
    extra = envelope.payload.payload.model_extra or {}
    return {key: value for key, value in extra.items() if key not in MESSAGE_POINTER_KEYS}


def _with_body(envelope: IntentEnvelope, **changes: Any) -> IntentEnvelope:
    body = envelope.payload.payload.model_copy(update=changes)
    return envelope.model_copy(update={"payload": envelope.payload.model_copy(update={"payload": body})})


def _without_extra(envelope: IntentEnvelope, name: str, pointer: dict[str, Any]) -> IntentEnvelope:
    body = envelope.payload.payload
    kept = {key: value for key, value in (body.model_extra or {}).items() if key != name}
    rebuilt = type(body).model_construct(message=body.message, **kept)
    offloaded = dict(envelope.offloaded or {}) | {f"payload.payload.{name}": pointer}
    payload = envelope.payload.model_copy(update={"payload": rebuilt})
    return envelope.model_copy(update={"payload": payload, "offloaded": offloaded})


def _message_offloaded(envelope: IntentEnvelope) -> bool:
    return bool((envelope.payload.payload.model_extra or {}).get("message_artifact"))


def _preview(envelope: IntentEnvelope, pointer: dict[str, Any]) -> IntentEnvelope:
    return _with_body(
        envelope,
        message=envelope.message[:TEXT_PREVIEW_CHARS],
        message_artifact=pointer,
        message_truncated=True,
    )


def check_intent_fits(envelope: IntentEnvelope) -> bool:
    """Refuse (413) an INTENT that cannot fit even with every offloadable field offloaded; else
    whether anything must be offloaded (:func:`fit_intent`; False for the common small intent,
    which is then measured once). Pure: run before any slot is taken or anything is stored."""
    smallest = envelope
    message_offloads = text_size(envelope.message) > TEXT_INLINE_LIMIT_BYTES
    if message_offloads:
        smallest = _preview(smallest, _WIDEST_POINTER)  # offloaded whatever the rest
    if payload_size(smallest.intent_event_payload()) <= EVENT_PAYLOAD_LIMIT_BYTES:
        return message_offloads
    if not _message_offloaded(smallest):
        smallest = _preview(smallest, _WIDEST_POINTER)
    for name in _extras(smallest):
        smallest = _without_extra(smallest, name, _WIDEST_POINTER)
    payload = smallest.intent_event_payload()
    size = payload_size(payload)
    if size <= EVENT_PAYLOAD_LIMIT_BYTES:
        return True
    sizes = {name: len(canonical_bytes(payload[name])) for name in NON_OFFLOADABLE}
    largest = max(sizes, key=lambda name: (sizes[name], name))
    raise AdmissionError(
        INTENT_TOO_LARGE,
        f"the INTENT would be {size} bytes with every offloadable field stored as an artifact; "
        f"the limit is {EVENT_PAYLOAD_LIMIT_BYTES}. payload.{largest} alone is {sizes[largest]} "
        "bytes: reference large data by an artifact (POST /artifacts) instead of inlining it",
        f"payload.{largest}",
    )


def _too_large(envelope: IntentEnvelope) -> bool:
    return payload_size(envelope.intent_event_payload()) > EVENT_PAYLOAD_LIMIT_BYTES


def _canonical_extras(envelope: IntentEnvelope) -> dict[str, bytes]:
    return {name: canonical_bytes(value) for name, value in _extras(envelope).items()}


async def fit_intent(store: ArtifactStore, envelope: IntentEnvelope, deadline_s: float) -> IntentEnvelope:
    """The envelope with what must be offloaded stored as artifacts, each write retried within
    ``deadline_s`` (``ArtifactError`` when the store fails or stays stuck past it).
    :func:`check_intent_fits` must have passed: then this always fits."""
    if text_size(envelope.message) > TEXT_INLINE_LIMIT_BYTES:
        envelope = await _offload_message(store, envelope, deadline_s)
    # Measuring is canonical JSON of up to the body limit: off the event loop.
    while await in_cpu_thread(_too_large, envelope):
        if not _message_offloaded(envelope):
            envelope = await _offload_message(store, envelope, deadline_s)
            continue
        extras = await in_cpu_thread(_canonical_extras, envelope)
        if not extras:
            break  # cannot happen after check_intent_fits; the ledger check is the backstop
        name = max(extras, key=lambda key: (len(extras[key]), key))
        pointer = await aput_within(store, extras[name], deadline_s, kind=OFFLOADED_FIELD_KIND)
        envelope = _without_extra(envelope, name, pointer.recorded())
    return envelope


async def _offload_message(
    store: ArtifactStore, envelope: IntentEnvelope, deadline_s: float
) -> IntentEnvelope:
    """The message goes to the artifact store: the INTENT (and every Temporal payload) carries a
    preview and the pointer, whose sha256 binds the full text into the INTENT's digest; the
    provider activity reads the full text back."""
    data = envelope.message.encode("utf-8")
    pointer = await aput_within(
        store, data, deadline_s, kind=MESSAGE_KIND, media_type="text/plain; charset=utf-8"
    )
    return _preview(envelope, pointer.recorded())
