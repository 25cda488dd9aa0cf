""":func:`turngate.core.decision.verify_decision` without digesting the same events twice.

``verify_decision`` recomputes the event digest of the INTENT and of every candidate before it
recomputes the DECISION. Inside ``verify_all`` the chain pass has just recomputed those digests
from the very same stored rows (one read snapshot), so :func:`verify_decision_reusing` takes
them from there and recomputes only the events the chain pass did not see. Everything else
(the context digest, config digest, normative inputs, resolved refs, ref error) is recomputed
exactly as ``verify_decision`` does, by the same core function
(:func:`turngate.core.decision.recompute_decision_digests`); tests/audit/test_verify_decisions.py
checks that both give the same problems.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from turngate.core.context import ContextConfig
from turngate.core.decision import recompute_decision_digests
from turngate.core.events import Event, event_digest


def verify_decision_reusing(
    stored: Mapping[str, Any],
    intent: Event,
    candidates: Sequence[Event],
    cfg: ContextConfig,
    recomputed: Mapping[int, str],
) -> list[str]:
    """``verify_decision(stored, intent, candidates, cfg)`` (no policy re-run), where
    ``recomputed`` maps ledger index -> the digest recomputed from that stored row."""
    problems: list[str] = []
    for event in (intent, *candidates):
        again = recomputed.get(event.index)
        if again is None:
            again = event_digest(event, event.index, event.prev_event_digest)
        if again != event.digest:
            problems.append(f"event_digest_mismatch: index {event.index}")
    spec = stored.get("context_spec")
    prompt = spec.get("prompt") if isinstance(spec, Mapping) else None
    again_digests = recompute_decision_digests(intent, candidates, cfg, prompt)
    problems.extend(compare_decision(stored, again_digests))
    return problems


def compare_decision(stored: Mapping[str, Any], again: Mapping[str, Any]) -> list[str]:
    """The comparisons of ``verify_decision`` between a stored DECISION payload and
    ``recompute_decision_digests``' result, with the same problem strings."""
    problems: list[str] = []
    boundary = stored.get("boundary")
    stored_config = boundary.get("context_config_digest") if isinstance(boundary, Mapping) else None
    if stored_config != again["context_config_digest"]:
        problems.append("context_config_digest differs from the reloaded config")
    if stored.get("context_digest") != again["context_digest"]:
        problems.append("context_digest differs from the recomputation")
    if list(stored.get("normative_input_digests") or []) != again["normative_input_digests"]:
        problems.append("normative_input_digests differ")
    if list(stored.get("resolved_refs") or []) != again["resolved_refs"]:
        problems.append("resolved_refs differ")
    stored_error = stored.get("error")
    stored_code = stored_error.get("code") if isinstance(stored_error, Mapping) else None
    if again["error_code"] is not None and stored_code != again["error_code"]:
        problems.append(f"ref error differs: stored {stored_code!r}, recomputed {again['error_code']!r}")
    return problems
