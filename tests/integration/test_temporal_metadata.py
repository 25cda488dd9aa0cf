"""What the Temporal UI shows, read back through the Temporal API on a real dev server: a turn's
and a job's summary and details (describe), their search attributes and memo, each activity's
summary (user metadata on history events), a job's current details (the metadata query), and,
with encryption on, that all of it is ciphertext in the raw history."""

from __future__ import annotations

import base64
import os
import uuid
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowHistory

from tests.stack import make_settings, running_stack
from turngate.encryption import ENCODING
from turngate.temporal_client import connect


async def _text(client: Client, payload: Payload) -> str:
    [value] = await client.data_converter.decode([payload], [str])
    return str(value)


async def _activity_summaries(client: Client, history: WorkflowHistory) -> list[str]:
    """The summaries of every activity and local activity (marker) in a history."""
    kinds = (EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, EventType.EVENT_TYPE_MARKER_RECORDED)
    return [
        await _text(client, event.user_metadata.summary)
        for event in history.events
        if event.event_type in kinds and event.user_metadata.HasField("summary")
    ]


async def _described(client: Client, workflow_id: str) -> tuple[str, str, dict[str, Any]]:
    desc = await client.get_workflow_handle(workflow_id).describe()
    meta = desc.raw_description.execution_config.user_metadata
    return await _text(client, meta.summary), await _text(client, meta.details), await desc.memo()


async def _one_id(client: Client, query: str) -> str:
    found = [wf.id async for wf in client.list_workflows(query)]
    assert len(found) == 1, (query, found)
    return found[0]


async def test_a_turn_and_a_job_read_back_through_the_temporal_api(tmp_path, temporal_server) -> None:
    settings = make_settings(tmp_path, temporal_server.address)
    client = await connect(settings)
    correlation = f"c-{uuid.uuid4().hex[:12]}"
    thread = f"th-{uuid.uuid4().hex[:8]}"
    case = f"Case {uuid.uuid4().hex[:6]}"
    async with running_stack(settings) as stack:
        response = await stack.chat(
            "Summarise the lighthouse log", correlation_id=correlation, thread_id=thread
        )
        assert response.status_code == 202, response.text

        # the turn: found by its thread id and by its correlation id
        turn_id = await _one_id(client, f"TurngateThreadId = '{thread}'")
        assert turn_id == await _one_id(client, f"TurngateCorrelationId = '{correlation}'")
        await client.get_workflow_handle(turn_id).result()  # the answer is recorded before the end
        summary, details, memo = await _described(client, turn_id)
        assert summary.startswith("chat.message · ") and f"thread {thread}" in summary
        assert '"Summarise the lighthouse log"' in summary  # encryption is off: a preview
        base = str(stack.http.base_url).rstrip("/")
        assert f"({base}/ui/#/turn/{correlation})" in details and f"`{correlation}`" in details
        assert memo["correlation_id"] == correlation and memo["thread_id"] == thread
        # the outcome, added when the turn ended
        decision = response.json()["decision"]["payload"]
        assert (memo["decision"], memo["reason_codes"]) == ("ALLOW", decision["reason_codes"])
        assert memo["context_digest"] == decision["context_digest"] and "error_code" not in memo
        history = await client.get_workflow_handle(turn_id).fetch_history()
        steps = await _activity_summaries(client, history)
        assert steps[0] == "append INTENT, read the thread"
        assert any(s.startswith("append DECISION ALLOW") for s in steps) or any(
            s.startswith("append DECISION, call ") for s in steps
        ), steps

        # the job: a readable id, found by its case id
        job = {
            "interface_version": 3,
            "correlation_id": f"j-{uuid.uuid4().hex[:8]}",
            "payload": {
                "intent_type": "case.ingest",
                "payload": {"case_id": case, "documents": [{"name": "a.txt", "text": "Basalt lava flows."}]},
            },
        }
        accepted = await stack.http.post("/ingress/intent", json=job)
        assert accepted.status_code == 202, accepted.text
        job_id = accepted.json()["job_id"]
        slug = case.lower().replace(" ", "-")
        assert job_id.startswith(f"job-ingest-{slug}-") and len(job_id) == len(f"job-ingest-{slug}-") + 16
        assert job_id == await _one_id(client, f"TurngateCaseId = '{case}'")
        assert job_id == await _one_id(
            client, f"TurngateCaseId = '{case}' AND TurngateJobType = 'case.ingest'"
        )
        handle = client.get_workflow_handle(job_id)
        await handle.result()
        summary, details, memo = await _described(client, job_id)
        assert summary == f"case.ingest · case {case} · 1 documents"
        assert f"[Job status]({base}/jobs/{job_id})" in details
        assert memo["case_id"] == case and memo["progress"]["state"] == "completed"
        steps = await _activity_summaries(client, await handle.fetch_history())
        assert steps == ["ingest documents: first step"]
        metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        assert metadata.current_details.startswith("**ingest** completed: 1 of 1 documents (100.0%)")


async def test_encrypted_metadata_is_ciphertext_in_the_raw_history(tmp_path, temporal_server) -> None:
    key = f"k1={base64.b64encode(os.urandom(32)).decode()}"
    settings = make_settings(tmp_path, temporal_server.address, encryption_keys=key)
    client = await connect(settings)
    correlation = f"c-{uuid.uuid4().hex[:12]}"
    async with running_stack(settings) as stack:
        response = await stack.chat("a message nobody may read", correlation_id=correlation)
        assert response.status_code == 202, response.text
    turn_id = await _one_id(client, f"TurngateCorrelationId = '{correlation}'")
    summary, _, memo = await _described(client, turn_id)
    assert "nobody may read" not in summary and memo["correlation_id"] == correlation  # no preview
    raw = await (await Client.connect(temporal_server.address)).get_workflow_handle(turn_id).fetch_history()
    started = raw.events[0].user_metadata
    sealed = [started.summary, started.details]
    sealed += [e.user_metadata.summary for e in raw.events if e.user_metadata.HasField("summary")]
    assert len(sealed) > 3
    assert all(p.metadata["encoding"] == ENCODING for p in sealed)
    assert all(b"append" not in p.data and b"chat.message" not in p.data for p in sealed)
    # and the codec reads them back
    assert (await _activity_summaries(client, raw))[0] == "append INTENT, read the thread"
