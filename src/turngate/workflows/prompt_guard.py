"""A failure while building a turn's system prompt ends the turn as a recorded DENY.

Prompt building runs in workflow code (pure, from the pinned snapshot and the worker's
profiles). An exception there would fail the workflow task, which Temporal retries forever: an
INTENT with no DECISION. Such failures are deterministic (the same snapshot, profile and inputs
fail the same way on every retry and on replay), so the turn records a DENY with a specific
reason code instead, and its ``error`` keeps the detailed prompt code and message.
"""

from __future__ import annotations

from typing import Any

from turngate.core.prompt_layers import PromptError

#: The pinned snapshot does not fit the worker's profiles.json (edited since the thread began:
#: a profile now uses a file layer the snapshot was not taken for).
SNAPSHOT_INCOMPATIBLE = "prompt.snapshot_incompatible"
#: A layer builder raised, returned a non-string, or is not registered; or building failed
#: in another way.
BUILDER_ERROR = "prompt.builder_error"

_INCOMPATIBLE_CAUSES = frozenset({"prompts.layer_not_in_snapshot"})


def prompt_failure(exc: Exception) -> dict[str, Any]:
    """The DECISION's ``error`` for a prompt that could not be built (no secrets, no traceback)."""
    if isinstance(exc, PromptError):
        code = SNAPSHOT_INCOMPATIBLE if exc.reason_code in _INCOMPATIBLE_CAUSES else BUILDER_ERROR
        return {"code": code, "detail": exc.detail, "cause": exc.reason_code}
    if isinstance(exc, KeyError):
        # A profile or layer the pinned prompt names is gone from profiles.json.
        return {"code": SNAPSHOT_INCOMPATIBLE, "detail": f"not in profiles.json: {exc}", "cause": "KeyError"}
    return {"code": BUILDER_ERROR, "detail": f"{type(exc).__name__}: {exc}", "cause": type(exc).__name__}
