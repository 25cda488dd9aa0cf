"""The bare workflows of the floor scenario: Temporal's own cost for each turn shape.

Activities only return (the "provider" waits ``PROVIDER_S``, like the suite's fake provider), so
what a run measures is the SDK, the Temporal server and the round trips of each shape, nothing
of turngate. Kept in its own small module: the workflow sandbox re-imports it for every run, as
it does any workflow module it does not pass through.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.common import SearchAttributeKey

PROVIDER_S = 0.003
LOCAL = timedelta(seconds=10)
DECISION = SearchAttributeKey.for_keyword("TurngateDecision")
POLICY = SearchAttributeKey.for_keyword("TurngatePolicyId")


@activity.defn
async def ledger_step(name: str) -> str:
    return name


@activity.defn
async def provider_call(name: str) -> str:
    await asyncio.sleep(PROVIDER_S)
    return name


@workflow.defn
class ThreeLocalOneRegular:
    """The turn's shape 1 (a turn with a spend plan): INTENT and DECISION appends (local), the
    provider call (a regular activity on its own task queue), the EXECUTION append (local): two
    workflow tasks."""

    @workflow.run
    async def run(self, llm_queue: str) -> str:
        await workflow.execute_local_activity(ledger_step, "intent", start_to_close_timeout=LOCAL)
        await workflow.execute_local_activity(ledger_step, "decision", start_to_close_timeout=LOCAL)
        await workflow.execute_activity(
            provider_call, "provider", task_queue=llm_queue, start_to_close_timeout=LOCAL
        )
        return await workflow.execute_local_activity(ledger_step, "execution", start_to_close_timeout=LOCAL)


@workflow.defn
class LocalAndLocalProvider:
    """One local step, then the provider call as a local activity: one workflow task."""

    @workflow.run
    async def run(self, llm_queue: str) -> str:
        await workflow.execute_local_activity(ledger_step, "intent", start_to_close_timeout=LOCAL)
        return await workflow.execute_local_activity(provider_call, "provider", start_to_close_timeout=LOCAL)


@workflow.defn
class OneLocal:
    """One local activity that only returns: the least a turn can cost."""

    @workflow.run
    async def run(self, llm_queue: str) -> str:
        return await workflow.execute_local_activity(ledger_step, "only", start_to_close_timeout=LOCAL)


@workflow.defn
class OneLocalOneRegular:
    """An allowed turn in the default configuration (shape 4): the begin step (local), the
    turn's search attributes, then one regular activity on its own task queue for DECISION,
    call and EXECUTION: two workflow tasks, 13 events."""

    @workflow.run
    async def run(self, llm_queue: str) -> str:
        await workflow.execute_local_activity(ledger_step, "begin", start_to_close_timeout=LOCAL)
        workflow.upsert_search_attributes([DECISION.value_set("ALLOW"), POLICY.value_set("floor")])
        return await workflow.execute_activity(
            provider_call, "call_and_record", task_queue=llm_queue, start_to_close_timeout=LOCAL
        )


SHAPES: dict[str, type] = {
    "3 local + 1 regular": ThreeLocalOneRegular,
    "1 local + 1 local provider": LocalAndLocalProvider,
    "1 local": OneLocal,
    "1 local + 1 regular": OneLocalOneRegular,
}
