"""Output safety over the whole answer: the provider activity checks the full text (before any
of it is offloaded) and returns its verdict; this turns the verdict into the EXECUTION's record.

A redacted EXECUTION carries no text and no ``output_artifact``: the raw answer is reachable only
through its ``fault_snapshots.redacted_output`` pointer, a snapshot-retention artifact that the
API serves to ``admin`` keys only (docs/SECURITY.md, "Redacted answers").
"""

from __future__ import annotations

from typing import Any

from turngate.core.payloads import ExecutionPayload
from turngate.core.prompt_layers import PromptConfig
from turngate.core.safety import SafetyRules, check_output
from turngate.workflows.shared import ProviderCallResult


def output_safety_rules(prompts: PromptConfig | None) -> SafetyRules | None:
    """The prompt pack's rules as the provider activity receives them (None: nothing to check)."""
    if prompts is None or not prompts.output_safety.rules:
        return None
    return prompts.output_safety


def apply_checked_safety(
    payload: ExecutionPayload, answer: ProviderCallResult | None
) -> tuple[ExecutionPayload, dict[str, dict[str, Any]]]:
    """The EXECUTION with the activity's verdict applied, and the snapshots the activity already
    stored (``{"redacted_output": pointer}`` when it redacted the answer)."""
    if answer is None or answer.safety is None or payload.error:
        return payload, {}
    verdict = answer.safety
    if verdict.ok:
        return payload, {}
    withheld = payload.model_copy(update={"output_artifact": None, "output_truncated": None}).redacted_by(
        verdict.rule_id, verdict.reason_code, verdict.detail
    )
    snapshot = answer.redacted_output
    return withheld, ({"redacted_output": snapshot} if snapshot else {})


def apply_output_safety(
    payload: ExecutionPayload, answer: ProviderCallResult | None, rules: SafetyRules
) -> tuple[ExecutionPayload, dict[str, str]]:
    """Deterministic output rules over an answer the provider activity did not check (histories
    recorded before it did): a violation keeps the raw answer out of the event (it goes to a
    snapshot artifact) and marks the EXECUTION redacted; the thread's next turn is told why."""
    text = payload.output_text
    if payload.error or not text or (answer is not None and answer.safety is not None):
        return payload, {}
    verdict = check_output(text, rules)
    if verdict.ok:
        return payload, {}
    return payload.redacted_by(verdict.rule_id, verdict.reason_code, verdict.detail), {
        "redacted_output": text
    }
