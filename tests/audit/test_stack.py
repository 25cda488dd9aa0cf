"""Against a real Temporal dev server: turns run by the worker verify, replay from the ledger,
and their workflow histories replay against the current TurnWorkflow."""

from __future__ import annotations

import asyncio
import io

from tests.stack import running_stack
from turngate.artifacts import open_artifact_store
from turngate.audit import verify_all
from turngate.audit.replay import replay_turn, replay_workflows
from turngate.audit.report import replay_workflows_command, verify_command
from turngate.core.context import load_context_config
from turngate.ledger import LedgerStore
from turngate.settings import Settings
from turngate.temporal_client import connect


async def test_real_turns_verify_and_replay(settings: Settings) -> None:
    thread = f"audit-{settings.workflow_id_prefix}"
    async with running_stack(settings) as stack:
        first = (await stack.chat("What is 2+2?", correlation_id="c-1", thread_id=thread)).json()
        second = (
            await stack.chat(
                "Explain more",
                correlation_id="c-2",
                thread_id=thread,
                parent_turn_id="c-1",
                declared_refs=[{"ref_id": "c-1"}, {"ref_type": "execution", "ref_id": "c-1"}],
            )
        ).json()
        denied = (
            await stack.chat("hm", correlation_id="c-3", thread_id=thread, declared_refs=[{"ref_id": "nope"}])
        ).json()
        assert second["decision"]["payload"]["decision"] == "ALLOW"
        assert denied["decision"]["payload"]["reason_codes"] == ["REF_NOT_FOUND"]
        workflow_ids = [body["workflow_id"] for body in (first, second, denied)]

    config = load_context_config(settings.context_config_path, {})
    store = LedgerStore(settings.effective_ledger_url)
    try:
        report = verify_all(
            store, artifacts=open_artifact_store(settings.effective_artifacts), context_config=config
        )
        assert report.ok, report.failures
        assert (report.checked_events, report.checked_decisions) == (8, 3)
        assert report.checked_artifacts == 5  # a manifest per DECISION and per EXECUTION
        for cid in ("c-1", "c-2", "c-3"):
            replay = replay_turn(store, cid, context_config=config, policy_module=settings.policy_module)
            assert replay.ok, (cid, replay.checks)
    finally:
        store.close()

    out, err = io.StringIO(), io.StringIO()
    code = verify_command(settings, thread_id=thread, since=None, until=None, as_json=False, out=out, err=err)
    assert code == 0, out.getvalue() + err.getvalue()

    client = await connect(settings)
    by_id = await replay_workflows(client, workflow_ids=workflow_ids)
    assert by_id.ok and by_id.checked == 3, by_id.results
    assert {result.workflow_id for result in by_id.results} == set(workflow_ids)

    # The same histories found by a visibility query (eventually consistent: retry briefly).
    query = f"WorkflowType='TurnWorkflow' AND TurngateThreadId='{thread}'"
    for _ in range(50):
        listed = await replay_workflows(client, query=query, limit=10)
        if listed.checked == 3:
            break
        await asyncio.sleep(0.1)
    assert listed.ok and listed.checked == 3 and listed.query == query
    out = io.StringIO()
    assert (
        await replay_workflows_command(settings, query=query, limit=10, as_json=False, out=out, err=err) == 0
    )
    assert out.getvalue().startswith("replay workflows OK: 3 history(ies)")
