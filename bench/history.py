"""History events per turn: read from the Temporal dev server `python -m bench` started."""

from __future__ import annotations

import statistics
from typing import Any

from temporalio.client import Client


async def history_events_per_turn(temporal_address: str, sample: int = 20) -> dict[str, Any]:
    """Events in the histories of the last ``sample`` closed turn workflows (min, median, max)."""
    client = await Client.connect(temporal_address)
    counts: list[int] = []
    query = "WorkflowType = 'TurnWorkflow' AND ExecutionStatus = 'Completed'"
    async for execution in client.list_workflows(query, limit=sample):
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        counts.append(len((await handle.fetch_history()).events))
    if not counts:
        return {"n": 0}
    return {"n": len(counts), "min": min(counts), "median": statistics.median(counts), "max": max(counts)}
