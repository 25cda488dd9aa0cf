"""Output safety over the whole answer: the provider activity checks the full text (before any
of it is offloaded) and returns its verdict; this turns the verdict into the EXECUTION's record.

A redacted EXECUTION carries no text and no ``output_artifact``: the raw answer is reachable only
through its ``fault_snapshots.redacted_output`` pointer, a snapshot-retention artifact that the
API serves to ``admin`` keys only (docs/SECURITY.md, "Redacted answers").
"""

from __future__ import annotations

from typing import Any

from turngate.core.prompt_layers import PromptConfig

#: Where ``TurnWorkflow._execute`` parks the activity's verdict until :func:`apply_checked_safety`.
CHECKED_SAFETY_KEY = "_checked_safety"


def output_safety_rules(prompts: PromptConfig | None) -> dict[str, Any] | None:
    """The prompt pack's rules as the provider activity receives them (None: nothing to check)."""
    if prompts is None or not prompts.output_safety.rules:
        return None
    rules: dict[str, Any] = prompts.output_safety.model_dump(mode="json")
    return rules


def apply_checked_safety(payload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Record the activity's verdict in ``payload`` (in place: the EXECUTION payload being built)
    and return the snapshots it already stored (``{"redacted_output": pointer}`` when redacted)."""
    checked = payload.pop(CHECKED_SAFETY_KEY, None)
    if checked is None or payload.get("error"):
        return {}
    verdict = checked["verdict"]
    if verdict.get("ok"):
        return {}
    payload.pop("output_artifact", None)
    payload.pop("output_truncated", None)
    mark_redacted(payload, verdict.get("rule_id"), verdict.get("reason_code"), verdict.get("detail"))
    snapshot = checked.get("snapshot")
    return {"redacted_output": snapshot} if snapshot else {}


def mark_redacted(payload: dict[str, Any], rule_id: Any, reason_code: Any, detail: Any) -> None:
    """The EXECUTION record of a redacted answer: no text, and which rule fired (in place)."""
    payload["output_text"] = ""
    payload["redacted"] = True
    payload["redaction"] = {"rule_id": rule_id, "reason_code": reason_code, "detail": detail}
