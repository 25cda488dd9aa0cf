"""Wakes API waiters and /tail subscribers when the ledger changes, without a fixed poll delay.

The worker process writes the ledger; the API learns of new events from the store's cheap change
marker (SQLite: PRAGMA data_version). One background task polls it, and only while somebody is
waiting, every few milliseconds; everyone waiting is woken at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TypeVar

from turngate.ledger import LedgerStore

log = logging.getLogger(__name__)
T = TypeVar("T")


class LedgerWatcher:
    def __init__(self, store: LedgerStore, *, poll_interval_s: float = 0.003) -> None:
        self._store = store
        self._poll = poll_interval_s
        self._changed = asyncio.Condition()
        self._waiters = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.generation = 0  # bumps on every observed change

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="ledger-watcher")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        marker = await asyncio.to_thread(self._store.change_marker)
        while True:
            if self._waiters == 0:
                self._wake.clear()
                await self._wake.wait()
            await asyncio.sleep(self._poll)
            try:
                current = await asyncio.to_thread(self._store.change_marker)
            except Exception:  # a transient ledger error must not kill the watcher
                log.exception("ledger change check failed")
                await asyncio.sleep(0.5)
                continue
            if current != marker:
                marker = current
                await self.notify()

    async def notify(self) -> None:
        async with self._changed:
            self.generation += 1
            self._changed.notify_all()

    async def wait_change(self, generation: int, timeout_s: float) -> int:
        """Wait until the generation moves past ``generation`` (or timeout); return the new one."""
        self._waiters += 1
        self._wake.set()
        try:
            async with self._changed:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._changed.wait_for(lambda: self.generation != generation), timeout_s
                    )
                return self.generation
        finally:
            self._waiters -= 1

    async def wait_for(self, check: Callable[[], T | None], timeout_s: float) -> T | None:
        """Run the (sync, cheap) ``check`` in a thread until it returns something or time is up."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            generation = self.generation
            found = await asyncio.to_thread(check)
            if found is not None:
                return found
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            await self.wait_change(generation, remaining)
