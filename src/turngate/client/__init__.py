"""A typed Python client for turngate's native API, sync (:class:`Turngate`) and async
(:class:`AsyncTurngate`), on httpx. See docs/CLIENT.md.

```python
from turngate.client import Turngate

with Turngate("http://127.0.0.1:8010", api_key="...") as tg:
    turn = tg.chat("hello")
    print(turn.output_text, turn.correlation_id)
```
"""

import importlib
from typing import TYPE_CHECKING, Any

from turngate.client import calls

if TYPE_CHECKING:  # imported on first use (__getattr__ below)
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
from turngate.client.turn_headers import decode_header_id, turn_headers

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
    "decode_header_id",
    "intent_envelope",
    "turn_headers",
]

#: The typed answers (pydantic models of the ledger's events) cost most of a `turngate chat`
#: start-up, which passes the API's JSON on as it is: they are imported on first use.
_ANSWERS = frozenset(
    {
        "ArtifactPointer",
        "Event",
        "Job",
        "JobReceipt",
        "SnapshotPage",
        "StreamEvent",
        "TurnReceipt",
        "VerifyReport",
    }
)


def __getattr__(name: str) -> Any:
    if name in _ANSWERS:
        return getattr(importlib.import_module("turngate.client.answers"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
