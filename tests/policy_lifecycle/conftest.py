"""A real ledger made by real turns: one thread of 7 chat turns, each declaring every earlier
turn, decided by allow_all (through a real Temporal dev server, worker and API)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.stack import make_settings, running_stack
from turngate.settings import Settings

REPO = Path(__file__).resolve().parents[2]
TURNS = 7


def turn_payload(number: int) -> dict[str, Any]:
    """Turn ``number`` (0-based) of thread ``t``: it declares every earlier turn's INTENT."""
    return {
        "thread_id": "t",
        "turn_id": f"c-{number}",
        "parent_turn_id": f"c-{number - 1}" if number else None,
        "declared_refs": [{"ref_type": "event", "ref_id": f"c-{earlier}"} for earlier in range(number)],
    }


async def record_thread(settings: Settings, turns: int = TURNS) -> list[dict[str, Any]]:
    """Record the thread's turns; their DECISION payloads (each one ALLOWed)."""
    decisions = []
    async with running_stack(settings) as stack:
        for number in range(turns):
            response = await stack.chat(
                f"message {number}", correlation_id=f"c-{number}", **turn_payload(number)
            )
            assert response.status_code == 202, response.text
            decisions.append(response.json()["decision"]["payload"])
            assert decisions[-1]["decision"] == "ALLOW"
            # Without shadow policies a DECISION has no `shadow` key at all.
            assert ("shadow" in decisions[-1]) == bool(settings.shadow_policies)
    return decisions


@pytest.fixture(scope="module")
async def thread_ledger(tmp_path_factory: pytest.TempPathFactory, temporal_server: Any) -> Settings:
    settings = make_settings(tmp_path_factory.mktemp("seven-turns"), temporal_server.address)
    await record_thread(settings)
    return settings


def run_turngate(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`turngate ARGS` in a fresh process (the real command line, exit code included)."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), **env}
    environment.pop("TURNGATE_POLICY_MAX_USER_MESSAGES", None)
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-m", "turngate", *args],
        capture_output=True,
        text=True,
        env=environment,
        cwd=REPO,
        timeout=120,
    )
