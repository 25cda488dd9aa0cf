"""Fault snapshot bytes as the ledger step stores them.

The workflow hands over a prompt snapshot as the :class:`ProviderCallInput` of the step (small:
an offloaded user message travels as a pointer); stored, it is the exact provider request, built
by the same function the provider call uses, with the message read back in full. A message
pointer that cannot be resolved is itself a fault: the snapshot keeps the preview and names the
pointer under ``missing_pointers``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from turngate.activities.provider import provider_request
from turngate.artifacts import ArtifactNotFoundError
from turngate.core.canonical import canonical_bytes
from turngate.workflows.fault_snapshots import PROMPT_SNAPSHOT
from turngate.workflows.shared import ProviderCallInput


def snapshot_bytes(name: str, text: str, read_artifact: Callable[[str], bytes]) -> bytes:
    """The bytes stored for snapshot ``name`` (``read_artifact`` reads by artifact id)."""
    if name != PROMPT_SNAPSHOT:
        return text.encode()
    call = ProviderCallInput.model_validate_json(text)
    pointer = call.message_artifact
    full: str | None = None
    if pointer is not None:
        try:
            full = read_artifact(str(pointer["artifact_id"])).decode("utf-8")
        except ArtifactNotFoundError:
            full = None
    request: dict[str, Any] = provider_request(call, full).model_dump(mode="json")
    if pointer is not None and full is None:
        request["missing_pointers"] = [{"message_artifact": pointer}]
    return canonical_bytes(request)
