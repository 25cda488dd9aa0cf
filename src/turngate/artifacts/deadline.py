"""Artifact writes under one overall deadline: bounded attempts, never an open-ended wait.

A turn step that must store artifacts (a manifest, fault snapshots, the prompt snapshot) gets one
:class:`StorageDeadline`. Each store call runs in its own thread and is waited for at most the
time left, so a store that accepts connections and never answers cannot hold the step past its
deadline (the abandoned call ends on its own connect/read timeout). Transient failures
(``ArtifactUnavailableError.retryable``) are retried with backoff while time remains; a permanent
one, or the deadline passing, raises a non-retryable :class:`ArtifactUnavailableError` at once,
and the turn records ``SYSTEM_ERROR`` with the pointers it could not store.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from turngate.artifacts.store import ArtifactStore, ArtifactUnavailableError
from turngate.core.manifest import ArtifactPointer

T = TypeVar("T")

#: The default overall deadline of one step's artifact writes (``TURNGATE_ARTIFACT_DEADLINE_S``).
DEFAULT_ARTIFACT_DEADLINE_S = 15.0
#: The largest deadline a setting may ask for (the turn's storage steps are sized for it).
MAX_ARTIFACT_DEADLINE_S = 60.0
_FIRST_BACKOFF_S = 0.2
_MAX_BACKOFF_S = 2.0


class StorageDeadline:
    """One step's budget for artifact store calls (monotonic clock)."""

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._ends = clock() + seconds
        self.attempts = 0

    def remaining(self) -> float:
        return self._ends - self._clock()

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()`` with retries of transient failures, within the deadline."""
        backoff = _FIRST_BACKOFF_S
        last = ""
        while True:
            left = self.remaining()
            if left <= 0:
                raise self._passed(what, last or "no attempt was made")
            self.attempts += 1
            try:
                return within(fn, left)
            except TimeoutError:
                # an attempt cut off by the deadline says less than the failure before it
                silent = "the store did not answer"
                raise self._passed(what, f"{silent}; before that: {last}" if last else silent) from None
            except ArtifactUnavailableError as exc:
                if not exc.retryable:
                    raise
                last = str(exc)
            time.sleep(max(0.0, min(backoff, self.remaining())))
            backoff = min(backoff * 2, _MAX_BACKOFF_S)

    def check(self, what: str) -> None:
        """Raise if the deadline has passed (before committing work that depended on it)."""
        if self.remaining() <= 0:
            raise self._passed(what, "the writes finished too late")

    def _passed(self, what: str, last: str) -> ArtifactUnavailableError:
        return ArtifactUnavailableError(
            f"{what}: the artifact deadline of {self.seconds:g} s passed after {self.attempts} "
            f"attempt(s); last error: {last}",
            retryable=False,
        )


def within(fn: Callable[[], T], timeout_s: float) -> T:
    """``fn()`` in a daemon thread, waited for at most ``timeout_s`` (``TimeoutError`` past it).
    A blocked socket read cannot be interrupted from outside; its thread is left to end on the
    client's own timeout, and its result is dropped."""
    results: queue.SimpleQueue[tuple[bool, object]] = queue.SimpleQueue()

    def run() -> None:
        try:
            results.put((True, fn()))
        except BaseException as exc:  # handed to the waiting thread, which re-raises it
            results.put((False, exc))

    threading.Thread(target=run, name="artifact-call", daemon=True).start()
    try:
        ok, value = results.get(timeout=timeout_s)
    except queue.Empty:
        raise TimeoutError from None
    if not ok:
        raise value  # type: ignore[misc]
    return value  # type: ignore[return-value]


async def aput_within(store: ArtifactStore, data: bytes, seconds: float, **kw: Any) -> ArtifactPointer:
    """``store.put`` for async callers, retried within ``seconds`` (never on the event loop)."""
    deadline = StorageDeadline(seconds)
    what = str(kw.get("kind", "artifact"))
    return await asyncio.to_thread(deadline.call, what, lambda: store.put(data, **kw))
