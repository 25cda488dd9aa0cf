"""Verify's check of a DECISION's ``shadow`` entries (:mod:`turngate.core.shadow`).

A shadow entry is recomputed like the DECISION it sits in: the policy input is rebuilt from the
stored INTENT and candidates (the context code the turn ran) and the shadow policy is evaluated
again; its entry must come out the same. The policies verify can re-run are the configured
shadow policies (``TURNGATE_SHADOW_POLICY_MODULE``), the configured active policy and the
built-in ones, matched by (policy id, version, config digest). An entry of another policy is
left as recorded (the hash chain still covers its bytes) and named by :func:`shadows_not_rerun`:
verify reports it as not re-run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from turngate.core.context import ContextConfig, build_context
from turngate.core.decision import judge_as_recorded, stored_scope
from turngate.core.events import Event
from turngate.core.policy import (
    InvalidIntentError,
    LoadedPolicy,
    PolicyDecision,
    PolicyLoadError,
    load_policy,
)
from turngate.core.refs import RefResolutionError
from turngate.core.review import NOT_RERUN, ReviewSpec, budget_block, budget_request, pending_block
from turngate.core.shadow import ENTRY_KEYS, SHADOW_KEY, shadow_problems

log = logging.getLogger(__name__)

BUILT_IN_POLICIES = (
    "turngate.policies.allow_all",
    "turngate.policies.deny_all",
    "turngate.policies.max_user_messages",
)


@lru_cache(maxsize=1)
def known_policies() -> dict[tuple[str, str, str], LoadedPolicy]:
    """(policy id, version, config digest) -> policy, for every policy verify can re-run here."""
    from turngate.settings import load_settings

    settings = load_settings()
    names = [*BUILT_IN_POLICIES, *settings.shadow_policies]
    if settings.policy_module:
        names.append(f"{settings.policy_module}:{settings.policy_object}")
    known: dict[tuple[str, str, str], LoadedPolicy] = {}
    for name in names:
        try:
            policy = load_policy(name)
        except PolicyLoadError as exc:  # the worker refuses to start with it; verify goes on
            log.warning("verify cannot re-run shadow entries of %s: %s", name, exc)
            continue
        known.setdefault((policy.policy_id, policy.policy_version, policy.config_digest), policy)
    return known


def verify_shadows(
    stored: Mapping[str, Any], intent: Event, candidates: Sequence[Event], cfg: ContextConfig
) -> list[str]:
    """Problems with ``stored``'s shadow entries (``[]`` without any)."""
    if SHADOW_KEY not in stored:
        return []
    try:
        policy_input = build_context(intent, candidates, cfg, stored_scope(stored).prompt).policy_input
    except (RefResolutionError, InvalidIntentError):
        policy_input = None
    problems, _not_rerun = shadow_problems(stored, policy_input, known_policies())
    return problems


def rerun_review(
    stored: Mapping[str, Any], intent: Event, candidates: Sequence[Event], cfg: ContextConfig
) -> Mapping[str, Any] | str | None:
    """The ``review`` block the DECISION's own policy gives again on its recorded inputs (None:
    it asks for none; ``NOT_RERUN``: that policy does not load here). For a review a budget asked
    for (the policy asked none), the block the budget's recorded request and the policy's
    re-run ALLOW codes give."""
    again = rerun_policy(stored, intent, candidates, cfg)
    if isinstance(again, str):
        return again
    if again.review is not None:
        return pending_block(again.reason_codes, again.review)
    request = budget_request(stored)
    if request is None or request.budget_id is None or again.decision != "ALLOW":
        return None
    spec = ReviewSpec(role=request.role, deadline_s=request.deadline_s, four_eyes=request.four_eyes)
    return budget_block(tuple(again.reason_codes), spec, request.budget_id)


def rerun_policy(
    stored: Mapping[str, Any], intent: Event, candidates: Sequence[Event], cfg: ContextConfig
) -> PolicyDecision | str:
    """The DECISION's own policy's answer again on its recorded inputs (``NOT_RERUN``: that
    policy does not load here)."""
    recorded = stored.get("policy")
    if not isinstance(recorded, Mapping):
        return NOT_RERUN
    identity = (
        str(recorded.get("policy_id")),
        str(recorded.get("policy_version")),
        str(recorded.get("config_digest")),
    )
    policy = known_policies().get(identity)
    if policy is None:
        return NOT_RERUN
    return judge_as_recorded(intent, candidates, cfg, policy, stored_scope(stored)).decision


def shadows_not_rerun(stored: Mapping[str, Any]) -> list[str]:
    """The policies (``id vVERSION, config DIGEST``) of ``stored``'s well-formed shadow entries
    that verify cannot re-run here (malformed entries are :func:`verify_shadows`' problems)."""
    entries = stored.get(SHADOW_KEY)
    if not isinstance(entries, list):
        return []
    known = known_policies()
    names = []
    for entry in entries:
        if not isinstance(entry, Mapping) or not set(entry) >= ENTRY_KEYS:
            continue
        identity = (str(entry["policy_id"]), str(entry["policy_version"]), str(entry["config_digest"]))
        if identity not in known:
            names.append(f"{identity[0]} v{identity[1]}, config {identity[2]}")
    return names
