""":func:`turngate.core.decision.verify_decision` without digesting the same events twice.

``verify_decision`` recomputes the event digest of the INTENT and of every candidate before it
recomputes the DECISION. Inside ``verify_all`` the chain pass has just recomputed those digests
from the very same stored rows (one read snapshot), so :func:`verify_decision_reusing` takes
them from there and recomputes only the events the chain pass did not see. Everything else
(the context digest, config digest, normative inputs, resolved refs, ref error) is recomputed
exactly as ``verify_decision`` does, by the same core function
(:func:`turngate.core.decision.recompute_decision_digests`); tests/audit/test_decision_recompute.py
checks that both give the same problems.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from turngate.core.context import ContextConfig
from turngate.core.decision import compare_decision, recompute_decision_digests, stored_scope
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
    again_digests = recompute_decision_digests(intent, candidates, cfg, scope=stored_scope(stored))
    problems.extend(compare_decision(stored, again_digests))
    return problems
