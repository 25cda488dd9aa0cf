"""Heartbeats of the activities that call a provider: how Temporal notices a lost worker and
how a cancellation reaches a running call.

The first heartbeat waits ``FIRST_HEARTBEAT_S``: a call that answers sooner (most turns) sends
none, which saves a server round trip per turn. That is safe because the activity's heartbeat
timeout (10 s, ``workflows/turn_execute.py``) counts from the attempt's start whether or not a
heartbeat came, so a worker lost before its first heartbeat is noticed just as soon; what waits is
a cancellation of a call younger than ``FIRST_HEARTBEAT_S``, which then ends on its own first.
A local activity cannot heartbeat (its workflow task keeps the worker's claim): nothing runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from temporalio import activity

#: Seconds before the first heartbeat, well under the heartbeat timeout.
FIRST_HEARTBEAT_S = 1.0
#: Seconds between heartbeats after the first (the SDK throttles further).
HEARTBEAT_EVERY_S = 2.0


async def _beat_forever() -> None:
    await asyncio.sleep(FIRST_HEARTBEAT_S)
    while True:
        activity.heartbeat()
        await asyncio.sleep(HEARTBEAT_EVERY_S)


@contextlib.asynccontextmanager
async def heartbeating() -> AsyncIterator[None]:
    """Heartbeat while the body runs (regular activities only)."""
    if activity.info().is_local:
        yield
        return
    beat = asyncio.create_task(_beat_forever())
    try:
        yield
    finally:
        beat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beat
