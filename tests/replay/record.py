"""Record TurnWorkflow histories for the replay tests (run once per deliberate workflow change):

    .venv/bin/python -m tests.replay.record NAME ...     # new scenarios only

Recording an existing name overwrites its fixture: never do that (see below).

Never re-record just to make a failing replay test pass: a failure means the workflow code is no
longer compatible with turns already running; guard the change with workflow.patched() instead.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

from tests.stack import envelope, make_settings, running_stack
from turngate.devserver import DevServer, free_port
from turngate.temporal_client import connect

HERE = Path(__file__).parent / "histories"


SCENARIOS: dict[str, dict[str, object]] = {
    "allow_with_refs": {},
    "observer_deny": {"policy_module": None},
    "llm_timeout": {"llm_wall_clock_s": 1, "echo_delay_ms": 400},
    # The provider call as a local activity, on an unsandboxed worker (TURNGATE_PROVIDER_ACTIVITY,
    # TURNGATE_WORKFLOW_SANDBOX): the replay tests are what checks determinism there.
    "local_provider": {"provider_activity": "local", "workflow_sandbox": False},
    "local_provider_timeout": {
        "provider_activity": "local",
        "workflow_sandbox": False,
        "llm_wall_clock_s": 1,
        "echo_delay_ms": 400,
    },
    # The second turn continues a tool loop: its input is a tool result (client context).
    "tool_loop": {},
    # A model alias (docs/BUDGETS.md): the DECISION records a spend plan, the provider step
    # runs through the candidate loop (both turns ask for the alias, see CHAT).
    "spend_alias": {"models_file": Path(__file__).parent / "spend_models.json"},
    # The same, recorded since the spend plan counts the request as assembled (after the
    # external refs and the assembly); the second turn also sends a client system message.
    "spend_request": {"models_file": Path(__file__).parent / "spend_models.json"},
    # Shape 2 (docs/WORKFLOW.md): an allowed turn's DECISION, provider call and EXECUTION in one
    # activity (turngate.call_and_record), regular and local, and its wall clock running out.
    # Recorded by a worker on shape 2; recording them again now would give the current shape.
    "one_step": {},
    "one_step_local": {"provider_activity": "local", "workflow_sandbox": False},
    "one_step_timeout": {"llm_wall_clock_s": 1, "echo_delay_ms": 400},
    # Shape 3: shape 2 with the search attributes written before the step.
    "indexed_step": {},
    "indexed_step_local": {"provider_activity": "local", "workflow_sandbox": False},
    # Shape 4: shape 3, every executed turn records exchanges_count without a patch marker.
    "counted_step": {},
    "counted_step_local": {"provider_activity": "local", "workflow_sandbox": False},
    # Context spec version 3: the second turn's event ref names the whole earlier turn; both
    # turns record exchanges_count without a prompt pack (the markers of both patches; recorded
    # on shape 1).
    "turn_refs": {},
    # The second turn also declares a Workbench handle (fetch off: a recorded refusal), so the
    # turn schedules resolve_external_refs; recorded with its options of 60 s x 3 attempts, before
    # its schedule-to-close bound and heartbeat timeout.
    "external_refs": {},
    # Shape 5: the second turn's provider call runs out of its wall clock, so its EXECUTION
    # carries fault snapshots, stored by their own step (turngate.store_fault_snapshots) before
    # the workflow appends it; regular and local provider step.
    "snapshot_step": {"llm_wall_clock_s": 1, "echo_delay_ms": 1500},
    "snapshot_step_local": {
        "provider_activity": "local",
        "workflow_sandbox": False,
        "llm_wall_clock_s": 1,
        "echo_delay_ms": 1500,
    },
    # Shape 6: the second turn's client context repeats one tool call four times, so the loop
    # guard denies it (a fault: the snapshot step stores the request).
    "loop_guard": {},
    # Shape 7: the turn adds its outcome to its memo as it ends (a failed call: its error code).
    "ending_memo": {"llm_wall_clock_s": 1, "echo_delay_ms": 1500},
    # The second turn carries the client's request options (structured output, sampling): the
    # provider call's input carries them and the EXECUTION records its output check (recorded
    # before shape 5).
    "request_options": {},
}
#: Turns a policy sends to human review (docs/REVIEWS.md): approved through the API, or left
#: until their 1 s deadline passes.
REVIEW_SCENARIOS: dict[str, tuple[str, str | None]] = {
    "review_approved": ("REVIEW", "approve"),
    "review_timed_out": ("SHORT", None),
}
#: A turn over a budget with ``on_exceed: "review"`` (docs/BUDGETS.md): it waits for a reviewer
#: (API keys: budgets need a tenant), is approved through the API, and runs on its spend plan.
BUDGET_REVIEW = "budget_review"
#: Inputs of the second turn per scenario (default: none).
_LOOP = [
    message
    for i in range(4)
    for message in (
        {
            "role": "assistant",
            "content": "",
            "source": "unmatched_history",
            "tool_calls": [{"id": f"call_{i}", "name": "weather", "arguments": {"city": "Vilnius"}}],
        },
        {"role": "tool", "content": "no data", "source": "unmatched_history", "tool_call_id": f"call_{i}"},
    )
]
SECOND_TURN_INPUTS: dict[str, dict[str, object]] = {
    "loop_guard": {"client_context": {"messages": _LOOP}},
    "tool_loop": {"client_context": {"tool_results": [{"tool_call_id": "call_1", "content": "4"}]}},
    "spend_request": {
        "client_context": {"messages": [{"role": "system", "content": "Be brief.", "source": "system"}]}
    },
    "request_options": {
        "client_context": {
            "request_options": {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "Answer", "schema": {"type": "object"}, "strict": True},
                },
                "seed": 7,
                "top_p": 0.5,
            }
        }
    },
}
#: Refs the second turn declares besides its event refs, per scenario.
SECOND_TURN_EXTRA_REFS: dict[str, list[dict[str, object]]] = {
    "external_refs": [{"ref_type": "artifact.handle", "ref_id": "h-1", "kind": "note"}],
}
#: Intent fields a scenario's turns send.
CHAT: dict[str, dict[str, object]] = {
    "spend_alias": {"requested_model_id": "pair"},
    "spend_request": {"requested_model_id": "pair"},
}


async def record(names: list[str]) -> None:
    server = DevServer(db_file=None, port=free_port(), ui_port=None)
    server.start()
    try:
        await server.wait_ready()
        client = await connect(make_settings(Path(tempfile.mkdtemp()), server.address))
        for name in names:
            if name in REVIEW_SCENARIOS:
                await _record_review(client, server.address, name)
                continue
            if name == BUDGET_REVIEW:
                await _record_budget_review(client, server.address, name)
                continue
            overrides = SCENARIOS[name]
            settings = make_settings(Path(tempfile.mkdtemp()), server.address, **overrides)
            async with running_stack(settings) as stack:
                extra = CHAT.get(name, {})
                await stack.chat("What is 2+2?", correlation_id="c-1", thread_id="t", **extra)
                resp = await stack.chat(
                    "Explain more, please take your time",
                    correlation_id="c-2",
                    thread_id="t",
                    parent_turn_id="c-1",
                    declared_refs=[
                        {"ref_id": "c-1"},
                        {"ref_type": "execution", "ref_id": "c-1"},
                        *SECOND_TURN_EXTRA_REFS.get(name, []),
                    ],
                    inputs=SECOND_TURN_INPUTS.get(name, {}),
                    **extra,
                )
                workflow_id = resp.json()["workflow_id"]
            history = await client.get_workflow_handle(workflow_id).fetch_history()
            path = HERE / f"{name}.json"
            path.write_text(json.dumps(json.loads(history.to_json()), indent=1) + "\n")
            print(f"recorded {path} ({len(history.events)} events)")
    finally:
        server.stop()


async def _record_review(client: object, address: str, name: str) -> None:
    policy, verdict = REVIEW_SCENARIOS[name]
    settings = make_settings(
        Path(tempfile.mkdtemp()), address, policy_module="tests.reviews.policies", policy_object=policy
    )
    async with running_stack(settings) as stack:
        resp = await stack.chat("please refund order 7", correlation_id="c-1", thread_id="t", wait=None)
        workflow_id = resp.json()["workflow_id"]
        while not (await stack.http.get("/reviews")).json()["reviews"]:
            await asyncio.sleep(0.1)
        if verdict is not None:
            answer = await stack.http.post(f"/reviews/c-1/{verdict}", json={"comment": "checked"})
            answer.raise_for_status()
        await client.get_workflow_handle(workflow_id).result()  # type: ignore[attr-defined]
    history = await client.get_workflow_handle(workflow_id).fetch_history()  # type: ignore[attr-defined]
    path = HERE / f"{name}.json"
    path.write_text(json.dumps(json.loads(history.to_json()), indent=1) + "\n")
    print(f"recorded {path} ({len(history.events)} events)")


async def _record_budget_review(client: object, address: str, name: str) -> None:
    from tests.security.conftest import bearer, make_key
    from turngate.core.review import ReviewSpec
    from turngate.ledger import LedgerStore
    from turngate.ledger.budgets import BudgetStore

    settings = make_settings(Path(tempfile.mkdtemp()), address, auth_mode="keys")
    writer = make_key(settings, "t1", "intent.write")
    reviewer = make_key(settings, "t1", "review")
    with LedgerStore(settings.effective_ledger_url) as store:
        BudgetStore(store).set("t1", max_tokens=1, review=ReviewSpec(deadline_s=3600))
    async with running_stack(settings) as stack:
        body = envelope("What is 2+2?", correlation_id="c-1", thread_id="t")
        resp = await stack.http.post("/ingress/intent", json=body, headers=bearer(writer))
        workflow_id = resp.json()["workflow_id"]
        while not (await stack.http.get("/reviews", headers=bearer(reviewer))).json()["reviews"]:
            await asyncio.sleep(0.1)
        answer = await stack.http.post("/reviews/c-1/approve", json={}, headers=bearer(reviewer))
        answer.raise_for_status()
        await client.get_workflow_handle(workflow_id).result()  # type: ignore[attr-defined]
    history = await client.get_workflow_handle(workflow_id).fetch_history()  # type: ignore[attr-defined]
    path = HERE / f"{name}.json"
    path.write_text(json.dumps(json.loads(history.to_json()), indent=1) + "\n")
    print(f"recorded {path} ({len(history.events)} events)")


if __name__ == "__main__":
    if not sys.argv[1:]:
        sys.exit("name the new scenarios to record; existing fixtures are never re-recorded")
    asyncio.run(record(sys.argv[1:]))
