"""Shadow policies: evaluated beside the active policy, recorded, never deciding (pure, no I/O).

A shadow policy sees exactly what the active policy saw (the same :class:`PolicyInput`) and its
answer is recorded in the DECISION under ``shadow``: one entry per shadow policy with its id,
version, config digest, decision and reason codes (and ``error`` when it raised). ALLOW/DENY
and the reason codes of the DECISION are the active policy's whatever the shadows say. A turn
whose refs did not resolve never reached a policy: its DECISION records no shadow either, and a
DECISION without shadow policies has no ``shadow`` key at all (its canonical bytes are those of
a turn before shadows existed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from turngate.core.decision import DecisionOutcome, evaluate_policy
from turngate.core.policy import LoadedPolicy, PolicyInput

SHADOW_KEY = "shadow"
#: The keys of one shadow entry (``error`` only when the shadow policy raised).
ENTRY_KEYS = frozenset({"policy_id", "policy_version", "config_digest", "decision", "reason_codes"})


def shadow_entry(policy: LoadedPolicy, policy_input: PolicyInput) -> dict[str, Any]:
    """What ``policy`` decides on ``policy_input``, as recorded in a DECISION's ``shadow`` list."""
    decision, error = evaluate_policy(policy, policy_input)
    entry: dict[str, Any] = policy.describe() | {
        "decision": decision.decision,
        "reason_codes": list(decision.reason_codes),
    }
    if error is not None:
        entry["error"] = {"code": error["code"], "detail": error["detail"]}
    return entry


def with_shadows(outcome: DecisionOutcome, shadows: Sequence[LoadedPolicy]) -> DecisionOutcome:
    """``outcome`` with its DECISION payload's ``shadow`` list (unchanged without shadows, or
    when no policy was asked: a ref or INTENT error)."""
    if not shadows or outcome.policy_input is None:
        return outcome
    entries = [shadow_entry(policy, outcome.policy_input) for policy in shadows]
    return outcome.recording(outcome.record.model_copy(update={"shadow": entries}))


def shadow_agreements(payload: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], bool]]:
    """Each well-formed shadow entry of a DECISION payload, and whether its ALLOW/DENY is the
    DECISION's (what the metrics count and the UI marks)."""
    entries = payload.get(SHADOW_KEY)
    if not isinstance(entries, list):
        return []
    decision = payload.get("decision")
    return [(entry, entry.get("decision") == decision) for entry in entries if isinstance(entry, Mapping)]


def shadow_problems(
    stored: Mapping[str, Any],
    policy_input: PolicyInput | None,
    known: Mapping[tuple[str, str, str], LoadedPolicy],
) -> tuple[list[str], int]:
    """Recompute a DECISION's ``shadow`` entries: (problems, entries that could not be re-run).

    ``known`` maps (policy id, version, config digest) to a loaded policy; an entry of a policy
    not in it cannot be re-run (counted, not a problem: the hash chain still covers its bytes).
    """
    entries = stored.get(SHADOW_KEY)
    if entries is None:
        return [], 0
    if not isinstance(entries, list) or not all(isinstance(entry, Mapping) for entry in entries):
        return ["shadow_malformed: shadow is not a list of objects"], 0
    if policy_input is None:
        return ["shadow_malformed: a shadow entry on a DECISION that asked no policy"], 0
    problems: list[str] = []
    not_rerun = 0
    for position, entry in enumerate(entries):
        missing = sorted(ENTRY_KEYS - set(entry))
        if missing:
            problems.append(f"shadow_malformed: shadow[{position}] lacks {', '.join(missing)}")
            continue
        identity = (str(entry["policy_id"]), str(entry["policy_version"]), str(entry["config_digest"]))
        policy = known.get(identity)
        if policy is None:
            not_rerun += 1
            continue
        if shadow_entry(policy, policy_input) != dict(entry):
            problems.append(
                f"shadow_mismatch: shadow[{position}] ({identity[0]} v{identity[1]}) differs from "
                "the re-evaluated shadow policy"
            )
    return problems, not_rerun
