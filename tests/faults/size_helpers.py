"""Shared by the size-limit and redaction fault tests: the CLI verifier as a real process, and
what a Temporal history holds."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from tests.processes import process_env
from turngate.artifacts.temporal_codec import POINTER_ENCODING
from turngate.settings import Settings


def run_verify(settings: Settings) -> tuple[int, dict[str, Any]]:
    """`turngate verify --json` as a child process against the stack's ledger and artifacts."""
    done = subprocess.run(
        [sys.executable, "-m", "turngate", "verify", "--json"],
        env=process_env(settings),
        capture_output=True,
        timeout=300,
        check=False,
    )
    return done.returncode, json.loads(done.stdout)


def history_payloads(event: HistoryEvent) -> list[Payload]:
    """Every payload an event carries (inputs, results, marker data, failure details)."""
    found: list[Payload] = []

    def walk(message: Any) -> None:
        for field, value in message.ListFields():
            if field.message_type is None:
                continue
            if field.message_type.GetOptions().map_entry:
                items = list(value.values())
            elif hasattr(value, "ListFields"):
                items = [value]
            else:
                items = list(value)
            for item in items:
                if isinstance(item, Payload):
                    found.append(item)
                elif hasattr(item, "ListFields"):
                    walk(item)

    walk(event)
    return found


async def history_of(client: Client, workflow_id: str) -> list[HistoryEvent]:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return list(history.events)


def offloaded(payload: Payload) -> bool:
    return payload.metadata.get("encoding") == POINTER_ENCODING
