"""The fast-turn options (docs/BENCHMARKS.md): the provider call as a local activity
(TURNGATE_PROVIDER_ACTIVITY=local), the workflow sandbox off, and a rerun of a turn that is
already complete in the ledger never calling the provider again."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.stack import envelope, make_settings, running_stack
from turngate.core.events import parse_intent
from turngate.ledger import LedgerStore, verify_ledger
from turngate.temporal_client import connect
from turngate.workflows.shared import TurnInput
from turngate.workflows.turn import TurnWorkflow


async def _event_types(client: Client, workflow_id: str) -> list[int]:
    # The API answers once the EXECUTION is in the ledger; the workflow may complete just after.
    await client.get_workflow_handle(workflow_id).result()
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return [event.event_type for event in history.events]


async def test_local_provider_turn_is_one_workflow_task(tmp_path, temporal_server) -> None:
    settings = make_settings(
        tmp_path, temporal_server.address, provider_activity="local", workflow_sandbox=False
    )
    async with running_stack(settings) as stack:
        resp = await stack.chat("hello there", correlation_id="c-1")
        body = resp.json()
        assert body["execution"]["payload"]["output_text"] == "echo: hello there"
        client = await connect(settings)
        types = await _event_types(client, body["workflow_id"])
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED not in types
    assert types.count(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED) == 1
    # begin_turn (INTENT), then call_and_record (DECISION, the call, EXECUTION): docs/WORKFLOW.md
    assert types.count(EventType.EVENT_TYPE_MARKER_RECORDED) == 2
    # and the memo's outcome, written in the same (only) workflow task as the completion
    assert types.count(EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED) == 1
    assert len(types) == 9
    store = LedgerStore(settings.effective_ledger_url)
    assert verify_ledger(store).ok
    store.close()


async def test_local_provider_timeout_is_llm_timeout(tmp_path, temporal_server) -> None:
    settings = make_settings(
        tmp_path,
        temporal_server.address,
        provider_activity="local",
        llm_wall_clock_s=1,
        echo_delay_ms=400,
    )
    async with running_stack(settings) as stack:
        resp = await stack.chat("one two three four five", correlation_id="c-slow")
    error = resp.json()["execution"]["payload"]["error"]
    assert error["code"] == "llm.timeout"


async def test_rerun_of_a_recorded_turn_calls_nothing(tmp_path, temporal_server) -> None:
    """A worker lost after the ledger committed a turn's EXECUTION but before Temporal recorded
    the step reruns the workflow task; begin_turn then finds the turn complete. Simulated here
    by running the same intent under a second workflow id."""
    settings = make_settings(tmp_path, temporal_server.address, provider_activity="local")
    body = envelope("only once", correlation_id="c-once")
    async with running_stack(settings) as stack:
        first = (await stack.http.post("/ingress/intent", params={"wait": "execution"}, json=body)).json()
        client = await connect(settings)
        rerun = await client.execute_workflow(
            TurnWorkflow.run,
            TurnInput(envelope=parse_intent(body)),
            id=f"{first['workflow_id']}-rerun",
            task_queue=settings.turns_task_queue,
        )
        types = await _event_types(client, f"{first['workflow_id']}-rerun")
    assert rerun.execution is not None and rerun.execution.index == first["execution"]["index"]
    assert rerun.decision == "ALLOW"
    assert types.count(EventType.EVENT_TYPE_MARKER_RECORDED) == 1  # begin_turn only
    store = LedgerStore(settings.effective_ledger_url)
    assert [str(e.kind) for e in store.by_correlation("c-once")] == ["INTENT", "DECISION", "EXECUTION"]
    store.close()
