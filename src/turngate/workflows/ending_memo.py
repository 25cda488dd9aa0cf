"""What a turn adds to its memo when it ends, for the Temporal UI (docs/TEMPORAL-UI.md).

The turn starts with a memo of ids (``api/turn_metadata.py``); its outcome is known only at the
end: the decision and its reason codes, the context digest and, when the call failed, the error
code. Never a message, an answer or a secret: the memo is readable by anyone who can read the
namespace (and encrypted with the history under ``--encrypt``, as every payload is).
"""

from __future__ import annotations

from typing import Any

from turngate.workflows.shared import TurnResult


def ending_memo(result: TurnResult, context_digest: str | None) -> dict[str, Any]:
    """The memo fields a finished turn adds (those it started with stay). A field without a
    value is left out: a None in a memo upsert removes the key."""
    memo = {
        "decision": result.decision,
        "reason_codes": list(result.reason_codes),
        "context_digest": context_digest,
        "error_code": result.error_code,
    }
    return {key: value for key, value in memo.items() if value is not None}
