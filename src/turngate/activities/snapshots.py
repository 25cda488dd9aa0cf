"""Fault snapshot bytes as the ledger step stores them.

The workflow hands over a prompt snapshot as the :class:`ProviderCallInput` of the step (small:
an offloaded user message travels as a pointer); stored, it is the exact provider request, built
by the same function the provider call uses, with the message and the offloaded earlier messages
read back in full. A message
pointer that cannot be resolved is itself a fault: the snapshot keeps the preview and names the
pointer under ``missing_pointers``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from turngate.activities.provider import continues_preview, provider_request
from turngate.artifacts import ArtifactNotFoundError
from turngate.core.canonical import canonical_bytes
from turngate.workflows.fault_snapshots import PROMPT_SNAPSHOT
from turngate.workflows.shared import ProviderCallInput


def snapshot_bytes(name: str, text: str, read_artifact: Callable[[str], bytes]) -> bytes:
    """The bytes stored for snapshot ``name`` (``read_artifact`` reads by artifact id)."""
    if name != PROMPT_SNAPSHOT:
        return text.encode()
    call = ProviderCallInput.model_validate_json(text)
    missing: list[dict[str, Any]] = []

    def whole(pointer: dict[str, Any], field: str) -> str | None:
        try:
            return read_artifact(str(pointer["artifact_id"])).decode("utf-8")
        except ArtifactNotFoundError:
            missing.append({field: pointer})
            return None

    full = whole(call.message_artifact, "message_artifact") if call.message_artifact is not None else None
    history: dict[int, str] = {}
    for position, pointer in sorted(call.message_artifacts.items()):
        if 0 <= position < len(call.messages):
            found = whole(pointer, "message_artifacts")
            if found is not None and continues_preview(found, call.messages[position], pointer):
                history[position] = found
    request: dict[str, Any] = provider_request(call, full, history).model_dump(mode="json")
    if missing:
        request["missing_pointers"] = missing
    return canonical_bytes(request)
