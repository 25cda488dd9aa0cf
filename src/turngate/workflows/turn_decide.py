"""The turn's decide step: from the recorded INTENT to one frozen :class:`TurnDecision`.

Everything here is deterministic workflow code (the core's functions on recorded data) except
the external refs, which an activity resolves (indexes, Workbench fetches) after the policy
allowed the turn. The DECISION the step produces is recorded by the workflow; when it allows,
``TurnDecision.call`` is the provider request the execute step makes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from turngate.core.assembly import Assembly, assemble, uses_tool_messages
    from turngate.core.client_context import (
        ClientContext,
        InvalidClientContext,
        client_context_of,
        provider_options,
    )
    from turngate.core.context import ContextConfig
    from turngate.core.decision import DecisionOutcome, decide
    from turngate.core.events import Event, IntentEnvelope
    from turngate.core.external import ExternalContext, ExternalError
    from turngate.core.loop_guard import LOOP_GUARD, repeated_tool_call
    from turngate.core.manifest import ContextManifest, build_denied_manifest, build_manifest
    from turngate.core.model_resolution import ModelResolution
    from turngate.core.payloads import ExecutionPlan, PromptRecord, TokenBudget
    from turngate.core.policy import load_policy
    from turngate.core.prompt_layers import PromptConfig
    from turngate.core.refs import RefResolutionError, external_refs_of
    from turngate.core.shadow import with_shadows
    from turngate.core.spend import SpendPlan
    from turngate.core.system_prompt import SystemPrompt, build_system_prompt
    from turngate.core.tools import ToolSpec, exchange_count, offered_tools
    from turngate.core.turn_rules import deny_or_continue
    from turngate.prompts.pack_builders import pack_builders
    from turngate.prompts.token_estimators import loaded_estimator
    from turngate.workflows import external_refs_options
    from turngate.workflows.activity_summaries import external_refs_summary
    from turngate.workflows.context_scope import spec_version, with_external
    from turngate.workflows.decision_record import (
        message_artifact,
        prompt_record,
        request_so_far,
        with_tools_offered,
    )
    from turngate.workflows.fault_snapshots import decision_snapshots
    from turngate.workflows.patches import TOOL_LOOP_MESSAGES, TOOLS_IN_TOKEN_BUDGET, TURN_SHAPE_LOOP_GUARD
    from turngate.workflows.prompt_guard import prompt_failure
    from turngate.workflows.redaction import output_safety_rules
    from turngate.workflows.shared import (
        BeginTurnResult,
        Boundary,
        ExternalRefsInput,
        ProviderCallInput,
    )
    from turngate.workflows.spend import Route, govern, govern_request, resolve_route
    from turngate.workflows.turn_activities import resolve_external_refs

#: A prompt profile that keeps the whole history is never trimmed to the token budget.
UNTRIMMED_BUDGET = 10**12


@dataclass(frozen=True)
class TurnDecision:
    """What the decide step settled: the DECISION to record (``outcome.record``, its manifest and
    fault snapshots) and, for a turn that goes on, the provider request and what the execute
    step needs to make the EXECUTION of its answer."""

    intent: Event
    outcome: DecisionOutcome
    model: ModelResolution
    manifest: ContextManifest
    snapshots: dict[str, str]
    external: ExternalContext | None = None
    system: SystemPrompt | None = None
    prompts: PromptConfig | None = None  # the prompt pack the turn ran with (None: none)
    assembly: Assembly | None = None
    plan: SpendPlan | None = None  # the spend plan: its candidates are tried in order
    offered: tuple[ToolSpec, ...] = ()
    call: ProviderCallInput | None = None  # None: the turn ends with its DECISION

    @property
    def proceeds(self) -> bool:
        return self.call is not None


@dataclass(frozen=True)
class _Judged:
    """The decision as the policy and the deny-or-continue rules left it, before external refs."""

    outcome: DecisionOutcome
    model: ModelResolution
    route: Route
    system: SystemPrompt | None
    client: ClientContext | None
    plan: SpendPlan | None


async def decide_turn(envelope: IntentEnvelope, begin: BeginTurnResult) -> TurnDecision:
    """Decide the turn: the policy and the turn rules, the external refs, then the assembly."""
    judged = _judge(envelope, begin)
    external = await _external_context(begin.intent) if judged.outcome.allowed else None
    outcome = with_external(judged.outcome, external) if external is not None else judged.outcome
    return _assembled(envelope, begin, judged, outcome, external)


def _judge(envelope: IntentEnvelope, begin: BeginTurnResult) -> _Judged:
    intent, boundary = begin.intent, begin.boundary
    model, route = resolve_route(envelope.payload.requested_model_id, boundary)
    prompt_error = begin.prompt_error
    try:
        system = _system_prompt(boundary.prompt_config, begin, intent)
    except Exception as exc:  # deterministic: a recorded DENY, never a task retried forever
        system, prompt_error = None, prompt_failure(exc)
    prompt = prompt_record(system, begin)
    version = spec_version(intent)
    policy_outcome = _policy_outcome(intent, begin.candidates, boundary, model, prompt, version)
    client, client_error = _client_context(envelope.payload.inputs)
    outcome = deny_or_continue(
        policy_outcome, prompt_error=prompt_error, model=model, client_context_error=client_error
    )
    outcome, model, plan = govern(outcome, model, route, begin, envelope)
    return _Judged(outcome=outcome, model=model, route=route, system=system, client=client, plan=plan)


def _assembled(
    envelope: IntentEnvelope,
    begin: BeginTurnResult,
    judged: _Judged,
    outcome: DecisionOutcome,
    external: ExternalContext | None,
) -> TurnDecision:
    """The assembled request of an allowed turn (its tools offered, its budget checked over
    everything sent), and the manifest of the DECISION either way."""
    intent, boundary, system, client = begin.intent, begin.boundary, judged.system, judged.client
    model, plan = judged.model, judged.plan
    assembly: Assembly | None = None
    offered: tuple[ToolSpec, ...] = ()
    resolution = outcome.resolution if outcome.allowed else None
    if resolution is not None:
        profile_tools = _profile_tools(boundary.prompt_config, system, exchange_count(resolution))
        if profile_tools is not None:
            outcome = with_tools_offered(outcome, [spec.name for spec in profile_tools])
        offered = (*(profile_tools or ()), *(tool.spec() for tool in (client.tools if client else ())))
        assembly = _assembly(envelope, boundary, system, client, outcome, external, offered)
        if plan is None:  # the budget check counts the request as assembled
            definitions = [spec.definition() for spec in offered]
            outcome, model, plan = govern_request(
                outcome, model, judged.route, begin, envelope, assembly, definitions
            )
            assembly = assembly if outcome.allowed else None
    call = (
        _provider_call(envelope, intent, model, assembly, offered, client, boundary.prompt_config, system)
        if assembly is not None
        else None
    )
    looping = _loop(call, boundary)
    if looping is not None:  # the request repeats a tool call too often: a fault, snapshotted
        outcome, assembly = outcome.denied(LOOP_GUARD, looping), None
    run_id = workflow.info().run_id
    common: dict[str, Any] = {"intent": intent, "run_id": run_id, "step_id": "decision", "external": external}
    manifest = (
        build_manifest(outcome, assembly, system=system, **common)
        if assembly is not None
        else build_denied_manifest(outcome, **common)
    )
    sent = call
    snapshots = decision_snapshots(
        lambda: sent if sent is not None else request_so_far(envelope, intent, model, system),
        outcome.record,
        external,
    )
    call = call if assembly is not None else None
    return TurnDecision(
        intent=intent,
        outcome=outcome,
        model=model,
        manifest=manifest,
        snapshots=snapshots,
        external=external,
        system=system,
        prompts=boundary.prompt_config if system is not None else None,
        assembly=assembly,
        plan=plan,
        offered=offered,
        call=call,
    )


def _loop(call: ProviderCallInput | None, boundary: Boundary) -> dict[str, Any] | None:
    """The loop guard's error for ``call`` (shape 6 on), or None."""
    if call is None or boundary.turn_shape < TURN_SHAPE_LOOP_GUARD:
        return None
    return repeated_tool_call(call.messages, boundary.context_config.context.loop_guard_max_repeats)


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


def _policy_outcome(
    intent: Event,
    candidates: list[Event],
    boundary: Boundary,
    model: ModelResolution,
    prompt: PromptRecord | None,
    version: str,
) -> DecisionOutcome:
    """The policy's decision, with the shadow policies' answers recorded beside it."""
    with workflow.unsafe.imports_passed_through():
        policy = load_policy(boundary.policy_module, boundary.policy_object)
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
        _context_config(boundary),
        policy,
        execution=plan,
        prompt=prompt.pinned() if prompt is not None else None,
        schema_version=version,
    )
    if not boundary.shadow_policies:
        return outcome
    with workflow.unsafe.imports_passed_through():  # recorded beside the decision, never deciding
        shadows = [load_policy(name) for name in boundary.shadow_policies]
    return with_shadows(outcome, shadows)


def _context_config(boundary: Boundary) -> ContextConfig:
    return boundary.context_config


def _client_context(inputs: dict[str, Any]) -> tuple[ClientContext | None, str | None]:
    """The intent's client-supplied messages and tools, or why they are malformed."""
    try:
        return client_context_of(inputs), None
    except InvalidClientContext as exc:
        return None, str(exc)


def _profile_tools(
    prompts: PromptConfig | None, system: SystemPrompt | None, exchanges: int
) -> list[ToolSpec] | None:
    """The prompt profile's tools offered at this point of the thread (None: no prompt pack)."""
    if prompts is None or system is None:
        return None
    return offered_tools(prompts.tools_for(prompts.profiles[system.profile]), exchanges)


def _assembly(
    envelope: IntentEnvelope,
    boundary: Boundary,
    system: SystemPrompt | None,
    client: ClientContext | None,
    outcome: DecisionOutcome,
    external: ExternalContext | None,
    offered: tuple[ToolSpec, ...],
) -> Assembly:
    resolution = outcome.resolution
    assert resolution is not None  # only an allowed turn is assembled
    # The offered tool definitions are sent too: they count against the budget (turns recorded
    # before this rule keep their assembly on replay).
    counted = offered if offered and workflow.patched(TOOLS_IN_TOKEN_BUDGET) else []
    return assemble(
        system.text if system else None,
        resolution,
        envelope.message,
        budget_tokens=boundary.budget_tokens if system is None or system.trim_history else UNTRIMMED_BUDGET,
        estimator=loaded_estimator(boundary.token_estimator),  # resolved at worker start
        external=external.items if external is not None else (),
        client_messages=client.messages if client is not None else (),
        tool_definitions=[spec.definition() for spec in counted],
        tool_results=client.tool_results if client is not None else (),
        tool_messages=uses_tool_messages(resolution, client) and workflow.patched(TOOL_LOOP_MESSAGES),
        # Configuration, recorded in the DECISION's context spec when not the default.
        shape=boundary.context_config.context.prompt_shape,
    )


def _provider_call(
    envelope: IntentEnvelope,
    intent: Event,
    model: ModelResolution,
    assembly: Assembly,
    offered: tuple[ToolSpec, ...],
    client: ClientContext | None,
    prompts: PromptConfig | None,
    system: SystemPrompt | None,
) -> ProviderCallInput:
    return ProviderCallInput(
        correlation_id=intent.correlation_id,
        thread_id=intent.thread_id,
        provider=model.provider or "",
        model=model.resolved_model_id or "",
        messages=list(assembly.messages),
        max_tokens=envelope.payload.budget.max_tokens if envelope.payload.budget else None,
        temperature=client.temperature if client is not None else None,
        tools=[spec.definition() for spec in offered],
        message_artifact=message_artifact(envelope),
        output_safety=output_safety_rules(prompts if system is not None else None),
        message_artifacts=dict(assembly.message_artifacts),
        options=provider_options(client),
    )


async def _external_context(intent: Event) -> ExternalContext | None:
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
            start_to_close_timeout=external_refs_options.ATTEMPT_TIMEOUT,
            schedule_to_close_timeout=external_refs_options.SCHEDULE_TO_CLOSE_TIMEOUT,
            heartbeat_timeout=external_refs_options.HEARTBEAT_TIMEOUT,
            retry_policy=external_refs_options.RETRY_POLICY,
            summary=external_refs_summary(len(refs)),
        )
    except ActivityError as exc:
        cause = exc.cause
        detail = cause.message if isinstance(cause, ApplicationError) else str(cause or exc)
        return ExternalContext(
            error=ExternalError(code="external_refs.unavailable", detail=detail, ref_index=-1)
        )
