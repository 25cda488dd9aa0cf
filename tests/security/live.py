"""A running stack (worker + API) on a thread of its own, for synchronous callers such as
schemathesis and hypothesis, which make blocking HTTP calls."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from tests.stack import running_stack
from turngate.settings import Settings

START_TIMEOUT_S = 60


@contextlib.contextmanager
def live_stack(settings: Settings) -> Iterator[str]:
    """Yields the API's base URL while the stack runs; stops it on exit."""
    ready = threading.Event()
    held: dict[str, object] = {}

    async def serve() -> None:
        async with running_stack(settings):
            stop = asyncio.Event()
            held["loop"], held["stop"] = asyncio.get_running_loop(), stop
            ready.set()
            await stop.wait()

    def run() -> None:
        try:
            asyncio.run(serve())
        except BaseException as exc:  # surfaced to the caller below
            held["error"] = exc
            ready.set()

    thread = threading.Thread(target=run, name="live-stack", daemon=True)
    thread.start()
    if not ready.wait(START_TIMEOUT_S) or "error" in held:
        raise RuntimeError(f"the stack did not start: {held.get('error')!r}")
    try:
        yield f"http://{settings.host}:{settings.port}"
    finally:
        loop: asyncio.AbstractEventLoop = held["loop"]  # type: ignore[assignment]
        stop: asyncio.Event = held["stop"]  # type: ignore[assignment]
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
