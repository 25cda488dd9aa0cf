"""A typed Python client for turngate's native API, sync (:class:`Turngate`) and async
(:class:`AsyncTurngate`), on httpx. See docs/CLIENT.md.

```python
from turngate.client import Turngate

with Turngate("http://127.0.0.1:8010", api_key="...") as tg:
    turn = tg.chat("hello")
    print(turn.output_text, turn.correlation_id)
```
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from turngate.client import calls
    from turngate.client.answers import (
        ArtifactPointer,
        Event,
        Job,
        JobReceipt,
        SnapshotPage,
        StreamEvent,
        TurnReceipt,
        VerifyReport,
    )
    from turngate.client.async_client import AsyncTurngate
    from turngate.client.calls import intent_envelope
    from turngate.client.request_errors import TurngateError, Unreachable
    from turngate.client.sync_client import Turngate

#: Where each name lives, imported on first use: `turngate chat` needs the client and its errors,
#: not the typed answers (pydantic models of the ledger's events), which cost most of its start-up.
_HOMES = {
    **dict.fromkeys(
        ("ArtifactPointer", "Event", "Job", "JobReceipt", "SnapshotPage", "StreamEvent", "TurnReceipt"),
        "turngate.client.answers",
    ),
    "VerifyReport": "turngate.client.answers",
    "AsyncTurngate": "turngate.client.async_client",
    "intent_envelope": "turngate.client.calls",
    "TurngateError": "turngate.client.request_errors",
    "Unreachable": "turngate.client.request_errors",
    "Turngate": "turngate.client.sync_client",
}


def __getattr__(name: str) -> Any:
    if name == "calls":
        return importlib.import_module("turngate.client.calls")
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)


__all__ = [
    "ArtifactPointer",
    "AsyncTurngate",
    "Event",
    "Job",
    "JobReceipt",
    "SnapshotPage",
    "StreamEvent",
    "TurnReceipt",
    "Turngate",
    "TurngateError",
    "Unreachable",
    "VerifyReport",
    "calls",
    "intent_envelope",
]
