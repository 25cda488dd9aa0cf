"""TurnWorkflow: INTENT -> DECISION -> EXECUTION for one turn.

Deterministic work (ref resolution, digests, policy, model resolution, assembly) runs here, in
core/ code; everything that touches the world is an activity. The ledger steps are local
activities (short, idempotent, on this worker: fewer history events per turn); the provider call
is a regular activity on its own task queue (heartbeats, wall-clock timeout, retries only for
retryable errors).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError, TimeoutType

with workflow.unsafe.imports_passed_through():
    from turngate.artifacts.deadline import MAX_ARTIFACT_DEADLINE_S
    from turngate.core.assembly import assemble, uses_tool_messages
    from turngate.core.client_context import (
        REASON_INVALID_CLIENT_CONTEXT,
        ClientContext,
        InvalidClientContext,
        client_context_of,
    )
    from turngate.core.context import ContextConfig
    from turngate.core.decision import DecisionOutcome, decide
    from turngate.core.events import Event, EventDraft, EventKind, IntentEnvelope
    from turngate.core.external import ExternalContext, ExternalError
    from turngate.core.manifest import build_denied_manifest, build_manifest
    from turngate.core.model_resolution import ModelResolution
    from turngate.core.policy import load_policy
    from turngate.core.prompt_layers import PromptConfig, parse_prompt_config
    from turngate.core.refs import RefResolutionError, external_refs_of, ref_lookup_ids
    from turngate.core.safety import check_output
    from turngate.core.shadow import with_shadows
    from turngate.core.system_prompt import SystemPrompt, build_system_prompt
    from turngate.core.tools import (
        ToolSpec,
        admit_tool_calls,
        exchange_count,
        first_transition,
        next_phase_for,
        offered_tools,
    )
    from turngate.prompts.pack_builders import pack_builders
    from turngate.prompts.token_estimators import loaded_estimator
    from turngate.workflows.context_scope import spec_version, with_external
    from turngate.workflows.fault_snapshots import decision_snapshots, execution_snapshots
    from turngate.workflows.prompt_guard import prompt_failure
    from turngate.workflows.redaction import (
        CHECKED_SAFETY_KEY,
        apply_checked_safety,
        mark_redacted,
        output_safety_rules,
    )
    from turngate.workflows.shared import (
        SA_DECISION,
        SA_POLICY_ID,
        AppendInput,
        BeginTurnInput,
        BeginTurnResult,
        Boundary,
        ExternalRefsInput,
        ProviderCallInput,
        ProviderCallResult,
        RecordedEvent,
        TurnInput,
        TurnResult,
    )
    from turngate.workflows.spend import execute_plan, govern, resolve_route

#: workflow.patched id: the offered tool definitions count against the token budget.
PATCH_TOOLS_IN_BUDGET = "tools-in-token-budget"
#: workflow.patched id: tool calls and tool results are sent as tool messages (a tool loop).
PATCH_TOOL_LOOP = "tool-loop-messages"
LEDGER_STEP_TIMEOUT = timedelta(seconds=10)
# Steps that also write artifacts: their writes end by the boundary's artifact deadline (at most
# 60 s, then SYSTEM_ERROR), the ledger work around them gets the usual step timeout on top.
ARTIFACT_STEP_TIMEOUT = LEDGER_STEP_TIMEOUT + timedelta(seconds=MAX_ARTIFACT_DEADLINE_S)
LEDGER_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=50),
    maximum_interval=timedelta(seconds=5),
    non_retryable_error_types=["ledger.conflict"],
)
# Index reads and Workbench fetches (each bounded by its own timeout), retried a few times; the
# activity records a transient fetch failure as a refusal on its last attempt.
EXTERNAL_REFS_TIMEOUT = timedelta(seconds=60)
EXTERNAL_REFS_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    maximum_interval=timedelta(seconds=2),
    maximum_attempts=3,
)
NON_RETRYABLE_PROVIDER_ERRORS = [
    "provider.bad_request",
    "provider.auth",
    "provider.not_found",
    "provider.request_too_large",
    "provider.unprocessable",
    "provider.client_error",
    "provider.missing_credentials",
]


def _recorded(event: Event) -> RecordedEvent:
    return RecordedEvent(kind=str(event.kind), index=event.index, digest=event.digest)


@workflow.defn(name="TurnWorkflow")
class TurnWorkflow:
    def __init__(self) -> None:
        self._recorded: dict[str, RecordedEvent] = {}

    @workflow.query(name="recorded")
    def recorded(self) -> dict[str, RecordedEvent]:
        """What this turn has recorded so far (no history cost)."""
        return dict(self._recorded)

    @workflow.run
    async def run(self, inp: TurnInput) -> TurnResult:
        envelope = inp.envelope
        begin: BeginTurnResult = await workflow.execute_local_activity(
            "turngate.begin_turn",
            BeginTurnInput(
                intent=envelope.draft(),
                ref_ids=ref_lookup_ids(list(envelope.payload.declared_refs)),
            ),
            result_type=BeginTurnResult,
            start_to_close_timeout=ARTIFACT_STEP_TIMEOUT,
            retry_policy=LEDGER_RETRY,
        )
        intent = begin.intent
        self._recorded["INTENT"] = _recorded(intent)
        if "EXECUTION" in begin.recorded:
            # The turn is complete in the ledger: never call the provider twice for it.
            return self._already_recorded(intent, begin.recorded)
        boundary = begin.boundary

        model, route = resolve_route(envelope.payload.requested_model_id, boundary)
        prompts = parse_prompt_config(boundary.prompt_config) if boundary.prompt_config else None
        try:
            system = self._system_prompt(prompts, begin, intent)
        except Exception as exc:  # deterministic: a recorded DENY, never a task retried forever
            system = None
            begin = begin.model_copy(update={"prompt_error": prompt_failure(exc)})
        outcome = self._decide(intent, begin.candidates, boundary, model, system, begin, spec_version(intent))
        client, outcome = _client_context(envelope.payload.inputs, outcome)
        outcome, model, plan = govern(outcome, model, route, begin, envelope)
        external = await self._external_context(intent) if outcome.allowed else None
        if external is not None:
            outcome = with_external(outcome, external)
        assembly = None
        offered: list[ToolSpec] = []
        if outcome.allowed and outcome.resolution is not None:
            budget = boundary.budget_tokens if system is None or system.trim_history else 10**12
            estimator = loaded_estimator(boundary.token_estimator)  # resolved at worker start
            if prompts is not None and system is not None:
                offered = offered_tools(
                    prompts.tools_for(prompts.profiles[system.profile]), exchange_count(outcome.resolution)
                )
                outcome.payload["prompt"]["tools_offered"] = [spec.name for spec in offered]
            if client is not None:
                offered += [tool.spec() for tool in client.tools]
            # The offered tool definitions are sent too: they count against the budget (turns
            # recorded before this rule keep their assembly on replay).
            counted = offered if offered and workflow.patched(PATCH_TOOLS_IN_BUDGET) else []
            assembly = assemble(
                system.text if system else None,
                outcome.resolution,
                envelope.message,
                budget_tokens=budget,
                estimator=estimator,
                external=external.items if external is not None else (),
                client_messages=client.messages if client is not None else (),
                tool_definitions=[spec.definition() for spec in counted],
                tool_results=client.tool_results if client is not None else (),
                tool_messages=uses_tool_messages(outcome.resolution, client)
                and workflow.patched(PATCH_TOOL_LOOP),
            )
        run_id = workflow.info().run_id
        if assembly is not None:
            manifest = build_manifest(
                outcome,
                assembly,
                intent=intent,
                run_id=run_id,
                step_id="decision",
                external=external,
                system=system,
            )
        else:
            manifest = build_denied_manifest(
                outcome, intent=intent, run_id=run_id, step_id="decision", external=external
            )
        decision, stopped = await self._record(
            self._draft(intent, EventKind.DECISION, outcome.payload),
            manifest=manifest.model_dump(mode="json"),
            snapshots=decision_snapshots(
                lambda: _request_so_far(envelope, intent, model, system), outcome.payload, external
            ),
            on_system_error=_deny_for_system_error,
        )
        self._recorded["DECISION"] = _recorded(decision)
        workflow.upsert_search_attributes(
            [
                SA_DECISION.value_set(decision.payload["decision"]),
                SA_POLICY_ID.value_set(decision.payload["policy_id"]),
            ]
        )
        result = TurnResult(
            workflow_id=workflow.info().workflow_id,
            correlation_id=intent.correlation_id,
            decision=decision.payload["decision"],
            reason_codes=list(decision.payload["reason_codes"]),
            intent=self._recorded["INTENT"],
            decision_event=self._recorded["DECISION"],
        )
        if stopped or assembly is None:
            return result

        call = ProviderCallInput(
            correlation_id=intent.correlation_id,
            thread_id=intent.thread_id,
            provider=model.provider or "",
            model=model.resolved_model_id or "",
            messages=[m.model_dump() for m in assembly.messages],
            max_tokens=envelope.payload.budget.max_tokens if envelope.payload.budget else None,
            temperature=client.temperature if client is not None else None,
            tools=[spec.definition() for spec in offered],
            message_artifact=_message_artifact(envelope),
            output_safety=output_safety_rules(prompts if system is not None else None),
            message_artifacts=dict(assembly.message_artifacts),
        )
        if plan is not None:
            payload = await execute_plan(
                plan, call, model, lambda c, m, attempts: self._execute(c, m, outcome, boundary, attempts)
            )
        else:
            payload = await self._execute(call, model, outcome, boundary)
        _admit_tool_calls(payload, offered, envelope.payload.inputs)
        if prompts is not None and system is not None:
            payload["exchanges_count"] = exchange_count(outcome.resolution) + 1
        snapshots = execution_snapshots(
            call, payload, external, debug=envelope.payload.inputs.get("debug_snapshot") is True
        )
        stored: dict[str, dict[str, Any]] = {}
        if prompts is not None and system is not None:
            snapshots |= _apply_output_safety(payload, prompts)
            stored = apply_checked_safety(payload)
        execution, _ = await self._record(
            self._draft(intent, EventKind.EXECUTION, payload),
            manifest=build_manifest(
                outcome,
                assembly,
                intent=intent,
                run_id=run_id,
                step_id="execution",
                external=external,
                system=system,
            ).model_dump(mode="json"),
            snapshots=snapshots,
            stored_snapshots=stored,
            on_system_error=_execution_system_error,
        )
        self._recorded["EXECUTION"] = _recorded(execution)
        error = execution.payload.get("error")
        return result.model_copy(
            update={
                "execution": self._recorded["EXECUTION"],
                "error_code": error["code"] if error else None,
            }
        )

    def _already_recorded(self, intent: Event, recorded: dict[str, Event]) -> TurnResult:
        decision, execution = recorded["DECISION"], recorded["EXECUTION"]
        self._recorded |= {"DECISION": _recorded(decision), "EXECUTION": _recorded(execution)}
        error = execution.payload.get("error")
        return TurnResult(
            workflow_id=workflow.info().workflow_id,
            correlation_id=intent.correlation_id,
            decision=decision.payload["decision"],
            reason_codes=list(decision.payload["reason_codes"]),
            intent=self._recorded["INTENT"],
            decision_event=self._recorded["DECISION"],
            execution=self._recorded["EXECUTION"],
            error_code=error["code"] if error else None,
        )

    @staticmethod
    def _system_prompt(
        prompts: PromptConfig | None, begin: BeginTurnResult, intent: Event
    ) -> SystemPrompt | None:
        if prompts is None or begin.prompt is None:
            return None
        inputs = intent.payload.get("inputs") or {}
        return build_system_prompt(
            begin.prompt.snapshot,
            prompts.profile_for(intent.intent_type, inputs),
            inputs,
            builders=pack_builders(prompts),  # loaded at worker start: a lookup here
            redaction_reason=begin.prompt.redaction_reason,
        )

    def _decide(
        self,
        intent: Event,
        candidates: list[Event],
        boundary: Boundary,
        model: ModelResolution,
        system: SystemPrompt | None,
        begin: BeginTurnResult,
        spec_version: str,
    ) -> DecisionOutcome:
        with workflow.unsafe.imports_passed_through():
            policy = load_policy(boundary.policy_module, boundary.policy_object)
        extra: dict[str, Any] = {
            "token_budget": {"tokens": boundary.budget_tokens, "estimator": boundary.token_estimator},
            "provider": model.provider,
            "requested_model_id": model.requested_model_id,
            "resolved_model_id": model.resolved_model_id,
        }
        pinned = None
        if system is not None and begin.prompt is not None:
            snapshot = begin.prompt.snapshot
            pinned = {
                "snapshot_digest": snapshot.snapshot_digest,
                "profile_digest": system.profile_digest,
                "system_prompt_sha256": system.text_sha256,
            }
            extra["prompt"] = pinned | {
                "task_id": snapshot.task_id,
                "provider": snapshot.provider,
                "profile": system.profile,
                "done_event": system.done_event,
                "snapshot_artifact": begin.prompt.snapshot_artifact,
                "pinned_by_index": begin.prompt.pinned_by_index,
                "redaction_context": begin.prompt.redaction_reason,
                "layers": [layer.model_dump(mode="json") for layer in system.layers],
                "skipped_layers": [layer.model_dump(mode="json") for layer in system.skipped],
                "tools_offered": [],
            }
        outcome = decide(
            intent,
            candidates,
            ContextConfig.model_validate(boundary.context_config),
            policy,
            execution=extra,
            prompt=pinned,
            schema_version=spec_version,
        )
        if boundary.shadow_policies:  # recorded beside the decision, never deciding
            with workflow.unsafe.imports_passed_through():
                shadows = [load_policy(name) for name in boundary.shadow_policies]
            outcome = with_shadows(outcome, shadows)
        if begin.prompt_error is not None and outcome.allowed:
            # Only an allowed turn needs its prompt; an earlier DENY (a ref error, the policy)
            # keeps its own reason and error, which verify recomputes.
            payload = dict(outcome.payload)
            payload.update(
                decision="DENY", reason_codes=[begin.prompt_error["code"]], error=begin.prompt_error
            )
            return DecisionOutcome(
                allowed=False,
                payload=payload,
                resolution=outcome.resolution,
                context_spec=outcome.context_spec,
            )
        if outcome.allowed and not model.ok:
            # An unusable model is decided here, not discovered at execution time.
            payload = dict(outcome.payload)
            payload["decision"] = "DENY"
            payload["reason_codes"] = [model.reason_code or "model.unavailable"]
            return DecisionOutcome(
                allowed=False,
                payload=payload,
                resolution=outcome.resolution,
                context_spec=outcome.context_spec,
            )
        return outcome

    async def _external_context(self, intent: Event) -> ExternalContext | None:
        """Resolve the turn's ``case_query`` / ``artifact.handle`` refs (an activity: it reads
        indexes and may fetch over the network); ``None`` when the turn declared none."""
        try:
            refs = external_refs_of(intent)
        except RefResolutionError as exc:
            return ExternalContext(error=ExternalError(code=exc.code, detail=exc.detail, ref_index=-1))
        if not refs:
            return None
        try:
            return await workflow.execute_activity(
                "turngate.resolve_external_refs",
                ExternalRefsInput(
                    tenant_id=intent.tenant_id,
                    correlation_id=intent.correlation_id,
                    refs=[ref.model_dump(mode="json", exclude_none=True) for ref in refs],
                ),
                result_type=ExternalContext,
                start_to_close_timeout=EXTERNAL_REFS_TIMEOUT,
                retry_policy=EXTERNAL_REFS_RETRY,
            )
        except ActivityError as exc:
            cause = exc.cause
            detail = cause.message if isinstance(cause, ApplicationError) else str(cause or exc)
            return ExternalContext(
                error=ExternalError(code="external_refs.unavailable", detail=detail, ref_index=-1)
            )

    async def _execute(
        self,
        call: ProviderCallInput,
        model: ModelResolution,
        outcome: DecisionOutcome,
        boundary: Boundary,
        attempts: int = 3,
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "provider": model.provider,
            "model_id": model.resolved_model_id,
            "requested_model_id": model.requested_model_id,
            "resolved_model_id": model.resolved_model_id,
            "context_digest": outcome.payload.get("context_digest"),
        }
        try:
            answer = await _call_provider(call, boundary, attempts)
        except (ActivityError, TimeoutError) as exc:
            # A local activity's timeout arrives wrapped in ActivityError when it happens and as a
            # bare TimeoutError when replayed from its marker: both are the same outcome.
            payload["output_text"] = ""
            payload["error"] = _execution_error(exc, model.provider)
            return payload
        payload["output_text"] = answer.output_text
        payload["usage"] = answer.usage
        if answer.safety is not None:
            payload[CHECKED_SAFETY_KEY] = {"verdict": answer.safety, "snapshot": answer.redacted_output}
        if answer.output_artifact is not None:
            # The full answer is over the inline limit: it lives in the artifact store.
            payload["output_artifact"] = answer.output_artifact
            payload["output_truncated"] = answer.output_truncated
        if answer.tool_calls:
            payload["tool_calls"] = answer.tool_calls
        payload["_obs"] = {"duration_ms": answer.duration_ms}
        return payload

    async def _record(
        self,
        draft: EventDraft,
        *,
        manifest: dict[str, Any] | None = None,
        snapshots: dict[str, str] | None = None,
        stored_snapshots: dict[str, dict[str, Any]] | None = None,
        on_system_error: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None,
    ) -> tuple[Event, bool]:
        """Append an event with its artifacts. If the artifacts cannot be stored, the event is
        recorded without them, marked SYSTEM_ERROR with the missing pointers, and the turn
        stops (returns True)."""
        try:
            return await self._append(
                AppendInput(
                    draft=draft,
                    manifest=manifest,
                    snapshots=snapshots or {},
                    stored_snapshots=stored_snapshots or {},
                )
            ), False
        except (ActivityError, ApplicationError) as exc:
            # A failed local activity may surface bare or wrapped in ActivityError.
            cause = exc.cause if isinstance(exc, ActivityError) else exc
            if on_system_error is None or not (
                isinstance(cause, ApplicationError) and cause.type == "artifact.unavailable"
            ):
                raise
            details = cause.details[0] if cause.details and isinstance(cause.details[0], dict) else {}
            error = {
                "code": "SYSTEM_ERROR",
                "detail": cause.message,
                "missing_pointers": details.get("missing_pointers", []),
            }
            payload = on_system_error(dict(draft.payload), error)
            return await self._append(AppendInput(draft=draft.model_copy(update={"payload": payload}))), True

    async def _append(self, inp: AppendInput) -> Event:
        return await workflow.execute_local_activity(
            "turngate.append_event",
            inp,
            result_type=Event,
            start_to_close_timeout=ARTIFACT_STEP_TIMEOUT
            if inp.manifest or inp.snapshots
            else LEDGER_STEP_TIMEOUT,
            retry_policy=LEDGER_RETRY,
        )

    @staticmethod
    def _draft(intent: Event, kind: EventKind, payload: dict[str, Any]) -> EventDraft:
        return EventDraft(
            kind=kind,
            thread_id=intent.thread_id,
            turn_id=intent.turn_id,
            parent_turn_id=intent.parent_turn_id,
            correlation_id=intent.correlation_id,
            stream_id=intent.stream_id,
            lane=intent.lane,
            actor=intent.actor,
            intent_type=intent.intent_type,
            payload=payload,
            tenant_id=intent.tenant_id,
        )


async def _call_provider(
    call: ProviderCallInput, boundary: Boundary, attempts: int = 3
) -> ProviderCallResult:
    """The provider call: a regular activity on the llm queue, or (``provider_activity=local``) a
    local activity on this worker, which keeps the turn to one workflow task. Same timeout and
    retries either way; a local call has no heartbeats (its worker's liveness is the workflow
    task's)."""
    wall_clock = timedelta(seconds=boundary.llm_wall_clock_s)
    retry = RetryPolicy(
        initial_interval=timedelta(milliseconds=500),
        maximum_attempts=attempts,
        non_retryable_error_types=NON_RETRYABLE_PROVIDER_ERRORS,
    )
    if boundary.provider_activity == "local":
        return await workflow.execute_local_activity(
            "turngate.call_provider",
            call,
            result_type=ProviderCallResult,
            start_to_close_timeout=wall_clock,
            schedule_to_close_timeout=wall_clock,
            retry_policy=retry,
        )
    return await workflow.execute_activity(
        "turngate.call_provider",
        call,
        result_type=ProviderCallResult,
        task_queue=boundary.llm_task_queue,
        start_to_close_timeout=wall_clock,
        schedule_to_close_timeout=wall_clock,
        heartbeat_timeout=timedelta(seconds=10),
        retry_policy=retry,
    )


def _client_context(
    inputs: dict[str, Any], outcome: DecisionOutcome
) -> tuple[ClientContext | None, DecisionOutcome]:
    """The intent's client-supplied messages and tools; a malformed one DENIES the turn."""
    try:
        return client_context_of(inputs), outcome
    except InvalidClientContext as exc:
        if not outcome.allowed:
            return None, outcome
        error = {"code": REASON_INVALID_CLIENT_CONTEXT, "detail": str(exc)}
        payload = dict(outcome.payload) | {
            "decision": "DENY",
            "reason_codes": [REASON_INVALID_CLIENT_CONTEXT],
            "error": error,
        }
        return None, outcome.model_copy(update={"allowed": False, "payload": payload})


def _deny_for_system_error(payload: dict[str, Any], error: dict[str, Any]) -> dict[str, Any]:
    """A DECISION whose manifest could not be stored: the turn stops (context observability)."""
    return payload | {"decision": "DENY", "reason_codes": ["SYSTEM_ERROR"], "error": error}


def _execution_system_error(payload: dict[str, Any], error: dict[str, Any]) -> dict[str, Any]:
    """An EXECUTION whose manifest or fault snapshots could not be stored."""
    if payload.get("error"):
        error = error | {"cause": payload["error"]}
    return payload | {"error": error}


def _admit_tool_calls(payload: dict[str, Any], offered: list[ToolSpec], inputs: dict[str, Any]) -> None:
    """Only calls to tools offered this turn, with valid arguments, are recorded as admitted (and
    so forwarded); a transition signal maps to the next phase the intent's inputs configure, at
    the path the tool spec names."""
    calls = payload.pop("tool_calls", None)
    if not calls:
        return
    admission = admit_tool_calls(calls, offered)
    payload["tool_calls"] = [call.model_dump(mode="json") for call in admission.admitted]
    if admission.rejected:
        payload["tool_calls_rejected"] = [call.model_dump(mode="json") for call in admission.rejected]
    hit = first_transition(admission, offered)
    if hit is not None:
        call, transition = hit
        payload["phase_transition"] = transition
        payload["next_phase"] = next_phase_for(call, transition, offered, inputs)


def _apply_output_safety(payload: dict[str, Any], prompts: PromptConfig) -> dict[str, str]:
    """Deterministic output rules over an answer the provider activity did not check (histories
    recorded before it did): a violation keeps the raw answer out of the event (it goes to a
    snapshot artifact) and marks the EXECUTION redacted; the thread's next turn is told why."""
    text = payload.get("output_text") or ""
    if payload.get("error") or not text or CHECKED_SAFETY_KEY in payload:
        return {}
    verdict = check_output(text, prompts.output_safety)
    if verdict.ok:
        return {}
    mark_redacted(payload, verdict.rule_id, verdict.reason_code, verdict.detail)
    return {"redacted_output": text}


def _message_artifact(envelope: IntentEnvelope) -> dict[str, Any] | None:
    """The pointer to the full user message, when ingress offloaded it (over the inline limit)."""
    extra = envelope.payload.payload.model_extra
    return extra.get("message_artifact") if extra else None


def _request_so_far(
    envelope: IntentEnvelope, intent: Event, model: ModelResolution, system: SystemPrompt | None
) -> ProviderCallInput:
    """A denied turn's provider request as far as it was built: system prompt and user message."""
    messages = [{"role": "system", "content": system.text}] if system is not None and system.text else []
    messages.append({"role": "user", "content": envelope.message})
    return ProviderCallInput(
        correlation_id=intent.correlation_id,
        provider=model.provider or "",
        model=model.resolved_model_id or "",
        messages=messages,
        message_artifact=_message_artifact(envelope),
    )


def _execution_error(exc: ActivityError | TimeoutError, provider: str) -> dict[str, Any]:
    """The structured, secret-free error an EXECUTION records."""
    cause = exc.cause if isinstance(exc, ActivityError) else exc
    if isinstance(cause, TimeoutError) and cause.type in (
        TimeoutType.START_TO_CLOSE,
        TimeoutType.SCHEDULE_TO_CLOSE,
        TimeoutType.HEARTBEAT,
    ):
        return {
            "provider": provider,
            "status_code": None,
            "code": "llm.timeout",
            "message": f"the provider call exceeded its wall-clock limit ({cause.type.name})",
        }
    if isinstance(cause, ApplicationError):
        details = cause.details[0] if cause.details else {}
        return {
            "provider": provider,
            "status_code": details.get("status_code") if isinstance(details, dict) else None,
            "code": cause.type or "provider.error",
            "message": cause.message,
        }
    return {"provider": provider, "status_code": None, "code": "provider.error", "message": str(exc)}
