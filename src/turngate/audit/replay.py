"""Replay: one turn from the ledger, and recorded Temporal histories against the current code.

* :func:`replay_turn` (the context system's ledger replay): reload the turn's stored INTENT and the
  candidate events of its declared refs, recompute the DECISION with the same core code that
  decided (``verify_decision``, ``decide``) under the current context config and a policy loaded
  from a module path, and compare: digests, resolved refs, the recorded policy identity, decision
  and reason codes. Every check is reported pass / fail / skip with its reason.
* :func:`replay_workflows`: fetch TurnWorkflow histories from Temporal and run them through a
  ``Replayer`` with the current workflow code; any nondeterminism is reported per workflow.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlalchemy import select
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter
from temporalio.worker import Replayer

from turngate.artifacts.store import ArtifactError, ArtifactStore
from turngate.audit.verification.candidates import fetch_candidates, ledger_candidates
from turngate.audit.verification.configs import ConfigSource, config_map, stored_config_digest
from turngate.audit.verification.findings import decision_problem_kind
from turngate.audit.verification.spend_recompute import verify_spend
from turngate.core.context import ContextConfig
from turngate.core.decision import decide, stored_scope, verify_decision
from turngate.core.events import Event, EventKind, event_digest
from turngate.core.manifest import parse_pointer
from turngate.core.model_resolution import MODEL_UNAVAILABLE, PROVIDER_MISSING_CREDENTIALS, PROVIDER_UNKNOWN
from turngate.core.pointers import server_pointers
from turngate.core.policy import LoadedPolicy, PolicyLoadError, load_policy
from turngate.core.review import replayed_outcome
from turngate.ledger import LedgerStore
from turngate.ledger.rows import (
    event_from_row,
)
from turngate.ledger.schema import events, index_column
from turngate.workflows.turn import TurnWorkflow

CheckStatus = Literal["pass", "fail", "skip"]
DEFAULT_WORKFLOW_QUERY = "WorkflowType='TurnWorkflow'"
#: Reason codes with which the turn workflow overrides an ALLOW after the policy ran (the
#: requested model cannot be served); replay does not re-resolve models.
MODEL_DENY_CODES: frozenset[str] = frozenset(
    {MODEL_UNAVAILABLE, PROVIDER_MISSING_CREDENTIALS, PROVIDER_UNKNOWN}
)
#: The reason code of a DECISION whose manifest could not be stored (context observability stop semantics).
SYSTEM_ERROR = "SYSTEM_ERROR"
#: Reason-code families with which the workflow denies after the policy allowed: a system prompt
#: that could not be built, or declared external refs that could not be resolved as declared.
WORKFLOW_DENY_PREFIXES = (
    "loop_guard.",
    "prompt.",
    "prompts.",
    "case_query.",
    "external_refs.",
    "artifact.handle",
    "budget.",
)


class ReplayCheck(BaseModel):
    name: str
    status: CheckStatus
    detail: str = ""


class TurnReplay(BaseModel):
    ok: bool = Field(description="no check failed")
    correlation_id: str
    thread_id: str | None = None
    turn_id: str | None = None
    decision_index: int | None = None
    policy_module: str | None = Field(None, description="the module the policy was loaded from")
    recorded: dict[str, Any] = Field(default_factory=dict, description="decision, reason_codes, policy")
    replayed: dict[str, Any] = Field(default_factory=dict, description="the same, recomputed")
    checks: list[ReplayCheck] = Field(default_factory=list)


class _Checks:
    def __init__(self) -> None:
        self.items: list[ReplayCheck] = []

    def add(self, name: str, status: CheckStatus, detail: str = "") -> None:
        self.items.append(ReplayCheck(name=name, status=status, detail=detail))

    def passed(self, name: str, ok: bool, detail_if_failed: str, detail_if_passed: str = "") -> None:
        self.add(name, "pass" if ok else "fail", detail_if_passed if ok else detail_if_failed)


def replay_turn(
    store: LedgerStore,
    correlation_id: str,
    *,
    context_config: ContextConfig,
    policy_module: str | None = None,
    policy_object: str = "POLICY",
    known_configs: Sequence[ContextConfig] = (),
    artifacts: ArtifactStore | None = None,
    config_store: ArtifactStore | None = None,
) -> TurnReplay:
    """Recompute the DECISION of turn ``correlation_id`` from the ledger and compare it.

    The policy is loaded from ``policy_module`` (a module path, as the worker loads it: the
    recorded ``policy_id`` is an identity, not a module path); ``None`` is the observer policy.
    Its id, version and config digest are compared with the recorded ones. ``known_configs`` are
    earlier context configs to recompute DECISIONs pinned to them; a DECISION pinned to another
    config is recomputed with the one stored under its digest in ``config_store`` (default:
    ``artifacts``; :mod:`turngate.artifacts.configs`). With ``artifacts``, the turn's artifact
    pointers are re-hashed too.
    """
    checks = _Checks()
    turn = store.by_correlation(correlation_id)
    by_kind = {event.kind: event for event in turn}
    intent, decision = by_kind.get(EventKind.INTENT), by_kind.get(EventKind.DECISION)
    result = TurnReplay(ok=False, correlation_id=correlation_id, policy_module=policy_module)
    if intent is None or decision is None:
        missing = [kind.value for kind in (EventKind.INTENT, EventKind.DECISION) if kind not in by_kind]
        checks.add("turn_recorded", "fail", f"no {' and no '.join(missing)} recorded for {correlation_id!r}")
        result.checks = checks.items
        return result
    result.thread_id, result.turn_id, result.decision_index = intent.thread_id, intent.turn_id, decision.index
    stored = decision.payload
    result.recorded = {key: stored.get(key) for key in ("decision", "reason_codes", "policy")}
    checks.passed(
        "turn_order",
        intent.index < decision.index,
        f"the INTENT (index {intent.index}) does not precede the DECISION (index {decision.index})",
    )
    bad = [e.index for e in turn if event_digest(e, e.index, e.prev_event_digest) != e.digest]
    checks.passed(
        "event_digests",
        not bad,
        f"recomputed digest differs from the stored one at index {bad}",
        f"{len(turn)} event(s) recomputed",
    )

    candidates = ledger_candidates(store, intent)
    configs = ConfigSource(
        config_map(context_config, known_configs), config_store if config_store is not None else artifacts
    )
    pinned = stored_config_digest(stored)
    lookup = configs.lookup(pinned) if pinned is not None else None
    cfg = lookup.config if lookup is not None else None
    current = configs.current
    if pinned is None or lookup is None:
        checks.add("context_config", "fail", "the DECISION has no boundary.context_config_digest")
    elif pinned == current:
        checks.add("context_config", "pass", f"decided under the current config {current}")
    elif cfg is not None:
        source = f"the config stored at {lookup.path}" if lookup.path else "a given earlier config"
        checks.add("context_config", "pass", f"decided under config {pinned}: recomputed with {source}")
    else:
        checks.add(
            "context_config",
            "fail",
            f"decided under config {pinned}, the current one is {current} (config drift), and "
            f"{lookup.path or 'the stored config'}: {lookup.detail}",
        )
    candidates = _context_checks(checks, store, stored, intent, candidates, cfg)
    _normative_check(checks, store, stored, decision.index)
    if "spend" in stored:  # the budget check, recounted from the ledger (docs/BUDGETS.md)
        with store.read_connection("replay") as conn:
            spend_problems = verify_spend(conn, stored, intent, decision.index)
        checks.passed(
            "budget", not spend_problems, "; ".join(spend_problems), "recomputed up to its position"
        )

    policy = _load(checks, policy_module, policy_object)
    if policy is not None:
        _policy_checks(checks, result, stored, intent, candidates, cfg or context_config, policy)
    execution = by_kind.get(EventKind.EXECUTION)
    if execution is not None:
        same = execution.payload.get("context_digest") == stored.get("context_digest")
        allowed = stored.get("decision") == "ALLOW" and decision.index < execution.index
        checks.passed(
            "execution",
            same and allowed,
            "the EXECUTION does not follow an ALLOW"
            if not allowed
            else "the EXECUTION's context_digest differs from the DECISION's",
            "the EXECUTION follows the ALLOW and names its context_digest",
        )
    if artifacts is not None:
        _artifact_check(checks, artifacts, turn)
    result.checks = checks.items
    result.ok = all(check.status != "fail" for check in checks.items)
    return result


def _context_checks(
    checks: _Checks,
    store: LedgerStore,
    stored: Mapping[str, Any],
    intent: Event,
    candidates: list[Event],
    cfg: ContextConfig | None,
) -> list[Event]:
    """Recompute the DECISION's digests; returns the candidate set that was used."""
    names = ("context_digest", "resolved_refs", "normative_input_digests", "ref_error", "input_digests")
    if cfg is None:
        for name in names:
            checks.add(name, "skip", "needs the context config the DECISION was made under")
        return candidates
    problems = verify_decision(stored, intent, candidates, cfg)
    if problems and candidates:
        # A second opinion: the candidates as the store fetches them today (the workflow's call).
        fetched = fetch_candidates(store, intent)
        if not verify_decision(stored, intent, fetched, cfg):
            problems, candidates = [], fetched
    by_name: dict[str, list[str]] = {name: [] for name in names}
    kinds = {
        "context_digest_mismatch": "context_digest",
        "resolved_refs_mismatch": "resolved_refs",
        "normative_inputs_mismatch": "normative_input_digests",
        "ref_error_mismatch": "ref_error",
        "input_digest_mismatch": "input_digests",
    }
    for problem in problems:
        by_name.setdefault(kinds.get(decision_problem_kind(problem).value, "decision"), []).append(problem)
    for name, found in by_name.items():
        if found:
            checks.add(name, "fail", "; ".join(found))
        else:
            checks.add(name, "pass", _PASS_DETAIL.get(name, ""))
    return candidates


_PASS_DETAIL = {
    "context_digest": "recomputed from the stored INTENT and ref candidates",
    "resolved_refs": "the same events, digests and admissions",
    "normative_input_digests": "the same INTENT digests",
    "ref_error": "the same ref resolution outcome",
    "input_digests": "INTENT and candidate digests recomputed",
}


def _normative_check(checks: _Checks, store: LedgerStore, stored: Mapping[str, Any], index: int) -> None:
    digests = stored.get("normative_input_digests") or []
    if not isinstance(digests, list):
        checks.add("normative_inputs_are_intents", "fail", "normative_input_digests is not a list")
        return
    problems: list[str] = []
    for value in digests:
        found = _event_by_digest(store, value) if isinstance(value, str) else None
        if found is None:
            problems.append(f"{value} is the digest of no event")
        elif found.kind != EventKind.INTENT:
            problems.append(f"{value} is the {found.kind.value} at index {found.index} (observation leak)")
        elif found.index >= index:
            problems.append(f"{value} is the INTENT at index {found.index}, not an earlier one")
    checks.passed(
        "normative_inputs_are_intents",
        not problems,
        "; ".join(problems),
        f"{len(digests)} earlier INTENT digest(s)",
    )


def _event_by_digest(store: LedgerStore, value: str) -> Event | None:
    """The event whose digest, recomputed from its stored row, is ``value``."""
    with store.read_connection("replay") as conn:
        rows = list(
            conn.execute(select(events).where(events.c.digest == value).order_by(index_column)).mappings()
        )
    for row in rows:
        event = event_from_row(row)
        if event_digest(event, event.index, event.prev_event_digest) == value:
            return event
    return None


def _load(checks: _Checks, module: str | None, object_name: str) -> LoadedPolicy | None:
    try:
        return load_policy(module, object_name)
    except PolicyLoadError as exc:
        checks.add("policy_loaded", "fail", str(exc))
        return None


def _policy_checks(
    checks: _Checks,
    result: TurnReplay,
    stored: Mapping[str, Any],
    intent: Event,
    candidates: Sequence[Event],
    cfg: ContextConfig,
    policy: LoadedPolicy,
) -> None:
    recorded = raw if isinstance(raw := stored.get("policy"), Mapping) else {}
    loaded = policy.describe()
    differ = [
        f"{key}: recorded {recorded.get(key)!r}, loaded {loaded[key]!r}"
        for key in loaded
        if recorded.get(key) != loaded[key]
    ]
    checks.passed(
        "policy_identity",
        not differ,
        "; ".join(differ),
        f"{loaded['policy_id']} v{loaded['policy_version']}, config {loaded['config_digest']}",
    )
    scope = stored_scope(stored)
    again = decide(
        intent, candidates, cfg, policy, prompt=scope.prompt, schema_version=scope.schema_version
    ).payload
    # A review the policy asks again is settled by the recorded verdict (core/review.py).
    again_decision, again_codes = replayed_outcome(again, stored)
    again |= {"decision": again_decision, "reason_codes": again_codes}
    result.replayed = {key: again.get(key) for key in ("decision", "reason_codes", "policy")}
    stored_decision, stored_codes = stored.get("decision"), list(stored.get("reason_codes") or [])
    overridden = _override_reason(stored_decision, stored_codes, again["decision"])
    if overridden:
        checks.add("decision", "pass", overridden)
        checks.add("reason_codes", "skip", overridden)
        return
    checks.passed(
        "decision",
        stored_decision == again["decision"],
        f"recorded {stored_decision}, the policy now decides {again['decision']}",
        str(stored_decision),
    )
    checks.passed(
        "reason_codes",
        stored_codes == list(again["reason_codes"]),
        f"recorded {stored_codes}, the policy now gives {list(again['reason_codes'])}",
        ", ".join(stored_codes),
    )


def _override_reason(stored_decision: Any, stored_codes: list[str], replayed: str) -> str:
    """Why a recorded DENY after a replayed ALLOW is expected (the workflow denied it after the
    policy: model resolution or a SYSTEM_ERROR), or ``""``."""
    if stored_decision != "DENY" or replayed != "ALLOW" or len(stored_codes) != 1:
        return ""
    if stored_codes[0] in MODEL_DENY_CODES:
        return f"the policy allows; the workflow then denied for model resolution ({stored_codes[0]})"
    if stored_codes[0] == SYSTEM_ERROR:
        return "the policy allows; the workflow then stopped with SYSTEM_ERROR (artifact store failure)"
    if stored_codes[0].startswith(WORKFLOW_DENY_PREFIXES):
        return f"the policy allows; the workflow then denied ({stored_codes[0]})"
    return ""


def _artifact_check(checks: _Checks, artifacts: ArtifactStore, turn: Sequence[Event]) -> None:
    problems: list[str] = []
    count = 0
    for event in turn:
        for raw in server_pointers(str(event.kind), event.payload):
            count += 1
            try:
                check = artifacts.check(parse_pointer(raw))
            except (ArtifactError, ValueError) as exc:
                problems.append(f"index {event.index}: {exc}")
                continue
            if not check.ok:
                problems.append(f"index {event.index}: {check.path} {check.status} {check.detail}".rstrip())
    checks.passed("artifacts", not problems, "; ".join(problems), f"{count} artifact(s) re-hashed")


# --------------------------------------------------------------------------- workflow replay


class WorkflowReplayResult(BaseModel):
    workflow_id: str
    run_id: str | None = None
    ok: bool
    error: str | None = None


class WorkflowReplayReport(BaseModel):
    ok: bool = Field(description="every history replayed without nondeterminism")
    query: str | None = None
    checked: int
    failed: int
    results: list[WorkflowReplayResult] = Field(default_factory=list)
    duration_ms: int


async def _histories_by_id(client: Client, workflow_ids: Sequence[str]) -> AsyncIterator[WorkflowHistory]:
    for workflow_id in workflow_ids:
        yield await client.get_workflow_handle(workflow_id).fetch_history()


def _run_id(history: WorkflowHistory) -> str | None:
    try:
        return history.run_id or None
    except RuntimeError:  # an empty history, or one that does not start with the workflow start
        return None


async def replay_workflows(
    client: Client,
    *,
    query: str = DEFAULT_WORKFLOW_QUERY,
    limit: int = 1000,
    workflow_ids: Sequence[str] = (),
) -> WorkflowReplayReport:
    """Replay TurnWorkflow histories against the current workflow code.

    ``workflow_ids`` given: their latest runs; otherwise the first ``limit`` executions that
    ``query`` (a Temporal visibility query) lists. Histories stream through the replayer one at a
    time. A history that fails to replay (nondeterminism, an unknown workflow type) is reported
    with its error; the others still run.
    """
    if workflow_ids:
        return await replay_histories(
            _histories_by_id(client, workflow_ids), data_converter=client.data_converter
        )
    histories = client.list_workflows(query, limit=limit).map_histories()
    return await replay_histories(histories, query=query, data_converter=client.data_converter)


async def replay_histories(
    histories: AsyncIterator[WorkflowHistory],
    *,
    query: str | None = None,
    data_converter: DataConverter = pydantic_data_converter,
) -> WorkflowReplayReport:
    """Replay ``histories`` one at a time with the current TurnWorkflow; a failure is recorded
    per workflow (``raise_on_replay_failure`` off), never raised. ``data_converter``: the
    client's, so encrypted histories decrypt and payloads offloaded to the artifact store are
    read back."""
    started = time.perf_counter()
    replayer = Replayer(workflows=[TurnWorkflow], data_converter=data_converter)
    results: list[WorkflowReplayResult] = []
    async with replayer.workflow_replay_iterator(histories) as replayed:
        async for item in replayed:
            failure = item.replay_failure
            results.append(
                WorkflowReplayResult(
                    workflow_id=item.history.workflow_id,
                    run_id=_run_id(item.history),
                    ok=failure is None,
                    error=None if failure is None else f"{type(failure).__name__}: {failure}",
                )
            )
    failed = sum(1 for r in results if not r.ok)
    return WorkflowReplayReport(
        ok=failed == 0,
        query=query,
        checked=len(results),
        failed=failed,
        results=results,
        duration_ms=round((time.perf_counter() - started) * 1000),
    )
