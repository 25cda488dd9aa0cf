"""`turngate verify --replay-policy`: catch a policy that is not deterministic.

A policy must decide from its input alone (no clock, no randomness, no I/O). Policies run as
ordinary Python in the worker (loaded outside the workflow sandbox, which would otherwise
re-import them for every turn), so nothing stops one from reading the time or a random number
while it decides. This check catches it afterwards: every DECISION in scope that the configured
policy made (same policy id, version and config digest) is decided again from its stored INTENT
and referenced events, like ``turngate replay``, and any DECISION the policy now decides
differently is a ``policy_replay_mismatch`` failure. A policy that reads randomness or the clock
differs on replay with high probability over a few decisions; one whose answer only changes
over long periods (the hour of the day) is caught only when verified in another period.
"""

from __future__ import annotations

from collections.abc import Iterator

from turngate.artifacts.store import ArtifactStore
from turngate.audit.replay import replay_turn
from turngate.audit.verification.findings import AuditKind, Finding
from turngate.core.context import ContextConfig
from turngate.core.events import Event, EventKind
from turngate.ledger import LedgerStore

_PAGE = 500


def _decisions(
    store: LedgerStore, thread_id: str | None, since: int | None, until: int | None
) -> Iterator[Event]:
    """The DECISIONs in scope, in index order, a page at a time (only DECISION rows are read
    into events)."""
    cursor = -1 if since is None else since - 1
    while True:
        page = store.of_kind(
            EventKind.DECISION, after_index=cursor, until_index=until, thread_id=thread_id, limit=_PAGE
        )
        if not page:
            return
        yield from page
        cursor = page[-1].index


def replay_policy(
    store: LedgerStore,
    *,
    context_config: ContextConfig,
    policy_module: str | None,
    policy_object: str = "POLICY",
    thread_id: str | None = None,
    since: int | None = None,
    until: int | None = None,
    config_store: ArtifactStore | None = None,
) -> tuple[int, list[Finding]]:
    """(DECISIONs replayed, findings). DECISIONs of another policy identity are not replayed
    (an info finding counts them). A DECISION made under another context config is decided
    again under the one stored in ``config_store`` (:mod:`turngate.artifacts.configs`); one whose
    config cannot be had is not decided again (verify counts it as unchecked already)."""
    replayed = other_policy = no_config = 0
    findings: list[Finding] = []
    for decision in _decisions(store, thread_id, since, until):
        result = replay_turn(
            store,
            decision.correlation_id,
            context_config=context_config,
            policy_module=policy_module,
            policy_object=policy_object,
            config_store=config_store,
        )
        checks = {check.name: check for check in result.checks}
        identity = checks.get("policy_identity")
        if identity is None or identity.status != "pass":
            other_policy += 1  # decided by another policy (or one that no longer loads)
            continue
        config = checks.get("context_config")
        if config is None or config.status != "pass":
            no_config += 1  # decided again under another config, the answer would prove nothing
            continue
        replayed += 1
        differ = [checks[name] for name in ("decision", "reason_codes") if checks.get(name)]
        failed = [check.detail for check in differ if check.status == "fail"]
        if failed:
            findings.append(
                Finding(
                    kind=AuditKind.POLICY_REPLAY_MISMATCH,
                    index=decision.index,
                    correlation_id=decision.correlation_id,
                    detail="the policy decides differently on replay (not deterministic?): "
                    + "; ".join(failed),
                )
            )
    with_what = policy_module or "the observer policy"
    findings.append(
        Finding(
            kind=AuditKind.POLICY_REPLAY_SCOPE,
            index=None,
            detail=(
                f"--replay-policy decided {replayed} DECISION(s) again with {with_what}; "
                f"{other_policy} made by another policy identity (id, version, config digest) were not "
                f"replayed; {no_config} not replayed: their context config could not be had"
            ),
        )
    )
    return replayed, findings
