"""Where the gateway writes artifact pointers into event payloads, and nowhere else.

An artifact pointer is ``{artifact_id, path, sha256, size_bytes}``. A client may send objects of
that shape inside its own data (``inputs``, extra fields of ``payload.payload``, tool call
arguments a model produced): those are plain data. Only the fields the gateway itself sets are
pointers, so only they are served (``/ui/api/artifact``), re-hashed (``turngate verify``, admin
``/verify``, ``turngate replay``) or read back. A client can neither reach another tenant's
artifact by naming its digest, nor make an honest ledger fail verification.

A new field that holds a pointer must be added here, or nothing serves or verifies it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

#: Keys that make a JSON object an artifact pointer (``created_at`` is optional).
POINTER_KEYS: frozenset[str] = frozenset({"artifact_id", "path", "sha256", "size_bytes"})

#: Keys of ``payload.payload`` in an INTENT that only the gateway sets (a message over the inline
#: limit is stored as an artifact; the INTENT keeps a preview and this pointer). Admission
#: refuses them in a client's body.
SERVER_OWNED_BODY_FIELDS: tuple[str, ...] = ("message_artifact", "message_truncated")


def is_pointer(value: Any) -> bool:
    return isinstance(value, dict) and value.keys() >= POINTER_KEYS


def _at(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def server_pointers(kind: str, payload: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The pointers the gateway wrote into an event of ``kind`` (``INTENT``, ``DECISION``,
    ``EXECUTION``), in a fixed order; pointer-shaped objects anywhere else are not pointers."""
    candidates: list[Any] = []
    if kind == "INTENT":
        candidates.append(_at(payload, "payload", "message_artifact"))
        offloaded = payload.get("offloaded")  # large opaque body fields moved out at admission
        if isinstance(offloaded, Mapping):
            candidates.extend(offloaded[name] for name in sorted(offloaded))
    else:
        candidates.append(payload.get("manifest"))
        snapshots = payload.get("fault_snapshots")
        if isinstance(snapshots, Mapping):
            candidates.extend(snapshots[name] for name in sorted(snapshots))
        if kind == "DECISION":
            candidates.append(_at(payload, "prompt", "snapshot_artifact"))
            external = payload.get("external_context")
            if isinstance(external, list):
                candidates.extend(_at(record, "artifact") for record in external)
        elif kind == "EXECUTION":
            candidates.append(payload.get("output_artifact"))
    for candidate in candidates:
        if is_pointer(candidate):
            yield candidate
