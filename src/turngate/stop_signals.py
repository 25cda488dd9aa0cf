"""Ctrl-C for the long-running commands (`turngate dev | serve | worker`).

The first SIGINT or SIGTERM asks for a graceful stop (the API closes, the worker shuts down, the
dev server is stopped in order). A second one ends the process at once. With a grace period, the
graceful stop is also bounded: past it, the process ends as if signalled twice (a stuck
connection or activity thread must not keep a developer's terminal). Python-level handlers run
in the main thread even while it blocks on a join, and the deadline runs on a timer thread, so
neither depends on the event loop being free.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Callable

#: Exit status of a forced stop (as a shell reports a process ended by SIGINT).
FORCED_EXIT = 130


class StopSignals:
    def __init__(
        self,
        stop: asyncio.Event,
        *,
        grace_s: float | None = None,
        on_force: Callable[[], None] = lambda: None,
    ) -> None:
        self._stop = stop
        self._grace_s = grace_s
        self._on_force = on_force
        self._loop: asyncio.AbstractEventLoop | None = None
        self._signalled = False

    def install(self) -> None:
        self._loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, _signum: int, _frame: object) -> None:
        if self._signalled:
            self.force("a second signal")
            return
        self._signalled = True
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        if self._grace_s is not None:
            timer = threading.Timer(
                self._grace_s, self.force, args=(f"not stopped within {self._grace_s:g} s",)
            )
            timer.daemon = True
            timer.start()

    def force(self, why: str) -> None:
        print(f"turngate: {why}: stopping now", file=sys.stderr, flush=True)
        try:
            self._on_force()
        finally:
            os._exit(FORCED_EXIT)
