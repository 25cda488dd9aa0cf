"""What the API process holds for its lifetime (created in the FastAPI lifespan)."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request
from temporalio.client import Client

from turngate.api.watcher import LedgerWatcher
from turngate.artifacts import ArtifactStore
from turngate.ledger import LedgerStore
from turngate.settings import Settings
from turngate.workflows.shared import Boundary


@dataclass
class ApiState:
    settings: Settings
    client: Client
    store: LedgerStore
    watcher: LedgerWatcher
    boundary: Boundary
    artifacts: ArtifactStore


def api_state(request: Request) -> ApiState:
    state: ApiState = request.app.state.turngate
    return state
