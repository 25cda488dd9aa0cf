"""Size limits that keep raw blobs out of the ledger and out of Temporal histories.

* :data:`EVENT_PAYLOAD_LIMIT_BYTES`: no stored event payload (canonical JSON, ``_obs`` included)
  is larger; ``turngate verify`` reports one that is as a failure.
* :data:`TEXT_INLINE_LIMIT_BYTES`: a user message or a model answer larger than this (UTF-8
  bytes, not characters) is stored as an artifact, and the event keeps a preview and the
  pointer. It is a quarter of the payload limit because the same text appears in more than one
  place (the INTENT's message and the DECISION's context spec), next to refs and prompt records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turngate.core.canonical import canonical_bytes

EVENT_PAYLOAD_LIMIT_BYTES = 64 * 1024
TEXT_INLINE_LIMIT_BYTES = 16 * 1024
#: Characters of an offloaded text kept inline as its preview (at most 16 KiB in UTF-8).
TEXT_PREVIEW_CHARS = 4096


def payload_size(payload: Mapping[str, Any]) -> int:
    """The stored size of an event payload: its canonical JSON in bytes."""
    return len(canonical_bytes(dict(payload)))


def text_size(text: str) -> int:
    """A text's size in UTF-8 bytes (what the limits count, not characters)."""
    return len(text.encode("utf-8"))
