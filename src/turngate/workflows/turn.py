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
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError

with workflow.unsafe.imports_passed_through():
    from turngate.artifacts.deadline import MAX_ARTIFACT_DEADLINE_S
    from turngate.core.assembly import assemble, uses_tool_messages
    from turngate.core.context import ContextConfig
    from turngate.core.decision import DecisionOutcome, decide
    from turngate.core.events import Event, EventDraft, EventKind
    from turngate.core.external import ExternalContext, ExternalError
    from turngate.core.manifest import build_denied_manifest, build_manifest
    from turngate.core.model_resolution import ModelResolution
    from turngate.core.payloads import (
        SYSTEM_ERROR,
        DecisionPayload,
        ExecutionPayload,
        ExecutionPlan,
        TokenBudget,
    )
    from turngate.core.policy import load_policy
    from turngate.core.prompt_layers import PromptConfig, parse_prompt_config
    from turngate.core.refs import RefResolutionError, external_refs_of, ref_lookup_ids
    from turngate.core.shadow import with_shadows
    from turngate.core.system_prompt import SystemPrompt, build_system_prompt
    from turngate.core.tools import ToolSpec, exchange_count, offered_tools
    from turngate.prompts.pack_builders import pack_builders
    from turngate.prompts.token_estimators import loaded_estimator
    from turngate.workflows import adoption
    from turngate.workflows.context_scope import spec_version, with_external
    from turngate.workflows.decision_record import (
        client_context_or_deny,
        message_artifact,
        prompt_record,
        request_so_far,
        with_tools_offered,
    )
    from turngate.workflows.execution_record import (
        answered,
        call_failed,
        with_exchanges_count,
        with_tool_calls,
    )
    from turngate.workflows.fault_snapshots import decision_snapshots, execution_snapshots
    from turngate.workflows.prompt_guard import prompt_failure
    from turngate.workflows.redaction import apply_checked_safety, apply_output_safety, output_safety_rules
    from turngate.workflows.shared import (
        SA_DECISION,
        SA_POLICY_ID,
        AppendedEvent,
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
    from turngate.workflows.spend import execute_plan, govern, govern_request, resolve_route
    from turngate.workflows.turn_activities import (
        append_event,
        begin_turn,
        call_provider,
        resolve_external_refs,
    )

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
        begin = await workflow.execute_local_activity(
            begin_turn,
            BeginTurnInput(
                intent=envelope.draft(),
                ref_ids=ref_lookup_ids(list(envelope.payload.declared_refs)),
            ),
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
        client, outcome = client_context_or_deny(envelope.payload.inputs, outcome)
        outcome, model, plan = govern(outcome, model, route, begin, envelope)
        external = await self._external_context(intent) if outcome.allowed else None
        if external is not None:
            outcome = with_external(outcome, external)
        assembly = None
        offered: list[ToolSpec] = []
        resolution = outcome.resolution if outcome.allowed else None
        if resolution is not None:
            budget = boundary.budget_tokens if system is None or system.trim_history else 10**12
            estimator = loaded_estimator(boundary.token_estimator)  # resolved at worker start
            if prompts is not None and system is not None:
                offered = offered_tools(
                    prompts.tools_for(prompts.profiles[system.profile]), exchange_count(resolution)
                )
                outcome = with_tools_offered(outcome, [spec.name for spec in offered])
            if client is not None:
                offered += [tool.spec() for tool in client.tools]
            # The offered tool definitions are sent too: they count against the budget (turns
            # recorded before this rule keep their assembly on replay).
            counted = offered if offered and workflow.patched(PATCH_TOOLS_IN_BUDGET) else []
            assembly = assemble(
                system.text if system else None,
                resolution,
                envelope.message,
                budget_tokens=budget,
                estimator=estimator,
                external=external.items if external is not None else (),
                client_messages=client.messages if client is not None else (),
                tool_definitions=[spec.definition() for spec in counted],
                tool_results=client.tool_results if client is not None else (),
                tool_messages=uses_tool_messages(resolution, client) and workflow.patched(PATCH_TOOL_LOOP),
            )
            if plan is None:  # the budget check counts the request as assembled
                outcome, model, plan = govern_request(
                    outcome, model, route, begin, envelope, assembly, [spec.definition() for spec in offered]
                )
                assembly = assembly if outcome.allowed else None
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
        record = outcome.record
        decision, stopped = await self._record(
            intent,
            record,
            manifest=manifest.model_dump(mode="json"),
            snapshots=decision_snapshots(
                lambda: request_so_far(envelope, intent, model, system), record, external
            ),
            on_system_error=lambda error: record.denied(SYSTEM_ERROR, error),
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
        if decision.adopted:
            # An earlier run of this step (a stalled or crashed worker's task) recorded another
            # DECISION: it is the turn's, whatever this run decided (workflows/adoption.py).
            step = adoption.next_step(decision.payload, record.as_payload(), executable=assembly is not None)
            if step == "end":
                return await self._unexecuted(intent, decision, result)
            stopped, plan = step == "stop", adoption.recorded_plan(decision.payload, plan)
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
            message_artifact=message_artifact(envelope),
            output_safety=output_safety_rules(prompts if system is not None else None),
            message_artifacts=dict(assembly.message_artifacts),
        )
        if plan is not None:
            answer, payload = await execute_plan(
                plan, call, model, lambda c, m, attempts: self._execute(c, m, outcome, boundary, attempts)
            )
        else:
            answer, payload = await self._execute(call, model, outcome, boundary)
        if answer is not None:
            payload = with_tool_calls(payload, answer.tool_calls, offered, envelope.payload.inputs)
        payload = with_exchanges_count(payload, resolution, prompts is not None and system is not None)
        snapshots = execution_snapshots(
            call, payload, external, debug=envelope.payload.inputs.get("debug_snapshot") is True
        )
        stored: dict[str, dict[str, Any]] = {}
        if prompts is not None and system is not None:
            payload, redacted = apply_output_safety(payload, answer, prompts)
            snapshots |= redacted
            payload, stored = apply_checked_safety(payload, answer)
        execution, _ = await self._record(
            intent,
            payload,
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
            on_system_error=payload.failed,
        )
        self._recorded["EXECUTION"] = _recorded(execution)
        error = execution.payload.get("error")
        return result.model_copy(
            update={
                "execution": self._recorded["EXECUTION"],
                "error_code": error["code"] if error else None,
            }
        )

    async def _unexecuted(self, intent: Event, decision: Event, result: TurnResult) -> TurnResult:
        """End a recorded ALLOW this run cannot execute with an EXECUTION that says so."""
        payload = adoption.unexecuted(decision.payload)
        execution, _ = await self._record(intent, payload)
        self._recorded["EXECUTION"] = _recorded(execution)
        error = execution.payload.get("error")
        return result.model_copy(
            update={"execution": self._recorded["EXECUTION"], "error_code": error["code"] if error else None}
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
        prompt = prompt_record(system, begin)
        plan = ExecutionPlan(
            token_budget=TokenBudget(tokens=boundary.budget_tokens, estimator=boundary.token_estimator),
            provider=model.provider,
            requested_model_id=model.requested_model_id,
            resolved_model_id=model.resolved_model_id,
            prompt=prompt,
        )
        outcome = decide(
            intent,
            candidates,
            ContextConfig.model_validate(boundary.context_config),
            policy,
            execution=plan,
            prompt=prompt.pinned() if prompt is not None else None,
            schema_version=spec_version,
        )
        if boundary.shadow_policies:  # recorded beside the decision, never deciding
            with workflow.unsafe.imports_passed_through():
                shadows = [load_policy(name) for name in boundary.shadow_policies]
            outcome = with_shadows(outcome, shadows)
        if begin.prompt_error is not None and outcome.allowed:
            # Only an allowed turn needs its prompt; an earlier DENY (a ref error, the policy)
            # keeps its own reason and error, which verify recomputes.
            return outcome.denied(begin.prompt_error["code"], begin.prompt_error)
        if outcome.allowed and not model.ok:
            # An unusable model is decided here, not discovered at execution time.
            return outcome.denied(model.reason_code or "model.unavailable")
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
                resolve_external_refs,
                ExternalRefsInput(
                    tenant_id=intent.tenant_id,
                    correlation_id=intent.correlation_id,
                    refs=[ref.model_dump(mode="json", exclude_none=True) for ref in refs],
                ),
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
    ) -> tuple[ProviderCallResult | None, ExecutionPayload]:
        """The provider's answer (None when the call failed) and the EXECUTION it makes."""
        try:
            answer = await _call_provider(call, boundary, attempts)
        except (ActivityError, TimeoutError) as exc:
            return None, call_failed(model, outcome.record.context_digest, exc)
        return answer, answered(model, outcome.record.context_digest, answer)

    async def _record(
        self,
        intent: Event,
        payload: DecisionPayload | ExecutionPayload,
        *,
        manifest: dict[str, Any] | None = None,
        snapshots: dict[str, str] | None = None,
        stored_snapshots: dict[str, dict[str, Any]] | None = None,
        on_system_error: Callable[[dict[str, Any]], DecisionPayload | ExecutionPayload] | None = None,
    ) -> tuple[AppendedEvent, bool]:
        """Append an event with its artifacts. If the artifacts cannot be stored, the event is
        recorded without them, marked SYSTEM_ERROR with the missing pointers, and the turn
        stops (returns True)."""
        try:
            return await self._append(
                AppendInput(
                    draft=_draft(intent, payload),
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
                "code": SYSTEM_ERROR,
                "detail": cause.message,
                "missing_pointers": details.get("missing_pointers", []),
            }
            return await self._append(AppendInput(draft=_draft(intent, on_system_error(error)))), True

    async def _append(self, inp: AppendInput) -> AppendedEvent:
        return await workflow.execute_local_activity(
            append_event,
            inp,
            start_to_close_timeout=ARTIFACT_STEP_TIMEOUT
            if inp.manifest or inp.snapshots
            else LEDGER_STEP_TIMEOUT,
            retry_policy=LEDGER_RETRY,
        )


def _draft(intent: Event, payload: DecisionPayload | ExecutionPayload) -> EventDraft:
    """The turn's DECISION or EXECUTION event: the INTENT's identity, ``payload``'s kind."""
    kind = EventKind.DECISION if isinstance(payload, DecisionPayload) else EventKind.EXECUTION
    return EventDraft.following(intent, kind, payload.as_payload())


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
            call_provider,
            call,
            start_to_close_timeout=wall_clock,
            schedule_to_close_timeout=wall_clock,
            retry_policy=retry,
        )
    return await workflow.execute_activity(
        call_provider,
        call,
        task_queue=boundary.llm_task_queue,
        start_to_close_timeout=wall_clock,
        schedule_to_close_timeout=wall_clock,
        heartbeat_timeout=timedelta(seconds=10),
        retry_policy=retry,
    )
